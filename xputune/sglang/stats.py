"""The plugin's counters, and XPUTUNE_HICACHE_STATS=<dir>: a JSON file per server process.

Features count what they do (backups written, copies run, LIFO allocations, lane jobs, double
counts suppressed, ghost-list drops and proven backups) in one process-wide table; caches add
sources that are read when a snapshot is taken. With a stats directory set, a daemon thread in
each scheduler process rewrites <dir>/xputune-stats-<pid>.json (atomically) whenever a snapshot
changes, at most every `interval` seconds, so a test or an operator can compare numbers with a
feature off and on in a running server.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

_counts: Counter[str] = Counter()
_lock = threading.Lock()
_sources: list[Callable[[], dict[str, int]]] = []
_info: dict[str, Any] = {}
_writer: threading.Thread | None = None


def add(name: str, n: int = 1) -> None:
    with _lock:
        _counts[name] += n


def add_source(source: Callable[[], dict[str, int]]) -> None:
    """A callable whose numbers join every snapshot (read when the snapshot is taken)."""
    _sources.append(source)


def set_info(**info: Any) -> None:
    """Static facts about this process's plugin (version, features, hooked classes)."""
    _info.update(info)


def snapshot() -> dict[str, int]:
    with _lock:
        out = dict(_counts)
    for source in list(_sources):
        try:
            out.update(source())
        except Exception:  # a source must never break the writer
            continue
    return dict(sorted(out.items()))


def reset() -> None:
    """Tests only."""
    with _lock:
        _counts.clear()
    _sources.clear()
    _info.clear()


def path_for(directory: str, pid: int | None = None) -> str:
    return os.path.join(directory, f"xputune-stats-{pid or os.getpid()}.json")


def write(directory: str) -> str:
    """Write this process's snapshot now; returns the file's path."""
    path = path_for(directory)
    tmp = f"{path}.tmp"
    data = {"pid": os.getpid(), "info": _info, "counters": snapshot(), "time": time.time()}
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, sort_keys=True)
    os.replace(tmp, path)
    return path


def start_writer(directory: str, interval: float = 0.2) -> None:
    """Keep <directory>/xputune-stats-<pid>.json current from a daemon thread (idempotent)."""
    global _writer
    if _writer is not None and _writer.is_alive():
        return
    os.makedirs(directory, exist_ok=True)
    write(directory)

    def loop() -> None:
        last = None
        while True:
            time.sleep(interval)
            snap = (snapshot(), dict(_info))
            if snap != last:
                try:
                    write(directory)
                except OSError:
                    continue
                last = snap

    _writer = threading.Thread(target=loop, name="xputune-stats", daemon=True)
    _writer.start()
