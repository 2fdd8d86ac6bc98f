"""The boot unit is written in systemd's own syntax: %-specifiers, $VAR and quoting escaped.

Checked two ways: parsed back with the rules of systemd.syntax / systemd.service "Command
lines", and, where systemd is installed (Debian's `systemd` package), by `systemd-analyze verify`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.tune import helpers
from xputune.host.view import DirView
from xputune.tune import persist

NASTY = [
    "plain",
    "/opt/profiles/a b.yaml",
    "%h/profile.yaml",
    "$HOME/p.yaml",
    "${HOME}/p.yaml",
    "100%",
    "$$",
    'say "hi"',
    "it's",
    "back\\slash",
    ";",
    "a;b",
    "tab\there",
    "new\nline",
    "\x01ctl",
    "unicode-ü-✓",
    "",
    "-dash",
    "@at",
]


@pytest.mark.parametrize("word", NASTY)
def test_each_word_parses_back_to_itself(word):
    argv = [sys.executable, "-m", "xputune", "apply", "--profile", word]
    line = persist.systemd_command(argv)
    assert "\n" not in line
    assert persist.parse_exec(line) == argv


def test_specifiers_and_variables_are_doubled():
    assert persist.systemd_word("%h") == '"%%h"'
    assert persist.systemd_word("$HOME") == "$$HOME"
    assert persist.systemd_word("a%b") == '"a%%b"'
    with pytest.raises(ValueError):
        persist.parse_exec("/bin/x %h")  # a live specifier is not ours
    with pytest.raises(ValueError):
        persist.parse_exec("/bin/x $HOME")
    with pytest.raises(ValueError):
        persist.parse_exec("/bin/x ; /bin/y")  # a second command


@pytest.fixture
def odd_profile(tmp_path):
    folder = tmp_path / "we%h $HOME \"q' ;x"
    folder.mkdir()
    profile = folder / "rc.yaml"
    profile.write_text("include: hygon-p800\n")
    return str(profile)


def test_a_profile_path_with_specifiers_reaches_the_unit_unchanged(mini, odd_profile):
    helpers.apply(DirView(mini), profile=odd_profile, persist_unit=True, only=["numa.balancing"])
    with open(mini + persist.UNIT_PATH) as fh:
        unit = fh.read()
    args = persist.installed_args(unit)
    assert args is not None and args[:2] == ["--profile", odd_profile]
    line = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
    assert "%%h" in line and "$$HOME" in line


SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def _verify(folder, text: str) -> subprocess.CompletedProcess[str]:
    path = os.path.join(folder, persist.UNIT_NAME)
    with open(path, "w") as fh:
        fh.write(text)
    return subprocess.run(
        [SYSTEMD_ANALYZE, "verify", "--man=no", path],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze not installed (apt systemd)")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path, odd_profile):
    args = ["--profile", odd_profile, "--thp", "madvise"]
    done = _verify(tmp_path, persist.unit_text(args))
    assert done.returncode == 0, done.stderr
    assert "Failed" not in done.stderr and "Invalid" not in done.stderr, done.stderr
    # The same check catches a specifier systemd does not know: verify really reads ExecStart.
    bad = persist.unit_text(args).replace("%%h", "%Z")
    assert _verify(tmp_path, bad).returncode != 0
