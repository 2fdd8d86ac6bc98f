"""Parsers for Kunlunxin xpu-smi output (-L, -q, -q -x, -m, topo -m) and a runner for the tool.

parse(text) detects the form and returns an SmiReport; anything it cannot read raises one
SmiParseError with a message naming the form and, where it helps, the line. The sample outputs
in the tests are modelled on nvidia-smi's equivalents as REFERENCE section 5 describes them,
not captured from a real card.
"""

from __future__ import annotations

from collections.abc import Callable

from xputune.devices.xpusmi import listform, monitor, query, topo, xmlform
from xputune.devices.xpusmi.detect import detect
from xputune.devices.xpusmi.model import (
    FORMS,
    SmiCard,
    SmiError,
    SmiParseError,
    SmiReport,
    SmiTopo,
)
from xputune.devices.xpusmi.values import MAX_INPUT, clean

__all__ = [
    "FORMS",
    "SmiCard",
    "SmiError",
    "SmiParseError",
    "SmiReport",
    "SmiTopo",
    "detect",
    "parse",
    "parse_bytes",
]

PARSERS: dict[str, Callable[[str], SmiReport]] = {
    "list": listform.parse,
    "query": query.parse,
    "xml": xmlform.parse,
    "monitor": monitor.parse,
    "topo": topo.parse,
}


def parse(text: str, form: str | None = None) -> SmiReport:
    """The report in `text`, of the given form or the detected one."""
    if len(text) > MAX_INPUT:
        raise SmiParseError(form, f"input larger than {MAX_INPUT >> 20} MiB")
    if form is not None and form not in PARSERS:
        raise SmiParseError(None, f"unknown form {form!r} (known: {', '.join(PARSERS)})")
    text = clean(text)
    chosen = form or detect(text)
    return PARSERS[chosen](text)


def parse_bytes(data: bytes, form: str | None = None) -> SmiReport:
    """As parse(), from raw bytes (undecodable bytes become U+FFFD, never an exception)."""
    return parse(data.decode("utf-8", "replace"), form)
