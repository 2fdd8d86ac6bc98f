"""xputune status (tune/status.py): what is applied, by what, kept by which units, and whether
it holds now, read on a copy of the seed box before and after apply and rollback.

Every case also checks that status wrote nothing: it is run by people who want to look, on
hosts where a stray state directory or a cleaned temporary file would be a surprise.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from jsonschema import Draft202012Validator

import xputune
from tests.tune import helpers, minihost
from tests.tune.helpers import SEED_CARD, clear_ido
from xputune.host.open import example_path
from xputune.host.view import DirView, TarView
from xputune.tune import engine, persist, profiles
from xputune.tune.journal import JOURNAL, Journal, checksum
from xputune.tune.state import state_dir
from xputune.tune.status import NO_PROFILE, UNKNOWN, host_status, status_document

SCHEMA = os.path.join(os.path.dirname(xputune.__file__), "data", "schemas", "status.json")


def looked(root: str) -> dict:
    """status of `root` as its JSON document, checked against the schema, and checked to
    have left the tree exactly as it was (state directory included)."""
    before = minihost.snapshot(root, exclude="")
    view = DirView(root)
    doc = status_document(view, host_status(view))
    assert minihost.snapshot(root, exclude="") == before
    with open(SCHEMA) as fh:
        errors = [e.message for e in Draft202012Validator(json.load(fh)).iter_errors(doc)]
    assert not errors, errors
    json.dumps(doc)  # plain JSON all the way down
    return doc


def test_a_host_never_applied_says_so_and_judges_nothing(seedbox) -> None:
    doc = looked(seedbox)
    assert doc["applied"] is None and doc["holds"] is None and doc["state_dir"] is None
    assert doc["drift"] == {"profile": None, "holds": None, "drifting": None,
                            "note": NO_PROFILE, "rows": None}  # fmt: skip
    assert [(u["name"], u["present"], u["enabled"]) for u in doc["units"]] == [
        (persist.UNIT_NAME, False, False), (persist.WATCH_UNIT_NAME, False, False)]  # fmt: skip
    assert doc["watch"] is None and doc["warnings"] == []
    assert not os.path.exists(seedbox + "/var/lib/xputune")  # not created by looking


def test_after_an_apply_the_profile_its_flags_version_and_drift(seedbox) -> None:
    helpers.apply(DirView(seedbox), overrides={"thp.enabled": "never"}, skip=["shm.huge"])
    doc = looked(seedbox)
    applied = doc["applied"]
    assert applied["profile"] == "hygon-p800" and applied["by"] == "apply"
    # never overrides a critical setting of the profile: the apply was forced, and says so
    assert applied["args"] == [
        "--profile", "hygon-p800", "--thp", "never", "--force", "--skip", "shm.huge"]  # fmt: skip
    assert applied["version"] == xputune.__version__
    [txn] = Journal(state_dir(DirView(seedbox))).active()
    assert applied["transaction"] == txn.id and applied["when"] == txn.finished
    assert doc["journal"] == {"transactions": 1, "steps": len(txn.steps), "interrupted": None,
                              "rolled_back": None, "error": None}  # fmt: skip
    # judged against what was applied: the override, and without the skipped knob
    rows = doc["drift"]["rows"]
    assert doc["holds"] is True and doc["drift"]["drifting"] == 0
    assert {r["knob"] for r in rows} == set(profiles.load("hygon-p800").knobs) - {"shm.huge"}
    assert next(r for r in rows if r["knob"] == "thp.enabled")["expected"] == "never"

    clear_ido(seedbox, SEED_CARD)  # a card reset
    doc = looked(seedbox)
    assert doc["holds"] is False and doc["drift"]["drifting"] == 1
    [row] = [r for r in doc["drift"]["rows"] if r["verdict"] == "drift"]
    assert row["knob"] == "pcie.ido" and row["target"].startswith(SEED_CARD)
    assert doc["applied"]["profile"] == "hygon-p800"  # drift does not change what was applied


def test_with_persist_and_watch_the_units_what_they_run_and_whether_it_is_there(seedbox) -> None:
    helpers.apply(DirView(seedbox), persist_unit=True, watch_unit=True)
    doc = looked(seedbox)
    boot, watch = doc["units"]
    for unit in (boot, watch):
        assert unit["present"] and unit["enabled"] and unit["ours"], unit
        assert unit["args"] == ["--profile", "hygon-p800"]
        assert unit["interpreter"] == os.path.abspath(sys.executable)
        assert unit["asserts"] == persist.dependencies()
    # Under --root the tree is the host: this machine's interpreter is not in it.
    assert boot["interpreter_exists"] is False and boot["missing"] == persist.dependencies()
    assert any("xputune.service needs" in w and "not there" in w for w in doc["warnings"])
    assert doc["holds"] is True  # the units are judged too, and are the applied ones
    assert any(r["knob"] == "persist" for r in doc["drift"]["rows"])

    for path in persist.dependencies():  # the interpreter and package, present in the tree
        minihost.write(seedbox, path, "")
    doc = looked(seedbox)
    assert doc["units"][0]["interpreter_exists"] is True and doc["units"][0]["missing"] == []
    assert not any("needs" in w for w in doc["warnings"])

    os.unlink(seedbox + persist.WATCH_WANTS_LINK)  # systemctl disable
    doc = looked(seedbox)
    assert doc["units"][1]["present"] and not doc["units"][1]["enabled"]
    assert doc["holds"] is False  # the disabled watch unit drifts


def test_a_unit_not_written_by_xputune_is_present_and_not_ours(seedbox) -> None:
    minihost.write(seedbox, persist.UNIT_PATH, "[Service]\nExecStart=/bin/sh -c 'x\n")
    unit = looked(seedbox)["units"][0]
    assert unit["present"] and not unit["ours"] and unit["args"] is None
    assert unit["interpreter"] is None and unit["interpreter_exists"] is None


def test_after_a_rollback_nothing_is_applied_and_the_rollback_is_dated(seedbox) -> None:
    helpers.apply(DirView(seedbox), persist_unit=True, watch_unit=True)
    engine.rollback_host(DirView(seedbox))
    doc = looked(seedbox)
    assert doc["applied"] is None and doc["drift"]["note"] == NO_PROFILE
    assert doc["journal"]["transactions"] == 0
    assert doc["journal"]["rolled_back"] is not None and doc["journal"]["rolled_back"][:2] == "20"
    assert not any(u["present"] or u["enabled"] for u in doc["units"])
    helpers.apply(DirView(seedbox))  # a new apply clears the mark
    doc = looked(seedbox)
    assert doc["journal"]["rolled_back"] is None and doc["applied"]["profile"] == "hygon-p800"


def _rewrite_journal(root: str, edit) -> None:
    """Change the journal's transactions as an older xputune (or a person) would have."""
    path = root + "/var/lib/xputune/" + JOURNAL
    with open(path) as fh:
        data = json.load(fh)
    for txn in data["transactions"]:
        edit(txn)
    data["checksum"] = checksum(data["transactions"], data["host_id"])
    with open(path, "w") as fh:
        json.dump(data, fh)


