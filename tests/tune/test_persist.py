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
