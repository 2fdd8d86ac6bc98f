"""Every external wait has a deadline: hostile servers (tests/measure/hostile.py) cannot hold a
replay or a sweep past its bounds, and absurd numbers end in one line, not a traceback.

Each case is timed with time.monotonic around the whole command and checked against its
deadline plus SLACK: an assertion of a bound, not a benchmark (the machine is shared; the
slack covers start-up and scheduling, never a wait on the server). Run with -s to see each
case's time to end and exit status.

And signals: a process the sweep started is signalled only while it is unreaped (its pid, and
so its group's id, cannot have been given to another process), never after.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.measure.fakesglang import FakeSGLang, write_model
from tests.measure.hostile import HostileServer, server_info
from xputune.cli import exits
from xputune.measure import replay as replay_mod
from xputune.measure import server as server_mod
from xputune.measure import serverproc
from xputune.measure.client import Client, Endpoint, Outcome, get_json
from xputune.measure.replay import Load, replay
from xputune.measure.serverproc import LaunchFailed, Server
from xputune.measure.tokens import TokenRange
from xputune.measure.workload import build_workload, read_slice

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "tests" / "measure" / "hostile_site"
SLICE = str(ROOT / "tests" / "data" / "traces" / "mooncake-conversation-1171-1570.jsonl")
SLACK = 3.0  # seconds past a deadline a command may take to end (start-up, scheduling)


def _timed(run_cli, *args: str) -> tuple[float, int, str, str]:
    t0 = time.monotonic()
    code, out, err = run_cli(*args)
    took = time.monotonic() - t0
    return took, code, out, err


def _say(case: str, took: float, code: int | None) -> None:
    end = "returned" if code is None else f"exit {code}"
    print(f"\nhostile case {case}: ended in {took:.2f} s, {end}")


def _timeout_error(group: dict, seconds: str) -> bool:
    """The document's group of errors is the request deadline's (its text as said, or the
    example of a group whose numbers are folded)."""
    said = group.get("example", group["error"])
    return said == f"no complete answer within {seconds} s (--timeout)"


def _replay_args(url: str, *extra: str) -> list[str]:
    return ["replay", "--trace", SLICE, "--url", url, "--block-tokens", "1", "--max-output",
            "2", "--token-range", "10:500", "-f", "json", *extra]  # fmt: skip


# ------------------------------------------------------------------------ replay's requests


@pytest.mark.parametrize("mode", ["forever", "trickle"])
def test_a_stream_that_never_ends_or_trickles_ends_at_the_timeout(run_cli, mode: str) -> None:
    with HostileServer(mode) as bad:
        took, code, out, err = _timed(
            run_cli, *_replay_args(bad.url, "-n", "2", "-c", "1", "--timeout", "1")
        )
    _say(f"/generate {mode}, 2 requests one after the other, --timeout 1", took, code)
    assert took < 2 * 1 + SLACK, took
    assert code == exits.MEASUREMENT, err
    doc = json.loads(out)
    assert doc["measured"]["requests"] == {"sent": 2, "completed": 0, "failed": 2}
    (group,) = doc["measured"]["errors"]  # one reason, said once
    assert group["count"] == 2 and _timeout_error(group, "1")
    assert "Traceback" not in err


def test_duration_is_a_hard_end(run_cli) -> None:
    """Nothing is sent after --duration; what is in flight gets --timeout more, then counts
    as not completed, with why."""
    with HostileServer("forever") as bad:
        took, code, out, err = _timed(
            run_cli,
            *_replay_args(bad.url, "-n", "50", "--speedup", "1000", "--max-inflight", "4",
                          "--duration", "1", "--timeout", "1.5"),
        )  # fmt: skip
        sent = bad.requests
    _say("/generate forever, open loop, --duration 1 --timeout 1.5", took, code)
    assert took < 1 + 1.5 + SLACK, took
    assert code == exits.MEASUREMENT, err
    doc = json.loads(out)
    req = doc["measured"]["requests"]
    assert doc["run"]["stop"] == "duration" and 1 <= req["sent"] <= 4 and req["completed"] == 0
    assert doc["run"]["unsent"] == 50 - req["sent"] and sent == req["sent"]
    (group,) = doc["measured"]["errors"]
    assert group["count"] == req["sent"] and _timeout_error(group, "1.5")


VOCAB = TokenRange(10, 500)


def _workload(n: int):
    rows = "".join(
        json.dumps({"timestamp": i, "input_length": 1024, "output_length": 1, "hash_ids": [i, 1]})
        + "\n"
        for i in range(n)
    )
    return build_workload(read_slice(io.BytesIO(rows.encode())), block_tokens=4)


def test_a_worker_stuck_past_its_deadline_is_given_up(monkeypatch, tmp_path) -> None:
    """The replay's own end, should a request outlive the client's deadline (a name lookup
    that hangs has none): the run ends by duration + timeout + SLACK, the request recorded as
    not completed, and its late result is dropped."""
    release = threading.Event()

    def stuck(self, body: bytes) -> Outcome:
        release.wait(30)
        return Outcome(start=time.perf_counter(), ttft=0.001, e2e=0.002)

    monkeypatch.setattr(Client, "generate", stuck)
    monkeypatch.setattr(replay_mod, "SLACK", 0.2)
    t0 = time.monotonic()
    try:
        run = replay(_workload(6), Endpoint.parse("127.0.0.1:9"), VOCAB,
                     Load(concurrency=2, duration=0.3, timeout=0.5))  # fmt: skip
    finally:
        took = time.monotonic() - t0
        release.set()
    _say("workers stuck in flight, replay(duration 0.3, timeout 0.5)", took, None)
    assert took < 0.3 + 0.5 + 0.2 + SLACK, took
    assert run.stop == "duration" and run.abandoned == 0 and run.unsent == 4
    assert [r.index for r in run.records] == [0, 1]
    assert all(not r.ok and "not completed: still in flight 0.5 s" in r.error for r in run.records)


def test_nothing_is_sent_after_the_duration(monkeypatch, tmp_path) -> None:
    """A request its worker picks up after --duration ended is not sent: it counts unsent."""
    model = write_model(str(tmp_path / "m"))
    with FakeSGLang(model_path=model, device_tokens=256) as fake:
        w = _workload(3)
        real = type(w).body

        def slow_body(self, request, vocab, stream=True):
            time.sleep(0.4)  # the first body takes past the duration's end
            return real(self, request, vocab, stream)

        monkeypatch.setattr(type(w), "body", slow_body)
        run = replay(w, Endpoint.parse(fake.url), VOCAB, Load(concurrency=1, duration=0.2))
        assert fake.requests == 0
    assert run.stop == "duration" and run.records == [] and run.unsent == 3


# ------------------------------------------------------------------------------ /server_info


def test_server_info_trickled_ends_at_its_deadline(run_cli, monkeypatch) -> None:
    monkeypatch.setattr(server_mod, "INFO_TIMEOUT", 1.0)
    with HostileServer("info_trickle") as bad:
        took, code, out, err = _timed(run_cli, *_replay_args(bad.url, "-n", "2", "-c", "1"))
    _say("/server_info trickled a byte a second (its deadline 1 s)", took, code)
    assert took < 1 + SLACK, took
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert "/server_info: no complete answer within 1 s" in err


def test_get_json_holds_its_deadline_against_a_trickle() -> None:
    with HostileServer("info_trickle") as bad:
        t0 = time.monotonic()
        with pytest.raises(server_mod.ServerError, match=r"no complete answer within 0\.5 s"):
            get_json(Endpoint.parse(bad.url), "/server_info", timeout=0.5)
        assert time.monotonic() - t0 < 0.5 + SLACK


_DIGITS_4000 = "9" * 4000
ABSURD = [
    ("hicache_ratio", "1e308", "hicache_ratio = 1e+308: unusable"),
    ("hicache_ratio", "NaN", "hicache_ratio = nan: unusable"),
    ("hicache_ratio", "-2.0", "hicache_ratio = -2: unusable"),
    ("hicache_size", "Infinity", "hicache_size = inf: unusable"),
    ("hicache_size", "-1", "hicache_size = -1: unusable"),
    ("max_total_num_tokens", _DIGITS_4000, "integer of thousands of digits: unusable"),
    ("max_total_num_tokens", "9" * 5000, "not JSON xputune reads (an integer of thousands"),
    ("max_total_num_tokens", "-1024", "max_total_num_tokens = -1024: unusable"),
    ("max_total_num_tokens", "1024.5", "max_total_num_tokens = 1024.5: unusable"),
    ("max_req_input_len", "true", "max_req_input_len = True: unusable"),
    ("page_size", "0", "page_size = 0: unusable"),
    ("page_size", "1e300", "page_size = 1e+300: unusable"),
    ("tp_size", '"8"', "tp_size = '8': unusable"),
    ("chunked_prefill_size", _DIGITS_4000, "chunked_prefill_size = an integer of thousands"),
]


@pytest.mark.parametrize(("key", "raw", "says"), ABSURD, ids=[f"{k}={v[:8]}" for k, v, _ in ABSURD])
def test_absurd_numbers_in_server_info_are_one_line(run_cli, key: str, raw: str, says: str) -> None:
    doc = json.dumps({**server_info(), key: "@@"}).replace('"@@"', raw).encode()
    with HostileServer("info_doc", doc=doc) as bad:
        took, code, out, err = _timed(run_cli, *_replay_args(bad.url, "-n", "1", "-c", "1"))
    _say(f"/server_info {key}: {raw[:12]}{'...' if len(raw) > 12 else ''}", took, code)
    assert took < SLACK, took
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith("xputune: error: ") and says in err, err
    assert len(err) < 400


@pytest.mark.parametrize("given", ["9" * 5000 + ":5", "1:" + "9" * 4000, "1:\u00b2\u00b3"])
def test_an_absurd_token_range_is_one_line(run_cli, given: str) -> None:
    code, out, err = run_cli("replay", "--trace", SLICE, "--token-range", given)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and len(err) < 200, err
    assert "--token-range: expected LO:HI" in err


def test_a_missing_or_null_field_takes_its_default() -> None:
    doc = {**server_info(), "page_size": None, "tp_size": None, "chunked_prefill_size": 0}
    del doc["max_req_input_len"]
    info = server_mod.parse_server_info(doc, "u")
    got = (info.page_size, info.tp_size, info.chunked_prefill, info.max_req_input_len)
    assert got == (1, 1, None, None)
    off = {**server_info(), "enable_hierarchical_cache": False, "hicache_ratio": float("nan")}
    assert server_mod.parse_server_info(off, "u").host_tokens == 0  # unused: not judged


def test_an_l2_sized_past_the_bound_is_refused() -> None:
    doc = {**server_info(), "max_total_num_tokens": 1 << 49, "hicache_ratio": 1e5}
    with pytest.raises(server_mod.ServerError, match=r"sizes an L2 of .* unusable"):
        server_mod.parse_server_info(doc, "u")


@pytest.mark.parametrize(
    ("meta", "says"),
    [
        ('{"prompt_tokens": 1e308}', "prompt_tokens = 1e+308"),
        ('{"prompt_tokens": 5, "cached_tokens": -3}', "cached_tokens = -3"),
        ('{"prompt_tokens": 5, "completion_tokens": true}', "completion_tokens = True"),
        ('{"prompt_tokens": ' + _DIGITS_4000 + "}", "an integer of thousands of digits"),
        ('{"prompt_tokens": 5, "cached_tokens_details": {"host": NaN}}', "host = nan"),
    ],
)
def test_absurd_counts_in_a_stream_fail_that_request(meta: str, says: str) -> None:
    from tests.measure.test_client import _Hostile

    body = f'data: {{"output_ids": [1], "meta_info": {meta}}}\n\ndata: [DONE]\n\n'.encode()

    class H(_Hostile):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self._send(200, body, "text/event-stream")

    from http.server import ThreadingHTTPServer

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = Client(Endpoint.parse(f"127.0.0.1:{server.server_address[1]}")).generate(b"{}")
    finally:
        server.shutdown()
        server.server_close()
    assert out.error is not None and out.error.startswith("the server reported a count that")
    assert says in out.error and (out.device, out.host, out.output_tokens) == (0, 0, 0)


# ----------------------------------------------------------------------------- sweep's start


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def hostile_site(tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SITE), str(ROOT)]))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the sweep's log folder
    return write_model(str(tmp_path / "model"))


def _sweep_args(model: str, *extra: str) -> list[str]:
    return ["sweep", "--trace", SLICE, "--sizes", "x2", "-n", "2", "-c", "1", "--block-tokens",
            "1", "--stop-grace", "1", *extra, "--", "--model-path", model, "--device", "cpu",
            "--max-total-tokens", "1024"]  # fmt: skip


@pytest.fixture
def start_times(monkeypatch) -> list[float]:
    """How long each Server.start took (the sweep's whole time also holds the launcher's dry
    run, which is not a wait on the server)."""
    took: list[float] = []
    real = Server.start

    def start(self, timeout: float) -> float:
        t0 = time.monotonic()
        try:
            return real(self, timeout)
        finally:
            took.append(time.monotonic() - t0)

    monkeypatch.setattr(Server, "start", start)
    return took


def test_sweeps_start_timeout_holds_while_a_server_trickles(
    run_cli, hostile_site, monkeypatch, start_times
) -> None:
    monkeypatch.setenv("HOSTILE_SGLANG_MODE", "info_trickle")
    took, code, out, err = _timed(run_cli, *_sweep_args(hostile_site, "--start-timeout", "2"))
    _say("sweep, its server trickles /server_info, --start-timeout 2 (whole sweep)", took, code)
    _say("  ... of which the server's start and stop", start_times[0], code)
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert "the server was not ready after 2 s" in err
    assert start_times[0] < 2 + SLACK, start_times


def test_a_sweep_whose_server_exits_before_it_is_ready(
    run_cli, hostile_site, monkeypatch, start_times
) -> None:
    monkeypatch.setenv("HOSTILE_SGLANG_MODE", "exit")
    took, code, out, err = _timed(run_cli, *_sweep_args(hostile_site, "--start-timeout", "30"))
    _say("sweep, its server exits with status 3 before it is ready", took, code)
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert "the server exited with status 3 before it was ready" in err
    assert "gives up at once" in err  # the log's last line
    assert start_times[0] < SLACK, start_times


# ------------------------------------------------------------------------------- the signals


@pytest.fixture
def spy(monkeypatch) -> list[tuple[str, int, int | None]]:
    """Every kill, killpg and reap (waitpid, or waitid without WNOWAIT), in order."""
    events: list[tuple[str, int, int | None]] = []
    kill, killpg, waitpid, waitid = os.kill, os.killpg, os.waitpid, os.waitid

    def spy_kill(pid: int, sig: int) -> None:
        events.append(("kill", pid, sig))
        kill(pid, sig)

    def spy_killpg(pgid: int, sig: int) -> None:
        events.append(("killpg", pgid, sig))
        killpg(pgid, sig)

    def spy_waitpid(pid: int, options: int):
        got = waitpid(pid, options)
        if got[0]:
            events.append(("reaped", got[0], None))
        return got

    def spy_waitid(idtype: int, ident: int, options: int):
        got = waitid(idtype, ident, options)
        if got is not None and not options & os.WNOWAIT:
            events.append(("reaped", got.si_pid, None))
        return got

    monkeypatch.setattr(os, "kill", spy_kill)
    monkeypatch.setattr(os, "killpg", spy_killpg)
    monkeypatch.setattr(os, "waitpid", spy_waitpid)
    monkeypatch.setattr(os, "waitid", spy_waitid)
    return events


def _signals_after_reap(events: list, pid: int) -> list:
    reaps = [i for i, (what, who, _) in enumerate(events) if what == "reaped" and who == pid]
    assert len(reaps) == 1, events  # reaped once, by stop()
    return [e for e in events[reaps[0] :] if e[0] in ("kill", "killpg") and e[1] == pid]


def _server(tmp_path: Path, argv: list[str], mode: str = "forever") -> Server:
    env = {"PYTHONPATH": str(ROOT), "HOSTILE_SGLANG_MODE": mode}
    port = _free_port()
    argv = [a.replace("PORT", str(port)) for a in argv]
    return Server(argv, Endpoint("http", "127.0.0.1", port), tmp_path / "server.log", env)


def _dead(pid: int) -> bool:
    """Gone, or a zombie nobody reaped yet (this machine's init may not reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def test_a_server_that_exits_at_once_is_never_signalled(tmp_path, spy) -> None:
    server = _server(tmp_path, [sys.executable, "-c", "raise SystemExit(3)"])
    t0 = time.monotonic()
    with pytest.raises(LaunchFailed, match="exited with status 3 before it was ready"):
        server.start(10)
    took = time.monotonic() - t0
    _say("a server process that exits before it is ready (Server.start)", took, 2)
    assert took < SLACK
    pid = next(who for what, who, _ in spy if what == "reaped")
    assert _signals_after_reap(spy, pid) == []
    assert not [e for e in spy if e[0] in ("kill", "killpg")]  # it ended by itself


def test_a_dead_leaders_group_is_killed_before_it_is_reaped(tmp_path, spy, monkeypatch) -> None:
    """The leader exits and leaves a process in its group: that one is signalled through the
    group while the leader is an unreaped zombie (its number still the group's), then reaped."""
    monkeypatch.setattr(serverproc, "_FAILED_START_GRACE", 0.5)
    left = tmp_path / "left.pid"
    code = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(left)!r}, 'w').write(str(p.pid))\n"
        "raise SystemExit(4)\n"
    )
    server = _server(tmp_path, [sys.executable, "-c", code])
    with pytest.raises(LaunchFailed, match="exited with status 4"):
        server.start(10)
    pid = next(who for what, who, _ in spy if what == "reaped")
    assert ("killpg", pid, signal.SIGTERM) in spy
    assert _signals_after_reap(spy, pid) == []
    assert _dead(int(left.read_text()))


