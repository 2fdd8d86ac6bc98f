"""--help drawn from the command tables, for a terminal of any width.

Written here rather than by typer's or click's formatters because those cut what an operator
types back at 80 columns: rich's panels truncate long choices and defaults with "…", and
click's wrapper breaks words at hyphens (`--hicache-write-` / `policy`). Here a line breaks
only at spaces, an option's spelling and its value are never split, and the examples of a
docstring (its indented lines) are printed as written: each is a complete shell command,
continued with ` \\` where it is long. The help ends with the command's exit statuses and the
environment variables it reads (cli/exits.py, cli/environment.py).
"""

from __future__ import annotations

import inspect
import textwrap

from xputune import __version__
from xputune.cli import environment, exits, registry
from xputune.cli.output import columns
from xputune.cli.spec import Command, Opt

INDENT = 2
TERM_MAX = 32  # an option's column is at most this wide; longer ones put the help below


def _wrap(text: str, room: int, first: str = "", rest: str = "") -> list[str]:
    return textwrap.wrap(
        text, room, initial_indent=first, subsequent_indent=rest,
        break_on_hyphens=False, break_long_words=False,
    ) or [first.rstrip()]  # fmt: skip


def _prose(doc: str, room: int) -> list[str]:
    """A docstring: paragraphs rewrapped, indented lines (examples) kept as they are."""
    out: list[str] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            out.extend(_wrap(" ".join(paragraph), room, " " * INDENT, " " * INDENT))
            paragraph.clear()

    for line in doc.splitlines():
        if not line.strip():
            flush()
            if out and out[-1] != "":
                out.append("")
        elif line.startswith((" ", "\t")):
            flush()
            out.append(" " * INDENT + line.rstrip())
        else:
            paragraph.append(line.strip())
    flush()
    while out and out[-1] == "":
        out.pop()
    return out


def _term(opt: Opt) -> str:
    names = ", ".join(sorted(opt.names, key=len)) if len(opt.names) > 1 else opt.names[0]
    if opt.negative:
        names += f" / {opt.negative}"
    return names if opt.flag else f"{names} {opt.placeholder()}"


def _details(opt: Opt) -> str:
    extra = []
    if opt.kind in ("int", "float"):
        extra.append(f"{_num(opt.min)}..{_num(opt.max)}")
    if opt.default not in (None, False, []) and not opt.flag:
        extra.append(f"default: {opt.default}")
    if opt.multiple:
        extra.append("repeatable")
    if opt.required:
        extra.append("required")
    return opt.help + (f" [{'; '.join(extra)}]" if extra else "")


def _num(x: float | None) -> str:
    if x is None:
        return "?"
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _table(rows: list[tuple[str, str]], room: int) -> list[str]:
    """Two columns: the term never broken, the text wrapped beside it (or below a long term)."""
    column = min(TERM_MAX, max((len(t) for t, _ in rows), default=0)) + INDENT + 2
    out = []
    for term, text in rows:
        head = " " * INDENT + term
        if len(head) + 2 <= column:
            lines = _wrap(text, room, " " * column, " " * column)
            out.append(head.ljust(column) + lines[0][column:])
            out.extend(lines[1:])
        else:
            out.append(head)
            out.extend(_wrap(text, room, " " * column, " " * column))
    return out


def _usage(cmd: Command) -> str:
    args = " ".join(
        (a.metavar if a.required else f"[{a.metavar}]") for a in cmd.args
    )  # fmt: skip
    tail = f" -- {cmd.passthrough_metavar}" if cmd.passthrough else ""
    return f"{cmd.path} [OPTIONS]{' ' + args if args else ''}{tail}"


def _doc(cmd: Command) -> str:
    import importlib

    module, _, name = cmd.runner.partition(":")
    return inspect.getdoc(getattr(importlib.import_module(module), name)) or ""


