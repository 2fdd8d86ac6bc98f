"""xputune watch: re-verify, re-apply drift through the journal, back off a flapping card.

Trees are writable copies (the seed example for the end-to-end run, the 2-card mini host
elsewhere); drift is made by hand, the way a card reset makes it: IDO bits cleared in the
binary config space of a card or a bridge port. Intervals are 0.05 s.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.trees import copy_tree
from tests.tune import helpers, minihost
from tests.tune.helpers import SEED_CARD, clear_ido, ido_bits
from xputune.errors import XputuneError
from xputune.fleet.events import Event, PollSource, Stopper, UdevSource, Watched, event_of
from xputune.fleet.watch import (
    HELD,
    LEFT,
    WATCH_LOCK,
    Limits,
    RateLimiter,
    WatchConfig,
    Watcher,
    logfmt,
    run,
)
from xputune.fleet.watchstate import STATE_PATH, WatchState
from xputune.host import pciconfig
from xputune.host.view import DirView
from xputune.tune import engine
from xputune.tune.journal import Journal, mark_rolled_back, rolled_back_at
from xputune.tune.lock import StateLock
from xputune.tune.state import state_dir

REPO = Path(__file__).resolve().parents[2]
SEED_PORT = "0000:22:01.0"
MINI_CARD = "0000:04:00.0"  # xpu1 of the mini host


# -- helpers -----------------------------------------------------------------------------------
def read_state(root: str) -> WatchState:
    with open(root + STATE_PATH) as fh:
        return WatchState.from_dict(json.load(fh))


def passes(root: str, pid: int | None = None) -> int:
    """Passes the watch has written to its state file (0 before its first)."""
    try:
        state = read_state(root)
    except FileNotFoundError:
        return 0
    return state.passes if pid is None or state.pid == pid else 0


class Log(list):
    """The watch's log lines, appended from the watch's thread."""

    def __call__(self, line: str) -> None:
        self.append(line)

    def of(self, event: str) -> list[str]:
        return [line for line in self if f" event={event} " in line + " "]


def wait_for(predicate, timeout: float = 5.0) -> float:
    """Seconds until predicate() held; fails after `timeout`."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            pytest.fail("timed out")
        time.sleep(0.005)
    return time.monotonic() - start


class Agent:
    """`run` in a thread (the loop the CLI runs), stopped like SIGTERM stops it."""

    def __init__(self, root: str, config: WatchConfig) -> None:
        self.log = Log()
        self.stopper = Stopper()
        self.code: int | None = None
        self.thread = threading.Thread(
            target=self._run, args=(root, config), daemon=True, name="watch"
        )

    def _run(self, root: str, config: WatchConfig) -> None:
        self.code = run(lambda: DirView(root), config, source=PollSource,
                        stopper=self.stopper, log=self.log)  # fmt: skip

    def __enter__(self) -> Agent:
        self.thread.start()
        wait_for(lambda: self.log.of("start"))
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopper.stop("test")
        self.thread.join(10)
        assert not self.thread.is_alive()
        self.stopper.close()


@pytest.fixture
def seed(tmp_path) -> str:
    return str(copy_tree("h3c-hygon-p800", tmp_path / "seed"))


@pytest.fixture
def mini(tmp_path) -> str:
    return minihost.build(str(tmp_path / "host"))


# -- the budget of a place ---------------------------------------------------------------------
def test_limiter_spends_the_budget_then_backs_off_doubling_and_forgives_a_calm_place() -> None:
    limiter = RateLimiter(Limits(reapplies=3, window=100, backoff=10, backoff_max=25))
    key = ("pcie.ido", "0000:24:00.0 card xpu1")
    for t in (0, 1, 2):
        assert limiter.decide(key, t).allowed
        limiter.record(key, t)
    first = limiter.decide(key, 3)
    assert not first.allowed and first.started and first.spent == 3
    assert (first.delay, first.until) == (10, 13)
    later = limiter.decide(key, 12)  # still inside: refused, and not logged again
    assert not later.allowed and not later.started
    assert limiter.backing_off(12) == [(key, 13, 10)]
    assert limiter.decide(key, 13).allowed  # after the backoff: one try
    limiter.record(key, 13)
    second = limiter.decide(key, 14)  # flaps again within the window: twice as long
    assert second.started and second.delay == 20 and second.spent == 1
    assert limiter.decide(key, 34).allowed
    limiter.record(key, 34)
    assert limiter.decide(key, 35).delay == 25  # capped at backoff_max
    assert limiter.backing_off(61) == []
    # calm for a whole window after the last backoff: the full budget again
    for t in (200, 201, 202):
        assert limiter.decide(key, t).allowed
        limiter.record(key, t)
    assert limiter.decide(key, 203).delay == 10
    other = ("pcie.ido", "0000:23:00.0 card xpu0")  # budgets are per place
    assert limiter.decide(other, 203).allowed


