"""PCI ID names and roles: our own table first, then the host's pci.ids for everything else.

The table is a data file so that new cards (P900 IDs are not public yet) are a one-line change.
pci.ids is read through the host view, so a recording carries the entries it needs and probes
of the recording name devices exactly as the live probe did.
"""

from __future__ import annotations

import json
import os
from functools import cache

from xputune.errors import HostError
from xputune.host import HostView
from xputune.tuples import NamedTuple

PCI_IDS_PATHS = ("/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids", "/usr/share/pci.ids")


class IdTable(NamedTuple):
    vendors: dict[int, str]
    devices: dict[tuple[int, int], str]
    accelerators: dict[tuple[int, int], tuple[str, str]]  # -> (family, model)
    kunlunxin_vendors: frozenset[int]
    kunlunxin_drivers: frozenset[str]
    virtual_functions: frozenset[tuple[int, int]]
    not_cards: frozenset[tuple[int, int]]


def _pair(text: str) -> tuple[int, int]:
    vendor, device = text.split(":")
    return int(vendor, 16), int(device, 16)


@cache
def id_table() -> IdTable:
    data = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "pci_ids.json")
    with open(data, encoding="utf-8") as fh:
        raw = json.load(fh)
    return IdTable(
        vendors={int(k, 16): v for k, v in raw["vendors"].items()},
        devices={_pair(k): v for k, v in raw["devices"].items()},
        accelerators={
            (int(a["vendor"], 16), int(a["device"], 16)): (a["family"], a["model"])
            for a in raw["accelerators"]
        },
        kunlunxin_vendors=frozenset(int(v, 16) for v in raw["kunlunxin_vendors"]),
        kunlunxin_drivers=frozenset(raw["kunlunxin_drivers"]),
        virtual_functions=frozenset(_pair(p) for p in raw["virtual_functions"]),
        not_cards=frozenset(_pair(p) for p in raw["not_cards"]),
    )


class PciNames:
    """Looks names up for a set of IDs, scanning the host's pci.ids at most once."""

    def __init__(self, view: HostView) -> None:
        self._view = view
        self._table = id_table()
        self._from_file: tuple[dict[int, str], dict[tuple[int, int], str]] | None = None
        self.ids_path: str | None = None

    def _pci_ids(self) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
        if self._from_file is None:
            vendors: dict[int, str] = {}
            devices: dict[tuple[int, int], str] = {}
            for path in PCI_IDS_PATHS:
                try:
                    text = self._view.read_bytes(path).decode("utf-8", "replace")
                except (FileNotFoundError, HostError):
                    continue  # an absent or unreadable pci.ids only costs names
                self.ids_path = path
                vendors, devices = parse_pci_ids(text)
                break
            self._from_file = (vendors, devices)
        return self._from_file

    def vendor(self, vendor_id: int | None) -> str:
        if vendor_id is None:
            return "unknown vendor"
        name = self._table.vendors.get(vendor_id) or self._pci_ids()[0].get(vendor_id)
        return name or f"vendor {vendor_id:#06x}"

    def device(self, vendor_id: int | None, device_id: int | None) -> str:
        if vendor_id is None or device_id is None:
            return "unknown device"
        key = (vendor_id, device_id)
        name = self._table.devices.get(key) or self._pci_ids()[1].get(key)
        return name or f"device {device_id:#06x}"


def parse_pci_ids(text: str) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    """Vendors and devices of a pci.ids file (subsystems and classes are not needed)."""
    vendors: dict[int, str] = {}
    devices: dict[tuple[int, int], str] = {}
    vendor: int | None = None
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        if line.startswith("C "):
            break  # the class list follows the vendors
        try:
            if line[0] != "\t":
                vendor = int(line[:4], 16)
                vendors[vendor] = line[4:].strip()
            elif line[1] != "\t" and vendor is not None:
                devices[(vendor, int(line[1:5], 16))] = line[5:].strip()
        except ValueError:
            continue
    return vendors, devices


def trim_pci_ids(text: str, present: set[tuple[int, int]]) -> str:
    """pci.ids cut down to the vendor and device lines of the IDs present (for recordings)."""
    vendors = {v for v, _ in present}
    out = ["# pci.ids trimmed by xputune record to the devices of the recorded host"]
    vendor: int | None = None
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        if line.startswith("C "):
            break
        try:
            if line[0] != "\t":
                vendor = int(line[:4], 16)
                if vendor in vendors:
                    out.append(line)
            elif line[1] != "\t" and (vendor, int(line[1:5], 16)) in present:
                out.append(line)
        except ValueError:
            continue
    return "\n".join(out) + "\n"
