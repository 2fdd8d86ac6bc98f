"""An SmiReport from a saved output (any form) or, without one, from the installed xpu-smi."""

from __future__ import annotations

import sys

from xputune.devices.xpusmi import parse_bytes
from xputune.devices.xpusmi.model import SmiError, SmiReport
from xputune.devices.xpusmi.values import MAX_INPUT


def load(path: str | None) -> SmiReport:
    """Parse the file at `path` ("-" is stdin); None runs xpu-smi (run.query)."""
    if path is None:
        from xputune.devices.xpusmi.run import query

        return query()
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_INPUT + 1)
        else:
            with open(path, "rb") as fh:
                data = fh.read(MAX_INPUT + 1)
    except OSError as exc:
        raise SmiError(f"{path}: {exc.strerror or exc}") from None
    return parse_bytes(data)
