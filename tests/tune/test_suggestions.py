"""Suggestions that work when followed, on recordings too.

Every command xputune suggests for changing a host is run here exactly as it was printed (a
shell line, in a temporary folder, with this checkout's `xputune` first on PATH), and what it
promises is then checked:

- check on a recording (--example, --root FILE) said "fix them all with: xputune apply ...
  --example NAME", which apply refuses (a recording is read-only). It now names the command for
  the recorded host and, to try it here, a line that makes a copy and applies to it.
- the read-only refusal said "extract it to a directory and pass that directory as --root",
  which failed: tar leaves the recording's top folder inside that directory. It now prints the
  commands, and --root takes the folder they make.
- launch --dry-run on a drifting recording said "run `xputune apply --example NAME`".
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import host_tree

pytestmark = pytest.mark.skipif(shutil.which("tar") is None, reason="needs the tar binary")

BIN = Path(sys.executable).parent


def follow(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a printed suggestion as a person pastes it into a shell."""
    if not (BIN / "xputune").is_file():
        pytest.skip("no xputune script beside this Python (not installed into the venv)")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["COLUMNS"] = "1000"
    done = subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-2000:])
    return done


@pytest.fixture
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # the suggestion on one line, as printed


def check_then_follow(run_cli, cwd: Path, *where: str) -> tuple[Path, str]:
    """check on a recording at 80 columns, paste its 'on a copy' lines (continued with ` \\`)
    into a shell in `cwd`: the copy's folder, and what the apply in them printed."""
    code, out, _ = run_cli("check", "--profile", "hygon-p800", *where)
    assert code == 1
    # 80 columns, unless a single word (the test's own long temporary path) is longer
    assert all(len(ln) <= 80 or len(max(ln.split(), key=len)) > 50 for ln in out.splitlines())
    fix = out.split("fix them all with:\n", 1)[1]
    assert fix.startswith("  xputune apply --profile hygon-p800\non the host it was recorded on;")
    pasted = fix.split("here, on a copy:\n", 1)[1]
    lines = pasted.splitlines()
    assert all(line.endswith(" \\") for line in lines[:-1]) and len(lines) > 1
    command = " ".join(pasted.replace(" \\\n", " ").split())
    assert (
        command.startswith("mkdir ") and " && xputune apply --profile hygon-p800 --root " in command
    )
    done = follow(pasted, cwd)
    assert "applied and verified" in done.stdout
    return cwd / command.rsplit("--root ", 1)[1], done.stdout


def test_check_on_an_example_suggests_a_copy_that_apply_fixes(run_cli, tmp_path) -> None:
    folder, _ = check_then_follow(run_cli, tmp_path, "--example", "h3c-hygon-p800")
    journal = folder / "h3c-hygon-p800" / "var" / "lib" / "xputune" / "journal.json"
    assert journal.is_file()  # the copy's top folder is the host that changed
    code, out, _ = run_cli("check", "--profile", "hygon-p800", "--root", str(folder))
    assert code == 0 and "all 29 settings hold" in out


def test_apply_on_the_copy_names_an_undo_that_works(run_cli, tmp_path) -> None:
    folder, printed = check_then_follow(run_cli, tmp_path, "--example", "h3c-hygon-p800")
    undo = re.search(r"undo with: (.+)$", printed.strip())
    assert undo and undo[1] == f"xputune rollback --root {folder.name}"
    follow(undo[1], tmp_path)
    code, _, _ = run_cli("check", "--profile", "hygon-p800", "--root", str(folder))
    assert code == 1  # the originals are back


def test_check_on_a_plain_snapshot_file_suggests_a_copy_that_works(run_cli, tmp_path) -> None:
    seed = host_tree("h3c-hygon-p800")
    snap = tmp_path / "h3c-hygon-p800.tgz"
    subprocess.run(["tar", "czf", str(snap), "-C", str(seed), "sys", "proc"], check=True)
    work = tmp_path / "work"
    work.mkdir()
    folder, _ = check_then_follow(run_cli, work, "--root", str(snap))
    assert (folder / "sys").is_dir()  # a plain snapshot extracts with sys/ at the top
    code, out, _ = run_cli("check", "--profile", "hygon-p800", "--root", str(folder))
    assert code == 0 and "all 29 settings hold" in out


def test_the_read_only_refusal_prints_commands_that_work(run_cli, tmp_path, wide) -> None:
    code, _, err = run_cli("apply", "--profile", "hygon-p800", "--example", "h3c-hygon-p800")
    assert code == 2 and err.count("\n") == 1
    m = re.search(r"to change a copy of it, run: (.+), then pass --root (\S+)$", err.strip())
    assert m, err
    follow(m[1], tmp_path)
    done = follow(f"xputune apply --profile hygon-p800 --root {m[2]}", tmp_path)
    undo = re.search(r"undo with: (.+)$", done.stdout.strip())
    assert undo and undo[1] == f"xputune rollback --root {m[2]}"
    follow(undo[1], tmp_path)


def test_launch_on_a_drifting_recording_suggests_an_apply_that_works(
    run_cli, tmp_path, wide
) -> None:
    model = ("--", "--model-path", "glm-5", "--tp", "8")
    code, _, err = run_cli("launch", "sglang", "-n", "--example", "h3c-hygon-p800", *model)
    assert code == 1  # would refuse: it drifts (the launch would end 1)
    refusal = next(line for line in err.splitlines() if line.startswith("would refuse:"))
    assert "run `xputune apply` on the host it was recorded on; here, on a copy: `" in refusal
    assert "(see `xputune check --example h3c-hygon-p800`)" in refusal
    command = re.search(r"here, on a copy: `([^`]+)`", refusal)[1]
    follow(command, tmp_path)
    folder = tmp_path / command.rsplit("--root ", 1)[1]
    code, _, err = run_cli("launch", "sglang", "-n", "--root", str(folder), *model)
    assert code == 0 and "drift" not in err, err
