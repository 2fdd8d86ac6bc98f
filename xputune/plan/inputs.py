"""What users type or hand over as text, read into numbers: counts with K/M/G/T suffixes,
TOKENS:MS pairs, and small CSV tables of measurements (for `model` and `tiers`).

Parsing is pure; `read_text` is the one read, of a file the user names.
"""

from __future__ import annotations

import io
from pathlib import Path

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
        raise XputuneError(f"{what}: not a number: {text!r}") from None
    if value < 0 or value != int(value):
        raise XputuneError(f"{what}: must be a whole number >= 0, got {text!r}")
    return int(value)


def read_text(path: Path, what: str) -> str:
    """A file the user names, as text; one clear line for each way it can fail."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise XputuneError(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise XputuneError(f"{what} is a directory: {path}") from None
    except PermissionError:
        raise XputuneError(f"{what} not readable (permission denied): {path}") from None
    except UnicodeDecodeError:
        raise XputuneError(f"{what} is not UTF-8 text: {path}") from None


def read_lines(path: Path, what: str) -> list[str]:
    return io.StringIO(read_text(path, what)).readlines()  # split at newlines only


def pair(text: str, what: str) -> tuple[float, float]:
    tokens, sep, ms = text.partition(":")
    if not sep:
        raise XputuneError(f"{what}: expected TOKENS:MS, got {text!r}")
    try:
        return float(count(tokens, what)), float(ms)
    except ValueError:
        raise XputuneError(f"{what}: milliseconds not a number in {text!r}") from None


def csv_points(path: Path) -> list[tuple[float, float]]:
    points = []
    for number, line in enumerate(read_lines(path, "points file"), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        cells = [c.strip() for c in text.split(",")]
        if len(cells) != 2:
            raise XputuneError(f"{path}: line {number}: expected tokens,ms")
        try:
            points.append((float(cells[0]), float(cells[1])))
        except ValueError:
            if number == 1 or not points:
                continue  # a header row
            raise XputuneError(f"{path}: line {number}: not numbers: {text!r}") from None
    return points
