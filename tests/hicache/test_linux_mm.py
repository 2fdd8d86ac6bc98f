"""smaps parsing and the libc wrappers."""

from __future__ import annotations

import mmap

import pytest

from xputune.hicache import linux_mm

SMAPS = """\
7f0000000000-7f0000200000 rw-p 00000000 00:00 0
Size:               2048 kB
Rss:                2048 kB
Pss:                1024 kB
AnonHugePages:      2048 kB
Locked:                0 kB
KernelPageSize:        4 kB
VmFlags: rd wr mr mw me ac hg dc
7f0000200000-7f0000400000 rw-s 00000000 00:01 42    /dev/shm/xputune-x (deleted)
Rss:                  12 kB
Pss:                   3 kB
ShmemPmdMapped:        0 kB
VmFlags: rd wr sh mr mw me ms
"""


def test_parse_smaps_picks_the_covering_block():
    first = linux_mm.parse_smaps(SMAPS, 0x7F0000100000)
    assert (first.rss, first.pss, first.anon_huge) == (2 << 20, 1 << 20, 2 << 20)
    assert {"hg", "dc"} <= set(first.vm_flags)
    second = linux_mm.parse_smaps(SMAPS, 0x7F0000200000)
    assert second.name == "/dev/shm/xputune-x (deleted)"
    assert (second.rss, second.pss) == (12 << 10, 3 << 10)
    with pytest.raises(LookupError):
        linux_mm.parse_smaps(SMAPS, 0x1000)


def test_live_mapping_stats_and_mlock():
    size = 1 << 20
    buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    addr = linux_mm.buffer_address(buf)
    try:
        linux_mm.mlock(addr, size)
        stats = linux_mm.mapping_stats(addr)
        assert stats.locked == size and stats.rss == size
        linux_mm.munlock(addr, size)
        assert linux_mm.mapping_stats(addr).locked == 0
    finally:
        buf.close()  # the address probe released its export


def test_getcpu_names_an_allowed_cpu():
    import os

    cpu, node = linux_mm.getcpu()
    assert cpu in os.sched_getaffinity(0) and node >= 0


def test_unknown_syscall_is_enosys():
    with pytest.raises(OSError):
        linux_mm.syscall_number("no_such_call")
