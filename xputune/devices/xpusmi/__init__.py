"""Parsers for what xpu-smi and nvidia-smi print (default table, -L, -q, -q -x, -m, topo -m, and
nvidia-smi --query-gpu=... --format=csv).

parse(text) detects the form and vendor and returns an SmiReport whose cards carry probe's card
names and canonical bus ids (identity.py). Reading is liberal, meaning is strict: a field that
cannot be read is None with a line in `warnings`; only a text in which nothing is recognisable
(or a hostile XML document, or two cards with one bus id) raises SmiParseError, one line.
parse_file() streams the XML form, so a huge `-q -x` costs little memory.
Real outputs these are tested on: tests/devices/data/real (README there names the sources).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import BinaryIO

from xputune.devices.xpusmi import csvform, listform, monitor, query, table, topo, xmlform
from xputune.devices.xpusmi.detect import detect
from xputune.devices.xpusmi.identity import finish
from xputune.devices.xpusmi.model import (
    FORMS,
    SmiCard,
    SmiError,
    SmiMig,
    SmiParseError,
    SmiProcess,
    SmiReport,
    SmiTopo,
)
from xputune.devices.xpusmi.values import MAX_INPUT, clean

__all__ = [
    "FORMS",
    "PARSERS",
    "SmiCard",
    "SmiError",
    "SmiMig",
    "SmiParseError",
    "SmiProcess",
    "SmiReport",
    "SmiTopo",
    "detect",
    "parse",
    "parse_bytes",
    "parse_file",
]

PARSERS: dict[str, Callable[[str], SmiReport]] = {
    "table": table.parse,
    "list": listform.parse,
    "query": query.parse,
    "xml": xmlform.parse,
    "monitor": monitor.parse,
    "topo": topo.parse,
    "csv": csvform.parse,
}
SNIFF = 64 << 10  # bytes read to tell XML from the text forms


def parse(text: str, form: str | None = None) -> SmiReport:
    """The report in `text`, of the given form or the detected one."""
    if len(text) > MAX_INPUT:
        raise SmiParseError(form, f"input larger than {MAX_INPUT >> 20} MiB")
    if form is not None and form not in PARSERS:
        raise SmiParseError(None, f"unknown form {form!r} (known: {', '.join(PARSERS)})")
    text = clean(text)
    chosen = form or detect(text)
    return finish(PARSERS[chosen](text))


def parse_bytes(data: bytes, form: str | None = None) -> SmiReport:
    """As parse(), from raw bytes (undecodable bytes become U+FFFD, never an exception)."""
    return parse(data.decode("utf-8", "replace"), form)


def _rest(head: bytes, stream: BinaryIO) -> Iterator[bytes]:
    yield head
    while chunk := stream.read(xmlform.CHUNK):
        yield chunk


def parse_file(stream: BinaryIO) -> SmiReport:
    """The report in an open binary stream: XML is streamed, text forms read whole (capped)."""
    head = stream.read(SNIFF)
    if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
        return finish(xmlform.parse_chunks(_rest(head, stream)))
    rest = stream.read(MAX_INPUT + 1 - len(head)) if len(head) == SNIFF else b""
    return parse_bytes(head + rest)
