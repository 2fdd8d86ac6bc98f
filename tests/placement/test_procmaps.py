"""The numa_maps and smaps readers (host/procmaps.py) and /proc's process formats
(host/procinfo.py): real kernel lines read right, garbage read as garbage, never a traceback."""

from __future__ import annotations

import contextlib
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.placement.shapes import GIB, MIB, PAGE, Mapping
from xputune.errors import HostDataError
from xputune.host import procinfo
from xputune.host.procmaps import (
    Policy,
    covering,
    parse_numa_maps,
    parse_numa_maps_line,
    parse_policy,
    parse_smaps,
)

# Lines as kernels printed them (sources in tests/placement/shapes.py): this host's 6.18, LKML
# 2022 (a bound range on another node), hwloc-devel 2011 (2.6.27: no kernelpagesize_kB yet).
REAL = {
    "7f2e33200000 default anon=16384 dirty=16384 active=0 N0=16384 kernelpagesize_kB=4": (
        Policy("default", "", ()), None, {0: 16384}, 4),
    "7ff77e200000 bind:3 anon=262144 dirty=262144 active=0 N1=262144 kernelpagesize_kB=4": (
        Policy("bind", "", (3,)), None, {1: 262144}, 4),
    "7ffd861da000 bind:1 anon=1850875 dirty=1850873 swapcache=2 active=996836 N0=256407 "
    "N1=1594468": (Policy("bind", "", (1,)), None, {0: 256407, 1: 1594468}, None),
    "558d4419c000 default file=/root/.pyenv/versions/3.11.7/bin/python3.11 mapped=1 mapmax=5 "
    "N0=1 kernelpagesize_kB=4": (
        Policy("default", "", ()), "/root/.pyenv/versions/3.11.7/bin/python3.11", {0: 1}, 4),
    "558d4419e000 default file=/root/.pyenv/versions/3.11.7/bin/python3.11": (
        Policy("default", "", ()), "/root/.pyenv/versions/3.11.7/bin/python3.11", {}, None),
    "7e0000000000 interleave:0-7 file=/dev/shm/#1572\\040(deleted) dirty=100 mapmax=8 N0=13 "
    "N7=12 kernelpagesize_kB=4": (
        Policy("interleave", "", tuple(range(8))), "/dev/shm/#1572 (deleted)", {0: 13, 7: 12}, 4),
    "7f1c00000000 prefer:1 file=/anon_hugepage\\040(deleted) huge dirty=7628 N1=7628 "
    "kernelpagesize_kB=2048": (
        Policy("prefer", "", (1,)), "/anon_hugepage (deleted)", {1: 7628}, 2048),
    "7f00 weighted interleave:0-1 anon=4 dirty=4 N0=2 N1=2 kernelpagesize_kB=4": (
        Policy("weighted interleave", "", (0, 1)), None, {0: 2, 1: 2}, 4),
    "7f00 prefer (many)=static:0-1 anon=4 N0=4 kernelpagesize_kB=4": (
        Policy("prefer (many)", "static", (0, 1)), None, {0: 4}, 4),
    "7f00 bind=relative:2 anon=1 N2=1 kernelpagesize_kB=4": (
        Policy("bind", "relative", (2,)), None, {2: 1}, 4),
    "7ffd3a000000 default stack anon=19 dirty=19 N1=19 kernelpagesize_kB=4": (
        Policy("default", "", ()), None, {1: 19}, 4),
    "7f00 local anon=1 N0=1 kernelpagesize_kB=4": (Policy("local", "", ()), None, {0: 1}, 4),
}  # fmt: skip


@pytest.mark.parametrize("line", sorted(REAL))
def test_real_numa_maps_lines(line: str) -> None:
    policy, file, pages, page_kb = REAL[line]
    got = parse_numa_maps_line(line, "numa_maps")
    assert (got.policy, got.file, got.pages, got.page_kb) == (policy, file, pages, page_kb)


def test_bytes_per_node_use_the_kernel_page_size() -> None:
    thp = parse_numa_maps_line("7f00 default anon=16384 N0=16384 kernelpagesize_kB=4")
    assert thp.bytes_per_node == {0: 64 * MIB}  # 4 KB units, even on huge pages
    hugetlb = parse_numa_maps_line("7f00 bind:1 huge dirty=2 N1=2 kernelpagesize_kB=2048")
    assert hugetlb.bytes_per_node == {1: 4 * MIB} and hugetlb.marks == ("huge",)


def test_policy_text_round_trips() -> None:
    for text in ("default", "bind:0", "interleave:0-3,5", "prefer (many)=static:0-1", "local"):
        assert str(parse_policy(text, "p")) == text
    for bad in ("", "bind:", "bind:x", "bi#nd:0", "bind=st4tic:0"):
        with pytest.raises(HostDataError):
            parse_policy(bad, "p")


@pytest.mark.parametrize(
    "line",
    ["garbage", "7f00", "7f00 ", "zz00 default", "7f00 bind:0 N0=abc", "7f00 bind:0 N0",
     "7f00 default anon=1 kernelpagesize_kB=0", "7f00 bind:0 anon=" + "9" * 30,
     "7f00000000000000000 default"],
)  # fmt: skip
def test_garbage_numa_maps_lines_are_named(line: str) -> None:
    lines, bad = parse_numa_maps(f"7f2e33200000 default anon=1 N0=1 kernelpagesize_kB=4\n{line}\n")
    assert list(lines) == [0x7F2E33200000]
    assert len(bad) == 1 and bad[0].path == "numa_maps"


