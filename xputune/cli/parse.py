"""The command-line parser: argv and a command's table (cli/spec.py) in, the runner's keyword
arguments out, or one usage line.

The grammar is click's, the subset xputune's commands use: `--name value`, `--name=value`,
`-n value`, `-nvalue`, flags, repeated options (the last wins unless the option is
repeatable), positional arguments, and `--`: after it everything is positional, or is the
passthrough (launch sglang's SGLang arguments). Values are checked against the table: a path
or name may not be empty, a number is plain decimal notation inside its bounds (nan, inf,
1e300 and 5000 digits are out), a choice is one of its choices. Unknown options are errors,
with the nearest known spelling suggested; nothing is guessed from a prefix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from xputune.cli.spec import Command, Opt
from xputune.errors import XputuneError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: start-up time
if TYPE_CHECKING:
    from typing import Any

_INT = re.compile(r"[+-]?[0-9]{1,18}")  # a positional that is a number, not an option
_DIGITS = re.compile(r"[+-]?[0-9]+")
_SPECIAL = ("nan", "inf", "infinity")
_FLOAT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


class UsageError(XputuneError):
    """A command line the table does not accept; the message says what and where to read."""

    def __init__(self, cmd: Command | None, message: str) -> None:
        where = f" (see '{cmd.path} --help')" if cmd is not None else " (see 'xputune --help')"
        super().__init__(message + where)
        self.bare = message


def _number(cmd: Command, shown: str, text: str, kind: str, lo: float, hi: float) -> Any:
    """A number inside [lo, hi]; anything outside (nan, inf, 1e300, 5000 digits) names the
    range, anything that is not a number says so."""
    value: Any = None
    if kind == "int" and _DIGITS.fullmatch(text):
        value = int(text) if len(text) <= 19 else math.inf  # never int() 5000 digits
    elif kind == "float" and (_FLOAT.fullmatch(text) or text.lower().lstrip("+-") in _SPECIAL):
        value = float(text) if len(text) <= 400 else math.inf
    if value is None:
        what = "a whole number" if kind == "int" else "a number"
        raise UsageError(cmd, f"invalid value for '{shown}': {_quoted(text)} is not {what}")
    if not lo <= value <= hi:  # nan compares false: out of range too
        raise UsageError(
            cmd, f"invalid value for '{shown}': must be from {_bound(lo)} to {_bound(hi)}"
        )
    return value


def _bound(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _quoted(text: str) -> str:
    """A value in a message: repr, cut to 60 characters."""
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def convert(cmd: Command, opt: Opt, text: str) -> Any:
    """The value of `opt` written as `text`, or UsageError."""
    shown = opt.shown
    if opt.kind in ("path", "name") and text == "":
        how = f"give one or leave {shown} out"
        raise UsageError(cmd, f"{shown}: empty value (an unset variable?); {how}")
    if opt.kind in ("int", "float"):
        return _number(cmd, shown, text, opt.kind, opt.min, opt.max)
    if opt.kind == "choice":
        if text not in opt.choices:
            raise UsageError(
                cmd,
                f"invalid value for '{shown}': {_quoted(text)} is not one of "
                + ", ".join(opt.choices),
            )
        return opt.cast(text) if opt.cast else text
    return text


def _unknown(cmd: Command, name: str) -> UsageError:
    from difflib import get_close_matches

    known = [n for o in cmd.all_options for n in o.names if n.startswith("--")]
    near = get_close_matches(name.partition("=")[0], known, n=1, cutoff=0.75)
    hint = f"; did you mean {near[0]}?" if near else ""
    after = (
        f" (SGLang's own flags go after `--`: xputune {' '.join(cmd.words)} [OPTIONS] -- "
        f"{cmd.passthrough_metavar})"
        if cmd.passthrough
        else ""
    )
    return UsageError(cmd, f"no such option: {name.partition('=')[0]}{hint}{after}")


def parse(cmd: Command, argv: Sequence[str]) -> dict[str, Any]:
    """The keyword arguments for cmd's runner (and quiet, verbose) from argv after its words."""
    by_name = {name: opt for opt in cmd.all_options for name in opt.names}
    negatives = {opt.negative: opt for opt in cmd.all_options if opt.negative}
    values: dict[str, Any] = {
        opt.dest: ([] if opt.multiple else opt.default) for opt in cmd.all_options
    }
    positional: list[str] = []
    rest: list[str] | None = None
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            if cmd.passthrough:
                rest = args[i:]
            else:
                positional += args[i:]
            break
        if not arg.startswith("-") or arg == "-" or _INT.fullmatch(arg):
            positional.append(arg)
            continue
        name, value, inline = arg, "", False
        if arg.startswith("--"):
            if "=" in arg:
                name, _, value = arg.partition("=")
                inline = True
        elif len(arg) > 2:  # -fjson: a short option with its value attached
            name, value, inline = arg[:2], arg[2:], True
        if name in negatives and not inline:
            values[negatives[name].dest] = False
            continue
        opt = by_name.get(name)
        if opt is None:
            raise _unknown(cmd, arg)
        if opt.flag:
            if inline:
                raise UsageError(cmd, f"option '{name}' does not take a value")
            values[opt.dest] = True
            continue
        if not inline:
            if i >= len(args) or args[i] == "--" or args[i] in by_name or args[i] in negatives:
                raise UsageError(cmd, f"option '{name}' requires an argument")
            value = args[i]
            i += 1
        converted = convert(cmd, opt, value)
        if opt.multiple:
            values[opt.dest].append(converted)
        else:
            values[opt.dest] = converted
    for opt in cmd.all_options:
        if opt.required and values[opt.dest] in (None, []):
            raise UsageError(cmd, f"missing option '{opt.shown}'")
    _positionals(cmd, positional, values)
    if cmd.passthrough:
        values[cmd.passthrough] = rest if rest is not None else []
    return values


def _positionals(cmd: Command, given: list[str], values: dict[str, Any]) -> None:
    left = list(given)
    for arg in cmd.args:
        if arg.multiple:
            taken, left = left, []
        elif left:
            taken, left = [left[0]], left[1:]
        else:
            taken = []
        if arg.required and not taken:
            raise UsageError(cmd, f"missing argument '{arg.metavar}'")
        if arg.kind in ("path", "name") and "" in taken:
            raise UsageError(cmd, f"{arg.metavar.rstrip('.')}: empty value (an unset variable?); "
                             "give one")  # fmt: skip
        values[arg.dest] = taken if arg.multiple else (taken[0] if taken else None)
    if left:
        if cmd.passthrough and left[0].startswith("-"):
            raise _unknown(cmd, left[0])
        raise UsageError(cmd, f"unexpected extra argument ({left[0]})")
