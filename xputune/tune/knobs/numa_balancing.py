"""numa.balancing: the kernel's automatic NUMA balancing (/proc/sys/kernel/numa_balancing).

Balancing unmaps pages to sample their access pattern and migrates them between nodes. The host
KV buffer is deliberately placed (bound to the card's node, or interleaved when TP-shared) and
pinned for DMA; the sampling faults and migration attempts only cost CPU and latency there.
"""

from __future__ import annotations

from typing import Any

from xputune.errors import UnsupportedError
from xputune.host import HostView
from xputune.host.values import parse_int
from xputune.tune.errors import ProfileError, VerifyError
from xputune.tune.knobs.base import DRIFT, OK, Knob, Row, TuneContext, Want, expected_text
from xputune.tune.steps import Accessor, Change, register

PATH = "/proc/sys/kernel/numa_balancing"
NAMES = {0: "off", 1: "on", 2: "tiering"}
_ALIASES: dict[Any, int] = {
    "off": 0,
    "on": 1,
    "tiering": 2,
    "0": 0,
    "1": 1,
    "2": 2,
}


class IntAccessor(Accessor):
    """A /proc/sys integer; the kernel prints it with a trailing newline."""

    kind = "sysctl-int"

    def read(self, view: HostView, target: dict[str, Any]) -> int:
        path = target["path"]
        return parse_int(view.read_text(path), path)

    def write(self, view: HostView, target: dict[str, Any], value: Any) -> None:
        path = target["path"]
        view.write_bytes(path, f"{int(value)}\n".encode())
        got = self.read(view, target)
        if got != value:
            raise VerifyError(f"{path}: wrote {value}, read back {got}")

    def raw_path(self, target: dict[str, Any]) -> str | None:
        return target["path"]


register(IntAccessor())


def describe(value: Any) -> str:
    return NAMES.get(value, str(value)) if isinstance(value, int) else str(value)


class NumaBalancing(Knob):
    name = "numa.balancing"
    summary = "automatic NUMA page migration (off: do not move the pinned host KV buffer)"

    def parse(self, raw: Any, where: str) -> int:
        if isinstance(raw, bool):  # YAML reads bare on/off as booleans
            return int(raw)
        key = str(raw).lower() if isinstance(raw, str | int) else None
        if key not in _ALIASES:
            raise ProfileError(f"{where}: {raw!r} is not a numa.balancing value (off, on, tiering)")
        return _ALIASES[key]

    def describe(self, value: Any) -> str:
        return describe(value)

    def read(self, ctx: TuneContext) -> int | None:
        if not ctx.view.exists(PATH):
            return None
        return IntAccessor().read(ctx.view, {"path": PATH})

    def check(self, ctx: TuneContext, want: Want) -> list[Row]:
        actual = self.read(ctx)
        expected = expected_text(want, describe)
        if actual is None:
            verdict = OK if want.holds(0) else DRIFT
            fix = "" if verdict == OK else "kernel built without NUMA balancing"
            return [Row(self.name, PATH, expected, "absent (off)", verdict, fix, want.severity)]
        verdict = OK if want.holds(actual) else DRIFT
        fix = "" if verdict == OK else f"sysctl -w kernel.numa_balancing={want.value}"
        return [Row(self.name, PATH, expected, describe(actual), verdict, fix, want.severity)]

    def plan(self, ctx: TuneContext, want: Want) -> list[Change]:
        actual = self.read(ctx)
        if actual is None:
            if want.holds(0):
                return []
            raise UnsupportedError(f"{self.name}: {PATH} does not exist (kernel built without it)")
        if want.holds(actual):
            return []
        return [
            Change(
                self.name,
                IntAccessor.kind,
                {"path": PATH},
                PATH,
                actual,
                want.value,
                describe(actual),
                describe(want.value),
            )
        ]
