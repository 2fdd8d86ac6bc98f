"""rollback --dry-run (engine.rollback_host(dry_run=True)): what a rollback would restore, with
nothing changed, no lock taken, and no root needed where the state directory lets one read.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

import xputune
from tests import otheruser
from tests.tune import helpers, minihost
from xputune.errors import HostError, PermissionRequired
from xputune.host.open import example_path
from xputune.host.view import DirView, TarView
from xputune.tune import engine
from xputune.tune.errors import JournalError
from xputune.tune.journal import JOURNAL, Journal
from xputune.tune.lock import StateLock
from xputune.tune.state import state_dir

SCHEMA = os.path.join(os.path.dirname(xputune.__file__), "data", "schemas", "rollback.json")
MINI_CARD = "0000:04:00.0"


def dry(root: str) -> engine.RollbackResult:
    """A dry run on `root` that must leave every byte and entry of it as it was."""
    before = minihost.snapshot(root, exclude="")
    result = engine.rollback_host(DirView(root), dry_run=True)
    assert minihost.snapshot(root, exclude="") == before
    doc = engine.rollback_document(DirView(root), result)
    with open(SCHEMA) as fh:
        errors = [e.message for e in Draft202012Validator(json.load(fh)).iter_errors(doc)]
    assert not errors, errors
    return result


def test_it_lists_every_journaled_step_newest_first_and_changes_nothing(mini) -> None:
    helpers.apply(DirView(mini), persist_unit=True)
    [txn] = Journal(state_dir(DirView(mini))).active()
    result = dry(mini)
    assert result.dry_run and result.restored == [] and result.transactions == 1
    assert [p.step.n for p in result.pending] == [s.n for s in reversed(txn.steps)]
    assert all(p.changes for p in result.pending)  # right after the apply: all would change
    doc = engine.rollback_document(DirView(mini), result)
    assert doc["dry_run"] is True and doc["restored"] == []
    assert doc["journal"] == mini + "/var/lib/xputune/" + JOURNAL
    by_where = {(w["knob"], w["where"]): w for w in doc["would_restore"]}
    card = by_where[("pcie.ido", f"{MINI_CARD} card xpu1")]
    assert (card["now"], card["original"], card["kind"]) == ("on", "off", "pci-bits")
    assert card["target"]["path"].endswith("/config") and card["target"]["mask"] == 0x0300
    numa = by_where[("numa.balancing", "/proc/sys/kernel/numa_balancing")]
    assert (numa["now"], numa["original"]) == ("off", "on")
    unit = by_where[("persist", "/etc/systemd/system/xputune.service")]
    assert (unit["now"], unit["original"]) == ("as installed", "absent")  # never the unit text
    # ...and the real rollback restores exactly those, in that order
    real = engine.rollback_host(DirView(mini))
    assert [(r.step.knob, r.step.label) for r in real.restored] == [
        (p.step.knob, p.step.label) for p in result.pending]  # fmt: skip


def test_a_value_already_back_at_its_original_would_not_change(mini) -> None:
    helpers.apply(DirView(mini), only=["pcie.ido"])
    helpers.clear_ido(mini, MINI_CARD)  # the card was reset: its bits are the original again
    pending = {p.step.label: p for p in dry(mini).pending}
    assert pending[f"{MINI_CARD} card xpu1"].changes is False
    assert pending[f"{MINI_CARD} card xpu1"].now_text == "off"
    assert sum(p.changes is True for p in pending.values()) == len(pending) - 1


def test_no_journal_nothing_to_restore(mini) -> None:
    result = dry(mini)
    assert (result.transactions, result.pending, result.journal) == (0, [], None)
    assert not os.path.exists(mini + "/var/lib/xputune")  # no state directory made
    helpers.apply(DirView(mini))
    engine.rollback_host(DirView(mini))
    assert dry(mini).transactions == 0  # rolled back: the journal is history


def test_it_takes_no_lock_and_cleans_nothing(mini) -> None:
    helpers.apply(DirView(mini))
    folder = state_dir(DirView(mini))
    leftover = Path(folder, JOURNAL + ".tmp.999999")  # a killed writer's temporary file
    leftover.write_text("{}")
    with StateLock(folder):  # an apply runs: a dry run neither waits nor fails
        assert dry(mini).transactions == 1
    assert leftover.exists()  # only a holder of the lock may clean
    engine.rollback_host(DirView(mini))
    assert not leftover.exists()  # the real rollback did


def test_a_journal_the_real_rollback_refuses_is_refused_the_same_way(mini) -> None:
    helpers.apply(DirView(mini), only=["numa.balancing"])
    path = mini + "/var/lib/xputune/" + JOURNAL
    with open(path) as fh:
        text = fh.read()
    with open(path, "w") as fh:
        fh.write(text.replace("numa_balancing", "numa_balancinh"))
    with pytest.raises(JournalError) as dry_error:
        engine.rollback_host(DirView(mini), dry_run=True)
    with pytest.raises(JournalError) as real_error:
        engine.rollback_host(DirView(mini))
    assert str(dry_error.value) == str(real_error.value)


def test_a_journal_step_that_is_not_the_knobs_is_refused_before_reading_anything(mini) -> None:
    from tests.tune.test_status import _rewrite_journal

    helpers.apply(DirView(mini), only=["numa.balancing"])

    def elsewhere(txn: dict) -> None:
        txn["steps"][0]["target"]["path"] = "/etc/shadow"

    _rewrite_journal(mini, elsewhere)
    with pytest.raises(JournalError, match="refusing to roll back anything"):
        engine.rollback_host(DirView(mini), dry_run=True)


class _Unreadable(DirView):
    """numa_balancing cannot be read (as a file a user may not read)."""

    def read_bytes(self, path: str) -> bytes:
        if path == "/proc/sys/kernel/numa_balancing":
            raise HostError(f"{self.label}: permission denied reading {path}")
        return super().read_bytes(path)


def test_a_value_that_cannot_be_read_now_is_unknown_and_the_rest_is_shown(mini) -> None:
    helpers.apply(DirView(mini), only=["numa.balancing", "pcie.ido"])
    result = engine.rollback_host(_Unreadable(mini), dry_run=True)
    [numa] = [p for p in result.pending if p.step.knob == "numa.balancing"]
    assert numa.now_text == "unknown" and "permission denied" in (numa.unreadable or "")
    assert numa.changes is None and numa.original_text == "on"
    assert all(p.unreadable is None for p in result.pending if p is not numa)


def test_lockdown_is_a_warning_of_the_dry_run_and_an_error_of_the_real_one(mini) -> None:
    helpers.apply(DirView(mini), only=["pcie.ido"])
    minihost.write(mini, "/sys/kernel/security/lockdown", "none [integrity] confidentiality\n")
    result = dry(mini)
    assert any(w.startswith("a real rollback would stop here: kernel lockdown") for w in
               result.warnings)  # fmt: skip
    with pytest.raises(PermissionRequired, match="lockdown"):
        engine.rollback_host(DirView(mini))


def test_a_recording_can_be_asked_and_has_nothing_to_restore() -> None:
    result = engine.rollback_host(TarView(str(example_path("h3c-hygon-p800"))), dry_run=True)
    assert result.dry_run and result.transactions == 0


# -- another user ------------------------------------------------------------------------------
_AS_OTHER = """
import json, sys
from xputune.errors import XputuneError
from xputune.host.view import DirView
from xputune.tune import engine
try:
    result = engine.rollback_host(DirView(sys.argv[1]), dry_run=True)
