"""Benchmark: exact prefix hit-rate curve over 10 million block accesses (target: <= 10 s).

Also: the sampled (SHARDS + exact hot set) mode's time and worst error against the exact curve
at rates 0.1 and 0.01, a pure-Python Fenwick pass on a slice (extrapolated) for scale, and the
Mooncake parser's throughput. Run: .venv/bin/python tests/bench/bench_hitrate.py [--zipf A]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from xputune.plan.hitrate import Trace, exact_curve, sampled_curve, trace_from_requests
from xputune.plan.traces import parse_mooncake

BLOCK = 512


def zipf_trace(accesses: int, zipf: float, docs: int = 1_000_000, seed: int = 1) -> Trace:
    """Requests read a prefix (1..40 blocks) of a document drawn from a bounded Zipf law."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 41, size=accesses // 20 + 1000)
    lengths = lengths[: np.searchsorted(np.cumsum(lengths), accesses) + 1]
    cdf = np.cumsum(1.0 / np.arange(1, docs + 1) ** zipf)
    doc = rng.permutation(docs)[np.searchsorted(cdf / cdf[-1], rng.random(len(lengths)))]
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    req = np.repeat(np.arange(len(lengths)), lengths)
    depth = np.arange(offsets[-1]) - offsets[req]
    ids = (doc[req].astype(np.uint64) << np.uint64(8)) + depth.astype(np.uint64)
    last = rng.integers(1, BLOCK + 1, size=len(lengths))
    tokens = np.full(len(ids), BLOCK, np.int64)
    tokens[offsets[1:] - 1] = last  # partial last blocks
    return Trace(ids, tokens, offsets, BLOCK)


def python_fenwick_seconds(trace: Trace, limit: int) -> float:
    """A plain-Python stack-distance pass over the first `limit` accesses (for scale)."""
    ids = trace.block_ids[:limit].tolist()
    n = len(ids)
    tree = [0] * (n + 1)
    last: dict[int, int] = {}
    start = time.perf_counter()
    for t, block in enumerate(ids, start=1):
        prev = last.get(block)
        if prev is not None:
            i, s = prev - 1, 0
            while i > 0:
                s += tree[i]
                i -= i & -i
            i = prev
            while i <= n:
                tree[i] -= 1
                i += i & -i
        i = t
        while i <= n:
            tree[i] += 1
            i += i & -i
        last[block] = t
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--accesses", type=int, default=10_000_000)
    ap.add_argument("--zipf", type=float, default=1.0)
    args = ap.parse_args()

    exact_curve(trace_from_requests([([1], [1])], BLOCK))  # build and load the kernel once
    trace = zipf_trace(args.accesses, args.zipf)
    print(
        f"trace: {trace.accesses:,} block accesses, {trace.requests:,} requests, Zipf {args.zipf}"
    )

    t0 = time.perf_counter()
    exact = exact_curve(trace)
    t_exact = time.perf_counter() - t0
    print(
        f"exact curve:   {t_exact:6.2f} s  ({trace.accesses / t_exact / 1e6:.1f} M accesses/s, "
        f"{exact.distinct_blocks:,} distinct blocks, target <= 10 s: "
        f"{'ok' if t_exact <= 10 else 'MISSED'})"
    )

    caps = np.unique(np.geomspace(BLOCK, exact.saturation_tokens, 400).astype(np.int64))
    truth = exact.hit_rates(caps)
    for rate in (0.1, 0.01):
        t0 = time.perf_counter()
        approx = sampled_curve(trace, rate)
        took = time.perf_counter() - t0
        err = np.abs(approx.hit_rates(caps) - truth).max() * 100
        print(
            f"sampled {rate:<5}: {took:6.2f} s  (x{t_exact / took:.2f} vs exact, "
            f"{approx.sampled_accesses / trace.accesses:.0%} of accesses in the pass), "
            f"worst error {err:.2f} points (target <= 1: {'ok' if err <= 1 else 'MISSED'})"
        )

    slice_ = 300_000
    t_py = python_fenwick_seconds(trace, slice_) * trace.accesses / slice_
    print(
        f"pure Python Fenwick (extrapolated from {slice_:,}): {t_py:6.1f} s  "
        f"(C pass is x{t_py / t_exact:.0f} faster)"
    )

    lines = []
    for r in range(min(trace.requests, 50_000)):
        s, e = trace.offsets[r], trace.offsets[r + 1]
        n = int(trace.block_tokens[s:e].sum())
        lines.append(
            json.dumps(
                {
                    "timestamp": r,
                    "input_length": n,
                    "output_length": 1,
                    "hash_ids": trace.block_ids[s:e].tolist(),
                }
            )
        )
    t0 = time.perf_counter()
    parsed = parse_mooncake(lines)
    took = time.perf_counter() - t0
    print(
        f"Mooncake parse: {parsed.accesses / took / 1e6:.2f} M accesses/s "
        f"({len(lines):,} lines in {took:.2f} s; "
        f"10M accesses: ~{1e7 * took / parsed.accesses:.0f} s)"
    )


if __name__ == "__main__":
    main()
