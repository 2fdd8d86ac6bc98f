"""What the plugin hooks in SGLang, and the load-time proof that each target is still there.

A hook on a method that moved, was renamed or changed its parameters does not fail loudly: the
hook registry logs and skips it, or the wrapper passes arguments to the wrong names, and the
server runs without the feature the launcher asked for. So a feature is written against one or
more shapes of SGLang (a Shape: the targets it needs in that form, and how it hooks there), and
before registering anything the plugin checks, for each switched-on feature, which shape the
installed SGLang has: every target resolves, is callable, has exactly the parameter names the
shape was written against, and (for module globals the plugin replaces) still reads those
globals. The release number decides nothing; it only says whether the lanes have proven the
combination (TESTED_SGLANG). A feature no shape fits is off, with one line naming the target.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from xputune.errors import XputuneError

# The supported range; the server lanes prove every feature on both of its ends.
OLDEST = "0.5.20"
NEWEST = "0.5.23"
TESTED_SGLANG = (OLDEST, NEWEST)
SUPPORTED_RANGE = f"{OLDEST} through {NEWEST}"

POOL_BASE = "sglang.srt.mem_cache.pool_host.base.HostKVCache"
POOL_MLA_MODULE = "sglang.srt.mem_cache.pool_host.mla"
POOL_MLA = POOL_MLA_MODULE + ".MLATokenToKVPoolHost"
POOL_COMMON = "sglang.srt.mem_cache.pool_host.common"
POOL_MHA_MODULE = "sglang.srt.mem_cache.pool_host.mha"
POOL_MHA = POOL_MHA_MODULE + ".MHATokenToKVPoolHost"
# What every supported server builds (mem_cache/registry.py): the unified cache with HiCache
# attached, whose tree walks (hit counts, splits, backups) live in its tree core.
UNIFIED = "sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache"
TREE_CORE = "sglang.srt.mem_cache.unified_cache.unified_tree_core.UnifiedTreeCore"
INSERT_PARAMS = "sglang.srt.mem_cache.base_prefix_cache.InsertParams"
CONTROLLER = "sglang.srt.managers.cache_controller.HiCacheController"
LAYER_EVENT = "sglang.srt.managers.cache_controller.LayerLoadingEvent"
L2_MODULE = "sglang.srt.mem_cache.l2_transfer"
L2_ENGINE = L2_MODULE + ".L2TransferEngine"
# 0.5.23+: the per-layout table of copy operators an MLA host pool calls.
KVCACHEIO_OPS = "sglang.srt.mem_cache.pool_host._kvcacheio.MLA_KVCACHEIO_OPS"
TREE_CORE_ENV = "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"


class PluginRefused(XputuneError):
    """SGLang is not the release (or shape) the plugin was written for; nothing was hooked."""


@dataclass(frozen=True)
class Target:
    """One thing the plugin hooks or relies on, as a dotted path.

    `params`: the exact parameter names (None: not checked, e.g. a dict). `reads`: global names
    the function body must still look up, because the plugin replaces those module globals.
    `kind`: "callable", "class", "mapping", or "field" (a dataclass field: the path ends in the
    field's name).
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


def release_note(version: str) -> str:
    """How far the lanes vouch for `version`: "" for a tested release, else a parenthesis."""
    if version in TESTED_SGLANG:
        return ""
    return f" (untested: the lanes prove {', '.join(TESTED_SGLANG)}; supported {SUPPORTED_RANGE})"


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
    if target.kind == "field":
        return _check_field(target)
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


def _check_field(target: Target) -> Any:
    owner_path, _, name = target.path.rpartition(".")
    owner = check_target(Target(owner_path, kind="class"))
    if not dataclasses.is_dataclass(owner):
        raise PluginRefused(f"{owner_path}: expected a dataclass, found {type(owner).__name__}")
    if name not in {f.name for f in dataclasses.fields(owner)}:
        raise PluginRefused(f"{target.path}: no such field in this sglang")
    return owner


def check_targets(targets: Iterable[Target]) -> None:
    """check_target for each, stopping at the first mismatch (one refusal line)."""
    for target in targets:
        check_target(target)


@dataclass(frozen=True)
class Shape:
    """One form of SGLang a feature is written against: what it needs there, how it hooks.

    `written_for` names the release whose code the shape follows (proven there by the lanes);
    any release whose targets all match gets it. `builtin`: in this form SGLang does the
    feature's job itself, so nothing is hooked and the startup line says so.
    """

    written_for: str
    targets: tuple[Target, ...]
    install: Callable[..., None] | None = None  # (hooks, cfg); None for a built-in shape
    builtin: bool = False


@dataclass(frozen=True)
class Choice:
    """The shape one switched-on feature takes here, or why it is off (`problem`)."""

    feature: str
    shape: Shape | None
    problem: str = ""

    @property
    def on(self) -> bool:
        return self.shape is not None and not self.shape.builtin

    @property
    def builtin(self) -> bool:
        return self.shape is not None and self.shape.builtin


def choose(feature: str, shapes: Iterable[Shape]) -> Choice:
    """The first shape (newest first) whose every target matches; else the newest's mismatch.

    The newest shape's mismatch is the one reported: on a release past the tested range that
    is the form the feature was last written against, so its line names what moved.
    """
    problem = ""
    for shape in shapes:
        try:
            check_targets(shape.targets)
        except PluginRefused as exc:
            problem = problem or str(exc)
            continue
        return Choice(feature, shape)
    return Choice(feature, None, problem or "no shape declared")
