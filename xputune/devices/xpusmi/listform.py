"""`-L`: one line per card, "XPU 0: <name> (UUID: ..., ...)" or "XPU 0: <name>  GPU-<uuid>".

nvidia-smi puts the UUID in parentheses; xpu-smi prints it as a separate last field after two
spaces. Both are read: the parenthesised part is a list of "key: value" (a bus id there, if any,
is kept), and a trailing word that looks like a UUID (GPU-/XPU-/MIG- and hex) is the UUID.
Indented lines under a card (MIG devices, partitions) are skipped; any other unreadable line is
a warning, and only a text without a single card line is refused.
"""

from __future__ import annotations

import re

from xputune.devices.xpusmi.cards import key
from xputune.devices.xpusmi.model import SmiCard, SmiParseError, SmiReport
from xputune.devices.xpusmi.values import Notes, bus_id, shown, text_value

FORM = "list"
LINE = re.compile(r"^(XPU|GPU)\s+([0-9]{1,6})\s*:(.*)$", re.ASCII)
UUID = re.compile(r"^(?:GPU|XPU|MIG)-[0-9A-Fa-f][0-9A-Fa-f-]{7,80}$", re.ASCII)
_BUS_KEYS = ("busid", "pcibusid", "bus", "bdf")


def _split(rest: str) -> tuple[str, str | None] | None:
    """The name and the text inside one trailing pair of parentheses; None if unbalanced."""
    name, paren, inside = rest.partition("(")
    if not paren:
        return None if ")" in name else (name.strip(), None)
    inside = inside.rstrip()
    if not inside.endswith(")") or "(" in inside or ")" in inside[:-1]:
        return None
    return name.strip(), inside[:-1]


def _pairs(inside: str) -> dict[str, str] | None:
    pairs: dict[str, str] = {}
    for item in inside.split(","):
        name, colon, value = item.partition(":")
        if not colon or not name.strip():
            return None
        pairs[key(name)] = value.strip()
    return pairs


def parse(text: str) -> SmiReport:
    notes = Notes()
    cards: list[SmiCard] = []
    seen: set[int] = set()
    vendors: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or (cards and line[:1].isspace()):
            continue
        m = LINE.match(line.strip())
        split = _split(m[3]) if m else None
        pairs = _pairs(split[1]) if split and split[1] and split[1].strip() else {}
        if m is None or split is None or pairs is None:
            notes.add(f"smi -L output: not a card line, skipped: {shown(line)} (line {number})")
            continue
        index = int(m[2])
        if index in seen:
            notes.add(f"smi -L output: card {index} listed twice, second kept out (line {number})")
            continue
        seen.add(index)
        vendors.add("nvidia" if m[1] == "GPU" else "kunlunxin")
        name, uuid = split[0], pairs.get("uuid")
        words = name.split()
        if uuid is None and len(words) > 1 and UUID.match(words[-1]):
            name, uuid = name[: name.rindex(words[-1])].strip(), words[-1]
        bus = next((pairs[k] for k in _BUS_KEYS if k in pairs), None)
        cards.append(
            SmiCard(
                index=index,
                bus_id=notes.soft(bus_id, bus, FORM, "bus id", number),
                name=text_value(name),
                uuid=text_value(uuid),
                serial=text_value(pairs.get("sn") or pairs.get("serial")),
            )
        )
    if not cards:
        raise SmiParseError(FORM, "no card line ('XPU 0: <name> ...')")
    vendor = "nvidia" if vendors == {"nvidia"} else "kunlunxin"
    return SmiReport(form=FORM, cards=tuple(cards), vendor=vendor, warnings=notes.done())
