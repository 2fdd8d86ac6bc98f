"""`xputune check`, and what apply, rollback and status share with it (the host, the profile
in force, the rows of a check)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xputune.cli import exits
from xputune.cli.options import EXAMPLE, FORMAT, PROFILE, ROOT
from xputune.cli.output import (
    Format,
    add_row,
    console,
    emit_data,
    print_fitted,
    shell_command,
    text,
)
from xputune.cli.spec import Command, Opt, Request
from xputune.cli.suggest import same_host as same_host
from xputune.cli.suggest import suggestion
from xputune.host import open_host

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from xputune.host import HostView
    from xputune.topology.model import Topology
    from xputune.tune.engine import Selection
    from xputune.tune.knobs import Row, TuneContext

ONLY = Opt(
    "only", ("--only",), "Manage only this knob (repeatable), e.g. --only pcie.ido.",
    kind="name", multiple=True, metavar="KNOB", complete="complete_knobs",
)  # fmt: skip
SKIP = Opt(
    "skip", ("--skip",), "Leave this knob alone (repeatable), e.g. --skip shm.huge.",
    kind="name", multiple=True, metavar="KNOB", complete="complete_knobs",
)  # fmt: skip
DRIFT = Opt(
    "drift", ("--drift",), "Show only the settings that do not hold, one line each (what "
    "`tuned-adm verify` prints), and the command that fixes them all; the exit status and "
    "--format json|yaml are unchanged.", kind="flag", default=False,
)  # fmt: skip
CHECK = Command(
    ("check",),
    "xputune.cli.check_run:run_check",
    (PROFILE, ONLY, SKIP, DRIFT, ROOT, EXAMPLE, FORMAT),
    exits=(exits.DIFFERENCE, exits.PERMISSION),
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
    """One table row per setting, its verdict coloured. A knob and a place (a bus id, a path)
    are what an operator types back: never cut (print it with print_fitted)."""
    from xputune.cli.output import ID, TEXT, new_table

    table = new_table(
        "", [("knob", ID), ("where", ID), ("expected", TEXT), ("actual", TEXT), "verdict",
             "severity"],
    )  # fmt: skip
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


#: What a row's other columns need at least beside knob and place (text, borders, padding).
_OTHER_COLUMNS = 12 + 8 + 8 + 9 + 6 * 3 + 1


def print_rows(out: Console, rows: list[Row]) -> None:
    """The rows as a table where knob and place fit on one line beside the rest; else as a
    list, two lines a setting, so that no knob or place is ever cut."""
    knob = max((len(r.knob) for r in rows), default=0)
    where = max((len(r.target) for r in rows), default=0)
    if knob + where + _OTHER_COLUMNS <= out.width:
        print_fitted(out, rows_table(rows), keys=2)
        return
    for row in rows:
        style = VERDICT_STYLE.get(row.verdict, "")
        out.print(text(f"{row.knob}  {row.target}"), soft_wrap=True)
        out.print(
            text("  expected ").append(text(row.expected)).append(", actual ")
            .append(text(row.actual)).append(": ").append(text(row.verdict, style))
            .append(f" ({row.severity})"),
            soft_wrap=True,
        )  # fmt: skip


def print_fixes(out: Console, rows: list[Row]) -> None:
    """Fixes below the table: each place on its line, its command alone on the next, never
    wrapped, so it can be copied and run (and an 80-column terminal keeps it whole)."""
    fixes = [r for r in rows if not r.holds and (r.fix or r.note)]
    if not fixes:
        return
    out.print("how to fix:", style="bold")
    for r in fixes:
        note = f" ({r.note})" if r.note else ""
        out.print(text(f"  {r.target}:{note}"))
        if r.fix:
            out.print(text(f"    {r.fix}"), soft_wrap=True)


def print_drift(out: Console, rows: list[Row]) -> None:
    """What does not hold, a line each (knob, place, what it is and should be), under its
    severity; a setting that could not be read says so."""
    for severity in dict.fromkeys(r.severity for r in rows if not r.holds):
        off = [r for r in rows if not r.holds and r.severity == severity]
        out.print(f"{severity} ({len(off)}):", style="bold")
        for row in off:
            verdict = "" if row.verdict == "drift" else f" ({row.verdict})"
            out.print(
                text(f"  {row.knob}  {row.target}: ").append(text(row.actual))
                .append(", expected ").append(text(row.expected))
                .append(text(verdict, VERDICT_STYLE.get(row.verdict, "")))
            )  # fmt: skip


def print_fix_all(out: Console, words: list[str], view: HostView, root: str | None) -> None:
    """The command that fixes every drift, on a line of its own; for a recording, the same for
    the host it was made on and the lines that run it here on a copy, each long one continued
    with ` \\` so that it pastes as one command."""
    import shlex

    def lines(shell: str) -> None:
        for line in shell.splitlines():
            out.print(text(f"  {line}"), soft_wrap=True)

    command, on_copy = suggestion(words, view, root)
    lines(shell_command(shlex.split(command), width=max(40, out.width - 2)))
    if on_copy is None:
        return
    out.print("on the host it was recorded on; here, on a copy:")
    width = max(40, out.width - 5)  # "  && " before a step
    steps = [shell_command(shlex.split(step), width=width) for step in on_copy.split(" && ")]
    lines(" \\\n&& ".join(steps))


def run_check(req: Request) -> int:
    """Compare the host with a profile: one row per setting, with the fix for each drift.

    Each row says what the setting should be, what it is, and the exact command that fixes
    it (setpci, echo > /sys/..., mount -o remount, sysctl), so a drift is actionable without
    xputune. PCIe ordering gets one row per card and per port on its path. Reading config
    space beyond 64 bytes needs root; without it those rows say "unknown".

    Exit status 0 when every setting holds, 1 on any drift (or unknown / unsupported).

    --drift prints only what does not hold, a line each, as `tuned-adm verify` does.

    Examples:

        xputune check --profile hygon-p800
        xputune check --drift
        xputune check --example h3c-hygon-p800 --format json
    """
    from xputune.tune import engine

    view, _, selection, ctx = setup(req.root, req.example, req.profile, None, req.only, req.skip)
    rows = engine.check(ctx, selection)
    ok = all(r.holds for r in rows)
    if req.fmt is not Format.table:
        emit_data(engine.check_document(view, selection, rows), req.fmt)
        return 0 if ok else 1
    out = console()
    out.print(text(profile_line(selection)))
    if req.drift:
        print_drift(out, rows)
    else:
        print_rows(out, rows)
        print_fixes(out, rows)
    held = sum(r.holds for r in rows)
    if ok:
        out.print(f"[green]all {len(rows)} settings hold[/green]")
        return 0
    out.print(text(f"{len(rows) - held} of {len(rows)} settings drift; fix them all with:", "red"))
    print_fix_all(out, ["apply", *selection.persist_args()], view, req.root)
    return 1
