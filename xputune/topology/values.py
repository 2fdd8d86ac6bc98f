"""Parsers for sysfs and procfs values, each raising HostDataError that names the file."""

from __future__ import annotations

import re

from xputune.errors import HostDataError
from xputune.host import HostView
from xputune.host.cpulist import parse_cpulist

_SPEED = re.compile(r"^(\d+(?:\.\d+)?) GT/s(?: PCIe)?$")
_BRACKETED = re.compile(r"\[([^\]]+)\]")


def parse_hex(text: str, path: str, bits: int = 16) -> int:
    """A sysfs hex ID like "0x1d22"."""
    try:
        if not text.lower().startswith("0x"):
            raise ValueError
        value = int(text, 16)
    except ValueError:
        raise HostDataError(path, text, "expected a hex number like 0x1d22") from None
    if value >= 1 << bits:
        raise HostDataError(path, text, f"expected at most {bits} bits")
    return value


def parse_int(text: str, path: str, minimum: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise HostDataError(path, text, "expected an integer") from None
    if minimum is not None and value < minimum:
        raise HostDataError(path, text, f"expected an integer >= {minimum}")
    return value


def parse_link_speed(text: str, path: str) -> float | None:
    """ "32.0 GT/s PCIe" (new kernels) or "8 GT/s" (old); "Unknown" when the link is down."""
    if text.lower().startswith("unknown"):
        return None
    match = _SPEED.match(text)
    if not match:
        raise HostDataError(path, text, 'expected a link speed like "32.0 GT/s PCIe"')
    return float(match.group(1))


def parse_link_width(text: str, path: str) -> int | None:
    width = parse_int(text, path, minimum=0)
    return width or None  # 0 means the link is down or unknown


def parse_numa_node(text: str, path: str) -> int | None:
    """-1 is the kernel's "no affinity known"; any other negative is garbage."""
    value = parse_int(text, path, minimum=-1)
    return None if value == -1 else value


def bracketed(text: str, path: str) -> str:
    """The current choice of a sysfs selector like "always [madvise] never"."""
    match = _BRACKETED.search(text)
    if not match:
        raise HostDataError(path, text, "expected one [bracketed] choice")
    return match.group(1)


def read_cpulist(view: HostView, path: str) -> tuple[int, ...] | None:
    text = view.read_optional(path)
    return None if text is None else parse_cpulist(text, path)


def read_optional_int(view: HostView, path: str, minimum: int | None = None) -> int | None:
    text = view.read_optional(path)
    return None if text is None else parse_int(text, path, minimum)
