"""Man pages generated from the command tables (through typer's view of them, cli/helpgen.py),
so they never drift from --help; EXIT STATUS and ENVIRONMENT come from cli/exits.py and
cli/environment.py.

`python -m xputune.cli.manpages man/` rewrites the pages; a test fails when man/ is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from xputune import __version__
from xputune.cli.helptext import summary

DATE = "2026"  # fixed so that regenerating gives identical bytes


def _esc(text: str) -> str:
    """roff-escape text; indented lines (examples) stay as they are, blank lines part paragraphs."""
    lines: list[str] = []
    verbatim = False
    for line in text.replace("\\", "\\e").splitlines():
        indented = line.startswith((" ", "\t")) and line.strip()
        if indented and not verbatim:
            lines.append(".nf")
            verbatim = True
        elif not indented and verbatim:
            lines.append(".fi")
            verbatim = False
        stripped = line.strip()
        if not stripped:
            lines.append(".PP")
            continue
        lines.append("\\&" + stripped if stripped.startswith((".", "'")) else stripped)
    if verbatim:
        lines.append(".fi")
    return "\n".join(lines)


def _walk(command, path: list[str]):
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if not getattr(sub, "hidden", False):
            yield from _walk(sub, [*path, name])


def _page(path: list[str], command) -> str:
    title = "-".join(path)
    help_text = (command.help or "").strip()
    out = [
        f'.TH "{title.upper()}" 1 "{DATE}" "xputune {__version__}" "xputune manual"',
        ".SH NAME",
        f"{title} \\- {_esc(summary(help_text))}",
        ".SH SYNOPSIS",
        f".B {' '.join(path)}",
        "[\\fIOPTIONS\\fR]" + (" \\fICOMMAND\\fR" if getattr(command, "commands", None) else ""),
    ]
    for param in command.params:
        if param.param_type_name == "argument":
            out.append(f"\\fI{param.name.upper()}\\fR")
    if help_text:
        out += [".SH DESCRIPTION", _esc(help_text)]
    options = [p for p in command.params if p.param_type_name == "option" and not p.hidden]
    if options:
        out.append(".SH OPTIONS")
        for param in options:
            names = ", ".join(param.opts + list(param.secondary_opts))
            out += [".TP", f"\\fB{_esc(names)}\\fR", _esc(param.help or "")]
    subs = sorted(getattr(command, "commands", {}).items())
    if subs:
        out.append(".SH COMMANDS")
        for name, sub in subs:
            first = (sub.help or "").strip().splitlines()
            out += [".TP", f"\\fB{name}\\fR", _esc(first[0] if first else "")]
    out += _status_and_environment(tuple(path[1:]))
    out += [".SH SEE ALSO", "xputune(1)" if len(path) > 1 else "lstopo(1), nvidia-smi(1)"]
    return "\n".join(out) + "\n"


def _status_and_environment(words: tuple[str, ...]) -> list[str]:
    """EXIT STATUS and ENVIRONMENT of a command (of the whole tool for xputune(1))."""
    from xputune.cli import environment, exits, registry

    if words in registry.COMMANDS:
        codes = exits.statuses(registry.load(words).exits)
        variables = environment.for_command(words)
    elif not words:
        codes = list(exits.MEANINGS.items())
        variables = [(name, what) for name, (what, _) in environment.VARIABLES.items()]
    else:  # a group: its commands' pages say it
        return []
    out = [".SH EXIT STATUS"]
    for code, meaning in codes:
        out += [".TP", f"\\fB{code}\\fR", _esc(meaning)]
    if variables:
        out.append(".SH ENVIRONMENT")
        for name, what in variables:
            out += [".TP", f"\\fB{name}\\fR", _esc(what)]
    return out


def render_all() -> dict[str, str]:
    """File name -> page text for xputune and every subcommand."""
    from xputune.cli.helpgen import application

    root = typer.main.get_command(application())
    return {f"{'-'.join(path)}.1": _page(path, cmd) for path, cmd in _walk(root, ["xputune"])}


def write(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pages = render_all()
    for stale in folder.glob("*.1"):
        if stale.name not in pages:
            stale.unlink()
    for name, text in pages.items():
        (folder / name).write_text(text)


if __name__ == "__main__":
    write(Path(sys.argv[1] if len(sys.argv) > 1 else "man"))
