"""Startup proof in the running server: each switched-on feature acts on the cache it builds.

Hooks are registered on classes when the plugin loads, before SGLang has chosen its cache. A
0.5.20 server builds UnifiedRadixCache (with HiCache attached by init_hicache); older builds use
HiRadixCache; SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=rust swaps the Python tree core, where the
hit counting lives, for a compiled one no Python hook can reach. So once the cache exists (after
UnifiedRadixCache.init_hicache, or HiRadixCache.__init__) this module checks, on the instance
itself, that every hook a feature needs is the one its methods resolve to, that the host pool
got the LIFO allocator, xputune's buffer and copy operators, and then logs one INFO line (SGLang
has configured logging by then; at plugin load it has not, and the line would be dropped):

  xputune cache plugin on sglang 0.5.20: lifo, count_once, ... on; hooked UnifiedRadixCache,
  UnifiedTreeCore, MLATokenToKVPoolHost, L2TransferEngine

On a CPU server whose host pool cannot allocate its L3 staging page (cpu_pages.py), the pool is
unpinned and the line ends with "; worked around: cpu_unpinned_pages (<pool class>)".

A feature that cannot act there is one refusal line, and the server stops (or, with
XPUTUNE_HICACHE_ON_MISMATCH=warn, serves with that feature named as not acting).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from xputune.sglang import (
    async_hooks,
    count_once,
    cpu_pages,
    ghost_hooks,
    hostalloc_hooks,
    kernel_hooks,
    lifo_hooks,
    stats,
)
from xputune.sglang.config import PluginConfig
from xputune.sglang.targets import HIRADIX, L2_ENGINE, TREE_CORE, UNIFIED, PluginRefused, resolve

log = logging.getLogger("xputune.sglang")

STOCK_PROBE = "transfer_kv_direct"  # imported from sgl_kernel.kvcacheio by both host pool modules
TARGET_PATHS = (UNIFIED + ".init_hicache", HIRADIX + ".__init__")

_settings: dict[str, Any] = {"cfg": PluginConfig(), "version": "?"}
_confirmed: set[int] = set()


def _is_hooked(owner: type, name: str, path: str) -> bool:
    """The method `owner` resolves to is the registry's wrapper of `path`, not an override."""
    found = getattr(owner, name, None)
    return found is not None and found is resolve(path) and hasattr(found, "__wrapped__")


def _cache_kind(cache: Any) -> str:
    return "UnifiedRadixCache" if isinstance(cache, resolve(UNIFIED)) else "HiRadixCache"


def _io_backend(cache: Any) -> str | None:
    return getattr(getattr(cache, "cache_controller", None), "io_backend", None)


def host_pool_of(cache: Any) -> Any:
    """The KV host pool (the unified cache holds a HostPoolGroup; its anchor entry is KV)."""
    pool = getattr(getattr(cache, "cache_controller", None), "mem_pool_host", None)
    anchor = getattr(pool, "anchor_entry", None)
    return getattr(anchor, "host_pool", pool)


