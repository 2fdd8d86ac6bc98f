"""A command's options and arguments, declared once: the table cli/parse.py runs the command
from, and cli/helptext.py draws --help and the man pages from, and cli/completion_script.py
the shell completion scripts.

Why one table and our own readers: importing typer, click and rich's help machinery costs more
than a whole probe (start-up is a product feature: docs/cli.md), so commands are parsed by
cli/parse.py, a small parser of exactly this grammar. No reader has options of its own: a flag
exists once, here, with its spelling, kind, bounds, default and help.

Kinds: "text" (any string), "path" and "name" (strings that may not be empty: an unset shell
variable must not silently mean "not given"), "int" and "float" (bounded on both sides, so a
typo, nan, inf or 5000 digits is one usage line), "flag" (no value), "choice" (one of
`choices`). Nothing here imports rich.
"""

from __future__ import annotations

from collections.abc import Callable

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: start-up time
if TYPE_CHECKING:
    from typing import Any

KINDS = ("text", "path", "name", "int", "float", "flag", "choice")


class Opt:
    """One option: where its value goes, how it is spelled, what it takes.

    A plain class with slots: a dataclass (and the inspect module it imports) or a NamedTuple
    (built by exec) costs a probe several milliseconds of start-up; this costs none.
    """

    __slots__ = ("cast", "choices", "complete", "default", "dest", "help", "kind", "max",
                 "metavar", "min", "multiple", "names", "negative", "required")  # fmt: skip

    def __init__(
        self,
        dest: str,  # the runner's keyword argument
        names: tuple[str, ...],  # the long name first, then aliases (-f)
        help: str,
        kind: str = "text",
        default: Any = None,
        choices: tuple[str, ...] = (),
        multiple: bool = False,  # repeatable; the runner gets a list (empty when not given)
        min: float | None = None,  # int and float: inclusive bounds, both required
        max: float | None = None,
        metavar: str | None = None,
        complete: str | None = None,  # a completer's name in cli/completion.py
        cast: Callable[[str], Any] | None = None,  # a choice's value as the runner takes it
        negative: str | None = None,  # a flag's "off" spelling (--no-ido): the value is False
        required: bool = False,
    ) -> None:
        self.dest, self.names, self.help, self.kind = dest, names, help, kind
        self.default, self.choices, self.multiple = default, choices, multiple
        self.min, self.max, self.metavar, self.complete = min, max, metavar, complete
        self.cast, self.negative, self.required = cast, negative, required

    def __repr__(self) -> str:
        return f"Opt({self.dest!r}, {self.names!r})"

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
        fields = {name: getattr(self, name) for name in self.__slots__}
        return Opt(**{**fields, **changes})


def check_opt(opt: Opt) -> None:
    """A table that cannot work is a bug: refuse it where it is declared."""
    if opt.kind not in KINDS:
        raise ValueError(f"{opt.dest}: unknown kind {opt.kind!r}")
    if opt.kind in ("int", "float") and (opt.min is None or opt.max is None):
        raise ValueError(f"{opt.dest}: a number option needs both bounds")
    if opt.kind == "choice" and not opt.choices:
        raise ValueError(f"{opt.dest}: a choice option needs its choices")


class Arg:
    """A positional argument."""

    __slots__ = ("complete", "dest", "help", "kind", "metavar", "multiple", "required")

    def __init__(
        self,
        dest: str,
        metavar: str,
        help: str,
        kind: str = "path",
        required: bool = True,
        multiple: bool = False,  # takes every remaining positional (FILES...)
        complete: str | None = None,
    ) -> None:
        self.dest, self.metavar, self.help, self.kind = dest, metavar, help, kind
        self.required, self.multiple, self.complete = required, multiple, complete


class Command:
    """A command: its words, its table, the function that does the work, its exit codes."""

    __slots__ = ("all_options", "args", "exits", "options", "passthrough",
                 "passthrough_metavar", "runner", "words")  # fmt: skip

    def __init__(
        self,
        words: tuple[str, ...],  # ("launch", "sglang")
        runner: str,  # "module:function"; the function's docstring is the command's help
        options: tuple[Opt, ...] = (),
        args: tuple[Arg, ...] = (),
        passthrough: str | None = None,  # takes what follows `--` (launch: SGLang's arguments)
        passthrough_metavar: str = "ARGS",
        exits: tuple[int, ...] = (),  # its own statuses (cli/exits.py) beside exits.ALWAYS
    ) -> None:
        self.words = words
        self.runner = runner
        self.options = options
        self.args = args
        self.passthrough = passthrough
        self.passthrough_metavar = passthrough_metavar
        self.exits = exits
        self.all_options = (*options, *COMMON)
        seen: set[str] = set()
        for opt in self.all_options:
            check_opt(opt)
            for name in (*opt.names, *((opt.negative,) if opt.negative else ())):
                if name in seen:
                    raise ValueError(f"{' '.join(words)}: {name} declared twice")
                seen.add(name)

    @property
    def path(self) -> str:
        return "xputune " + " ".join(self.words)


class Request:
    """One command line, parsed: each option and argument of the command's table as the
    attribute its `dest` names, holding the value the runner works from (cli/parse.py). The
    runner receives this, so its options are listed once, in the table, and not again in its
    signature; a runner that must change a value keeps a local of its own."""

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, Any]) -> None:
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"this command has no option {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a parsed command line is read, not changed")

    def __repr__(self) -> str:
        return f"Request({self._values!r})"


QUIET = Opt(
    "quiet", ("--quiet", "-q"), "Print only the result and errors: no notes, warnings or "
    "progress.", kind="flag", default=False,
)  # fmt: skip
VERBOSE = Opt(
    "verbose", ("--verbose", "-v"), "Also print, on stderr when the command ends, the host "
    "paths, files and tools it consulted, each tool's time and the whole command's; no warning "
    "list is cut short.", kind="flag", default=False,
)  # fmt: skip
#: Options every command takes; the parser sets the output's verbosity from them.
COMMON = (QUIET, VERBOSE)
