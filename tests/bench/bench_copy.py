"""Copy-kernel benchmark: the DESIGN target, measured side by side in one run.

Target: host backend, layer_first, one layer of 32K MLA tokens (1152 B per token) moves at
>= 90% of one plain memcpy of the same bytes (same C library, same run). page_first_direct's
figure and segment count are printed next to it; page_first's too, for the submission lesson.
Run: .venv/bin/python tests/bench/bench_copy.py [--repeats N] [--threads N]
Exits 1 when the target is missed, so it can gate a release check (not a unit test: timing).
"""

from __future__ import annotations

import argparse
import sys

from xputune.kernels import bench

TARGET = 0.90


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--item-size", type=int, default=1152)
    parser.add_argument("--page-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--threads", type=int, default=0, help="host threads (0 = automatic)")
    args = parser.parse_args()
    print(f"{args.tokens} tokens x 1 layer, {args.item_size} B/token, page {args.page_size}, "
          f"{args.repeats} pairs, host threads: {args.threads or 'auto'}")  # fmt: skip
    print("GB/s: best run; ratio: median over back-to-back pairs of memcpy time / op time")
    header = (f"{'pattern':<11}{'layout':<19}{'dir':<5}{'segments':>9}{'GB/s':>8}"
              f"{'memcpy':>8}{'ratio':>7}")  # fmt: skip
    print(header)
    print("-" * len(header))
    worst = float("inf")
    for pattern in ("contiguous", "pages"):
        _, rows = bench.run(
            tokens=args.tokens, layers=1, pool_layers=4, item_size=args.item_size,
            page_size=args.page_size, pattern=pattern, repeats=args.repeats,
            threads=args.threads,
        )  # fmt: skip
        for r in rows:
            print(f"{pattern:<11}{r.layout:<19}{r.direction:<5}{r.segments:>9,}{r.gbps:>8.2f}"
                  f"{r.baseline_gbps:>8.2f}{r.ratio:>7.2f}")  # fmt: skip
            if r.layout == "layer_first":
                worst = min(worst, r.ratio)
    verdict = "met" if worst >= TARGET else "MISSED"
    print(f"\nlayer_first worst ratio vs memcpy: {worst:.2f} (target {TARGET:.2f}): {verdict}")
    return 0 if worst >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
