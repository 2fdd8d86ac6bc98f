"""What a node has free: MemFree and what the kernel can hand back (topology/numa.py), read
from node meminfo as kernels write it (a node's has no MemAvailable line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import copy_tree
from tests.plan.busy_node import make_busy, node_meminfo
from xputune.errors import HostDataError
from xputune.host import open_host
from xputune.topology.discover import discover
from xputune.topology.numa import reclaimable_bytes

KB = 1024
MEMINFO = "sys/devices/system/node/node{}/meminfo"


def test_the_file_lru_and_kreclaimable_are_what_comes_back() -> None:
    text = node_meminfo(3, 201_326_592, 130_000_000)
    # Active(file) 1664665 + Inactive(file) 3329332 + KReclaimable 499399 kB
    assert reclaimable_bytes(text, "node3/meminfo") == (1_664_665 + 3_329_332 + 499_399) * KB


def test_before_4_20_sreclaimable_stands_for_kreclaimable() -> None:
    old = "".join(
        line + "\n"
        for line in node_meminfo(0, 16_384_000, 1_000_000).splitlines()
        if "KReclaimable" not in line
    )
    assert "SReclaimable:" in old and "KReclaimable" not in old
    assert reclaimable_bytes(old, "node0/meminfo") == (1_664_665 + 3_329_332 + 499_399) * KB


def test_a_meminfo_without_page_cache_lines_is_odd() -> None:
    with pytest.raises(HostDataError, match=r"Active\(file\)"):
        reclaimable_bytes("Node 0 MemTotal: 16384000 kB\nNode 0 MemFree: 8192000 kB\n", "m")


def test_a_busy_node_reads_as_busy_and_a_bare_one_warns(tmp_path: Path) -> None:
    root = copy_tree("h3c-hygon-p800", tmp_path / "box")
    make_busy(root, 3, held_gb=130)
    bare = root / MEMINFO.format(5)
    bare.write_text("Node 5 MemTotal:       201326592 kB\nNode 5 MemFree:        191338598 kB\n")
    topo = discover(open_host(str(root)))
    busy = topo.node(3)
    assert busy.memory_total_bytes == 201_326_592 * KB
    held = 130 * 10**9 // KB
    used = held + 4_993_997 + 832_332 + 18_432 + held // 512
    assert busy.memory_free_bytes == (201_326_592 - used) * KB
    assert busy.memory_reclaimable_bytes == (1_664_665 + 3_329_332 + 499_399) * KB
    five = topo.node(5)
    assert five.memory_free_bytes == 191_338_598 * KB and five.memory_reclaimable_bytes is None
    said = [w for w in topo.warnings if "node5/meminfo" in w]
    assert len(said) == 1 and "Active(file)" in said[0] and "taken as unknown" in said[0]
