"""What users type or hand over as text, read into numbers: counts with K/M/G/T suffixes,
TOKENS:MS pairs, and small CSV tables of measurements (for `model` and `tiers`).

All pure: the files themselves are read by xputune/userfiles.py.
"""

from __future__ import annotations

from xputune.errors import XputuneError

_SUFFIX = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def count(text: str, what: str) -> int:
    """An integer count, optionally with a K/M/G/T (decimal) suffix: 64K, 2M."""
    raw = text.strip().lower().replace("_", "")
    scale = _SUFFIX.get(raw[-1:], 1.0)
    body = raw[:-1] if raw[-1:] in _SUFFIX else raw
    try:
        value = float(body) * scale
    except ValueError:
        raise XputuneError(f"{what}: not a number: {_shown(text)}") from None
    # nan, inf and 5000 digits fail the first test (before int() would raise on them)
    if not 0 <= value <= POINT_MAX or value != int(value):
        raise XputuneError(
            f"{what}: must be a whole number from 0 to {POINT_MAX:g}, got {_shown(text)}"
        )
    return int(value)


def _shown(text: str) -> str:
    """The text as an error quotes it: a 5000-digit number is not a 5000-character line."""
    return repr(text) if len(text) <= 60 else repr(text[:57]) + "..."


def pair(text: str, what: str) -> tuple[float, float]:
    tokens, sep, ms = text.partition(":")
    if not sep:
        raise XputuneError(f"{what}: expected TOKENS:MS, got {_shown(text)}")
    at = float(count(tokens, what))
    try:
        millis = float(ms)
    except ValueError:
        raise XputuneError(f"{what}: milliseconds not a number in {_shown(text)}") from None
    if not 0 <= millis <= POINT_MAX:  # also false for nan
        raise XputuneError(
            f"{what}: milliseconds must be from 0 to {POINT_MAX:g} in {_shown(text)}"
        )
    return at, millis


#: tokens or milliseconds of one measurement, at most (and never nan, inf or negative)
POINT_MAX = 1e15


def csv_points(lines: list[str], source: str) -> list[tuple[float, float]]:
    """tokens,ms rows of a points table (a header row and # comments allowed)."""
    points = []
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        cells = [c.strip() for c in text.split(",")]
        if len(cells) != 2:
            raise XputuneError(f"{source}: line {number}: expected tokens,ms")
        try:
            values = (float(cells[0]), float(cells[1]))
        except ValueError:
            if number == 1 or not points:
                continue  # a header row
            raise XputuneError(f"{source}: line {number}: not numbers: {text!r}"[:200]) from None
        if not all(0 <= v <= POINT_MAX for v in values):  # also false for nan
            raise XputuneError(
                f"{source}: line {number}: tokens and ms must be within 0..{POINT_MAX:g}, "
                f"got {text!r}"[:200]
            )
        points.append(values)
    return points
