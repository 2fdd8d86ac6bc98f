"""Host-tuning benchmark: what the crash-safe journal costs next to bare writes, on the seed box.

Every change of `xputune apply` journals its original (temp file, fsync, rename, fsync dir)
before the write, and reads back after it. This prints, side by side on a copy of the 8-card
seed-box fixture: check (read all 29 settings), the same 27 writes with no journal and no
verify (what a shell script of setpci/echo lines does), the full transactional apply, and
rollback, with the ratio of apply to bare writes.
Run: .venv/bin/python tests/bench/bench_tune.py [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # tests.fixtures, run as a script


def main() -> int:
    from xputune.host.view import DirView
    from xputune.tune import engine
    from xputune.tune.kinds import accessor

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from tests.fixtures.trees import copy_tree

    work = tempfile.mkdtemp()
    root = os.path.join(work, "seed")
    copy_tree("h3c-hygon-p800", root)  # a private copy of the seed box's recording
    try:
        view = DirView(root)
        topology = engine.discover(view)
        selection = engine.select(topology, "hygon-p800")
        ctx = engine.context(view, topology, selection)
        times: dict[str, list[float]] = {"check": [], "bare": [], "apply": [], "rollback": []}
        steps = 0
        for _ in range(args.repeats):
            t = time.perf_counter()
            engine.check(ctx, selection)
            times["check"].append(time.perf_counter() - t)

            changes = engine.plan(ctx, selection)
            steps = len(changes)
            t = time.perf_counter()
            for change in changes:  # no journal, no read-back: a shell script's cost
                accessor(change.kind).write(view, change.target, change.after)
            times["bare"].append(time.perf_counter() - t)
            for change in reversed(changes):
                accessor(change.kind).write(view, change.target, change.before)

            t = time.perf_counter()
            engine.apply(ctx, selection, ["apply", "bench"])
            times["apply"].append(time.perf_counter() - t)
            t = time.perf_counter()
            engine.rollback_host(view)
            times["rollback"].append(time.perf_counter() - t)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"seed box, {steps} changes, median of {args.repeats} runs (probe excluded)")
        print(f"{'phase':<34}{'total ms':>10}{'per change ms':>15}")
        rows = [
            ("check (29 settings read)", med["check"], None),
            ("bare writes (no journal/verify)", med["bare"], steps),
            ("apply (journal+fsync, verify)", med["apply"], steps),
            ("rollback (verify, archive)", med["rollback"], steps),
        ]
        for name, value, n in rows:
            per = f"{value * 1000 / n:15.2f}" if n else f"{'':>15}"
            print(f"{name:<34}{value * 1000:10.1f}{per}")
        print(f"apply / bare writes: {med['apply'] / med['bare']:.1f}x "
              "(the price of surviving a kill -9 at any step)")  # fmt: skip
    finally:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
