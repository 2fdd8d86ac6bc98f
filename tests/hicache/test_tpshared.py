"""TP-shared host buffer: creation rules, visibility, divergence self-check, and 1x memory."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import uuid

import numpy as np
import pytest

from xputune.errors import HostError
from xputune.hicache import linux_mm
from xputune.hicache.lifo import LifoSlotAllocator
from xputune.hicache.tpshared import (
    FILE_PREFIX,
    SHM_DIR,
    AllocatorDivergence,
    TpSharedBuffer,
    live_shm_huge_mode,
    shm_huge_mode,
)

SMALL = 4 << 20


def _name() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


def _group(world: int, size: int = SMALL, **kw) -> list[TpSharedBuffer]:
    """All ranks of one group, built concurrently on threads (rank 0 waits for the others)."""
    name, out, errors = _name(), {}, []

    def build(rank):
        try:
            out[rank] = TpSharedBuffer(name, size, rank, world, timeout=10, **kw)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for buf in out.values():
            buf.close()
        raise errors[0]
    return [out[r] for r in range(world)]


def test_group_shares_rank0_writes_and_the_file_is_private_then_gone():
    bufs = _group(3)
    try:
        assert all(b.file_mode == 0o600 for b in bufs)
        assert bufs[0].unlinked and not os.path.exists(bufs[0].path)
        assert [b.writes_to_host for b in bufs] == [True, False, False]
        src = bufs[0].array()
        src[:4] = [7, 8, 9, 10]
        for b in bufs[1:]:
            dst = b.array()
            assert dst[:4].tolist() == [7, 8, 9, 10]
            del dst
        del src
        assert bufs[1].stats().name.endswith("(deleted)")
        assert all(b.placement is not None and b.placement.ok for b in bufs)
    finally:
        for b in bufs:
            b.close()


def test_existing_file_is_never_reused():
    name = _name()
    path = os.path.join(SHM_DIR, FILE_PREFIX + name)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.close(fd)
    try:
        with pytest.raises(HostError, match="already exists"):
            TpSharedBuffer(name, SMALL, 0, 1)
        assert os.path.exists(path)  # not ours: left alone
    finally:
        os.unlink(path)


def test_attaching_rank_refuses_a_file_others_can_read():
    name = _name()
    path = os.path.join(SHM_DIR, FILE_PREFIX + name)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.fchmod(fd, 0o644)
    os.close(fd)
    try:
        with pytest.raises(HostError, match="refusing to share"):
            TpSharedBuffer(name, SMALL, 1, 2, timeout=1)
    finally:
        os.unlink(path)


def test_missing_rank0_times_out_with_a_clear_error():
    with pytest.raises(HostError, match="timed out waiting for rank 0"):
        TpSharedBuffer(_name(), SMALL, 1, 2, timeout=0.05)


def test_rank0_alone_in_a_group_times_out_and_cleans_up():
    name = _name()
    with pytest.raises(HostError, match="every TP rank"):
        TpSharedBuffer(name, SMALL, 0, 2, timeout=0.05)
    assert not os.path.exists(os.path.join(SHM_DIR, FILE_PREFIX + name))


@pytest.mark.parametrize(("name", "rank", "world"), [("a/b", 0, 1), ("ok", 2, 2), ("ok", 0, 0)])
def test_bad_arguments(name, rank, world):
    with pytest.raises(HostError):
        TpSharedBuffer(name, SMALL, rank, world)


def test_allocator_divergence_stops_every_rank():
    bufs = _group(3)
    try:
        allocs = [LifoSlotAllocator(64, 4, observer=b.publish_decisions) for b in bufs]
        for a in allocs:  # identical decisions: no complaint
            a.free(a.alloc(8))
            a.alloc(4)
        allocs[0].alloc(4)
        allocs[1].alloc(4)
        with pytest.raises(AllocatorDivergence, match="rank 2 differs"):
            allocs[2].alloc(8)  # a different decision at the same count
        with pytest.raises(AllocatorDivergence, match="another TP rank"):
            allocs[0].alloc(4)
    finally:
        for b in bufs:
            b.close()


def test_shm_huge_mode_reads_mountinfo():
    text = (
        "25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=100k\n"
        "26 24 0:24 / /dev/hugepages rw - hugetlbfs hugetlbfs rw,pagesize=2M\n"
        "30 25 0:27 / /dev/shm rw,relatime shared:5 - tmpfs tmpfs rw,size=1g,huge=advise\n"
    )
    assert shm_huge_mode(text) == "advise"  # the later (top) mount wins
    assert shm_huge_mode(text.splitlines()[0]) == "never"
    assert shm_huge_mode("") == "not mounted"


# -- the TP=8 memory figure -----------------------------------------------------------------

TP = 8
BIG = 64 << 20


def _pattern(n_words: int, step: int = 1) -> np.ndarray:
    return np.arange(0, n_words, step, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)


def _rank_main(name, rank, written, hold, reports):
    buf = TpSharedBuffer(name, BIG, rank, TP, timeout=60)
    words = buf.array("uint64")
    if rank == 0:
        words[:] = _pattern(len(words))
        written.set()
    written.wait(60)
    step = linux_mm.PAGE_SIZE // 8  # one word on every page proves every page is shared
    same = bool(np.array_equal(words[::step], _pattern(len(words), step)))
    del words
    exists = os.path.exists(buf.path)
    reports.put((rank, os.getpid(), buf.address, buf.file_mode, same, exists))
    hold.wait(60)
    buf.close()


def test_tp8_group_holds_one_copy_of_the_buffer():
    ctx = mp.get_context("fork")
    name, written, hold, reports = _name(), ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_rank_main, args=(name, r, written, hold, reports)) for r in range(TP)
    ]
    for p in procs:
        p.start()
    try:
        got = sorted(reports.get(timeout=60) for _ in range(TP))
        stats = [linux_mm.mapping_stats(addr, pid) for _, pid, addr, *_ in got]
    finally:
        hold.set()
        for p in procs:
            p.join(30)
    assert [p.exitcode for p in procs] == [0] * TP
    assert all(same for *_, same, _ in got), "a rank did not see rank 0's writes"
    assert {mode for _, _, _, mode, _, _ in got} == {0o600}
    assert not any(exists for *_, exists in got)
    assert not os.path.exists(os.path.join(SHM_DIR, FILE_PREFIX + name))
    assert all(s.rss >= BIG for s in stats)  # every rank touched the whole buffer
    pss = sum(s.pss for s in stats)
    rss = sum(s.rss for s in stats)
    # Each page is mapped by 8 processes and charged 1/8 to each: the group pays ~1x.
    assert pss == pytest.approx(BIG, rel=0.05)
    assert rss >= TP * BIG
    print(
        f"\nTP={TP} shared {BIG >> 20} MiB: sum PSS {pss / 2**20:.1f} MiB "
        f"({pss / BIG:.2f}x), sum RSS {rss / 2**20:.0f} MiB ({rss / BIG:.1f}x)"
    )


@pytest.mark.skipif(
    live_shm_huge_mode() not in ("advise", "always", "within_size"),
    reason="/dev/shm is not mounted with huge=advise/always",
)
def test_shared_buffer_is_huge_page_mapped_when_shm_allows():
    bufs = _group(2, size=8 << 20)
    try:
        assert all(b.address % linux_mm.HUGE_PAGE_SIZE == 0 for b in bufs)
        assert all(b.stats().shmem_pmd > 0 for b in bufs)
    finally:
        for b in bufs:
            b.close()
