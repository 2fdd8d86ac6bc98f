"""An SmiReport from a saved output (any form, either vendor) or, without one, from the host."""

from __future__ import annotations

import sys

from xputune.devices.xpusmi import parse_file
from xputune.devices.xpusmi.model import SmiError, SmiReport


def load(path: str | None) -> SmiReport:
    """Parse the file at `path` ("-" is stdin); None asks the host (run.query)."""
    if path is None:
        from xputune.devices.xpusmi.run import query

        return query()
    if path == "-":
        return parse_file(sys.stdin.buffer)
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below, after a streamed parse
    except OSError as exc:
        raise SmiError(f"{path}: {exc.strerror or exc}") from None
    with fh:
        try:
            return parse_file(fh)
        except OSError as exc:
            raise SmiError(f"{path}: {exc.strerror or exc}") from None
