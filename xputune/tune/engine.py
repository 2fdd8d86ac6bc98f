"""What check, apply and rollback do, end to end, for the CLI to call and render.

Order of an apply, chosen so that nothing changes unless everything knowable says it can:
select the profile and flags, plan (reads only), preflight (writable root, root user, kernel
lockdown, /dev/shm is tmpfs), then take the lock, refuse if an earlier apply was interrupted,
plan again under the lock (the host may have changed while we waited), and run the
transaction. A dry run stops after the first plan and writes nothing, not even the state dir.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from xputune.errors import XputuneError
from xputune.host import HostView
from xputune.topology.model import Topology
from xputune.tune import persist, preflight, profiles, recommend
from xputune.tune.errors import JournalError
from xputune.tune.journal import Journal, Transaction
from xputune.tune.knobs import KNOBS, Row, TuneContext, Want
from xputune.tune.lock import StateLock
from xputune.tune.state import state_dir
from xputune.tune.steps import Change
from xputune.tune.transaction import Restored, rollback, run


@dataclass(frozen=True)
class Selection:
    """The effective expectations: a profile, then command-line overrides, then only/skip."""

    profile: profiles.Profile
    how: str  # "given", "recommended" or "fallback"
    wants: dict[str, Want]
    overrides: dict[str, Any] = field(default_factory=dict)  # knob -> raw flag value

    def persist_args(self) -> list[str]:
        """The flags that reproduce this selection at boot."""
        try:
            by_name = profiles.locate(self.profile.name) == self.profile.path
        except XputuneError:
            by_name = False
        args = ["--profile", self.profile.name if by_name else self.profile.path]
        flags = {
            "thp.enabled": "--thp",
            "shm.huge": "--shm-huge",
            "numa.balancing": "--numa-balancing",
        }
        for knob, raw in self.overrides.items():
            if knob == "pcie.ido":
                args.append("--ido" if raw else "--no-ido")
            else:
                args += [flags[knob], str(raw)]
        managed = set(self.wants)
        skipped = [k for k in self.profile.knobs if k not in managed]
        for knob in skipped:
            args += ["--skip", knob]
        return args


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
    """Resolve the profile (given, else recommended) and apply flag overrides to it."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    for name in (*(only or ()), *(skip or ())):
        if name not in KNOBS:
            raise XputuneError(f"unknown knob {name!r} (known: {', '.join(KNOBS)})")
    if profile:
        chosen, how = profiles.load(profile), "given"
    else:
        best = recommend.recommend(profiles.load_all(), topology)
        chosen, how = (
            (best.profile, "recommended") if best else (profiles.load("generic"), "fallback")
        )
    wants = dict(chosen.knobs)
    for knob, raw in overrides.items():
        parsed = KNOBS[knob].parse(raw, f"flag for {knob}")
        severity = wants[knob].severity if knob in wants else "warn"
        wants[knob] = Want(parsed, (), severity, "command line")
    if only:
        wants = {k: w for k, w in wants.items() if k in only}
    for knob in skip or ():
        wants.pop(knob, None)
    ordered = {k: wants[k] for k in KNOBS if k in wants}
    return Selection(chosen, how, ordered, overrides)


def context(view: HostView, topology: Topology, selection: Selection) -> TuneContext:
    return TuneContext(view, topology, selection.profile.platform_registers)


def check(ctx: TuneContext, selection: Selection) -> list[Row]:
    rows: list[Row] = []
    for knob, want in selection.wants.items():
        rows.extend(KNOBS[knob].check(ctx, want))
    # The boot unit is judged only by a check of the whole profile: a narrowed check (--only,
    # --skip) asks about fewer knobs than a unit applies.
    if all(knob in selection.wants for knob in selection.profile.knobs):
        boot = persist.check_row(ctx.view, selection.persist_args())
        if boot is not None:
            rows.append(boot)
    return rows


def plan(ctx: TuneContext, selection: Selection, persist_unit: bool = False) -> list[Change]:
    changes: list[Change] = []
    for knob, want in selection.wants.items():
        changes.extend(KNOBS[knob].plan(ctx, want))
    if persist_unit:
        changes.extend(persist.plan(ctx.view, selection.persist_args()))
    return changes


def run_preflight(ctx: TuneContext, changes: list[Change]) -> None:
    by_knob: dict[str, list[Change]] = {}
    for change in changes:
        by_knob.setdefault(change.knob, []).append(change)
    for knob, mine in by_knob.items():
        if knob in KNOBS:
            KNOBS[knob].preflight(ctx, mine)


@dataclass
class ApplyResult:
    changes: list[Change]
    dry_run: bool
    transaction: Transaction | None = None
    journal: str | None = None
    warnings: list[str] = field(default_factory=list)


def apply(
    ctx: TuneContext,
    selection: Selection,
    command: list[str],
    dry_run: bool = False,
    wait: bool = False,
    persist_unit: bool = False,
) -> ApplyResult:
    view = ctx.view
    if dry_run:
        changes = plan(ctx, selection, persist_unit)
        warnings = []
        try:
            run_preflight(ctx, changes)
        except XputuneError as exc:
            warnings.append(f"a real apply would stop here: {exc}")
        return ApplyResult(changes, True, warnings=warnings)

    preflight.require_writable(view)
    preflight.require_root(view, "xputune apply")
    changes = plan(ctx, selection, persist_unit)
    run_preflight(ctx, changes)
    folder = state_dir(view)
    with StateLock(folder, wait=wait):
        journal = Journal(folder)
        stuck = journal.interrupted()
        if stuck is not None:
            raise JournalError(
                f"an earlier apply (started {stuck.started}, {len(stuck.steps)} step(s) "
                f"journaled) did not finish; run `xputune rollback` first (nothing was changed)"
            )
        changes = plan(ctx, selection, persist_unit)  # the host may have moved while we waited
        run_preflight(ctx, changes)
        if not changes:
            return ApplyResult([], False)
        txn = run(ctx, changes, journal, selection.profile.name, command)
    result = ApplyResult(changes, False, txn, journal.path)
    if persist_unit and any(c.knob == "persist" for c in changes):
        warning = persist.reload_systemd(view)
        if warning:
            result.warnings.append(warning)
    return result


@dataclass
class RollbackResult:
    restored: list[Restored]
    journal: str | None
    transactions: int


def rollback_host(view: HostView, wait: bool = False) -> RollbackResult:
    preflight.require_writable(view)
    preflight.require_root(view, "xputune rollback")
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
    return RollbackResult(restored, journal.path, len(active))
