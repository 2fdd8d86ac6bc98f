"""`xputune check` itself, free of typer, and what apply shares with it.

The typer command (cli/tune_cmds.py) and the fast path (cli/fastpath.py, from SPEC) both call
run_check, so a plain `xputune check` starts without importing typer (DESIGN: check within 2x
of the probe) and both print the same bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xputune.cli.checks import given
from xputune.cli.fastpath import EXAMPLE, ROOT, Opt, Spec, format_opt
from xputune.cli.output import Format, add_row, console, emit_data, text
from xputune.cli.suggest import same_host as same_host
from xputune.cli.suggest import suggested
from xputune.host import open_host

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from xputune.host import HostView
    from xputune.topology.model import Topology
    from xputune.tune.engine import Selection
    from xputune.tune.knobs import Row, TuneContext

SPEC = Spec(
    ("check",),
    (
        Opt("profile", ("--profile", "-p"), check=given),
        Opt("only", ("--only",), multiple=True, check=given),
        Opt("skip", ("--skip",), multiple=True, check=given),
        ROOT,
        EXAMPLE,
        format_opt(),
    ),
    "run_check",
)

VERDICT_STYLE = {"ok": "green", "drift": "red", "unsupported": "yellow", "unknown": "yellow"}


def setup(
    root: str | None,
    example: str | None,
    profile: str | None,
    overrides: dict[str, Any] | None = None,
    only: list[str] | None = None,
    skip: list[str] | None = None,
    force: bool = False,
) -> tuple[HostView, Topology, Selection, TuneContext]:
    """The host, its topology, the selected profile and knobs, and the engine's context."""
    from xputune.tune import engine

    view = open_host(root, example)
    topology = engine.discover(view)
    selection = engine.select(topology, profile, overrides, only, skip)
    engine.require_force(selection, force)
    return view, topology, selection, engine.context(view, topology, selection)


def profile_line(selection: Selection) -> str:
    """Which profile is in force and why, with its include chain."""
    profile = selection.profile
    how = {
        "given": "given",
        "recommended": "recommended for this host",
        "fallback": "no profile matched; fallback",
    }[selection.how]
    chain = " <- ".join(reversed(profile.chain))
    return f"profile {profile.name} ({how}; {chain})"


def rows_table(rows: list[Row]) -> Table:
    """One table row per setting, its verdict coloured."""
    from rich.table import Table

    table = Table(show_lines=False, header_style="bold")
    for column in ("Knob", "Where", "Expected", "Actual", "Verdict", "Severity"):
        table.add_column(column, overflow="fold")
    for row in rows:
        style = VERDICT_STYLE.get(row.verdict, "")
        add_row(
            table,
            row.knob,
            row.target,
            row.expected,
            row.actual,
            text(row.verdict, style),
            row.severity,
        )
    return table


def print_fixes(out: Console, rows: list[Row]) -> None:
    """Fixes below the table, one unwrapped line each, so they can be copied and run."""
    fixes = [r for r in rows if not r.holds and (r.fix or r.note)]
    if not fixes:
        return
    out.print("how to fix:", style="bold")
    for r in fixes:
        note = f"  ({r.note})" if r.note else ""
        out.print(text(f"  {r.target}: {r.fix}{note}"), soft_wrap=True)


def run_check(
    profile: str | None,
    only: list[str] | None,
    skip: list[str] | None,
    root: str | None,
    example: str | None,
    fmt: Format,
) -> int:
    """Compare the host with a profile and print it; the exit code: 0 all hold, 1 otherwise."""
    from xputune.tune import engine

    view, _, selection, ctx = setup(root, example, profile, None, only, skip)
    rows = engine.check(ctx, selection)
    ok = all(r.holds for r in rows)
    if fmt is not Format.table:
        emit_data(engine.check_document(view, selection, rows), fmt)
        return 0 if ok else 1
    out = console()
    out.print(text(profile_line(selection)))
    out.print(rows_table(rows))
    print_fixes(out, rows)
    held = sum(r.holds for r in rows)
    if ok:
        out.print(f"[green]all {len(rows)} settings hold[/green]")
        return 0
    from rich.text import Text

    fix = suggested(["apply", *selection.persist_args()], view, root)
    out.print(
        Text.assemble(
            (f"{len(rows) - held} of {len(rows)} settings drift", "red"),
            text(f"; fix them all with: {fix}"),
        ),
        soft_wrap=True,
    )
    return 1