@pytest.mark.parametrize(
    "limits", [dict(reapplies=0), dict(window=0), dict(backoff=-1), dict(backoff=10, backoff_max=5)]
)
def test_limits_refuse_nonsense(limits) -> None:
    with pytest.raises(XputuneError):
        Limits(**limits)


def test_logfmt_quotes_what_needs_it() -> None:
    line = logfmt("drift", 0, knob="pcie.ido", place='0000:23:00.0 card "x"', empty="", gone=None)
    assert line == (
        'ts=1970-01-01T00:00:00Z event=drift knob=pcie.ido place="0000:23:00.0 card \\"x\\"" '
        'empty=""'
    )


# -- udev: real pyudev devices of this machine -------------------------------------------------
def _real_pci_device():
    pyudev = pytest.importorskip("pyudev")
    names = sorted(os.listdir("/sys/bus/pci/devices")) if os.path.isdir("/sys/bus/pci") else []
    if not names:
        pytest.skip("no PCI devices in /sys")
    context = pyudev.Context()
    return (
        pyudev,
        context,
        pyudev.Devices.from_sys_path(context, os.path.realpath(f"/sys/bus/pci/devices/{names[0]}")),
    )


def test_a_real_pci_device_event_maps_to_the_watched_function() -> None:
    _, _, device = _real_pci_device()
    assert device.subsystem == "pci"
    watched = Watched(ports={device.sys_name: "card test0"})
    for action in ("add", "bind", "change"):
        assert event_of(device, watched, action) == Event(action, device.sys_name, "card test0")
    for action in ("remove", "unbind", "move"):
        assert event_of(device, watched, action) is None
    assert event_of(device, Watched(), "bind") is None  # a function that is not watched
    assert event_of(device, watched) is None  # read from /sys, not from a monitor: no action


def test_a_real_device_below_a_watched_port_counts_and_other_subsystems_do_not() -> None:
    pyudev, context, device = _real_pci_device()
    parent = device.parent  # the host bridge (or a bridge port) above it
    bdf = parent.sys_name
    watched = Watched(ports={bdf: "root port (xpu0)"}, paths={parent.device_path: bdf})
    event = event_of(device, watched, "add")
    assert event == Event("add", device.sys_name, f"below {bdf} root port (xpu0)")
    lo = pyudev.Devices.from_sys_path(context, "/sys/devices/virtual/net/lo")
    assert lo.subsystem == "net"
    assert event_of(lo, Watched(ports={"lo": "x"}, paths={"/devices/virtual": "y"}), "add") is None


def test_watched_functions_of_the_seed_box_are_its_cards_and_their_ports() -> None:
    topology = engine.discover(DirView(str(copy_tree_cached())))
    watched = Watched.of(topology)
    assert len(watched.ports) == 24 and watched.ports[SEED_CARD] == "card xpu1"
    assert watched.ports[SEED_PORT] == "switch downstream (xpu1)"
    slot = "/devices/pci0000:20/0000:20:03.1/0000:21:00.0/0000:22:01.0"
    hotplug = watched.match("add", "pci", "0000:25:00.0", f"{slot}/0000:25:00.0")
    assert hotplug == Event("add", "0000:25:00.0", f"below {SEED_PORT} switch downstream (xpu1)")
    assert watched.match("add", "pci", "0000:05:00.0", "/devices/pci0000:00/0000:05:00.0") is None


def copy_tree_cached() -> Path:
    from tests.fixtures.trees import host_tree

    return host_tree("h3c-hygon-p800")  # read only


