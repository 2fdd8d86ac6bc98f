"""What the plugin hooks in SGLang, and the load-time proof that each target is still there.

A hook on a method that moved, was renamed or changed its parameters does not fail loudly: the
hook registry logs and skips it, or the wrapper passes arguments to the wrong names, and the
server runs without the feature the launcher asked for. So before registering anything the
plugin checks the SGLang version and, for every target of every switched-on feature, that it
resolves, is callable, has exactly the parameter names this plugin was written against, and
(for module globals the plugin replaces) still reads those globals. Any mismatch is one
PluginRefused line naming the target.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from xputune.errors import XputuneError

SUPPORTED_SGLANG = ("0.5.20",)

POOL_BASE = "sglang.srt.mem_cache.pool_host.base.HostKVCache"
POOL_MLA_MODULE = "sglang.srt.mem_cache.pool_host.mla"
POOL_MLA = POOL_MLA_MODULE + ".MLATokenToKVPoolHost"
POOL_COMMON = "sglang.srt.mem_cache.pool_host.common"
POOL_MHA_MODULE = "sglang.srt.mem_cache.pool_host.mha"
POOL_MHA = POOL_MHA_MODULE + ".MHATokenToKVPoolHost"
HIRADIX = "sglang.srt.mem_cache.hiradix_cache.HiRadixCache"
# What a 0.5.20 server really builds (mem_cache/registry.py): the unified cache with HiCache
# attached, whose tree walks (hit counts, splits, backups) live in the Python tree core.
UNIFIED = "sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache"
TREE_CORE = "sglang.srt.mem_cache.unified_cache.unified_tree_core.UnifiedTreeCore"
CONTROLLER = "sglang.srt.managers.cache_controller.HiCacheController"
LAYER_EVENT = "sglang.srt.managers.cache_controller.LayerLoadingEvent"
L2_ENGINE = "sglang.srt.mem_cache.l2_transfer.L2TransferEngine"


class PluginRefused(XputuneError):
    """SGLang is not the release (or shape) the plugin was written for; nothing was hooked."""


@dataclass(frozen=True)
class Target:
    """One thing the plugin hooks or relies on, as a dotted path.

    `params`: the exact parameter names (None: not checked, e.g. a dict). `reads`: global names
    the function body must still look up, because the plugin replaces those module globals.
    `kind`: "callable", "class" or "mapping".
    """

    path: str
    params: tuple[str, ...] | None = None
    reads: tuple[str, ...] = ()
    kind: str = "callable"


def sglang_version() -> str:
    """The installed SGLang release, from the package itself (never the pip metadata alone)."""
    try:
        import sglang
    except Exception as exc:
        raise PluginRefused(
            f"sglang: cannot be imported ({exc.__class__.__name__}: {exc})"
        ) from exc
    version = getattr(sglang, "__version__", None)
    if not isinstance(version, str):
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version

        try:
            version = dist_version("sglang")
        except PackageNotFoundError:
            version = "unknown"
    return version


def check_version(version: str | None = None) -> str:
    """The SGLang version, or PluginRefused when it is not one this plugin was written for."""
    found = sglang_version() if version is None else version
    if found not in SUPPORTED_SGLANG:
        raise PluginRefused(
            f"sglang {found}: the xputune cache plugin supports sglang "
            f"{', '.join(SUPPORTED_SGLANG)} only (its caches and the hooked signatures differ)"
        )
    return found


def resolve(path: str) -> Any:
    """The object at a dotted path: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                continue  # this prefix is not a module; try a shorter one
            raise
        for attr in parts[cut:]:
            obj = getattr(obj, attr)  # AttributeError: the caller names the target
        return obj
    raise ModuleNotFoundError(f"no importable module in {path}")


def check_target(target: Target) -> Any:
    """Resolve one target and prove its shape; returns the object, raises PluginRefused."""
    try:
        obj = resolve(target.path)
    except AttributeError as exc:
        raise PluginRefused(f"{target.path}: not found in this sglang ({exc})") from exc
    except Exception as exc:
        raise PluginRefused(
            f"{target.path}: cannot be imported ({exc.__class__.__name__}: {exc})"
        ) from exc
    if target.kind == "class":
        if not isinstance(obj, type):
            raise PluginRefused(f"{target.path}: expected a class, found {type(obj).__name__}")
        return obj
    if target.kind == "mapping":
        if not hasattr(obj, "__getitem__") or not hasattr(obj, "__setitem__"):
            raise PluginRefused(f"{target.path}: expected a mapping, found {type(obj).__name__}")
        return obj
    if not callable(obj):
        raise PluginRefused(f"{target.path}: expected a function, found {type(obj).__name__}")
    if target.params is not None:
        try:
            names = tuple(inspect.signature(obj).parameters)
        except (TypeError, ValueError) as exc:
            raise PluginRefused(f"{target.path}: signature cannot be read ({exc})") from exc
        if names != target.params:
            raise PluginRefused(
                f"{target.path}: signature is ({', '.join(names)}), "
                f"the plugin expects ({', '.join(target.params)})"
            )
    if target.reads:
        code = getattr(inspect.unwrap(obj), "__code__", None)
        used = set(code.co_names) if code is not None else set()
        missing = [name for name in target.reads if name not in used]
        if missing:
            raise PluginRefused(
                f"{target.path}: no longer calls {', '.join(missing)}, "
                "so replacing that global would change nothing"
            )
    return obj


def check_targets(targets: Iterable[Target]) -> None:
    """check_target for each, stopping at the first mismatch (one refusal line)."""
    for target in targets:
        check_target(target)
