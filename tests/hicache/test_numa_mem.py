"""NUMA policy syscalls and the placement verdict.

This machine may have one node; binding to it, interleaving over it and querying page nodes run
for real. The multi-node verdicts are checked on Placement values built by hand.
"""

from __future__ import annotations

import mmap

import pytest

from xputune.errors import HostError
from xputune.hicache import linux_mm, numa_mem
from xputune.hicache.numa_mem import Placement

SIZE = 4 << 20


@pytest.fixture
def region():
    buf = mmap.mmap(-1, SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    yield buf, linux_mm.buffer_address(buf)
    buf.close()


def test_online_and_allowed_nodes_are_consistent():
    online = numa_mem.online_nodes()
    assert online
    assert set(numa_mem.allowed_nodes()) <= set(online)


@pytest.mark.parametrize("mode", [numa_mem.MPOL_BIND, numa_mem.MPOL_INTERLEAVE])
def test_policy_on_range_is_reported_and_pages_follow_it(region, mode):
    buf, addr = region
    node = numa_mem.allowed_nodes()[0]
    numa_mem.mbind(addr, SIZE, mode, [node])
    assert numa_mem.get_mempolicy(addr) == (mode, (node,))
    before = numa_mem.check_placement(addr, SIZE, [node])
    assert before.missing == SIZE // linux_mm.PAGE_SIZE and not before.pages
    buf.madvise(linux_mm.MADV_POPULATE_WRITE)
    after = numa_mem.check_placement(addr, SIZE, [node])
    assert after.pages == {node: SIZE // linux_mm.PAGE_SIZE}
    assert after.ok and after.mode == numa_mem.MODE_NAMES[mode]


def test_sampling_spreads_over_the_range(region):
    _, addr = region
    nodes = numa_mem.page_nodes(addr, SIZE, samples=16)
    assert len(nodes) == 16


def test_thread_policy_is_restored():
    before = numa_mem.get_mempolicy()
    node = numa_mem.allowed_nodes()[0]
    with numa_mem.thread_policy(numa_mem.MPOL_INTERLEAVE, [node]):
        assert numa_mem.get_mempolicy() == (numa_mem.MPOL_INTERLEAVE, (node,))
    assert numa_mem.get_mempolicy() == before


def test_node_outside_the_allowed_set_is_a_clear_error(region):
    _, addr = region
    missing = max(numa_mem.online_nodes()) + 1
    with pytest.raises(HostError, match="may only use node"):
        numa_mem.mbind(addr, SIZE, numa_mem.MPOL_BIND, [missing])
    with pytest.raises(HostError, match="out of range"):
        numa_mem.mbind(addr, SIZE, numa_mem.MPOL_BIND, [5000])


def test_node_cpus_of_first_node_lists_this_cpu_or_is_memory_only():
    cpus = numa_mem.node_cpus(numa_mem.online_nodes()[0])
    assert all(isinstance(c, int) and c >= 0 for c in cpus)


# -- verdicts for hosts with several nodes (values, no hardware) ------------------------------


def test_bind_with_stray_pages_is_misplaced():
    p = Placement((1,), "bind", {1: 90, 3: 10})
    assert p.stray == 10 and not p.ok
    assert "MISPLACED" in p.describe()


def test_interleave_must_reach_every_node():
    assert Placement((0, 1, 2, 3), "interleave", {0: 25, 1: 25, 2: 25, 3: 25}).ok
    assert not Placement((0, 1, 2, 3), "interleave", {0: 50, 1: 50}).ok
    assert Placement((0, 1, 2, 3), "interleave", {0: 2}, missing=0).ok  # too few to judge


def test_first_touch_without_expectation_is_ok_anywhere():
    p = Placement((), "default", {0: 3, 5: 4}, missing=1)
    assert p.ok and p.sampled == 8
    assert p.as_dict()["pages_per_node"] == {"0": 3, "5": 4}


def test_parse_numa_maps_line():
    policy, pages = linux_mm.parse_numa_maps(
        "interleave:0-3 anon=512 dirty=512 N0=128 N1=128 N2=128 N3=128 kernelpagesize_kB=4"
    )
    assert policy == "interleave:0-3"
    assert pages == {0: 128, 1: 128, 2: 128, 3: 128}