def test_the_udev_source_listens_and_a_stop_ends_its_wait() -> None:
    pytest.importorskip("pyudev")
    try:
        source = UdevSource()
    except XputuneError as exc:
        pytest.skip(f"no udev netlink here: {exc}")
    stopper = Stopper()
    try:
        assert source.wait(0.05, stopper) == [Event("interval")]  # nothing happened: the tick
        stopper.stop()
        start = time.monotonic()
        assert source.wait(30, stopper) == []
        assert time.monotonic() - start < 1
    finally:
        source.close()
        stopper.close()


def test_a_live_watch_without_pyudev_says_which_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pyudev", None)
    with pytest.raises(XputuneError, match=r"pip install 'xputune\[udev\]'"):
        UdevSource()


def test_the_poll_source_ticks_and_stops() -> None:
    stopper = Stopper()
    try:
        assert PollSource().wait(0.01, stopper) == [Event("poll")]
        stopper.stop()
        assert PollSource().wait(30, stopper) == []
    finally:
        stopper.close()


# -- --once ------------------------------------------------------------------------------------
def test_once_is_0_when_fixed_or_held_and_1_when_a_rollback_leaves_drift(run_cli, mini) -> None:
    code, out, err = run_cli("watch", "--once", "--root", mini, "--profile", "hygon-p800")
    assert code == HELD == 0, err  # drift was found and fixed: the host is at its profile
    assert out == ""
    reapplied = [line for line in err.splitlines() if " event=reapply " in line]
    assert len(reapplied) == len(Journal(state_dir(DirView(mini))).active()[0].steps)
    assert "event=done drift=" in err and "status=0" in err
    assert run_cli("check", "--root", mini, "--profile", "hygon-p800")[0] == 0

    code, _, err = run_cli("watch", "--once", "--root", mini, "--profile", "hygon-p800")
    assert code == HELD and " event=reapply " not in err  # it held: the same status

    assert run_cli("rollback", "--root", mini)[0] == 0
    before = minihost.snapshot(mini)
    code, _, err = run_cli("watch", "--once", "--root", mini, "--profile", "hygon-p800")
    assert code == LEFT == 1
    assert " event=paused " in err and "until the next xputune apply" in err
    assert " event=reapply " not in err
    assert minihost.snapshot(mini) == before  # a rollback wins: nothing re-applied

    assert run_cli("apply", "--root", mini, "--profile", "hygon-p800")[0] == 0  # clears it
    clear_ido(mini, "0000:03:00.0")
    code, _, err = run_cli("watch", "--once", "--root", mini)  # holds what apply set
    assert code == HELD and 'place="0000:03:00.0 card xpu0"' in err


def test_a_dry_run_reports_drift_and_changes_nothing(run_cli, mini, tmp_path) -> None:
    before = minihost.snapshot(mini, exclude="")
    prom = tmp_path / "prom"
    prom.mkdir()
    code, _, err = run_cli(
        "watch", "--once", "--dry-run", "--root", mini, "--profile", "hygon-p800",
        "--textfile", str(prom),
    )  # fmt: skip
    assert code == LEFT == 1, err
    assert "mode=dry-run" in err and "event=drift" in err and "event=reapply" not in err
    assert minihost.snapshot(mini, exclude="") == before  # no change, no state dir, no lock
    assert "xputune_knob_drift" in (prom / "xputune.prom").read_text()  # outputs still written
    # A recording cannot be changed, but it can be asked what a watch would do there.
    code, _, err = run_cli("watch", "--once", "-n", "--example", "h3c-hygon-p800")
    assert code == LEFT and "knob=pcie.ido" in err and "event=done" in err


def test_a_second_watch_on_the_same_host_is_refused(run_cli, mini) -> None:
    with StateLock(state_dir(DirView(mini)), name=WATCH_LOCK):
        code, out, err = run_cli("watch", "--once", "--root", mini)
    assert code == 5 and out == ""
    assert (
        err.startswith("xputune: error: another xputune watch is running") and err.count("\n") == 1
    )


def test_bad_flags_are_one_line(run_cli, mini, tmp_path) -> None:
    code, _, err = run_cli("watch", "--once", "--root", mini, "--textfile", str(tmp_path / "no"))
    assert code == 2 and err == f"xputune: error: {tmp_path / 'no'}: no such directory\n"
    code, _, err = run_cli("watch", "--root", mini, "--interval", "0")
    assert code == 2 and err.startswith("xputune: error: ") and "--interval" in err
    code, _, err = run_cli("watch", "--once", "--example", "h3c-hygon-p800")
    assert code == 2 and "read-only recording" in err


