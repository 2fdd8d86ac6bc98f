"""`xpu-smi -q` / `nvidia-smi -q`: an indented "key : value" tree, one block per card.

A banner, host-wide keys (Driver Version, Attached XPUs/GPUs), then a header line
"XPU 0000:23:00.0" (or "GPU ...") per card followed by its keys and sections. Values are split
from keys at the first colon (bus ids hold colons of their own); a card header is recognised
before that split. Every line after a card header belongs to that card whatever its indentation:
quoted outputs often lose the header's extra indent. "Attached XPUs" is not trusted to count the
blocks: `-q --id N` prints one card under the host's total, and a cut-off output prints fewer.
The driver version is "KMD Version" where the tool prints it (driver 610 on), else "Driver
Version", read as just the number: from 610 the old key's value carries a deprecation note.
"""

from __future__ import annotations

import re

from xputune.devices.xpusmi.cards import Tree, card_from_tree, key, lookup
from xputune.devices.xpusmi.model import SmiParseError, SmiReport
from xputune.devices.xpusmi.values import Notes, bus_id, integer, shown, version

FORM = "query"
CARD_HEADER = re.compile(
    r"^\s*(XPU|GPU)\s+([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}\.[0-7])\s*$", re.ASCII
)


def is_banner(line: str) -> bool:
    """The "=====XPUSMI LOG=====" (or NVSMI LOG) line."""
    text = line.strip()
    return text.startswith("=") and text.endswith("=") and text.strip("= ").endswith("LOG")


def _tree(lines: list[tuple[int, str]], notes: Notes) -> Tree:
    """Nest (line number, text) by indentation: a line without a colon opens a section."""
    root: Tree = {}
    stack: list[tuple[int, Tree]] = [(-1, root)]
    for number, line in lines:
        indent = len(line) - len(line.lstrip(" "))
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        name, colon, value = line.strip().partition(":")
        if not name.strip():
            notes.add(
                f"smi -q output: a value without a key, skipped: {shown(line)} (line {number})"
            )
            continue
        if colon:
            parent[key(name)] = value.strip()
        else:
            section: Tree = {}
            parent[key(name)] = section
            stack.append((indent, section))
    return root


def parse(text: str) -> SmiReport:
    notes = Notes()
    head: list[tuple[int, str]] = []
    blocks: list[tuple[int, str, list[tuple[int, str]]]] = []
    vendors: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or is_banner(line):
            continue
        header = CARD_HEADER.match(line)
        if header:
            vendors.add("nvidia" if header[1] == "GPU" else "kunlunxin")
            blocks.append((number, header[2], []))
        elif blocks:
            blocks[-1][2].append((number, line))
        else:
            head.append((number, line))
    host = _tree(head, notes)
    attached = notes.soft(
        integer, lookup(host, "attachedxpus", "attachedgpus"), (), FORM, "Attached XPUs/GPUs"
    )
    if not blocks and attached is None:
        raise SmiParseError(FORM, "no card block and no 'Attached XPUs' line")
    cards = []
    for index, (number, raw_bus_id, body) in enumerate(blocks):
        if not body:
            notes.add(f"smi -q output: card {raw_bus_id} has no details (cut off?) (line {number})")
        canonical = notes.soft(bus_id, raw_bus_id, FORM, "card header", number)
        cards.append(card_from_tree(_tree(body, notes), FORM, index, canonical, notes))
    if attached is not None and attached != len(cards):
        notes.add(
            f"smi -q output: 'Attached' says {attached} but {len(cards)} card block(s) follow "
            "(one card asked for with --id, or the output was cut off)"
        )
    vendor = "nvidia" if vendors == {"nvidia"} or lookup(host, "attachedgpus") else "kunlunxin"
    return SmiReport(
        form=FORM,
        cards=tuple(cards),
        driver_version=notes.soft(
            version, lookup(host, "kmdversion", "driverversion"), FORM, "driver version"
        ),
        vendor=vendor,
        warnings=notes.done(),
    )
