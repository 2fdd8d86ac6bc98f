"""`xpu-smi topo -m`: the relation matrix of nvidia-smi topo -m, with XL for XPU Link.

A header row of device names (XPU0.., NIC0..) then CPU Affinity, NUMA Affinity (and, in newer
releases, an XPU NUMA ID column); one row per device; a Legend block ("X = Self") and a NIC
Legend ("NIC0: mlx5_0"). Column titles with spaces are matched by name so that any padding
(tabs or spaces, any width) splits the same way. NIC rows may stop after the relations.
"""

from __future__ import annotations

import re

from xputune.devices.xpusmi.model import SmiCard, SmiParseError, SmiReport, SmiTopo
from xputune.devices.xpusmi.values import integer, shown, text_value

FORM = "topo"
TITLES = re.compile(r"CPU\s+Affinity|NUMA\s+Affinity|(?:XPU|GPU)\s+NUMA\s+ID", re.I)
RELATION = re.compile(r"^(?:X|XL[0-9]*|NV[0-9]+|SYS|NODE|PHB|PXB|PIX|N/A)$", re.ASCII)
CARD_NAME = re.compile(r"^(?:XPU|GPU)([0-9]{1,6})$", re.ASCII)
LEGEND_ITEM = re.compile(r"^(\S+?)\s*[=:](.*)$")
CANONICAL = {"cpuaffinity": "CPU Affinity", "numaaffinity": "NUMA Affinity"}


def _title(raw: str) -> str:
    squeezed = re.sub(r"\s+", "", raw).lower()
    return CANONICAL.get(squeezed, "NUMA ID")


def _header(line: str, number: int) -> tuple[list[str], list[str]]:
    """Device names and the titles of the columns after them."""
    titles = [_title(t) for t in TITLES.findall(line)]
    first = TITLES.search(line)
    names = (line[: first.start()] if first else line).split()
    if not names or not titles:
        raise SmiParseError(FORM, "header must list devices then CPU/NUMA Affinity", number)
    if len(set(names)) != len(names):
        raise SmiParseError(FORM, "a device appears twice in the header", number)
    return names, titles


def _legends(lines: list[tuple[int, str]]) -> tuple[dict[str, str], dict[str, str]]:
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
            raise SmiParseError(FORM, f"not a legend entry: {shown(text)}", number)
        target[m[1]] = m[2].strip()
    return legend, nics


def parse(text: str) -> SmiReport:
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise SmiParseError(FORM, "empty")
    names, titles = _header(lines[0][1], lines[0][0])
    relations: dict[str, dict[str, str]] = {}
    affinity: dict[str, dict[str, str]] = {}
    rest = lines[1:]
    while rest and not rest[0][1].strip().lower().startswith(("legend", "nic legend")):
        number, line = rest.pop(0)
        cells = line.split()
        row, values = cells[0], cells[1:]
        if row not in names:
            raise SmiParseError(FORM, f"row {shown(row)} is not a device of the header", number)
        if row in relations:
            raise SmiParseError(FORM, f"row {row} appears twice", number)
        if len(values) < len(names) or len(values) > len(names) + len(titles):
            raise SmiParseError(
                FORM, f"row {row} has {len(values)} cells for {len(names)} devices", number
            )
        bad = [v for v in values[: len(names)] if not RELATION.match(v)]
        if bad:
            raise SmiParseError(FORM, f"row {row}: unknown relation {shown(bad[0])}", number)
        relations[row] = dict(zip(names, values[: len(names)], strict=True))
        affinity[row] = dict(zip(titles, values[len(names) :], strict=False))
    missing = [name for name in names if name not in relations]
    if missing:
        raise SmiParseError(FORM, f"no row for {', '.join(missing)} (cut off?)")
    legend, nics = _legends(rest)
    cards = []
    for name in names:
        m = CARD_NAME.match(name)
        if m is None:
            continue
        cells = affinity[name]
        cards.append(
            SmiCard(
                index=int(m[1]),
                cpu_affinity=text_value(cells.get("CPU Affinity")),
                numa_affinity=integer(cells.get("NUMA Affinity"), (), FORM, f"{name} NUMA"),
            )
        )
    topo = SmiTopo(devices=tuple(names), relations=relations, legend=legend, nics=nics)
    return SmiReport(form=FORM, cards=tuple(cards), topology=topo)
