"""Apply a list of changes as one transaction, and roll transactions back.

For each change, in order: read the original, journal it (on disk, fsynced), write, read back.
The first failure of any kind rolls back every change of this transaction, newest first, and
the error says what failed and that nothing was left changed. A kill -9 at any point leaves a
journal that `rollback` replays the same way (restoring an original that was never overwritten
is harmless, so no step needs to be known as done).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from xputune.errors import PermissionRequired, XputuneError
from xputune.host import HostView
from xputune.tune.errors import (
    ApplyDenied,
    ApplyFailed,
    RollbackIncomplete,
    UnsupportedBits,
    VerifyError,
)
from xputune.tune.journal import (
    APPLIED,
    IN_PROGRESS,
    ROLLED_BACK,
    Journal,
    Step,
    Transaction,
    encode_raw,
)
from xputune.tune.kinds import accessor
from xputune.tune.knobs import KNOBS, TuneContext
from xputune.tune.steps import Change
from xputune.tune.validate import validate

#: Test-only crash point: "K" or "K:before" dies just before the write of step K, "K:after"
#: just after it (before it is verified), by SIGKILL, exactly like `kill -9`.
CRASH_ENV = "XPUTUNE_TEST_CRASH_AT_STEP"


def _test_crash_point(n: int, when: str) -> None:
    spec = os.environ.get(CRASH_ENV)
    if not spec:
        return
    step, _, moment = spec.partition(":")
    if step == str(n) and (moment or "before") == when:
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class Restored:
    step: Step
    error: str | None  # None when restored and verified


def run(
    ctx: TuneContext,
    changes: list[Change],
    journal: Journal,
    profile: str,
    command: list[str],
) -> Transaction:
    """Apply `changes`; on any failure restore this transaction's originals and raise."""
    view = ctx.view
    txn = journal.begin(profile, command, view.label)
    txn.platform_registers = [dict(entry) for entry in ctx.platform_registers]
    current: Change | None = None
    try:
        for n, change in enumerate(changes, 1):
            current = change
            acc = accessor(change.kind)
            original = acc.read(view, change.target)
            raw_path = None if view.live else acc.raw_path(change.target)
            raw = encode_raw(view.read_bytes(raw_path)) if raw_path else None
            shown = change.before_text if original == change.before else repr(original)
            step = Step(
                n,
                change.knob,
                change.kind,
                change.target,
                change.label,
                original,
                change.after,
                raw,
                original_text=shown,
            )
            journal.record(txn, step)
            _test_crash_point(n, "before")
            knob = KNOBS.get(change.knob)
            if knob is not None:
                knob.apply(ctx, change)
            else:
                acc.write(view, change.target, change.after)
            _test_crash_point(n, "after")
            verified = (
                knob.verify(ctx, change)
                if knob is not None
                else acc.read(view, change.target) == change.after
            )
            if not verified:
                raise VerifyError(f"{change.label}: {change.after_text} did not read back")
            step.done = True
    except BaseException as exc:
        results = restore(view, txn.steps)
        failed = [r for r in results if r.error]
        what = f"{current.knob} {current.label}" if current else "the apply"
        if failed:
            journal.finish(txn, IN_PROGRESS, error=str(exc))
            raise RollbackIncomplete(
                f"{what} failed ({exc}) and {len(failed)} original(s) could not be restored: "
                + "; ".join(f"{r.step.label}: {r.error}" for r in failed)
                + f". The journal {journal.path} is kept; fix the cause and run "
                "`xputune rollback`"
            ) from exc
        journal.finish(txn, ROLLED_BACK, error=str(exc))
        journal.archive()
        if not isinstance(exc, XputuneError | OSError):
            raise
        hint = ""
        if isinstance(exc, UnsupportedBits) and current is not None:
            hint = f" To apply the rest, leave this knob out with --skip {current.knob}."
        if _denied(exc):
            why = "run it as root" if view.live else "run it as root, or on a tree this user owns"
            raise ApplyDenied(
                f"{what} failed: {exc}. Rolled back {len(results)} change(s); the host is as "
                f"it was before this apply: {why}"
            ) from exc
        raise ApplyFailed(
            f"{what} failed: {exc}. Rolled back {len(results)} change(s); "
            f"the host is as it was before this apply.{hint}"
        ) from exc
    journal.finish(txn, APPLIED)
    return txn


def _denied(exc: BaseException) -> bool:
    """The step failed for want of permission: EACCES/EPERM, raw or as the host view's
    one-line error, or a refusal that says so itself."""
    return isinstance(exc, PermissionError | PermissionRequired) or isinstance(
        exc.__cause__, PermissionError
    )


def restore(view: HostView, steps: list[Step]) -> list[Restored]:
    """Put back the originals of `steps`, newest first, verifying each; never stops early."""
    results = []
    for step in reversed(steps):
        try:
            _restore_one(view, step)
        except (XputuneError, OSError) as exc:
            results.append(Restored(step, str(exc)))
        else:
            results.append(Restored(step, None))
    return results


def _restore_one(view: HostView, step: Step) -> None:
    acc = accessor(step.kind)
    raw = step.raw_bytes()
    raw_path = acc.raw_path(step.target)
    if raw is not None and raw_path and not view.live:
        view.write_bytes(raw_path, raw)
        if view.read_bytes(raw_path) != raw:
            raise VerifyError(f"{raw_path}: restored bytes did not read back")
        return
    if acc.read(view, step.target) != step.original:
        acc.write(view, step.target, step.original)
    if acc.read(view, step.target) != step.original:
        raise VerifyError(f"{step.label}: original {step.original!r} did not read back")


def rollback(view: HostView, journal: Journal) -> list[Restored]:
    """Restore every active transaction of the journal, newest first, then archive it.

    Every step is validated against the knob that owns it first (tune/validate.py): a journal
    that asks for anything a knob could not have written is refused before anything runs.
    """
    active = journal.active()
    validate(view, active)
    steps = [step for txn in active for step in txn.steps]
    results = restore(view, steps)
    failed = [r for r in results if r.error]
    if failed:
        raise RollbackIncomplete(
            f"{len(failed)} of {len(results)} original(s) could not be restored: "
            + "; ".join(f"{r.step.label}: {r.error}" for r in failed)
            + f". The journal {journal.path} is kept; run `xputune rollback` again"
        )
    for txn in active:
        journal.finish(txn, ROLLED_BACK)
    journal.archive()
    return results
