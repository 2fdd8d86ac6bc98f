"""A command's options and arguments, declared once: the table cli/parse.py runs the command
from and cli/helpgen.py draws typer's --help, shell completion and the man pages from.

Why one table and two readers: importing typer, click and rich's help machinery costs more
than a whole probe (start-up is a product feature: docs/cli.md), so commands are parsed by
cli/parse.py, a small parser of exactly this grammar, and typer is imported only to explain a
command (--help, completion, man pages). Neither reader has options of its own: a flag exists
once, here, with its spelling, kind, bounds, default and help.

Kinds: "text" (any string), "path" and "name" (strings that may not be empty: an unset shell
variable must not silently mean "not given"), "int" and "float" (bounded on both sides, so a
typo, nan, inf or 5000 digits is one usage line), "flag" (no value), "choice" (one of
`choices`). Nothing here imports typer, click or rich.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

KINDS = ("text", "path", "name", "int", "float", "flag", "choice")


@dataclass(frozen=True)
class Opt:
    """One option: where its value goes, how it is spelled, what it takes."""

    dest: str  # the runner's keyword argument
    names: tuple[str, ...]  # the long name first, then aliases (-f)
    help: str
    kind: str = "text"
    default: Any = None
    choices: tuple[str, ...] = ()
    multiple: bool = False  # repeatable; the runner gets a list (empty when not given)
    min: float | None = None  # int and float: inclusive bounds, both required
    max: float | None = None
    metavar: str | None = None
    complete: str | None = None  # a completer's name in cli/completion.py
    cast: Callable[[str], Any] | None = None  # a choice's value as the runner takes it (Format)
    negative: str | None = None  # a flag's "off" spelling (--no-ido): the value is then False
    required: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.dest}: unknown kind {self.kind!r}")
        if self.kind in ("int", "float") and (self.min is None or self.max is None):
            raise ValueError(f"{self.dest}: a number option needs both bounds")
        if self.kind == "choice" and not self.choices:
            raise ValueError(f"{self.dest}: a choice option needs its choices")

    @property
    def flag(self) -> bool:
        return self.kind == "flag"

    @property
    def shown(self) -> str:
        """The spelling messages use: the long name."""
        return self.names[0]

    def placeholder(self) -> str:
        """What the value is called in help and messages."""
        if self.metavar:
            return self.metavar
        if self.kind == "choice":
            return "|".join(self.choices)
        return {"int": "INTEGER", "float": "NUMBER", "path": "PATH", "name": "NAME"}.get(
            self.kind, "TEXT"
        )

    def but(self, **changes: Any) -> Opt:
        """The same option with some fields changed (a shared option read another way)."""
        return replace(self, **changes)


@dataclass(frozen=True)
class Arg:
    """A positional argument."""

    dest: str
    metavar: str
    help: str
    kind: str = "path"
    required: bool = True
    multiple: bool = False  # takes every remaining positional (FILES...)
    complete: str | None = None


@dataclass(frozen=True)
class Command:
    """A command: its words, its table, the function that does the work, its exit codes."""

    words: tuple[str, ...]  # ("launch", "sglang")
    runner: str  # "module:function"; the function's docstring is the command's help
    options: tuple[Opt, ...] = ()
    args: tuple[Arg, ...] = ()
    passthrough: str | None = None  # takes what follows `--` (launch: SGLang's arguments)
    passthrough_metavar: str = "ARGS"
    exits: tuple[int, ...] = ()  # its own statuses (cli/exits.py) beside exits.ALWAYS
    common: bool = True  # takes --quiet and --verbose (every command does)
    all_options: tuple[Opt, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        opts = (*self.options, *(COMMON if self.common else ()))
        seen: set[str] = set()
        for opt in opts:
            for name in (*opt.names, *((opt.negative,) if opt.negative else ())):
                if name in seen:
                    raise ValueError(f"{' '.join(self.words)}: {name} declared twice")
                seen.add(name)
        object.__setattr__(self, "all_options", opts)

    @property
    def path(self) -> str:
        return "xputune " + " ".join(self.words)


QUIET = Opt(
    "quiet", ("--quiet", "-q"), "Print only the result and errors: no notes, warnings or "
    "progress.", kind="flag", default=False,
)  # fmt: skip
VERBOSE = Opt(
    "verbose", ("--verbose", "-v"), "Also print details: every warning in full, the files and "
    "tools consulted, timings.", kind="flag", default=False,
)  # fmt: skip
#: Options every command takes; the parser sets the output's verbosity from them.
COMMON = (QUIET, VERBOSE)
