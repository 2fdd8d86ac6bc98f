"""Fault injection: a write failure or a kill -9 at any step leaves nothing changed.

For every step k of an apply: (1) the k-th write raises; the apply must roll back on its own
and leave the tree byte-identical. (2) the process is killed (SIGKILL, like kill -9) just
before or just after the k-th write; `rollback` must then restore the tree byte for byte.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.tune import helpers, minihost
from tests.tune.views import FailingView
from xputune.host.view import DirView
from xputune.tune import engine
from xputune.tune.errors import ApplyFailed, JournalError
from xputune.tune.transaction import CRASH_ENV


def _steps(root: str, **kwargs) -> int:
    return len(helpers.apply(DirView(root), dry_run=True, **kwargs).changes)


def assert_write_failure_rolls_back(root: str, k: int, **kwargs) -> None:
    before = minihost.snapshot(root)
    with pytest.raises(ApplyFailed, match=f"injected write failure #{k}"):
        helpers.apply(FailingView(root, fail_at=k), **kwargs)
    assert minihost.snapshot(root) == before, f"write failure at step {k} left changes"
    assert not os.path.exists(os.path.join(root, "var/lib/xputune/journal.json"))


def crash_at(root: str, k: int, when: str, **kwargs) -> None:
    """Run an apply in a forked child that SIGKILLs itself at step k."""
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        try:
            os.environ[CRASH_ENV] = f"{k}:{when}"
            helpers.apply(DirView(root), **kwargs)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (k, when)


def assert_crash_then_rollback_restores(root: str, k: int, when: str, **kwargs) -> None:
    before = minihost.snapshot(root)
    crash_at(root, k, when, **kwargs)
    if when == "after":  # the k-th change really reached the tree before the kill
        assert minihost.snapshot(root) != before
    with pytest.raises(JournalError, match="did not finish; run `xputune rollback` first"):
        helpers.apply(DirView(root), **kwargs)
    engine.rollback_host(DirView(root))
    assert minihost.snapshot(root) == before, f"kill at step {k} ({when}) left changes"


def test_write_failure_in_the_middle_rolls_back(mini):
    assert_write_failure_rolls_back(mini, 4)


def test_kill_in_the_middle_then_rollback_restores(mini):
    assert_crash_then_rollback_restores(mini, 5, "after")


@pytest.mark.slow
def test_write_failure_at_every_step_rolls_back(tmp_path):
    root = minihost.build(str(tmp_path / "h"))
    steps = _steps(root)
    assert steps == 9
    for k in range(1, steps + 1):
        assert_write_failure_rolls_back(root, k)


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before", "after"])
def test_kill_at_every_step_then_rollback_restores(tmp_path, when):
    root = minihost.build(str(tmp_path / "h"))
    for k in range(1, _steps(root) + 1):
        assert_crash_then_rollback_restores(root, k, when)


def test_failure_during_rollback_keeps_the_journal_for_a_retry(mini):
    from xputune.tune.errors import RollbackIncomplete

    before = minihost.snapshot(mini)
    helpers.apply(DirView(mini))
    with pytest.raises(RollbackIncomplete, match="run `xputune rollback` again"):
        engine.rollback_host(FailingView(mini, fail_at=2))
    assert os.path.exists(os.path.join(mini, "var/lib/xputune/journal.json"))
    engine.rollback_host(DirView(mini))
    assert minihost.snapshot(mini) == before


@pytest.mark.slow
def test_kill_of_the_real_command_line_then_rollback(mini):
    """The same through `python -m xputune` in a separate process."""
    before = minihost.snapshot(mini)
    env = {**os.environ, CRASH_ENV: "3:after"}
    done = subprocess.run(
        [sys.executable, "-m", "xputune", "apply", "--root", mini],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert minihost.snapshot(mini) != before
    again = subprocess.run(
        [sys.executable, "-m", "xputune", "apply", "--root", mini],
        capture_output=True,
        text=True,
        check=False,
    )
    assert again.returncode == 6 and "run `xputune rollback` first" in again.stderr
    back = subprocess.run(
        [sys.executable, "-m", "xputune", "rollback", "--root", mini],
        capture_output=True,
        text=True,
        check=False,
    )
    assert back.returncode == 0, back.stderr
    assert minihost.snapshot(mini) == before
