"""Two applies at once: one waits or fails clearly, never both write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from tests.tune import helpers, minihost
from xputune.host.view import DirView
from xputune.tune.errors import LockBusy
from xputune.tune.lock import StateLock
from xputune.tune.state import state_dir


def _journal(root: str) -> dict:
    with open(os.path.join(root, "var/lib/xputune/journal.json")) as fh:
        return json.load(fh)


def test_a_held_lock_refuses_a_second_apply_naming_the_holder(mini):
    before = minihost.snapshot(mini)
    with StateLock(state_dir(DirView(mini))), pytest.raises(LockBusy) as err:
        helpers.apply(DirView(mini))
    assert f"(pid {os.getpid()})" in str(err.value)
    assert "nothing was changed" in str(err.value) and "--wait" in str(err.value)
    assert minihost.snapshot(mini) == before


def test_wait_queues_behind_the_holder_then_applies(mini):
    folder = state_dir(DirView(mini))
    holder = StateLock(folder).__enter__()
    results = []

    def waiter() -> None:
        results.append(helpers.apply(DirView(mini), wait=True, only=["numa.balancing"]))

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.2)
    assert thread.is_alive() and not results  # blocked on the lock
    holder.__exit__(None, None, None)
    thread.join(timeout=10)
    assert results and [c.knob for c in results[0].changes] == ["numa.balancing"]


@pytest.mark.slow
def test_another_process_holding_the_lock_makes_apply_fail_clearly(mini):
    before = minihost.snapshot(mini)
    with StateLock(state_dir(DirView(mini))):
        done = subprocess.run(
            [sys.executable, "-m", "xputune", "apply", "--root", mini],
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode == 5
    assert f"another xputune apply or rollback is running (pid {os.getpid()})" in done.stderr
    assert minihost.snapshot(mini) == before


@pytest.mark.slow
def test_two_processes_started_together_never_both_write(mini):
    command = [sys.executable, "-m", "xputune", "apply", "--root", mini]
    procs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outcomes = [(p.wait(timeout=60), *p.communicate()) for p in procs]
    applied = [o for o in outcomes if "applied and verified" in o[1]]
    assert len(applied) == 1, outcomes
    for code, out, err in outcomes:
        assert (code == 0 and ("applied" in out or "nothing to change" in out)) or (
            code == 5 and "another xputune apply or rollback is running (pid" in err
        )
    journal = _journal(mini)
    assert [len(t["steps"]) for t in journal["transactions"]] == [9]
