"""Run the plain calls of probe, check, plan and `launch sglang --dry-run` without typer.

Start-up is a product feature (DESIGN: probe as fast as `lstopo --input`; plan, check and
launch --dry-run within 2x of it). Importing typer (click, its models, inspect) and rich's help
machinery costs more than the whole probe, so a call made only of a command's own options,
spelled the usual way, is parsed here from a static table of that command's options and handed
to the same runner function the typer command calls: one implementation, two ways in.

This parser takes only the happy path and declines (returns None, typer's turn) on anything
else: an unknown option, --help or -h, a missing value, a value that does not convert cleanly
or is out of bounds, an option given twice that is not repeatable, a positional argument, a
value starting with "-", `--opt=value` on a short option or a flag. typer then runs the call as
it always did and words any error. Once the whole call parsed, each option's check (the
callback typer runs, cli/checks.py) runs on its value, in the order typer runs them (first
given first), and may refuse it with one line. tests/cli/test_fastpath.py keeps every table
equal to what typer registers and checks that both ways in print the same bytes.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from xputune.cli.checks import given

_DIGITS = re.compile(r"[0-9]{1,18}")
_DECIMAL = re.compile(r"(0|[1-9][0-9]{0,14})(\.[0-9]{1,15})?")


@dataclass(frozen=True)
class Opt:
    """One option as typer declares it: parameter name, spellings, value type, default."""

    dest: str
    names: tuple[str, ...]  # the long name first, then aliases (-f)
    kind: type = str  # str, int, float, Path, bool (a flag) or an Enum (its values: choices)
    default: Any = None
    multiple: bool = False  # repeatable; the values come as a list
    min: float | None = None  # for int and float
    max: float | None = None  # for int and float
    check: Callable[[Any, Any, Any], Any] | None = None  # typer's callback (cli/checks.py)

    @property
    def opts(self) -> tuple[str, ...]:
        """The spellings, as click names them (for the checks' messages)."""
        return self.names


@dataclass(frozen=True)
class Spec:
    """A command's fast-path table: its words, options and the runner that does the work."""

    words: tuple[str, ...]  # ("launch", "sglang")
    options: tuple[Opt, ...]
    runner: str  # the runner function's name in the module holding this Spec
    passthrough: str | None = None  # parameter taking what follows `--` (launch's SGLang args)
    needs: str | None = None  # a flag that must be given for the fast path (launch: dry_run)


# Options every command shares (cli/common.py); these tables are compared with typer's.
ROOT = Opt("root", ("--root",), check=given)
EXAMPLE = Opt("example", ("--example",), check=given)


def format_opt() -> Opt:
    """--format/-f as common.FormatOpt declares it (a function: output imports lazily)."""
    from xputune.cli.output import Format

    return Opt("fmt", ("--format", "-f"), Format, Format.table)


# Command word -> module holding its SPEC and runner.
RUNNERS = {
    "probe": "xputune.cli.probe_run",
    "check": "xputune.cli.check_run",
    "plan": "xputune.cli.plan_run",
    "launch": "xputune.cli.launch_run",
}


def _convert(opt: Opt, text: str) -> Any:
    """The value typer would give for `text`, or ValueError where typer might judge otherwise."""
    if opt.kind is str:
        return text
    if opt.kind is int or opt.kind is float:
        if not (_DIGITS if opt.kind is int else _DECIMAL).fullmatch(text):
            raise ValueError(text)
        number = opt.kind(text)
        if opt.min is not None and number < opt.min:
            raise ValueError(text)
        if opt.max is not None and number > opt.max:
            raise ValueError(text)
        return number
    if opt.kind is Path:
        if not text:
            raise ValueError(text)
        return Path(text)
    if issubclass(opt.kind, Enum):
        return opt.kind(text)  # ValueError for anything but an exact value
    raise ValueError(text)


def parse(spec: Spec, args: Sequence[str]) -> dict[str, Any] | None:
    """The runner's keyword arguments for `args` (after the command words), or None for typer.

    XputuneError when a check refuses a value (as typer would, with the same line).
    """
    by_name = {name: opt for opt in spec.options for name in opt.names}
    values: dict[str, Any] = {opt.dest: opt.default for opt in spec.options}
    seen: dict[str, None] = {}  # the options given, in order
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" and spec.passthrough:
            rest = list(args[i + 1 :])
            break
        name, value, inline = arg, "", False
        if arg.startswith("--") and "=" in arg:
            name, _, value = arg.partition("=")
            inline = True
        opt = by_name.get(name)
        if opt is None or (opt.dest in seen and not opt.multiple):
            return None
        seen[opt.dest] = None
        i += 1
        if opt.kind is bool:
            if inline:
                return None
            values[opt.dest] = True
            continue
        if not inline:
            if i >= len(args) or args[i].startswith("-"):
                return None
            value = args[i]
            i += 1
        try:
            converted = _convert(opt, value)
        except ValueError:
            return None
        if opt.multiple:
            values[opt.dest] = [*(values[opt.dest] or ()), converted]
        else:
            values[opt.dest] = converted
    if spec.needs and not values[spec.needs]:
        return None
    for dest in seen:  # typer's order: the options given, first given first
        opt = next(o for o in spec.options if o.dest == dest)
        if opt.check is not None:
            values[dest] = opt.check(None, opt, values[dest])
    if spec.passthrough:
        values[spec.passthrough] = rest
    return values


def spec_for(argv: Sequence[str]) -> tuple[Spec, Any] | None:
    """(the command's table, its runner module) when argv names a command with a fast path."""
    if not argv or argv[0] not in RUNNERS or os.environ.get("XPUTUNE_NO_FASTPATH"):
        return None
    module = importlib.import_module(RUNNERS[argv[0]])
    spec: Spec = module.SPEC
    if tuple(argv[: len(spec.words)]) != spec.words:
        return None
    return spec, module


def parse_argv(argv: Sequence[str]) -> tuple[Spec, dict[str, Any]] | None:
    """(table, runner keyword arguments) when argv can take the fast path, else None."""
    found = spec_for(argv)
    if found is None:
        return None
    spec, _ = found
    values = parse(spec, argv[len(spec.words) :])
    return None if values is None else (spec, values)


def run(argv: Sequence[str]) -> int | None:
    """Run argv on the fast path and return its exit code; None means "use typer"."""
    found = spec_for(argv)
    if found is None:
        return None
    spec, module = found
    values = parse(spec, argv[len(spec.words) :])
    if values is None:
        return None
    code = getattr(module, spec.runner)(**values)
    return code if isinstance(code, int) else 0
