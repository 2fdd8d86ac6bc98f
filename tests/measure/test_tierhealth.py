"""A tier that fills but never serves, serves far below its capacity, or is slower than
recompute is named with its evidence; healthy tiers and runs within the bound are not."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xputune.measure import tiercounters
from xputune.measure.predict import Prediction
from xputune.measure.server import ServerInfo
from xputune.measure.stats import Record
from xputune.measure.tierhealth import Finding, assess


def _info(storage: str | None = None, policy: str = "write_through") -> ServerInfo:
    return ServerInfo(
        url="u", version="0.5.23", model_path=None, tp_size=1, page_size=1, device_tokens=1024,
        max_req_input_len=None, radix_cache=True, hicache=True, hicache_ratio=2.0,
        hicache_size_gb=0.0,
        write_policy=policy, storage_backend=storage, chunked_prefill=None, host_tokens=2048,
        host_source="ratio", vocab_size=None,
    )  # fmt: skip


def _prediction(host: float, storage: float | None = None) -> Prediction:
    return Prediction(1024, 2048, storage is not None, 0.05, host, storage, 0.9)


def _rec(i: int, prompt: int, device: int = 0, host: int = 0, storage: int = 0,
         ttft_ms: float = 10.0) -> Record:  # fmt: skip
    return Record(i, i + 1, prompt, 1, None, 0.0, ttft_ms / 1e3, ttft_ms / 1e3, 1, device,
                  host, storage, 0.0, None)  # fmt: skip


def _verdicts(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(f.tier, f.verdict) for f in findings]


def test_a_storage_tier_written_and_never_served_is_dead_with_its_evidence() -> None:
    records = [_rec(i, 200, device=10 * (i % 2)) for i in range(20)]
    counters = tiercounters.from_mapping(
        {"host_written": 4000, "storage_written": 5400, "storage_found": 0, "device": 100}
    )
    (found,) = assess(records, _prediction(0.0, 0.3), _info("dynamic"), counters)
    assert (found.tier, found.verdict) == ("storage", "dead")
    assert found.summary == "L3 (storage): written 5,400 tokens, served none"
    assert found.evidence[0] == "requests: 0 of 4,000 prompt tokens came from L3 (storage)"
    assert "prediction at its capacity: 30.00% of the input" in found.evidence
    assert "5,400 tokens written to L3 (storage)" in found.evidence[2]
    assert found.causes[0].startswith("its queries found none of the 5,400 tokens written")
    assert "this run's longest miss was 200 tokens" in found.causes[1]


def test_a_run_whose_misses_pass_the_prefetch_threshold_does_not_blame_it() -> None:
    records = [_rec(i, 600) for i in range(20)]
    counters = tiercounters.from_mapping({"storage_written": 5400, "storage_found": 5400})
    (found,) = [f for f in assess(records, _prediction(0.0, 0.3), _info("file"), counters)
                if f.tier == "storage"]  # fmt: skip
    assert found.causes[0].startswith("found in L3 but never read into L2")
    assert not any("prefetch_threshold" in c for c in found.causes)


def test_a_host_tier_that_is_never_written_says_why_first() -> None:
    records = [_rec(i, 300) for i in range(20)]
    counters = tiercounters.from_mapping({"host_written": 0})
    (found,) = assess(records, _prediction(0.2), _info(policy="write_through_selective"),
                      counters)  # fmt: skip
    assert _verdicts([found]) == [("host", "dead")]
    assert found.summary == "L2 (host): served none"
    assert found.causes[0].startswith("nothing reached L2: write_through_selective")


def test_without_counters_the_finding_says_the_requests_are_the_evidence() -> None:
    records = [_rec(i, 300) for i in range(20)]
    (found,) = assess(records, _prediction(0.2), _info(), None)
    assert any("--enable-metrics" in e for e in found.evidence)


def test_a_tier_far_below_its_prediction_is_starved_and_one_near_it_is_fine() -> None:
    records = [_rec(i, 300, device=15, host=20) for i in range(20)]  # 5% L1, 6.67% L2
    (found,) = assess(records, _prediction(0.30), _info(), None)
    assert _verdicts([found]) == [("host", "starved")]
    assert "serves 6.67%, below half the 30.00% predicted" in found.summary
    assert "11.67% from it and the faster tiers together" in found.evidence[0]
    assert assess(records, _prediction(0.08), _info(), None) == []  # within the bound


def test_a_tier_whose_hits_a_faster_tier_served_is_not_starved() -> None:
    """L1 held more than the model gave it: L2 served less, the two together what was due."""
    records = [_rec(i, 300, device=90, host=20) for i in range(20)]  # 30% L1, 6.67% L2
    assert assess(records, _prediction(0.30), _info(), None) == []  # predicted 5% + 30%


def test_a_tier_predicted_to_serve_nothing_and_serving_nothing_is_healthy() -> None:
    records = [_rec(i, 300) for i in range(20)]
    counters = tiercounters.from_mapping({"host_written": 0})
    assert assess(records, _prediction(0.0), _info(), counters) == []


def test_hits_slower_than_recompute_are_named_with_their_interval() -> None:
    # Misses: R(n) = 5 ms + 0.1 ms x n. Host hits of 300-token prompts take 60 ms where
    # computing them takes 35 ms.
    misses = [_rec(i, 100 + 20 * i, ttft_ms=5 + 0.1 * (100 + 20 * i)) for i in range(10)]
    hits = [_rec(100 + i, 300, host=290, ttft_ms=60.0 + i) for i in range(10)]
    findings = assess(misses + hits, _prediction(0.5), _info(), None)
    slow = [f for f in findings if f.verdict == "slow"]
    assert len(slow) == 1 and slow[0].tier == "host"
    assert slow[0].summary.startswith("L2 (host): its hits take x1.")
    assert "95% interval" in slow[0].summary


def test_hits_faster_than_recompute_are_not_called_slow() -> None:
    misses = [_rec(i, 100 + 20 * i, ttft_ms=5 + 0.1 * (100 + 20 * i)) for i in range(10)]
    hits = [_rec(100 + i, 300, host=290, ttft_ms=8.0 + i * 0.1) for i in range(10)]
    assert [f for f in assess(misses + hits, _prediction(0.5), _info(), None)
            if f.verdict == "slow"] == []  # fmt: skip


def test_too_few_requests_judge_no_speed() -> None:
    misses = [_rec(i, 100, ttft_ms=10) for i in range(3)]
    hits = [_rec(10 + i, 300, host=290, ttft_ms=500) for i in range(3)]
    assert [f.verdict for f in assess(misses + hits, _prediction(0.5), _info(), None)] == []


def test_counters_parse_sum_over_schedulers_and_keep_served_per_source() -> None:
    page = """# HELP sglang:hicache_backup_tokens_total The number of tokens backed up
