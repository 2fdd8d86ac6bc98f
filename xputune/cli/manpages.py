"""Man pages drawn from the same pages as --help (cli/helptext.py: Page), so an option's value
name, bounds, default and the rest of what --help says are in its man page too, word for word.

`python -m xputune.cli.manpages man/` rewrites the pages; tests/cli/test_manpages.py fails when
man/ is stale, and compares each page with --help option by option.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from xputune import __version__
from xputune.cli import helptext, registry
from xputune.cli.helptext import Page

DATE = "2026"  # fixed so that regenerating gives identical bytes
#: Pages of other tools an operator reads beside xputune(1).
OTHERS = ("lstopo(1)", "nvidia-smi(1)", "numactl(8)", "tuned-adm(8)")
_MENTION = re.compile(r"\bxputune ([a-z0-9-]+)(?: ([a-z0-9-]+))?")


def _esc(text: str) -> str:
    """roff-escape text; indented lines (examples) stay as they are, blank lines part paragraphs."""
    lines: list[str] = []
    verbatim = False
    for line in text.replace("\\", "\\e").replace("-", "\\-").splitlines():
        indented = line.startswith((" ", "\t")) and line.strip()
        if indented and not verbatim:
            lines += [".RS 4", ".nf"]
            verbatim = True
        elif not indented and verbatim:
            lines += [".fi", ".RE"]
            verbatim = False
        stripped = line.strip()
        if not stripped:
            lines.append(".PP")
            continue
        lines.append("\\&" + stripped if stripped.startswith((".", "'")) else stripped)
    if verbatim:
        lines += [".fi", ".RE"]
    return "\n".join(lines)


def file_name(words: tuple[str, ...]) -> str:
    return "-".join(("xputune", *words))


def _see_also(words: tuple[str, ...], page: Page) -> list[str]:
    """xputune(1) lists every command's page; a group, its commands'; a command, the tool's
    page, its group's and those of the commands its help names."""
    if not words:
        pages = [file_name(w) for w in (*((g,) for g in registry.GROUPS), *registry.COMMANDS)]
        return [f"{p}(1)" for p in pages] + list(OTHERS)
    if len(words) == 1 and words[0] in registry.GROUPS:
        subs = [w for w in registry.COMMANDS if w[0] == words[0]]
        return ["xputune(1)"] + [f"{file_name(w)}(1)" for w in subs]
    named: list[tuple[str, ...]] = [(words[0],)] if len(words) == 2 else []
    said = " ".join([page.doc, *(text for _, rows in page.sections for _, text in rows)])
    for found in _MENTION.finditer(said):
        pair = tuple(w for w in found.groups() if w)
        for size in (2, 1):
            if pair[:size] in registry.COMMANDS and pair[:size] != words:
                named.append(pair[:size])
                break
    return ["xputune(1)"] + [f"{file_name(w)}(1)" for w in dict.fromkeys(named)]


def _page(words: tuple[str, ...], page: Page) -> str:
    title = file_name(words)
    out = [
        f'.TH "{title.upper()}" 1 "{DATE}" "xputune {__version__}" "xputune manual"',
        ".nh",  # no hyphenation: an option or value is typed back as printed
        ".ad l",
        ".SH NAME",
        f"{_esc(title)} \\- {_esc(page.summary)}",
        ".SH SYNOPSIS",
        f".B {_esc(page.name)}",
        _esc(page.usage[len(page.name) :].strip()),
        ".SH DESCRIPTION",
        _esc(page.doc),
    ]
    for heading, rows in page.sections:
        out.append(f".SH {heading.upper()}")
        for term, text in rows:
            out += [".TP", f"\\fB{_esc(term)}\\fR", _esc(text)]
    if page.footer:
        out += [".PP", _esc(page.footer)]
    shown = [f"\\fB{_esc(name)}\\fR({section}" for name, section in
             (ref.split("(", 1) for ref in _see_also(words, page))]  # fmt: skip
    out += [".SH SEE ALSO", ", ".join(shown)]
    return "\n".join(out) + "\n"


def render_all() -> dict[str, str]:
    """File name -> page text for xputune, each group and every command."""
    pages = {(): helptext.top_page()}
    pages.update({(g,): helptext.group_page(g) for g in registry.GROUPS})
    pages.update({w: helptext.command_page(registry.load(w)) for w in registry.COMMANDS})
    return {f"{file_name(w)}.1": _page(w, page) for w, page in pages.items()}


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
