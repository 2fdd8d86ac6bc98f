"""The default table (plain `xpu-smi` / `nvidia-smi`): one boxed block per card, then processes.

The title row names the tool and driver ("| XPU-SMI  Driver Version: 5.0.21.21  XPU-RT ...",
"| NVIDIA-SMI 550.54  Driver Version: 550.54  CUDA ..."). Below the "|===" rule each card is a
block of rows between "+---" rules; its first row holds index, name and bus id, its second row
temperature, power usage/cap, memory used/total and utilisation. Cells are found by splitting
rows at "|", and values inside a cell by pattern (a bus id, "NNMiB / NNMiB", "NN%"), so column
widths do not matter. The "Processes:" box lists index, PID, type, name and memory per process
(or "No running processes found").
"""

from __future__ import annotations

import re

from xputune.devices.busid import normalize_bus_id
from xputune.devices.xpusmi.model import SmiCard, SmiParseError, SmiProcess, SmiReport
from xputune.devices.xpusmi.values import Notes, shown

FORM = "table"
TITLE = re.compile(r"\b(XPU-SMI|NVIDIA-SMI)\b.*?Driver Version:\s*(\S+)", re.ASCII)
FIRST_ROW = re.compile(r"^\s*([0-9]{1,4})\s+(.*?)\s*$")
BUS = re.compile(r"\b([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\b")
# Numbers are at most 15 digits, as values._NUMBER takes them: a longer one is no reading
# (and 5000 digits would not even convert), so the cell reads as absent.
MEMORY = re.compile(r"(?<![0-9])([0-9]{1,15})\s*MiB\s*/\s*([0-9]{1,15})\s*MiB")
TEMP = re.compile(r"\b([0-9]{1,3})C\b")
POWER = re.compile(r"\b([0-9]{1,15}(?:\.[0-9]{1,6})?)W\s*/")
UTIL = re.compile(r"\b([0-9]{1,3})%")
PROC_TYPES = {"C", "G", "C+G", "M", "M+C", "M+G"}


def _cells(line: str) -> list[str]:
    return line.strip().strip("|").split("|")


def _process(line: str, number: int, notes: Notes) -> SmiProcess | None:
    words = " ".join(_cells(line)).split()
    if not words or not words[0].isdigit():
        notes.add(f"smi table: process row not read: {shown(line)} (line {number})")
        return None
    kind_at = next((i for i, w in enumerate(words) if i > 1 and w in PROC_TYPES), None)
    memory = re.fullmatch(r"([0-9]+)MiB", words[-1])
    if kind_at is None or not words[kind_at - 1].isdigit():
        notes.add(f"smi table: process row not read: {shown(line)} (line {number})")
        return None
    return SmiProcess(
        index=int(words[0]),
        pid=int(words[kind_at - 1]),
        type=words[kind_at],
        name=" ".join(words[kind_at + 1 : -1 if memory else None]) or None,
        memory_mib=int(memory[1]) if memory else None,
    )


def _card(rows: list[tuple[int, str]], notes: Notes) -> SmiCard | None:
    number, first = rows[0]
    cells = _cells(first)
    m = FIRST_ROW.match(cells[0])
    if m is None:
        notes.add(f"smi table: card row not read: {shown(first)} (line {number})")
        return None
    words = m[2].split()
    # the first cell ends with the persistence mode (On/Off/N/A) after the name
    name = " ".join(words[:-1]) if len(words) > 1 else m[2]
    bus = BUS.search(first)
    bdf = normalize_bus_id(bus[1]) if bus else None
    if bus is None or bdf is None:
        notes.add(f"smi table: card {m[1]} has no readable bus id (line {number})")
    second = rows[1][1] if len(rows) > 1 else ""
    memory = MEMORY.search(second)
    temp, power, util = TEMP.search(second), POWER.search(second), UTIL.search(second)
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


def parse(text: str) -> SmiReport:
    notes = Notes()
    vendor, driver = "kunlunxin", None
    blocks: list[list[tuple[int, str]]] = []
    processes: list[SmiProcess] = []
    section = "head"  # head -> cards -> between -> processes
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        title = TITLE.search(line)
        if title and section == "head":
            vendor = "nvidia" if title[1] == "NVIDIA-SMI" else "kunlunxin"
            driver = title[2]
            continue
        if stripped.startswith("|=") or stripped.startswith("+="):
            section = "processes" if section == "between" else "cards"
            if section == "cards":
                blocks.append([])
            continue
        if "Processes:" in stripped:
            section = "between"
            continue
        if section == "cards":
            if stripped.startswith("+"):
                blocks.append([])
            elif stripped.startswith("|"):
                blocks[-1].append((number, line))
            elif stripped:
                section = "after"
        elif section == "processes" and stripped.startswith("|"):
            if "no running processes" in stripped.lower():
                continue
            process = _process(line, number, notes)
            if process is not None:
                processes.append(process)
    cards = [card for rows in blocks if rows for card in [_card(rows, notes)] if card]
    if not cards and driver is None:
        raise SmiParseError(FORM, "no card rows and no 'Driver Version' title")
    return SmiReport(
        form=FORM,
        cards=tuple(cards),
        driver_version=driver,
        vendor=vendor,
        processes=tuple(processes),
        warnings=notes.done(),
    )
