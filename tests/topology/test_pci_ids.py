"""pci.ids names found where they are asked for (PciIdsFile) are those of the whole parse.

parse_pci_ids reads the whole file; PciIdsFile searches it for the vendors and devices a
probe asks about. The two must give the same name for every id, present or not: on pci.ids
files generated in the file's own layout (vendors, devices, subsystems, comments, blank lines,
the class list after them, a vendor named twice), on the real recording's trimmed pci.ids (and
a whole discovery of it) and on the system's own pci.ids where there is one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures.trees import host_tree
from xputune.host.view import DirView
from xputune.topology.ids import PCI_IDS_PATHS, PciIdsFile, PciNames, id_table, parse_pci_ids

#: the ids asked about beyond those in a file: absent vendors and devices, and the bounds
PROBES = (0x0000, 0x0001, 0x10DE, 0x8086, 0x1AF4, 0xFFFF)


def _same_names(data, extra: tuple[int, ...] = PROBES, prefetch: tuple[int, ...] = ()) -> None:
    """`data`: bytes, or a mapping of them; `prefetch`: vendors looked up together first."""
    vendors, devices = parse_pci_ids(data[:].decode("utf-8", "replace"))
    lazy = PciIdsFile(data)
    lazy.prefetch(prefetch)
    for vendor_id in {*vendors, *(v for v, _ in devices), *extra}:
        assert lazy.vendor(vendor_id) == vendors.get(vendor_id), hex(vendor_id)
        asked = {d for v, d in devices if v == vendor_id} | set(extra)
        for device_id in asked:
            key = (vendor_id, device_id)
            assert lazy.device(*key) == devices.get(key), (hex(vendor_id), hex(device_id))


NAME = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), max_codepoint=0x2FF),
    max_size=12,
)
HEX4 = st.integers(0, 0xFFFF).map(lambda v: f"{v:04x}")
SMALL_HEX4 = st.integers(0, 7).map(lambda v: f"{v:04x}")  # collide often
ID = st.one_of(HEX4, SMALL_HEX4)


@st.composite
def pci_ids_files(draw) -> bytes:
    """A pci.ids in the file's layout: comments and blank lines anywhere, vendors (some more
    than once) with devices (some more than once) and subsystems, then the class list, whose
    lines must name nothing."""
    lines: list[str] = []
    junk = st.sampled_from(["", "# a comment", "#\t0000  commented out", "\t# a note"])
    for _ in range(draw(st.integers(0, 8))):
        if draw(st.booleans()):
            lines.append(draw(junk))
        lines.append(f"{draw(ID)}  {draw(NAME)}")
        for _ in range(draw(st.integers(0, 5))):
            lines.append(f"\t{draw(ID)}  {draw(NAME)}")
            if draw(st.booleans()):
                lines.append(f"\t\t{draw(ID)} {draw(ID)}  {draw(NAME)}")
            if draw(st.booleans()):
                lines.append(draw(junk))
    if draw(st.booleans()):
        lines += ["", "# List of known device classes", "C 00  Unclassified device"]
        lines += [f"\t{draw(SMALL_HEX4)[2:]}  {draw(NAME)}", "C 02  Network controller"]
        lines += [f"\t\t{draw(SMALL_HEX4)[2:]}  {draw(NAME)}"]
        lines += [f"{draw(SMALL_HEX4)}  after the classes: not a vendor"]
    text = "\n".join(lines) + ("\n" if draw(st.booleans()) else "")
    return text.encode()


@settings(max_examples=300, deadline=None)
@given(pci_ids_files())
def test_lookups_give_the_whole_parse_names(data: bytes) -> None:
    _same_names(data)


@settings(max_examples=300, deadline=None)
@given(pci_ids_files(), st.lists(st.one_of(ID.map(lambda v: int(v, 16)), st.sampled_from(PROBES))))
def test_vendors_looked_up_together_give_the_whole_parse_names(data: bytes, first) -> None:
    """prefetch finds several vendors (and where the class list starts) in one search."""
    _same_names(data, prefetch=(*first, -1, 0x10000))


def test_names_prefetched_are_only_those_the_table_lacks(tmp_path: Path) -> None:
    folder = tmp_path / "usr" / "share" / "misc"
    folder.mkdir(parents=True)
    (folder / "pci.ids").write_bytes(b"1af4  Red Hat\n\t1000  net\n1234  Tech\n\t0001  one\n")
    view = DirView(str(tmp_path))
    view.keep_contents()
    names = PciNames(view)
    names.prefetch([(0x10DE, None), (None, 0x1000)])  # named by our table, or by nothing
    assert view.contents == {}
    names.prefetch([(0x1234, 0x0001), (0x1AF4, 0x1000), (0x1AF4, None)])
    assert list(view.contents or {}) == ["/usr/share/misc/pci.ids"]
    assert names.vendor(0x1234) == "Tech" and names.device(0x1234, 1) == "one"
    assert names.device(0x1AF4, 0x1000) == "net" and names.vendor(0x1AF4) == "Red Hat (virtio)"


def test_a_vendor_named_twice_is_named_by_its_last_line() -> None:
    data = b"10de  First\n\t0001  one\n8086  Intel\n10de  Second\n\t0002  two\n\t0001  one again\n"
    _same_names(data)
    lazy = PciIdsFile(data)
    assert lazy.vendor(0x10DE) == "Second"
    assert lazy.device(0x10DE, 0x0001) == "one again"
    assert lazy.device(0x10DE, 0x0002) == "two"
    assert lazy.device(0x8086, 0x0001) is None


def test_class_lines_and_subsystems_name_nothing() -> None:
    data = b"1af4  Red Hat\n\t1000  net\n\t\t1af4 0001  sub\nC 02  Network\n\t00  Ethernet\n"
    _same_names(data, (*PROBES, 0x0002))
    lazy = PciIdsFile(data)
    assert lazy.device(0x1AF4, 0x1AF4) is None  # a subsystem line
    assert PciIdsFile(b"C 02  Network\n1af4  after\n").vendor(0x1AF4) is None


def _system_pci_ids() -> Path | None:
    return next((Path(p) for p in PCI_IDS_PATHS if os.path.isfile(p)), None)


@pytest.mark.skipif(_system_pci_ids() is None, reason="no pci.ids on this machine")
def test_the_system_pci_ids_names_every_id_alike() -> None:
    path = _system_pci_ids()
    assert path is not None
    _same_names(path.read_bytes())
    mapped = DirView("/").read_mapped(str(path))  # as a live probe reads it
    _same_names(mapped, prefetch=(0x8086, 0x10DE, 0x1AF4, 0x15B3, 0x1022))


def test_a_recorded_hosts_pci_ids_names_its_devices_as_the_whole_parse_does() -> None:
    """The real recording's trimmed pci.ids (a VM's virtio functions): the file alike, and a
    whole discovery names each function as the whole parse of the same file does."""
    from xputune.host import open_host
    from xputune.topology.discover import discover

    tree = host_tree("ci-vm-2cpu")
    data = (tree / "usr" / "share" / "misc" / "pci.ids").read_bytes()
    _same_names(data)
    vendors, devices = parse_pci_ids(data.decode("utf-8", "replace"))
    table = id_table()
    functions = discover(open_host(str(tree))).pci.values()
    assert functions
    for fn in functions:
        vendor = table.vendors.get(fn.vendor_id) or vendors.get(fn.vendor_id)
        device = table.devices.get((fn.vendor_id, fn.device_id)) or devices.get(
            (fn.vendor_id, fn.device_id)
        )
        assert fn.vendor_name == (vendor or f"vendor {fn.vendor_id:#06x}"), fn.bdf
        assert fn.device_name == (device or f"device {fn.device_id:#06x}"), fn.bdf
    assert any(fn.device_name == "Virtio 1.0 network device" for fn in functions)


def test_probe_names_come_from_the_host_views_pci_ids(tmp_path: Path) -> None:
    """Through a view, as a probe reads it: our own table first, then the file; the file is
    read once, and only when the table lacks a name (a recording keeps what was read)."""
    folder = tmp_path / "usr" / "share" / "misc"
    folder.mkdir(parents=True)
    data = b"# pci.ids\n1af4  Red Hat, Inc.\n\t1000  Virtio network device\n1234  Technical\n"
    (folder / "pci.ids").write_bytes(data)
    view = DirView(str(tmp_path))
    view.keep_contents()
    names = PciNames(view)
    assert names.vendor(0x1AF4) == "Red Hat (virtio)"  # our table's name
    assert view.contents == {}  # not read: the table had it
    assert names.vendor(0x1234) == "Technical"
    assert names.device(0x1AF4, 0x1000) == "Virtio network device"
    assert names.device(0x1AF4, 0x1001) == "device 0x1001"
    assert names.vendor(0x4321) == "vendor 0x4321"
    assert names.vendor(None) == "unknown vendor" and names.device(1, None) == "unknown device"
    assert names.ids_path == "/usr/share/misc/pci.ids"
    assert view.contents == {"/usr/share/misc/pci.ids": data}

    bare = DirView(str(tmp_path / "usr"))  # no pci.ids at all: names by number only
    assert PciNames(bare).device(0x1AF4, 0x1000) == "device 0x1000"
