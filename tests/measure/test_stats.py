"""Percentiles, hit rates per tier and throughput as a replay reports them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.measure.stats import Record, hit_rates, measured, percentile, summary


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=50),
    q=st.floats(0, 100),
)
def test_percentiles_agree_with_numpy(values: list[float], q: float) -> None:
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-9)


def test_percentile_edges() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0], 50) == 2.0
    with pytest.raises(ValueError):
        percentile([1.0], 101)
    assert summary([]) == dict.fromkeys(("p50", "p90", "p99", "mean", "min", "max"))
    s = summary([0.001, 0.002, 0.003], 1e3)
    assert (s["p50"], s["mean"], s["min"], s["max"]) == (2.0, 2.0, 1.0, 3.0)


def _record(i: int, prompt: int, device: int, host: int = 0, error: str | None = None,
            ttft: float | None = 0.01, scheduled: float | None = None) -> Record:  # fmt: skip
    return Record(
        index=i, line=i + 1, prompt_tokens=prompt, output_asked=2, scheduled=scheduled,
        sent=0.1 * i, ttft=ttft, e2e=None if ttft is None else ttft * 2, output_tokens=2,
        device=device, host=host, storage=0, overhead=1e-5, error=error,
    )  # fmt: skip


def test_hit_rates_are_token_weighted_over_completed_requests() -> None:
    records = [
        _record(0, 100, 0),
        _record(1, 100, 50, 30),
        _record(2, 200, 100, 0),
        _record(3, 1000, 999, error="HTTP 400: too long"),
    ]
    rates = hit_rates(records)
    assert rates == {"device": 0.375, "host": 0.075, "storage": 0.0, "total": 0.45}
    assert hit_rates([_record(0, 10, 0, error="x")])["total"] is None


def test_the_measured_part() -> None:
    records = [_record(i, 100, 10 * i, scheduled=0.1 * i - 0.01) for i in range(5)]
    records.append(_record(5, 100, 0, error="aborted by the server: too long", ttft=None))
    m = measured(records, elapsed=2.0)
    assert m["requests"] == {"sent": 6, "completed": 5, "failed": 1}
    why = "aborted by the server: too long"
    assert m["errors"] == [{"error": why, "count": 1, "example": why, "first_line": 6}]
    assert m["tokens"]["input"] == 500 and m["tokens"]["cached_device"] == 100
    assert m["ttft_ms"]["p50"] == 10.0 and m["e2e_ms"]["p50"] == 20.0
    assert m["throughput"] == {
        "requests_per_s": 2.5,
        "input_tokens_per_s": 250.0,
        "output_tokens_per_s": 5.0,
    }
    assert m["dispatch_lag_ms"]["max"] == pytest.approx(10.0)
    assert m["client_overhead_us"]["p50"] == 10.0
    closed = measured([_record(0, 10, 0)], elapsed=1.0)
    assert closed["dispatch_lag_ms"] is None
