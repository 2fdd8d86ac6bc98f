"""`xputune watch`: keep a host at its profile between boots.

A card reset, hot-plug or driver rebind clears the PCIe ordering bits of the functions
concerned; nothing else puts them back until the next boot. The watch re-verifies the
profile on every wake-up (a udev event on the live host, a timer under --root, see
events.py) and re-applies what drifted through the same journaled transaction as `xputune
apply` (engine.apply, so rollback undoes it like any apply).

It must never loop on a flapping card. Each place (a knob at one PCIe port or one sysfs file)
has a budget: at most `reapplies` re-applies within `window` seconds; the next drift there
starts a backoff of `backoff` seconds in which that place is left alone (and the log says so,
once). After the backoff one re-apply is allowed; another drift within the window doubles the
backoff, up to `backoff_max`; a place that stays put for a whole window starts afresh.

What it holds is what `xputune apply` set: the selection (profile and flags) of the newest
transaction in the journal, read again on every pass, so an apply of another profile while the
watch runs is what it holds from then on. Flags given to the watch itself (--profile, a knob
flag, --only, --skip: what `apply --persist --watch` writes into the watch service) name the
selection instead, exactly as apply would read them. With neither (no journal: nothing was
applied, or it was rolled back) the watch changes nothing: it reports drift against the
profile apply would choose, and its log says so. Watching is not tuning.

A rollback wins over the watch: `xputune rollback` leaves a mark in the state directory, and
while it is there the watch reports drift and changes nothing (checked again under the apply
lock, so a rollback that lands mid-pass is not undone). The next `xputune apply` clears it.

`--once` exits with the status table's words (cli/exits.py): 0 when the host is at its
profile after the pass, whether it held or was fixed; 1 when drift is left (a re-apply failed
or backs off, a rollback paused the watch, nothing is applied to hold, or a dry run saw it).

Every event is one line on stderr (journald takes it from there under systemd), in logfmt:
`ts=... event=drift knob=pcie.ido place="0000:23:00.0 card xpu0" expected=on actual=off`.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from xputune.errors import XputuneError
from xputune.fleet.events import Event, EventSource, PollSource, Stopper, Watched
from xputune.fleet.judge import Judgement, host_name
from xputune.fleet.watchstate import STATE_FILE, WATCH_LOCK, Backoff, LastApply, WatchState
from xputune.host import HostView
from xputune.host.view import clean_tmp_at, write_replace_at
from xputune.tune import engine, preflight
from xputune.tune.errors import LockBusy
from xputune.tune.journal import Journal, rolled_back_at, utc_stamp
from xputune.tune.knobs.base import DRIFT, Row
from xputune.tune.lock import StateLock
from xputune.tune.state import StateDir, open_state_fd, readable_state_dir, state_dir

# Exit status of `xputune watch --once` (cli/exits.py: OK, DIFFERENCE).
HELD = 0  # the host is at its profile after the pass: it held, or drift was re-applied
LEFT = 1  # drift is left: a re-apply failed or backs off, a rollback paused the watch,
#           nothing is applied to hold, or a dry run saw drift

# Where the selection a pass holds came from (WatchState.source).
FROM_FLAGS = "flags"  # the watch's own flags
FROM_JOURNAL = "journal"  # the newest transaction of the journal: what apply set
FROM_NOTHING = "none"  # neither: drift is reported against the recommended profile, not fixed

Key = tuple[str, str]  # (knob, place): a check row's knob and target, a change's knob and label

# Bounds of the watch's times, in seconds (the CLI declares the same, tests/cli/test_bounds.py
# keeps them equal). Each wait goes to select() and each backoff end is printed as a date:
# inf, nan or 1e300 would crash the agent after its first pass had already changed the host.
#: --interval: a pass costs milliseconds on a tree; a day between re-verifies is the longest.
MIN_INTERVAL = 0.01
MAX_INTERVAL = 86_400.0
#: --window, --backoff, --backoff-max: a week at most.
MAX_PERIOD = 604_800.0
#: --max-reapplies
MAX_REAPPLIES = 1000


@dataclass(frozen=True)
class Limits:
    """The re-apply budget of one place, and the backoff once it is spent."""

    reapplies: int = 3
    window: float = 600.0
    backoff: float = 60.0
    backoff_max: float = 3600.0

    def __post_init__(self) -> None:
        if not 1 <= self.reapplies <= MAX_REAPPLIES:
            raise XputuneError(f"--max-reapplies must be within 1..{MAX_REAPPLIES}")
        periods = (self.window, self.backoff, self.backoff_max)
        if not all(0 < p <= MAX_PERIOD for p in periods):  # false for nan too
            raise XputuneError(
                f"--window, --backoff and --backoff-max must be more than 0 and at most "
                f"{MAX_PERIOD:g} seconds (a week)"
            )
        if self.backoff_max < self.backoff:
            raise XputuneError("--backoff-max must be at least --backoff")


@dataclass(frozen=True)
class Decision:
    allowed: bool
    until: float = 0.0  # while not allowed: the end of the backoff
    delay: float = 0.0
    started: bool = False  # this decision started the backoff (log it, once)
    spent: int = 0  # the re-applies within the window that spent the budget


@dataclass
class _Budget:
    attempts: deque[float] = field(default_factory=deque)
    delay: float = 0.0  # the last backoff (0: none since the place calmed down)
    until: float = 0.0


class RateLimiter:
    """Per-place re-apply budget with exponential backoff (see the module docstring)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._budgets: dict[Key, _Budget] = {}

    def decide(self, key: Key, now: float) -> Decision:
        """May `key` be re-applied now? Starts a backoff when its budget is spent."""
        lim = self.limits
        budget = self._budgets.setdefault(key, _Budget())
        if now < budget.until:
            return Decision(False, budget.until, budget.delay)
        while budget.attempts and budget.attempts[0] <= now - lim.window:
            budget.attempts.popleft()
        if budget.delay and not budget.attempts and now - budget.until >= lim.window:
            budget.delay = 0.0  # calm for a whole window since the last backoff: start afresh
        allowance = 1 if budget.delay else lim.reapplies  # after a backoff: one try
        if len(budget.attempts) < allowance:
            return Decision(True)
        budget.delay = min(budget.delay * 2, lim.backoff_max) if budget.delay else lim.backoff
        budget.until = now + budget.delay
        spent = len(budget.attempts)
        budget.attempts.clear()
        return Decision(False, budget.until, budget.delay, started=True, spent=spent)

    def record(self, key: Key, now: float) -> None:
        self._budgets.setdefault(key, _Budget()).attempts.append(now)

    def attempts(self, key: Key) -> int:
        budget = self._budgets.get(key)
        return len(budget.attempts) if budget else 0

    def backing_off(self, now: float) -> list[tuple[Key, float, float]]:
        """(key, until, delay) of every place in a backoff now."""
        return [(k, b.until, b.delay) for k, b in sorted(self._budgets.items()) if b.until > now]


