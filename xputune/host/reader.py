"""Discovery's reader: a missing, unreadable or odd value becomes unknown, with a warning.

A field engineer on a box with one odd bridge must still see their eight cards, so discovery
never stops on one value: it records what it found at which path and what it expected, and
goes on with None. Only what makes the whole picture untrustworthy stays fatal: no host tree
at all, a path that escapes the root, a symlink loop. `strict` keeps fail-on-first-oddity for
people who check recordings.
"""

from __future__ import annotations

from collections.abc import Callable

from xputune.errors import HostDataError, HostError, RootEscapeError, SymlinkLoopError
from xputune.host.view import HostView

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: start-up time
if TYPE_CHECKING:
    from typing import TypeVar

    T = TypeVar("T")

#: Errors that mean the tree itself cannot be trusted: never turned into a warning.
FATAL = (RootEscapeError, SymlinkLoopError)


class Reader:
    """Reads host values through a view and collects what it could not read."""

    def __init__(self, view: HostView, strict: bool = False) -> None:
        self.view = view
        self.strict = strict
        self.warnings: list[str] = []

    def warn(self, message: str) -> None:
        """A finding that is not tied to one bad value (for example, a derived contradiction)."""
        self.warnings.append(message)

    def odd(
        self, path: str, found: object, expected: str, outcome: str = "taken as unknown"
    ) -> None:
        """`path` held `found` where `expected` was due: stop in strict mode, else note it."""
        self._bad_data(HostDataError(path, found, expected), outcome)

    def text(self, path: str, *, required: bool = False) -> str | None:
        """The file's text, or None when absent (noted when `required`) or unreadable (noted)."""
        return self._read(path, required, self.view.read_text)

    def data(self, path: str, *, required: bool = False) -> bytes | None:
        """The file's bytes, or None as text() says it (a reader that decodes them itself)."""
        return self._read(path, required, self.view.read_bytes)

    def _read(self, path: str, required: bool, read: Callable[[str], T]) -> T | None:
        try:
            return read(path)
        except FileNotFoundError:
            if required:
                self.odd(path, None, "expected the kernel to provide it")
            return None
        except FATAL:
            raise
        except HostError as exc:
            self._unreadable(path, exc)
            return None

    def value(
        self, path: str, parse: Callable[[str, str], T], *, required: bool = False
    ) -> T | None:
        """The parsed value, or None (with a warning) when the file is absent, unreadable or odd."""
        text = self.text(path, required=required)
        return None if text is None else self.parse(path, text, parse)

    def parse(self, path: str, text: str, parse: Callable[[str, str], T]) -> T | None:
        """Parse text already read from `path`; None (with a warning) when it is odd."""
        try:
            return parse(text, path)
        except HostDataError as exc:
            self._bad_data(exc)
            return None

    def guard(self, path: str, action: Callable[[], T]) -> T | None:
        """A composite read (a whole config space, a cpuinfo): odd data gives None + warning."""
        try:
            return action()
        except FATAL:
            raise
        except HostDataError as exc:
            self._bad_data(exc)
        except FileNotFoundError:
            pass
        except HostError as exc:
            self._unreadable(path, exc)
        return None

    def _bad_data(self, exc: HostDataError, outcome: str = "taken as unknown") -> None:
        if self.strict:
            raise exc
        self.warnings.append(f"{exc.path}: {_shown(exc.value)}, {exc.expected}; {outcome}")

    def _unreadable(self, path: str, exc: HostError) -> None:
        if self.strict:
            raise exc
        reason = _reason(exc, self.view.label)
        self.warnings.append(f"{path}: unreadable ({reason}); taken as unknown")


def _shown(value: object) -> str:
    """What was found, short and on one line, so a warning never spans lines."""
    if value is None:
        return "missing"
    shown = repr(value)
    return f"read {shown[:57]}..." if len(shown) > 60 else f"read {shown}"


def _reason(exc: HostError, label: str) -> str:
    """The error's message without the view's label, which every warning would repeat."""
    message = str(exc)
    prefix = f"{label}: "
    return message[len(prefix) :] if message.startswith(prefix) else message
