"""The entry point SGLang calls (group sglang.srt.plugins) and the all-or-nothing install.

SGLang runs every plugin in the engine and in each scheduler process, then applies the hooks
they registered. Our register() reads the launcher's switches; with none on it does nothing.
Otherwise it checks the SGLang version and every target of every switched-on feature first,
and only then registers anything, so a mismatch never leaves half a plugin installed. A
mismatch is one log line naming the target, and then the process stops (SystemExit, which
SGLang's plugin loader does not swallow): a server the launcher configured for LIFO or
write-policy fixes must not quietly serve without them. XPUTUNE_HICACHE_ON_MISMATCH=warn
keeps the one line but serves unpatched.

Hooks registered here sit on classes; whether they act in the server is proven later, on the
cache the server really builds (xputune.sglang.live), which also logs the startup line.
"""

from __future__ import annotations

import logging
from types import ModuleType

from xputune.errors import XputuneError
from xputune.sglang import (
    async_hooks,
    count_once,
    ghost_hooks,
    hostalloc_hooks,
    kernel_hooks,
    lifo_hooks,
    live,
    stats_hooks,
)
from xputune.sglang.config import PluginConfig
from xputune.sglang.hooks import Hooks
from xputune.sglang.targets import Target, check_targets, check_version

STARTUP_TARGETS = tuple(Target(path) for path in live.TARGET_PATHS)

log = logging.getLogger("xputune.sglang")

FEATURES: dict[str, ModuleType] = {
    mod.NAME: mod
    for mod in (
        lifo_hooks, count_once, ghost_hooks, kernel_hooks, async_hooks, hostalloc_hooks,
        stats_hooks,
    )
}  # fmt: skip

_installed: Hooks | None = None


def targets_for(features: tuple[str, ...]) -> list[Target]:
    """Every target the given features hook or rely on, each once, in install order."""
    seen: dict[str, Target] = {}
    for name in features:
        for target in FEATURES[name].TARGETS:
            seen.setdefault(target.path, target)
    return list(seen.values())


def install(cfg: PluginConfig, registry: object = None) -> Hooks | None:
    """Check, then register and apply the hooks of cfg's features; None when none is on.

    Raises PluginRefused (nothing hooked) on a version or target mismatch. Idempotent per
    process: a second call returns the first install.
    """
    global _installed
    features = cfg.features()
    if not features:
        return None
    if _installed is not None:
        return _installed
    version = check_version()
    check_targets([*targets_for(features), *STARTUP_TARGETS])
    hooks = Hooks(registry)
    for name in features:
        FEATURES[name].install(hooks, cfg)
    live.install(hooks, cfg, version)
    hooks.apply()
    _installed = hooks
    # SGLang has not configured logging yet (this line is DEBUG); live.confirm logs at INFO.
    log.debug("xputune cache plugin registered on sglang %s: %s", version, ", ".join(features))
    return hooks


def installed() -> Hooks | None:
    return _installed


def forget_install() -> None:
    """Tests only: undo the direct patches and allow a fresh install()."""
    global _installed
    if _installed is not None:
        _installed.undo_direct()
    _installed = None


def refusal_line(exc: BaseException) -> str:
    return f"xputune cache plugin refused: {exc}"


def register() -> None:
    """Entry point (sglang.srt.plugins): install what the XPUTUNE_HICACHE_* variables ask for."""
    try:
        cfg = PluginConfig.from_env()
    except XputuneError as exc:
        line = refusal_line(exc)
        log.error(line)
        raise SystemExit(line) from None
    try:
        install(cfg)
    except XputuneError as exc:
        line = refusal_line(exc)
        log.error(line)
        if cfg.on_mismatch == "warn":
            return
        raise SystemExit(line) from None
