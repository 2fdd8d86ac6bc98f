"""The journal on its own: crash-safe writes, refusal after an interrupted apply, bad files."""

from __future__ import annotations

import os
import stat

import pytest

from tests.tune import helpers
from xputune.host.view import DirView
from xputune.tune.errors import JournalError
from xputune.tune.journal import APPLIED, IN_PROGRESS, ROLLED_BACK, Journal, Step
from xputune.tune.state import atomic_write


def test_atomic_write_replaces_whole_files_with_mode_0600(tmp_path):
    path = str(tmp_path / "j.json")
    old_umask = os.umask(0)
    try:
        atomic_write(path, b"one")
        atomic_write(path, b"two")
    finally:
        os.umask(old_umask)
    with open(path, "rb") as fh:
        assert fh.read() == b"two"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.listdir(tmp_path) == ["j.json"]


def test_a_transaction_reaches_disk_with_its_first_step(tmp_path):
    journal = Journal(str(tmp_path))
    txn = journal.begin("p", ["apply"], "host")
    assert not journal.exists
    journal.record(txn, Step(1, "k", "sysctl-int", {"path": "/x"}, "/x", 1, 0))
    again = Journal(str(tmp_path))
    assert again.interrupted() is not None
    assert again.transactions[0].steps[0].original == 1
    journal.finish(txn, APPLIED)
    assert Journal(str(tmp_path)).active()[0].state == APPLIED


def test_journals_archived_within_one_second_are_all_kept(tmp_path):
    """One process (a watch re-applying, or rolled back twice) can archive twice a second:
    each journal gets its own history file, none replaces another."""
    for n in range(3):
        journal = Journal(str(tmp_path))
        txn = journal.begin("p", ["apply"], "host")
        journal.record(txn, Step(1, "k", "sysctl-int", {"path": "/x"}, "/x", n, 0))
        journal.finish(txn, ROLLED_BACK)
        assert journal.archive() is not None
    kept = sorted(os.listdir(tmp_path / "history"))
    assert len(kept) == 3, kept
    originals = set()
    for name in kept:
        text = (tmp_path / "history" / name).read_text()
        originals |= {n for n in range(3) if f'"original": {n},' in text}
    assert originals == {0, 1, 2}


def test_empty_transactions_leave_no_journal(tmp_path):
    journal = Journal(str(tmp_path))
    journal.finish(journal.begin("p", [], "h"), APPLIED)
    assert not journal.exists and journal.transactions == []


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        '{"schema_version": 99, "transactions": []}',
        '{"schema_version": 1, "transactions": [{"id": 1}]}',
    ],
)
def test_an_unreadable_journal_is_a_clear_error(tmp_path, content):
    (tmp_path / "journal.json").write_text(content)
    with pytest.raises(JournalError, match=r"journal .*journal\.json"):
        Journal(str(tmp_path))


def test_apply_refuses_while_an_earlier_apply_is_unfinished(mini):
    folder = os.path.join(mini, "var/lib/xputune")
    os.makedirs(folder)
    journal = Journal(folder)
    txn = journal.begin("hygon-p800", ["apply"], mini)
    journal.record(
        txn,
        Step(
            1,
            "numa.balancing",
            "sysctl-int",
            {"path": "/proc/sys/kernel/numa_balancing"},
            "x",
            1,
            0,
        ),
    )
    assert txn.state == IN_PROGRESS
    with pytest.raises(JournalError, match="run `xputune rollback` first"):
        helpers.apply(DirView(mini))
