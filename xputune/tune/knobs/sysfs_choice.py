"""Knobs that live in a sysfs selector file such as "always [madvise] never".

The kernel lists every choice and brackets the current one; one writes a bare word to change it.
On a fixture root there is no kernel to do the bracketing, so the write re-brackets the file in
place (every other byte kept), which is what the kernel would then show.
"""

from __future__ import annotations

from typing import Any, ClassVar

from xputune.errors import UnsupportedError
from xputune.host import HostView
from xputune.host.values import current_choice, rebracket
from xputune.tune.errors import ProfileError, VerifyError
from xputune.tune.knobs.base import (
    DRIFT,
    OK,
    UNSUPPORTED,
    Knob,
    Row,
    TuneContext,
    Want,
    expected_text,
)
from xputune.tune.steps import Accessor, Change, register


class ChoiceAccessor(Accessor):
    """Read the bracketed word; write a bare word (live) or re-bracket the file (fixture)."""

    kind = "sysfs-choice"

    def read(self, view: HostView, target: dict[str, Any]) -> str:
        path = target["path"]
        return current_choice(view.read_text(path), path)

    def write(self, view: HostView, target: dict[str, Any], value: Any) -> None:
        path = target["path"]
        if view.live:
            view.write_bytes(path, str(value).encode())
        else:
            text = view.read_bytes(path).decode()
            view.write_bytes(path, rebracket(text, str(value), path).encode())
        got = self.read(view, target)
        if got != value:
            raise VerifyError(f"{path}: wrote {value!r}, the kernel shows {got!r}")

    def raw_path(self, target: dict[str, Any]) -> str | None:
        return target["path"]


register(ChoiceAccessor())


class ChoiceKnob(Knob):
    """A knob backed by one selector file; subclasses name the file and the valid words."""

    path: ClassVar[str]
    choices: ClassVar[tuple[str, ...]]

    def parse(self, raw: Any, where: str) -> str:
        if not isinstance(raw, str) or raw not in self.choices:
            raise ProfileError(
                f"{where}: {raw!r} is not a valid {self.name} value "
                f"(one of {', '.join(self.choices)})"
            )
        return raw

    def read(self, ctx: TuneContext) -> str | None:
        text = ctx.view.read_optional(self.path)
        return None if text is None else current_choice(text, self.path)

    def fix(self, value: str) -> str:
        return f"echo {value} > {self.path}"

    def check(self, ctx: TuneContext, want: Want) -> list[Row]:
        actual = self.read(ctx)
        if actual is None:
            verdict, shown, fix = UNSUPPORTED, "absent", "kernel built without this setting"
        else:
            verdict = OK if want.holds(actual) else DRIFT
            shown, fix = actual, "" if verdict == OK else self.fix(want.value)
        return [Row(self.name, self.path, expected_text(want), shown, verdict, fix, want.severity)]

    def plan(self, ctx: TuneContext, want: Want) -> list[Change]:
        actual = self.read(ctx)
        if actual is None:
            raise UnsupportedError(
                f"{self.name}: {self.path} does not exist (kernel built without it); "
                f"leave it out with --skip {self.name}"
            )
        if want.holds(actual):
            return []
        return [
            Change(
                self.name,
                ChoiceAccessor.kind,
                {"path": self.path},
                self.path,
                actual,
                want.value,
                actual,
                want.value,
            )
        ]
