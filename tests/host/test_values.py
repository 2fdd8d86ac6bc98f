"""The one reader of host value formats: what real kernels write, and nothing else, is accepted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xputune.errors import HostDataError
from xputune.host.values import (
    clean,
    current_choice,
    find_mount,
    format_cpulist,
    meminfo_bytes,
    parse_cpulist,
    parse_cpumask,
    parse_distances,
    parse_hex,
    parse_link_speed,
    parse_link_width,
    parse_net_speed,
    parse_numa_node,
    parse_size,
)

P = "/sys/x"


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3\n\x00", (0, 1, 2, 3)),  # older kernels left the NUL in node/online
        ("0-1,4\n", (0, 1, 4)),
        ("\n", ()),  # a memory-only node
        ("1,3,5,7,9,11,13,15,17,19,21,23\n", tuple(range(1, 24, 2))),
    ],
)
def test_cpulists_as_kernels_write_them(text: str, cpus: tuple[int, ...]) -> None:
    assert parse_cpulist(text, P) == cpus


@pytest.mark.parametrize("text", ["0-", "a-b", "3-1", "-1", "0,,1", "0-3\x00junk"])
def test_cpulist_garbage_is_bad_data(text: str) -> None:
    with pytest.raises(HostDataError, match=P):
        parse_cpulist(text, P)


@given(st.sets(st.integers(0, 4095), max_size=300))
def test_cpulist_round_trips(cpus: set[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus), P) == tuple(sorted(cpus))


@given(st.sets(st.integers(0, 1023), max_size=200))
def test_cpumask_matches_the_kernels_bitmap_format(cpus: set[int]) -> None:
    mask = sum(1 << c for c in cpus)
    words = max(1, -(-(max(cpus, default=0) + 1) // 32))
    text = ",".join(f"{(mask >> (32 * i)) & 0xFFFFFFFF:08x}" for i in reversed(range(words)))
    assert parse_cpumask(text + "\n", P) == tuple(sorted(cpus))


def test_cpumask_of_a_real_ia64_node() -> None:
    # hwloc's 128ia64-17n4s2c recording: node1/cpumap, nothing else.
    text = "00000000,00000000,00000000,00000000,00000000,00000000,00000000,0000ff00\n"
    assert parse_cpumask(text, P) == tuple(range(8, 16))


@given(st.text(max_size=40))
def test_every_parser_either_answers_or_says_bad_data(text: str) -> None:
    for parse in (
        parse_cpulist,
        parse_cpumask,
        parse_distances,
        parse_hex,
        parse_link_speed,
        parse_link_width,
        parse_net_speed,
        parse_numa_node,
        current_choice,
        parse_size,
    ):
        try:
            parse(text, P)
        except HostDataError as exc:
            assert exc.path == P and "\n" not in str(exc)


def test_hex_ids() -> None:
    assert parse_hex("0x1d22\n", P) == 0x1D22
    assert parse_hex("1d22", P) == 0x1D22  # bare hex, as some tools record it
    assert parse_hex("0x078000", P, bits=24) == 0x078000
    for bad in ("0x", "0xzz", "", "0x10000"):
        with pytest.raises(HostDataError):
            parse_hex(bad, P)


def test_link_speeds_old_and_new_kernels() -> None:
    assert parse_link_speed("32.0 GT/s PCIe\n", P) == 32.0
    assert parse_link_speed("8 GT/s\n", P) == 8.0
    assert parse_link_speed("2.5 GT/s", P) == 2.5
    assert parse_link_speed("Unknown\n", P) is None
    assert parse_link_speed("Unknown speed", P) is None
    with pytest.raises(HostDataError):
        parse_link_speed("", P)
    for no_speed in ("0 GT/s", "5000 GT/s", "1" * 400 + " GT/s"):  # no link runs so
        with pytest.raises(HostDataError):
            parse_link_speed(no_speed, P)
    assert parse_link_width("0\n", P) is None
    assert parse_link_width("16\n", P) == 16


@pytest.mark.parametrize(
    ("text", "speed"),
    [("", None), ("-1", None), ("4294967295", None), ("200000\n", 200000), ("0", None)],
)
def test_net_speed_unknowns(text: str, speed: int | None) -> None:
    assert parse_net_speed(text, P) == speed


def test_numa_node() -> None:
    assert parse_numa_node("-1\n", P) is None
    assert parse_numa_node("3\n", P) == 3
    with pytest.raises(HostDataError):
        parse_numa_node("-2", P)


def test_selector() -> None:
    assert current_choice("always [madvise] never\n", P) == "madvise"
    assert current_choice("[none] integrity confidentiality\n", P) == "none"
    with pytest.raises(HostDataError):
        current_choice("always madvise never", P)


def test_meminfo_node_and_whole_host_forms() -> None:
    node = "Node 0 MemTotal:       201326592 kB\nNode 0 MemFree:        1024 kB\n"
    assert meminfo_bytes(node, "MemTotal", P) == 201326592 * 1024
    assert meminfo_bytes("MemTotal:  16 kB\nHugePages_Total: 4\n", "HugePages_Total", P) == 4
    with pytest.raises(HostDataError, match="missing"):
        meminfo_bytes(node, "MemAvailable", P)
    with pytest.raises(HostDataError):
        meminfo_bytes("Node 0 MemTotal: lots kB\n", "MemTotal", P)


MOUNTINFO = (
    "26 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "garbage line that no kernel writes\n"
    "30 26 0:30 / /dev/shm rw,nosuid,nodev shared:5 - tmpfs tmpfs rw,size=65536k\n"
    "40 30 0:40 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=64g,huge=advise\n"
    "41 26 0:41 / /mnt/with\\040space rw - tmpfs tmpfs rw\n"
)


def test_mountinfo_top_mount_wins_and_odd_lines_elsewhere_cost_nothing() -> None:
    mount = find_mount(MOUNTINFO, "/dev/shm", P)
    assert mount is not None
    assert (mount.line, mount.fstype, mount.huge, mount.option("size")) == (
        3,
        "tmpfs",
        "advise",
        "64g",
    )
    assert find_mount(MOUNTINFO, "/mnt/with space", P) is not None
    assert find_mount(MOUNTINFO, "/nowhere", P) is None
    with pytest.raises(HostDataError):
        find_mount("1 2 3 4 /dev/shm broken\n", "/dev/shm", P)


def test_sizes() -> None:
    assert parse_size("64g", P) == 64 << 30
    assert parse_size("1048576k", P) == 1 << 30
    assert parse_size("50%", P) is None
    with pytest.raises(HostDataError):
        parse_size("big", P)


def test_clean_strips_nul_and_whitespace() -> None:
    assert clean(" 0-3\n\x00") == "0-3"
