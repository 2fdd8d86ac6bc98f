"""The plugin's switches, from XPUTUNE_HICACHE_* environment variables (the launcher's contract).

Environment variables, not SGLang flags, because SGLang's argument parser rejects flags it does
not know and the plugin must work unchanged in every process SGLang starts (engine, schedulers):
those inherit the launcher's environment. Everything is off by default; a garbage value is a
ConfigError naming the variable, never a silent "off".
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from xputune.errors import XputuneError

PREFIX = "XPUTUNE_HICACHE_"
DEFAULT_GHOST_CAPACITY = 1 << 18  # page hashes; about 30 MiB at ~120 B an entry
ON_MISMATCH_CHOICES = ("warn", "exit")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


class ConfigError(XputuneError):
    """An XPUTUNE_HICACHE_* variable holds a value the plugin cannot use."""


@dataclass(frozen=True)
class PluginConfig:
    """Which cache features the launcher switched on, and their parameters."""

    lifo: bool = False
    count_once: bool = False
    ghost: bool = False
    ghost_capacity: int = DEFAULT_GHOST_CAPACITY
    async_submit: bool = False
    numa_nodes: tuple[int, ...] = ()
    tp_shared: bool = False
    kernels: bool = False
    host_buffer: bool = False
    stats_dir: str = ""
    on_mismatch: str = "warn"

    @property
    def host_alloc(self) -> bool:
        """The host KV buffer is ours (NUMA-bound, TP-shared or plain) instead of SGLang's."""
        return bool(self.numa_nodes) or self.tp_shared or self.host_buffer

    def features(self) -> tuple[str, ...]:
        """Names of the switched-on features, in the order they are installed."""
        on = {
            "lifo": self.lifo or self.tp_shared,  # a shared buffer needs the checked allocator
            "count_once": self.count_once,
            "ghost": self.ghost,
            "kernels": self.kernels,
            "async": self.async_submit,
            "host_alloc": self.host_alloc,
            "stats": bool(self.stats_dir),
        }
        return tuple(name for name, enabled in on.items() if enabled)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PluginConfig:
        env = os.environ if env is None else env
        known = {
            "LIFO", "COUNT_ONCE", "GHOST", "GHOST_CAPACITY", "ASYNC", "NUMA", "TP_SHARED",
            "KERNELS", "HOST_BUFFER", "STATS", "ON_MISMATCH",
        }  # fmt: skip
        unknown = sorted(k for k in env if k.startswith(PREFIX) and k[len(PREFIX) :] not in known)
        if unknown:
            raise ConfigError(f"unknown variable {unknown[0]} (known: {', '.join(sorted(known))})")
        on_mismatch = env.get(PREFIX + "ON_MISMATCH", "warn").strip().lower() or "warn"
        if on_mismatch not in ON_MISMATCH_CHOICES:
            choices = ", ".join(ON_MISMATCH_CHOICES)
            raise ConfigError(f"{PREFIX}ON_MISMATCH={on_mismatch!r}: expected one of {choices}")
        return cls(
            lifo=_flag(env, "LIFO"),
            count_once=_flag(env, "COUNT_ONCE"),
            ghost=_flag(env, "GHOST"),
            ghost_capacity=_positive_int(env, "GHOST_CAPACITY", DEFAULT_GHOST_CAPACITY),
            async_submit=_flag(env, "ASYNC"),
            numa_nodes=parse_node_list(env.get(PREFIX + "NUMA", ""), PREFIX + "NUMA"),
            tp_shared=_flag(env, "TP_SHARED"),
            kernels=_flag(env, "KERNELS"),
            host_buffer=_flag(env, "HOST_BUFFER"),
            stats_dir=_stats_dir(env),
            on_mismatch=on_mismatch,
        )


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(PREFIX + name, "")
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{PREFIX}{name}={raw!r}: expected 1 or 0")


def _stats_dir(env: Mapping[str, str]) -> str:
    raw = env.get(PREFIX + "STATS", "").strip()
    if raw and not os.path.isabs(raw):
        raise ConfigError(f"{PREFIX}STATS={raw!r}: expected an absolute directory path")
    return raw


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(PREFIX + name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) <= 0:
        raise ConfigError(f"{PREFIX}{name}={raw!r}: expected a positive integer")
    return int(raw)


def parse_node_list(raw: str, name: str = PREFIX + "NUMA") -> tuple[int, ...]:
    """ "1 1 3 3" or "1,1,3,3": the i-th value is the NUMA node of the i-th local card."""
    text = raw.strip()
    if not text:
        return ()
    parts = [p for p in re.split(r"[\s,]+", text) if p]
    if not all(p.isdigit() for p in parts):
        raise ConfigError(f"{name}={raw!r}: expected NUMA node numbers, e.g. '1 1 3 3'")
    return tuple(int(p) for p in parts)
