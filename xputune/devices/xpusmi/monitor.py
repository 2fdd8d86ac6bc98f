"""`xpu-smi -m`: one whitespace-separated line per card, the model name quoted at the end.

Fields: bus id, minor number, then fields this parser does not interpret, then memory used and
total (MiB), utilisation (%), firmware version and the quoted model name, which may hold
spaces. Fields are found from both ends, so a release that adds middle columns still reads.
Lines starting with '#' (a header, if a release prints one) are skipped.
"""

from __future__ import annotations

from xputune.devices.xpusmi.model import SmiCard, SmiParseError, SmiReport
from xputune.devices.xpusmi.values import bus_id, integer, mib, text_value

FORM = "monitor"
MIN_FIELDS = 6  # bus id, minor, memory used, memory total, utilisation, firmware


def parse(text: str) -> SmiReport:
    cards: list[SmiCard] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        start = line.rfind('"', 0, len(line) - 1)
        head = line[:start]
        if not line.endswith('"') or start < 0 or '"' in head or not head[-1:].isspace():
            raise SmiParseError(FORM, "a card line must end with the quoted model name", number)
        name = line[start + 1 : -1]
        fields = head.split()
        if len(fields) < MIN_FIELDS:
            raise SmiParseError(
                FORM, f"{len(fields)} fields before the name, need at least {MIN_FIELDS}", number
            )
        cards.append(
            SmiCard(
                index=len(cards),
                bus_id=bus_id(fields[0], FORM, "bus id", number),
                minor=integer(fields[1], (), FORM, "minor number", number),
                memory_used_mib=mib(fields[-4], FORM, "memory used", number),
                memory_total_mib=mib(fields[-3], FORM, "memory total", number),
                utilization_pct=integer(fields[-2], ("%",), FORM, "utilization", number),
                firmware=text_value(fields[-1]),
                name=text_value(name),
            )
        )
    if not cards:
        raise SmiParseError(FORM, "no card line")
    return SmiReport(form=FORM, cards=tuple(cards))
