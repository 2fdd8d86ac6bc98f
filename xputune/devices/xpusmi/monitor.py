"""`xpu-smi -m`: one whitespace-separated line per card, the quoted model name in the middle.

The documented order, as real outputs show it (xpu-smi 5.x, P800):

    0 bus id, 1 index, 2 minor (/dev/xpuN), 3 serial, 4 temperature C, 5-7 (not read),
    8 power W, 9-14 clocks MHz, 15 L3 used MiB, 16 L3 total MiB, 17 memory used MiB,
    18 memory total MiB, 19 utilisation %, 20 firmware, "quoted model name", then more numbers

The name may hold spaces, so the line is split at the quotes; the fields after the name are not
read. When a release prints a different number of fields before the name, only the ends are
trusted: bus id and index from the left, memory used/total, utilisation and firmware from the
right (the block next to the name), with a warning. Lines starting with '#' are skipped.
"""

from __future__ import annotations

from xputune.devices.xpusmi.model import SmiCard, SmiParseError, SmiReport
from xputune.devices.xpusmi.values import (
    Notes,
    bus_id,
    integer,
    mib,
    number,
    percent,
    shown,
    text_value,
)

FORM = "monitor"
DOCUMENTED = 21  # fields before the quoted name in the documented order
MIN_FIELDS = 6  # bus id, index, memory used, memory total, utilisation, firmware


def _card(fields: list[str], name: str, number_: int, notes: Notes, order: int) -> SmiCard:
    soft = notes.soft
    full = len(fields) == DOCUMENTED
    label = f"{fields[0]}"
    return SmiCard(
        index=soft(integer, fields[1], (), FORM, f"{label} index", number_) if full else order,
        bus_id=soft(bus_id, fields[0], FORM, "bus id", number_),
        minor=soft(integer, fields[2] if full else fields[1], (), FORM, f"{label} minor", number_),
        serial=text_value(fields[3]) if full else None,
        temperature_c=soft(integer, fields[4], ("c",), FORM, f"{label} temp", number_)
        if full
        else None,
        power_w=soft(number, fields[8], ("w",), FORM, f"{label} power", number_) if full else None,
        memory_used_mib=soft(mib, fields[-4], FORM, f"{label} memory used", number_),
        memory_total_mib=soft(mib, fields[-3], FORM, f"{label} memory total", number_),
        utilization_pct=soft(percent, fields[-2], FORM, f"{label} utilization", number_),
        firmware=text_value(fields[-1]),
        name=text_value(name),
    )


def parse(text: str) -> SmiReport:
    notes = Notes()
    cards: list[SmiCard] = []
    for number_, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        first = line.find('"')
        last = line.find('"', first + 1) if first >= 0 else -1
        fields = line[:first].split() if first >= 0 else []
        if last < 0 or len(fields) < MIN_FIELDS:
            notes.add(f"smi -m output: not a card line, skipped: {shown(line)} (line {number_})")
            continue
        if len(fields) != DOCUMENTED:
            notes.add(
                f"smi -m output: {len(fields)} fields before the name, documented {DOCUMENTED}; "
                f"read only bus id, memory, utilisation and firmware (line {number_})"
            )
        cards.append(_card(fields, line[first + 1 : last], number_, notes, len(cards)))
    if not cards:
        raise SmiParseError(FORM, 'no card line (bus id ... "model name" ...)')
    return SmiReport(form=FORM, cards=tuple(cards), warnings=notes.done())
