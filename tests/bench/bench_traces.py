"""Benchmark: a whole `xputune tiers` run against a bare json.loads loop over the same lines.

Target (docs/benchmarks.md): the whole command within 1.3x of merely parsing the trace's lines
with Python's json, at most 300 MB peak RSS on 10M block accesses (500k requests of 20 blocks),
and a 5M-line trace with long prompts (~650 MB) in bounded memory.

What it does: writes the traces into a temporary directory (deleted afterwards; nothing big is
committed), then runs, interleaved for several rounds, each as a child process:
  json   python -c 'for line in open(F, encoding="utf-8"): json.loads(line)'
  tiers  python -m xputune tiers --trace F --format json   (this checkout)
  base   the same command from another checkout (--base DIR, e.g. a `git worktree` of the
         commit before the change), for before/after figures
and prints min/median/max wall time, each one's ratio to json in the same round, and each
child's peak RSS (os.wait4). Children write bytecode (PYTHONDONTWRITEBYTECODE is dropped from
their environment) and a warm-up round runs first, so the rounds measure a user's second run.
Also: `--sample-rate 0.01` (time and peak RSS: it reads the trace twice, ids only then
batches, see hitrate.sampled_curve_stream; and its worst error against the exact curve at
fixed capacities), the gzip-compressed trace, and the long-prompt trace.
The exact curves of tiers and base must agree exactly, and so must their sampled curves
(compared on their JSON output).

Run (2 cores shared? keep the rounds up and read the ratios, which are taken side by side):
  git worktree add /tmp/tiers-base <commit>    # optional, for the before figures
  .venv/bin/python tests/bench/bench_traces.py --rounds 5 --base /tmp/tiers-base
  .venv/bin/python tests/bench/bench_traces.py --long 5000000   # the ~650 MB trace too
  git worktree remove /tmp/tiers-base
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
BLOCK = 512
JSON_LOOP = (
    "import json, sys\nfor line in open(sys.argv[1], encoding='utf-8'):\n    json.loads(line)\n"
)


def write_trace(
    path: Path,
    requests: int,
    blocks: tuple[int, int] = (20, 20),
    docs: int = 1_000_000,
    zipf: float = 1.0,
    prompts: int = 8,
    seed: int = 1,
) -> int:
    """Mooncake lines: one of `prompts` 4-block system prompts (0: none), then a document's
    drawn from a bounded Zipf law (prefix-chained ids), partial last blocks. Returns accesses."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(1.0 / np.arange(1, docs + 1) ** zipf)
    cdf /= cdf[-1]
    accesses = 0
    with path.open("w") as fh:
        for start in range(0, requests, 50_000):
            n = min(50_000, requests - start)
            doc = np.searchsorted(cdf, rng.random(n))
            prompt = rng.integers(0, max(1, prompts), n)
            nblocks = rng.integers(blocks[0], blocks[1] + 1, n)
            cut = rng.integers(0, BLOCK, n)
            out = rng.integers(1, 1000, n)
            lines = []
            for i in range(n):
                s, k = int(prompt[i]), int(nblocks[i])
                base = 1000 + (s * docs + int(doc[i])) * 4096
                head = min(4, k) if prompts else 0
                ids = [s * 4 + j for j in range(head)] + list(range(base, base + k - head))
                accesses += len(ids)
                lines.append(
                    f'{{"timestamp": {start + i}, "input_length": {k * BLOCK - int(cut[i])}, '
                    f'"output_length": {out[i]}, "hash_ids": [{", ".join(map(str, ids))}]}}\n'
                )
            fh.writelines(lines)
    return accesses


def run(cmd: list[str], env: dict[str, str] | None = None, out: Path | None = None):
    """(seconds, peak RSS in MB) of one child process; SystemExit when it fails."""
    t0 = time.perf_counter()
    with open(out or os.devnull, "wb") as sink:
        # Not the checkout as cwd: `python -m` puts the cwd first on sys.path, PYTHONPATH
        # must choose the code.
        proc = subprocess.Popen(
            cmd, stdout=sink, stderr=subprocess.PIPE, env=env, cwd=tempfile.gettempdir()
        )
        _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()[-500:]}")
    return took, usage.ru_maxrss / 1024


def tiers_cmd(trace: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "xputune", "tiers", "--trace", str(trace), "-f", "json", *extra]


