"""The project carries its own documentation: comments point into docs/, never outside the
repository, and what they and the docs name exists.

A maintainer who clones the repository has docs/ (the architecture, the field report's facts,
the platform facts, the benchmarks) and nothing else: no design notes beside the checkout, no
issue tracker. So a comment that says "see the design notes" or "(issue 20)" is a dead end;
this fails on each such pointer, naming the file and line.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Where the project's own text lives (code, comments, docstrings, its READMEs and data).
SCANNED = ("xputune", "tests", "kernels", "profiles", "deploy", "man", ".ci", "README.md",
           "setup.py", "pyproject.toml")  # fmt: skip
#: Third-party material kept verbatim (each folder's README names its source and licence).
THIRD_PARTY = ("tests/data", "tests/devices/data/real", "tests/fixtures/quirks")
TEXT = {".py", ".c", ".cc", ".cu", ".h", ".md", ".yaml", ".yml", ".json", ".txt", ".sh",
        ".toml", ".cfg", ".1", ""}  # fmt: skip
#: Pointers to text that is not in the repository.
OUTSIDE = [
    (re.compile(r"\bDESIGN(\.md)?\b"), "the design notes (docs/architecture.md)"),
    (re.compile(r"\bREFERENCE(\.md| section)\b"), "the reference notes (docs/platform.md)"),
    (re.compile(r"(?<![\w./-])shared/(seed|DESIGN|REFERENCE|hooks)\b"), "a folder outside"),
    (re.compile(r"\bissues? #?\d+", re.I), "an issue number: say what the code or test does"),
    (re.compile(r"\(seed \d"), "a section of the field report (docs/field-report.md)"),
]
DOC_NAME = re.compile(r"\bdocs/([\w.-]+\.md)\b")
#: The first folder of a path the docs name in backticks: the repository's or the package's.
TOP = {"xputune", "tests", "kernels", "profiles", "deploy", "man", "docs", ".ci", "host",
       "topology", "devices", "hicache", "tune", "plan", "fleet", "sglang", "launch",
       "placement", "measure", "cli", "data", "examples"}  # fmt: skip
REPO_PATH = re.compile(r"`([\w.-]+(?:/[\w.-]+)+\.(?:py|c|cc|cu|h|md|yaml|yml|json|sh|toml))`")


def _project_files() -> list[Path]:
    """Every text file of the project, links not followed (the sysfs fixtures loop)."""
    this = Path(__file__).resolve()
    out: list[Path] = []
    for name in SCANNED:
        top = ROOT / name
        if top.is_file():
            out.append(top)
            continue
        for folder, dirs, files in os.walk(top):
            rel = Path(folder).relative_to(ROOT).as_posix()
            dirs[:] = [d for d in dirs if d != "__pycache__" and f"{rel}/{d}" not in THIRD_PARTY]
            for file in files:
                path = Path(folder) / file
                if path.suffix in TEXT and not path.is_symlink() and path != this:
                    out.append(path)
    return out


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:  # a binary file with a text-like name
        return []


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def pointers_outside(files: list[Path]) -> list[str]:
    """'path:line: what: text' for every pointer to text that is not in the repository."""
    found = []
    for path in files:
        for number, line in enumerate(_lines(path), 1):
            for pattern, what in OUTSIDE:
                if pattern.search(line):
                    found.append(f"{_shown(path)}:{number}: {what}: {line.strip()}")
    return found


def missing_docs(files: list[Path]) -> list[str]:
    """'path:line: docs/NAME.md' for every docs page named that does not exist."""
    found = []
    for path in files:
        for number, line in enumerate(_lines(path), 1):
            for name in DOC_NAME.findall(line):
                if not (ROOT / "docs" / name).is_file():
                    found.append(f"{_shown(path)}:{number}: docs/{name}")
    return found


def test_the_docs_are_there() -> None:
    names = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert {"README.md", "architecture.md", "cli.md", "field-report.md", "platform.md",
            "benchmarks.md"} <= names  # fmt: skip


def test_nothing_points_outside_the_repository() -> None:
    assert pointers_outside(_project_files()) == []


def test_every_docs_page_a_file_names_exists() -> None:
    files = _project_files() + sorted((ROOT / "docs").glob("*.md"))
    assert missing_docs(files) == []


def test_every_file_the_docs_name_exists() -> None:
    """A path in backticks whose first folder is the repository's or a layer's must exist, at
    the top or inside the package (the docs say `plan/l3.py` for xputune/plan/l3.py)."""
    missing = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for path in REPO_PATH.findall(page.read_text()):
            if path.split("/")[0] in TOP and not any(
                (base / path).exists() for base in (ROOT, ROOT / "xputune")
            ):
                missing.append(f"docs/{page.name}: {path}")
    assert missing == []


def test_every_relative_link_of_the_docs_resolves() -> None:
    missing = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                missing.append(f"docs/{page.name}: {target}")
    assert missing == []


@pytest.mark.parametrize(
    ("line", "caught"),
    [
        ("# see DESIGN.md", True),
        ('"""DESIGN target: probe within 2x"""', True),
        ("facts in REFERENCE section 5", True),
        ("read shared/seed/ first", True),
        ("(issue 24, item 6)", True),
        ("issues 23 and 24", True),
        ("hit counts (seed 2.6)", True),
        ("shared/private: buffer PSS", False),  # a ratio's label, not a folder
        ("'shared/kernels was writable by others'", False),  # a cache folder's name
        ("docs/field-report.md, 2.6", False),
        ("the seed box's recording", False),  # a name docs/README.md defines
    ],
)
def test_what_counts_as_a_pointer_outside(tmp_path: Path, line: str, caught: bool) -> None:
    path = tmp_path / "module.py"
    path.write_text(f"x = 1\n{line}\n")
    found = pointers_outside([path])
    assert len(found) == caught and all(f.endswith(line) for f in found)


def test_a_missing_docs_page_is_named(tmp_path: Path) -> None:
    path = tmp_path / "module.py"
    path.write_text("# docs/cli.md says why\n# docs/no-such-page.md\n")
    assert missing_docs([path]) == [f"{path}:2: docs/no-such-page.md"]


def test_the_architecture_lists_the_layers_in_their_order() -> None:
    """docs/architecture.md's table of layers, bottom first, is tests/test_layers.py's order."""
    from tests.test_layers import LAYERS

    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("\n## Layers\n") : text.index("\nRules that keep the layers")]
    firsts = re.findall(r"^\| `([\w]+)/`", table, re.M)
    assert firsts == LAYERS
