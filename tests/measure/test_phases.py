"""Phases in one replay (measure/phases.py) against the stand-in server: the spec, the tokens
each phase sends, the verdict (recovered on a healthy server; did not recover, naming the
figure, on one that slows down or loses L1 after the stress), and the bounds (--duration for
the whole run, Ctrl-C)."""

from __future__ import annotations

import _thread
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.measure.fakesglang import FakeSGLang, write_model
from xputune.cli import exits
from xputune.errors import XputuneError
from xputune.measure import phases as ph
from xputune.measure.client import Endpoint
from xputune.measure.replay import Load
from xputune.measure.server import read_server
from xputune.measure.tokens import TokenRange, prompt_tokens
from xputune.measure.workload import build_workload, read_slice
from xputune.userfiles import open_trace

ROOT = Path(__file__).resolve().parents[2]
SLICE = str(ROOT / "tests" / "data" / "traces" / "mooncake-conversation-1171-1570.jsonl")
VOCAB = TokenRange(10, 500)
SPEC = "warm:120,measure:60,stress:120@c4,cool:0.2s,measure:60"


@pytest.fixture
def fake(tmp_path) -> Iterator[FakeSGLang]:
    model = write_model(str(tmp_path / "m"))
    # a slower stand-in than the other tests': its latencies then stand well above the
    # scheduling noise of a busy test machine
    with FakeSGLang(model_path=model, device_tokens=512, base_ms=6.0, decode_ms=0.5,
                    prefill_us=40.0) as server:  # fmt: skip
        yield server


def _workload(n: int = 120):
    with open_trace(Path(SLICE)) as stream:
        sliced = read_slice(stream, limit=n)
    return build_workload(sliced, block_tokens=1, max_req_input_len=506, max_output=2)


def _documents(n: int = 120):
    """Requests that share a system prompt (block 0) and come back to 7 documents: most of
    every phase's hits are L1's."""
    rows = [
        {
            "timestamp": i * 10,
            "input_length": 512 * 4,
            "output_length": 2,
            "hash_ids": [0, *(100 + i % 7 * 10 + j for j in range(3))],
        }
        for i in range(n)
    ]
    stream = io.BytesIO("".join(json.dumps(r) + "\n" for r in rows).encode())
    return build_workload(read_slice(stream), block_tokens=8, max_req_input_len=506, max_output=2)


# ------------------------------------------------------------------------------ the spec


def test_the_spec_reads_phases_loads_and_times() -> None:
    got = ph.parse_phases("warm:200, measure:100,stress:400@4x,stress:50@c16,cool:30s,cool:1.5m,"
                          "measure:100")  # fmt: skip
    assert [p.name for p in got] == ["warm", "measure", "stress", "stress", "cool", "cool",
                                     "measure"]  # fmt: skip
    assert got[0].requests == 200 and got[2].scale == 4.0 and got[3].concurrency == 16
    assert got[4].seconds == 30.0 and got[5].seconds == 90.0 and got[4].idle
    assert ph.most_requests(got) == 400
    base_open, base_closed = Load(speedup=2.0), Load(concurrency=3)
    assert got[2].load(base_open, 5.0).speedup == 8.0 and got[2].load(base_open, 5.0).duration == 5
    assert got[2].load(base_closed, None).concurrency == 12
    assert got[3].load(base_open, None).concurrency == 16  # @cK: closed loop, whatever the base
    assert got[1].load(base_closed, None) == base_closed


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("warm:10,measure:5", "two measure phases"),
        ("measure:5,measure:6", "same count"),
        ("measure:5,soak:5,measure:5", "no phase 'soak'"),
        ("measure:5,measure:5@2x,measure:5", "run's own load"),
        ("measure:5,cool:10,measure:5", "a cool phase is a time"),
        ("measure:5,cool:10s@2x,measure:5", "takes no load"),
        ("measure:5,warm:1.5,measure:5", "whole"),
        ("measure:5,warm:10s,measure:5", "number of requests"),
        ("measure:5,warm:0,measure:5", "at least one request"),
        ("measure:5,stress:5@0x,measure:5", "0 < K"),
        ("measure:5,warm,measure:5", "expected NAME:N"),
        ("measure:5,cool:0s,measure:5", "more than 0"),
    ],
)
def test_a_spec_that_cannot_run_is_one_line(spec: str, says: str) -> None:
    with pytest.raises(XputuneError, match=says) as exc:
        ph.parse_phases(spec)
    assert str(exc.value).startswith("--phases") and "\n" not in str(exc.value)


