"""`xputune status`: what is applied on this host now, like `tuned-adm active` and more.

One look answers what an operator asks before touching a host: which profile the last apply
set (with which flags, when, by which xputune), whether an apply was interrupted or the host
was rolled back since, which units keep it (boot and watch: installed, enabled, what they run,
whether what they run is still there), what the watch agent last did, and whether the host
holds that profile now.

Everything is read, nothing is written: no lock (a running apply is not waited for), no
housekeeping in the state directory, no state directory created. It is discovery, so it needs
no root and never stops at the first odd thing: a journal it may not read (the live state
directory is root's, 0700), a damaged one, an odd unit or watch file is a warning and an
unknown (never "no profile applied", which would be a guess), and the rest is still shown; an
operator runs status precisely when something is off.

Drift is judged against the selection the last apply journaled (engine.check with the same
profile and flags, units included), never against a profile it was not asked to hold: with no
journal there is nothing to hold, and status says "no profile applied".
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from xputune.errors import XputuneError
from xputune.host import HostView
from xputune.tune import engine, persist, verifystate
from xputune.tune.journal import Journal, Transaction, rolled_back_at, utc_stamp, utc_text
from xputune.tune.knobs.base import DRIFT, Row
from xputune.tune.state import StateDir, open_state_fd, readable_state_dir
from xputune.tune.watchstate import WATCH_LOCK, WatchState
from xputune.tune.watchstate import read as read_watch_state

SCHEMA_VERSION = 1
NO_PROFILE = "no profile applied"
UNKNOWN = "unknown"
#: Where the kernel lists the file locks held now (the watch agent holds one on watch.lock).
PROC_LOCKS = "/proc/locks"


@dataclass(frozen=True)
class Applied:
    """The newest finished transaction whose selection is known: what the host was set to."""

    profile: str
    args: list[str]  # the selection flags (apply's, as the boot unit would pass them)
    when: str  # when it finished (ISO 8601 in UTC, Z: journal.utc_stamp)
    version: str  # the xputune that wrote it; "unknown" for journals from before it was kept
    transaction: str
    by: str  # "apply", or "watch" for a watch's re-apply

    @classmethod
    def of(cls, txn: Transaction) -> Applied:
        command = txn.command
        version = txn.version if isinstance(txn.version, str) and txn.version else UNKNOWN
        return cls(
            str(txn.profile),
            txn.selection_args() or [],
            utc_text(str(txn.finished or txn.started)),
            version,
            str(txn.id),
            str(command[0]),
        )


@dataclass(frozen=True)
class UnitState:
    """One unit xputune installs, as found on the host."""

    name: str
    role: str  # "boot" or "watch"
    path: str
    present: bool  # the unit file is there
    enabled: bool  # its multi-user.target.wants link is there
    ours: bool  # its ExecStart runs `xputune apply|watch` in the syntax xputune writes
    args: list[str] | None  # the flags it passes (None: not ours, or absent)
    interpreter: str | None  # the program it runs
    interpreter_exists: bool | None  # None: absent, or the check itself failed
    asserts: list[str] = field(default_factory=list)  # AssertPathExists= paths
    missing: list[str] = field(default_factory=list)  # of those (and the program), gone now


@dataclass
class HostStatus:
    host: str
    state_dir: str | None
    applied: Applied | None
    transactions: int  # active transactions in the journal (a rollback restores them all)
    steps: int  # their journaled changes
    interrupted: str | None  # an apply that did not finish: its transaction id
    rolled_back: str | None  # when a rollback last ran, if nothing was applied since
    journal_error: str | None  # why the journal could not be read (damaged, not ours)
    units: list[UnitState]
    watch: WatchState | None
    watch_pid: int | None  # the process holding the watch lock now
    drift_profile: str | None  # the profile drift is judged against (None: not judged)
    rows: list[Row] | None  # the check rows (None: not judged, see drift_note)
    drift_note: str  # NO_PROFILE, or why drift could not be judged ("" when judged)
    warnings: list[str] = field(default_factory=list)
    #: The last `xputune verify` document kept here (tune/verifystate.py); None: none.
    verification: dict[str, Any] | None = None

    @property
    def holds(self) -> bool | None:
        """Whether the host is at the applied profile now (None: not judged)."""
        return None if self.rows is None else all(r.holds for r in self.rows)


def host_status(view: HostView, drift: bool = True) -> HostStatus:
    """The host's tuning state, read from the state directory, the units and the host.

    `drift=False` leaves out the check (no topology discovery: the quick form). Raises
    nothing of its own: what cannot be read is a warning and an unknown.
    """
    warnings: list[str] = []
    folder, journal, journal_error = _journal(view, warnings)
    last = journal.last_applied() if journal is not None else None
    applied = Applied.of(last) if last is not None else None
    active = journal.active() if journal is not None else []
    stuck = journal.interrupted() if journal is not None else None
    watch, warning = read_watch_state(view)
    if warning:
        warnings.append(warning)
    verification, warning = verifystate.read(view)
    if warning:
        warnings.append(warning)
    result = HostStatus(
        host=view.label,
        state_dir=str(folder) if folder is not None else None,
        applied=applied,
        transactions=len(active),
        steps=sum(len(t.steps) for t in active),
        interrupted=stuck.id if stuck is not None else None,
        rolled_back=_rolled_back(folder, warnings) if folder is not None else None,
        journal_error=journal_error,
        units=[_unit(view, unit, warnings) for unit in persist.UNITS],
        watch=watch,
        watch_pid=_lock_holder(folder, WATCH_LOCK) if folder is not None else None,
        drift_profile=None,
        rows=None,
        drift_note="",
        warnings=warnings,
        verification=verification,
    )
    if journal_error is not None:
        result.drift_note = f"unknown: the journal could not be read ({journal_error})"
    elif applied is None:
        result.drift_note = NO_PROFILE
    elif not drift:
        result.drift_note = "not checked"
    else:
        _judge(view, applied, result)
    return result


def _journal(
    view: HostView, warnings: list[str]
) -> tuple[StateDir | None, Journal | None, str | None]:
    """The state directory, its journal (None when there is no directory, or the journal
    cannot be read) and why not."""
    try:
        folder = readable_state_dir(view)
    except XputuneError as exc:
        warnings.append(f"state directory not read: {exc}")
        return None, None, str(exc)
    if folder is None:
        return None, None, None
    try:
        return folder, Journal(folder, clean=False), None
    except XputuneError as exc:
        warnings.append(f"journal not read: {exc}")
        return folder, None, str(exc)


def _judge(view: HostView, applied: Applied, result: HostStatus) -> None:
    """Check the host against the applied selection; a selection that cannot be rebuilt
    (its profile file is gone, a flag this version does not know) is a note, not an error."""
    try:
        topology = engine.discover(view)
        selection = engine.parse_selection_args(applied.args).select(topology)
        ctx = engine.context(view, topology, selection)
        rows = engine.check(ctx, selection)
    except XputuneError as exc:
        result.drift_note = f"cannot judge drift against {applied.profile}: {exc}"
        result.warnings.append(result.drift_note)
        return
    result.drift_profile = selection.profile.name
    result.rows = rows


def _rolled_back(folder: StateDir, warnings: list[str]) -> str | None:
    try:
        when = rolled_back_at(folder)
    except (XputuneError, OSError) as exc:
        warnings.append(f"rollback mark not read: {exc}")
        return None
    return None if when is None else utc_stamp(when)


def _unit(view: HostView, unit: persist.Unit, warnings: list[str]) -> UnitState:
    role = "boot" if unit is persist.BOOT else "watch"
    try:
        text = view.read_optional(unit.path)
        wants_dir, link_name = unit.link.rsplit("/", 1)
        enabled = link_name in view.listdir(wants_dir)  # listed: systemctl's link is absolute
    except XputuneError as exc:
        warnings.append(f"{unit.name} not read: {exc}")
        return UnitState(unit.name, role, unit.path, False, False, False, None, None, None)
    if text is None:
        return UnitState(unit.name, role, unit.path, False, enabled, False, None, None, None)
    argv = persist.exec_argv(text)
    args = persist.installed_args(text, unit.verb)
    interpreter = argv[0] if argv else None
    asserts = persist.asserted_paths(text)
    needed = list(dict.fromkeys([*([interpreter] if interpreter else []), *asserts]))
    found = {path: _exists(view, path, warnings) for path in needed}
    missing = [path for path, there in found.items() if there is False]
    if missing:
        warnings.append(
            f"{unit.name} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'}"
            " not there: the unit fails at its next start (re-run xputune apply --persist"
            f"{' --watch' if unit is persist.WATCH else ''} from an installed xputune)"
        )
    return UnitState(
        unit.name,
        role,
        unit.path,
        True,
        enabled,
        args is not None,
        args,
        interpreter,
        found.get(interpreter) if interpreter else None,
        asserts,
        missing,
    )


def _exists(view: HostView, path: str, warnings: list[str]) -> bool | None:
    """Whether the host has `path` (links followed, as systemd does); None when it cannot
    tell. Under --root the tree is the host: a unit there runs at the tree's root."""
    if not path.startswith("/"):
        return None
    try:
        return view.exists(path)
    except (XputuneError, OSError) as exc:
        warnings.append(f"cannot tell whether {path} exists: {exc}")
        return None


