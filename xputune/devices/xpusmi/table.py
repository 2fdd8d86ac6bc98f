"""The default table (plain `xpu-smi` / `nvidia-smi`): one boxed block per card, then processes.

The title row names the tool and driver ("| XPU-SMI  Driver Version: 5.0.21.21  XPU-RT ...",
"| NVIDIA-SMI 550.54  Driver Version: 550.54  CUDA ..."; from driver 610 nvidia-smi says
"KMD Version:" and "CUDA UMD Version:" instead). Below the "|===" rule each card is a block of
rows between "+---" rules; its first row holds index, name and bus id, its second row
temperature, power usage/cap, memory used/total and utilisation. Cells are found by splitting
rows at "|", and values inside a cell by pattern (a bus id, "NNMiB / NNMiB", "NN%"), so column
widths do not matter.

With MIG enabled a "MIG devices:" box follows the cards: one block per MIG device (GPU index,
GI, CI and MIG device ids, memory used/total, SM count, then a second row with the BAR1
aperture). Those are slices of a GPU, not cards: they are kept under their GPU (SmiMig), and the
BAR1 row is never read as memory. The "Processes:" box lists index, (GI, CI,) PID, type, name
and memory per process (or "No running processes found"); the name may hold spaces and
backslashes (Windows paths) and the memory may be N/A (Windows WDDM cannot say).
"""

from __future__ import annotations

import re

from xputune.devices.busid import normalize_bus_id
from xputune.devices.xpusmi.model import SmiCard, SmiMig, SmiParseError, SmiProcess, SmiReport
from xputune.devices.xpusmi.values import Notes, missing, shown, version

FORM = "table"
# "Driver Version:" before driver 610, "KMD Version:" (kernel-mode driver) from it on; under WSL
# the KMD version is the Windows driver's, which may differ from NVIDIA-SMI's own number.
TITLE = re.compile(r"\b(XPU-SMI|NVIDIA-SMI)\b.*?\b(?:Driver|KMD) Version:\s*(\S+)", re.ASCII)
FIRST_ROW = re.compile(r"^\s*([0-9]{1,4})\s+(.*?)\s*$")
BUS = re.compile(r"\b([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\b")
# Numbers are at most 15 digits, as values._NUMBER takes them: a longer one is no reading
# (and 5000 digits would not even convert), so the cell reads as absent.
MEMORY = re.compile(r"(?<![0-9])([0-9]{1,15})\s*MiB\s*/\s*([0-9]{1,15})\s*MiB")
TEMP = re.compile(r"\b([0-9]{1,3})C\b")
POWER = re.compile(r"\b([0-9]{1,15}(?:\.[0-9]{1,6})?)W\s*/")
UTIL = re.compile(r"\b([0-9]{1,3})%")
MIG_IDS = re.compile(r"^\s*([0-9]{1,4})\s+([0-9]{1,4})\s+([0-9]{1,4})\s+([0-9]{1,4})\s*$")
SM_COUNT = re.compile(r"^\s*([0-9]{1,6})\b")
PROC_TYPES = {"C", "G", "C+G", "M", "M+C", "M+G"}
# index, optional GI and CI (numbers or N/A), PID, type, name (any text), memory (last word)
PROC_ROW = re.compile(
    r"^\s*([0-9]{1,4})\s+(?:(\S+)\s+(\S+)\s+)?([0-9]{1,10})\s+(C\+G|M\+C|M\+G|C|G|M)\s+"
    r"(.*?)\s*(\S+)\s*$"
)
PROC_MEMORY = re.compile(r"([0-9]{1,15})\s*MiB")


def _cells(line: str) -> list[str]:
    return line.strip().strip("|").split("|")


def _cell(cells: list[str], at: int) -> str:
    """Cell `at` of a row, or the whole row when it has fewer cells (a cut or odd row)."""
    return cells[at] if len(cells) > at else "|".join(cells)


def _instance_id(value: str | None) -> int | None:
    """A GI or CI id of a process row: a number with MIG, N/A without."""
    return int(value) if value is not None and value.isdigit() else None


def _process(line: str, number: int, notes: Notes) -> SmiProcess | None:
    """One process row; the last word is always the memory column ("123MiB" or N/A)."""
    m = PROC_ROW.match(" ".join(_cells(line)))
    if m is None:
        notes.add(f"smi table: process row not read: {shown(line)} (line {number})")
        return None
    memory = PROC_MEMORY.fullmatch(m[7])
    if memory is None and not missing(m[7]):
        notes.add(f"smi table: process memory not read: {shown(m[7])} (line {number})")
    return SmiProcess(
        index=int(m[1]),
        pid=int(m[4]),
        type=m[5],
        name=m[6] or None,
        memory_mib=int(memory[1]) if memory else None,
        gpu_instance=_instance_id(m[2]),
        compute_instance=_instance_id(m[3]),
    )


