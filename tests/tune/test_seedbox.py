"""apply, check and rollback on a copy of the seed box (H3C, 2 Hygon, 8 x P800): a dry run
changes no byte, IDO touches bits 8 and 9 of every port on each card's path and nothing else,
rollback restores byte for byte, and a failed write or a kill at any step leaves the tree
untouched or restorable.

Marked slow: the recorded tree has thousands of files, and every step k is exercised.
"""

from __future__ import annotations

import os

import pytest

from tests.tune import helpers, minihost
from tests.tune.test_faults import crash_at
from tests.tune.views import FailingView
from xputune.host import pciconfig
from xputune.host.view import DirView
from xputune.tune import engine
from xputune.tune.errors import ApplyFailed

pytestmark = pytest.mark.slow


def card_path_configs(root: str) -> set[str]:
    """Config files of every card and every port on its path, from the probe's model."""
    topology = engine.discover(DirView(root))
    out = set()
    for card in topology.cards:
        for fn in topology.ports_on_path(card):
            out.add(os.path.normpath(fn.sysfs_path.lstrip("/") + "/config"))
    return out


def test_the_fixture_is_the_seed_box(seedbox):
    topology = engine.discover(DirView(seedbox))
    assert topology.cpu.vendor == "HygonGenuine"
    assert len(topology.cards) == 8
    assert len(card_path_configs(seedbox)) == 24  # 8 cards, 8 down, 4 up, 4 root ports


def test_dry_run_changes_no_byte(seedbox, run_cli):
    before = minihost.snapshot(seedbox, exclude="-")
    code, out, _ = run_cli("apply", "--root", seedbox, "--dry-run")
    assert code == 1 and "dry run: 27 change(s) planned, nothing written" in out
    assert minihost.snapshot(seedbox, exclude="-") == before


def test_apply_ido_sets_bits_8_and_9_on_every_path_config_and_nothing_else(seedbox, run_cli):
    before = minihost.snapshot(seedbox, exclude="-")
    code, _, err = run_cli("apply", "--root", seedbox, "--ido", "--only", "pcie.ido")
    assert code == 0, err
    after = minihost.snapshot(seedbox)
    diff = helpers.bit_diff({k: before[k] for k in after}, after)
    expected = card_path_configs(seedbox)
    assert set(diff) == expected
    for path in expected:
        cap = pciconfig.decode(before[path]).pcie  # decoded from the untouched bytes
        assert cap is not None
        assert diff[path] == [(cap.offset + pciconfig.PCIE_DEVCTL2 + 1, 0x03)], path


def test_apply_then_check_holds_then_rollback_restores_byte_for_byte(seedbox, run_cli):
    before = minihost.snapshot(seedbox)
    assert run_cli("check", "--root", seedbox)[0] == 1
    code, out, err = run_cli("apply", "--root", seedbox)
    assert code == 0, err
    assert "applied and verified 27 change(s)" in out
    code, out, _ = run_cli("check", "--root", seedbox)
    assert code == 0 and "all 29 settings hold" in out
    code, out, _ = run_cli("apply", "--root", seedbox)
    assert code == 0 and "nothing to change" in out
    code, out, err = run_cli("rollback", "--root", seedbox)
    assert code == 0, err
    assert "rolled back 27 change(s)" in out
    assert minihost.snapshot(seedbox) == before


def test_write_failure_at_every_step_leaves_the_tree_untouched(seedbox):
    tree = minihost.Tree(seedbox)
    topology = engine.discover(DirView(seedbox))
    steps = len(helpers.apply(DirView(seedbox), topology=topology, dry_run=True).changes)
    assert steps == 27
    for k in range(1, steps + 1):
        with pytest.raises(ApplyFailed, match=f"injected write failure #{k}"):
            helpers.apply(FailingView(seedbox, fail_at=k), topology=topology)
        assert tree.changed() == {}, f"write failure at step {k} left changes"


@pytest.mark.parametrize("when", ["before", "after"])
def test_kill_at_every_step_then_rollback_restores(seedbox, when):
    tree = minihost.Tree(seedbox)
    topology = engine.discover(DirView(seedbox))
    for k in range(1, 28):
        crash_at(seedbox, k, when, topology=topology)
        if when == "after":
            assert tree.changed(), f"the kill at step {k} came before any write"
        engine.rollback_host(DirView(seedbox))
        assert tree.changed() == {}, f"kill at step {k} ({when}) then rollback left changes"