# -- the loop, end to end on the seed box ------------------------------------------------------
def test_bits_cleared_by_hand_are_back_within_one_interval_with_the_log_line(seed) -> None:
    interval = 0.1
    helpers.apply(DirView(seed), profile=None)  # the recommended profile; the watch keeps it
    with Agent(seed, WatchConfig(interval=interval)) as agent:
        wait_for(lambda: passes(seed) >= 1)
        assert ido_bits(seed, SEED_CARD) == pciconfig.DEVCTL2_IDO
        done = len(agent.log.of("reapply"))
        clear_ido(seed, SEED_CARD)
        clear_ido(seed, SEED_PORT)
        took = wait_for(lambda: ido_bits(seed, SEED_CARD) and ido_bits(seed, SEED_PORT))
        wait_for(lambda: len(agent.log.of("reapply")) == done + 2)
    assert took < interval + 0.5  # one tick, plus a pass on a loaded machine
    assert agent.code == 0
    new = agent.log.of("reapply")[done:]
    assert {line.split(" place=")[1].split('" ')[0] for line in new} == {
        f'"{SEED_CARD} card xpu1', f'"{SEED_PORT} switch downstream (xpu1)'}  # fmt: skip
    assert all("before=off after=on attempt=" in line for line in new)
    drift = agent.log.of("drift")[-2:]
    assert all("expected=on actual=off" in line for line in drift)
    assert agent.log[-1].split(" ", 2)[1:] == [
        "event=stop",
        f"signal=test passes={read_state(seed).passes}",
    ]
    [hold] = agent.log.of("hold")  # said once, not again after the watch's own re-apply
    assert 'source=journal profile=hygon-p800 args="--profile hygon-p800" transaction=' in hold
    # what watch re-applied is journaled like an apply: rollback undoes it all
    assert engine.rollback_host(DirView(seed)).transactions == 2  # the apply and the fix


def test_a_flapping_card_backs_off_instead_of_looping(mini) -> None:
    limits = Limits(reapplies=2, window=60, backoff=30)
    config = WatchConfig(profile="hygon-p800", interval=0.05, limits=limits)
    run(lambda: DirView(mini), config, once=True, log=Log())  # tune it first
    stop = threading.Event()

    def flap() -> None:  # the card resets over and over
        while not stop.is_set():
            if ido_bits(mini, MINI_CARD):
                clear_ido(mini, MINI_CARD)
            time.sleep(0.01)

    flapper = threading.Thread(target=flap, daemon=True)
    with Agent(mini, config) as agent:
        flapper.start()
        wait_for(lambda: agent.log.of("backoff"))
        done = passes(mini)
        wait_for(lambda: passes(mini) >= done + 5)  # five more passes: no more tries
        stop.set()
        flapper.join()
    # Two tries, then it is left alone. A try may also fail: the card can reset between the
    # write and its read-back (then the transaction is rolled back, and the try still counts).
    tried = [line for line in agent.log.of("reapply") if MINI_CARD in line]
    failed = [line for line in agent.log.of("reapply-failed") if MINI_CARD in line]
    assert len(tried) + len(failed) == 2 and tried
    [backoff] = agent.log.of("backoff")
    assert f'place="{MINI_CARD} card xpu1"' in backoff
    assert "reapplies=2 window=60s delay=30s until=" in backoff
    assert ido_bits(mini, MINI_CARD) == 0  # left alone while it backs off
    state = read_state(mini)
    assert [(b.knob, b.place, b.delay) for b in state.backoff] == [
        ("pcie.ido", f"{MINI_CARD} card xpu1", 30)]  # fmt: skip
    assert state.reapplies["pcie.ido"] == 6 + len(tried)
    assert state.failures.get("pcie.ido", 0) == len(failed)
    assert 6 + 2 <= state.drift["pcie.ido"] <= 6 + 3