def env_for(checkout: Path) -> dict[str, str]:
    """Children import `checkout`'s code, with bytecode writing on (as a real install has it,
    and as bench_probe.py runs): with PYTHONDONTWRITEBYTECODE set, as in some shells, every
    run compiled the modules whose .pyc was missing or stale again (~30 ms a run, which the
    json loop never pays); the warm-up round writes them."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(checkout)
    return env


def summary(name: str, times: list[float], rss: list[float], anchor: list[float]) -> str:
    ratios = [t / a for t, a in zip(times, anchor, strict=True)]
    return (
        f"{name:<22} {min(times):6.2f} {statistics.median(times):6.2f} {max(times):6.2f} s"
        f"   x{min(ratios):.2f} / x{statistics.median(ratios):.2f} / x{max(ratios):.2f}"
        f"   peak RSS {max(rss):6.0f} MB"
    )


def compare(rounds: int, variants: dict[str, tuple[list[str], dict[str, str] | None]]) -> dict:
    """Interleaved rounds of every variant; the first is the anchor of the ratios."""
    results = {name: ([], []) for name in variants}
    for _ in range(rounds):
        for name, (cmd, env) in variants.items():
            took, rss = run(cmd, env)
            results[name][0].append(took)
            results[name][1].append(rss)
    anchor = next(iter(results.values()))[0]
    print("                         min    med    max      ratio to json min/med/max")
    for name, (times, rss) in results.items():
        print(summary(name, times, rss, anchor))
    return results


def curve_of(cmd: list[str], env: dict[str, str] | None, tmp: Path) -> dict:
    out = tmp / "out.json"
    run(cmd, env, out)
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--base", type=Path, help="a checkout of the code before, for comparison")
    ap.add_argument("--long", type=int, default=0, help="lines of the long-prompt trace (5M)")
    ap.add_argument("--keep", type=Path, help="write the traces here and keep them")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="xpt-bench-", dir=args.keep))
    try:
        trace = tmp / "trace.jsonl"
        accesses = write_trace(trace, args.requests)
        size = trace.stat().st_size / 1e6
        print(f"trace: {args.requests:,} requests, {accesses:,} accesses, {size:.0f} MB")
        here = env_for(ROOT)
        json_cmd = [sys.executable, "-c", JSON_LOOP, str(trace)]
        variants = {"json.loads loop": (json_cmd, here), "tiers": (tiers_cmd(trace), here)}
        if args.base:
            variants["tiers (base)"] = (tiers_cmd(trace), env_for(args.base))
        for cmd, env in variants.values():  # warm the page cache and the kernel builds
            run(cmd, env)
        compare(args.rounds, variants)

        caps = [str(BLOCK * int(c)) for c in np.unique(np.geomspace(1, 2**22, 23).astype(int))]
        capflags = [x for c in caps for x in ("--capacity", c)]
        exact = curve_of(tiers_cmd(trace, *capflags), here, tmp)
        if args.base:
            before = curve_of(tiers_cmd(trace, *capflags), env_for(args.base), tmp)
            same = before == exact
            print(f"exact curve, tiers vs base: {'identical' if same else 'DIFFERENT'} JSON")
            default_new = curve_of(tiers_cmd(trace), here, tmp)
            default_old = curve_of(tiers_cmd(trace), env_for(args.base), tmp)
            print(
                "default grid, tiers vs base: "
                f"{'identical' if default_new == default_old else 'DIFFERENT'} JSON"
            )

        sampled = {"json.loads loop": (json_cmd, here)}
        sampled["tiers --sample-rate 0.01"] = (tiers_cmd(trace, "--sample-rate", "0.01"), here)
        if args.base:
            sampled["base --sample-rate 0.01"] = (
                tiers_cmd(trace, "--sample-rate", "0.01"),
                env_for(args.base),
            )
        compare(max(2, args.rounds // 2), sampled)
        if args.base:
            flags = (*capflags, "--sample-rate", "0.01")
            same = curve_of(tiers_cmd(trace, *flags), here, tmp) == curve_of(
                tiers_cmd(trace, *flags), env_for(args.base), tmp
            )
            print(f"sampled 0.01 curve, tiers vs base: {'identical' if same else 'DIFFERENT'} JSON")
        for rate in ("0.1", "0.01"):
            approx = curve_of(tiers_cmd(trace, *capflags, "--sample-rate", rate), here, tmp)
            err = max(
                abs(a["hit_rate"] - b["hit_rate"])
                for a, b in zip(approx["curve"], exact["curve"], strict=True)
            )
            print(f"sampled {rate}: worst error {err * 100:.2f} points at {len(caps)} sizes")

        gz = tmp / "trace.jsonl.gz"
        with trace.open("rb") as src, gzip.open(gz, "wb", compresslevel=3) as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
        took, rss = run(tiers_cmd(gz), here)
        same = curve_of(tiers_cmd(gz, *capflags), here, tmp) == {
            **exact,
            "trace": {**exact["trace"], "file": str(gz)},
        }
        print(
            f"gzip trace ({gz.stat().st_size / 1e6:.0f} MB): tiers {took:.2f} s, "
            f"peak RSS {rss:.0f} MB, curve {'identical' if same else 'DIFFERENT'}"
        )
        gz.unlink()
        trace.unlink()

        if args.long:
            long_trace = tmp / "long.jsonl"
            t0 = time.perf_counter()
            acc = write_trace(long_trace, args.long, blocks=(4, 12), seed=7)
            print(
                f"long-prompt trace: {args.long:,} lines, {acc:,} accesses, "
                f"{long_trace.stat().st_size / 1e6:.0f} MB (written in "
                f"{time.perf_counter() - t0:.0f} s)"
            )
            compare(
                1,
                {
                    "json.loads loop": ([sys.executable, "-c", JSON_LOOP, str(long_trace)], here),
                    "tiers": (tiers_cmd(long_trace), here),
                },
            )
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
