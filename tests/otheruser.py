"""Attacks by another local user: a helper that runs a small Python loop as uid/gid 65534.

xputune runs as root and writes into folders other users may own (a node_exporter textfile
folder, NFD's features.d, a host tree given with --root). The attack tests start the other
user's side with `setpriv` (util-linux), which needs root; where the tests do not run as root,
or setpriv is missing, or that user cannot run this interpreter, they skip with the reason.

The attacker's files live in a folder under the system temporary directory that the other
user can reach (pytest's own tmp_path is closed to others).
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


def _why_not() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "acting as another user needs root (CI runs the tests as root)"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    done = subprocess.run(
        [*_prefix(), sys.executable, "-I", "-c", "pass"],
        cwd="/",
        capture_output=True,
        check=False,
        timeout=60,
    )
    if done.returncode:
        return f"uid {OTHER_UID} cannot run {sys.executable}: {done.stderr.decode()[-200:]}"
    return None


def _prefix() -> list[str]:
    return [
        shutil.which("setpriv") or "setpriv",
        f"--reuid={OTHER_UID}",
        f"--regid={OTHER_GID}",
        "--clear-groups",
    ]


_REASON: list[str | None] = []


def require() -> None:
    """Skip the calling test, with the reason, where another user cannot be played."""
    if not _REASON:
        _REASON.append(_why_not())
    if _REASON[0]:
        pytest.skip(_REASON[0])


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
        [*_prefix(), sys.executable, "-I", "-c", script, str(stop_file), *args],
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