# TYPE sglang:hicache_backup_tokens_total counter
sglang:hicache_backup_tokens_total{model_name="m",pool="kv",tp_rank="0"} 300.0
sglang:hicache_backup_tokens_total{model_name="m",pool="kv",tp_rank="1"} 300.0
sglang:backuped_tokens_total{model_name="m"} 1.5e3
sglang:cached_tokens_total{cache_source="device",model_name="m"} 40.0
sglang:cached_tokens_total{cache_source="host",model_name="m"} 7.0
sglang:num_running_reqs{model_name="m"} 3.0
sglang:num_requests_total{is_streaming="true",model_name="m"} 12.0
sglang:num_requests_total{is_streaming="false",model_name="m"} 3.0
python_gc_objects_collected_total{generation="0"} 12.0
"""
    got = tiercounters.parse(page.splitlines())
    assert got.host_written == 600 and got.storage_written == 1500 and got.requests == 15
    assert got.served_by("device") == 40 and got.served_by("host") == 7
    assert got.served_by("storage") == 0
    later = tiercounters.from_mapping(
        {"host_written": 900, "storage_written": 1500, "device": 50, "host": 7, "requests": 20}
    )
    delta = later.minus(got)
    assert delta.host_written == 300 and delta.served_by("device") == 10 and delta.requests == 5
    assert delta.document()["served_tokens"] == {"device": 10, "host": 0, "storage": 0}


@pytest.mark.parametrize("value", ["NaN", "-1", "inf", "1e", "0x10"])
def test_a_counter_no_counter_can_hold_is_one_error_naming_the_line(value: str) -> None:
    page = ["# TYPE x counter", f'sglang:backuped_tokens_total{{m="a"}} {value}']
    with pytest.raises(tiercounters.CounterError, match="/metrics line 2"):
        tiercounters.parse(page)


@given(st.lists(st.text(max_size=80), max_size=20))
def test_any_page_parses_to_counters_or_one_counter_error(lines: list[str]) -> None:
    try:
        got = tiercounters.parse(lines)
    except tiercounters.CounterError as exc:
        assert "\n" not in str(exc)
    else:
        assert got.host_written >= 0 and got.storage_written >= 0


def test_written_and_unread_where_nothing_returns_is_not_a_dead_tier() -> None:
    """write_through writes every prefix to L2; a workload that never comes back to one has
    nothing to read there, and the prediction says so."""
    records = [_rec(i, 300) for i in range(20)]
    counters = tiercounters.from_mapping({"host_written": 6000})
    assert assess(records, _prediction(0.0), _info(), counters) == []
