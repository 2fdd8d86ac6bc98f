"""What every knob offers: read, plan, apply, verify, and a `check` row per setting.

A knob is one host setting the transfer path depends on. It turns an expectation (from a profile
or a command-line flag) into rows for `xputune check` and changes for `xputune apply`. Applying
and verifying go through the change's accessor, so apply, verify and rollback run one code path.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from xputune.host import HostView
from xputune.topology.model import Topology
from xputune.tune.steps import Change, registered

SEVERITIES = ("critical", "warn")

# Verdicts of a check row.
OK = "ok"
DRIFT = "drift"
UNSUPPORTED = "unsupported"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Want:
    """The expected value of one knob and how much it matters."""

    value: Any
    accept: tuple[Any, ...] = ()  # other values that also hold (apply sets `value`)
    severity: str = "warn"
    source: str = ""  # profile name or the flag it came from

    def holds(self, actual: Any) -> bool:
        return actual == self.value or actual in self.accept


def expected_text(want: Want, describe: Callable[[Any], str] = str) -> str:
    """The expected column: the value apply sets, then the others that also hold."""
    return " or ".join(describe(v) for v in (want.value, *want.accept))


@dataclass(frozen=True)
class Row:
    """One line of `xputune check`: a setting, what it should be, what it is, how to fix it."""

    knob: str
    target: str
    expected: str
    actual: str
    verdict: str
    fix: str
    severity: str
    note: str = ""

    @property
    def holds(self) -> bool:
        return self.verdict == OK

    def as_dict(self) -> dict[str, str]:
        return {
            "knob": self.knob,
            "target": self.target,
            "expected": self.expected,
            "actual": self.actual,
            "verdict": self.verdict,
            "severity": self.severity,
            "fix": self.fix,
            "note": self.note,
        }


@dataclass
class TuneContext:
    """What knobs read from: the host view, its topology, and the hooks for live-only actions."""

    view: HostView
    topology: Topology | None = None
    platform_registers: tuple[dict[str, Any], ...] = ()


class Knob(ABC):
    """One host setting: parse a profile value, read, plan, apply, verify."""

    name: ClassVar[str]
    summary: ClassVar[str]  # one line for `xputune profiles --knobs` and docs
    needs_topology: ClassVar[bool] = False

    @abstractmethod
    def parse(self, raw: Any, where: str) -> Any:
        """A profile or flag value in canonical form; ProfileError naming `where` when bad."""

    @abstractmethod
    def check(self, ctx: TuneContext, want: Want) -> list[Row]:
        """One row per place the setting lives (a knob can live in many: one per PCIe port)."""

    @abstractmethod
    def plan(self, ctx: TuneContext, want: Want) -> list[Change]:
        """The changes that make every row hold; [] when all already do."""

    def preflight(self, ctx: TuneContext, changes: list[Change]) -> None:  # noqa: B027
        """Refuse before anything changes when these changes cannot be made here (default: no
        extra condition)."""

    def apply(self, ctx: TuneContext, change: Change) -> None:
        registered(change.kind).write(ctx.view, change.target, change.after)

    def verify(self, ctx: TuneContext, change: Change) -> bool:
        return registered(change.kind).read(ctx.view, change.target) == change.after

    def describe(self, value: Any) -> str:
        """A value as people read it."""
        return "-" if value is None else str(value)
