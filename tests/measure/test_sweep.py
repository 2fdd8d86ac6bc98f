"""The sweep: sizes, the launcher's command lines, the plateau stop, the fits and the net
benefit; and whole sweeps through `xputune launch sglang` with the stand-in server (its
processes started in their own session and all gone afterwards, also after Ctrl-C)."""

from __future__ import annotations

import _thread
import itertools
import json
import os
import stat
import tempfile
import threading
from pathlib import Path

import pytest

from tests.measure.fakesglang import write_model
from tests.measure.steps import step as _step
from xputune.errors import XputuneError
from xputune.measure.analysis import fits, knee_and_plateau, net_benefit, recompute_fit
from xputune.measure.serverproc import without_hicache
from xputune.measure.stats import Record
from xputune.measure.sweep import Size, Step, _plateau, check_args, default_ladder, parse_sizes

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "tests" / "measure" / "fake_site"
SLICE = str(ROOT / "tests" / "data" / "traces" / "mooncake-conversation-1171-1570.jsonl")


def test_sizes_are_gb_or_ratios_smallest_first() -> None:
    assert [s.label for s in parse_sizes("16GB, 8gb,32")] == ["8GB", "16GB", "32GB"]
    assert [s.label for s in parse_sizes("x4,2x,x1.5")] == ["x1.5", "x2", "x4"]
    assert Size("gb", 8.0).args() == ["--hicache-size", "8"]
    assert Size("ratio", 2.5).args() == ["--hicache-size", "0", "--hicache-ratio", "2.5"]
    bad_sizes = [("8GB,x2", "not both"), ("x2,x2", "twice"), ("", "at least one"),
                 ("0GB", "not a size"), ("x0", "not a size"), ("big", "not a size")]  # fmt: skip
    for bad, says in bad_sizes:
        with pytest.raises(XputuneError, match=says):
            parse_sizes(bad)


def test_args_the_sweep_sets_itself_are_refused() -> None:
    check_args(["--model-path", "m", "--page-size", "1"])
    for flag in ("--hicache-size", "--hicache-ratio=2"):
        with pytest.raises(XputuneError, match="sweep sets --hicache"):
            check_args(["--model-path", "m", flag, "3"])


def test_the_baseline_drops_every_hicache_flag() -> None:
    flags = ["--model-path", "m", "--enable-hierarchical-cache", "--hicache-size", "2",
             "--hicache-mem-layout=layer_first", "--page-size", "1", "--tp-size", "1"]  # fmt: skip
    assert without_hicache(flags) == ["--model-path", "m", "--page-size", "1", "--tp-size", "1"]


def _rec(i: int, prompt: int, device: int, host: int, ttft_ms: float) -> Record:
    return Record(i, i + 1, prompt, 1, None, 0.0, ttft_ms / 1e3, ttft_ms / 1e3, 1, device,
                  host, 0, 0.0, None)  # fmt: skip


def test_the_lines_are_fitted_from_the_requests_measured() -> None:
    """T(n) = 5 ms + 2 us * n from all-hit requests, R(n) = 3 ms + 20 us * n from the
    baseline: the fits find them, and the break-even is (5 - 3) / (0.020 - 0.002)."""
    base = _step("baseline", None, [_rec(i, 100 * i, 0, 0, 3 + 0.02 * 100 * i)
                                    for i in range(1, 8)], 0)  # fmt: skip
    loads = [_rec(i, 100 * i + 1, 1, 100 * i, 5 + 0.002 * 100 * i) for i in range(1, 8)]
    misses = [_rec(10, 500, 0, 0, 13.0)]  # not all-hit: left out of T(n)
    size = _step("x2", Size("ratio", 2.0), loads + misses, 200)
    got = fits([base, size])
    assert got["load_fit"]["fitted"] and got["load_fit"]["points"] == 7
    assert got["load_fit"]["a_ms"] == pytest.approx(5.0) and got["load_fit"]["b_us_per_token"] \
        == pytest.approx(2.0)  # fmt: skip
    assert got["recompute_fit"]["b_us_per_token"] == pytest.approx(20.0)
    assert got["recompute_fit"]["source"] == "baseline requests"
    assert got["break_even"]["tokens"] == pytest.approx(2.0 / 0.018, abs=0.1)
    assert got["break_even"]["reliable"]  # exact lines: R^2 = 1
    nb = net_benefit(size, base, recompute_fit([base, size]))
    assert nb is not None
    saved = nb["compute_saved_ms"] - nb["moving_cost_ms"]
    assert saved == pytest.approx(nb["ttft_saved_ms"], abs=2e-3)  # rounded to us
    none = fits([_step("x2", Size("ratio", 2.0), misses, 200)])
    assert not none["load_fit"]["fitted"] and "need two" in none["load_fit"]["reason"]