def test_a_generated_mapping_reads_back() -> None:
    m = Mapping(0x7F0000000000, 2 * GIB, policy="bind:3", pages={1: 2 * GIB // PAGE},
                huge=2 * GIB, flags="rd wr mr mw me ac hg dc", thp_eligible=1)  # fmt: skip
    entries, bad = parse_smaps(m.smaps())
    assert not bad and len(entries) == 1
    entry = entries[0]
    assert (entry.start, entry.size, entry.name) == (m.start, 2 * GIB, "")
    assert entry.resident == entry.huge == 2 * GIB and entry.thp_eligible is True
    assert "hg" in entry.vm_flags
    line = parse_numa_maps_line(m.numa_line())
    assert line.start == m.start and line.bytes_per_node == {1: 2 * GIB}


SMAPS = """\
7f0000000000-7f0000200000 rw-p 00000000 00:00 0 
Size:               2048 kB
Rss:                2048 kB
AnonHugePages:      2048 kB
THPeligible:    1
ProtectionKey:         0
VmFlags: rd wr mr mw me ac hg dc
7f0000200000-7f0000400000 rw-s 00000000 00:01 42                         /dev/shm/#42 (deleted)
Size:               2048 kB
Rss:                  12 kB
Shared_Hugetlb:        0 kB
VmFlags: rd wr sh mr mw me ms
"""  # noqa: W291 (the kernel ends an anonymous header with a space)


def test_smaps_blocks_and_names() -> None:
    entries, bad = parse_smaps(SMAPS)
    assert not bad
    first, second = entries
    assert first.thp_eligible and first.huge == 2 * MIB and not first.shared
    assert second.name == "/dev/shm/#42 (deleted)" and second.shared and second.resident == 12288
    assert covering(entries, 0x7F0000300000) is second and covering(entries, 0x1000) is None


@pytest.mark.parametrize(
    ("line", "kept"),
    [("Rss: lots kB", 2), ("THPeligible: maybe", 2), ("no colon here", 2),
     ("7f0000400000-7f0000300000 rw-p 00000000 00:00 0", 2),  # ends before it starts
     ("7f0000400000-7f0000500000 rw-p", 2), ("Rss:  " + "9" * 30 + " kB", 2)],
)  # fmt: skip
def test_garbage_smaps_lines_are_named(line: str, kept: int) -> None:
    entries, bad = parse_smaps(SMAPS + line + "\n")
    assert len(entries) == kept and len(bad) == 1


LINE_CHARS = string.ascii_letters + string.digits + " =:-_()[]#/\\\t.,"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=LINE_CHARS, max_size=120))
def test_any_numa_maps_text_is_a_line_or_named_garbage(text: str) -> None:
    lines, bad = parse_numa_maps(text, "numa_maps")
    assert len(lines) + len(bad) <= max(1, len(text.splitlines()))
    for exc in bad:
        assert isinstance(exc, HostDataError) and exc.path == "numa_maps"
    for line in lines.values():
        assert all(n >= 0 and c >= 0 for n, c in line.pages.items())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=LINE_CHARS, max_size=80), max_size=12))
def test_any_smaps_text_is_mappings_or_named_garbage(lines: list[str]) -> None:
    entries, bad = parse_smaps(SMAPS + "\n".join(lines), "smaps")
    assert all(isinstance(e, HostDataError) and e.path == "smaps" for e in bad)
    assert all(e.end >= e.start and all(v >= 0 for v in e.sizes.values()) for e in entries)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_as_cmdline_environ_and_stat(data: bytes) -> None:
    procinfo.nul_fields(data)
    procinfo.environ_vars(data)
    text = data.decode("utf-8", "replace")
    with contextlib.suppress(HostDataError):
        procinfo.parse_stat(text, "stat")
    procinfo.listening_inodes(text, 30000, "tcp")


def test_stat_with_a_comm_that_holds_parentheses() -> None:
    got = procinfo.parse_stat("4164 (sglang::sch) x) S 4100 4100 3990 0 -1", "stat")
    assert (got.pid, got.comm, got.state, got.ppid) == (4164, "sglang::sch) x", "S", 4100)


def test_a_retitled_process_has_no_environment() -> None:
    assert procinfo.environ_vars(b"\0" * 2811) == {}
    assert procinfo.nul_fields(b"sglang::scheduler_TP3" + b"\0" * 100) == ["sglang::scheduler_TP3"]


def test_listening_sockets_and_fd_links() -> None:
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
        "   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 882231\n"
        "   1: 0100007F:7530 0100007F:D2E8 01 00000000:00000000 00:00000000 00000000  0 0 882599\n"
        "   2: garbage\n"
    )
    found, bad = procinfo.listening_inodes(table, 30000, "/proc/net/tcp")
    assert found == {882231} and len(bad) == 1
    assert procinfo.socket_inode("socket:[882231]") == 882231
    assert procinfo.socket_inode("pipe:[1]") is None and procinfo.socket_inode("socket:[x]") is None
