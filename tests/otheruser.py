"""Attacks by another local user: a helper that runs a small Python loop as uid/gid 65534.

xputune runs as root and writes into folders other users may own (a node_exporter textfile
folder, NFD's features.d, a host tree given with --root). The attack tests start the other
user's side with `setpriv` (util-linux), which needs root; where the tests do not run as root,
or setpriv is missing, or that user cannot run this interpreter, they skip with the reason.

The attacker's files live in a folder under the system temporary directory that the other
user can reach (pytest's own tmp_path is closed to others). So does whatever that user's
process must read: a checkout is often in a private folder (a 0700 home, `mktemp -d`), with
its venv inside, so the other user runs the first interpreter it can reach (this one, the one
this venv was made from, the system's python3) with only the standard library (-S: the venv's
site-packages may be out of its reach), and imports xputune from a copy (package_copy).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

OTHER_UID = 65534  # nobody
OTHER_GID = 65534


#: pyproject's requires-python: what the other user's interpreter must be to import xputune.
MIN_PYTHON = (3, 11)


def _candidates() -> list[str]:
    """Interpreters to try, this one first: a venv's link, then what it points to, then the
    interpreter the venv was made from, then the system's python3."""
    found = (
        sys.executable,
        os.path.realpath(sys.executable),
        getattr(sys, "_base_executable", ""),
        shutil.which("python3") or "",
        "/usr/bin/python3",
    )
    return list(dict.fromkeys(p for p in found if p and os.path.isfile(p)))


def _find() -> tuple[str | None, str | None]:
    """(an interpreter the other user can run, None), or (None, why none)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None, "acting as another user needs root (CI runs the tests as root)"
    if shutil.which("setpriv") is None:
        return None, "setpriv (util-linux) is not installed"
    check = f"import sys; sys.exit(sys.version_info < {MIN_PYTHON!r})"
    tried = []
    for python in _candidates():
        done = subprocess.run(
            [*_prefix(), python, "-I", "-S", "-c", check],
            cwd="/",
            capture_output=True,
            check=False,
            timeout=60,
        )
        if done.returncode == 0:
            return python, None
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        tried.append(f"{python}: {lines[-1][:160] if lines else 'older than 3.11'}")
    return None, f"uid {OTHER_UID} can run no Python >= 3.11 ({'; '.join(tried)})"


def _prefix() -> list[str]:
    return [
        shutil.which("setpriv") or "setpriv",
        f"--reuid={OTHER_UID}",
        f"--regid={OTHER_GID}",
        "--clear-groups",
    ]


_FOUND: list[tuple[str | None, str | None]] = []


def require() -> None:
    """Skip the calling test, with the reason, where another user cannot be played."""
    if not _FOUND:
        _FOUND.append(_find())
    if _FOUND[0][1]:
        pytest.skip(_FOUND[0][1])


def python() -> str:
    """The interpreter the other user runs (the calling test is skipped where there is none).

    Run it with -I or -S: only the standard library is sure to be in that user's reach.
    """
    require()
    found = _FOUND[0][0]
    assert found is not None
    return found


def package_copy(where: Path) -> str:
    """A copy of the xputune package in `where` (a reachable_dir), readable by all; returns
    the folder to give the other user's interpreter as PYTHONPATH.

    The checkout may be out of that user's reach (a clone in a 0700 folder: `No module named
    'xputune'`), and so may its venv; the package needs nothing outside the standard library
    to be imported, so the copy is all that user needs.
    """
    import xputune

    dest = where / "pythonpath"
    shutil.copytree(
        Path(xputune.__file__).resolve().parent,
        dest / "xputune",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for folder, _, files in os.walk(dest):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    return str(dest)


@contextmanager
def reachable_dir() -> Iterator[Path]:
    """A fresh root-owned 0755 folder in the system temp dir, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="xputune-attack-", dir="/tmp"))
    try:
        os.chmod(path, 0o755)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def give(path: Path) -> None:
    """Hand `path` to the other user (it may then rename and plant entries in it)."""
    os.chown(path, OTHER_UID, OTHER_GID)


class Attacker:
    """The other user's process; `out` holds what it printed once the block has ended."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.out = ""


@contextmanager
def attacker(script: str, *args: str, stop_file: Path) -> Iterator[Attacker]:
    """Run `script` (Python source; its argv after the stop file is `args`) as the other
    user until the block ends; it must loop until `stop_file` exists (argv[1])."""
    proc = subprocess.Popen(
        [*_prefix(), python(), "-I", "-c", script, str(stop_file), *args],
        cwd="/",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(0.05)  # let it start its loop
        assert proc.poll() is None, proc.communicate()
        who = Attacker(proc)
        yield who
    finally:
        stop_file.touch()
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        assert proc.returncode == 0, err.decode()[-2000:]
    who.out = out.decode()
