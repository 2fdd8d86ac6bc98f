"""Options and output helpers every command shares, so flags read the same everywhere."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer

from xputune.host import HostView, open_host


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


RootOpt = Annotated[
    str | None,
    typer.Option(
        "--root",
        help="Read this host instead of the live one: a directory holding sys/ and proc/, "
        "or a recording made by `xputune record` (.tar.gz/.bz2/.xz).",
        metavar="PATH",
    ),
]
ExampleOpt = Annotated[
    str | None,
    typer.Option(
        "--example",
        help="Use a recording shipped with xputune (see `xputune examples`).",
        metavar="NAME",
    ),
]
FormatOpt = Annotated[
    Format,
    typer.Option("--format", "-f", help="table for people; json or yaml for scripts."),
]


def host_from(root: str | None, example: str | None) -> HostView:
    return open_host(root, example)


def emit_data(data: dict[str, Any], fmt: Format) -> None:
    """Machine-readable output: stable key order so the same input prints the same bytes."""
    if fmt is Format.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
    else:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")


def console():
    """A rich console for tables; imported lazily because rich costs start-up time."""
    from rich.console import Console

    return Console()