@dataclass
class WatchConfig:
    """What to keep (the apply flags) and how (interval, limits, outputs)."""

    profile: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    only: list[str] | None = None
    skip: list[str] | None = None
    force: bool = False
    interval: float = 60.0
    limits: Limits = field(default_factory=Limits)
    textfile: str | None = None  # folder for xputune.prom (node_exporter's textfile collector)
    nfd: str | None = None  # folder for NFD's feature file
    nfd_expiry: timedelta | None = timedelta(minutes=60)
    #: Report drift, change nothing: no re-apply, no lock, no state file (outputs still
    #: written where asked). Needs neither root nor a writable tree.
    dry_run: bool = False

    @property
    def explicit(self) -> bool:
        """Whether the watch's own flags name the selection (else the journal's is held)."""
        given = any(v is not None for v in self.overrides.values())
        return self.profile is not None or given or bool(self.only) or bool(self.skip)

    def __post_init__(self) -> None:
        if not MIN_INTERVAL <= self.interval <= MAX_INTERVAL:  # false for nan too
            raise XputuneError(
                f"--interval must be within {MIN_INTERVAL:g}..{MAX_INTERVAL:g} seconds "
                f"(a day), got {self.interval:g}"
            )


@dataclass(frozen=True)
class PassResult:
    drift: int  # places of managed knobs found drifting at the start of the pass
    fixed: int  # places re-applied and verified
    left: int  # places drifting at the end of the pass

    @property
    def status(self) -> int:
        return LEFT if self.left else HELD


