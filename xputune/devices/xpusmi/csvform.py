"""`nvidia-smi --query-gpu=... --format=csv`: a header line naming the columns, one row per GPU.

This is what monitoring scripts save ("index, name, pci.bus_id, memory.total [MiB]"). The header
names the fields, so columns are matched by name (the unit in brackets dropped), in any order;
a column this reader does not know is ignored. nvidia-smi writes "[N/A]" or "[Not Supported]"
where a GPU cannot say: that is unknown, not an error. `nounits` drops the units from values
but keeps them in the header, which is fine; `noheader` leaves columns nobody can name, so such
a text is refused with one line saying what to save instead (looks_headless tells detect).
Values hold no commas in practice (product names do not), so a plain split at commas is right;
a row with a different number of fields than the header is skipped with a warning.
"""

from __future__ import annotations

import re
from collections.abc import Callable

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
    version,
)

FORM = "csv"
_FIELD = re.compile(r"^[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*(?:\s*\[[^\]]{1,10}\])?$", re.ASCII)
_UNIT = re.compile(r"\s*\[[^\]]*\]$")
Reader = Callable[[str, str], object]


def _text(value: str, _what: str) -> str | None:
    return text_value(value)


def _whole(value: str, what: str) -> int | None:
    return integer(value, ("c",), FORM, what)


def _watts(value: str, what: str) -> float | None:
    return number(value, ("w",), FORM, what)


# query field (as --help-query-gpu names it) -> (SmiCard field, reader)
FIELDS: dict[str, tuple[str, Reader]] = {
    "index": ("index", lambda v, w: integer(v, (), FORM, w)),
    "name": ("name", _text),
    "gpu_name": ("name", _text),
    "uuid": ("uuid", _text),
    "gpu_uuid": ("uuid", _text),
    "serial": ("serial", _text),
    "gpu_serial": ("serial", _text),
    "pci.bus_id": ("bus_id", lambda v, w: bus_id(v, FORM, w)),
    "gpu_bus_id": ("bus_id", lambda v, w: bus_id(v, FORM, w)),
    "vbios_version": ("firmware", _text),
    "memory.total": ("memory_total_mib", lambda v, w: mib(v, FORM, w)),
    "memory.used": ("memory_used_mib", lambda v, w: mib(v, FORM, w)),
    "memory.free": ("memory_free_mib", lambda v, w: mib(v, FORM, w)),
    "utilization.gpu": ("utilization_pct", lambda v, w: percent(v, FORM, w)),
    "utilization.memory": ("memory_utilization_pct", lambda v, w: percent(v, FORM, w)),
    "temperature.gpu": ("temperature_c", _whole),
    "power.draw": ("power_w", _watts),
    "power.draw.instant": ("power_w", _watts),
    "power.draw.average": ("power_w", _watts),
}
DRIVER = "driver_version"
KNOWN = frozenset((*FIELDS, DRIVER))


def _split(line: str) -> list[str]:
    return [item.strip() for item in line.split(",")]


def field_name(item: str) -> str:
    """The query field a header item names: "memory.total [MiB]" -> "memory.total"."""
    return _UNIT.sub("", item.strip()).lower()


def is_header(line: str) -> bool:
    """A --format=csv header: every item a field name (unit in brackets allowed), one known."""
    items = _split(line)
    return all(_FIELD.match(i) for i in items) and any(field_name(i) in KNOWN for i in items)


def looks_headless(lines: list[str]) -> bool:
    """Rows of `--format=csv,noheader`: comma-separated, the same number of fields each."""
    counts = {len(_split(line)) for line in lines}
    return len(counts) == 1 and counts.pop() > 1 and not is_header(lines[0])


def refuse_headless() -> SmiParseError:
    return SmiParseError(
        FORM,
        "CSV rows without a header line (--format=csv,noheader): the columns cannot be named; "
        "save the output of nvidia-smi --query-gpu=... --format=csv (without noheader)",
    )


def _row(values: list[str], names: list[str], number: int, notes: Notes) -> tuple[SmiCard, str]:
    """The card of one row, and its driver version field ("" when the query did not ask)."""
    fields: dict[str, object] = {}
    driver = ""
    for name, value in zip(names, values, strict=True):
        if name == DRIVER:
            driver = value
        elif name in FIELDS:
            target, read = FIELDS[name]
            got = notes.soft(read, value, f"{name} (line {number})")
            if fields.get(target) is None:  # power.draw and power.draw.instant: first one read
                fields[target] = got
    return SmiCard(**fields), driver  # type: ignore[arg-type]


def _driver(versions: list[str], notes: Notes) -> str | None:
    """The one driver version of the rows; different ones are odd, the first is kept."""
    read = [v for v in versions if v]
    if len(set(read)) > 1:
        notes.add(f"smi csv output: rows name different drivers ({', '.join(sorted(set(read)))})")
    return notes.soft(version, read[0], FORM, "driver_version") if read else None


def parse(text: str) -> SmiReport:
    notes = Notes()
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise SmiParseError(FORM, "empty input")
    if not is_header(lines[0][1]):
        if looks_headless([line for _, line in lines[:50]]):
            raise refuse_headless()
        raise SmiParseError(FORM, f"no header line naming query fields: {shown(lines[0][1])}", 1)
    names = [field_name(item) for item in _split(lines[0][1])]
    cards: list[SmiCard] = []
    drivers: list[str] = []
    for at, line in lines[1:]:
        values = _split(line)
        if len(values) != len(names):
            notes.add(
                f"smi csv output: {len(values)} fields where the header names {len(names)}, "
                f"row skipped: {shown(line)} (line {at})"
            )
            continue
        card, driver = _row(values, names, at, notes)
        cards.append(card)
        drivers.append(driver)
    if not cards:
        notes.add("smi csv output: a header line but no GPU row")
    return SmiReport(
        form=FORM,
        cards=tuple(cards),
        driver_version=_driver(drivers, notes),
        vendor="nvidia",
        warnings=notes.done(),
    )
