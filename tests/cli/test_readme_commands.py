"""README.md's two opening commands are the project's contract with a new user and with CI."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    block = re.search(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block is not None, "README.md has no sh block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert text.index("```sh") < text.index("\n## "), "the commands must come before any section"
    assert len(_readme_commands()) == 2


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci_lines = [
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "set ", "cd ", "export "))
    ]
    assert ci_lines == [_readme_commands()[1]]
    assert "export CI=true" in (ROOT / ".ci" / "run").read_text()
