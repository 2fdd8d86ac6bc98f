"""Options every command shares, so flags read the same everywhere."""

from __future__ import annotations

from typing import Annotated

import typer

from xputune.cli.checks import given
from xputune.cli.completion import complete_examples, complete_formats
from xputune.cli.output import Format, console, emit_data
from xputune.host import HostView, open_host

__all__ = [
    "ExampleOpt",
    "Format",
    "FormatOpt",
    "RootOpt",
    "complete_examples",
    "complete_formats",
    "console",
    "emit_data",
    "host_from",
]

RootOpt = Annotated[
    str | None,
    typer.Option(
        "--root",
        help="Read this host instead of the live one: a directory holding sys/ and proc/, "
        "or a recording made by `xputune record` (.tar.gz/.bz2/.xz).",
        metavar="PATH",
        callback=given,
    ),
]
ExampleOpt = Annotated[
    str | None,
    typer.Option(
        "--example",
        help="Use a recording shipped with xputune (see `xputune examples`).",
        metavar="NAME",
        autocompletion=complete_examples,
        callback=given,
    ),
]
FormatOpt = Annotated[
    Format,
    typer.Option(
        "--format",
        "-f",
        help="table for people; json or yaml for scripts.",
        autocompletion=complete_formats,
    ),
]


def host_from(root: str | None, example: str | None) -> HostView:
    return open_host(root, example)
