"""The watch agent's state file, for fleet's users (the watch, the metrics, `xputune metrics`).

The file belongs to the state directory, so its layout and reader live in tune/watchstate.py,
where `xputune status` (tune/status.py) can read it too; this module only names them here.
"""

from __future__ import annotations

from xputune.tune.watchstate import (
    COUNTERS,
    SCHEMA_VERSION,
    STATE_FILE,
    STATE_PATH,
    WATCH_LOCK,
    Backoff,
    LastApply,
    WatchState,
    read,
)

__all__ = [
    "COUNTERS",
    "SCHEMA_VERSION",
    "STATE_FILE",
    "STATE_PATH",
    "WATCH_LOCK",
    "Backoff",
    "LastApply",
    "WatchState",
    "read",
]
