"""Changes and the accessors that carry them out, by kind, so a journal can be replayed alone.

A `Change` is one value at one place: a few bits of one config register, one sysfs file, the
huge= option of one mount. Everything needed to undo it is plain JSON (`kind` + `target`), so
`xputune rollback` can restore a journal written by a process that was killed, without the
profile or the topology that produced it.

Each kind has an `Accessor` with `read` and `write`; the knob modules define them and register
them here (tune/kinds.py looks up any kind). Writing and reading back is the same code for
apply, verify and rollback.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from xputune.host import HostView

JsonValue = Any


@dataclass(frozen=True)
class Change:
    """One planned change: set `target` (of accessor `kind`) from `before` to `after`."""

    knob: str  # "pcie.ido", "thp.enabled", ...
    kind: str  # accessor kind, e.g. "pci-bits"
    target: dict[str, JsonValue] = field(hash=False)
    label: str  # where, for people: a BDF, a sysfs path, a mount point
    before: JsonValue
    after: JsonValue
    before_text: str
    after_text: str


class Accessor(ABC):
    """How to read and write one kind of value through a host view."""

    kind: ClassVar[str]

    @abstractmethod
    def read(self, view: HostView, target: dict[str, JsonValue]) -> JsonValue:
        """The current value, in the same form `write` takes."""

    @abstractmethod
    def write(self, view: HostView, target: dict[str, JsonValue], value: JsonValue) -> None:
        """Set the value; may verify on its own and raise VerifyError."""

    def raw_path(self, target: dict[str, JsonValue]) -> str | None:
        """A whole file a fixture restore may put back verbatim, or None for in-place kinds.

        On a fixture root the file *is* the kernel, so restoring its recorded bytes is the
        exact inverse; on the live host only `write(original)` is meaningful.
        """
        return None


_ACCESSORS: dict[str, Accessor] = {}


def register(accessor: Accessor) -> Accessor:
    _ACCESSORS[accessor.kind] = accessor
    return accessor


def registered(kind: str) -> Accessor:
    """The accessor of `kind` among those registered so far.

    A knob's own kinds are: the module that defines the knob registered them when it was
    imported. Code that meets kinds it did not plan (a journal being rolled back) asks
    tune/kinds.py, which imports every module that registers one.
    """
    try:
        return _ACCESSORS[kind]
    except KeyError:
        from xputune.tune.errors import JournalError

        raise JournalError(f"journal names an unknown change kind {kind!r}") from None
