"""XPUTUNE_HICACHE_KERNELS: the host pools' copies run on xputune's kernels, in every layout.

MLATokenToKVPoolHost and MHATokenToKVPoolHost (0.5.20 through 0.5.23) call their copy
operators as module globals, imported from sgl_kernel.kvcacheio only when torch reports CUDA or
HIP (and, from 0.5.23, from pool_host/_kvcacheio on Intel XPU). Which ones depends on
--hicache-mem-layout and --hicache-io-backend (SERVED below):
  layer_first       kernel  transfer_kv_per_layer[_mla] (H2D, one layer), _all_layer[_mla] (D2H)
  page_first        kernel  transfer_kv_per_layer[_mla]_pf_lf, transfer_kv_all_layer[_mla]_lf_pf
  layer_first       direct  transfer_kv_direct (both ways)
  page_first_direct direct  transfer_kv_per_layer_direct_pf_lf, transfer_kv_all_layer_direct_lf_pf
An L3 store rewrites the layout: mooncake turns layer_first into page_first (io kernel) or
page_first_direct (io direct). On Kunlunxin (torch poses as CUDA, but sgl_kernel is CUDA-only)
and on plain CPU those globals are missing (the first copy would stop the server with a
NameError) or wrong, so the plugin sets every one of them in both modules to xputune.kernels'
operators, which keep SGLang's names, arguments and semantics and count their calls
(stats: kernel_<name>). The pools' JIT kernels would bypass the globals, so they are switched
off after construction: the one-layer/all-layer kernels (can_use_jit) for layer_first and
page_first pools, and page_first's staged write-back (can_use_write_back_jit, whose device
staging buffers are dropped). Combinations not in SERVED (page_head, the Ascend layouts) keep
SGLang's own operators; the startup check (live.py) refuses them where those are missing,
instead of letting the first copy crash.

From 0.5.23 the release declares, per io backend and layout, which operators an MLA host pool
calls (pool_host/_kvcacheio.MLA_KVCACHEIO_OPS, and a class-level `_kvcacheio_ops` table on
Intel XPU). That table is declarative: it names the operators and checks them at pool
construction on Intel XPU only; on CPU and on CUDA (where Kunlunxin's torch poses) nothing in
it binds the globals the copies call. So the globals are still set here, and where a pool's
release declares its table, that table decides which operators the pool needs
(operators_for): a layout a later release adds to it, that xputune does not implement, is then
refused at startup instead of assumed served.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from xputune.sglang import stats
from xputune.sglang.config import PluginConfig
from xputune.sglang.hooks import Hooks
from xputune.sglang.targets import (
    KVCACHEIO_OPS,
    POOL_MHA,
    POOL_MHA_MODULE,
    POOL_MLA,
    POOL_MLA_MODULE,
    Shape,
    Target,
    resolve,
)

NAME = "kernels"
_DIRECT_PF = ("transfer_kv_per_layer_direct_pf_lf", "transfer_kv_all_layer_direct_lf_pf")
_MLA_PF = ("transfer_kv_per_layer_mla_pf_lf", "transfer_kv_all_layer_mla_lf_pf")
# (layout, io backend) -> {pool module kind: the operator globals its pools call there}. The
# MHA module's page_first entry includes the MLA forms: its K/V-asymmetric pool and its K-only
# pool call those.
SERVED: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {
    ("layer_first", "kernel"): {
        "mla": ("transfer_kv_per_layer_mla", "transfer_kv_all_layer_mla"),
        "mha": ("transfer_kv_per_layer", "transfer_kv_all_layer"),
    },
    ("page_first", "kernel"): {
        "mla": _MLA_PF,
        "mha": ("transfer_kv_per_layer_pf_lf", "transfer_kv_all_layer_lf_pf", *_MLA_PF),
    },
    ("layer_first", "direct"): {"mla": ("transfer_kv_direct",), "mha": ("transfer_kv_direct",)},
    ("page_first_direct", "direct"): {"mla": _DIRECT_PF, "mha": _DIRECT_PF},
}
SERVED_TEXT = (
    "layer_first and page_first with --hicache-io-backend kernel, layer_first and "
    "page_first_direct with --hicache-io-backend direct"
)


def _all(kind: str) -> tuple[str, ...]:
    """Every operator global the plugin sets in one pool module, each once."""
    return tuple(dict.fromkeys(op for ops in SERVED.values() for op in ops[kind]))


MLA_OPERATORS = _all("mla")
MHA_OPERATORS = _all("mha")
OPERATORS = MLA_OPERATORS  # kept for callers of the MLA-only plugin
OURS_ATTR = "__xputune_kernel__"
REPLACED_ATTR = "__xputune_replaced__"
_JIT_LAYOUTS = ("layer_first", "page_first")

_LOAD = ("self", "device_pool", "host_indices", "device_indices", "layer_id", "io_backend",
         "is_draft")  # fmt: skip
_BACKUP = ("self", "device_pool", "host_indices", "device_indices", "io_backend")
# The globals each copy method must still read (one per served layout and io backend).
_MLA_LOADS = ("transfer_kv_per_layer_mla", "transfer_kv_per_layer_mla_pf_lf",
              "transfer_kv_direct", "transfer_kv_per_layer_direct_pf_lf")  # fmt: skip
_MLA_BACKUPS = ("transfer_kv_all_layer_mla", "transfer_kv_all_layer_mla_lf_pf",
                "transfer_kv_direct", "transfer_kv_all_layer_direct_lf_pf")  # fmt: skip
_MHA_LOADS = ("transfer_kv_per_layer", "transfer_kv_per_layer_pf_lf", "transfer_kv_direct",
              "transfer_kv_per_layer_direct_pf_lf")  # fmt: skip
_MHA_BACKUPS = ("transfer_kv_all_layer", "transfer_kv_all_layer_lf_pf", "transfer_kv_direct",
                "transfer_kv_all_layer_direct_lf_pf")  # fmt: skip

# __init__ is hooked after the fact (its parameters, which 0.5.23 changed from device_pool to
# buffer_info, do not matter); what does is that the copies still read can_use_jit.
TARGETS = (
    Target(POOL_MLA + ".__init__"),
    Target(POOL_MLA + ".load_to_device_per_layer", _LOAD, reads=(*_MLA_LOADS, "can_use_jit")),
    Target(
        POOL_MLA + ".backup_from_device_all_layer", _BACKUP, reads=(*_MLA_BACKUPS, "can_use_jit")
    ),
    Target(POOL_MHA + ".__init__"),
    Target(POOL_MHA + ".load_to_device_per_layer", _LOAD, reads=(*_MHA_LOADS, "can_use_jit")),
    Target(
        POOL_MHA + ".backup_from_device_all_layer", _BACKUP, reads=(*_MHA_BACKUPS, "can_use_jit")
    ),
    *(Target("xputune.kernels.ops." + n) for n in dict.fromkeys(MLA_OPERATORS + MHA_OPERATORS)),
)


def counted(name: str, fn: Callable[..., Any], replaced: Any = None) -> Callable[..., Any]:
    """xputune's operator, counting its calls (stats: kernel_<name>); `replaced` is the global
    it stands in for (SGLang's own operator, or None where sgl_kernel is not importable)."""

    @functools.wraps(fn)
    def op(*args: Any, **kwargs: Any) -> Any:
        stats.add("kernel_" + name)
        return fn(*args, **kwargs)

    setattr(op, OURS_ATTR, True)
    setattr(op, REPLACED_ATTR, replaced)
    return op


def is_ours(fn: Any) -> bool:
    return bool(getattr(fn, OURS_ATTR, False))


def stock_operator(module: Any, name: str) -> Any:
    """SGLang's own operator `name` in a pool module (the one ours replaced), or None."""
    found = getattr(module, name, None)
    return getattr(found, REPLACED_ATTR, None) if is_ours(found) else found


def layer_sharded(pool: Any) -> bool:
    """Whether the pool's device layers are sharded over ranks (its per-layer backup path)."""
    return bool(getattr(getattr(pool, "device_pool", None), "layer_shard_enabled", False))


def _after_init(result: Any, pool: Any, *args: Any, **kwargs: Any) -> None:
    layout = getattr(pool, "layout", None)
    if layout not in _JIT_LAYOUTS or getattr(pool, "_is_dummy", False):
        return
    pool.can_use_jit = False  # the JIT kernels would not go through the replaced globals
    if layout == "page_first":
        # The staged write-back JIT (lf -> staging on the device -> pf) bypasses them too; its
        # staging buffers hold device memory for nothing once it is off.
        pool.can_use_write_back_jit = False
        for attr in ("staging_buffer", "staging_k_buffer", "staging_v_buffer"):
            if hasattr(pool, attr):
                setattr(pool, attr, None)
        pool.staging_page_capacity = pool.staging_token_capacity = 0


def module_kind(pool: Any) -> str:
    return "mha" if "mha" in type(pool).__module__.rsplit(".", 1)[-1] else "mla"


def declared_operators(pool: Any) -> Any:
    """The release's own {io backend: {layout: operators}} table for this pool, or None.

    A class-level `_kvcacheio_ops` first (0.5.23+ on Intel XPU), then, for an MLA pool, the
    release's MLA table (0.5.23+, every device); earlier releases have neither.
    """
    table = getattr(type(pool), "_kvcacheio_ops", None)
    if table is None and module_kind(pool) == "mla":
        try:
            table = resolve(KVCACHEIO_OPS)
        except (ImportError, AttributeError):
            table = None
    return table


def operators_for(
    pool: Any, layout: str | None = None, io_backend: str = "kernel"
) -> tuple[str, ...]:
    """The operator globals a host pool of this class calls for layout (default: its own) and
    io backend; () for a combination the plugin does not serve.

    Where the release declares its table, its entry decides, and a combination is served only
    when xputune implements every operator the release lists for it.
    """
    layout = layout or getattr(pool, "layout", "")
    kind = module_kind(pool)
    served = SERVED.get((layout, io_backend))
    declared = declared_operators(pool)
    if declared is not None:
        needed = tuple(declared.get(io_backend, {}).get(layout, ()))
        implemented = MLA_OPERATORS if kind == "mla" else MHA_OPERATORS
        return needed if needed and all(op in implemented for op in needed) else ()
    return served[kind] if served else ()


def install(hooks: Hooks, cfg: PluginConfig) -> None:
    for module_path, names in ((POOL_MLA_MODULE, MLA_OPERATORS), (POOL_MHA_MODULE, MHA_OPERATORS)):
        module = resolve(module_path)
        for name in names:
            op = counted(name, resolve("xputune.kernels.ops." + name), stock_operator(module, name))
            hooks.set_global(module, name, op)
    hooks.after(POOL_MLA + ".__init__", _after_init)
    hooks.after(POOL_MHA + ".__init__", _after_init)


SHAPES = (Shape("0.5.20", TARGETS, install),)
