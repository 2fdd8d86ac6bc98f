"""A run that did not measure what it says says so: how many requests failed and why, figures
said to be over the requests that completed, exit 10 below --min-completion (JSON too); and a
sweep whose sizes do not differ prints "no difference beyond noise", never a preference.
Against the stand-in server (tests/measure/fakesglang.py), which refuses prompts as SGLang does
(len(input_ids) >= max_req_input_len)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.measure.fakesglang import FakeSGLang, write_model
from xputune.cli import exits
from xputune.measure import workload

ROOT = Path(__file__).resolve().parents[2]
SLICE = str(ROOT / "tests" / "data" / "traces" / "mooncake-conversation-1171-1570.jsonl")
SITE = ROOT / "tests" / "measure" / "fake_site"


@pytest.fixture
def fake(tmp_path) -> Iterator[FakeSGLang]:
    model = write_model(str(tmp_path / "m"))
    with FakeSGLang(model_path=model, device_tokens=1024, decode_ms=0.1) as server:
        yield server


def _replay(run_cli, url: str, *more: str) -> tuple[int, str, str]:
    return run_cli("replay", "--trace", SLICE, "--url", url, "-n", "100", "--token-range",
                   "10:500", "-c", "4", *more)  # fmt: skip


def test_prompts_at_the_limit_all_complete(run_cli, fake) -> None:
    """The issue's run (unscaled 512-token blocks, a 1024-token pool): 87 prompts are longer
    than the server takes and are cut to max_req_input_len - 1; all complete."""
    code, out, err = _replay(run_cli, fake.url, "-f", "json", "--per-request")
    assert code == exits.OK, err
    doc = json.loads(out)
    assert doc["valid"] and doc["invalid_reasons"] == [] and doc["min_completion"] == 1.0
    assert doc["measured"]["requests"] == {"sent": 100, "completed": 100, "failed": 0}
    longest = fake.max_req_input_len - 1
    assert doc["trace"]["truncated_prompts"] == 87 and doc["trace"]["longest_prompt"] == longest
    assert max(r["prompt_tokens"] for r in doc["per_request"]) == longest


def test_a_run_that_fails_most_requests_ends_10_with_the_count(run_cli, fake,
                                                               monkeypatch) -> None:  # fmt: skip
    """Prompts forced past the server's limit (a test-only cut 300 tokens too long): the
    server refuses 87 of 100; the run says so, table and JSON, and ends with 10."""
    monkeypatch.setattr(workload, "longest_prompt", lambda limit: limit + 300)
    code, out, err = _replay(run_cli, fake.url, "-f", "json")
    assert code == exits.MEASUREMENT, err
    doc = json.loads(out)
    assert not doc["valid"] and doc["measured"]["requests"]["failed"] == 87
    (why,) = doc["invalid_reasons"]
    assert why.startswith("87 of 100 requests failed (13.0% completed")
    (group,) = doc["measured"]["errors"]
    assert group["count"] == 87 and "exceeds the maximum allowed length" in group["error"]
    assert "(N tokens)" in group["error"] and "tokens)" in group["example"]
    assert any("over the 13 that completed" in n for n in doc["notes"])
    code, out, _ = _replay(run_cli, fake.url)
    flat = " ".join(out.split())
    assert code == exits.MEASUREMENT
    assert "measurement over 13 of 100 requests" in flat and "TTFT ms over 13 of 100" in flat
    assert "failed 87x (first at line 1)" in flat
    assert "not a valid measurement (exit 10): 87 of 100 requests failed" in flat
    code, out, _ = _replay(run_cli, fake.url, "--min-completion", "13", "-f", "json")
    assert code == exits.OK and json.loads(out)["valid"]  # the threshold is the user's
    assert json.loads(out)["measured"]["errors"][0]["count"] == 87  # and still said


def test_a_sweep_of_equal_sizes_is_no_difference_beyond_noise(run_cli, tmp_path,
                                                               monkeypatch) -> None:  # fmt: skip
    """x16 and x32 both hold the slice's whole working set: the same hits request by request.
    The sweep prints no difference beyond noise for their hit rate and prefers neither size
    on hit rate alone; x2 -> x16 is a real rise, printed with its interval."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SITE), str(ROOT)]))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    model = write_model(str(tmp_path / "model"))
    argv = ["sweep", "--trace", SLICE, "--sizes", "x2,x16,x32", "--min-gain", "0",
            "--block-tokens", "1", "-n", "200", "-c", "1", "--max-output", "1",
            "--stop-grace", "2"]  # fmt: skip
    server = ["--", "--model-path", model, "--device", "cpu", "--max-total-tokens", "512"]
    code, out, err = run_cli(*argv, "-f", "json", *server)
    assert code == exits.OK, err
    doc = json.loads(out)
    assert doc["valid"] and doc["noise"]["confidence"] == 0.95
    rise, flat = doc["differences"]
    assert (rise["from"], rise["to"], flat["from"], flat["to"]) == ("x2", "x16", "x16", "x32")
    assert rise["hit_rate"]["beyond_noise"] and rise["hit_rate"]["low"] > 0
    assert flat["hit_rate"] == {"value": 0.0, "low": 0.0, "high": 0.0, "beyond_noise": False}
    rule = doc["plateau_rule"]
    if rule["measurements_prefer"] is None:
        assert len(rule["within_noise_of_best"]) > 1
    for step in doc["steps"]:
        assert step["valid"] and step["measured"]["intervals"]["hit_rate"]["total"]["low"] <= \
            step["measured"]["hit_rate"]["total"]  # fmt: skip
    code, out, err = run_cli(*argv, *server)
    flat_text = " ".join(out.split())
    assert code == exits.OK, err
    assert "x16 -> x32: hit rate no difference beyond noise (+0.0 [+0.0, +0.0] pts)" in flat_text
    assert "x2 -> x16: hit rate +" in flat_text


