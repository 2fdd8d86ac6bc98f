"""Cleaning and reading vendor tool values: colour codes, N/A, numbers with units.

The tools colour output on a terminal (and some builds even when piped), pad columns to
varying widths and write N/A (or "[Not Supported]") where a card cannot say. The readers here
are strict about what a value is (a garbled number raises SmiParseError, never a guess); the
parsers call them through Notes.soft, which turns that error into None plus one warning, so a
bad field costs the field, not the document.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from xputune import trail
from xputune.devices.busid import normalize_bus_id
from xputune.devices.xpusmi.model import SmiParseError

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_MISSING = {
    "n/a",
    "[n/a]",
    "not supported",
    "[not supported]",
    "unknown",
    "unknown error",
    "[unknown error]",
    "insufficient permissions",
    "[insufficient permissions]",
    "-",
}
_NUMBER = re.compile(r"^([0-9]{1,15}(?:\.[0-9]{1,6})?)\s*([A-Za-z%]*)$", re.ASCII)
_VERSION = re.compile(r"^([0-9]{1,6}(?:\.[0-9]{1,6}){0,5})(?=\s|$)", re.ASCII)
_MIB_PER = {"mib": 1, "mb": 1, "gib": 1024, "gb": 1024, "kib": 1 / 1024, "kb": 1 / 1024}

MAX_INPUT = 64 << 20  # 64 MiB of text forms: far above any real output, refuses junk early
MAX_WARNINGS = 50  # one bad field per card and line is plenty to see what went wrong
T = TypeVar("T")


class Notes:
    """The warnings of one parse: what could not be read, where, and what was expected."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.dropped = 0

    def add(self, message: str) -> None:
        if len(self.items) < MAX_WARNINGS or trail.active():  # --verbose: every warning
            self.items.append(message)
        else:
            self.dropped += 1

    def soft(self, read: Callable[..., T], *args: object) -> T | None:
        """`read(*args)`, or None with a warning when the value is garbled."""
        try:
            return read(*args)
        except SmiParseError as exc:
            self.add(str(exc))
            return None

    def done(self) -> tuple[str, ...]:
        extra = (f"... and {self.dropped} more warnings",) if self.dropped else ()
        return (*self.items, *extra)


def shown(value: str, limit: int = 60) -> str:
    """repr() of `value` cut to `limit` characters, so an error stays one readable line."""
    text = repr(value.strip())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clean(text: str) -> str:
    """Drop colour codes, carriage returns, NULs and a byte-order mark; expand tabs."""
    text = _ANSI.sub("", text).replace("\r", "").replace("\0", "").expandtabs(8)
    return text.removeprefix("\ufeff")


def missing(value: str | None) -> bool:
    return value is None or value.strip().lower() in _MISSING


def text_value(value: str | None) -> str | None:
    """A free-text field, None when the tool says it has none."""
    return None if missing(value) or not value.strip() else value.strip()  # type: ignore[union-attr]


def _measure(
    value: str | None, units: tuple[str, ...], form: str, what: str, line: int | None
) -> tuple[float, str] | None:
    """(number, lower-case unit or "") of `value` in one of `units`, None when N/A."""
    if missing(value):
        return None
    assert value is not None
    m = _NUMBER.match(value.strip())
    if m is None or (m[2] and m[2].lower() not in units):
        expected = f"a number in {'/'.join(units)}" if units else "a whole number"
        raise SmiParseError(form, f"{what}: not {expected}: {shown(value)}", line)
    return float(m[1]), m[2].lower()


def number(
    value: str | None, units: tuple[str, ...], form: str, what: str, line: int | None = None
) -> float | None:
    """`value` as a number in one of `units` (no unit accepted too), None when N/A."""
    got = _measure(value, units, form, what, line)
    return None if got is None else got[0]


def percent(value: str | None, form: str, what: str, line: int | None = None) -> float | int | None:
    """A percentage ("10 %", "33.4 %", "10%"): whole numbers stay ints in JSON."""
    got = number(value, ("%",), form, what, line)
    return None if got is None else (int(got) if got == int(got) else got)


def integer(
    value: str | None, units: tuple[str, ...], form: str, what: str, line: int | None = None
) -> int | None:
    got = number(value, units, form, what, line)
    if got is not None and not units and got != int(got):
        raise SmiParseError(form, f"{what}: not a whole number: {shown(value or '')}", line)
    return None if got is None else int(got)


def mib(value: str | None, form: str, what: str, line: int | None = None) -> int | None:
    """A memory size in MiB ("98304 MiB", "96 GiB", or a bare number of MiB)."""
    got = _measure(value, tuple(_MIB_PER), form, what, line)
    if got is None:
        return None
    amount, unit = got
    return int(amount * _MIB_PER[unit or "mib"])


def bus_id(value: str | None, form: str, what: str, line: int | None = None) -> str | None:
    if missing(value):
        return None
    assert value is not None
    canonical = normalize_bus_id(value)
    if canonical is None:
        raise SmiParseError(form, f"{what}: not a PCI bus id: {shown(value)}", line)
    return canonical


def version(value: str | None, form: str, what: str, line: int | None = None) -> str | None:
    """A driver version as just its number: "610.57.04 [Deprecated; ...]" reads "610.57.04".

    From driver 610 nvidia-smi -q appends a deprecation note to the old key's value ("Driver
    Version : 610.57.04 [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]");
    the note is not part of the version, and whoever compares versions must not see it.
    """
    if missing(value):
        return None
    assert value is not None
    m = _VERSION.match(value.strip())
    if m is None:
        raise SmiParseError(form, f"{what}: not a version number: {shown(value)}", line)
    return m[1]