def test_each_phase_sends_the_same_requests_in_tokens_of_its_own() -> None:
    """A salt maps every block id (tails too) through its own bijection: the same lengths and
    the same prefix sharing, in tokens another salt never sends; salt 0 is the trace's own."""
    w = _workload(40)
    a, b = w.head(20, 7), w.head(20, 8)
    assert [r.prompt_tokens for r in a.requests] == [r.prompt_tokens for r in b.requests]
    ids_a = [json.loads(a.body(r, VOCAB, stream=False))["input_ids"] for r in a.requests]
    ids_b = [json.loads(b.body(r, VOCAB, stream=False))["input_ids"] for r in b.requests]
    plain = [json.loads(w.body(r, VOCAB, stream=False))["input_ids"] for r in w.requests[:20]]

    def shared(x: list[int], y: list[int]) -> int:
        n = 0
        while n < min(len(x), len(y)) and x[n] == y[n]:
            n += 1
        return n

    for i in range(20):
        assert ids_a[i] != ids_b[i] and ids_a[i] != plain[i]
        for j in range(i):  # each phase's prompts share what the trace's share
            blocks = shared(list(a.requests[i].ids), list(a.requests[j].ids))
            assert shared(ids_a[i], ids_a[j]) >= blocks
            assert shared(ids_b[i], ids_b[j]) >= blocks
    req = w.requests[0]
    assert (prompt_tokens(req.ids, req.tokens, 1, req.tail, req.line, VOCAB, 0)
            == prompt_tokens(req.ids, req.tokens, 1, req.tail, req.line, VOCAB)).all()  # fmt: skip


# ----------------------------------------------------------------------------- the runs


class _After:
    """A Progress that changes the stand-in once the phase `after` is done."""

    def __init__(self, after: int, change) -> None:
        self.after, self.change = after, change

    def phase(self, run, total):
        return None

    def done(self, run) -> None:
        if run.number == self.after:
            self.change()


def _run(fake: FakeSGLang, progress=None, spec: str = SPEC, load: Load | None = None,
         workload=None):  # fmt: skip
    endpoint = Endpoint.parse(fake.url)
    info = read_server(endpoint)
    plan = ph.parse_phases(spec)
    result = ph.run_phases(plan, workload or _workload(), endpoint, VOCAB,
                           load or Load(concurrency=1), info, progress, salt=1000)  # fmt: skip
    return result, ph.recovery(result, storage=False)


def test_a_healthy_server_recovers(fake: FakeSGLang) -> None:
    result, rec = _run(fake)
    assert result.stop == "done" and [p.status for p in result.phases] == ["done"] * 5
    first, last = result.first, result.last
    assert first.number == 2 and last.number == 5 and first.input_before > 512
    # the same requests, new to the cache both times: the same hits, request by request, but
    # for a first token drawn alike by chance (one in 490) with one of another phase's
    pairs = list(zip(first.run.records, last.run.records, strict=True))
    assert all(abs(a.cached - b.cached) <= 1 for a, b in pairs)
    assert sum((a.device, a.host) == (b.device, b.host) for a, b in pairs) >= 48
    assert rec["verdict"] == ph.RECOVERED and rec["worse"] == [] and rec["compared"] == 60
    figures = {f["figure"]: f for f in rec["figures"]}
    assert set(figures) == {"hit_rate_total", "hit_rate_l1", "hit_rate_l2", "ttft_mean_ms",
                            "e2e_mean_ms", "decode_tokens_per_s"}  # fmt: skip
    assert not figures["hit_rate_l2"]["judged"]
    for f in figures.values():
        assert f["change"]["low"] <= f["change"]["value"] <= f["change"]["high"], f
    cool = result.phases[3]
    assert cool.phase.idle and cool.elapsed_s >= 0.2 and cool.run is None
    assert len({p.salt for p in result.phases}) == 5


def test_a_server_that_slows_after_the_stress_did_not_recover(fake: FakeSGLang) -> None:
    def slower() -> None:
        fake.base_ms *= 4  # every request pays 18 ms more from now on

    _, rec = _run(fake, _After(3, slower))
    assert rec["verdict"] == ph.NOT_RECOVERED
    assert "mean TTFT" in rec["worse"] and "mean end-to-end latency" in rec["worse"]
    ttft = next(f for f in rec["figures"] if f["figure"] == "ttft_mean_ms")
    assert ttft["worse"] and ttft["change"]["low"] > ttft["margin"] > 0
    assert "hit rate" not in rec["worse"]  # the cache served alike: only the time is worse