except XputuneError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
else:
    print(json.dumps({"transactions": result.transactions, "steps": len(result.pending),
                      "unreadable": sum(p.unreadable is not None for p in result.pending)}))
"""


def _as_other(root: str, pythonpath: str) -> dict:
    """_AS_OTHER run by the other user, importing xputune from `pythonpath` (a copy it can
    read: the checkout may be in a private folder) with no site-packages (-S)."""
    done = subprocess.run(
        [*otheruser._prefix(), otheruser.python(), "-S", "-c", _AS_OTHER, root],
        capture_output=True, text=True, check=False, timeout=120, cwd="/",
        env={**os.environ, "PYTHONPATH": pythonpath},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_another_user_reads_where_the_state_dir_lets_and_is_told_root_where_not() -> None:
    otheruser.require()
    with otheruser.reachable_dir() as where:
        pythonpath = otheruser.package_copy(where)
        root = minihost.build(str(where / "host"))
        for folder, _, files in os.walk(root):  # a tree the other user may read
            os.chmod(folder, 0o755)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o644)
        result = helpers.apply(DirView(root), only=["numa.balancing", "pcie.ido"])
        state = root + "/var/lib/xputune"
        # root's state directory, 0700 as apply leaves it: one clear line, nothing else
        said = _as_other(root, pythonpath)
        assert said["error"] == "PermissionRequired"
        assert said["message"].startswith(f"cannot read {state}: permission denied")
        assert "run it as root" in said["message"]
        # a state directory that user owns (their own tree): the dry run works unprivileged
        os.chown(state, otheruser.OTHER_UID, otheruser.OTHER_GID)
        os.chown(state + "/" + JOURNAL, otheruser.OTHER_UID, otheruser.OTHER_GID)
        said = _as_other(root, pythonpath)
        assert said == {"transactions": 1, "steps": len(result.changes), "unreadable": 0}


# -- the selection flags, read back ------------------------------------------------------------
def test_parse_selection_args_refuses_what_apply_never_writes() -> None:
    for bad in (["--profile"], ["--thp"], ["--root", "/x"], ["--ido", "--profile", "p", "x"], []):
        with pytest.raises(xputune.errors.XputuneError):
            engine.parse_selection_args(bad)
    words = ["--profile", "p", "--no-ido", "--thp", "never", "--force", "--skip", "shm.huge"]
    assert engine.parse_selection_args(words) == engine.SelectionArgs(
        "p", {"pcie.ido": False, "thp.enabled": "never"}, ("shm.huge",), True
    )
