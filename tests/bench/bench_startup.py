"""Start-up of plan, check and launch --dry-run against the probe.

Target (docs/benchmarks.md): plan, check and launch --dry-run within 2x of the probe, whole process,
cold. Every command runs as a fresh process on the bundled recording, interleaved, so machine noise
hits each alike. Each is compared with the probe printing the same kind of output (JSON with the
fast-path `probe -f json`, tables with `probe`'s tables: drawing a table with rich costs the same
~50 ms to both), and, for the record, with the JSON probe as well; the ratios are per round, shown
as min / median / max. launch --dry-run prints a command line, no table: its anchor is the JSON
probe. The children may write .pyc files (PYTHONDONTWRITEBYTECODE is dropped for them): an installed
xputune has its bytecode, and a module compiled afresh on every run would be measured instead of the
start-up.

    python tests/bench/bench_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

EXAMPLE = "h3c-hygon-p800"
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, check=False
    )
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):  # check exits 1 on drift: still a full run
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    x = shutil.which("xputune") or str(Path(sys.executable).with_name("xputune"))
    ex = ["--example", EXAMPLE]
    plan = ["plan", *ex, "--model", "glm-5", "--tp", "8"]
    launch = ["launch", "sglang", "--dry-run", *ex, "--", "--model-path", "zai-org/GLM-5"]
    json_anchor, table_anchor = "probe -f json", "probe"
    # name -> (command, its anchor)
    commands: dict[str, tuple[list[str], str | None]] = {
        json_anchor: ([x, "probe", *ex, "-f", "json"], None),
        table_anchor: ([x, "probe", *ex], None),
        "plan -f json": ([x, *plan, "-f", "json"], json_anchor),
        "plan": ([x, *plan], table_anchor),
        "check -f json": ([x, "check", *ex, "-f", "json"], json_anchor),
        "check": ([x, "check", *ex], table_anchor),
        "launch sglang --dry-run": ([x, *launch, "--tp", "8"], json_anchor),
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for cmd, _ in commands.values():  # one warm-up each: page cache, .pyc files
        timed(cmd)
    for _ in range(args.runs):
        for name, (cmd, _) in commands.items():
            samples[name].append(timed(cmd))

    def ratios(name: str, anchor: str) -> str:
        pairs = sorted(a / b for a, b in zip(samples[name], samples[anchor], strict=True))
        return f"{pairs[0]:.2f} / {statistics.median(pairs):.2f} / {pairs[-1]:.2f}"

    print(
        f"{'command':<24} {'median ms':>9}  {'x its anchor (min/med/max)':<36}"
        f"{'x probe -f json':<20}"
    )
    worst = 0.0
    for name, (_, anchor) in commands.items():
        med = statistics.median(samples[name]) * 1e3
        if anchor is None:
            print(f"{name:<24} {med:9.1f}  {'(anchor)':<36}{ratios(name, json_anchor):<20}")
            continue
        pairs = [a / b for a, b in zip(samples[name], samples[anchor], strict=True)]
        worst = max(worst, statistics.median(pairs))
        shown = f"{ratios(name, anchor)} ({anchor})"
        print(f"{name:<24} {med:9.1f}  {shown:<36}{ratios(name, json_anchor):<20}")
    print(f"target: every command within 2.00x of its probe; worst median {worst:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