def test_a_server_that_loses_l1_after_the_stress_did_not_recover(fake: FakeSGLang) -> None:
    def smaller() -> None:
        with fake.cache.lock:
            fake.cache.device_cap = 16  # a leak: L1 holds almost nothing from now on
            while len(fake.cache.device) > 16:
                fake.cache.device.popitem(last=False)

    _, rec = _run(fake, _After(3, smaller), workload=_documents())
    assert rec["verdict"] == ph.NOT_RECOVERED and rec["worse"] == ["hit rate from L1"], rec
    figures = {f["figure"]: f for f in rec["figures"]}
    assert figures["hit_rate_l1"]["first"] > 0.5  # L1 served most, then L2 took it over:
    assert figures["hit_rate_total"]["verdict"] == "no difference beyond noise"  # all served


def test_duration_bounds_the_whole_run(fake: FakeSGLang) -> None:
    """--duration ends every phase: the run stops inside it, later phases do not run, the
    measurements are not compared."""
    t0 = time.monotonic()
    result, rec = _run(fake, load=Load(concurrency=1, duration=1.0, timeout=5.0))
    took = time.monotonic() - t0
    assert took < 1.0 + 5.0 + 3.0, took
    assert result.stop == "duration"
    assert result.phases[-1].status == "not run"
    assert rec["verdict"] == ph.NOT_COMPARED and "measure phase" in rec["reason"]


def test_ctrl_c_in_the_cool_phase_ends_the_run(fake: FakeSGLang) -> None:
    timer = threading.Timer(0.5, _thread.interrupt_main)
    spec = "measure:10,cool:30s,measure:10"
    timer.start()
    t0 = time.monotonic()
    try:
        result, rec = _run(fake, spec=spec)
    finally:
        timer.cancel()
    assert time.monotonic() - t0 < 5
    assert result.stop == "interrupted" and result.phases[1].status == "interrupted"
    assert result.phases[2].status == "not run" and rec["verdict"] == ph.NOT_COMPARED


# ------------------------------------------------------------------------------ the CLI


def _cli(run_cli, url: str, *more: str):
    return run_cli("replay", "--trace", SLICE, "--url", url, "--block-tokens", "1", "-c", "1",
                   "--max-output", "2", *more)  # fmt: skip


def test_the_table_shows_each_phase_and_the_verdict(run_cli, fake) -> None:
    code, out, err = _cli(run_cli, fake.url, "--phases", SPEC)
    assert code == exits.OK, out + err
    flat = " ".join(out.split())
    assert "phases: measured" in flat and "stress:120" in flat and "4 at" in flat
    assert "recovery: measure phase 5 against phase 2, the same 60 requests" in flat
    assert "recovered: no figure is worse beyond noise and the margin (10% of the first" in flat
    assert "hit rate by tier, phase 5" in flat


def test_the_document_and_its_exits(run_cli, fake) -> None:
    code, out, err = _cli(run_cli, fake.url, "--phases", SPEC, "-f", "json", "--per-request")
    assert code == exits.OK, err
    doc = json.loads(out)
    assert doc["valid"] and doc["recovery"]["verdict"] == "recovered"
    assert [p["number"] for p in doc["phases"]] == [1, 2, 3, 4, 5]
    assert doc["run"]["shown_phase"] == 5 and doc["trace"]["requests"] == 120
    assert len(doc["phases"][2]["per_request"]) == 120
    assert doc["phases"][2]["load"]["concurrency"] == 4 and doc["phases"][3]["load"] is None
    assert doc["phases"][2]["tier_check"] is None and doc["phases"][1]["tier_check"] is not None
    # a plain replay carries the keys, empty
    code, out, _ = _cli(run_cli, fake.url, "-n", "10", "-f", "json")
    assert code == exits.OK and json.loads(out)["phases"] is None
    # a measurement cut by --duration: not compared, not valid (exit 10)
    code, out, _ = _cli(run_cli, fake.url, "--phases", SPEC, "--duration", "0.5", "-f", "json")
    doc = json.loads(out)
    assert code == exits.MEASUREMENT and not doc["valid"]
    assert doc["invalid_reasons"][-1].startswith("the measurements were not compared")
    assert doc["run"]["stop"] == "duration"


def test_a_slice_too_short_for_the_phases_is_one_line(run_cli, fake) -> None:
    code, out, err = _cli(run_cli, fake.url, "--phases", SPEC, "-n", "50")
    assert code == exits.USAGE and out == "" and len(err.splitlines()) == 1
    assert "a phase sends 120 requests, the slice holds 50 (-n)" in err
    code, out, err = _cli(run_cli, fake.url, "--phases", "measure:5,warm:zz,measure:5")
    assert code == exits.USAGE and "--phases" in err and len(err.splitlines()) == 1
