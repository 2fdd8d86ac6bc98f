"""Noise: bootstrap intervals over per-request samples, paired between a sweep's steps, and the
verdicts they allow (a difference within noise is "no difference beyond noise", never a result).
Synthetic records only: the figures are known."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.measure.steps import step
from xputune.measure import noise
from xputune.measure.analysis import (
    Paired,
    _kneedle_draws,
    differences,
    knee_and_plateau,
    net_benefit,
    recompute_fit,
)
from xputune.measure.noise import NO_DIFFERENCE, Bootstrap, Interval, interval
from xputune.measure.stats import Record, failures, reason, validity
from xputune.measure.sweep import Size, Step
from xputune.plan.knee import kneedle


def _rec(i: int, prompt: int, cached: int, ttft_ms: float, host: int = 0,
         error: str | None = None) -> Record:  # fmt: skip
    ttft = None if error else ttft_ms / 1e3
    return Record(i, i + 1, prompt, 1, None, 0.0, ttft, ttft, 1, cached - host, host, 0, 0.0,
                  error)  # fmt: skip


def _step(label: str, records: list[Record], host_tokens: int = 0) -> Step:
    size = None if label == "baseline" else Size("ratio", float(label[1:]))
    return step(label, size, records, host_tokens)


N = 300
RNG = np.random.default_rng(7)
PROMPTS = RNG.integers(50, 500, N)
HITS = (PROMPTS * RNG.uniform(0, 0.5, N)).astype(int)


def _ttfts(seed: int, shift: float = 0.0) -> np.ndarray:
    """TTFT ms of N requests: 20 ms + 0.05 ms per prompt token, noise of a few ms."""
    rng = np.random.default_rng(seed)
    return 20 + 0.05 * PROMPTS + rng.normal(0, 4, N) + shift


def _records(ttfts: np.ndarray, hits: np.ndarray, host: np.ndarray | None = None) -> list[Record]:
    host = np.zeros(N, int) if host is None else host
    return [_rec(i, int(PROMPTS[i]), int(hits[i]), float(ttfts[i]), int(host[i]))
            for i in range(N)]  # fmt: skip


def test_the_draws_are_seeded_and_the_same_for_every_call() -> None:
    cols = RNG.random((N, 3))
    a = Bootstrap(N).sums(cols)
    b = Bootstrap(N).sums(cols[:, :1])
    assert np.allclose(a[1][:, :1], b[1]) and np.allclose(a[0], cols.sum(axis=0))
    assert a[1].shape == (noise.REPLICATES, 3)


def test_past_max_units_runs_of_requests_are_drawn(monkeypatch) -> None:
    monkeypatch.setattr(noise, "MAX_UNITS", 40)
    boot = Bootstrap(N)
    assert boot.per_unit == 8 and boot.units == 38  # ceil(300 / 40), ceil(300 / 8)
    point, draws = boot.sums(np.ones((N, 1)))
    assert point[0] == N and draws.mean() == pytest.approx(N, rel=0.05)
    assert noise.method(N)["requests_per_draw"] == 8


def test_an_interval_holds_its_figure_and_narrows_with_more_requests() -> None:
    widths = []
    for n in (50, 5000):
        x = np.random.default_rng(1).normal(10, 2, n)
        point, draws = Bootstrap(n).sums(np.column_stack([x, np.ones(n)]))
        iv = interval(*noise.ratio((point[0], draws[:, 0]), (point[1], draws[:, 1])))
        assert iv.low <= iv.value <= iv.high and iv.value == pytest.approx(x.mean())
        widths.append(iv.high - iv.low)
    assert widths[1] < widths[0] / 5  # about 1/sqrt(100)
    assert Interval(0.1, -0.2, 0.3).beyond_noise is False
    assert Interval(0.1, 0.0, 0.3).beyond_noise is False  # 0 inside: noise
    assert Interval(-1.0, -2.0, -0.5).beyond_noise is True
    assert interval(None, np.zeros(3)) == Interval(None, None, None)


def test_equal_tiers_are_no_difference_beyond_noise() -> None:
    """Two sizes that serve the same hits, their TTFTs two draws of the same noise: every
    difference sweep reports is within noise, and nothing is preferred or called a knee."""
    base = _step("baseline", _records(_ttfts(1), np.zeros(N, int)))
    sizes = [_step(f"x{2 ** k}", _records(_ttfts(2 + k), HITS, HITS // 2), 200 * 2**k)
             for k in range(1, 4)]  # fmt: skip
    steps = [base, *sizes]
    paired = Paired(steps, N)
    for d in differences(steps, paired):
        assert d["hit_rate"] == {"value": 0.0, "low": 0.0, "high": 0.0, "beyond_noise": False}
        assert not d["ttft_mean_ms"]["beyond_noise"], d
        assert d["ttft_mean_ms"]["low"] < 0 < d["ttft_mean_ms"]["high"]
        assert d["verdict"] == NO_DIFFERENCE
    got = knee_and_plateau(steps, 0.0, paired)
    assert got["knee"] is None and got["knee_verdict"].startswith("none")
    rule = got["plateau_rule"]
    assert rule["measurements_prefer"] is None
    assert rule["within_noise_of_best"] == ["x2", "x4", "x8"] and not rule["disagrees"]
    assert rule["missed_hit_rate_interval"]["beyond_noise"] is False


def test_a_ttft_shift_between_sizes_that_serve_alike_is_not_the_caches() -> None:
    """The host's load moved while one size ran: every request of it 30 ms slower, its hits
    the same as the next size's. The TTFT difference is real (beyond noise) but it is not a
    cache effect: said so, and neither size is preferred over the other."""
    x2 = _step("x2", _records(_ttfts(2, shift=10.0), HITS // 2, HITS // 4), 200)
    x4 = _step("x4", _records(_ttfts(3, shift=30.0), HITS, HITS // 2), 400)
    x8 = _step("x8", _records(_ttfts(4), HITS, HITS // 2), 800)
    steps = [x2, x4, x8]
    paired = Paired(steps, N)
    up, down = differences(steps, paired)
    assert up["hit_rate"]["beyond_noise"] and up["verdict"] == "beyond noise"
    assert down["ttft_mean_ms"]["beyond_noise"] and down["ttft_mean_ms"]["high"] < -20
    assert down["verdict"] == "TTFT differs without a hit difference beyond noise"
    rule = knee_and_plateau(steps, 0.0, paired)["plateau_rule"]
    assert rule["measurements_prefer"] is None and rule["within_noise_of_best"] == ["x4", "x8"]


def test_a_size_that_serves_like_a_tied_one_is_tied_too() -> None:
    """x2 is fastest, x4 within noise of it; x8 serves exactly x4's hits but ran 30 ms slower
    per request (the host's load): it is tied with them, not beaten by them."""
    x2 = _step("x2", _records(_ttfts(2), HITS // 2, HITS // 4), 200)
    x4 = _step("x4", _records(_ttfts(3), HITS, HITS // 2), 400)
    x8 = _step("x8", _records(_ttfts(4, shift=30.0), HITS, HITS // 2), 800)
    x16 = _step("x16", _records(_ttfts(5, shift=60.0), HITS * 2 // 3 + 1, HITS // 3), 1600)
    rule = knee_and_plateau([x2, x4, x8, x16], 0.0)["plateau_rule"]
    assert rule["within_noise_of_best"] == ["x2", "x4", "x8"] and rule["stops_at"] == "x8"
    assert not rule["disagrees"] and rule["measurements_prefer"] is None


def test_hits_without_a_ttft_change_are_said_to_be_noise_in_ttft() -> None:
    base = _step("baseline", _records(_ttfts(1), np.zeros(N, int)))
    same = _step("x2", _records(_ttfts(2), np.zeros(N, int)), 200)
    nb = net_benefit(same, base, recompute_fit([base, same]))
    assert nb is not None and nb["verdict"] == NO_DIFFERENCE
    assert not nb["intervals"]["ttft_saved_ms"]["beyond_noise"]
    assert nb["intervals"]["extra_hit_tokens"]["value"] == 0.0


def test_a_real_difference_is_reported_with_its_interval() -> None:
    """A size that serves half of every prompt from L2 and saves its compute: hit rate, TTFT
    saved, compute saved and the knee are beyond noise, each inside its interval."""
    base = _step("baseline", _records(_ttfts(1), np.zeros(N, int)))
    half = PROMPTS // 2
    fast = _ttfts(2) - 0.05 * half + 0.01 * half  # computes half, loads it at 0.01 ms/token
    x2 = _step("x2", _records(_ttfts(3), np.zeros(N, int)), 200)
    x4 = _step("x4", _records(fast, half, half), 400)
    x8 = _step("x8", _records(fast, half, half), 800)
    steps = [base, x2, x4, x8]
    paired = Paired(steps, N)
    first = differences(steps, paired)[0]
    rate = first["hit_rate"]
    assert rate["beyond_noise"] and 0 < rate["low"] <= rate["value"] <= rate["high"]
    assert first["ttft_mean_ms"]["beyond_noise"] and first["ttft_mean_ms"]["high"] < 0
    nb = net_benefit(x4, base, recompute_fit(steps), paired)
    assert nb is not None and nb["verdict"] == "beyond noise"
    saved = nb["intervals"]["ttft_saved_ms"]
    assert saved["low"] <= nb["ttft_saved_ms"] <= saved["high"] and saved["low"] > 0
    compute = nb["intervals"]["compute_saved_ms"]
    assert compute["beyond_noise"] and compute["value"] == pytest.approx(
        nb["compute_saved_ms"], abs=1e-3
    )  # the same slope as the recompute line's least squares
    got = knee_and_plateau(steps, 0.0, paired)
    assert got["knee"]["size"] == "x4" and got["knee"]["rise"]["beyond_noise"]
    assert got["knee"]["share"] > 0.9 and got["knee_verdict"] == "knee"
    rule = got["plateau_rule"]
    assert rule["measurements_prefer"] is None  # x4 and x8 are the same: tied, not chosen
    assert rule["within_noise_of_best"] == ["x4", "x8"]


@settings(max_examples=60, deadline=None)
@given(
    ttfts=st.lists(st.floats(0.1, 1e4, allow_nan=False), min_size=2, max_size=40),
    shift=st.floats(0.5, 100.0),
)
def test_paired_differences_of_a_constant_shift_are_exact(ttfts: list[float], shift: float) -> None:
    """Paired by request, a step that is every request of another plus `shift` ms differs by
    exactly `shift` in every draw: beyond noise, however noisy the requests are; and a step
    against a copy of itself is no difference, exactly."""
    n = len(ttfts)
    a = _step("x2", [_rec(i, 100, 10, t) for i, t in enumerate(ttfts)], 200)
    b = _step("x4", [_rec(i, 100, 10, t + shift) for i, t in enumerate(ttfts)], 400)
    c = _step("x8", [_rec(i, 100, 10, t + shift) for i, t in enumerate(ttfts)], 800)
    shifted, same = differences([a, b, c], Paired([a, b, c], n))
    assert shifted["ttft_mean_ms"]["low"] == pytest.approx(shift, abs=1e-3)  # rounded to us
    assert shifted["ttft_mean_ms"]["high"] == pytest.approx(shift, abs=1e-3)
    assert shifted["ttft_mean_ms"]["beyond_noise"]
    assert same["ttft_mean_ms"]["value"] == 0 and not same["ttft_mean_ms"]["beyond_noise"]


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(
        st.lists(st.floats(0, 1, allow_nan=False), min_size=4, max_size=4),
        min_size=1,
        max_size=20,
    ),
)
def test_the_knee_of_every_draw_is_kneedles(rows: list[list[float]]) -> None:
    xs = np.array([1.0, 2.0, 4.0, 8.0])
    got = _kneedle_draws(xs, np.array(rows))
    for row, k in zip(rows, got, strict=True):
        want = kneedle(xs, row)
        assert k == (-1 if want in (None, 0) else want)


def test_failures_are_grouped_by_reason_and_the_threshold_is_kept() -> None:
    too_long = "aborted by the server: Input length ({} tokens) exceeds the maximum allowed " \
        "length (1018 tokens)"  # fmt: skip
    records = [_rec(i, 100, 0, 5.0) for i in range(13)]
    records += [_rec(13 + i, 2000 + i, 0, 0, error=too_long.format(2000 + i)) for i in range(85)]
    records += [_rec(98 + i, 10, 0, 0, error="TimeoutError: timed out") for i in range(2)]
    groups = failures(records)
    assert [(g["count"], g["first_line"]) for g in groups] == [(85, 14), (2, 99)]
    assert (
        groups[0]["error"]
        == reason(too_long.format(7))
        == too_long.format("N").replace("1018", "N")
    )
    assert groups[0]["example"] == too_long.format(2000)
    assert reason("HTTP 400: length 5") == "HTTP 400: length N"
    (why,) = validity(records)
    assert why.startswith("87 of 100 requests failed (13.0% completed, below the threshold of "
                          "100.0%") and "(85x)" in why  # fmt: skip
    assert validity(records, 0.13) == []
    assert validity(records[:13]) == []
    assert validity([]) == ["no request was sent"]
    assert validity(records[13:], 0.0) == ["none of the 87 requests sent completed"]
