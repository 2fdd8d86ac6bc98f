"""Start-up of plan, check and launch --dry-run against the fast-path probe (issue 14 item 3).

DESIGN target: plan, check and launch --dry-run within 2x of the probe, whole process, cold.
Every command runs as a fresh process on the bundled recording, interleaved, so machine noise
hits each alike; the ratio of medians against the probe is what counts. The children may write
.pyc files (PYTHONDONTWRITEBYTECODE is dropped for them): an installed xputune has its bytecode,
and a module compiled afresh on every run would be measured instead of the start-up.

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
    commands = {
        "probe -f json (anchor)": [x, "probe", *ex, "-f", "json"],
        "plan --model glm-5 --tp 8": [x, "plan", *ex, "--model", "glm-5", "--tp", "8"],
        "check": [x, "check", *ex],
        "launch sglang --dry-run": [
            *(x, "launch", "sglang", "--dry-run", *ex),
            *("--", "--model-path", "zai-org/GLM-5", "--tp", "8"),
        ],
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for cmd in commands.values():  # one warm-up each: page cache, .pyc files
        timed(cmd)
    for _ in range(args.runs):
        for name, cmd in commands.items():
            samples[name].append(timed(cmd))
    anchor = statistics.median(samples["probe -f json (anchor)"])
    print(f"{'command':<28} {'min ms':>8} {'median ms':>10} {'max ms':>8} {'x probe':>8}")
    worst = 0.0
    for name, values in samples.items():
        med = statistics.median(values)
        ratio = med / anchor
        if not name.startswith("probe"):
            worst = max(worst, ratio)
        print(
            f"{name:<28} {min(values) * 1e3:8.1f} {med * 1e3:10.1f} "
            f"{max(values) * 1e3:8.1f} {ratio:8.2f}"
        )
    print(f"target: every command within 2.00x of the probe; worst {worst:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
