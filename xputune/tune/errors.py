"""Errors of the tuning layer, each one a user-facing XputuneError with its own exit code.

They are separate classes so that tests and the CLI can tell "someone else holds the lock" from
"the hardware ignored the write" without parsing messages.
"""

from __future__ import annotations

from xputune.errors import XputuneError


class ProfileError(XputuneError):
    """A profile is missing, unreadable or breaks the schema; the message names file and key."""


class LockBusy(XputuneError):
    """Another apply or rollback holds the state-dir lock."""

    exit_code = 5


class JournalError(XputuneError):
    """The journal is unreadable, or an earlier apply was interrupted and must be rolled back."""

    exit_code = 6


class VerifyError(XputuneError):
    """A value read back after a write is not the value written (the change did not take)."""

    exit_code = 7


class UnsupportedBits(VerifyError):
    """Bits that read back as 0 after being set: the device does not implement them.

    There is no "IDO supported" capability bit, so writing and reading back is the only test.
    """

    def __init__(self, label: str, bits: int, names: str) -> None:
        super().__init__(
            f"{label}: {names} (bits {bits:#06x}) read back as 0 after being set: "
            "the device does not implement them (unsupported, nothing was left changed)"
        )
        self.label = label
        self.bits = bits


class ApplyFailed(XputuneError):
    """A step of an apply failed; everything already changed was rolled back."""

    exit_code = 8


class ApplyDenied(ApplyFailed):
    """A step was refused for want of permission (not root, a tree this user may not write,
    kernel lockdown): rolled back as any failed step, but ended with the permission status,
    since the fix is who runs it, not what it changes."""

    exit_code = 4


class RollbackIncomplete(XputuneError):
    """Some originals could not be restored; the journal is kept so rollback can be retried."""

    exit_code = 9
