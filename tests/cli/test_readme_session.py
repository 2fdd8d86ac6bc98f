"""README.md's first session, run as typed on a fresh copy of the repository.

The copy holds the tracked files of this checkout as they are now (`git ls-files`: no venv, no
build folder, no caches, no libraries built before), in a new folder. There, one bash runs the
README's first command (a new venv, `pip install -q .` from the package index pip is
configured with, as for any user, then a probe), then every line of the first session in
order, each exactly as the README prints it: `. .venv/bin/activate` must carry into the lines
after it, as it does at a terminal. Each line must end with the status its comment promises
("# exit 1: ..."), 0 when it promises none. PATH holds no virtual environment of the test run,
and xputune's caches start empty. The timing of every line is printed (pytest -s shows it).

Where man-db is not installed, the `man` line is not run; the page it would show must then be
where man would look for it (<venv>/share/man/man1/xputune.1), and a note says so.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_readme_commands import ROOT, expected_status, first_session, sh_blocks

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def _fresh_copy(dest: Path) -> None:
    """The tracked files of this checkout, as they are in the working tree, links kept."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=False
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout: the tracked files are unknown")
    for name in listed.stdout.decode().split("\0"):
        src = ROOT / name
        if not name or not os.path.lexists(src):
            continue  # deleted in the working tree
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), target)
        else:
            shutil.copy2(src, target)


def _environment(home: Path) -> dict[str, str]:
    """This process's environment without its virtual environment, caches in `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    ours = {str(Path(sys.prefix) / "bin"), str(Path(sys.executable).parent)}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p not in ours)
    env["XPUTUNE_CACHE_DIR"] = str(home / "cache")
    env.update(PAGER="cat", MANPAGER="cat", MANWIDTH="80", LC_ALL="C.UTF-8")
    return env


def _script(lines: list[str], out: Path, have_man: bool) -> str:
    """One bash script: each line as typed, its output to out/N, its status and times to out/S."""
    parts = ["exec 3>" + shlex.quote(str(out / "S"))]
    for n, line in enumerate(lines):
        command = line
        if not have_man and line.split()[0] == "man":
            command = 'test -f "$VIRTUAL_ENV/share/man/man1/xputune.1"  # man-db not installed'
        parts.append(
            f"t0=$EPOCHREALTIME\n{{\n{command}\n}} >{shlex.quote(str(out / str(n)))} 2>&1\n"
            f'echo "{n} $? $t0 $EPOCHREALTIME" >&3'
        )
    return "\n".join(parts) + "\n"


def test_the_first_session_runs_as_typed(tmp_path: Path) -> None:
    for tool in ("bash", "git", "tar"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    have_man = shutil.which("man") is not None
    repo, out, home = tmp_path / "repo", tmp_path / "out", tmp_path / "home"
    for folder in (repo, out, home):
        folder.mkdir(mode=0o700)
    _fresh_copy(repo)
    lines = [sh_blocks()[0][0], *first_session()]  # command 1, then the session
    began = time.monotonic()
    done = subprocess.run(
        ["bash", "--norc", "--noprofile"], input=_script(lines, out, have_man), text=True,
        cwd=repo, env=_environment(home), capture_output=True, check=False,
    )  # fmt: skip
    total = time.monotonic() - began
    rows = [row.split() for row in (out / "S").read_text().splitlines()]
    print(f"\nREADME first session on a fresh copy ({len(lines)} lines, {total:.1f} s in all):")
    failures = []
    for n, line in enumerate(lines):
        row = next((r for r in rows if r[0] == str(n)), None)
        status = int(row[1]) if row else None
        seconds = float(row[3]) - float(row[2]) if row else 0.0
        print(f"  {seconds:7.2f} s  exit {status}  {line}")
        if status != expected_status(line):
            tail = (out / str(n)).read_text()[-2000:] if (out / str(n)).exists() else ""
            failures.append(f"{line}\n  ended {status}, expected {expected_status(line)}\n{tail}")
    if not have_man:
        print("  note: man-db is not installed; the man line checked that the page is in place")
    assert not failures, "\n".join(failures) + done.stderr[-2000:]
    assert done.returncode == 0, done.stderr
    man_line = next(n for n, line in enumerate(lines) if line.split()[0] == "man")
    if have_man:
        page = (out / str(man_line)).read_text()
        assert "EXIT STATUS" in page and "ENVIRONMENT" in page and "XPUTUNE_CACHE_DIR" in page
    # what the session made is in the copy: its venv (with the man pages) and the tree apply changed
    assert (repo / "box").is_dir() and (repo / ".venv" / "share" / "man" / "man1").is_dir()