def test_the_knee_and_the_plateau_of_measured_sizes() -> None:
    def sized(label: str, host: int, hit: int, ttft: float) -> Step:
        return _step(label, Size("ratio", host / 100), [_rec(0, 100, 10, hit, ttft)], host)

    steps = [sized("x1", 100, 0, 9), sized("x2", 200, 30, 8), sized("x4", 400, 40, 7),
             sized("x8", 800, 40.5, 7.5)]  # fmt: skip
    got = knee_and_plateau(steps, 0.01)
    assert got["knee"]["size"] == "x2"
    rule = got["plateau_rule"]
    assert rule["stops_at"] == "x4" and rule["first_flat_step_at"] == "x8"
    assert rule["measurements_prefer"] == "x4" and not rule["disagrees"]
    assert _plateau(steps, 0.01) and not _plateau(steps[:3], 0.01)


def test_the_default_ladder_is_the_plans() -> None:
    cpu = default_ladder([], ["--model-path", "m", "--device", "cpu"])
    gbs = [s.value for s in cpu]
    assert gbs and gbs[0] == 1 and all(b == 2 * a for a, b in itertools.pairwise(gbs))
    card = default_ladder(["--example", "h3c-hygon-p800", "--model", "glm-5"], ["--tp-size", "8"])
    assert [s.kind for s in card] == ["gb"] * len(card) and card[0].value == 8
    with pytest.raises(XputuneError, match="give --sizes"):
        default_ladder(["--example", "h3c-hygon-p800"], [])  # no model: plan says so


# ------------------------------------------------------------------------- whole sweeps


@pytest.fixture
def stand_in(tmp_path, monkeypatch) -> dict[str, str]:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SITE), str(ROOT)]))
    record = tmp_path / "starts.jsonl"
    monkeypatch.setenv("FAKE_SGLANG_ARGV", str(record))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the sweep's log folder
    return {"model": write_model(str(tmp_path / "model")), "record": str(record)}


def _starts(path: str) -> list[dict]:
    try:
        return [json.loads(line) for line in Path(path).read_text().splitlines()]
    except FileNotFoundError:
        return []


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _args(model: str) -> list[str]:
    return ["--", "--model-path", model, "--device", "cpu", "--max-total-tokens", "1024"]


