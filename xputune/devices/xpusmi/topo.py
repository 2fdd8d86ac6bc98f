"""`xpu-smi topo -m` / `nvidia-smi topo -m`: the relation matrix (X, XL, NV#, PIX ... SYS).

A header row of device names (XPU0.., GPU0.., NIC0.., or RDMA device names such as mlx5_0 or
hns_0 on releases without a NIC legend) then CPU Affinity, NUMA Affinity and, on newer
releases, a GPU/XPU NUMA ID column; one row per device; a Legend block ("X = Self") and a NIC
Legend ("NIC0: mlx5_0"). Column titles with spaces are matched by name, so any padding (tabs or
spaces, any width) splits the same way. NIC rows are optional (xpu-smi often prints none), and
so are both legends. A short row, an unknown relation code or a missing card row costs that
row or cell (None plus a warning), never the matrix.
"""

from __future__ import annotations

import re

from xputune.devices.xpusmi.model import SmiCard, SmiParseError, SmiReport, SmiTopo
from xputune.devices.xpusmi.values import Notes, integer, shown, text_value

FORM = "topo"
TITLES = re.compile(r"CPU\s+Affinity|NUMA\s+Affinity|(?:XPU|GPU)\s+NUMA\s+ID", re.I)
RELATION = re.compile(r"^(?:X|XL[0-9]*|NV[0-9]+|SYS|NODE|PHB|PXB|PIX|SOC|N/A)$", re.ASCII)
CARD_NAME = re.compile(r"^(XPU|GPU)([0-9]{1,6})$", re.ASCII)
NIC_NAME = re.compile(r"^NIC[0-9]{1,6}$", re.ASCII)
DEVICE = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$", re.ASCII)
LEGEND_ITEM = re.compile(r"^(\S+?)\s*[=:](.*)$")
CANONICAL = {"cpuaffinity": "CPU Affinity", "numaaffinity": "NUMA Affinity"}


def _title(raw: str) -> str:
    squeezed = re.sub(r"\s+", "", raw).lower()
    return CANONICAL.get(squeezed, "NUMA ID")


def _header(lines: list[tuple[int, str]]) -> tuple[int, list[str], list[str]] | None:
    """(position, device names, titles after them) of the first header-like line.

    A header holds device names only (a row holds relation codes after its name).
    """
    for at, (_number, line) in enumerate(lines):
        first = TITLES.search(line)
        names = (line[: first.start()] if first else line).split()
        if (
            names
            and any(CARD_NAME.match(n) for n in names)
            and all(DEVICE.match(n) and not RELATION.match(n) for n in names)
        ):
            return at, names, [_title(t) for t in TITLES.findall(line)]
    return None


def _legends(lines: list[tuple[int, str]], notes: Notes) -> tuple[dict[str, str], dict[str, str]]:
    legend: dict[str, str] = {}
    nics: dict[str, str] = {}
    target = legend
    for number, line in lines:
        text = line.strip()
        if text.lower().startswith("nic legend"):
            target = nics
            continue
        if text.lower().startswith("legend"):
            target = legend
            continue
        m = LEGEND_ITEM.match(text)
        if m is None:
            notes.add(
                f"smi topo -m output: not a legend entry, skipped: {shown(text)} (line {number})"
            )
            continue
        target[m[1]] = m[2].strip()
    return legend, nics


def _cut_off(
    names: list[str],
    relations: dict[str, dict[str, str | None]],
    rest: list[tuple[int, str]],
    notes: Notes,
) -> None:
    """Say where the output stops early: a copy-paste cut off mid-matrix must not read whole.

    Every tool prints a row per card, then (when it prints NIC rows at all) a row per NIC,
    then "Legend:"; so a card without a row, a device without a row where other devices have
    theirs, or no legend after the matrix means the text ends early. A missing card row is
    unknown relations, never an absent card.
    """
    devices_have_rows = any(not CARD_NAME.match(row) for row in relations)
    for name in names:
        if name in relations:
            continue
        if CARD_NAME.match(name):
            notes.add(f"smi topo -m output: no row for {name} (cut off?)")
            relations[name] = dict.fromkeys(names)
        elif devices_have_rows:
            notes.add(f"smi topo -m output: no row for {name} (cut off?)")
    if not rest:
        notes.add("smi topo -m output: it ends in the matrix, before its Legend (cut off?)")


def parse(text: str) -> SmiReport:
    notes = Notes()
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    found = _header(lines)
    if found is None:
        raise SmiParseError(FORM, "no header row of device names (XPU0/GPU0 ...)")
    at, names, titles = found
    if len(set(names)) != len(names):
        raise SmiParseError(FORM, "a device appears twice in the header", lines[at][0])
    relations: dict[str, dict[str, str | None]] = {}
    affinity: dict[str, dict[str, str]] = {}
    rest = lines[at + 1 :]
    while rest and not rest[0][1].strip().lower().startswith(("legend", "nic legend")):
        number, line = rest.pop(0)
        cells = line.split()
        row, values = cells[0], cells[1:]
        if row not in names:
            notes.add(
                f"smi topo -m output: row {shown(row)} is not a header device (line {number})"
            )
            continue
        if row in relations:
            notes.add(f"smi topo -m output: row {row} appears twice, first kept (line {number})")
            continue
        if len(values) < len(names) or len(values) > len(names) + len(titles):
            notes.add(
                f"smi topo -m output: row {row} has {len(values)} cells for {len(names)} devices; "
                f"its relations are unknown (line {number})"
            )
            relations[row] = dict.fromkeys(names)
            continue
        row_relations: dict[str, str | None] = {}
        for name, value in zip(names, values[: len(names)], strict=True):
            if RELATION.match(value):
                row_relations[name] = value
            else:
                row_relations[name] = None
                notes.add(f"smi topo -m output: {row}-{name}: unknown relation {shown(value)}")
        relations[row] = row_relations
        affinity[row] = dict(zip(titles, values[len(names) :], strict=False))
    _cut_off(names, relations, rest, notes)
    legend, nics = _legends(rest, notes)
    for name in names:
        if not CARD_NAME.match(name) and not NIC_NAME.match(name):
            nics.setdefault(name, name)  # an RDMA device named directly in the header
    unnamed = [n for n in names if NIC_NAME.match(n) and n not in nics]
    if unnamed and rest:  # (no legend at all is said above)
        notes.add(
            f"smi topo -m output: no NIC Legend entry for {', '.join(unnamed)} (cut off?); "
            "which RDMA device each is, is unknown"
        )
    cards = []
    vendors = set()
    for name in names:
        m = CARD_NAME.match(name)
        if m is None:
            continue
        vendors.add("nvidia" if m[1] == "GPU" else "kunlunxin")
        cells = affinity.get(name, {})
        cards.append(
            SmiCard(
                index=int(m[2]),
                cpu_affinity=text_value(cells.get("CPU Affinity")),
                numa_affinity=notes.soft(
                    integer, cells.get("NUMA Affinity"), (), FORM, f"{name} NUMA affinity"
                ),
            )
        )
    topo = SmiTopo(devices=tuple(names), relations=relations, legend=legend, nics=nics)
    vendor = "nvidia" if vendors == {"nvidia"} else "kunlunxin"
    return SmiReport(
        form=FORM, cards=tuple(cards), topology=topo, vendor=vendor, warnings=notes.done()
    )
