"""What check, apply and rollback do, end to end, for the CLI to call and render.

Order of an apply, chosen so that nothing changes unless everything knowable says it can:
select the profile and flags, plan (reads only), preflight (writable root, root user, kernel
lockdown, /dev/shm is tmpfs), then take the lock, refuse if an earlier apply was interrupted,
plan again under the lock (the host may have changed while we waited), and run the
transaction. A dry run stops after the first plan and writes nothing, not even the state dir.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from xputune.errors import HostError, XputuneError
from xputune.host import HostView
from xputune.topology.model import Topology
from xputune.tune import persist, preflight, profiles, recommend
from xputune.tune.errors import JournalError
from xputune.tune.journal import (
    Journal,
    Transaction,
    clear_rolled_back,
    mark_rolled_back,
    rolled_back_at,
    utc_stamp,
    utc_text,
)
from xputune.tune.knobs import KNOBS, Row, TuneContext, Want
from xputune.tune.lock import StateLock
from xputune.tune.pending import Pending, pending
from xputune.tune.state import readable_state_dir, state_dir
from xputune.tune.steps import Change
from xputune.tune.transaction import Restored, rollback, run

# The apply flag that sets each knob, for messages and for the boot unit's command line.
FLAGS = {
    "pcie.ido": "--ido",
    "thp.enabled": "--thp",
    "shm.huge": "--shm-huge",
    "numa.balancing": "--numa-balancing",
}


@dataclass(frozen=True)
class Selection:
    """The effective expectations: a profile, then command-line overrides, then only/skip."""

    profile: profiles.Profile
    how: str  # "given", "recommended" or "fallback"
    wants: dict[str, Want]
    overrides: dict[str, Any] = field(default_factory=dict)  # knob -> raw flag value
    overridden: tuple[str, ...] = ()  # flags overriding critical settings of a given profile

    def _overrides_critical(self) -> bool:
        """Whether a flag sets a critical knob of the profile to another value. Without
        --profile that needs no --force (the flags narrow the recommended profile to their
        knobs), but the flags below name the profile, and read back with it they would."""
        for knob in self.overrides:
            was, now = self.profile.knobs.get(knob), self.wants.get(knob)
            if was is None or now is None or was.severity != "critical":
                continue
            if not was.holds(now.value):
                return True
        return False

    def persist_args(self) -> list[str]:
        """The flags that reproduce this selection at boot."""
        try:
            by_name = profiles.locate(self.profile.name) == self.profile.path
        except XputuneError:
            by_name = False
        args = ["--profile", self.profile.name if by_name else self.profile.path]
        for knob, raw in self.overrides.items():
            if knob == "pcie.ido":
                args.append("--ido" if raw else "--no-ido")
            else:
                args += [FLAGS[knob], str(raw)]
        if self.overridden or self._overrides_critical():
            args.append("--force")
        managed = set(self.wants)
        skipped = [k for k in self.profile.knobs if k not in managed]
        for knob in skipped:
            args += ["--skip", knob]
        return args


@dataclass(frozen=True)
class SelectionArgs:
    """The selection flags of Selection.persist_args, read back (parse_selection_args)."""

    profile: str
    overrides: dict[str, Any] = field(default_factory=dict)
    skip: tuple[str, ...] = ()
    force: bool = False

    def select(self, topology: Topology) -> Selection:
        """The selection these flags made: the same profile, overrides and knobs."""
        selection = select(topology, self.profile, dict(self.overrides), None, list(self.skip))
        require_force(selection, self.force)
        return selection


#: The value flags of persist_args, by flag: the knob each sets.
_VALUE_FLAGS = {flag: knob for knob, flag in FLAGS.items() if knob != "pcie.ido"}


def parse_selection_args(args: list[str]) -> SelectionArgs:
    """Read back the flags Selection.persist_args wrote (into a journal's command or a unit's
    ExecStart): `--profile P`, knob flags, `--force`, `--skip K`. XputuneError naming the word
    for anything else, so a selection is never half read."""
    profile: str | None = None
    overrides: dict[str, Any] = {}
    skip: list[str] = []
    force = False
    words = iter(args)
    for word in words:
        if word in ("--ido", "--no-ido"):
            overrides["pcie.ido"] = word == "--ido"
        elif word == "--force":
            force = True
        elif word in ("--profile", "--skip", *_VALUE_FLAGS):
            value = next(words, None)
            if value is None:
                raise XputuneError(f"selection flags {args!r}: {word} without its value")
            if word == "--profile":
                profile = value
            elif word == "--skip":
                skip.append(value)
            else:
                overrides[_VALUE_FLAGS[word]] = value
        else:
            raise XputuneError(f"selection flags {args!r}: {word!r} is not one of apply's")
    if not profile:
        raise XputuneError(f"selection flags {args!r}: no --profile")
    return SelectionArgs(profile, overrides, tuple(skip), force)


def discover(view: HostView) -> Topology:
    from xputune.topology.discover import discover as _discover

    return _discover(view)


def select(
    topology: Topology,
    profile: str | None = None,
    overrides: dict[str, Any] | None = None,
    only: list[str] | None = None,
    skip: list[str] | None = None,
) -> Selection:
    """Resolve the profile (given, else recommended) and apply flag overrides to it.

    Least surprise: knob flags (overrides) without a profile narrow the selection to those
    knobs, so `apply --ido` touches PCIe ordering and nothing else; with `--profile` they
    change the profile's values and the rest of the profile is applied too; a flag that then
    overrides a critical setting of the profile is listed in `Selection.overridden`, which
    `require_force` refuses without --force. `--only` and `--skip` naming the same knob, or a
    flag for a knob they leave out, are contradictions and refused.
    """
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    for name in (*(only or ()), *(skip or ())):
        if name not in KNOBS:
            raise XputuneError(f"unknown knob {name!r} (known: {', '.join(KNOBS)})")
    both = [k for k in KNOBS if k in (only or ()) and k in (skip or ())]
    if both:
        raise XputuneError(
            f"--only and --skip both name {', '.join(both)}: say whether to manage it or not"
        )
    for knob in overrides:
        if knob in (skip or ()):
            raise XputuneError(f"{FLAGS[knob]} sets {knob} but --skip {knob} leaves it alone")
        if only and knob not in only:
            raise XputuneError(
                f"{FLAGS[knob]} sets {knob} but --only {' --only '.join(only)} leaves it out"
            )
    if profile:
        chosen, how = profiles.load(profile), "given"
    else:
        best = recommend.recommend(profiles.load_all(), topology)
        chosen, how = (
            (best.profile, "recommended") if best else (profiles.load("generic"), "fallback")
        )
    wants = dict(chosen.knobs)
    overridden: list[str] = []
    for knob, raw in overrides.items():
        parsed = KNOBS[knob].parse(raw, f"flag for {knob}")
        was = wants.get(knob)
        if profile and was is not None and was.severity == "critical" and not was.holds(parsed):
            flag = ("--ido" if parsed else "--no-ido") if knob == "pcie.ido" else FLAGS[knob]
            shown = "" if knob == "pcie.ido" else f" {KNOBS[knob].describe(parsed)}"
            overridden.append(
                f"{flag}{shown} overrides {knob} = "
                f"{KNOBS[knob].describe(was.value)}, critical in profile {chosen.name}"
            )
        severity = was.severity if was is not None else "warn"
        wants[knob] = Want(parsed, (), severity, "command line")
    if overrides and not profile and not only:
        only = list(overrides)  # the knobs the flags name, and nothing else
    if only:
        wants = {k: w for k, w in wants.items() if k in only}
    for knob in skip or ():
        wants.pop(knob, None)
    ordered = {k: wants[k] for k in KNOBS if k in wants}
    return Selection(chosen, how, ordered, overrides, tuple(overridden))


def require_force(selection: Selection, force: bool) -> None:
    """Refuse a selection whose flags override critical settings of its profile, unless forced."""
    if selection.overridden and not force:
        raise XputuneError("; ".join(selection.overridden) + ": pass --force to do it anyway")


def context(view: HostView, topology: Topology, selection: Selection) -> TuneContext:
    return TuneContext(view, topology, selection.profile.platform_registers)


@contextlib.contextmanager
def _still_there(view: HostView) -> Iterator[None]:
    """A value discovery found that is gone when a knob reads it (a device removed, a tree
    changed under us) is one clear HostError, never a traceback."""
    try:
        yield
    except FileNotFoundError as exc:
        where = str(exc.filename or "a file")
        root = getattr(view, "root", "/")
        if not view.live and where.startswith(root + "/"):
            where = where[len(root) :]  # the host path, as the other messages name it
        raise HostError(f"{view.label}: {where} is gone since discovery; try again") from None


def check(ctx: TuneContext, selection: Selection) -> list[Row]:
    rows: list[Row] = []
    with _still_there(ctx.view):
        for knob, want in selection.wants.items():
            rows.extend(KNOBS[knob].check(ctx, want))
    # The boot unit is judged only by a check of the whole profile: a narrowed check (--only,
    # --skip) asks about fewer knobs than a unit applies.
    if all(knob in selection.wants for knob in selection.profile.knobs):
        rows.extend(persist.check_rows(ctx.view, selection.persist_args()))
    return rows


def plan(
    ctx: TuneContext,
    selection: Selection,
    persist_unit: bool = False,
    watch_unit: bool = False,
    keep: Callable[[Change], bool] | None = None,
) -> list[Change]:
    """The changes an apply makes; `keep` narrows the knobs' changes to some places (the
    watch agent leaves out the ones it backs off from)."""
    changes: list[Change] = []
    with _still_there(ctx.view):
        for knob, want in selection.wants.items():
            changes.extend(KNOBS[knob].plan(ctx, want))
    if keep is not None:
        changes = [c for c in changes if keep(c)]
    if persist_unit:
        changes.extend(persist.plan(ctx.view, selection.persist_args(), watch=watch_unit))
    return changes


def run_preflight(ctx: TuneContext, changes: list[Change]) -> None:
    by_knob: dict[str, list[Change]] = {}
    for change in changes:
        by_knob.setdefault(change.knob, []).append(change)
    for knob, mine in by_knob.items():
        if knob in KNOBS:
            KNOBS[knob].preflight(ctx, mine)


def _same_root(view: HostView) -> str:
    """` --root DIR` for a command suggested about a host tree that is not the live one."""
    import shlex

    root = getattr(view, "root", None)
    return "" if view.live or not root else f" --root {shlex.quote(root)}"


@dataclass
class ApplyResult:
    changes: list[Change]
    dry_run: bool
    transaction: Transaction | None = None
    journal: str | None = None
    warnings: list[str] = field(default_factory=list)
    #: Why a re-apply changed nothing on purpose (the host was rolled back meanwhile).
    skipped: str | None = None


def apply(
    ctx: TuneContext,
    selection: Selection,
    command: list[str],
    dry_run: bool = False,
    wait: bool = False,
    persist_unit: bool = False,
    watch_unit: bool = False,
    keep: Callable[[Change], bool] | None = None,
    reapply: bool = False,
) -> ApplyResult:
    """Plan, check, lock and run one transaction (see the module's docstring for the order).

    `reapply` is the watch agent's apply: under the lock it changes nothing when the host has
    been rolled back and not applied since (so a watch never undoes a rollback), and it leaves
    that mark alone; every other apply clears it.
    """
    view = ctx.view
    if watch_unit and not persist_unit:
        raise XputuneError(
            "--watch installs the watch service next to the boot unit: give --persist too"
        )
    if watch_unit and view.live:
        import importlib.util

        if importlib.util.find_spec("pyudev") is None:  # else the service fails at every start
            raise XputuneError(
                "--watch: the watch service listens to udev and needs pyudev on this host: "
                "pip install 'xputune[udev]' (nothing was changed)"
            )
    # What the units will need at boot, said before anything (also by a dry run).
    needs = persist.interpreter_warnings() if persist_unit else []
    if dry_run:
        changes = plan(ctx, selection, persist_unit, watch_unit, keep)
        warnings = list(needs)
        try:
            run_preflight(ctx, changes)
        except XputuneError as exc:
            warnings.append(f"a real apply would stop here: {exc}")
        return ApplyResult(changes, True, warnings=warnings)

    preflight.require_writable(view)
    preflight.require_root(view, "xputune watch" if reapply else "xputune apply")
    view.check_every_read()  # what it reads decides what it writes
    changes = plan(ctx, selection, persist_unit, watch_unit, keep)
    run_preflight(ctx, changes)
    folder = state_dir(view)
    with StateLock(folder, wait=wait):
        journal = Journal(folder)
        stuck = journal.interrupted()
        if stuck is not None:
            raise JournalError(
                f"an earlier apply (started {utc_text(stuck.started)}, {len(stuck.steps)} step(s) "
                f"journaled) did not finish; run `xputune rollback` first"
                + (f": xputune rollback{_same_root(view)}" if _same_root(view) else "")
                + " (nothing was changed)"
            )
        if reapply and (when := rolled_back_at(folder)) is not None:
            return ApplyResult([], False, skipped=f"rolled back at {utc_stamp(when)}")
        # the host may have moved while we waited
        changes = plan(ctx, selection, persist_unit, watch_unit, keep)
        run_preflight(ctx, changes)
        if not changes:
            if not reapply:
                clear_rolled_back(folder)
            return ApplyResult([], False, warnings=needs)
        txn = run(ctx, changes, journal, selection.profile.name, command)
        if not reapply:
            clear_rolled_back(folder)
    result = ApplyResult(changes, False, txn, journal.path, warnings=list(needs))
    if persist_unit and any(c.knob == "persist" for c in changes):
        restart = (persist.WATCH_UNIT_NAME,) if watch_unit else ()
        result.warnings += persist.reload_systemd(view, restart)
    return result


@dataclass
class RollbackResult:
    restored: list[Restored]
    journal: str | None
    transactions: int
    warnings: list[str] = field(default_factory=list)
    #: A dry run: nothing was restored; `pending` says what a rollback would restore.
    dry_run: bool = False
    pending: list[Pending] = field(default_factory=list)


def rollback_host(view: HostView, wait: bool = False, dry_run: bool = False) -> RollbackResult:
    """Restore every original of the journal (see transaction.rollback), or with `dry_run`
    say what that would restore and change nothing: no lock is taken (so `wait` does not
    matter), no file is written or cleaned, root is not needed where the state directory is
    readable (else PermissionRequired, one line), and a recording can be asked too. A dry
    run refuses a journal exactly when the real rollback would (JournalError)."""
    if dry_run:
        return _rollback_plan(view)
    preflight.require_writable(view)
    preflight.require_root(view, "xputune rollback")
    view.check_every_read()  # a restore is verified by reading it back
    folder = state_dir(view, create=False)
    if not os.path.isdir(folder):
        return RollbackResult([], None, 0)
    with StateLock(folder, wait=wait):
        journal = Journal(folder)
        active = journal.active()
        if not active:
            return RollbackResult([], None, 0)
        if any(s.kind == "pci-bits" for t in active for s in t.steps):
            preflight.require_pci_writes(view)
        restored = rollback(view, journal)
        mark_rolled_back(folder)  # a running watch agent must not re-apply what was undone
    removed = {r.step.target.get("path") for r in restored
               if r.step.knob == "persist" and r.step.original is None}  # fmt: skip
    warnings = persist.stop_removed(view, {p for p in removed if isinstance(p, str)})
    return RollbackResult(restored, journal.path, len(active), warnings)


def _rollback_plan(view: HostView) -> RollbackResult:
    folder = readable_state_dir(view)
    if folder is None:
        return RollbackResult([], None, 0, dry_run=True)
    journal = Journal(folder, clean=False)
    active = journal.active()
    if not active:
        return RollbackResult([], None, 0, dry_run=True)
    steps = pending(view, journal)
    warnings = []
    if not view.writable():
        warnings.append(f"{view.label} is a read-only recording: a rollback cannot change it")
    elif view.live and preflight.geteuid() != 0:
        warnings.append("a rollback changes kernel settings and needs root (sudo)")
    if any(p.step.kind == "pci-bits" for p in steps):
        try:
            preflight.require_pci_writes(view)
        except XputuneError as exc:
            warnings.append(f"a real rollback would stop here: {exc}")
    return RollbackResult([], journal.path, len(active), warnings, True, steps)


# -- the --format json documents of check, apply and rollback (schemas "check", "apply",
# "rollback"), next to the results they serialise.


def check_document(view: HostView, selection: Selection, rows: list[Row]) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "host": view.label,
        "profile": selection.profile.name,
        "profile_choice": selection.how,
        "ok": all(r.holds for r in rows),
        "rows": [r.as_dict() for r in rows],
    }


def apply_document(view: HostView, selection: Selection, result: ApplyResult) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "host": view.label,
        "profile": selection.profile.name,
        "dry_run": result.dry_run,
        "changes": [
            {"knob": c.knob, "where": c.label, "before": c.before_text, "after": c.after_text}
            for c in result.changes
        ],
        "journal": result.journal,
        "warnings": result.warnings,
    }


def rollback_document(view: HostView, result: RollbackResult) -> dict[str, Any]:
    """What was restored, or for a dry run (`dry_run`: true, `restored` empty) what would be:
    `would_restore`, newest first, each step's knob, place, target, value now and original."""
    return {
        "schema_version": 1,
        "host": view.label,
        "dry_run": result.dry_run,
        "journal": result.journal,
        "transactions": result.transactions,
        "restored": [
            {
                "knob": r.step.knob,
                "where": r.step.label,
                "original": r.step.original_text or repr(r.step.original),
            }
            for r in result.restored
        ],
        "would_restore": [p.as_dict() for p in result.pending],
        "warnings": result.warnings,
    }
