"""What the units run at boot must still be there: apply --persist says when it may not be,
and the units assert it (AssertPathExists=), so a moved clone fails them by name.

The interpreter and the package are stood in for by folders made here (sys.executable and
the package folder are patched), so no path of the machine running the tests is assumed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tune import helpers
from xputune.host.view import DirView
from xputune.tune import persist

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def _install(monkeypatch, interpreter: Path, package: Path) -> None:
    """Pretend xputune runs on `interpreter` with its package at `package`."""
    interpreter.parent.mkdir(parents=True, exist_ok=True)
    interpreter.write_text("#!/bin/sh\n")
    interpreter.chmod(0o755)  # systemd-analyze verify checks that ExecStart can be run
    package.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(sys, "executable", str(interpreter))
    monkeypatch.setattr(persist, "_package_dir", lambda: str(package))


@pytest.fixture
def clone(tmp_path, monkeypatch) -> Path:
    """xputune run from a virtual environment inside a git clone (an editable install)."""
    work = tmp_path / "src" / "xputune-clone"
    (work / ".git").mkdir(parents=True)
    _install(monkeypatch, work / ".venv" / "bin" / "python", work / "xputune")
    return work


@pytest.fixture
def system(tmp_path, monkeypatch) -> Path:
    """xputune installed system-wide (a prefix that is no clone and no home)."""
    prefix = tmp_path / "usr" / "local"
    _install(monkeypatch, prefix / "bin" / "python3", prefix / "lib" / "site" / "xputune")
    return prefix


def test_movable_knows_clones_and_homes(tmp_path) -> None:
    tree = tmp_path / "a"
    (tree / "b" / "c").mkdir(parents=True)
    assert persist.movable(str(tree / "b" / "c" / "python")) is None
    (tree / ".git").write_text("gitdir: elsewhere\n")  # a worktree's .git is a file
    assert persist.movable(str(tree / "b" / "c" / "python")) == f"inside the git work tree {tree}"
    assert persist.movable("/home/ops/venv/bin/python") == "under /home"
    assert persist.movable("/root/venv/bin/python") == "under /root"
    assert persist.movable("/rootfs/python") in (None, *[f"inside the git work tree {p}" for p in
                                                         ("/", "/rootfs")])  # fmt: skip


def test_a_clone_gets_a_plain_warning_with_the_way_out(clone) -> None:
    [warning] = persist.interpreter_warnings()
    assert f"run {clone}/.venv/bin/python (inside the git work tree {clone})" in warning
    assert f"import xputune from {clone}/xputune (inside the git work tree {clone})" in warning
    assert "AssertPathExists=" in warning and "fail at boot" in warning
    assert "pip install --prefix /usr/local xputune" in warning and "pipx install" in warning
    assert "re-run xputune apply --persist" in warning
    assert "\n" not in warning


def test_a_link_to_an_interpreter_in_a_home_is_named_too(tmp_path, monkeypatch, system) -> None:
    home = tmp_path / "home-like"
    real = home / "python3.11"
    real.parent.mkdir()
    real.write_text("")
    link = system / "bin" / "python-link"
    link.symlink_to(real)
    monkeypatch.setattr(sys, "executable", str(link))
    monkeypatch.setattr(persist, "MOVABLE_HOMES", (str(home),))
    [warning] = persist.interpreter_warnings()
    assert f"run {link}, which is {real} (under {home})" in warning
    assert "import xputune" not in warning  # the package is not where things move


def test_a_system_install_gets_no_warning(system) -> None:
    assert persist.interpreter_warnings() == []


def test_apply_with_persist_says_it_also_in_a_dry_run_and_only_with_persist(clone, mini) -> None:
    view = DirView(mini)
    [dry] = helpers.apply(view, persist_unit=True, dry_run=True).warnings
    assert "inside the git work tree" in dry
    assert helpers.apply(view, dry_run=True).warnings == []
    real = helpers.apply(view, persist_unit=True)
    assert real.warnings == [dry] and real.changes
    assert helpers.apply(view, persist_unit=True).warnings == [dry]  # nothing to change: still
    assert helpers.apply(view).warnings == []


def test_the_units_assert_what_they_run(clone) -> None:
    for text in (persist.unit_text(["--profile", "generic"]),
                 persist.watch_unit_text(["--profile", "generic"])):  # fmt: skip
        unit_section = text.split("[Service]")[0]
        assert f"AssertPathExists={clone}/.venv/bin/python\n" in unit_section
        assert f"AssertPathExists={clone}/xputune\n" in unit_section
        assert persist.asserted_paths(text) == persist.dependencies()
        assert persist.exec_argv(text)[0] == f"{clone}/.venv/bin/python"


def test_a_percent_is_doubled_and_an_unwritable_path_is_left_out(tmp_path, monkeypatch) -> None:
    odd = tmp_path / "100% sure" / "bin" / "python"
    _install(monkeypatch, odd, tmp_path / "ctl\x01dir" / "xputune")
    text = persist.unit_text([])
    assert f"AssertPathExists={str(odd).replace('%', '%%')}\n" in text
    assert "ctl\x01" not in text.split("ExecStart=")[0]  # no line systemd would misread
    assert persist.asserted_paths(text) == [str(odd)]


def _condition(line: str) -> subprocess.CompletedProcess[str]:
    assert SYSTEMD_ANALYZE is not None
    return subprocess.run([SYSTEMD_ANALYZE, "condition", line], capture_output=True, text=True,
                          check=False, timeout=60)  # fmt: skip


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze not installed (apt systemd)")
def test_systemd_verifies_the_units_and_a_moved_clone_fails_their_assertion(
    tmp_path, monkeypatch
) -> None:
    work = tmp_path / "a clone %h" / "xputune"
    (work / ".git").mkdir(parents=True)
    _install(monkeypatch, work / ".venv" / "bin" / "python", work / "xputune")
    for name, text in ((persist.UNIT_NAME, persist.unit_text(["--profile", "generic"])),
                       (persist.WATCH_UNIT_NAME,
                        persist.watch_unit_text(["--profile", "generic"]))):  # fmt: skip
        path = tmp_path / name
        path.write_text(text)
        done = subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", str(path)],
                              capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
        assert done.returncode == 0 and not done.stderr.strip(), done.stderr
        lines = [x for x in text.splitlines() if x.startswith("AssertPathExists=")]
        assert len(lines) == 2
        for line in lines:  # systemd reads the path back as it is: the clone is there
            assert _condition(line).returncode == 0, _condition(line).stderr
    os.rename(work, tmp_path / "moved")  # the clone moves
    for line in lines:
        done = _condition(line)
        assert done.returncode != 0 and "failed" in done.stderr + done.stdout