def logfmt(event: str, when: float, **fields: object) -> str:
    """One log line: ts=... event=... key=value..., values quoted when they hold spaces."""
    parts = [f"ts={utc_stamp(when)}", f"event={event}"]
    for key, value in fields.items():
        if value is None:
            continue
        text = str(value)
        if not text or any(c in text for c in ' "=\\\n\t'):
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
        parts.append(f"{key}={text}")
    return " ".join(parts)


def stderr_log(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _seconds(value: float) -> str:
    return f"{value:g}s"


class Watcher:
    """One host's watch: passes over a fresh view each time, and the state they leave."""

    def __init__(
        self,
        open_view: Callable[[], HostView],
        folder: StateDir | None,
        config: WatchConfig,
        log: Callable[[str], None] = stderr_log,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.open_view = open_view
        self.folder = folder
        self.config = config
        self.log = log
        self.clock = clock
        self.limiter = RateLimiter(config.limits)
        self.state = self._load_state() if folder is not None else WatchState()
        self.state.started = clock()
        self.state.pid = os.getpid()
        self.state.paused = False
        self.watched = Watched()
        self._view: HostView | None = None
        self._drifting: set[Key] = set()
        self._paused = False
        self._held: tuple[str, str] | None = None  # what the last hold line said

    # -- state file -----------------------------------------------------------------------
    def _load_state(self) -> WatchState:
        """The previous agent's counters (they carry over); a fresh state when there is none
        or it is not a file we wrote (a symlink, a FIFO, another layout)."""
        fd = open_state_fd(self.folder)
        try:
            clean_tmp_at(fd, (STATE_FILE,))  # left by a killed agent (we hold the watch lock)
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                raw = os.open(STATE_FILE, flags, dir_fd=fd)
            except OSError:
                return WatchState()
            with os.fdopen(raw, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    return WatchState()
                data = fh.read(1 << 20)
        finally:
            os.close(fd)
        try:
            old = WatchState.from_dict(json.loads(data))
        except (ValueError, TypeError, RecursionError):
            return WatchState()
        old.backoff = []  # backoffs are this agent's, in memory
        return old

    def _save_state(self) -> None:
        if self.folder is None:  # a dry run keeps its counters in memory
            return
        fd = open_state_fd(self.folder)
        try:
            write_replace_at(fd, STATE_FILE, self.state.to_json().encode(), 0o600)
        finally:
            os.close(fd)

    # -- one pass ---------------------------------------------------------------------------
    def emit(self, event: str, **fields: object) -> None:
        self.log(logfmt(event, self.clock(), **fields))

    def _check(self, view: HostView):
        self._view = view
        topology = engine.discover(view)
        selection, source = self._selection(view, topology)
        ctx = engine.context(view, topology, selection)
        return topology, selection, source, ctx, engine.check(ctx, selection)

    def _selection(self, view: HostView, topology) -> tuple[engine.Selection, str]:
        """What this pass holds, and where that came from (FROM_*): the watch's flags, else
        the journal's newest transaction, else the recommended profile, only to report on."""
        cfg = self.config
        if cfg.explicit:
            selection = engine.select(topology, cfg.profile, cfg.overrides, cfg.only, cfg.skip)
            engine.require_force(selection, cfg.force)
            self._say_hold(FROM_FLAGS, selection)
            return selection, FROM_FLAGS
        folder = self.folder if self.folder is not None else readable_state_dir(view)
        txn = Journal(folder, clean=False).last_applied() if folder is not None else None
        if txn is None:
            selection = engine.select(topology)
            self._say_hold(FROM_NOTHING, selection)
            return selection, FROM_NOTHING
        args = txn.selection_args() or []
        try:
            selection = engine.parse_selection_args(args).select(topology)
        except XputuneError as exc:
            raise XputuneError(
                f"cannot hold what the last apply set (journal transaction {txn.id}: "
                f"{shlex.join(args)}): {exc}; give the watch --profile"
            ) from None
        self._say_hold(FROM_JOURNAL, selection, txn.id)
        return selection, FROM_JOURNAL

    def _say_hold(self, source: str, selection: engine.Selection, txn: str = "") -> None:
        """One log line when what the watch holds changes (and on the first pass)."""
        args = shlex.join(selection.persist_args())
        held = (source, args)  # a re-apply of the same selection journals a new id: not news
        if held == self._held:
            return
        self._held = held
        if source == FROM_NOTHING:
            self.emit(
                "report-only",
                profile=selection.profile.name,
                reason="no profile applied (no journal) and none given: drift from the "
                "recommended profile is reported, nothing is changed; run xputune apply, or "
                "give the watch --profile",
            )
            return
        self.emit("hold", source=source, profile=selection.profile.name, args=args,
                  transaction=txn or None)  # fmt: skip

    def run_pass(self, events: list[Event]) -> PassResult:
        """Re-verify, re-apply what may be, write state and outputs. Errors propagate."""
        now = self.clock()
        self.state.passes += 1
        for event in events:
            WatchState.bump(self.state.events, event.kind)
            if event.bdf is not None:
                self.emit("udev", action=event.kind, bdf=event.bdf, device=event.what)
        topology, selection, source, ctx, rows = self._check(self.open_view())
        self.watched = Watched.of(topology)
        self.state.knobs = list(selection.wants)
        self.state.profile, self.state.source = selection.profile.name, source
        drifting = self._drift(rows, selection.wants)
        for key, row in drifting.items():
            if key not in self._drifting:
                WatchState.bump(self.state.drift, key[0])
                self.emit(
                    "drift", knob=key[0], place=key[1], expected=row.expected, actual=row.actual
                )
        act = drifting and not self.config.dry_run and source != FROM_NOTHING
        fixed = self._reapply(ctx, selection, drifting, now) if act else set()
        if fixed:
            topology, selection, _, ctx, rows = self._check(self.open_view())
            self.watched = Watched.of(topology)
            after = self._drift(rows, selection.wants)
        else:
            after = drifting
        # A place fixed in this pass that drifts again is a new drift (logged, counted), even
        # when it drifted again before the re-check.
        self._drifting = set(after) - fixed
        self.state.backoff = [
            Backoff(k[0], k[1], until, delay)
            for k, until, delay in self.limiter.backing_off(self.clock())
        ]
        self.state.paused = self._paused
        self.state.updated = self.clock()
        self._save_state()
        self._outputs(topology, rows, selection)
        return PassResult(len(drifting), len(fixed), len(after))

    @staticmethod
    def _drift(rows: list[Row], wants: dict[str, Any]) -> dict[Key, Row]:
        return {(r.knob, r.target): r for r in rows if r.knob in wants and r.verdict == DRIFT}

    def _reapply(self, ctx, selection, drifting: dict[Key, Row], now: float) -> set[Key]:
        """Re-apply the drifting places the budget allows; the places fixed."""
        rolled = rolled_back_at(self.folder)
        if rolled is not None:
            self._pause(rolled)
            return set()
        if self._paused:
            self._paused = False
            self.emit("resumed", reason="applied since the rollback")
        allowed: set[Key] = set()
        for key in sorted(drifting):
            decision = self.limiter.decide(key, now)
            if decision.allowed:
                allowed.add(key)
            elif decision.started:
                self.emit(
                    "backoff",
                    knob=key[0],
                    place=key[1],
                    reapplies=decision.spent,
                    window=_seconds(self.config.limits.window),
                    delay=_seconds(decision.delay),
                    until=utc_stamp(decision.until),
                )
        if not allowed:
            return set()
        for key in allowed:
            self.limiter.record(key, now)
        command = ["watch", *selection.persist_args()]
        try:
            result = engine.apply(
                ctx, selection, command, reapply=True, keep=lambda c: (c.knob, c.label) in allowed
            )
        except LockBusy as exc:
            self.emit("busy", reason=str(exc))  # an apply or rollback runs; next pass retries
            return set()
        except (XputuneError, OSError) as exc:
            for knob in sorted({k[0] for k in allowed}):
                WatchState.bump(self.state.failures, knob, sum(k[0] == knob for k in allowed))
            self.state.last_apply = LastApply(self.clock(), False, 0, str(exc))
            where = "; ".join(f"{knob} {place}" for knob, place in sorted(allowed))
            self.emit("reapply-failed", places=where, error=str(exc))
            return set()
        if result.skipped:
            self._pause(None, result.skipped)
            return set()
        for change in result.changes:
            WatchState.bump(self.state.reapplies, change.knob)
            self.emit(
                "reapply",
                knob=change.knob,
                place=change.label,
                before=change.before_text,
                after=change.after_text,
                attempt=self.limiter.attempts((change.knob, change.label)),
                journal=result.journal,
            )
        self.state.last_apply = LastApply(self.clock(), True, len(result.changes))
        return {(c.knob, c.label) for c in result.changes}

    def _pause(self, rolled: float | None, reason: str | None = None) -> None:
        if not self._paused:
            self._paused = True
            why = reason or f"rolled back at {utc_stamp(rolled or 0.0)}"
            self.emit(
                "paused",
                reason=f"{why}; drift is reported, not re-applied, until the next xputune apply",
            )

    def _outputs(self, topology, rows: list[Row], selection) -> None:
        """The textfile and NFD feature file, from the rows just checked."""
        cfg = self.config
        if cfg.textfile is None and cfg.nfd is None:
            return
        from xputune.fleet.atomic import write_atomic

        judgement = Judgement(
            selection.profile.name, selection.how, tuple(r.as_dict() for r in rows)
        )
        view = self._view
        if cfg.textfile is not None:
            from xputune.fleet.metrics import exposition

            text = exposition(topology, host_name(view), judgement, self.state, self.clock())
            write_atomic(cfg.textfile, "xputune.prom", text)
        if cfg.nfd is not None:
            from xputune.fleet.labels import FILE_NAME, feature_file, labels

            write_atomic(
                cfg.nfd, FILE_NAME, feature_file(labels(topology, judgement), expiry=cfg.nfd_expiry)
            )

    # -- the agent --------------------------------------------------------------------------
    def loop(self, source: EventSource, stopper: Stopper) -> None:
        """Wait, pass, repeat until stopped; a failing pass is logged and retried."""
        while not stopper.stopped:
            source.watch(self.watched)
            events = source.wait(self.config.interval, stopper)
            if not events or stopper.stopped:
                continue
            try:
                self.run_pass(events)
            except (XputuneError, OSError) as exc:
                self.state.errors += 1
                self.emit("error", error=str(exc))


def run(
    open_view: Callable[[], HostView],
    config: WatchConfig,
    once: bool = False,
    source: Callable[[], EventSource] | None = None,
    stopper: Stopper | None = None,
    log: Callable[[str], None] = stderr_log,
) -> int:
    """The agent: check it may act, hold the watch lock, first pass, then the loop.

    The first pass is strict: a bad profile, an unreadable tree or an output folder that
    does not exist stop the agent with one line (a service manager then shows the failure).
    Returns the exit status: with `once` the first pass's (HELD: the host is at its profile
    after it; LEFT: drift is left), else 0 after a stop.
    """
    view = open_view()
    if not config.dry_run:
        preflight.require_writable(view)
        preflight.require_root(view, "xputune watch")
    for out in (config.textfile, config.nfd):
        if out is not None and not os.path.isdir(out):
            raise XputuneError(f"{out}: no such directory")
    folder = None if config.dry_run else state_dir(view)
    lock = StateLock(folder, name=WATCH_LOCK) if folder is not None else None
    try:
        if lock is not None:
            lock.__enter__()
    except LockBusy:
        raise LockBusy(
            f"another xputune watch is running on {view.label} ({lock.holder()}); "
            "stop it first (systemctl stop xputune-watch)"
        ) from None
    own_stopper = stopper is None
    stopper = stopper or Stopper()
    events_source: EventSource | None = None
    try:
        watcher = Watcher(open_view, folder, config, log)
        if not once:  # listening before the first pass: no event is lost while it runs
            events_source = source() if source else PollSource()
        watcher.emit(
            "start",
            host=view.label,
            source=events_source.name if events_source else "once",
            interval=None if once else _seconds(config.interval),
            pid=os.getpid(),
            profile=config.profile,
            holds=FROM_FLAGS if config.explicit else "the last apply's (journal), else nothing",
            mode="dry-run" if config.dry_run else None,
        )
        first = watcher.run_pass([Event("start")])
        if once:
            watcher.emit(
                "done", drift=first.drift, fixed=first.fixed, left=first.left, status=first.status
            )
            return first.status
        assert events_source is not None
        watcher.loop(events_source, stopper)
        watcher.emit("stop", signal=stopper.signal, passes=watcher.state.passes)
        return 0
    finally:
        if events_source is not None:
            events_source.close()
        if own_stopper:
            stopper.close()
        if lock is not None:
            lock.__exit__(None, None, None)
