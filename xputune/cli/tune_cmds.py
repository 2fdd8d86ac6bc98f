"""apply, rollback, recommend and profiles: host tuning (check: cli/check_run.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xputune.cli import exits
from xputune.cli.check_run import ONLY, SKIP, profile_line, same_host, setup
from xputune.cli.options import EXAMPLE, FORMAT, PROFILE, ROOT
from xputune.cli.output import Format, console, emit_data
from xputune.cli.spec import Arg, Command, Opt, Request

if TYPE_CHECKING:
    from xputune.tune.steps import Change

WAIT = Opt(
    "wait", ("--wait",),
    "If another apply or rollback holds the lock, wait for it instead of failing.",
    kind="flag", default=False,
)  # fmt: skip
#: The knob flags apply and watch share.
KNOB_FLAGS = (
    Opt(
        "ido", ("--ido",),
        "PCIe ID-based ordering on (or off, --no-ido) on every card and every port on its "
        "path, whatever the profile says.",
        kind="flag", negative="--no-ido",
    ),
    Opt("thp", ("--thp",), "thp.enabled: always, madvise or never.", kind="choice",
        choices=("always", "madvise", "never")),
    Opt("shm_huge", ("--shm-huge",), "huge= of /dev/shm: never, always, within_size or advise.",
        kind="choice", choices=("never", "always", "within_size", "advise")),
    Opt("numa_balancing", ("--numa-balancing",), "Automatic NUMA balancing: on or off.",
        kind="choice", choices=("on", "off")),
)  # fmt: skip
DRY_RUN = Opt(
    "dry_run", ("--dry-run", "-n"), "Show the plan and stop; writes nothing at all.",
    kind="flag", default=False,
)  # fmt: skip
APPLY = Command(
    ("apply",),
    "xputune.cli.tune_cmds:apply_cmd",
    (
        PROFILE,
        *KNOB_FLAGS,
        ONLY,
        SKIP,
        Opt("force", ("--force",), "Let a knob flag override a setting the profile marks "
            "critical (refused otherwise).", kind="flag", default=False),
        DRY_RUN,
        WAIT,
        Opt("persist_unit", ("--persist",), "Also install a systemd unit that re-applies this "
            "at every boot (these settings are lost at reboot).", kind="flag", default=False),
        Opt("watch_unit", ("--watch",), "With --persist: also install xputune-watch.service, "
            "which runs `xputune watch` with these settings and re-applies them when a card "
            "reset, hot-plug or driver rebind loses them (removed by rollback too).",
            kind="flag", default=False),
        ROOT,
        EXAMPLE,
        FORMAT,
    ),
    exits=(exits.UNSUPPORTED, *exits.CHANGES),
)  # fmt: skip
ROLLBACK = Command(
    ("rollback",),
    "xputune.cli.tune_cmds:rollback_cmd",
    (DRY_RUN.but(help="Show what would be restored and stop; writes nothing, takes no lock."),
     WAIT, ROOT, EXAMPLE, FORMAT),
    exits=exits.CHANGES,
)  # fmt: skip
RECOMMEND = Command(("recommend",), "xputune.cli.tune_cmds:recommend_cmd", (ROOT, EXAMPLE, FORMAT))
PROFILES = Command(
    ("profiles",),
    "xputune.cli.tune_cmds:profiles_cmd",
    (FORMAT,),
    args=(Arg("name", "NAME", "Show this profile's effective settings (after include).",
              kind="name", required=False, complete="complete_profiles"),),
)  # fmt: skip


def knob_overrides(
    ido: bool | None, thp: str | None, shm_huge: str | None, numa_balancing: str | None
) -> dict[str, Any]:
    """The knob flags as engine.select takes them (apply and watch share them)."""
    return {
        "pcie.ido": ido,
        "thp.enabled": thp,
        "shm.huge": shm_huge,
        "numa.balancing": numa_balancing,
    }


def _diff_lines(changes: list[Change], header: str) -> list[tuple[str, str]]:
    """(text, style) lines of a unified-diff-like view of the plan."""
    lines = [("--- host now", "bold"), (f"+++ {header}", "bold")]
    knob = None
    for change in changes:
        if change.knob != knob:
            knob = change.knob
            lines.append((f"@@ {knob} @@", "cyan"))
        lines.append((f"-{change.label}: {change.before_text}", "red"))
        lines.append((f"+{change.label}: {change.after_text}", "green"))
    return lines


def apply_cmd(req: Request) -> int:
    """Bring the host to a profile, as one transaction that can always be rolled back.

    Knob flags (--ido, --thp, --shm-huge, --numa-balancing) alone change only those knobs;
    with --profile they override its values and the rest of the profile is applied as well.
    Overriding a setting the profile marks critical needs --force.

    Shows the plan as a diff, then for each change: the original value is written to a
    journal (/var/lib/xputune, fsynced, mode 0600) BEFORE the change, the change is made and
    read back. Any failure rolls back everything this apply changed. A crash or kill -9 leaves
    the journal, and `xputune rollback` restores the originals. A second apply changes
    nothing; a lock keeps two applies from running at once.

    The live host needs root. Kernel lockdown blocks PCIe ordering changes: apply refuses
    before changing anything (use --skip pcie.ido). Under --root DIR the fixture's files are
    written (the euid check is skipped; lockdown is read from the fixture).

    With --persist --watch a second unit, xputune-watch.service, keeps the settings between
    boots (see `xputune watch`); on the live host it is (re)started at once.

    Examples:
      xputune apply --dry-run
      xputune apply --profile hygon-p800 --persist
      xputune apply --profile hygon-p800 --persist --watch
      xputune apply --ido --only pcie.ido --root ./h3c-box
    """
    from xputune.tune import engine

    overrides = knob_overrides(req.ido, req.thp, req.shm_huge, req.numa_balancing)
    view, _, selection, ctx = setup(
        req.root, req.example, req.profile, overrides, req.only, req.skip, req.force
    )
    command = ["apply", *selection.persist_args()]
    result = engine.apply(
        ctx,
        selection,
        command,
        dry_run=req.dry_run,
        wait=req.wait,
        persist_unit=req.persist_unit,
        watch_unit=req.watch_unit,
    )
    if req.fmt is not Format.table:
        emit_data(engine.apply_document(view, selection, result), req.fmt)
        return _apply_status(result)
    from rich.text import Text

    from xputune.cli.output import is_quiet, text

    out = console()
    quiet = is_quiet()  # the summary line only; a dry run's diff is its result, kept
    if not quiet:
        out.print(text(profile_line(selection)))
    if not result.changes:
        out.print("[green]nothing to change: every setting already holds[/green]")
    elif result.dry_run or not quiet:
        header = f"profile {selection.profile.name}"
        if set(selection.wants) != set(selection.profile.knobs):
            header += f" ({', '.join(selection.wants)} only)"
        for line, style in _diff_lines(result.changes, header):
            out.print(text(line, style), soft_wrap=True)
    for warning in [] if quiet else result.warnings:
        out.print(Text.assemble(("warning:", "yellow"), text(f" {warning}")), soft_wrap=True)
    if result.dry_run:
        out.print(f"dry run: {len(result.changes)} change(s) planned, nothing written")
    elif result.changes:
        out.print(
            Text.assemble(
                (f"applied and verified {len(result.changes)} change(s)", "green"),
                text(
                    f"; originals in {result.journal}; undo with: xputune rollback"
                    + same_host(req.root, req.example)
                ),
            ),
            soft_wrap=True,
        )
    return _apply_status(result)


def _apply_status(result: Any) -> int:
    """1 when a dry run found changes to make (drift), else 0."""
    return exits.DIFFERENCE if result.dry_run and result.changes else exits.OK


def rollback_cmd(req: Request) -> int:
    """Restore every original value recorded in the journal, newest first.

    Works after a finished apply (undo it) and after an apply that crashed or was killed
    (even with kill -9) halfway: the journal holds each original before its change was made.
    Each restore is read back; the journal is then moved to history/. If a value cannot be
    restored the journal stays, and rollback can be run again. Units that `apply --persist`
    installed are removed (on the live host the watch service is stopped), and a running
    `xputune watch` pauses: it reports drift but re-applies nothing until the next apply.

    With --dry-run it shows what would be restored (each step's value now and its original),
    takes no lock, writes nothing and needs no root where the state folder is readable; it
    ends 1 when there is something to roll back.

    Examples:

        xputune rollback --dry-run
        xputune rollback
    """
    from xputune.host import open_host
    from xputune.tune import engine

    view = open_host(req.root, req.example)
    result = engine.rollback_host(view, wait=req.wait, dry_run=req.dry_run)
    status = exits.DIFFERENCE if req.dry_run and result.transactions else exits.OK
    if req.fmt is not Format.table:
        emit_data(engine.rollback_document(view, result), req.fmt)
        return status
    from rich.text import Text

    from xputune.cli.output import is_quiet, text

    out = console()
    quiet = is_quiet()  # the summary line only; a dry run's table is its result, kept
    if not result.transactions:
        out.print("nothing to roll back: no journaled changes on this host")
        return status
    for warning in [] if quiet else result.warnings:
        out.print(Text.assemble(("warning:", "yellow"), text(f" {warning}")), soft_wrap=True)
    if req.dry_run:
        _render_pending(out, result)
        return status
    for r in [] if quiet else result.restored:
        shown = r.step.original_text or repr(r.step.original)
        out.print(text(f"restored {r.step.knob} {r.step.label}: {shown}"), soft_wrap=True)
    out.print(
        f"[green]rolled back {len(result.restored)} change(s) from "
        f"{result.transactions} apply(s)[/green]"
    )
    return status


#: What a pending row needs beside knob and place: now and original, borders, padding.
_PENDING_OTHER_COLUMNS = 12 + 12 + 5 + 4 * 2


def _render_pending(out: Any, result: Any) -> None:
    """What a rollback would restore, newest first: the value now and the original. Knob and
    place are typed back: a table when they fit on one line beside the rest, else two lines
    a step (as check prints its rows), never cut."""
    from xputune.cli.output import ID, TEXT, add_row, new_table, print_fitted, text

    rows = []
    for p in result.pending:
        now = p.now_text if p.unreadable is None else f"unknown ({p.unreadable})"
        rows.append((p.step.knob, p.step.label, now, p.original_text))
    knob = max((len(r[0]) for r in rows), default=0)
    where = max((len(r[1]) for r in rows), default=0)
    if knob + where + _PENDING_OTHER_COLUMNS <= out.width:
        table = new_table(
            "would restore", [("knob", ID), ("where", ID), ("now", TEXT), ("original", TEXT)]
        )
        for row in rows:
            add_row(table, *row)
        print_fitted(out, table, keys=2)
    else:
        out.print("would restore:", style="bold")
        for knob_name, place, now, original in rows:
            out.print(text(f"{knob_name}  {place}"), soft_wrap=True)
            out.print(
                text("  now ").append(text(now)).append(", original ").append(text(original)),
                soft_wrap=True,
            )
    changing = sum(bool(p.changes) for p in result.pending)
    out.print(
        text(
            f"dry run: {len(result.pending)} step(s) of {result.transactions} apply(s) would be "
            f"restored ({changing} change a value now); nothing written"
        )
    )


def recommend_cmd(req: Request) -> None:
    """Pick the profile that fits this host, from its CPU vendor, card IDs and card count.

    Every profile is scored and the reasons are shown; a profile counts only when all of its
    match rules hold, and more specific rules (card IDs, CPU vendor) score higher. The
    generic profile (no rules) is the fallback. check and apply use this choice when no
    --profile is given.

    Example:

        xputune recommend --root ./h3c-box
    """
    from xputune.host import open_host
    from xputune.tune import engine, profiles, recommend

    view = open_host(req.root, req.example)
    ranked = recommend.rank(profiles.load_all(), engine.discover(view))
    best = ranked[0] if ranked and ranked[0].eligible else None
    if req.fmt is not Format.table:
        emit_data(recommend.document(view.label, ranked), req.fmt)
        return
    from rich.table import Table
    from rich.text import Text

    from xputune.cli.output import add_row, text

    out = console()
    table = Table(header_style="bold")
    for column in ("Profile", "Fits", "Score", "Why"):
        table.add_column(column, overflow="fold")
    for c in ranked:
        mark = Text("yes", "green") if c.eligible else Text("no", "red")
        add_row(table, c.profile.name, mark, str(c.score), "; ".join(c.reasons))
    out.print(table)
    out.print(
        Text.assemble("recommended: ", text(best.profile.name, "bold"))
        if best
        else "no profile fits; check and apply fall back to generic"
    )


def profiles_cmd(req: Request) -> None:
    """List the tuning profiles, or show one with its includes resolved.

    Profiles are YAML files (profiles/ in the package, plus /etc/xputune/profiles); a path to
    a .yaml file works wherever a name does.

    Example:

        xputune profiles hygon-p800
    """
    from xputune.tune import profiles

    if req.name is None:
        loaded = profiles.load_all()
        if req.fmt is not Format.table:
            emit_data(profiles.list_document(loaded), req.fmt)
            return
        from rich.table import Table

        from xputune.cli.output import add_row

        table = Table(header_style="bold")
        table.add_column("Profile")
        table.add_column("Includes")
        table.add_column("Description", overflow="fold")
        for p in loaded:
            add_row(table, p.name, ", ".join(p.chain[:-1]) or "-", p.description)
        console().print(table)
        return
    p = profiles.load(req.name)
    data = profiles.document(p)
    knobs = data["knobs"]
    if req.fmt is not Format.table:
        emit_data(data, req.fmt)
        return
    from rich.table import Table

    from xputune.cli.output import add_row, text

    out = console()
    out.print(text(f"{p.name}: {p.description}"))
    out.print(text(f"chain: {' <- '.join(reversed(p.chain))}"))
    table = Table(header_style="bold")
    for column in ("Knob", "Value", "Also holds", "Severity", "From", "Why"):
        table.add_column(column, overflow="fold")
    for k, v in knobs.items():
        add_row(
            table,
            k,
            v["value"],
            ", ".join(v["accept"]) or "-",
            v["severity"],
            v["from"],
            v["why"] or "-",
        )
    out.print(table)
    if p.platform_registers:
        out.print(f"platform register writes: {len(p.platform_registers)} (with pcie.ido)")
