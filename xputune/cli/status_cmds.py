"""status: what xputune set on this host, when, and whether it still holds (like `tuned-adm
active` and `systemctl status` together)."""

from __future__ import annotations

from typing import Any

from xputune.cli import exits
from xputune.cli.options import EXAMPLE, FORMAT, ROOT
from xputune.cli.output import Format, console, emit_data, text
from xputune.cli.spec import Command, Request

STATUS = Command(
    ("status",),
    "xputune.cli.status_cmds:status_cmd",
    (ROOT, EXAMPLE, FORMAT),
    exits=(exits.DIFFERENCE, exits.JOURNAL),
)


def status_cmd(req: Request) -> int:
    """Show what is applied here: the profile, when and by which xputune, the boot and watch
    units, the watch agent, and whether every setting still holds.

    Reads the journal apply keeps (/var/lib/xputune), the units `apply --persist [--watch]`
    installed, the watch agent's state and the last `xputune verify` (where each rank's KV
    pool was found, and what drifted); then checks the host against the profile that was
    applied, as `xputune check` does. Needs no root (rows that need it say "unknown").

    Exit status 0 when a profile is applied and every setting holds, 1 when something drifts
    or nothing is applied.

    Examples:

        xputune status
        xputune status --format json | jq .drift
    """
    from xputune.host import open_host
    from xputune.tune.status import host_status, status_document

    view = open_host(req.root, req.example)
    report = host_status(view)
    data = status_document(view, report)
    if req.fmt is not Format.table:
        emit_data(data, req.fmt)
    else:
        _render(data)
    return exits.OK if data.get("holds") else exits.DIFFERENCE


def _render(data: dict[str, Any]) -> None:
    from xputune.cli.output import ID, add_row, is_quiet, new_table, print_fitted

    out = console()
    applied = data["applied"]
    if applied is None:
        where = data["state_dir"] or "no state folder"
        out.print(text(f"no profile applied on {data['host']} ({where})"), soft_wrap=True)
    else:
        args = " ".join(applied["args"]) or "(the recommended profile)"
        out.print(
            text(
                f"profile {applied['profile']} applied {applied['when']} by xputune "
                f"{applied['version'] or 'unknown'} ({applied['by']} {args})"
            )
        )
    journal = data["journal"]
    if journal["error"]:
        out.print(text(f"journal: {journal['error']}", "red"))
    elif journal["interrupted"]:
        out.print(text("journal: an apply was interrupted: run `xputune rollback`", "red"))
    elif journal["rolled_back"]:
        out.print(text(f"journal: rolled back {journal['rolled_back']}"))
    table = new_table("Units", [("unit", ID), "role", "installed", "enabled", ("runs", ID)])
    for unit in data["units"]:
        runs = unit["interpreter"] or "-"
        if unit["interpreter"] and unit["interpreter_exists"] is False:
            runs += " (missing)"
        add_row(table, unit["name"], unit["role"], "yes" if unit["present"] else "no",
                "yes" if unit["enabled"] else "no", runs)  # fmt: skip
    print_fitted(out, table)
    if data["watch"]:
        out.print(text(_watch_line(data["watch"])))
    if data.get("verification"):
        line, style = _verification_line(data["verification"])
        out.print(text(line, style), soft_wrap=True)
    drift = data["drift"]
    if drift["rows"] is None:
        out.print(text(f"drift: {drift['note'] or 'not checked'}"))
    elif drift["holds"]:
        out.print(text(f"all {len(drift['rows'])} settings of {drift['profile']} hold", "green"))
    else:
        knobs = sorted({r["knob"] for r in drift["rows"] if r["verdict"] != "ok"})
        out.print(
            text(
                f"{drift['drifting']} of {len(drift['rows'])} settings drift ({', '.join(knobs)})"
                ": see `xputune check`, fix with `xputune apply`",
                "red",
            )
        )
    if not is_quiet():
        for warning in data["warnings"]:
            out.print(text(f"warning: {warning}", "yellow"))


def _verification_line(v: dict[str, Any]) -> tuple[str, str]:
    """The last `xputune verify` in one sentence, and its colour."""
    where = f"pid {v['server_pid']}" + (f" ({v['url']})" if v["url"] else "")
    head = f"last verify {v['time']}: {v['ranks']} rank(s) of {where}"
    if v["drifting"]:
        found = "; ".join(v["findings"][:3]) + ("; ..." if len(v["findings"]) > 3 else "")
        return f"{head}: drift in {', '.join(v['drifting'])} ({found}): see `xputune verify`", "red"
    if v["unknown"]:
        return f"{head}: unknown for {', '.join(v['unknown'])}", "yellow"
    return f"{head}: every pool where it was planned", "green"


#: What a watch's profile source means, as its state file names it.
_HELD_FROM = {"flags": "given to it", "journal": "the last apply's", "none": "none: reports only"}


def _watch_line(w: dict[str, Any]) -> str:
    """The watch agent in one sentence: running or not, what it holds, how its passes went."""
    running = f"running (pid {w['running_pid']})" if w["running_pid"] else "not running"
    held = _HELD_FROM.get(w["source"] or "", w["source"] or "unknown")
    line = (
        f"watch: {running}; last pass {w['last_pass'] or 'never'} ({w['passes']} pass(es), "
        f"{w['errors']} with errors), holding {w['profile'] or 'nothing'} ({held})"
    )
    if w["paused"]:
        line += "; paused"
    last = w["last_apply"]
    if last:
        outcome = f"{last['changes']} change(s)" if last["success"] else f"failed: {last['error']}"
        line += f"; last re-apply {last['time']}: {outcome}"
    return line