def test_a_journal_from_before_the_version_was_kept_says_unknown(mini) -> None:
    helpers.apply(DirView(mini))
    _rewrite_journal(mini, lambda txn: txn.pop("version"))
    doc = looked(mini)
    assert doc["applied"]["version"] == UNKNOWN and doc["holds"] is True


def test_an_interrupted_apply_is_named(mini) -> None:
    helpers.apply(DirView(mini))
    _rewrite_journal(mini, lambda txn: txn.update(state="in-progress", finished=None))
    doc = looked(mini)
    [txn] = Journal(state_dir(DirView(mini))).transactions
    assert doc["journal"]["interrupted"] == txn.id
    assert doc["applied"] is None  # no finished apply: nothing known to be held


def test_an_apply_of_another_shape_is_not_taken_for_a_selection(mini) -> None:
    helpers.apply(DirView(mini))
    _rewrite_journal(mini, lambda txn: txn.update(command=["rollback-test"]))
    assert looked(mini)["applied"] is None


def test_a_selection_that_cannot_be_rebuilt_is_a_note_not_an_error(mini, tmp_path) -> None:
    profile = tmp_path / "rc.yaml"
    profile.write_text("include: hygon-p800\n")
    helpers.apply(DirView(mini), profile=str(profile))
    profile.unlink()  # the profile file the apply named is gone
    doc = looked(mini)
    assert doc["applied"]["args"] == ["--profile", str(profile)]
    assert doc["holds"] is None and doc["drift"]["note"].startswith(
        f"cannot judge drift against {doc['applied']['profile']}"
    )