def test_a_server_that_trickles_is_stopped_at_the_start_timeout(tmp_path, spy) -> None:
    argv = [sys.executable, "-m", "tests.measure.hostile", "--port", "PORT"]
    server = _server(tmp_path, argv, mode="info_trickle")
    t0 = time.monotonic()
    with pytest.raises(LaunchFailed, match=r"not ready after 1\.5 s"):
        server.start(1.5)
    took = time.monotonic() - t0
    _say("a server that trickles /server_info, Server.start(1.5)", took, 2)
    assert took < 1.5 + SLACK
    pid = next(who for what, who, _ in spy if what == "reaped")
    assert spy[0] == ("kill", pid, signal.SIGTERM)  # the leader first, while alive
    assert _signals_after_reap(spy, pid) == []


def test_a_ready_server_is_stopped_and_then_left_alone(tmp_path, spy) -> None:
    argv = [sys.executable, "-m", "tests.measure.hostile", "--port", "PORT"]
    server = _server(tmp_path, argv, mode="forever")
    assert server.start(30) < 30
    leader = server.leader
    assert leader is not None
    assert server.stop(grace=5) < 5 + SLACK
    assert leader.reaped and server.stop() == 0.0  # twice: nothing left to signal
    assert _signals_after_reap(spy, leader.pid) == []
    leader.signal(signal.SIGKILL)  # a reaped leader's number is not signalled
    leader.signal_group(signal.SIGKILL)
    assert _signals_after_reap(spy, leader.pid) == []
