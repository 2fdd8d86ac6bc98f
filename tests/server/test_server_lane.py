"""Every plugin feature, proven by behaviour in running sglang servers on CPU, on both ends of
the supported range (0.5.20 and 0.5.23, each in its own environment).

For MLA (DeepSeek-V2-style) and MHA (Llama-style) tiny models: the features off, and
count-once with the ghost list on (see scenarios.py); on 0.5.20 for MLA also count-once
alone, the ghost list's baseline (0.5.22+ counts once by itself, so "off" is the baseline
there; a third MHA server would repeat the same cache code for 30-70 s). Then MLA at TP 2 with
one shared host buffer; on the newest release a fake later release whose one target moved;
and a bad switch that must stop the server at once. The numbers each test saw are in its
assertion messages; XPUTUNE_SERVER_REPORT=<file> also writes them all as JSON.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.server import scenarios
from tests.server.server import DEVICE, Server, ServerFailed, join_stops
from tests.sglang.releases import NEWEST, OLDEST

pytestmark = pytest.mark.timeout(900)

KINDS = ("mla", "mha")
STARTUP = "xputune cache plugin on sglang"
_runs: dict[tuple[str, str, str], dict[str, Any]] = {}


def counts_once_itself(release: str) -> bool:
    """0.5.22 and later count a request once per node without the plugin."""
    return release != OLDEST


@pytest.fixture(scope="module")
def lane(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    """Runs each (release, model, scenario) once, on first use; reports numbers at the end."""

    def get(release: str, kind: str, scenario: str) -> dict[str, Any]:
        key = (release, kind, scenario)
        if key not in _runs:
            workdir = tmp_path_factory.mktemp(f"{release}-{kind}-{scenario}")
            _runs[key] = scenarios.run(scenario, models[kind], workdir, release)
        return _runs[key]

    yield get
    join_stops()
    report = os.environ.get("XPUTUNE_SERVER_REPORT")
    if report:
        Path(report).write_text(json.dumps(_summary(), indent=1, default=_plain))


def _plain(obj: Any) -> Any:
    return obj.__dict__ if hasattr(obj, "__dict__") else str(obj)


def _summary() -> dict[str, Any]:
    drop = {"log", "ranks"}
    return {"/".join(k): {n: v for n, v in r.items() if n not in drop} for k, r in _runs.items()}


def _startup_lines(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if STARTUP in ln]


@pytest.mark.parametrize("kind", KINDS)
def test_startup_line_names_features_and_the_classes_hooked(lane, release: str, kind: str) -> None:
    on = lane(release, kind, "on")
    lines = _startup_lines(on["log"])
    assert len(lines) == 1, on["log"][-3000:]
    line = lines[0]
    assert f"sglang {release}:" in line, line  # a tested release: no "(untested ...)"
    acting = line.split(": ", 1)[1].split(" on;")[0].split(", ")
    pool = "MLATokenToKVPoolHost" if kind == "mla" else "MHATokenToKVPoolHost"
    hooked = ["UnifiedRadixCache", "UnifiedTreeCore", pool, "L2TransferEngine"]
    if counts_once_itself(release):
        assert acting == ["lifo", "ghost", "kernels", "async", "host_alloc", "stats"], line
        assert f"; count_once built into sglang {release};" in line, line
    else:
        assert acting == ["lifo", "count_once", "ghost", "kernels", "async", "host_alloc",
                          "stats"], line  # fmt: skip
        assert "built into" not in line, line
    assert "off:" not in line, line
    assert line.split("; hooked ")[1].split(";")[0].split(", ") == hooked, line
    assert "impl=UnifiedRadixCache" in on["log"] and "hicache_attached=True" in on["log"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_host_round_trip_returns_the_same_greedy_output(lane, release: str, kind: str) -> None:
    on = lane(release, kind, "on")
    first, again = on["a_first"], on["a_again"]
    msg = f"{release} {kind}: first {first}, revisit {again}"
    assert first.cached == 0, msg
    assert again.host >= scenarios.LENGTH - 16 and again.device == 0, msg  # evicted, then loaded
    assert again.output_ids == first.output_ids, msg
    assert again.logprobs == pytest.approx(first.logprobs, abs=1e-3), msg
    assert on["stats"].get("h2d_tokens", 0) >= again.host, on["stats"]


@pytest.mark.parametrize("kind", KINDS)
def test_b_one_request_writes_nothing_and_two_requests_write(lane, release: str, kind: str) -> None:
    """0.5.20 counts one request twice (it alone writes its prompt) until count-once is on;
    0.5.22+ counts once by itself, with or without the plugin, and nothing is hooked for it."""
    off, on = lane(release, kind, "off"), lane(release, kind, "on")
    runs = {"off": off, "on": on}
    if kind == "mla" and not counts_once_itself(release):
        runs["count_once"] = lane(release, kind, "count_once")
    numbers = {n: (r["one_request_backup"], r["two_requests_backup"]) for n, r in runs.items()}
    msg = f"{release} {kind}: backup tokens (one request, two requests) {numbers}"
    for name, run in runs.items():
        assert run["two_requests_backup"] >= scenarios.LENGTH - 16, msg
        if name == "off" and not counts_once_itself(release):
            assert run["one_request_backup"] >= scenarios.LENGTH - 16, msg  # counted twice
        else:
            assert run["one_request_backup"] == 0, msg
    if counts_once_itself(release):
        assert "count_once_suppressed" not in on["stats"], on["stats"]  # nothing hooked
    else:
        assert on["stats"].get("count_once_suppressed", 0) > 0, on["stats"]
        assert "count_once_suppressed" not in off["stats"], off["stats"]


@pytest.mark.parametrize("kind", KINDS)
def test_c_ghost_list_writes_back_only_the_proven_prefix(lane, release: str, kind: str) -> None:
    on = lane(release, kind, "on")
    if counts_once_itself(release):
        baseline: str | None = "off"
    else:
        baseline = "count_once" if kind == "mla" else None
    without = lane(release, kind, baseline)["reseen_after_eviction_backup"] if baseline else None
    msg = (
        f"{release} {kind}: X evicted unbacked, then X+S: backup tokens without ghost "
        f"{without}, with ghost {on['reseen_after_eviction_backup']} (ghost proven backups "
        f"{on['ghost_proven_backups']}, tokens {on['ghost_backed_tokens']})"
    )
    assert without in (0, None), msg
    written = on["reseen_after_eviction_backup"]
    # X (300 tokens) proven reused is written; its one-off suffix S (100 tokens) is not.
    assert scenarios.LENGTH - 16 <= written <= scenarios.LENGTH, msg
    assert on["ghost_backed_tokens"] == written and on["ghost_proven_backups"] >= 1, msg
    assert on["stats"].get("ghost_dropped_pages", 0) >= scenarios.LENGTH, on["stats"]


@pytest.mark.parametrize("kind", KINDS)
def test_d_lifo_async_and_kernels_acted(lane, release: str, kind: str) -> None:
    stats = lane(release, kind, "on")["stats"]
    msg = f"{release} {kind}: {stats}"
    assert stats.get("lifo_allocs", 0) > 0 and stats.get("lifo_alloc_tokens", 0) > 0, msg
    assert stats.get("async_d2h_jobs", 0) > 0 and stats.get("async_h2d_jobs", 0) > 0, msg
    suffix = "_mla" if kind == "mla" else ""
    assert stats.get(f"kernel_transfer_kv_all_layer{suffix}", 0) > 0, msg  # D2H, all layers
    assert stats.get(f"kernel_transfer_kv_per_layer{suffix}", 0) > 0, msg  # H2D, per layer
    assert stats.get("d2h_tokens", 0) == stats.get("backup_tokens", 0), msg


def test_e_tp_shared_host_kv_at_tp2(lane, release: str) -> None:
    if DEVICE != "cpu":
        import torch

        if torch.cuda.device_count() < 2:
            pytest.skip(f"--tp-size 2 on {DEVICE} needs two devices")
    run = lane(release, "mla", "tp_shared")
    ranks = run["ranks"]
    msg = f"{release}: {[(r['info'], r['counters']) for r in ranks]}"
    assert len(ranks) == 2, msg
    names = {r["info"].get("host_buffer_name") for r in ranks}
    assert len(names) == 1 and None not in names, msg  # one buffer, mapped by both ranks
    assert {r["info"].get("host_buffer") for r in ranks} == {"TpSharedBuffer"}, msg
    writers = [r for r in ranks if r["counters"].get("kernel_transfer_kv_all_layer_mla", 0)]
    skippers = [r for r in ranks if r["counters"].get("tp_shared_skipped_d2h", 0)]
    assert len(writers) == 1 and len(skippers) == 1 and writers != skippers, msg
    first, again = run["a_first"], run["a_again"]
    assert again.host >= scenarios.LENGTH - 16, f"{first} {again}"
    assert again.output_ids == first.output_ids, f"{first} {again}"


def test_f_a_later_release_whose_target_moved_runs_every_other_feature(lane) -> None:
    """The newest environment posing as 0.5.99, whose LayerLoadingEvent.wait renamed its
    parameter, under the Rust tree core: async is off (its target moved) and ghost is off (no
    Python hook reaches that core), each named in the startup line and one WARNING line; the
    rest act, and a host round trip returns the same tokens."""
    from tests.sglang.releases import unavailable

    reason = unavailable(NEWEST)
    if reason:
        pytest.skip(reason)
    run = lane(NEWEST, "mla", "moved")
    log = run["log"]
    (line,) = _startup_lines(log)
    fake = scenarios.FAKE_RELEASE
    assert line.split("xputune cache plugin on ")[1].startswith(f"sglang {fake} (untested: "), line
    assert ": lifo, kernels, host_alloc, stats on; " in line, line
    assert f"; count_once built into sglang {fake};" in line, line
    assert "off: async (sglang.srt.managers.cache_controller.LayerLoadingEvent.wait: " in line
    assert "signature is (self, layer), the plugin expects (self, layer_index))" in line, line
    assert "ghost (this server's cache walks its tree in RustUnifiedTreeCore" in line, line
    warnings = [ln for ln in log.splitlines() if "xputune cache plugin: " in ln and " off: " in ln]
    assert len({w.split(" off: ")[0][-12:] for w in warnings}) == 2, warnings  # async, ghost
    assert "Traceback" not in log.split(STARTUP)[0], log[-3000:]
    first, again = run["a_first"], run["a_again"]
    assert again.host >= scenarios.LENGTH - 16, f"{first} {again}"
    assert again.output_ids == first.output_ids, f"{first} {again}"
    stats = run["stats"]
    assert stats.get("lifo_allocs", 0) > 0 and stats.get("kernel_transfer_kv_all_layer_mla"), stats
    assert "async_d2h_jobs" not in stats and "ghost_dropped_pages" not in stats, stats


def test_a_bad_switch_stops_the_server_at_once(models, tmp_path: Path, release: str) -> None:
    server = Server(
        models["mla"],
        tmp_path,
        features="lifo,kernels",
        extra_env={"XPUTUNE_HICACHE_ASYNC": "maybe"},
        release=release,
    )
    t0 = time.monotonic()
    with pytest.raises(ServerFailed):
        server.start()
    assert time.monotonic() - t0 < 120
    assert "xputune cache plugin refused: XPUTUNE_HICACHE_ASYNC='maybe': expected 1 or 0" in (
        server.log()
    )


@pytest.mark.parametrize("kind", KINDS)
def test_gpu_stand_ins_were_never_called_by_the_server(lane, release: str, kind: str) -> None:
    calls = lane(release, kind, "on")["standin_calls"] + lane(release, kind, "off")["standin_calls"]
    at_run = sorted({c for c in calls if not c.startswith("import ")})
    assert at_run == [], at_run  # only import-time decorator plumbing ever touched one
    assert not any("sgl_kernel" in c or "torchvision" in c for c in calls), sorted(set(calls))