class Page:
    """One command's (or group's, or the tool's) help, as data: what --help prints and what its
    man page says (cli/manpages.py), so the two cannot drift apart."""

    __slots__ = ("doc", "footer", "name", "sections", "usage")

    def __init__(
        self,
        name: str,  # "xputune check"
        usage: str,  # after "Usage: "
        doc: str,  # the help text: paragraphs, indented examples
        sections: list[tuple[str, list[tuple[str, str]]]],  # ("Options", [(term, text)])
        footer: str = "",
    ) -> None:
        self.name, self.usage, self.doc, self.sections, self.footer = (
            name, usage, doc, sections, footer,
        )  # fmt: skip

    @property
    def summary(self) -> str:
        return summary(self.doc)


HELP_ROW = ("-h, --help", "Show this help and exit.")


def command_page(cmd: Command) -> Page:
    sections: list[tuple[str, list[tuple[str, str]]]] = []
    if cmd.args:
        sections.append(("Arguments", [(a.metavar, a.help) for a in cmd.args]))
    options = [(_term(o), _details(o)) for o in cmd.all_options] + [HELP_ROW]
    sections.append(("Options", options))
    sections.append(("Exit status", [(str(c), m) for c, m in exits.statuses(cmd.exits)]))
    variables = environment.for_command(cmd.words)
    if variables:
        sections.append(("Environment", list(variables)))
    return Page(cmd.path, _usage(cmd), _doc(cmd), sections)


def group_page(group: str) -> Page:
    rows = [(w[1], summary_of(registry.load(w))) for w in registry.COMMANDS if w[0] == group]
    return Page(
        f"xputune {group}",
        f"xputune {group} COMMAND [OPTIONS]",
        registry.GROUPS[group],
        [("Commands", rows)],
        f"See 'xputune {group} COMMAND --help' for a command's options.",
    )


def render(page: Page, room: int) -> str:
    """The page as --help prints it, wrapped for `room` columns."""
    out = [f"Usage: {page.usage}", "", *_prose(page.doc, room)]
    for title, rows in page.sections:
        out += ["", f"{title}:", *_table(rows, room)]
    if page.footer:
        out += ["", page.footer]
    return "\n".join(out) + "\n"


def command_help(cmd: Command) -> str:
    return render(command_page(cmd), columns())


def summary(doc: str) -> str:
    """A help text's first paragraph on one line, however many lines it was wrapped over."""
    return " ".join(doc.strip().split("\n\n")[0].split())


def summary_of(cmd: Command) -> str:
    return summary(_doc(cmd))


def group_help(group: str) -> str:
    return render(group_page(group), columns())


TOP = (
    "Probe, tune, plan and launch tiered KV caching (SGLang HiCache) on accelerator hosts.\n\n"
    "Every command that reads the machine takes --root (a recording or an extracted tree) or "
    "--example NAME, so it runs the same on a laptop as on the box. Every command takes "
    "--quiet and --verbose, and ends with one of the exit statuses below."
)
TOP_OPTIONS = [
    ("-V, --version", f"Print the version ({__version__}) and exit."),
    HELP_ROW,
    ("--install-completion [bash|zsh|fish]", "Install shell completion for this shell (or the "
     "one named): a script made from the command tables, run again after an upgrade."),
    ("--show-completion [bash|zsh|fish]", "Print the completion script, to install it "
     "yourself."),
]  # fmt: skip


def top_page() -> Page:
    rows: list[tuple[str, str]] = []
    seen: set[str] = set()
    for words in registry.COMMANDS:
        if len(words) == 1:
            rows.append((words[0], summary_of(registry.load(words))))
        elif words[0] not in seen:
            seen.add(words[0])
            rows.append((words[0], registry.GROUPS[words[0]]))
    return Page(
        "xputune",
        "xputune [--version] COMMAND [OPTIONS] [ARGS]...",
        TOP,
        [
            ("Commands", rows),
            ("Options", TOP_OPTIONS),
            ("Exit status", [(str(c), m) for c, m in exits.MEANINGS.items()]),
            ("Environment", [(n, w) for n, (w, _) in environment.VARIABLES.items()]),
        ],
        "See 'xputune COMMAND --help' for a command's options.",
    )


def top_help() -> str:
    return render(top_page(), columns())
