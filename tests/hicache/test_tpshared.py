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


def _group(world: int, size: int = SMALL, name: str | None = None, **kw) -> list[TpSharedBuffer]:
    """All ranks of one group, built concurrently on threads (rank 0 waits for the others)."""
    name, out, errors = name or _name(), {}, []

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


def _shm() -> set[str]:
    """/dev/shm entries that could be this process tree's: other test sessions and SGLang
    servers running beside the suite (sglang_*, sgl_*) share /dev/shm."""
    others = ("xputune-test-", "sem.", "sglang_", "sgl_")
    return {f for f in os.listdir(SHM_DIR) if not f.startswith(others)}


def _leftover(before: set[str], name: str) -> list[str]:
    """New /dev/shm entries since `before` that could be ours (any name with ours, or any
    xputune file that is not another session's test name)."""
    return sorted(f for f in set(os.listdir(SHM_DIR)) - before if name in f or f in _shm())


def test_nothing_is_ever_named_in_dev_shm_and_the_buffer_is_unnamed():
    before, name = set(os.listdir(SHM_DIR)), _name()
    bufs = _group(2, name=name)
    try:
        assert not _leftover(before, name)
        assert bufs[0].backing.endswith("(O_TMPFILE, unnamed)") or "memfd" in bufs[0].backing
        assert not os.path.exists(bufs[0].path)  # the rendezvous socket is gone too
    finally:
        for b in bufs:
            b.close()
    assert not _leftover(before, name)


def test_a_squatter_in_dev_shm_cannot_block_or_feed_the_group():
    name = _name()
    squat = os.path.join(SHM_DIR, FILE_PREFIX + name)  # the old, guessable name
    fd = os.open(squat, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o666)
    os.write(fd, b"attacker data")
    os.close(fd)
    try:
        out = {}
        threads = [
            threading.Thread(
                target=lambda r: out.__setitem__(r, TpSharedBuffer(name, SMALL, r, 2, timeout=10)),
                args=(r,),
            )
            for r in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert set(out) == {0, 1}
        a = out[1].array()
        assert not a[:13].any()  # rank 1 maps rank 0's zeroed buffer, not the squatter's
        del a
        for b in out.values():
            b.close()
        with open(squat, "rb") as fh:
            assert fh.read() == b"attacker data"  # not ours: left alone
    finally:
        os.unlink(squat)


def test_the_rendezvous_directory_must_be_private(tmp_path):
    open_dir = tmp_path / "rv"
    open_dir.mkdir(mode=0o777)
    os.chmod(open_dir, 0o777)
    with pytest.raises(HostError, match="not private"):
        TpSharedBuffer(_name(), SMALL, 0, 1, rendezvous_dir=str(open_dir))
    link = tmp_path / "link"
    os.symlink(tmp_path, link)
    with pytest.raises(HostError, match="not a directory"):
        TpSharedBuffer(_name(), SMALL, 0, 1, rendezvous_dir=str(link))


def test_a_socket_left_by_a_killed_rank0_is_replaced_and_never_attached(tmp_path):
    import socket

    rv = tmp_path / "rv"
    rv.mkdir(mode=0o700)
    name = _name()
    probe = TpSharedBuffer(name, SMALL, 0, 1, rendezvous_dir=str(rv))
    path = probe.path
    probe.close()
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)  # bound, never listening: what a kill -9 leaves
    dead.close()
    with pytest.raises(HostError, match="timed out waiting for rank 0"):
        TpSharedBuffer(name, SMALL, 1, 2, timeout=0.3, rendezvous_dir=str(rv))
    bufs = _group(2, name=name, rendezvous_dir=str(rv))  # a new rank 0 replaces it
    for b in bufs:
        b.close()
    assert os.listdir(rv) == []


def test_missing_rank0_times_out_with_a_clear_error():
    with pytest.raises(HostError, match="timed out waiting for rank 0"):
        TpSharedBuffer(_name(), SMALL, 1, 2, timeout=0.05)


def test_rank0_alone_in_a_group_times_out_and_cleans_up():
    name = _name()
    before = set(os.listdir(SHM_DIR))
    with pytest.raises(HostError, match="every TP rank") as err:
        TpSharedBuffer(name, SMALL, 0, 2, timeout=0.2)
    assert "ranks [1] never came" in str(err.value)
    assert not os.path.exists(os.path.join(SHM_DIR, FILE_PREFIX + name))
    assert not _leftover(before, name)


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


# -- rank 0 killed at each stage: nothing in /dev/shm, ever --------------------------------
_RANK = """
import sys
from xputune.errors import HostError
from xputune.hicache.tpshared import TpSharedBuffer
name, rank, rv = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    buf = TpSharedBuffer(name, 4 << 20, rank, 3, timeout=3, rendezvous_dir=rv)
except HostError as exc:
    print("error:", exc)
    sys.exit(3)
print("ok")
buf.close()
"""


@pytest.mark.parametrize("stage", ["created", "populated", "listening", "handed"])
def test_rank0_killed_at_any_stage_leaves_nothing_in_dev_shm(tmp_path, stage):
    import subprocess
    import sys

    from xputune.hicache.tpshared import KILL_ENV

    rv = tmp_path / "rv"
    rv.mkdir(mode=0o700)
    name, before = _name(), set(os.listdir(SHM_DIR))
    env = {**os.environ, KILL_ENV: stage}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RANK, name, str(r), str(rv)],
            env=env if r == 0 else {k: v for k, v in env.items() if k != KILL_ENV},
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in range(3)
    ]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert procs[0].returncode == -9
    # Ranks that got no buffer fail clearly; one that got it before the kill works on alone.
    assert all(p.returncode in (0, 3) for p in procs[1:]), outs
    assert any(p.returncode == 3 for p in procs[1:])
    assert not _leftover(before, name)
    # At most the dead rank 0's socket: no data behind it, replaced by the next rank 0.
    assert [f for f in os.listdir(rv) if not f.endswith(".sock")] == []


@pytest.fixture
def huge_tmpfs(tmp_path):
    """A private tmpfs mounted huge=advise (root only; /dev/shm itself is left as it is)."""
    import subprocess

    point = tmp_path / "huge"
    point.mkdir()
    cmd = ["mount", "-t", "tmpfs", "-o", "size=64m,huge=advise", "tmpfs", str(point)]
    if os.geteuid() != 0 or subprocess.run(cmd, capture_output=True, check=False).returncode:
        pytest.skip("cannot mount a private tmpfs with huge=advise here")
    try:
        yield str(point)
    finally:
        subprocess.run(["umount", str(point)], capture_output=True, check=False)


def test_the_unnamed_buffer_keeps_thp_backing_on_a_huge_tmpfs(huge_tmpfs):
    bufs = _group(2, size=8 << 20, shm_dir=huge_tmpfs)
    try:
        assert all(b.backing.startswith(huge_tmpfs) for b in bufs[:1])
        assert os.listdir(huge_tmpfs) == []  # unnamed there too
        stats = [b.stats() for b in bufs]
        assert all(s.shmem_pmd >= (8 << 20) for s in stats), stats
    finally:
        for b in bufs:
            b.close()
