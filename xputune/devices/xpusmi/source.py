"""An SmiReport from a saved output (any form, either vendor) or, without one, from the host."""

from __future__ import annotations

import sys
from pathlib import Path

from xputune.devices.xpusmi import parse_file
from xputune.devices.xpusmi.model import SmiError, SmiReport
from xputune.devices.xpusmi.values import MAX_INPUT
from xputune.userfiles import bounded, open_binary, printable

WHAT = "smi output"


def load(path: str | None) -> SmiReport:
    """Parse the file at `path` ("-" is stdin); None asks the host (run.query).

    A file must be a regular one (a FIFO or a device is refused before it is read: that is
    what stdin is for), and neither it nor stdin may hold more than the parsers' MAX_INPUT,
    whatever the form (the text forms are read whole, the XML form is streamed)."""
    if path is None:
        from xputune.devices.xpusmi.run import query

        return query()
    if path == "-":
        return parse_file(bounded(sys.stdin.buffer, WHAT, MAX_INPUT))
    with open_binary(Path(path), WHAT, MAX_INPUT) as fh:
        try:
            return parse_file(fh)
        except OSError as exc:
            raise SmiError(f"{printable(path)}: {exc.strerror or exc}") from None