def _d(value: float, low: float, high: float) -> dict:
    return {"value": value, "low": low, "high": high, "beyond_noise": low > 0 or high < 0}


def test_a_net_benefit_is_never_noise_printed_as_a_finding() -> None:
    """The line a sweep once printed, "net benefit x2: +102.1 ms = compute saved 0.0 ms - cost
    of moving KV -102.1 ms", from sizes with the same hits: now said to be no cache effect, or
    no difference at all; a real one keeps its decomposition, each part with its interval."""
    from xputune.cli.measure_cmds import _net_benefit_line

    def nb(saved: dict, extra: dict, verdict: str) -> dict:
        compute = _d(extra["value"] * 0.05, extra["low"] * 0.05, extra["high"] * 0.05)
        moving = _d(compute["value"] - saved["value"], -1.0, 1.0)
        return {"ttft_saved_ms": saved["value"], "verdict": verdict, "intervals": {
            "ttft_saved_ms": saved, "extra_hit_tokens": extra, "compute_saved_ms": compute,
            "moving_cost_ms": moving}}  # fmt: skip

    drift = nb(_d(102.1, 80.2, 121.9), _d(0.0, 0.0, 0.0),
               "TTFT differs without extra hits beyond noise")  # fmt: skip
    line = _net_benefit_line("x2", drift)
    assert line.startswith("net benefit x2: TTFT saved +102.1 [+80.2, +121.9] ms per request")
    assert "not a cache effect" in line and "compute saved" not in line
    noise = nb(_d(1.2, -3.0, 5.1), _d(0.4, 0.0, 1.0), "no difference beyond noise")
    assert _net_benefit_line("x4", noise) == (
        "net benefit x4: no difference beyond noise (TTFT saved +1.2 [-3.0, +5.1] ms; extra hits "
        "+0.4 [+0.0, +1.0] tokens per request)"
    )
    real = nb(_d(20.0, 15.0, 25.0), _d(400.0, 350.0, 450.0), "beyond noise")
    assert "= compute saved +20.0 [+17.5, +22.5] ms - cost of moving KV" in _net_benefit_line(
        "x8", real
    )
