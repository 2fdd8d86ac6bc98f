"""What a rollback would restore, read now: `xputune rollback --dry-run`.

A dry run answers "what would rollback do here?" without doing any of it: no lock, no write,
not even the state directory's own housekeeping, and no root where the state directory lets
the user read it. It reads the same journal the real rollback replays, validates it the same
way (a journal the real one would refuse is refused here, with the same line), and for each
step, newest first as the real one restores them, reads the value now through the step's own
accessor, beside the original that would be put back.

Reading a value can fail where writing would not have been tried yet (config space past 64
bytes is root's, a device is gone): that step's value now is unknown, with the reason, and the
dry run goes on (discovery's rule: one unreadable value does not hide the others).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xputune.errors import XputuneError
from xputune.host import HostView
from xputune.tune.journal import Journal, Step
from xputune.tune.kinds import accessor
from xputune.tune.validate import validate


@dataclass(frozen=True)
class Pending:
    """One step a rollback would restore: where, the value now, the original to put back."""

    step: Step
    now: Any  # the value read now, in the accessor's form (None with `unreadable`)
    now_text: str  # the value now as people read it ("on", "huge=never", "absent")
    unreadable: str | None = None  # why the value now is unknown

    @property
    def original_text(self) -> str:
        return self.step.original_text or value_text(self.step, self.step.original)

    @property
    def changes(self) -> bool | None:
        """Whether restoring changes anything now (None: the value now is unknown)."""
        if self.unreadable is not None:
            return None
        return self.now != self.step.original

    def as_dict(self) -> dict[str, Any]:
        return {
            "knob": self.step.knob,
            "where": self.step.label,
            "kind": self.step.kind,
            "target": self.step.target,
            "now": self.now_text,
            "original": self.original_text,
            "changes": self.changes,
            "unreadable": self.unreadable,
        }


def pending(view: HostView, journal: Journal) -> list[Pending]:
    """The steps of the journal's active transactions, in the order a rollback restores them
    (newest first), each with its value now. JournalError when the real rollback would refuse
    the journal (tune/validate.py)."""
    active = journal.active()
    validate(view, active)
    steps = [step for txn in active for step in txn.steps]
    return [_read_now(view, step) for step in reversed(steps)]


def _read_now(view: HostView, step: Step) -> Pending:
    try:
        now = accessor(step.kind).read(view, step.target)
    except (XputuneError, OSError) as exc:
        reason = str(exc) if isinstance(exc, XputuneError) else (exc.strerror or str(exc))
        return Pending(step, None, "unknown", reason)
    return Pending(step, now, value_text(step, now))


def value_text(step: Step, value: Any) -> str:
    """A value of the step's kind as people read it (the journal keeps only the original's
    text): the original's own words when it is the original, a unit file as present or absent
    (never its text), register bits as the knob names them."""
    if value == step.original and step.original_text:
        return step.original_text
    kind = step.kind
    if kind == "file":
        if value is None:
            return "absent"
        return "as installed" if value == step.new else "present, other text"
    if kind == "symlink":
        return "absent" if value is None else f"-> {value}"
    if kind == "pci-bits" and isinstance(value, int):
        from xputune.tune.knobs.pcie_ido import IDO, describe_bits

        mask = step.target.get("mask") if isinstance(step.target, dict) else None
        return describe_bits(value) if mask == IDO else hex(value)
    if kind == "sysctl-int":
        from xputune.tune.knobs.numa_balancing import describe

        return describe(value)
    if kind == "shm-huge" and isinstance(value, str):
        return f"huge={value}"
    return "-" if value is None else str(value)
