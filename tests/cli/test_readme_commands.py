"""README.md's commands are the project's contract with a new user and with CI: the two opening
commands (install and probe; install and test, which CI runs), and the first session, which
runs as typed after the first (tests/cli/test_readme_session.py runs it; here, what it must
hold without running it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from xputune.cli import exits

ROOT = Path(__file__).resolve().parents[2]
#: A session line's expected status, from its comment ("# exit 1: ..."); 0 when none is said.
EXIT_NOTE = re.compile(r"#\s*exit (\d+)\b")


def sh_blocks(text: str | None = None) -> list[list[str]]:
    """The README's ```sh blocks, each as its non-blank lines."""
    text = (ROOT / "README.md").read_text() if text is None else text
    return [
        [line for line in block.splitlines() if line.strip()]
        for block in re.findall(r"```sh\n(.*?)```", text, re.S)
    ]


def _readme_commands() -> list[str]:
    blocks = sh_blocks()
    assert blocks, "README.md has no sh block"
    return blocks[0]


def first_session() -> list[str]:
    """The lines of the sh block under README.md's '## A first session'."""
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## A first session\n")
    end = text.find("\n## ", start + 1)
    blocks = sh_blocks(text[start : end if end > 0 else None])
    assert len(blocks) == 1, "the first session is one sh block"
    return blocks[0]


def expected_status(line: str) -> int:
    found = EXIT_NOTE.search(line)
    return int(found.group(1)) if found else exits.OK


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


def test_the_first_session_starts_where_the_first_command_leaves_off() -> None:
    """Command 1 makes .venv and installs into it, without putting it on PATH: the session
    activates it first, which is also what lets `man` find the venv's share/man."""
    first = _readme_commands()[0]
    assert first.startswith("python3 -m venv .venv && .venv/bin/pip install -q . && ")
    session = first_session()
    assert session[0].split("#")[0].strip() == ". .venv/bin/activate"
    assert session[1].split("#")[0].strip() == "man xputune"
    words = [line.split("#")[0].split() for line in session]
    assert all(w[0] in (".", "man", "mkdir", "xputune") for w in words), words
    for needed in (["xputune", "status"], ["xputune", "rollback", "--dry-run"]):
        assert any(w[: len(needed)] == needed for w in words), needed


def test_every_status_the_session_promises_is_in_the_table() -> None:
    promised = {expected_status(line) for line in first_session()}
    assert promised <= set(exits.MEANINGS), promised - set(exits.MEANINGS)
    assert exits.DIFFERENCE in promised  # check and rollback --dry-run end 1: drift, changes


def test_the_readme_points_to_the_exit_status_table() -> None:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## A first session\n")
    section = text[start : text.index("\n## ", start + 1)]
    assert "EXIT STATUS" in section and "xputune --help" in section and "man xputune" in section


def test_the_copy_the_session_makes_is_ignored_by_git() -> None:
    """`mkdir box && tar xf ...` in the checkout: the copy is not the project's to commit."""
    made = [line.split()[1] for line in first_session() if line.split()[0] == "mkdir"]
    assert made == ["box"]
    if shutil.which("git") is None:
        return
    for name in (f"{made[0]}/", f"{made[0]}/h3c-hygon-p800/sys/x"):
        done = subprocess.run(
            ["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", name], check=False
        )
        assert done.returncode == 0, f"{name} is not in .gitignore"


def test_the_readme_says_the_second_command_runs_apt_get_as_root() -> None:
    """tests/sglang/install_sglang.py installs libibverbs1 with apt-get when run as root: a
    command that changes the machine's packages says so before anyone runs it."""
    script = (ROOT / "tests" / "sglang" / "install_sglang.py").read_text()
    assert '"apt-get", "install"' in script and "os.geteuid() != 0" in script
    text = (ROOT / "README.md").read_text()
    intro = text[text.index("```\n", text.index("```sh")) : text.index("\n## ")]
    assert "Run as root" in intro and "`apt-get`" in intro and "libibverbs1" in intro
