"""schema: the JSON Schemas (draft 2020-12) of every --format json document, shipped inside."""

from __future__ import annotations

from typing import Annotated

import typer

from xputune.cli.checks import given
from xputune.errors import XputuneError


def schema_names() -> list[str]:
    from importlib.resources import files

    folder = files("xputune") / "data" / "schemas"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def schema_text(name: str) -> str:
    from importlib.resources import files

    if name not in schema_names():
        known = ", ".join(schema_names())
        raise XputuneError(f"no schema named {name!r} (known: {known})")
    return (files("xputune") / "data" / "schemas" / f"{name}.json").read_text()


def _complete(incomplete: str) -> list[str]:
    return [n for n in schema_names() if n.startswith(incomplete)]


def schema(
    name: Annotated[
        str | None,
        typer.Argument(
            help="A document: the command path joined by '-' (probe, plan, kernels-plan, ...).",
            metavar="NAME",
            autocompletion=_complete,
            callback=given,
        ),
    ] = None,
) -> None:
    """Print the JSON Schema of a command's --format json output; without NAME, list them.

    Every document carries schema_version. Additive changes (a new key) keep it; consumers
    must ignore keys they do not know. Renaming or removing a key raises it. The schemas are
    JSON Schema draft 2020-12 and ship inside the package (xputune/data/schemas/).

    Examples:

        xputune schema
        xputune schema probe > probe.schema.json
        xputune probe -f json | check-jsonschema --schemafile probe.schema.json -
    """
    if name is None:
        for known in schema_names():
            typer.echo(known)
        return
    typer.echo(schema_text(name), nl=False)


def register(app: typer.Typer) -> None:
    app.command()(schema)