def _card(rows: list[tuple[int, str]], notes: Notes) -> SmiCard | None:
    number, first = rows[0]
    cells = _cells(first)
    m = FIRST_ROW.match(cells[0])
    if m is None:
        notes.add(f"smi table: card row not read: {shown(first)} (line {number})")
        return None
    words = m[2].split()
    # the first cell ends with the persistence mode (On/Off/N/A) or, on Windows, the driver
    # model (WDDM/TCC) after the name
    name = " ".join(words[:-1]) if len(words) > 1 else m[2]
    bus = BUS.search(first)
    bdf = normalize_bus_id(bus[1]) if bus else None
    if bus is None or bdf is None:
        notes.add(f"smi table: card {m[1]} has no readable bus id (line {number})")
    second = _cells(rows[1][1]) if len(rows) > 1 else [""]
    memory = MEMORY.search(_cell(second, 1))
    temp, power = TEMP.search(_cell(second, 0)), POWER.search(_cell(second, 0))
    util = UTIL.search(_cell(second, 2))  # not the fan's "0%" in the first cell
    return SmiCard(
        index=int(m[1]),
        bus_id=bdf,
        name=name or None,
        memory_used_mib=int(memory[1]) if memory else None,
        memory_total_mib=int(memory[2]) if memory else None,
        memory_free_mib=int(memory[2]) - int(memory[1]) if memory else None,
        temperature_c=int(temp[1]) if temp else None,
        power_w=float(power[1]) if power else None,
        utilization_pct=int(util[1]) if util else None,
    )


def _mig(rows: list[tuple[int, str]], notes: Notes) -> tuple[int, SmiMig] | None:
    """(GPU index, MIG device) of one block of the "MIG devices" box; the BAR1 row is skipped."""
    number, first = rows[0]
    cells = _cells(first)
    ids = MIG_IDS.match(cells[0])
    if ids is None:
        notes.add(f"smi table: MIG device row not read: {shown(first)} (line {number})")
        return None
    memory = MEMORY.search(_cell(cells, 1))
    sms = SM_COUNT.match(cells[2]) if len(cells) > 2 else None
    mig = SmiMig(
        index=int(ids[4]),
        gpu_instance=int(ids[2]),
        compute_instance=int(ids[3]),
        memory_used_mib=int(memory[1]) if memory else None,
        memory_total_mib=int(memory[2]) if memory else None,
        sm_count=int(sms[1]) if sms else None,
    )
    return int(ids[1]), mig


def _attach(cards: list[SmiCard], migs: list[tuple[int, SmiMig]], notes: Notes) -> list[SmiCard]:
    """Each MIG device under the card of its GPU index; one without that card is a warning."""
    by_index = {card.index: i for i, card in enumerate(cards)}
    for gpu, mig in migs:
        at = by_index.get(gpu)
        if at is None:
            notes.add(
                f"smi table: MIG device {mig.index} of GPU {gpu}, which the table does not "
                "list, left out"
            )
            continue
        card = cards[at]
        cards[at] = card._replace(mig_devices=(*card.mig_devices, mig))
    return cards


def _driver(line: str, notes: Notes) -> tuple[str, str | None] | None:
    """(vendor, driver version) of a title row; None when `line` is no title."""
    title = TITLE.search(line)
    if title is None:
        return None
    vendor = "nvidia" if title[1] == "NVIDIA-SMI" else "kunlunxin"
    return vendor, notes.soft(version, title[2], FORM, "driver version")


class _Boxes:
    """The rows of the table's boxes as the parse reaches them: cards, MIG devices, processes."""

    def __init__(self) -> None:
        self.cards: list[list[tuple[int, str]]] = []
        self.migs: list[list[tuple[int, str]]] = []
        self.processes: list[tuple[int, str]] = []
        self.section = "head"  # head -> cards -> mig-head -> mig -> proc-head -> processes

    def rule(self) -> None:
        """A "|===" rule: the rows of the box named above it start."""
        if self.section == "mig-head":
            self.section = "mig"
            self.migs.append([])
        elif self.section == "proc-head":
            self.section = "processes"
        else:
            self.section = "cards"
            self.cards.append([])

    def row(self, number: int, line: str, stripped: str) -> None:
        blocks = {"cards": self.cards, "mig": self.migs}.get(self.section)
        if blocks is not None:
            if stripped.startswith("+"):
                blocks.append([])
            elif stripped.startswith("|"):
                blocks[-1].append((number, line))
            elif stripped:
                self.section = "after"
        elif self.section == "processes" and stripped.startswith("|"):
            self.processes.append((number, line))


def _read(text: str, notes: Notes) -> tuple[_Boxes, str, str | None, bool]:
    """The boxes, vendor, driver version and whether a title row was seen."""
    boxes = _Boxes()
    vendor, driver, titled = "kunlunxin", None, False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        title = _driver(line, notes) if boxes.section == "head" else None
        if title is not None:
            (vendor, driver), titled = title, True
        elif stripped.startswith(("|=", "+=")):
            boxes.rule()
        elif "MIG devices:" in stripped:
            boxes.section = "mig-head"
        elif "Processes:" in stripped:
            boxes.section = "proc-head"
        else:
            boxes.row(number, line, stripped)
    return boxes, vendor, driver, titled


def parse(text: str) -> SmiReport:
    notes = Notes()
    boxes, vendor, driver, titled = _read(text, notes)
    cards = [card for rows in boxes.cards if rows for card in [_card(rows, notes)] if card]
    if not cards and not titled:
        raise SmiParseError(FORM, "no card rows and no 'Driver Version' (or 'KMD Version') title")
    migs = [mig for rows in boxes.migs if rows for mig in [_mig(rows, notes)] if mig]
    rows = [(n, line) for n, line in boxes.processes if "no running processes" not in line.lower()]
    processes = [p for n, line in rows for p in [_process(line, n, notes)] if p]
    return SmiReport(
        form=FORM,
        cards=tuple(_attach(cards, migs, notes)),
        driver_version=driver,
        vendor=vendor,
        processes=tuple(processes),
        warnings=notes.done(),
    )
