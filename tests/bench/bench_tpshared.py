"""TP=8 host memory: one TP-shared buffer against one private buffer per rank (field report 2.7).

Each of 8 processes maps (shared) or allocates (private) the host KV buffer and touches all of
it; while all hold it, the parent sums their PSS, both for the buffer mapping alone (smaps) and
for the whole process (smaps_rollup, which adds each interpreter's own memory).

The shared buffer is an unnamed O_TMPFILE in SHM_DIR handed to the ranks over a Unix socket.
Its huge pages depend on that tmpfs's huge= option; to measure THP backing without touching
/dev/shm, mount a private tmpfs (`mount -t tmpfs -o size=1g,huge=advise tmpfs /tmp/h`) and pass
it as SHM_DIR. "THP share" is the huge-mapped part (AnonHugePages + ShmemPmdMapped) of RSS.

Run: .venv/bin/python tests/bench/bench_tpshared.py [SIZE [SHM_DIR]]   (default 256M /dev/shm)
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
import uuid

from xputune.hicache import linux_mm
from xputune.hicache.hostbench import parse_size
from xputune.hicache.hostbuf import HostBuffer
from xputune.hicache.tpshared import SHM_DIR, TpSharedBuffer, shm_huge_mode

TP = 8


def _rank(mode, name, size, rank, ready, hold, shm_dir=SHM_DIR):
    if mode == "shared":
        buf = TpSharedBuffer(name, size, rank, TP, timeout=120, shm_dir=shm_dir)
    else:
        buf = HostBuffer(size)
    ready.put((rank, os.getpid(), buf.address, buf.timings))
    hold.wait(120)
    buf.close()


def _pss(pid: int) -> int:
    """The process's proportional set size in bytes (the kernel's smaps_rollup)."""
    from xputune.host import open_host
    from xputune.host.values import meminfo_bytes

    path = f"/proc/{pid}/smaps_rollup"
    return meminfo_bytes(open_host().read_text(path), "Pss", path)


def measure(mode: str, size: int, shm_dir: str = SHM_DIR) -> dict:
    ctx = mp.get_context("fork")
    ready, hold, name = ctx.Queue(), ctx.Event(), f"bench-{uuid.uuid4().hex[:8]}"
    t = time.perf_counter()
    procs = [
        ctx.Process(target=_rank, args=(mode, name, size, r, ready, hold, shm_dir))
        for r in range(TP)
    ]
    for p in procs:
        p.start()
    try:
        got = [ready.get(timeout=180) for _ in range(TP)]
        setup = time.perf_counter() - t
        maps = [linux_mm.mapping_stats(addr, pid) for _, pid, addr, _ in got]
        whole = [_pss(pid) for _, pid, _, _ in got]
    finally:
        hold.set()
        for p in procs:
            p.join(60)
    return {
        "buffer_pss": sum(m.pss for m in maps),
        "buffer_rss": sum(m.rss for m in maps),
        "process_pss": sum(whole),
        "huge": sum(m.anon_huge + m.shmem_pmd for m in maps),
        "setup_s": setup,
    }


def main() -> None:
    size = parse_size(sys.argv[1]) if len(sys.argv) > 1 else 256 << 20
    shm_dir = sys.argv[2] if len(sys.argv) > 2 else SHM_DIR
    mib = 2**20
    with open("/proc/self/mountinfo") as fh:
        huge = shm_huge_mode(fh.read(), shm_dir)
    print(f"TP={TP}, host buffer {size / mib:.0f} MiB per rank, {shm_dir} huge={huge}")
    print(
        f"{'mode':>8} {'buffer PSS':>12} {'x buffer':>9} {'buffer RSS':>12} "
        f"{'process PSS':>12} {'huge-mapped':>12} {'setup':>8}"
    )
    results = {mode: measure(mode, size, shm_dir) for mode in ("private", "shared")}
    for mode, r in results.items():
        print(
            f"{mode:>8} {r['buffer_pss'] / mib:>8.1f} MiB {r['buffer_pss'] / size:>8.2f}x "
            f"{r['buffer_rss'] / mib:>8.0f} MiB {r['process_pss'] / mib:>8.1f} MiB "
            f"{r['huge'] / mib:>8.0f} MiB {r['setup_s']:>7.2f}s"
        )
    p, s = results["private"], results["shared"]
    print(
        f"shared/private: buffer PSS {s['buffer_pss'] / p['buffer_pss']:.3f}, "
        f"whole-process PSS {s['process_pss'] / p['process_pss']:.3f} "
        f"(saved {(p['process_pss'] - s['process_pss']) / mib:.0f} MiB)"
    )
    print(f"shared THP share: {s['huge'] / max(s['buffer_rss'], 1):.1%} of RSS huge-mapped")


if __name__ == "__main__":
    main()
