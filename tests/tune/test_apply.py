"""apply / check / rollback on a small tree: dry run, owned bits only, idempotence, refusals."""

from __future__ import annotations

import json
import os
import stat

import pytest

from tests.tune import helpers, minihost
from tests.tune.views import HardwiredView, LiveLikeView
from xputune.errors import HostError, PermissionRequired
from xputune.host.view import DirView, TarView
from xputune.tune import engine, preflight
from xputune.tune.errors import ApplyFailed, UnsupportedBits

DEVCTL2 = minihost.PCIE_AT + 0x28


def _config(fn: minihost.Fn) -> str:
    return os.path.normpath(f"sys/devices/{fn.rel}/config")


def test_dry_run_writes_nothing_not_even_the_state_dir(mini):
    before = minihost.snapshot(mini, exclude="-")
    result = helpers.apply(DirView(mini), dry_run=True)
    assert len(result.changes) == 9  # 6 PCIe functions + shmem_enabled + shm + numa
    assert minihost.snapshot(mini, exclude="-") == before
    assert not os.path.exists(os.path.join(mini, "var"))


def test_ido_sets_bits_8_and_9_on_the_card_paths_and_nothing_else(mini):
    before = minihost.snapshot(mini, exclude="-")
    helpers.apply(DirView(mini), only=["pcie.ido"])
    after = minihost.snapshot(mini)
    diff = helpers.bit_diff({k: before[k] for k in after}, after)
    expected = {_config(fn) for fn in minihost.FUNCTIONS if fn.bdf in minihost.CARD_PATH_BDFS}
    assert set(diff) == expected
    for path in expected:
        assert diff[path] == [(DEVCTL2 + 1, 0x03)]  # bits 8, 9 of devctl2, high byte


def test_check_holds_after_apply_and_rollback_restores_every_byte(mini):
    before = minihost.snapshot(mini)
    rows = helpers.check(DirView(mini))
    assert any(not r.holds for r in rows)
    helpers.apply(DirView(mini))
    assert all(r.holds for r in helpers.check(DirView(mini)))
    result = engine.rollback_host(DirView(mini))
    assert result.transactions == 1 and len(result.restored) == 9
    assert minihost.snapshot(mini) == before


def test_second_apply_changes_nothing_and_journals_nothing(mini):
    helpers.apply(DirView(mini))
    before = minihost.snapshot(mini, exclude="var/lib/xputune/lock")
    result = helpers.apply(DirView(mini))
    assert result.changes == [] and result.transaction is None
    assert minihost.snapshot(mini, exclude="var/lib/xputune/lock") == before


def test_two_applies_then_one_rollback_returns_to_the_very_start(mini):
    start = minihost.snapshot(mini)
    helpers.apply(DirView(mini), overrides={"thp.enabled": "never"}, only=["thp.enabled"])
    helpers.apply(DirView(mini))  # thp never -> madvise, plus everything else
    assert engine.rollback_host(DirView(mini)).transactions == 2
    assert minihost.snapshot(mini) == start


def test_journal_is_private_and_records_originals(mini):
    helpers.apply(DirView(mini))
    path = os.path.join(mini, "var/lib/xputune/journal.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    with open(path) as fh:
        journal = json.load(fh)
    [txn] = journal["transactions"]
    assert txn["state"] == "applied"
    numa = next(s for s in txn["steps"] if s["knob"] == "numa.balancing")
    assert (numa["original"], numa["new"], numa["original_text"]) == (1, 0, "on")
    assert not [f for f in os.listdir(os.path.dirname(path)) if ".tmp." in f]


def test_unsupported_ido_bits_fail_the_apply_and_roll_everything_back(mini):
    before = minihost.snapshot(mini)
    card = next(f for f in minihost.FUNCTIONS if f.bdf == "0000:04:00.0")
    view = HardwiredView(mini, {f"/sys/devices/{card.rel}/config"}, DEVCTL2, 0x0200)
    with pytest.raises(ApplyFailed) as err:
        helpers.apply(view)
    assert isinstance(err.value.__cause__, UnsupportedBits)
    assert "0000:04:00.0" in str(err.value) and "unsupported" in str(err.value)
    assert minihost.snapshot(mini) == before


def test_not_root_on_the_live_host_is_refused_before_anything(mini, monkeypatch):
    monkeypatch.setattr(preflight, "geteuid", lambda: 1000)
    before = minihost.snapshot(mini, exclude="-")
    with pytest.raises(PermissionRequired, match="needs root"):
        helpers.apply(LiveLikeView(mini))
    assert minihost.snapshot(mini, exclude="-") == before


def test_not_root_may_still_dry_run(mini, monkeypatch):
    monkeypatch.setattr(preflight, "geteuid", lambda: 1000)
    assert helpers.apply(LiveLikeView(mini), dry_run=True).changes


@pytest.mark.parametrize("level", ["integrity", "confidentiality"])
def test_lockdown_refuses_pcie_writes_before_any_change(tmp_path, level):
    root = minihost.build(str(tmp_path / "h"), lockdown=level)
    before = minihost.snapshot(root, exclude="-")
    with pytest.raises(PermissionRequired, match=f"lockdown is '{level}'"):
        helpers.apply(DirView(root))
    assert minihost.snapshot(root, exclude="-") == before
    result = helpers.apply(DirView(root), skip=["pcie.ido"])  # the way out the error names
    assert {c.knob for c in result.changes} == {"thp.shmem_enabled", "shm.huge", "numa.balancing"}


def test_lockdown_shows_as_a_warning_in_a_dry_run(tmp_path):
    root = minihost.build(str(tmp_path / "h"), lockdown="integrity")
    result = helpers.apply(DirView(root), dry_run=True)
    assert any("lockdown" in w for w in result.warnings)


def test_a_recording_is_read_only(mini, tmp_path):
    import tarfile

    tarball = str(tmp_path / "rec.tar.gz")
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(mini, arcname="rec")
    with pytest.raises(HostError, match="read-only"):
        helpers.apply(TarView(tarball))


def test_rollback_with_nothing_journaled_is_a_no_op(mini):
    assert engine.rollback_host(DirView(mini)).transactions == 0
    assert not os.path.exists(os.path.join(mini, "var"))


def test_platform_registers_are_written_only_when_named(mini, tmp_path):
    profile = tmp_path / "rc.yaml"
    profile.write_text(
        "include: hygon-p800\n"
        "platform_registers:\n"
        "  - {name: rc-ido, vendor: 0x1d94, device: 0x14ab, offset: 0x110, width: 32,\n"
        "     mask: 0x00010000, value: 0x00010000}\n"
    )
    before = minihost.snapshot(mini)
    result = helpers.apply(DirView(mini), profile=str(profile), only=["pcie.ido"])
    assert any("platform rc-ido" in c.label for c in result.changes)
    after = minihost.snapshot(mini)
    root_port = _config(minihost.FUNCTIONS[0])
    diff = helpers.bit_diff(before, after)
    assert diff[root_port] == [(DEVCTL2 + 1, 0x03), (0x112, 0x01)]
    engine.rollback_host(DirView(mini))
    assert minihost.snapshot(mini) == before


def test_no_ido_clears_the_bits_it_owns(mini):
    helpers.apply(DirView(mini), only=["pcie.ido"])
    result = helpers.apply(DirView(mini), overrides={"pcie.ido": False}, only=["pcie.ido"])
    assert len(result.changes) == 6
    assert all(
        r.actual == "off" for r in helpers.check(DirView(mini), None) if r.knob == "pcie.ido"
    )
