"""The entry point SGLang calls (group sglang.srt.plugins): detect, then install per feature.

SGLang runs every plugin in the engine and in each scheduler process, then applies the hooks
they registered. Our register() reads the launcher's switches; with none on it does nothing.
Otherwise each switched-on feature is matched against the installed SGLang first (targets.py:
the first of its shapes whose every target resolves with the parameters it was written
against), and only then is anything registered, so a mismatch never leaves half a feature
installed. A feature no shape fits is off, and the rest are on: the process that builds the
server's cache (the scheduler) says so in one WARNING line naming the target, and in its
startup line (xputune.sglang.live), rather than every process SGLang loads the plugin in. A
release outside the tested range says so in the startup line. A feature the release does
itself (count-once from 0.5.22) is "built in": nothing is hooked for it.
XPUTUNE_HICACHE_ON_MISMATCH=exit stops the process at the first feature that is off instead
(SystemExit, which SGLang's plugin loader does not swallow).

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
from xputune.sglang.targets import Choice, PluginRefused, check_targets, choose, sglang_version

log = logging.getLogger("xputune.sglang")

FEATURES: dict[str, ModuleType] = {
    mod.NAME: mod
    for mod in (
        lifo_hooks, count_once, ghost_hooks, kernel_hooks, async_hooks, hostalloc_hooks,
        stats_hooks,
    )
}  # fmt: skip

_installed: Hooks | None = None


def decide(features: tuple[str, ...]) -> list[Choice]:
    """Which shape each feature takes on the installed SGLang (or why it is off)."""
    return [choose(name, FEATURES[name].SHAPES) for name in features]


def install(cfg: PluginConfig, registry: object = None) -> Hooks | None:
    """Detect, then register and apply the hooks of cfg's features; None when none is on.

    Raises PluginRefused (nothing hooked) when SGLang cannot be imported or its cache has no
    place for the startup check, and, with on_mismatch "exit", when any feature is off.
    Idempotent per process: a second call returns the first install.
    """
    global _installed
    features = cfg.features()
    if not features:
        return None
    if _installed is not None:
        return _installed
    version = sglang_version()
    check_targets(live.TARGETS)
    choices = decide(features)
    for choice in choices:
        if choice.shape is None and cfg.on_mismatch == "exit":
            raise PluginRefused(f"{choice.feature}: {choice.problem}")
    hooks = Hooks(registry)
    for choice in choices:
        if choice.on:
            assert choice.shape is not None and choice.shape.install is not None
            choice.shape.install(hooks, cfg)
    live.install(hooks, cfg, version, choices)
    hooks.apply()
    _installed = hooks
    log.debug(
        "xputune cache plugin registered on sglang %s: %s",
        version, ", ".join(c.feature for c in choices if c.on),
    )  # fmt: skip
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
