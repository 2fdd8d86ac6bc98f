"""apply --persist: a boot-time unit, written into the root, journaled, removed by rollback."""

from __future__ import annotations

import os

from tests.tune import helpers, minihost
from xputune.host.view import DirView
from xputune.tune import engine, persist


def test_persist_installs_an_enabled_unit_in_the_root(mini):
    result = helpers.apply(
        DirView(mini), persist_unit=True, overrides={"thp.enabled": "madvise"}, skip=["shm.huge"]
    )
    assert [c.label for c in result.changes if c.knob == "persist"] == [
        persist.UNIT_PATH,
        persist.WANTS_LINK,
    ]
    with open(mini + persist.UNIT_PATH) as fh:
        unit = fh.read()
    assert "Type=oneshot" in unit and "WantedBy=multi-user.target" in unit
    exec_line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert exec_line.endswith("apply --profile hygon-p800 --thp madvise --skip shm.huge --wait")
    assert "--root" not in exec_line  # the unit runs on that host, at its own root
    assert os.readlink(mini + persist.WANTS_LINK) == persist.UNIT_PATH


def test_persist_is_idempotent_and_rolled_back(mini):
    before = minihost.snapshot(mini, exclude="var")
    helpers.apply(DirView(mini), persist_unit=True)
    assert helpers.apply(DirView(mini), persist_unit=True).changes == []
    engine.rollback_host(DirView(mini))
    assert minihost.snapshot(mini, exclude="var") == before
    assert not os.path.lexists(mini + persist.WANTS_LINK)


def _boot_rows(view: DirView, **select: object) -> list:
    topology = engine.discover(view)
    selection = engine.select(topology, "hygon-p800", **select)
    return [r for r in engine.check(engine.context(view, topology, selection), selection)
            if r.knob == "persist"]  # fmt: skip


def test_check_has_no_boot_row_without_a_unit(mini):
    assert _boot_rows(DirView(mini)) == []


def test_check_reports_a_unit_that_would_apply_other_settings(mini):
    helpers.apply(DirView(mini), persist_unit=True)
    [row] = _boot_rows(DirView(mini))
    assert row.holds and row.actual == "enabled, same settings"

    [stale] = _boot_rows(DirView(mini), overrides={"thp.enabled": "never"})
    assert not stale.holds
    assert "applies --profile hygon-p800 --skip" not in stale.expected  # the profile's own knobs
    assert stale.fix.startswith("xputune apply --persist --profile hygon-p800 --thp never")

    assert _boot_rows(DirView(mini), skip=["shm.huge"]) == []  # a narrowed check: no verdict

    os.unlink(mini + persist.WANTS_LINK)
    [disabled] = _boot_rows(DirView(mini))
    assert not disabled.holds and disabled.actual == "installed, not enabled"


def test_installed_args_reads_only_our_units():
    ours = persist.unit_text(["--profile", "generic", "--no-ido"])
    assert persist.installed_args(ours) == ["--profile", "generic", "--no-ido"]
    assert persist.installed_args("[Service]\nExecStart=/bin/true\n") is None
    assert persist.installed_args("[Service]\nExecStart=/bin/sh -c 'unclosed\n") is None
