"""`xpu-smi -L`: one line per card, "XPU 0: <name> (UUID: ..., ...)", as nvidia-smi -L.

Indented lines under a card (partitions, as MIG devices under nvidia-smi -L) are skipped.
The parenthesised part is a list of "key: value"; a bus id there, if any, is kept.
"""

from __future__ import annotations

import re

from xputune.devices.xpusmi.cards import key
from xputune.devices.xpusmi.model import SmiCard, SmiParseError, SmiReport
from xputune.devices.xpusmi.values import bus_id, shown, text_value

FORM = "list"
LINE = re.compile(r"^(?:XPU|GPU)\s+([0-9]{1,6})\s*:(.*)$", re.ASCII)
_BUS_KEYS = {"busid", "pcibusid", "bus", "bdf"}


def _split(rest: str, line: str, number: int) -> tuple[str, str | None]:
    """The name and the text inside the one trailing pair of parentheses (None if none)."""
    name, paren, inside = rest.partition("(")
    if not paren:
        if ")" in name:
            raise SmiParseError(FORM, f"not a card line: {shown(line)}", number)
        return name.strip(), None
    if not inside.rstrip().endswith(")") or "(" in inside or ")" in inside.rstrip()[:-1]:
        raise SmiParseError(FORM, f"not a card line (unclosed parenthesis?): {shown(line)}", number)
    return name.strip(), inside.rstrip()[:-1]


def _pairs(inside: str, number: int) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in inside.split(","):
        name, colon, value = item.partition(":")
        if not colon or not name.strip():
            raise SmiParseError(
                FORM, f"expected 'key: value' in parentheses, got {shown(item)}", number
            )
        pairs[key(name)] = value.strip()
    return pairs


def parse(text: str) -> SmiReport:
    cards: list[SmiCard] = []
    seen: set[int] = set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or (cards and line[:1].isspace()):
            continue
        m = LINE.match(line.strip())
        if m is None:
            raise SmiParseError(FORM, f"not a card line: {shown(line)}", number)
        index = int(m[1])
        if index in seen:
            raise SmiParseError(FORM, f"XPU {index} listed twice", number)
        seen.add(index)
        name, inside = _split(m[2], line, number)
        pairs = _pairs(inside, number) if inside is not None and inside.strip() else {}
        bus = next((pairs[k] for k in _BUS_KEYS if k in pairs), None)
        cards.append(
            SmiCard(
                index=index,
                bus_id=bus_id(bus, FORM, "bus id", number),
                name=text_value(name),
                uuid=text_value(pairs.get("uuid")),
                serial=text_value(pairs.get("sn") or pairs.get("serial")),
            )
        )
    if not cards:
        raise SmiParseError(FORM, "no card line")
    return SmiReport(form=FORM, cards=tuple(cards))
