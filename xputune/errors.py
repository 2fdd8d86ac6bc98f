"""Errors a user can cause, each rendered by the CLI as one line and a non-zero exit code.

Everything else that escapes is a bug and keeps its traceback. Keeping the user-facing errors in
one small module lets every layer raise them without importing anything above it.
"""

from __future__ import annotations


class XputuneError(Exception):
    """Base of every error that is the user's to fix (bad path, bad fixture, no permission)."""

    exit_code: int = 2


class HostError(XputuneError):
    """The host view could not be opened or read (missing root, escape, loop, permission)."""


class RootEscapeError(HostError):
    """A path or symlink inside a root points outside it."""


class SymlinkLoopError(HostError):
    """Resolving a path followed more symlinks than the kernel would (MAXSYMLINKS)."""


class RecordingError(HostError):
    """A recording (tarball) is not one xputune will read: garbage, hostile or too large."""


class UnreadableValueError(HostError):
    """One file of a host tree cannot be read as a value (not a regular file, too large).

    Discovery turns it into an unknown value with a warning; only strict mode stops on it.
    """


class HostDataError(XputuneError):
    """A file exists but its content is not what any real kernel writes there."""

    def __init__(self, path: str, value: object, expected: str) -> None:
        """`value` is what was found; None means nothing was (a missing file or line)."""
        shown = "missing" if value is None else repr(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        super().__init__(f"bad value in {path}: {shown} ({expected})")
        self.path = path
        self.value = value
        self.expected = expected


class UnsupportedError(XputuneError):
    """The hardware or platform lacks what the command needs."""


class PermissionRequired(XputuneError):
    """The command needs privileges it does not have (root, no kernel lockdown)."""

    exit_code = 4
