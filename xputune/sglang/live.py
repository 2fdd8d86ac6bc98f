"""Startup proof in the running server: each switched-on feature acts on the cache it builds.

Hooks are registered on classes when the plugin loads, before SGLang has chosen its cache.
Every supported server builds UnifiedRadixCache with HiCache attached by init_hicache; its
tree walks (hit counting, splits) run in the tree core the release selects (0.5.20: the Python
UnifiedTreeCore; 0.5.21+: a Rust core by default, which no Python hook reaches). So once the
cache exists (after UnifiedRadixCache.init_hicache) this module checks, on the instance
itself, that every hook a feature needs is the one its methods resolve to, that the host pool
got the LIFO allocator, xputune's buffer and copy operators, and then logs one INFO line
(SGLang has configured logging by then; at plugin load it has not, and the line would be
dropped):

  xputune cache plugin on sglang 0.5.23: lifo, ghost, kernels, async, host_alloc, stats on;
  count_once built in; hooked UnifiedRadixCache, UnifiedTreeCore, MLATokenToKVPoolHost,
  L2TransferEngine

A release outside the tested range adds "(untested: ...)" after its number; a feature no shape
of it fits adds "; off: <feature> (<the target that moved>)". On a CPU server whose host pool
cannot allocate its L3 staging page (cpu_pages.py), the pool is unpinned and the line ends
with "; worked around: cpu_unpinned_pages (<pool class>)".

Each feature that is off (no shape of it fits this release, or it is hooked but cannot act on
this cache) also gets one WARNING line, "xputune cache plugin: <feature> off: <why>"
(XPUTUNE_HICACHE_ON_MISMATCH=exit: the server stops instead). A server that could not serve at
all (no copy operators for its layout on this device) stops with one refusal line.
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
from xputune.sglang.targets import (
    L2_ENGINE,
    TREE_CORE,
    TREE_CORE_ENV,
    UNIFIED,
    Choice,
    PluginRefused,
    Target,
    release_note,
    resolve,
)

log = logging.getLogger("xputune.sglang")

STOCK_PROBE = "transfer_kv_direct"  # imported from sgl_kernel.kvcacheio by both host pool modules
TARGETS = (Target(UNIFIED + ".init_hicache", ("self", "server_args", "params")),)
# Problems that mean the server cannot serve at all, whatever the mismatch policy.
FATAL = ("copies",)

_settings: dict[str, Any] = {"cfg": PluginConfig(), "version": "?", "choices": ()}
_confirmed: set[int] = set()


def _is_hooked(owner: type, name: str, path: str) -> bool:
    """The method `owner` resolves to is the registry's wrapper of `path`, not an override."""
    found = getattr(owner, name, None)
    return found is not None and found is resolve(path) and hasattr(found, "__wrapped__")


def _io_backend(cache: Any) -> str | None:
    return getattr(getattr(cache, "cache_controller", None), "io_backend", None)


def host_pool_of(cache: Any) -> Any:
    """The KV host pool (the unified cache holds a HostPoolGroup; its anchor entry is KV)."""
    pool = getattr(getattr(cache, "cache_controller", None), "mem_pool_host", None)
    anchor = getattr(pool, "anchor_entry", None)
    return getattr(anchor, "host_pool", pool)


def check_cache(cache: Any, features: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(problems, hooked class names) for `features` acting on this cache instance.

    `features` are the ones whose hooks were installed (built-in ones hook nothing).
    """
    problems: list[str] = []
    hooked: list[str] = [type(cache).__name__]
    core = getattr(cache, "tree_core", None)
    core_name = type(core).__name__
    for name, paths in (("count_once", count_once.LIVE), ("ghost", ghost_hooks.LIVE)):
        if name not in features:
            continue
        if core is None or not isinstance(core, resolve(TREE_CORE)):
            problems.append(
                f"{name}: this server's cache walks its tree in {core_name}, which no Python "
                f"hook reaches; {TREE_CORE_ENV}=python selects the core the feature hooks "
                "(xputune launch sglang sets it)"
            )
            continue
        for path in paths:
            owner = core if path.startswith(TREE_CORE) else cache
            if not _is_hooked(type(owner), path.rsplit(".", 1)[1], path):
                problems.append(
                    f"{name}: {type(owner).__name__}.{path.rsplit('.', 1)[1]} is not hooked in "
                    f"this server's cache ({type(cache).__name__} with tree core {core_name})"
                )
                break
    if core is not None and ("count_once" in features or "ghost" in features):
        hooked.append(core_name)
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
    choices: tuple[Choice, ...] = _settings["choices"]
    installed = tuple(c.feature for c in choices if c.on)
    problems, hooked = check_cache(cache, installed)
    fatal = [p for p in problems if p.split(":", 1)[0] in FATAL]
    if fatal or (problems and cfg.on_mismatch == "exit"):
        first = (fatal or problems)[0]
        log.error("xputune cache plugin refused: %s", first)
        raise PluginRefused(first)
    not_acting = [_feature_and_reason(p) for p in problems]
    acting = tuple(f for f in installed if f not in dict(not_acting))
    builtin = tuple(c.feature for c in choices if c.builtin)
    off = [(c.feature, c.problem) for c in choices if c.shape is None] + not_acting
    for name, why in off:
        log.warning("xputune cache plugin: %s off: %s", name, why)
    version = _settings["version"]
    controller = getattr(cache, "cache_controller", None)
    pools = [host_pool_of(cache), getattr(controller, "storage_host_pool", None)]
    unpinned = cpu_pages.unpin(list({id(p): p for p in pools if p is not None}.values()))
    workarounds = [f"{cpu_pages.NAME} ({', '.join(unpinned)})"] if unpinned else []
    stats.set_info(
        sglang=version, features=list(acting), builtin=list(builtin),
        off={name: why for name, why in off}, hooked=hooked, cache=type(cache).__name__,
        tree_core=type(getattr(cache, "tree_core", None)).__name__, problems=problems,
        workarounds=workarounds,
    )  # fmt: skip
    _add_sources(cache)
    log.info("%s", startup_line(version, acting, builtin, off, hooked, workarounds))
    if cfg.stats_dir:
        stats.start_writer(cfg.stats_dir)


def _feature_and_reason(problem: str) -> tuple[str, str]:
    name, _, why = problem.partition(": ")
    return name, why


def startup_line(
    version: str,
    acting: tuple[str, ...],
    builtin: tuple[str, ...],
    off: list[tuple[str, str]],
    hooked: list[str],
    workarounds: list[str],
) -> str:
    """The one INFO line that says what the plugin does in this server."""
    parts = [f"{', '.join(acting) or 'nothing'} on"]
    if builtin:
        parts.append(f"{', '.join(builtin)} built into sglang {version}")
    if off:
        parts.append("off: " + ", ".join(f"{name} ({why})" for name, why in off))
    parts.append(f"hooked {', '.join(dict.fromkeys(hooked))}")
    if workarounds:
        parts.append(f"worked around: {', '.join(workarounds)}")
    return f"xputune cache plugin on sglang {version}{release_note(version)}: " + "; ".join(parts)


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


def install(hooks: Any, cfg: PluginConfig, version: str, choices: list[Choice]) -> None:
    _settings["cfg"] = cfg
    _settings["version"] = version
    _settings["choices"] = tuple(choices)
    _confirmed.clear()
    hooks.after(UNIFIED + ".init_hicache", _after_init_hicache)


__all__ = ["async_hooks", "check_cache", "confirm", "install"]
