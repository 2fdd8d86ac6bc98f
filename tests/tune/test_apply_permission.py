"""A change this user may not make ends with the exit table's permission status (4).

As a non-root user, `apply --root box` on a tree root owns once ended 2 ("cannot create state
directory": a usage error) or 8 (a step failed): neither tells a script that the fix is who
runs it. Both are 4 now, in one line that says so, and nothing is left changed.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from tests import otheruser
from tests.tune import helpers, minihost
from xputune.cli import exits
from xputune.errors import HostError, PermissionRequired
from xputune.host.view import DirView
from xputune.tune import state
from xputune.tune.errors import ApplyDenied, ApplyFailed


class DeniedView(DirView):
    """Every write is refused by the kernel, as in a tree another user owns (root is never
    refused, so the test plays it)."""

    def write_bytes(self, path: str, data: bytes, offset: int | None = None) -> None:
        try:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        except PermissionError as exc:
            raise HostError(f"{self.label}: permission denied writing {path}") from exc


def test_a_write_refused_for_permission_is_rolled_back_and_ends_4(mini) -> None:
    before = minihost.snapshot(mini)
    with pytest.raises(ApplyDenied) as err:
        helpers.apply(DeniedView(mini))
    assert isinstance(err.value, ApplyFailed) and err.value.exit_code == exits.PERMISSION
    message = str(err.value)
    assert "permission denied writing" in message and "\n" not in message
    assert message.endswith("run it as root, or on a tree this user owns")
    assert minihost.snapshot(mini) == before


def test_a_state_directory_this_user_may_not_create_ends_4(mini, monkeypatch) -> None:
    def refused(self, path, mode=0o755):
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(DirView, "makedirs", refused)
    with pytest.raises(PermissionRequired) as err:
        state.state_dir(DirView(mini))
    assert err.value.exit_code == exits.PERMISSION
    assert str(err.value).startswith(f"cannot create state directory {mini}/var/lib/xputune: ")
    assert "may not write the tree given with --root; run it as root" in str(err.value)


def _as_other(args: list[str], cwd: Path, package: str) -> subprocess.CompletedProcess[str]:
    """`xputune ARGS` as uid 65534: the first interpreter that user can run, this checkout's
    package from a copy it can read (the checkout may be in a 0700 folder)."""
    return subprocess.run(
        [*otheruser._prefix(), otheruser.python(), "-m", "xputune", *args],
        capture_output=True, text=True, check=False, timeout=120, cwd=cwd,
        env={**os.environ, "PYTHONPATH": package, "XPUTUNE_CACHE_DIR": str(cwd / "c")},
    )  # fmt: skip


def test_another_user_applying_to_roots_tree_is_told_4_in_one_line() -> None:
    """The README's copy made by root, applied by uid 65534: the real command, as run. First
    the state directory cannot be made (was 2), then, with one that user owns, the first
    write is refused (was 8): 4 both times, one error line, the tree as it was."""
    otheruser.require()
    with otheruser.reachable_dir() as where:
        package = otheruser.package_copy(where)
        root = minihost.build(str(where / "box"))
        for folder, _, files in os.walk(root):  # readable by all, writable by root only
            os.chmod(folder, 0o755)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o644)
        work = where / "home"
        work.mkdir()
        otheruser.give(work)
        before = minihost.snapshot(root)
        done = _as_other(["apply", "--root", root], work, package)
        if "No module named" in done.stderr:  # its interpreter lacks a dependency of the CLI
            pytest.skip(f"uid {otheruser.OTHER_UID}: {done.stderr.strip().splitlines()[-1]}")
        assert done.returncode == exits.PERMISSION, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("xputune: ")]
        assert errors == [
            f"xputune: error: cannot create state directory {root}/var/lib/xputune: permission "
            "denied: this user may not write the tree given with --root; run it as root, or on "
            "a copy of this user's own (`mkdir box && tar xf RECORDING -C box`) (nothing was "
            "changed)"
        ]
        state_path = Path(root, "var/lib/xputune")
        state_path.mkdir(mode=0o700, parents=True)
        otheruser.give(state_path)
        done = _as_other(["apply", "--root", root], work, package)
        assert done.returncode == exits.PERMISSION, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("xputune: ")]
        assert len(errors) == 1 and "permission denied writing" in errors[0], done.stderr
        assert errors[0].endswith("run it as root, or on a tree this user owns")
        assert minihost.snapshot(root) == before