def _lock_holder(folder: StateDir, name: str) -> int | None:
    """The pid holding an flock on `name` in the state directory now, from the kernel's list
    of locks (nothing is locked or opened to find out: a probe lock could make a starting
    watch refuse to run). None when no one holds it or it cannot be told."""
    try:
        fd = open_state_fd(folder)
    except (XputuneError, OSError):
        return None
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(fd)
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open(PROC_LOCKS, encoding="ascii", errors="replace") as fh:
            lines = fh.read(1 << 22).splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if "->" in fields:  # a waiter, not a holder
            continue
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == where:
            return int(fields[4]) if fields[4].isdecimal() else None
    return None


def status_document(view: HostView, result: HostStatus) -> dict[str, Any]:
    """The --format json document (schema "status"). `holds` is true only when a profile is
    applied and every setting of it holds now; null when that was not judged."""
    watch = None
    if result.watch is not None:  # a watch writes its state file after its first pass
        w = result.watch
        watch = {
            "running_pid": result.watch_pid,
            "pid": w.pid,
            "started": utc_stamp(w.started) if w.started else None,
            "last_pass": utc_stamp(w.updated) if w.updated else None,
            "passes": w.passes,
            "errors": w.errors,
            "paused": w.paused,
            "profile": w.profile or None,
            "source": w.source or None,
            "events": w.events,
            "drift": w.drift,
            "reapplies": w.reapplies,
            "failures": w.failures,
            "last_apply": None
            if w.last_apply is None
            else {**asdict(w.last_apply), "time": utc_stamp(w.last_apply.time)},
            "backoff": [{**asdict(b), "until": utc_stamp(b.until)} for b in w.backoff],
        }
    rows = result.rows
    return {
        "schema_version": SCHEMA_VERSION,
        "host": view.label,
        "state_dir": result.state_dir,
        "applied": None if result.applied is None else asdict(result.applied),
        "holds": result.holds,
        "journal": {
            "transactions": result.transactions,
            "steps": result.steps,
            "interrupted": result.interrupted,
            "rolled_back": result.rolled_back,
            "error": result.journal_error,
        },
        "units": [asdict(u) for u in result.units],
        "watch": watch,
        "drift": {
            "profile": result.drift_profile,
            "holds": result.holds,
            "drifting": None if rows is None else sum(r.verdict == DRIFT for r in rows),
            "note": result.drift_note,
            "rows": None if rows is None else [r.as_dict() for r in rows],
        },
        "verification": _verification(result.verification),
        "warnings": result.warnings,
    }


def _verification(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    """The last verification in short: when, which server, the verdict, the ranks named."""
    if doc is None:
        return None
    return {
        "time": doc["time"],
        "server_pid": doc["server"]["pid"],
        "url": doc["server"].get("url"),
        "verdict": doc["verdict"],
        "ranks": len(doc["ranks"]),
        "drifting": doc["drifting"],
        "unknown": doc["unknown"],
        "findings": [
            f"{r['rank']}: {f['text']}"
            for r in doc["ranks"]
            for f in r.get("findings") or []
            if isinstance(f, dict) and isinstance(f.get("text"), str)
        ],
    }
