"""Ghost list memory per entry (tracemalloc) and add/lookup cost, against the field report's ~120 B.

Run: .venv/bin/python tests/bench/bench_ghost.py [entries]
"""

from __future__ import annotations

import random
import sys
import time
import tracemalloc
from collections import OrderedDict

from xputune.hicache.ghost import GhostList


def _bytes_per_entry(build, n: int) -> float:
    keys = [random.getrandbits(64) for _ in range(n)]  # allocated before tracing starts
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    obj = build(keys)
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del obj
    return used / n


def _ghost(keys):
    g = GhostList(len(keys))
    g.add_many(keys)
    return g


def _ghost_with_keys(n: int) -> float:
    """Entries whose int objects are owned by the list alone (as when hashes are computed)."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    g = GhostList(n)
    for _ in range(n):
        g.add(random.getrandbits(64))
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del g
    return used / n


def _ns_per_op(n: int) -> tuple[float, float]:
    keys = [random.getrandbits(64) for _ in range(n)]
    g = GhostList(n // 2)  # half fit: adds also evict
    t = time.perf_counter()
    for k in keys:
        g.add(k)
    add = (time.perf_counter() - t) / n * 1e9
    t = time.perf_counter()
    for k in keys:
        _ = k in g
    look = (time.perf_counter() - t) / n * 1e9
    return add, look


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    rows = [
        ("GhostList (OrderedDict), keys shared", _bytes_per_entry(_ghost, n)),
        ("GhostList, keys owned (what a server pays)", _ghost_with_keys(n)),
        ("plain dict (no recency order)", _bytes_per_entry(lambda k: dict.fromkeys(k), n)),
        ("OrderedDict alone", _bytes_per_entry(lambda k: OrderedDict.fromkeys(k), n)),
    ]
    print(f"ghost list memory, {n:,} entries of 64-bit hashes (seed figure: ~120 B/entry)")
    for name, per in rows:
        print(f"  {name:45s} {per:7.1f} B/entry  ({per / 120:.2f}x seed)")
    add, look = _ns_per_op(n)
    print(f"  add {add:.0f} ns/op (with eviction), lookup {look:.0f} ns/op")


if __name__ == "__main__":
    main()
