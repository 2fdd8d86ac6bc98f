"""XPUTUNE_HICACHE_STATS=<dir>: count what reaches host memory and back, in the server itself.

  backup_nodes / backup_tokens  nodes and tokens the cache decided to write to host (the
                                unified cache's _execute_kv_backup);
  d2h_calls / d2h_tokens        the host pool's all-layer device-to-host copies that ran;
  h2d_tokens / h2d_layer_calls  host-to-device loads (tokens counted at the first layer).
Other features add their own counters (see xputune.sglang.stats); the file is written by the
startup check once the server's cache exists.
"""

from __future__ import annotations

from typing import Any

from xputune.sglang import stats
from xputune.sglang.config import PluginConfig
from xputune.sglang.hooks import Hooks
from xputune.sglang.targets import POOL_MHA, POOL_MLA, UNIFIED, Shape, Target

NAME = "stats"

_LOAD = ("self", "device_pool", "host_indices", "device_indices", "layer_id", "io_backend",
         "is_draft")  # fmt: skip
_BACKUP = ("self", "device_pool", "host_indices", "device_indices", "io_backend")

TARGETS = (
    Target(
        UNIFIED + "._execute_kv_backup",
        ("self", "node_id", "device_value", "comp_xfers", "sidecar_xfers"),
    ),
    Target(POOL_MLA + ".backup_from_device_all_layer", _BACKUP),
    Target(POOL_MHA + ".backup_from_device_all_layer", _BACKUP),
    Target(POOL_MLA + ".load_to_device_per_layer", _LOAD),
    Target(POOL_MHA + ".load_to_device_per_layer", _LOAD),
)


def _after_execute_kv_backup(result: Any, cache: Any, *args: Any, **kwargs: Any) -> None:
    if result is not None:
        stats.add("backup_nodes")
        stats.add("backup_tokens", len(result))


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return kwargs[name] if name in kwargs else (args[index] if len(args) > index else None)


def _before_backup(pool: Any, *args: Any, **kwargs: Any) -> None:
    host_indices = _arg(args, kwargs, 1, "host_indices")
    stats.add("d2h_calls")
    stats.add("d2h_tokens", len(host_indices) if host_indices is not None else 0)


def _before_load(pool: Any, *args: Any, **kwargs: Any) -> None:
    host_indices = _arg(args, kwargs, 1, "host_indices")
    stats.add("h2d_layer_calls")
    if _arg(args, kwargs, 3, "layer_id") == 0 and host_indices is not None:
        stats.add("h2d_tokens", len(host_indices))


def install(hooks: Hooks, cfg: PluginConfig) -> None:
    hooks.after(UNIFIED + "._execute_kv_backup", _after_execute_kv_backup)
    for pool in (POOL_MLA, POOL_MHA):
        hooks.before(pool + ".backup_from_device_all_layer", _before_backup)
        hooks.before(pool + ".load_to_device_per_layer", _before_load)


SHAPES = (Shape("0.5.20", TARGETS, install),)
