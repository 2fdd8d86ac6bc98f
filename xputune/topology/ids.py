"""PCI ID names and roles: our own table first, then the host's pci.ids for everything else.

The table is a data file so that new cards (P900 IDs are not public yet) are a one-line change.
pci.ids is read through the host view, so a recording carries the entries it needs and probes
of the recording name devices exactly as the live probe did.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from functools import cache

from xputune.errors import HostError
from xputune.host import HostView
from xputune.tuples import NamedTuple

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: start-up time
if TYPE_CHECKING:
    import mmap

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


class PciIdsFile:
    """The vendor and device names of one pci.ids, found where they are asked for.

    Why: pci.ids is ~1.4 MB of some 36,000 lines, and parsing it whole (parse_pci_ids) cost a
    live probe more than half its discovery (~34 ms of 61) to name the handful of vendors a
    host has. Here the vendors a probe needs are one search of the file's bytes for their
    lines (a name, and the span of its device lines, for each; prefetch), and a device one
    search within that span, names decoded only for the lines found.

    The names are those parse_pci_ids gives for a pci.ids as the file is written (one entry a
    line ending in \\n, ids as four lowercase hex digits; a vendor named twice is named by its
    last line, and its devices by their last lines): tests/topology/test_pci_ids.py holds the
    two to each other on generated files and on the system's own.
    """

    def __init__(self, data: bytes | mmap.mmap) -> None:
        self._data = data  # bytes, or the live host's file mapped (HostView.read_mapped)
        #: a line that starts the next vendor (or anything else that is not a device,
        #: subsystem, comment or blank line): where a vendor's device lines end. Compiled
        #: here, not at import: a probe whose names are all in our table never needs it.
        self._next = re.compile(rb"\n[^\t#\r\n]")
        #: parse_pci_ids stops at the first line of the class list ("C xx  name"): where,
        #: the first search for vendors finds on its way (None until then).
        self._end: int | None = 0 if data[:2] == b"C " else None
        self._vendors: dict[int, tuple[str | None, list[tuple[int, int]]]] = {}

    def prefetch(self, vendor_ids: Iterable[int]) -> None:
        """Find the lines of all these vendors in one search of the file, not one each (a
        search of pci.ids reads all 1.4 MB of it, about half a millisecond)."""
        self._find([v for v in set(vendor_ids) if v not in self._vendors])

    def _vendor(self, vendor_id: int) -> tuple[str | None, list[tuple[int, int]]]:
        """(name, spans of its device lines) of one vendor, each span from the end of a
        vendor line to the start of the next vendor's (several if the file names it twice)."""
        found = self._vendors.get(vendor_id)
        if found is None:
            self._find([vendor_id])
            found = self._vendors[vendor_id]
        return found

    def _find(self, vendor_ids: list[int]) -> None:
        """Fill _vendors for these vendors: every line that starts with the id (before the
        class list) names it, the last one counting. One pass over the file finds them all
        and, on the first pass, the start of the class list."""
        data, end = self._data, self._end
        keys: dict[bytes, int] = {}
        for vendor_id in vendor_ids:
            if 0 <= vendor_id <= 0xFFFF:
                keys[b"%04x" % vendor_id] = vendor_id
            else:
                self._vendors[vendor_id] = (None, [])
        if not keys:
            return
        starts: dict[bytes, list[int]] = {key: [] for key in keys}
        if data[:4] in starts:  # (a file that starts with a class line starts with "C ")
            starts[data[:4]].append(0)
        if end is not None and len(keys) == 1:  # one vendor: bytes.find needs no pattern
            (key,) = keys
            needle = b"\n" + key
            at = data.find(needle, 0, end)
            while at >= 0:
                starts[key].append(at + 1)
                at = data.find(needle, at + 1, end)
        else:
            # Each match starts a line; a vendor's (4 hex digits) never holds the "\n" that
            # starts another, so none hides a match of the next vendor or of the class list.
            alternatives = b"|".join(sorted(keys))
            if end is None:
                alternatives = b"C |" + alternatives
            pattern = re.compile(rb"\n(?:%s)" % alternatives)
            for match in pattern.finditer(data, 0, len(data) if end is None else end):
                found = match.group()[1:]
                if found == b"C ":
                    end = match.start() + 1
                    break
                starts[found].append(match.start() + 1)
            if end is None:
                end = len(data)
            self._end = end
        for key, where in starts.items():
            name: str | None = None
            spans: list[tuple[int, int]] = []
            for start in where:
                eol = data.find(b"\n", start, end)
                eol = end if eol < 0 else eol
                name = data[start + 4 : eol].decode("utf-8", "replace").strip()
                nxt = self._next.search(data, eol, end)
                spans.append((eol, end if nxt is None else nxt.start()))
            self._vendors[keys[key]] = (name, spans)

    def vendor(self, vendor_id: int) -> str | None:
        return self._vendor(vendor_id)[0]

    def device(self, vendor_id: int, device_id: int) -> str | None:
        if not 0 <= device_id <= 0xFFFF:
            return None
        needle = b"\n\t%04x" % device_id
        data = self._data
        for start, stop in reversed(self._vendor(vendor_id)[1]):
            at = data.rfind(needle, start, stop)
            if at >= 0:
                eol = data.find(b"\n", at + 1, stop)
                return data[at + 6 : stop if eol < 0 else eol].decode("utf-8", "replace").strip()
        return None


class PciNames:
    """Looks names up for a set of IDs, reading the host's pci.ids at most once, and only
    when a name is not in our own table (then only the lines asked for: PciIdsFile)."""

    def __init__(self, view: HostView) -> None:
        self._view = view
        self._table = id_table()
        self._file: PciIdsFile | None = None
        self._looked = False
        self.ids_path: str | None = None

    def _pci_ids(self) -> PciIdsFile | None:
        if not self._looked:
            self._looked = True
            for path in PCI_IDS_PATHS:
                try:
                    data = self._view.read_mapped(path)  # a recording keeps what it reads
                except (FileNotFoundError, HostError):
                    continue  # an absent or unreadable pci.ids only costs names
                self.ids_path = path
                self._file = PciIdsFile(data)
                break
        return self._file

    def prefetch(self, ids: Iterable[tuple[int | None, int | None]]) -> None:
        """Look up together, in one search of pci.ids, the vendors that naming these
        (vendor, device) ids will need from it; nothing is read when our table names them."""
        table = self._table
        wanted = {
            vendor_id
            for vendor_id, device_id in ids
            if vendor_id is not None
            and (
                not table.vendors.get(vendor_id)
                or (device_id is not None and not table.devices.get((vendor_id, device_id)))
            )
        }
        if wanted and (found := self._pci_ids()) is not None:
            found.prefetch(wanted)

    def vendor(self, vendor_id: int | None) -> str:
        if vendor_id is None:
            return "unknown vendor"
        name = self._table.vendors.get(vendor_id)
        if not name and (found := self._pci_ids()) is not None:
            name = found.vendor(vendor_id)
        return name or f"vendor {vendor_id:#06x}"

    def device(self, vendor_id: int | None, device_id: int | None) -> str:
        if vendor_id is None or device_id is None:
            return "unknown device"
        name = self._table.devices.get((vendor_id, device_id))
        if not name and (found := self._pci_ids()) is not None:
            name = found.device(vendor_id, device_id)
        return name or f"device {device_id:#06x}"


def parse_pci_ids(text: str) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    """Vendors and devices of a pci.ids file (subsystems and classes are not needed): the
    whole file at once, the reference PciIdsFile's lookups are held to."""
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