def test_backoff_doubles_while_the_card_keeps_flapping(mini) -> None:
    now = [1000.0]
    log = Log()
    config = WatchConfig(profile="hygon-p800", limits=Limits(reapplies=1, window=100, backoff=10))
    folder = state_dir(DirView(mini))
    watcher = Watcher(lambda: DirView(mini), folder, config, log, clock=lambda: now[0])
    card = "0000:03:00.0"
    assert watcher.run_pass([Event("start")]).fixed > 0
    delays = []
    for _ in range(6):
        clear_ido(mini, card)
        result = watcher.run_pass([Event("poll")])
        if result.fixed == 0:
            delays.append(watcher.limiter.backing_off(now[0])[0][2])
            now[0] = watcher.limiter.backing_off(now[0])[0][1]  # wait the backoff out
        else:
            now[0] += 1
    assert [line.split(" delay=")[1].split()[0] for line in log.of("backoff")] == [
        "10s",
        "20s",
        "40s",
    ]
    assert delays == [10, 20, 40]


# -- SIGTERM on a real process -----------------------------------------------------------------
def test_sigterm_stops_a_real_watch_cleanly(mini) -> None:
    run(lambda: DirView(mini), WatchConfig(profile="hygon-p800"), once=True, log=Log())
    proc = subprocess.Popen(
        [sys.executable, "-m", "xputune", "watch", "--root", mini, "--interval", "0.05",
         "--profile", "hygon-p800"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        wait_for(lambda: passes(mini, proc.pid) > 3, 20)
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out == ""
    lines = err.splitlines()
    assert " event=start " in lines[0] and "source=poll interval=0.05s" in lines[0]
    assert " event=stop signal=SIGTERM passes=" in lines[-1]
    fd = os.open(mini + "/var/lib/xputune/" + WATCH_LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released: no BlockingIOError
    finally:
        os.close(fd)


# -- outputs: metrics, labels, state -----------------------------------------------------------
def test_each_pass_writes_the_textfile_and_the_nfd_file(run_cli, mini, tmp_path) -> None:
    prom, nfd = tmp_path / "prom", tmp_path / "nfd"
    prom.mkdir()
    nfd.mkdir()
    args = ("watch", "--once", "--root", mini, "--profile", "hygon-p800",
            "--textfile", str(prom), "--nfd", str(nfd))  # fmt: skip
    assert run_cli(*args)[0] == HELD
    assert os.listdir(prom) == ["xputune.prom"] and os.listdir(nfd) == ["xputune"]
    labels = (nfd / "xputune").read_text()
    assert "xputune.io/ido=on" in labels and "xputune.io/profile-holds=true" in labels
    fams = {f.name: f for f in text_string_to_metric_families((prom / "xputune.prom").read_text())}
    assert fams["xputune_profile_holds"].samples[0].value == 1  # the state after the re-apply
    assert fams["xputune_reapply"].type == "counter"
    assert fams["xputune_last_apply_success"].samples[0].value == 1


def test_metrics_adds_the_watch_state(run_cli, mini) -> None:
    limits = Limits(reapplies=2, window=100, backoff=50)
    config = WatchConfig(profile="hygon-p800", limits=limits)
    folder = state_dir(DirView(mini))
    watcher = Watcher(lambda: DirView(mini), folder, config, Log())
    watcher.run_pass([Event("start")])
    clear_ido(mini, "0000:03:00.0")
    watcher.run_pass([Event("bind", "0000:03:00.0", "card xpu0")])
    clear_ido(mini, "0000:03:00.0")
    watcher.run_pass([Event("poll")])  # budget spent: backs off

    code, out, err = run_cli("metrics", "--root", mini, "--profile", "hygon-p800")
    assert code == 0 and err == ""
    fams = {f.name: f for f in text_string_to_metric_families(out)}
    assert all(name.startswith("xputune_") for name in fams)

    def by(name: str, key: str) -> dict[str, float]:
        return {s.labels[key]: s.value for s in fams[name].samples}

    for name in ("xputune_watch_events", "xputune_reapply", "xputune_drift_detected",
                 "xputune_reapply_failures", "xputune_watch_passes"):  # fmt: skip
        assert fams[name].type == "counter", name
        assert all(s.name == name + "_total" for s in fams[name].samples)
    assert by("xputune_watch_events", "kind") == {"start": 1, "bind": 1, "poll": 1}
    places = 6  # the mini host's two cards, their two downstream ports, the upstream and root
    assert by("xputune_reapply", "knob")["pcie.ido"] == places + 1
    assert by("xputune_drift_detected", "knob")["pcie.ido"] == places + 2
    assert by("xputune_backoff_active", "knob")["pcie.ido"] == 1
    assert by("xputune_backoff_active", "knob")["thp.enabled"] == 0
    until = fams["xputune_backoff_until_timestamp_seconds"].samples
    assert [s.labels["place"] for s in until] == ["0000:03:00.0 card xpu0"]
    assert until[0].value > time.time() + 40
    assert fams["xputune_last_apply_success"].samples[0].value == 1
    assert abs(fams["xputune_last_apply_timestamp_seconds"].samples[0].value - time.time()) < 60
    assert fams["xputune_watch_passes"].samples[0].value == 3
    assert fams["xputune_watch_paused"].samples[0].value == 0
    assert fams["xputune_knob_drift"].samples  # the host's own metrics are still there


def test_metrics_warns_about_an_odd_state_file_and_goes_on(run_cli, mini) -> None:
    minihost.write(mini, STATE_PATH, '{"schema_version": 1, "passes": "many"}')
    code, out, err = run_cli("metrics", "--root", mini)
    assert code == 0 and "xputune_cards" in out and "xputune_watch" not in out
    assert err.startswith("xputune: warning: watch state") and "passes" in err


def test_counters_carry_over_an_agent_restart(mini) -> None:
    for _ in range(2):
        run(lambda: DirView(mini), WatchConfig(profile="hygon-p800"), once=True, log=Log())
    state = read_state(mini)
    assert state.events == {"start": 2} and state.passes == 2


# -- a rollback wins, also when it lands mid-pass ----------------------------------------------
def test_a_reapply_never_undoes_a_rollback_that_landed_after_the_check(mini) -> None:
    view = DirView(mini)
    topology = engine.discover(view)
    selection = engine.select(topology, "hygon-p800")
    ctx = engine.context(view, topology, selection)
    folder = state_dir(view)
    mark_rolled_back(folder)  # between the watch's check and its apply
    before = minihost.snapshot(mini)
    result = engine.apply(ctx, selection, ["watch"], reapply=True)
    assert result.changes == [] and result.skipped and result.skipped.startswith("rolled back at")
    assert minihost.snapshot(mini) == before
    assert engine.apply(ctx, selection, ["apply"]).changes  # an operator's apply: goes ahead
    assert rolled_back_at(folder) is None  # and clears the mark


def test_events_of_a_udev_source_are_counted_and_logged(mini) -> None:
    log = Log()
    watcher = Watcher(lambda: DirView(mini), state_dir(DirView(mini)),
                      WatchConfig(profile="hygon-p800"), log)  # fmt: skip
    watcher.run_pass([Event("bind", "0000:03:00.0", "card xpu0"), Event("add", "0000:04:00.0")])
    assert log.of("udev")[0].endswith('event=udev action=bind bdf=0000:03:00.0 device="card xpu0"')
    assert watcher.state.events == {"bind": 1, "add": 1}
    assert "0000:03:00.0" in watcher.watched.ports


def test_a_failed_reapply_is_logged_counted_and_left_for_the_budget(mini) -> None:
    from tests.tune.views import HardwiredView

    card = next(f for f in minihost.FUNCTIONS if f.bdf == MINI_CARD)
    devctl2 = minihost.PCIE_AT + pciconfig.PCIE_DEVCTL2

    def view() -> DirView:  # xpu1 does not implement IDO: its bits read back 0
        return HardwiredView(mini, {f"/sys/devices/{card.rel}/config"}, devctl2, 0x0300)

    log = Log()
    before = minihost.snapshot(mini)
    code = run(view, WatchConfig(profile="hygon-p800", only=["pcie.ido"]), once=True, log=log)
    assert code == LEFT
    [failed] = log.of("reapply-failed")
    assert f"pcie.ido {MINI_CARD} card xpu1" in failed and "unsupported" in failed
    assert minihost.snapshot(mini) == before  # the transaction was rolled back whole
    state = read_state(mini)
    assert state.failures == {"pcie.ido": 6} and state.reapplies == {}
    assert state.last_apply is not None and not state.last_apply.success
    assert "unsupported" in (state.last_apply.error or "")
