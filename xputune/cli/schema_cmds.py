"""schema: the JSON Schemas (draft 2020-12) of every --format json document, shipped inside."""

from __future__ import annotations

from xputune.cli.spec import Arg, Command, Request
from xputune.errors import XputuneError

SCHEMA = Command(
    ("schema",),
    "xputune.cli.schema_cmds:schema",
    args=(
        Arg("name", "NAME", "A document: the command path joined by '-' (probe, plan, "
            "kernels-plan, ...).", kind="name", required=False, complete="complete_schemas"),
    ),
)  # fmt: skip


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


def schema(req: Request) -> None:
    """Print the JSON Schema of a command's --format json output; without NAME, list them.

    Every document carries schema_version. Additive changes (a new key) keep it; consumers
    must ignore keys they do not know. Renaming or removing a key raises it. The schemas are
    JSON Schema draft 2020-12 and ship inside the package (xputune/data/schemas/).

    Examples:

        xputune schema
        xputune schema probe > probe.schema.json
        xputune probe -f json | check-jsonschema --schemafile probe.schema.json -
    """
    if req.name is None:
        print("\n".join(schema_names()))
        return
    print(schema_text(req.name), end="")