def check_cache(cache: Any, features: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(problems, hooked class names) for `features` acting on this cache instance."""
    problems: list[str] = []
    hooked: list[str] = [type(cache).__name__]
    kind = _cache_kind(cache)
    core = getattr(cache, "tree_core", None)
    for name, module in (("count_once", count_once), ("ghost", ghost_hooks)):
        if name not in features:
            continue
        for path in module.LIVE[kind]:
            owner = core if path.startswith(TREE_CORE) else cache
            if owner is None or not _is_hooked(type(owner), path.rsplit(".", 1)[1], path):
                problems.append(
                    f"{name}: {type(owner).__name__}.{path.rsplit('.', 1)[1]} is not hooked in "
                    f"this server's cache ({type(cache).__name__}"
                    + (f" with tree core {type(core).__name__}" if core is not None else "")
                    + "; SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND must be python)"
                )
                break
    if core is not None and ("count_once" in features or "ghost" in features):
        hooked.append(type(core).__name__)
    pool = host_pool_of(cache)
    if pool is not None and any(f in features for f in ("lifo", "kernels", "host_alloc", "stats")):
        hooked.append(type(pool).__name__)
    if pool is not None:
        problems += _check_pool(pool, features, _io_backend(cache))
    if "async" in features:
        if not _is_hooked(resolve(L2_ENGINE), "submit_device_to_host",
                          L2_ENGINE + ".submit_device_to_host"):  # fmt: skip
            problems.append("async: L2TransferEngine.submit_device_to_host is not hooked")
        else:
            hooked.append("L2TransferEngine")
    return problems, hooked


def _check_pool(pool: Any, features: tuple[str, ...], io_backend: str | None) -> list[str]:
    problems = []
    name = type(pool).__name__
    if "lifo" in features and lifo_hooks.allocator_of(pool) is None:
        problems.append(f"lifo: {name} has no LIFO allocator (HostKVCache.clear not hooked)")
    if "host_alloc" in features and not pool.__dict__.get(hostalloc_hooks.BUFFER_ATTR):
        problems.append(f"host_alloc: {name}'s KV buffer was not allocated by xputune")
    module = sys.modules.get(type(pool).__module__)
    layout = getattr(pool, "layout", None)
    served = kernel_hooks.operators_for(pool, layout, io_backend or "")
    if "kernels" in features and served:
        for op in served:
            if not kernel_hooks.is_ours(getattr(module, op, None)):
                problems.append(f"kernels: {type(pool).__module__}.{op} is not xputune's")
        if layout != "layer_first" and kernel_hooks.layer_sharded(pool):
            problems.append(
                f"kernels: {name} shards its device layers over ranks and backs them up layer "
                f"by layer, which SGLang does without its JIT kernels for layer_first only, not "
                f"for --hicache-mem-layout {layout}"
            )
    elif (
        module is not None
        and io_backend != "kernel_ascend"
        and kernel_hooks.stock_operator(module, STOCK_PROBE) is None
    ):
        # SGLang imports its own copy operators only with CUDA/HIP: without them, the first
        # backup would stop the server with a NameError.
        problems.append(
            f"copies: {name} has no copy operators here for --hicache-mem-layout {layout} "
            f"--hicache-io-backend {io_backend} (sgl_kernel.kvcacheio is CUDA/HIP-only); "
            f"xputune's kernels feature serves {kernel_hooks.SERVED_TEXT}"
        )
    return problems


def confirm(cache: Any) -> None:
    """Check the features on this cache, log the startup line, start the stats file."""
    if id(cache) in _confirmed:
        return
    _confirmed.add(id(cache))
    cfg: PluginConfig = _settings["cfg"]
    features = cfg.features()
    problems, hooked = check_cache(cache, features)
    acting = tuple(f for f in features if not any(p.startswith(f + ":") for p in problems))
    if problems:
        line = f"xputune cache plugin refused: {problems[0]}"
        log.error(line)
        if cfg.on_mismatch != "warn":
            raise PluginRefused(problems[0])
    version = _settings["version"]
    controller = getattr(cache, "cache_controller", None)
    pools = [host_pool_of(cache), getattr(controller, "storage_host_pool", None)]
    unpinned = cpu_pages.unpin(list({id(p): p for p in pools if p is not None}.values()))
    workarounds = [f"{cpu_pages.NAME} ({', '.join(unpinned)})"] if unpinned else []
    stats.set_info(
        sglang=version, features=list(acting), hooked=hooked, cache=type(cache).__name__,
        problems=problems, workarounds=workarounds,
    )  # fmt: skip
    _add_sources(cache)
    log.info(
        "xputune cache plugin on sglang %s: %s on; hooked %s%s",
        version, ", ".join(acting) or "nothing", ", ".join(dict.fromkeys(hooked)),
        f"; worked around: {', '.join(workarounds)}" if workarounds else "",
    )  # fmt: skip
    if cfg.stats_dir:
        stats.start_writer(cfg.stats_dir)


def _add_sources(cache: Any) -> None:
    def source() -> dict[str, int]:
        out: dict[str, int] = {}
        gate = cache.__dict__.get(count_once.GATE_ATTR)
        if gate is not None:
            out["count_once_suppressed"] = gate.suppressed
            out["count_once_live_requests"] = gate.live_requests
        ghost = cache.__dict__.get(ghost_hooks.ATTR)
        if ghost is not None:
            for key, value in cache.__dict__.get(ghost_hooks.STATS_ATTR, {}).items():
                out["ghost_" + key] = value
            out["ghost_lookups"] = ghost.lookups
            out["ghost_hits"] = ghost.hits
            out["ghost_entries"] = len(ghost)
        return out

    stats.add_source(source)


def _after_init_hicache(result: Any, cache: Any, *args: Any, **kwargs: Any) -> None:
    confirm(cache)


def _after_hiradix_init(result: Any, cache: Any, *args: Any, **kwargs: Any) -> None:
    confirm(cache)


def install(hooks: Any, cfg: PluginConfig, version: str) -> None:
    _settings["cfg"] = cfg
    _settings["version"] = version
    _confirmed.clear()
    hooks.after(UNIFIED + ".init_hicache", _after_init_hicache)
    hooks.after(HIRADIX + ".__init__", _after_hiradix_init)


__all__ = ["async_hooks", "check_cache", "confirm", "install"]
