"""`xpu-smi -q`: an indented "key : value" tree, one top-level block per card.

Like nvidia-smi -q: a banner, host-wide keys (Driver Version, Attached XPUs), then a header line
"XPU 0000:23:00.0" per card followed by its indented keys and sections. Values are split from
keys at the first colon (bus ids hold colons of their own). A card header is recognised before
that split, since it holds colons but is not a key.
"""

from __future__ import annotations

import re

from xputune.devices.xpusmi.cards import Tree, card_from_tree, key, lookup
from xputune.devices.xpusmi.model import SmiParseError, SmiReport
from xputune.devices.xpusmi.values import bus_id, integer, shown, text_value

FORM = "query"
CARD_HEADER = re.compile(
    r"^(?:XPU|GPU)\s+([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}\.[0-7])\s*$", re.ASCII
)


def is_banner(line: str) -> bool:
    """The "=====XPUSMI LOG=====" line."""
    text = line.strip()
    return text.startswith("=") and text.endswith("=") and text.strip("= ").endswith("LOG")


def _tree(lines: list[tuple[int, str]]) -> Tree:
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
            raise SmiParseError(FORM, f"a value without a key: {shown(line)}", number)
        if colon:
            parent[key(name)] = value.strip()
        else:
            section: Tree = {}
            parent[key(name)] = section
            stack.append((indent, section))
    return root


def parse(text: str) -> SmiReport:
    head: list[tuple[int, str]] = []
    blocks: list[tuple[int, str, list[tuple[int, str]]]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or is_banner(line):
            continue
        header = CARD_HEADER.match(line)
        if header:
            blocks.append((number, header[1], []))
        elif blocks and line.startswith(" "):
            blocks[-1][2].append((number, line))
        else:
            head.append((number, line))
    host = _tree(head)
    attached = integer(lookup(host, "attachedxpus", "attachedgpus"), (), FORM, "Attached XPUs")
    cards = []
    for index, (number, raw_bus_id, body) in enumerate(blocks):
        if not body:
            raise SmiParseError(FORM, f"card {raw_bus_id} has no details (cut off?)", number)
        canonical = bus_id(raw_bus_id, FORM, "card header", number)
        cards.append(card_from_tree(_tree(body), FORM, index, canonical))
    if attached is not None and attached != len(cards):
        raise SmiParseError(
            FORM, f"Attached XPUs says {attached} but {len(cards)} card(s) follow (cut off?)"
        )
    if attached is None and not cards:
        raise SmiParseError(FORM, "no card and no 'Attached XPUs' line")
    return SmiReport(
        form=FORM,
        cards=tuple(cards),
        driver_version=text_value(lookup(host, "driverversion")),
    )
