"""The man pages are current, and say what --help says: each is parsed back from its roff and
compared with the --help of its command, section by section and option by option (value
names, bounds, defaults, repeatable, required), and with the tool's page list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from xputune.cli import registry
from xputune.cli.entry import main
from xputune.cli.manpages import file_name, render_all

MAN = Path(__file__).resolve().parents[2] / "man"
PAGES = render_all()
WORDS = [(), *((g,) for g in registry.GROUPS), *registry.COMMANDS]


def test_man_pages_match_the_cli() -> None:
    on_disk = {p.name: p.read_text() for p in MAN.glob("*.1")}
    stale = sorted(n for n in PAGES if on_disk.get(n) != PAGES[n])
    extra = sorted(set(on_disk) - set(PAGES))
    assert not stale and not extra, (
        f"man/ is out of date (stale: {stale}, extra: {extra}); "
        "run: python -m xputune.cli.manpages man"
    )


def _plain(roff: str) -> str:
    text = re.sub(r"\\f[BIR]", "", roff).replace("\\-", "-").replace("\\&", "")
    return " ".join(text.replace("\\e", "\\").split())


def man_sections(page: str) -> dict[str, dict[str, str]]:
    """Each .SH section of `page` that is a list (.TP items): term -> text, as plain text."""
    sections: dict[str, dict[str, str]] = {}
    for chunk in page.split("\n.SH ")[1:]:
        title, _, body = chunk.partition("\n")
        items = body.split(".TP\n")[1:]
        if not items:
            continue
        rows = {}
        for item in items:
            term, _, text = item.partition("\n")
            text = text.split("\n.PP\n")[0]  # a page's closing line is not the last item's
            rows[_plain(term)] = _plain(text)
        sections[title] = rows
    return sections


def help_sections(text: str) -> dict[str, dict[str, str]]:
    """Each titled list of --help (at a width where nothing wraps): term -> text."""
    sections: dict[str, dict[str, str]] = {}
    for block in text.split("\n\n"):
        title, _, body = block.partition(":\n")
        if not body or not title[:1].isupper() or "\n" in title:
            continue
        rows: dict[str, str] = {}
        term = ""
        for line in body.splitlines():
            if line.startswith("  ") and not line.startswith("   "):
                term, _, said = line.strip().partition("  ")
                rows[term] = said.strip()
            elif term:  # a long term's text, on the line below it
                rows[term] = (rows[term] + " " + line.strip()).strip()
        sections[title.upper()] = {k: " ".join(v.split()) for k, v in rows.items()}
    return sections


@pytest.mark.parametrize("words", WORDS, ids=[" ".join(w) or "xputune" for w in WORDS])
def test_each_page_says_what_help_says(words, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    assert main([*words, "--help"]) == 0
    shown = capsys.readouterr().out
    page = PAGES[f"{file_name(words)}.1"]
    man, help_ = man_sections(page), help_sections(shown)
    assert set(man) == set(help_)
    assert ("EXIT STATUS" in man) == (words not in [(g,) for g in registry.GROUPS])
    for title, rows in help_.items():
        assert man[title] == rows, title  # every option, its value name, bounds and default
    name = re.search(r"\.SH NAME\n(.*)\n", page)[1]
    first = shown.split("\n\n")[1]
    assert _plain(name).split(" - ", 1)[1] == " ".join(first.split())  # whole, not cut


def test_the_tool_page_lists_every_page() -> None:
    see_also = _plain(PAGES["xputune.1"].split(".SH SEE ALSO\n")[1])
    for name in PAGES:
        if name != "xputune.1":
            assert f"{name[:-2]}(1)" in see_also
    for name, page in PAGES.items():
        refs = re.findall(r"([a-z0-9-]+)\(1\)", _plain(page.split(".SH SEE ALSO\n")[1]))
        assert all(f"{ref}.1" in PAGES for ref in refs if ref.startswith("xputune")), name


def test_bounds_defaults_and_value_names_reach_the_page() -> None:
    page = man_sections(PAGES["xputune-plan.1"])["OPTIONS"]
    tp = next(text for term, text in page.items() if term.startswith("--tp"))
    assert re.search(r"\[\d+\.\.\d+", tp), tp
    assert "-f, --format table|json|yaml" in page
    assert page["-f, --format table|json|yaml"].endswith("[default: table]")
