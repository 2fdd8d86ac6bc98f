"""Benchmark: peak memory and time of whole commands handed hostile input files.

Target (docs/architecture.md, bounded inputs): every file a user names is bounded: a command given a
huge file, a device (/dev/zero), a file of one endless line or a FIFO with no writer ends at once
with one error line, in the memory of the interpreter plus the bound, instead of growing or
blocking.

What it does: writes the hostile files into a temporary directory (deleted afterwards; nothing
big is committed): a 181 MB JSON document (also named as a .yaml profile), a 1 GiB trace of
one line, a 1 GiB config.json of one line, a FIFO nobody writes to; then runs each case as a
child process (`python -m xputune ...`, with the checkout's code, or --base DIR's for the
before figures) and prints its exit status, wall time, peak RSS (os.wait4) and the last line
of its stderr. A watchdog stops a child whose RSS passes --max-rss MB or that runs past
--timeout seconds (a read blocked on the FIFO, or a slow parse), so the "before" figures of an
unbounded reader stay measurable on a small machine: such a row says "killed". Not a test:
run it by hand.

    git worktree add /tmp/hostile-base <commit>     # optional, for the before figures
    .venv/bin/python tests/bench/bench_hostile_inputs.py --base /tmp/hostile-base
    git worktree remove /tmp/hostile-base
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "h3c-hygon-p800"


def write_big_json(path: Path, size: int) -> None:
    """A JSON document of `size` bytes: an array of small integers (what json.loads blows up
    most per byte after strings)."""
    with path.open("w") as fh:
        fh.write("[")
        piece = "1," * (1 << 20)
        written = 1
        while written < size - len(piece):
            fh.write(piece)
            written += len(piece)
        fh.write("1]")


def write_one_line(path: Path, head: str, size: int) -> None:
    """`head` then digits and commas up to `size` bytes, with no newline anywhere."""
    with path.open("w") as fh:
        fh.write(head)
        piece = "1234567," * (1 << 17)
        written = len(head)
        while written < size:
            fh.write(piece)
            written += len(piece)


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run(cmd: list[str], env: dict[str, str], max_rss: float, timeout: float) -> dict:
    """Exit status, seconds, peak RSS (MB), the last stderr line, and why it was stopped."""
    err = tempfile.TemporaryFile()  # noqa: SIM115 - read and closed below
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env,
        cwd=tempfile.gettempdir(),
    )  # fmt: skip
    stopped = ""
    while True:
        done, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if done:
            break
        took = time.perf_counter() - t0
        if rss_mb(proc.pid) > max_rss:
            stopped = f"killed at {max_rss:.0f} MB RSS"
        elif took > timeout:
            stopped = f"still running after {timeout:.0f} s, killed"
        if stopped:
            proc.send_signal(signal.SIGKILL)
            _, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.02)
    took = time.perf_counter() - t0
    err.seek(0)
    lines = err.read().decode(errors="replace").strip().splitlines()
    err.close()
    return {
        "code": os.waitstatus_to_exitcode(status),
        "seconds": took,
        "rss": usage.ru_maxrss / 1024,
        "said": lines[-1][:110] if lines else "",
        "stderr_lines": len(lines),
        "stopped": stopped,
    }


def cases(tmp: Path) -> dict[str, list[str]]:
    big, line, config = tmp / "big.json", tmp / "line.jsonl", tmp / "config.json"
    fifo = tmp / "fifo"
    x = ["-m", "xputune"]
    plan, check = [*x, "plan", "--example", EXAMPLE], [*x, "check", "--example", EXAMPLE]
    return {
        "fleet report, 181 MB file": [*x, "fleet", "report", str(big)],
        "fleet report, /dev/zero": [*x, "fleet", "report", "/dev/zero"],
        "fleet report, FIFO": [*x, "fleet", "report", str(fifo)],
        "tiers --trace, one 1 GiB line": [*x, "tiers", "--trace", str(line)],
        "tiers --trace, /dev/zero": [*x, "tiers", "--trace", "/dev/zero"],
        "tiers --trace, FIFO": [*x, "tiers", "--trace", str(fifo)],
        "tiers --measured, /dev/zero": [*x, "tiers", "--measured", "/dev/zero"],
        "model --points, /dev/zero": [*x, "model", "--points", "/dev/zero", "--fit-b", "1"],
        "smi --input, 181 MB file": [*x, "smi", "--input", str(big)],
        "smi --input, /dev/zero": [*x, "smi", "--input", "/dev/zero"],
        "smi --input, FIFO": [*x, "smi", "--input", str(fifo)],
        "plan --config, /dev/zero": [*plan, "--config", "/dev/zero"],
        "plan --config, one 1 GiB line": [*plan, "--config", str(config)],
        "plan --config, FIFO": [*plan, "--config", str(fifo)],
        "check --profile, 181 MB file": [*check, "--profile", str(tmp / "big.yaml")],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", type=Path, help="a checkout of the code before, for comparison")
    ap.add_argument("--max-rss", type=float, default=3072, help="MB; the watchdog kills above")
    ap.add_argument("--timeout", type=float, default=20, help="seconds; the watchdog kills after")
    ap.add_argument("--only", help="run only the cases whose name holds this text")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="xpt-hostile-"))
    try:
        write_big_json(tmp / "big.json", 181_000_000)
        os.link(tmp / "big.json", tmp / "big.yaml")  # JSON is YAML: a profile of 181 MB
        write_one_line(tmp / "line.jsonl", '{"input_length": 1, "hash_ids": [', 1 << 30)
        write_one_line(tmp / "config.json", '{"num_hidden_layers": [', 1 << 30)
        os.mkfifo(tmp / "fifo")
        checkouts = {"after": ROOT}
        if args.base:
            checkouts = {"before": args.base, **checkouts}
        floor = {}
        for label, checkout in checkouts.items():
            env = {**os.environ, "PYTHONPATH": str(checkout), "COLUMNS": "100"}
            floor[label] = run([sys.executable, "-c", "import xputune"], env, 1e9, 60)["rss"]
        print(f"floor (python -c 'import xputune'): {floor}")
        for name, argv in cases(tmp).items():
            if args.only and args.only not in name:
                continue
            for label, checkout in checkouts.items():
                env = {**os.environ, "PYTHONPATH": str(checkout), "COLUMNS": "100"}
                r = run([sys.executable, *argv], env, args.max_rss, args.timeout)
                what = r["stopped"] or f"exit {r['code']}, {r['stderr_lines']} stderr line(s)"
                print(f"{name:<32} {label:<6} {r['rss']:7.0f} MB {r['seconds']:6.2f} s  {what}")
                print(f"{'':<40}{r['said']}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
