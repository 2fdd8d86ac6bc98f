"""What `xputune watch` holds: what the last apply set (the journal), what its own flags name,
or, with neither, nothing: it reports and changes nothing ("watch" is not "tune").

Driven through fleet/watch.run and Watcher on the 2-card mini host; drift is made the way a
card reset makes it (IDO bits cleared in a function's config space).
"""

from __future__ import annotations

import json
import os

import pytest

from tests.fleet.test_watch import Log, read_state
from tests.tune import helpers, minihost
from tests.tune.helpers import clear_ido, ido_bits
from xputune.errors import XputuneError
from xputune.fleet.events import Event
from xputune.fleet.watch import FROM_JOURNAL, FROM_NOTHING, HELD, LEFT, WatchConfig, Watcher, run
from xputune.host import pciconfig
from xputune.host.view import DirView
from xputune.tune import engine
from xputune.tune.journal import JOURNAL, Journal, checksum
from xputune.tune.lock import StateLock
from xputune.tune.state import state_dir
from xputune.tune.status import host_status, status_document
from xputune.tune.watchstate import WATCH_LOCK

CARD = "0000:03:00.0"  # xpu0 of the mini host


@pytest.fixture
def mini(tmp_path) -> str:
    return minihost.build(str(tmp_path / "host"))


def once(root: str, config: WatchConfig | None = None) -> tuple[int, Log]:
    log = Log()
    code = run(lambda: DirView(root), config or WatchConfig(), once=True, log=log)
    return code, log


def test_a_host_never_applied_is_reported_on_and_left_alone(mini) -> None:
    before = minihost.snapshot(mini)  # everything but the state directory
    code, log = once(mini)
    assert code == LEFT  # the host is not at the recommended profile, and nothing fixed it
    [said] = log.of("report-only")
    assert "no profile applied (no journal) and none given" in said
    assert "nothing is changed" in said and "profile=hygon-p800" in said
    assert log.of("drift") and not log.of("reapply") and not log.of("hold")
    assert minihost.snapshot(mini) == before
    assert Journal(state_dir(DirView(mini))).transactions == []  # nothing journaled
    state = read_state(mini)
    assert (state.profile, state.source) == ("hygon-p800", FROM_NOTHING)
    assert 'holds="the last apply\'s (journal), else nothing"' in log.of("start")[0]


def test_it_holds_what_the_last_apply_set_flags_included(mini) -> None:
    view = DirView(mini)
    helpers.apply(view, only=["pcie.ido", "numa.balancing"])
    minihost.write(mini, "/sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n")
    clear_ido(mini, CARD)
    code, log = once(mini)
    assert code == HELD  # fixed: the host is at what was applied
    [hold] = log.of("hold")
    assert f"source={FROM_JOURNAL} profile=hygon-p800" in hold
    assert "--skip thp.enabled" in hold  # the apply left THP alone, and so does the watch
    reapplied = log.of("reapply")
    assert reapplied and all("knob=pcie.ido" in line for line in reapplied)
    assert ido_bits(mini, CARD) == pciconfig.DEVCTL2_IDO
    with open(mini + "/sys/kernel/mm/transparent_hugepage/enabled") as fh:
        assert "[never]" in fh.read()  # not the watch's to change
    # the re-apply is journaled as the watch's, with the same selection
    last = Journal(state_dir(view)).last_applied()
    assert last is not None and last.command[0] == "watch"
    assert last.selection_args() == Journal(state_dir(view)).transactions[0].selection_args()


def test_an_apply_of_another_selection_while_it_runs_is_held_from_the_next_pass(mini) -> None:
    view = DirView(mini)
    helpers.apply(view)
    log = Log()
    watcher = Watcher(lambda: DirView(mini), state_dir(view), WatchConfig(), log)
    assert watcher.run_pass([Event("start")]).left == 0
    helpers.apply(view, overrides={"numa.balancing": "on"}, skip=["shm.huge"])
    watcher.run_pass([Event("poll")])
    watcher.run_pass([Event("poll")])  # same selection: no new line
    holds = log.of("hold")
    assert len(holds) == 2 and "--numa-balancing on" in holds[1] and "--force" in holds[1]
    assert not log.of("reapply")  # both passes found the host at what was applied


def test_its_own_flags_win_over_the_journal(mini) -> None:
    helpers.apply(DirView(mini), only=["numa.balancing"])
    code, log = once(mini, WatchConfig(profile="hygon-p800"))
    assert code == HELD
    [hold] = log.of("hold")
    assert "source=flags profile=hygon-p800" in hold
    assert {line.split(" knob=")[1].split()[0] for line in log.of("reapply")} >= {"pcie.ido"}
    assert WatchConfig(overrides={"pcie.ido": None}).explicit is False
    assert WatchConfig(overrides={"pcie.ido": True}).explicit
    assert WatchConfig(skip=["shm.huge"]).explicit and not WatchConfig(only=[]).explicit


def test_a_dry_run_is_1_on_drift_0_without_and_reads_the_journal_untouched(mini) -> None:
    helpers.apply(DirView(mini))
    folder = state_dir(DirView(mini))
    leftover = os.path.join(folder, JOURNAL + ".tmp.999999")
    with open(leftover, "w") as fh:
        fh.write("{}")
    assert once(mini, WatchConfig(dry_run=True))[0] == HELD
    clear_ido(mini, CARD)
    before = minihost.snapshot(mini, exclude="")
    code, log = once(mini, WatchConfig(dry_run=True))
    assert code == LEFT and log.of("drift") and not log.of("reapply")
    assert "source=journal" in log.of("hold")[0]
    assert minihost.snapshot(mini, exclude="") == before  # the leftover too: no lock held


def test_a_rolled_back_host_is_not_held(mini) -> None:
    helpers.apply(DirView(mini))
    engine.rollback_host(DirView(mini))
    before = minihost.snapshot(mini)
    code, log = once(mini)
    assert code == LEFT and log.of("report-only") and not log.of("reapply")
    assert minihost.snapshot(mini) == before


def test_a_journaled_selection_it_cannot_read_stops_it_with_one_line(mini) -> None:
    helpers.apply(DirView(mini))
    path = mini + "/var/lib/xputune/" + JOURNAL
    with open(path) as fh:
        data = json.load(fh)
    data["transactions"][0]["command"] = ["apply", "--profile", "hygon-p800", "--bogus"]
    data["checksum"] = checksum(data["transactions"], data["host_id"])
    with open(path, "w") as fh:
        json.dump(data, fh)
    with pytest.raises(XputuneError) as caught:
        once(mini)
    message = str(caught.value)
    assert message.startswith("cannot hold what the last apply set (journal transaction ")
    assert "'--bogus' is not one of apply's" in message and message.endswith("--profile")
    assert "\n" not in message


def test_status_shows_the_watch_its_profile_and_whether_it_runs(mini) -> None:
    helpers.apply(DirView(mini))
    clear_ido(mini, CARD)
    assert once(mini)[0] == HELD
    view = DirView(mini)
    doc = status_document(view, host_status(view))
    watch = doc["watch"]
    assert (watch["profile"], watch["source"], watch["paused"]) == ("hygon-p800", "journal", False)
    assert watch["passes"] == 1 and watch["events"] == {"start": 1}
    assert watch["reapplies"] == {"pcie.ido": 1} and watch["last_apply"]["success"] is True
    assert watch["running_pid"] is None  # it ran once and is gone
    assert doc["applied"]["by"] == "watch" and doc["holds"] is True
    with StateLock(state_dir(view), name=WATCH_LOCK):  # a watch agent holds its lock
        assert host_status(view).watch_pid == os.getpid()
