"""apply --persist --watch: the watch service next to the boot unit, journaled, removed by
rollback, in systemd's own syntax (the checks test_unit_syntax.py makes of the boot unit)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.tune import helpers, minihost
from tests.tune.test_unit_syntax import NASTY
from xputune.errors import XputuneError
from xputune.host.view import DirView
from xputune.tune import engine, persist
from xputune.tune.errors import JournalError
from xputune.tune.journal import Step, Transaction
from xputune.tune.validate import validate


def _unit(root: str, path: str) -> str:
    with open(root + path) as fh:
        return fh.read()


def test_persist_watch_installs_both_units_and_rollback_removes_them(mini):
    before = minihost.snapshot(mini, exclude="var")
    result = helpers.apply(DirView(mini), persist_unit=True, watch_unit=True, skip=["shm.huge"])
    units = [
        persist.UNIT_PATH,
        persist.WANTS_LINK,
        persist.WATCH_UNIT_PATH,
        persist.WATCH_WANTS_LINK,
    ]
    assert [c.label for c in result.changes if c.knob == "persist"] == units
    assert os.readlink(mini + persist.WATCH_WANTS_LINK) == persist.WATCH_UNIT_PATH
    unit = _unit(mini, persist.WATCH_UNIT_PATH)
    assert "Restart=on-failure" in unit and "Type=simple" in unit
    assert "After=xputune.service systemd-udevd.service" in unit
    assert "WantedBy=multi-user.target" in unit
    exec_line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert exec_line.endswith(" -m xputune watch --profile hygon-p800 --skip shm.huge")
    assert "--root" not in exec_line and "--wait" not in exec_line
    assert persist.installed_args(unit, "watch") == [
        "--profile",
        "hygon-p800",
        "--skip",
        "shm.huge",
    ]
    assert persist.installed_args(unit) is None  # not a boot unit
    # the same flags as the boot unit: both keep one selection
    boot_args = persist.installed_args(_unit(mini, persist.UNIT_PATH))
    assert boot_args == persist.installed_args(unit, "watch")

    again = helpers.apply(DirView(mini), persist_unit=True, watch_unit=True, skip=["shm.huge"])
    assert again.changes == []
    rolled = engine.rollback_host(DirView(mini))
    assert rolled.warnings == []  # under --root no systemctl is run
    assert minihost.snapshot(mini, exclude="var") == before
    assert not os.path.lexists(mini + persist.WATCH_UNIT_PATH)


def _unit_rows(view: DirView, **select: object) -> dict[str, object]:
    topology = engine.discover(view)
    selection = engine.select(topology, "hygon-p800", **select)
    rows = engine.check(engine.context(view, topology, selection), selection)
    return {r.target: r for r in rows if r.knob == "persist"}


def test_persist_alone_leaves_an_installed_watch_unit_and_check_judges_it(mini):
    helpers.apply(DirView(mini), persist_unit=True, watch_unit=True)
    never = {"thp.enabled": "never"}
    other = helpers.apply(DirView(mini), persist_unit=True, overrides=never)
    assert {c.label for c in other.changes if c.knob == "persist"} == {persist.UNIT_PATH}
    rows = _unit_rows(DirView(mini), overrides=never)
    assert rows[persist.UNIT_PATH].holds
    watch = rows[persist.WATCH_UNIT_PATH]  # still watches the old selection: drift, with a fix
    assert not watch.holds and watch.actual == "watches --profile hygon-p800"
    assert watch.fix == "xputune apply --persist --watch --profile hygon-p800 --thp never --force"
    os.unlink(mini + persist.WATCH_WANTS_LINK)
    assert _unit_rows(DirView(mini))[persist.WATCH_UNIT_PATH].actual == "installed, not enabled"
    helpers.apply(DirView(mini), persist_unit=True, watch_unit=True, overrides=never)
    assert all(r.holds for r in _unit_rows(DirView(mini), overrides=never).values())


def test_watch_without_persist_is_one_line(run_cli, mini):
    code, out, err = run_cli("apply", "--root", mini, "--watch")
    assert code == 2 and out == ""
    assert err == (
        "xputune: error: --watch installs the watch service next to the boot unit: "
        "give --persist too\n"
    )
    assert not os.path.exists(mini + "/etc")


def test_apply_persist_watch_on_the_command_line(run_cli, mini):
    code, out, err = run_cli("apply", "--root", mini, "--persist", "--watch", "--dry-run")
    assert code == 1, err  # a dry run with changes to make
    assert f"+{persist.WATCH_UNIT_PATH}: watch and re-apply" in out
    assert not os.path.exists(mini + "/etc")
    code, _, err = run_cli("apply", "--root", mini, "--persist", "--watch")
    assert code == 0, err
    assert os.path.islink(mini + persist.WATCH_WANTS_LINK)
    code, out, _ = run_cli("rollback", "--root", mini)
    assert code == 0 and f"restored persist {persist.WATCH_UNIT_PATH}" in out
    assert not os.path.exists(mini + persist.WATCH_UNIT_PATH)


@pytest.mark.parametrize("word", NASTY)
def test_each_word_of_the_watch_command_parses_back_to_itself(word):
    text = persist.watch_unit_text(["--profile", word])
    line = next(x for x in text.splitlines() if x.startswith("ExecStart="))
    assert persist.parse_exec(line[len("ExecStart=") :]) == [
        sys.executable, "-m", "xputune", "watch", "--profile", word]  # fmt: skip
    assert persist.installed_args(text, "watch") == ["--profile", word]


def _step(kind: str, path: str, new: object) -> Step:
    return Step(1, "persist", kind, {"path": path}, path, None, new)


def test_rollback_validates_watch_unit_steps(mini):
    view = DirView(mini)
    good = [
        _step("file", persist.WATCH_UNIT_PATH, "[Unit]\n"),
        _step("symlink", persist.WATCH_WANTS_LINK, persist.WATCH_UNIT_PATH),
    ]
    validate(view, [Transaction("t", "now", "applied", "p", [], good)])
    for bad, why in (
        (_step("symlink", persist.WATCH_WANTS_LINK, persist.UNIT_PATH), "not an xputune-watch"),
        (_step("symlink", persist.WANTS_LINK, persist.WATCH_UNIT_PATH), "not an xputune.service"),
        (_step("file", "/etc/systemd/system/other.service", ""), "persist may only write"),
    ):
        with pytest.raises(JournalError, match=why):
            validate(view, [Transaction("t", "now", "applied", "p", [], [bad])])


SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze not installed (apt systemd)")
def test_systemd_analyze_verify_accepts_the_watch_unit(tmp_path):
    odd = tmp_path / "we%h $HOME \"q' ;x"
    odd.mkdir()
    profile = odd / "rc.yaml"
    profile.write_text("include: hygon-p800\n")
    args = ["--profile", str(profile), "--thp", "madvise"]

    def verify(text: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / persist.WATCH_UNIT_NAME
        path.write_text(text)
        return subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", str(path)],
                              capture_output=True, text=True, check=False, timeout=60)  # fmt: skip

    done = verify(persist.watch_unit_text(args))
    assert done.returncode == 0, done.stderr
    assert "Failed" not in done.stderr and "Invalid" not in done.stderr, done.stderr
    assert verify(persist.watch_unit_text(args).replace("%%h", "%Z")).returncode != 0


def test_watch_on_a_live_host_without_pyudev_is_refused_before_anything(mini, monkeypatch):
    from tests.tune.views import LiveLikeView

    monkeypatch.setitem(sys.modules, "pyudev", None)  # find_spec: as if not installed
    before = minihost.snapshot(mini, exclude="-")
    with pytest.raises(XputuneError, match=r"needs pyudev on this host: pip install"):
        helpers.apply(LiveLikeView(mini), persist_unit=True, watch_unit=True)
    assert minihost.snapshot(mini, exclude="-") == before
