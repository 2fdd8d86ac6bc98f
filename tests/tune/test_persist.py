"""apply --persist: a boot-time unit, written into the root, journaled, removed by rollback."""

from __future__ import annotations

import os
import sys

import pytest

from tests.tune import helpers, minihost
from xputune.errors import HostError
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


def test_a_relative_profile_reaches_the_unit_as_an_absolute_path(mini, tmp_path, monkeypatch):
    """systemd starts units in /: a relative --profile must be resolved at apply time."""
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub/rc.yaml").write_text("include: hygon-p800\n")
    (work / "top.yaml").write_text("include: hygon-p800\n")
    monkeypatch.chdir(work)
    for given, absolute in (("sub/rc.yaml", work / "sub/rc.yaml"), ("top.yaml", work / "top.yaml"),
                            ("./sub/../top.yaml", work / "top.yaml")):  # fmt: skip
        helpers.apply(DirView(mini), profile=given, persist_unit=True, watch_unit=True)
        for path, verb in ((persist.UNIT_PATH, "apply"), (persist.WATCH_UNIT_PATH, "watch")):
            with open(mini + path) as fh:
                unit = fh.read()
            args = persist.installed_args(unit, verb)
            assert args is not None and args[:2] == ["--profile", str(absolute)], unit
        # check, from the same folder, judges the unit by the same absolute path
        rows = [r for r in helpers.check(DirView(mini), given) if r.knob == "persist"]
        assert rows and all(r.holds for r in rows), rows
    monkeypatch.chdir(tmp_path)  # elsewhere, "top.yaml" is another file: the unit drifts
    (tmp_path / "top.yaml").write_text("include: hygon-p800\n")
    rows = [r for r in helpers.check(DirView(mini), "top.yaml") if r.knob == "persist"]
    assert rows and not any(r.holds for r in rows)
    assert str(work / "top.yaml") in rows[0].actual


def test_profile_names_and_absolute_paths_are_kept_as_given(tmp_path):
    assert persist.unit_args(["--profile", "hygon-p800", "--skip", "a/b"], "/x") == [
        "--profile", "hygon-p800", "--skip", "a/b"]  # fmt: skip
    assert persist.unit_args(["--profile", "/etc/xputune/p.yaml"], "/x") == [
        "--profile", "/etc/xputune/p.yaml"]  # fmt: skip
    assert persist.unit_args(["--profile", "p.yml"], "/srv") == ["--profile", "/srv/p.yml"]
    assert persist.unit_args(["--profile"], "/srv") == ["--profile"]


def test_the_interpreter_is_named_by_absolute_path(monkeypatch):
    line = next(x for x in persist.unit_text([]).splitlines() if x.startswith("ExecStart="))
    assert persist.parse_exec(line[len("ExecStart=") :])[0] == os.path.abspath(sys.executable)
    assert os.path.isabs(persist.parse_exec(line[len("ExecStart=") :])[0])
    monkeypatch.setattr(sys, "executable", "")
    with pytest.raises(HostError, match=r"sys\.executable is empty"):
        persist.unit_text([])
