"""XPUTUNE_HICACHE_KERNELS: the host pools' layer_first copies run on xputune's kernels.

MLATokenToKVPoolHost and MHATokenToKVPoolHost 0.5.20 call their layer_first copy operators as
module globals, imported from sgl_kernel.kvcacheio only when torch reports CUDA or HIP:
  MLA  transfer_kv_per_layer_mla (H2D, one layer), transfer_kv_all_layer_mla (D2H, all layers)
  MHA  transfer_kv_per_layer (H2D, one layer, K and V), transfer_kv_all_layer (D2H, all layers)
On Kunlunxin (torch poses as CUDA, but sgl_kernel is CUDA-only) and on plain CPU those are
missing (an MHA server would die at its first backup with a NameError) or wrong, so the plugin
sets all four globals to xputune.kernels' operators, which keep SGLang's names, arguments and
semantics. The pools' JIT path would bypass the globals, so it is switched off for layer_first
pools after construction. Used with --hicache-io-backend kernel and --hicache-mem-layout
layer_first (the launcher sets both); for any other layout or backend the startup check
refuses when the pool's own operators are missing, instead of crashing at the first copy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from xputune.sglang import stats
from xputune.sglang.config import PluginConfig
from xputune.sglang.hooks import Hooks
from xputune.sglang.targets import (
    POOL_MHA,
    POOL_MHA_MODULE,
    POOL_MLA,
    POOL_MLA_MODULE,
    Target,
    resolve,
)

NAME = "kernels"
MLA_OPERATORS = ("transfer_kv_per_layer_mla", "transfer_kv_all_layer_mla")
MHA_OPERATORS = ("transfer_kv_per_layer", "transfer_kv_all_layer")
OPERATORS = MLA_OPERATORS  # kept for callers of the MLA-only plugin
OURS_ATTR = "__xputune_kernel__"

_LOAD = ("self", "device_pool", "host_indices", "device_indices", "layer_id", "io_backend",
         "is_draft")  # fmt: skip
_BACKUP = ("self", "device_pool", "host_indices", "device_indices", "io_backend")
_MLA_INIT = (
    "self", "device_pool", "host_to_device_ratio", "host_size", "page_size", "layout",
    "pin_memory", "device", "allocator_type", "override_kv_cache_dim", "mtp_draft_device_pools",
    "dcp_size", "dcp_rank", "pool_label", "is_dummy",
)  # fmt: skip
_MHA_INIT = (
    "self", "device_pool", "host_to_device_ratio", "host_size", "page_size", "layout",
    "pin_memory", "device", "allocator_type", "mtp_draft_device_pools", "pool_label",
)  # fmt: skip

TARGETS = (
    Target(POOL_MLA + ".__init__", _MLA_INIT),
    Target(POOL_MLA + ".load_to_device_per_layer", _LOAD, reads=("transfer_kv_per_layer_mla",)),
    Target(
        POOL_MLA + ".backup_from_device_all_layer", _BACKUP, reads=("transfer_kv_all_layer_mla",)
    ),
    Target(POOL_MHA + ".__init__", _MHA_INIT),
    Target(POOL_MHA + ".load_to_device_per_layer", _LOAD, reads=("transfer_kv_per_layer",)),
    Target(POOL_MHA + ".backup_from_device_all_layer", _BACKUP, reads=("transfer_kv_all_layer",)),
    *(Target("xputune.kernels.ops." + name) for name in MLA_OPERATORS + MHA_OPERATORS),
)


def counted(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """xputune's operator, counting its calls (stats: kernel_<name>)."""

    @functools.wraps(fn)
    def op(*args: Any, **kwargs: Any) -> Any:
        stats.add("kernel_" + name)
        return fn(*args, **kwargs)

    setattr(op, OURS_ATTR, True)
    return op


def is_ours(fn: Any) -> bool:
    return bool(getattr(fn, OURS_ATTR, False))


def _after_init(result: Any, pool: Any, *args: Any, **kwargs: Any) -> None:
    if getattr(pool, "layout", None) == "layer_first" and not getattr(pool, "_is_dummy", False):
        pool.can_use_jit = False  # the JIT kernels would not go through the replaced globals


def operators_for(pool: Any) -> tuple[str, ...]:
    """The layer_first operator globals a host pool of this class calls."""
    return MHA_OPERATORS if "mha" in type(pool).__module__.rsplit(".", 1)[-1] else MLA_OPERATORS


def install(hooks: Hooks, cfg: PluginConfig) -> None:
    for module_path, names in ((POOL_MLA_MODULE, MLA_OPERATORS), (POOL_MHA_MODULE, MHA_OPERATORS)):
        module = resolve(module_path)
        for name in names:
            hooks.set_global(module, name, counted(name, resolve("xputune.kernels.ops." + name)))
    hooks.after(POOL_MLA + ".__init__", _after_init)
    hooks.after(POOL_MHA + ".__init__", _after_init)
