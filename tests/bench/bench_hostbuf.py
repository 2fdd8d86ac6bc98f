"""Pinning cost of a host KV buffer: 4 KB pages vs MADV_HUGEPAGE, side by side (field report 2.4).

Two figures per size: "warm pin" pins an already faulted buffer (what `xputune bench host`
reports), "cold pin" registers an untouched buffer, so the pin also faults every page in (what
happens when a runtime registers a fresh allocation).

Run: .venv/bin/python tests/bench/bench_hostbuf.py [SIZE ...]   (default 256M 1G)
"""

from __future__ import annotations

import sys

from xputune.hicache.hostbench import bench_host, parse_size, plan_size
from xputune.hicache.hostbuf import HostBuffer, mlock_registrar


def cold_pin(size: int, huge: bool) -> tuple[float, int]:
    with HostBuffer(size, huge=huge, populate=False, registrar=mlock_registrar()) as buf:
        return buf.timings["register_s"], buf.stats().anon_huge


def main() -> None:
    sizes = [parse_size(s) for s in sys.argv[1:]] or [256 << 20, 1 << 30]
    print(
        f"{'size':>9} {'pages':>5} {'fault':>9} {'warm pin':>10} {'cold pin':>10} "
        f"{'huge':>6} {'entries':>10} {'VmPTE+':>9}"
    )
    for want in sizes:
        size, _ = plan_size(want)
        data = bench_host(size, pin="mlock")
        cold = {huge: cold_pin(size, huge) for huge in (False, True)}
        for run in data["runs"]:
            huge = run["pages"] == "thp"
            print(
                f"{size >> 20:>6} MiB {run['pages']:>5} {run['populate_s'] * 1e3:>7.1f}ms "
                f"{run['pin_s'] * 1e3:>8.2f}ms {cold[huge][0] * 1e3:>8.1f}ms "
                f"{100 * run['anon_huge_bytes'] / size:>5.0f}% {run['translation_entries']:>10,} "
                f"{run['page_table_bytes'] >> 10:>6} KiB"
            )
        small, big = data["runs"]
        print(
            f"{'':>9} ratio 4k/thp: warm pin {small['pin_s'] / big['pin_s']:.0f}x, "
            f"cold pin {cold[False][0] / cold[True][0]:.2f}x, "
            f"entries {data['translation_ratio']:.0f}x"
        )


if __name__ == "__main__":
    main()
