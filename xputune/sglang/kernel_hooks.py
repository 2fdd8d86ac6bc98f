"""XPUTUNE_HICACHE_KERNELS: the MLA host pool's layer_first copies run on xputune's kernels.

MLATokenToKVPoolHost 0.5.20 calls transfer_kv_per_layer_mla (H2D, one layer) and
transfer_kv_all_layer_mla (D2H, all layers) as module globals, imported from
sgl_kernel.kvcacheio only when torch reports CUDA or HIP. On Kunlunxin (torch poses as CUDA,
but sgl_kernel is CUDA-only) and on plain CPU those are missing or wrong, so the plugin sets
both globals to xputune.kernels' operators, which keep SGLang's names, arguments and
semantics. The pool's JIT path would bypass the globals, so it is switched off for
layer_first pools after construction. Used with --hicache-io-backend kernel and
--hicache-mem-layout layer_first (the launcher sets both); other layouts keep SGLang's paths.
"""

from __future__ import annotations

from typing import Any

from xputune.sglang.config import PluginConfig
from xputune.sglang.hooks import Hooks
from xputune.sglang.targets import POOL_MLA, POOL_MLA_MODULE, Target, resolve

NAME = "kernels"
OPERATORS = ("transfer_kv_per_layer_mla", "transfer_kv_all_layer_mla")

TARGETS = (
    Target(
        POOL_MLA + ".__init__",
        (
            "self",
            "device_pool",
            "host_to_device_ratio",
            "host_size",
            "page_size",
            "layout",
            "pin_memory",
            "device",
            "allocator_type",
            "override_kv_cache_dim",
            "mtp_draft_device_pools",
            "dcp_size",
            "dcp_rank",
            "pool_label",
            "is_dummy",
        ),
    ),
    Target(
        POOL_MLA + ".load_to_device_per_layer",
        (
            "self",
            "device_pool",
            "host_indices",
            "device_indices",
            "layer_id",
            "io_backend",
            "is_draft",
        ),
        reads=("transfer_kv_per_layer_mla",),
    ),
    Target(
        POOL_MLA + ".backup_from_device_all_layer",
        ("self", "device_pool", "host_indices", "device_indices", "io_backend"),
        reads=("transfer_kv_all_layer_mla",),
    ),
    Target("xputune.kernels.ops.transfer_kv_per_layer_mla"),
    Target("xputune.kernels.ops.transfer_kv_all_layer_mla"),
)


def _after_init(result: Any, pool: Any, *args: Any, **kwargs: Any) -> None:
    if getattr(pool, "layout", None) == "layer_first" and not getattr(pool, "_is_dummy", False):
        pool.can_use_jit = False  # the JIT kernels would not go through the replaced globals


def install(hooks: Hooks, cfg: PluginConfig) -> None:
    module = resolve(POOL_MLA_MODULE)
    for name in OPERATORS:
        hooks.set_global(module, name, resolve("xputune.kernels.ops." + name))
    hooks.after(POOL_MLA + ".__init__", _after_init)