def test_a_damaged_journal_is_reported_and_the_rest_still_shown(mini) -> None:
    helpers.apply(DirView(mini), persist_unit=True)
    path = mini + "/var/lib/xputune/" + JOURNAL
    with open(path) as fh:
        text = fh.read()
    with open(path, "w") as fh:
        fh.write(text.replace('"hygon-p800"', '"generic"', 1))  # the checksum no longer fits
    doc = looked(mini)
    assert "checksum does not match" in doc["journal"]["error"]
    assert doc["applied"] is None and doc["holds"] is None
    assert doc["drift"]["note"].startswith("unknown: the journal could not be read")
    assert doc["units"][0]["present"]  # the rest is still read


def test_a_state_directory_others_may_write_is_not_trusted(mini) -> None:
    helpers.apply(DirView(mini))
    os.chmod(mini + "/var/lib/xputune", 0o777)
    doc = looked(mini)
    assert "writable by others" in doc["journal"]["error"] and doc["applied"] is None
    os.chmod(mini + "/var/lib/xputune", 0o700)


def test_the_quick_form_skips_the_check(mini) -> None:
    helpers.apply(DirView(mini))
    result = host_status(DirView(mini), drift=False)
    assert result.rows is None and result.drift_note == "not checked"
    assert result.applied is not None and result.applied.profile == "hygon-p800"


def test_a_recording_has_no_state_and_is_read_as_is() -> None:
    view = TarView(str(example_path("h3c-hygon-p800")))
    doc = status_document(view, host_status(view))
    assert doc["applied"] is None and doc["drift"]["note"] == NO_PROFILE


@pytest.mark.parametrize("drift", [True, False])
def test_status_of_the_mini_host_is_valid_json_either_way(mini, drift) -> None:
    helpers.apply(DirView(mini), persist_unit=True)
    view = DirView(mini)
    doc = status_document(view, host_status(view, drift=drift))
    assert doc["schema_version"] == 1 and doc["host"] == mini
    assert (doc["holds"] is True) == drift


def test_status_dates_an_apply_as_rollback_and_watch_do_in_utc_with_z(mini) -> None:
    """One clock form everywhere: status once printed the journal's local time with its
    offset (+0000) beside the rollback mark's and the watch's Z."""
    helpers.apply(DirView(mini))
    when = looked(mini)["applied"]["when"]
    assert len(when) == 20 and when.endswith("Z") and when[10] == "T", when
    # a journal written before: local time with its offset, shown in UTC
    _rewrite_journal(mini, lambda txn: txn.update(finished="2026-12-05T21:13:01+0800"))
    assert looked(mini)["applied"]["when"] == "2026-12-05T13:13:01Z"
    _rewrite_journal(mini, lambda txn: txn.update(finished="yesterday"))  # as it is
    assert looked(mini)["applied"]["when"] == "yesterday"
    engine.rollback_host(DirView(mini))
    rolled = looked(mini)["journal"]["rolled_back"]
    assert len(rolled) == 20 and rolled.endswith("Z")
