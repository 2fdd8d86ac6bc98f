"""Output helpers with no typer import, shared by the typer commands and the probe fast path."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Any

PIPE_WIDTH = 160


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


def emit_data(data: dict[str, Any], fmt: Format) -> None:
    """Machine-readable output: stable key order so the same input prints the same bytes."""
    if fmt is Format.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
    else:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")


def console():
    """A rich console for tables; imported lazily because rich costs start-up time.

    Piped output gets a fixed width so the same host prints the same bytes anywhere.
    """
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else PIPE_WIDTH)