def test_a_sweep_launches_replays_and_stops_each_size(run_cli, stand_in) -> None:
    code, out, err = run_cli(
        "sweep", "--trace", SLICE, "--sizes", "x1,x2,x4,x8,x16", "--baseline", "--min-gain",
        "0.5", "--block-tokens", "1", "-n", "200", "-c", "1", "--max-output", "2",
        "--stop-grace", "5", "-f", "json", *_args(stand_in["model"]),
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    labels = [s["label"] for s in doc["steps"]]
    asked = ["x1", "x2", "x4", "x8", "x16"]
    assert labels[0] == "baseline" and labels[1:] == asked[: len(labels) - 1]
    totals = [s["measured"]["hit_rate"]["total"] for s in doc["steps"][1:]]
    gains = [b - a for a, b in itertools.pairwise(totals)]
    if doc["stopped_early_after"]:  # the plateau rule, as measured
        assert doc["stopped_early_after"] == labels[-1] and gains[-1] < 0.005
        assert all(g >= 0.005 for g in gains[:-1])
        assert doc["not_run"] == asked[len(labels) - 1 :]
    else:
        assert all(g >= 0.005 for g in gains) and len(labels) == 6
    starts = _starts(stand_in["record"])
    assert len(starts) == len(labels)
    base, *sized = starts
    assert "--enable-hierarchical-cache" not in base["argv"]
    assert not any(a.startswith("--hicache") for a in base["argv"])
    assert not any(k.startswith("XPUTUNE_HICACHE_") for k in base["env"])
    assert base["env"].get("SGLANG_USE_CPU_ENGINE") == "1"  # the launcher's CPU environment
    for start, label in zip(sized, labels[1:], strict=True):
        argv = start["argv"]
        assert "--enable-hierarchical-cache" in argv
        assert argv[argv.index("--hicache-ratio") + 1] == label[1:]
        assert argv[argv.index("--hicache-size") + 1] == "0"
    assert all(_gone(s["pid"]) for s in starts)
    logs = Path(doc["logs"])
    assert logs.parent == Path(stand_in["model"]).parent
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700
    assert sorted(p.name for p in logs.iterdir()) == sorted(Path(s["log"]).name
                                                             for s in doc["steps"])  # fmt: skip
    for step in doc["steps"][1:]:
        assert step["net_benefit"] is not None and step["timing_s"]["start"] > 0
        assert step["server"]["host_tokens"] == int(1024 * float(step["label"][1:])) + 1


def test_a_sweep_table_on_a_pipe(run_cli, stand_in) -> None:
    code, out, err = run_cli(
        "sweep", "--trace", SLICE, "--sizes", "x2", "--block-tokens", "1", "-n", "20", "-c", "1",
        "--max-output", "1", "--stop-grace", "5", *_args(stand_in["model"]),
    )  # fmt: skip
    assert code == 0, err
    flat = " ".join(out.split())
    assert "hit rate by tier per L2 size: measured (predicted)" in flat
    assert "latency, net benefit against the baseline, and time per step" in flat
    assert "sweep took" in flat and err == ""
    # paths are typed back: the trace's and the logs' stay whole on their line at 80 columns
    logs = next(line for line in out.splitlines() if line.startswith("server logs in "))
    assert os.path.isdir(logs.removeprefix("server logs in ")), logs
    assert any(SLICE in line for line in out.splitlines())


def test_ctrl_c_stops_the_server_and_reports_what_ran(run_cli, stand_in) -> None:
    timer = threading.Timer(4.0, _thread.interrupt_main)
    timer.start()
    try:
        code, out, err = run_cli(
            "sweep",
            "--trace",
            SLICE,
            "--sizes",
            "x2,x4",
            "--block-tokens",
            "1",
            "-f",
            "json",
            "--stop-grace",
            "5",
            *_args(stand_in["model"]),
        )  # fmt: skip  (open loop at the slice's own clock: far longer than 4 s)
    finally:
        timer.cancel()
    assert code == 130, err
    doc = json.loads(out)
    assert doc["interrupted"] and doc["steps"]
    starts = _starts(stand_in["record"])
    assert starts and all(_gone(s["pid"]) for s in starts)


def test_a_launch_that_fails_is_one_line(run_cli, stand_in, monkeypatch) -> None:
    code, out, err = run_cli(
        "sweep", "--trace", SLICE, "--sizes", "x2", "--launch-opt", "--features bogus",
        *_args(stand_in["model"]),
    )  # fmt: skip
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("xputune: error: the launcher refused: ") and "bogus" in err
    assert _starts(stand_in["record"]) == []  # nothing was started
    monkeypatch.setenv("FAKE_SGLANG_FAIL", "1")
    code, out, err = run_cli("sweep", "--trace", SLICE, "--sizes", "x2", *_args(stand_in["model"]))
    assert code == 2 and len(err.splitlines()) == 1
    assert "the server exited with status 3 before it was ready" in err
    assert "not enough memory for the KV cache" in err
    code, _, err = run_cli("sweep", "--trace", SLICE, "--sizes", "x2", "--", "--hicache-size", "4")
    assert code == 2 and "sweep sets --hicache-size at every step" in err


def test_a_break_even_of_noise_is_flagged() -> None:
    """Times that do not follow the tokens (a shared, noisy host) give lines whose break-even
    is arithmetic on noise: it is reported, and marked so."""
    noisy = [5.0, 80.0, 6.0, 3.0, 90.0, 4.0, 7.0]
    base = _step("baseline", None, [_rec(i, 100 * i, 0, 0, noisy[i - 1]) for i in range(1, 8)], 0)
    loads = [_rec(i, 100 * i + 1, 1, 100 * i, noisy[-i]) for i in range(1, 8)]
    got = fits([base, _step("x2", Size("ratio", 2.0), loads, 200)])
    assert got["break_even"] is not None and got["break_even"]["reliable"] is False
