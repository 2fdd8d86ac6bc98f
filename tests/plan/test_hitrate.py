"""The one-pass curve against the brute-force radix-cache simulator, at every capacity."""

from __future__ import annotations

import random

import numpy as np
import pytest
from bruteforce import simulate
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.plan.hitrate import (
    exact_curve,
    sampled_curve,
    tier_point,
    trace_from_requests,
)
from xputune.plan.traces import chain

BLOCK = 4

# A request: page contents from a tiny alphabet (so prefixes are shared often) and how many
# tokens its last page really holds.
request_st = st.tuples(st.lists(st.integers(0, 2), min_size=1, max_size=6), st.integers(1, BLOCK))


def _requests(raw: list[tuple[list[int], int]]) -> list[tuple[list[int], list[int]]]:
    out = []
    for pages, last in raw:
        ids = chain(pages)
        out.append((ids, [BLOCK] * (len(ids) - 1) + [last]))
    return out


def _check_every_capacity(requests: list[tuple[list[int], list[int]]]) -> None:
    curve = exact_curve(trace_from_requests(requests, BLOCK))
    distinct = len({b for ids, _ in requests for b in ids})
    total = sum(sum(toks) for _, toks in requests)
    for capacity in range(0, (distinct + 2) * BLOCK):
        expected = simulate(requests, capacity // BLOCK)
        assert (
            curve.cum_hit_tokens[min(capacity // BLOCK, len(curve.cum_hit_tokens) - 1)] == expected
        ), capacity
        assert curve.hit_rate(capacity) == pytest.approx(expected / total, abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.lists(request_st, min_size=1, max_size=25))
def test_exact_curve_equals_brute_force_at_every_capacity(raw) -> None:
    _check_every_capacity(_requests(raw))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(request_st, min_size=1, max_size=60))
def test_exact_curve_equals_brute_force_many_traces(raw) -> None:
    _check_every_capacity(_requests(raw))


def test_long_trace_over_few_blocks_survives_time_compaction() -> None:
    # The kernel renumbers access times when they run out (every ~n_ids + 1024 touches);
    # thousands of requests over a few dozen blocks cross that many times.
    rng = random.Random(7)
    raw = [
        ([rng.randrange(3) for _ in range(rng.randrange(1, 5))], rng.randrange(1, BLOCK + 1))
        for _ in range(1500)
    ]
    requests = _requests(raw)
    curve = exact_curve(trace_from_requests(requests, BLOCK))
    for blocks in (1, 2, 3, 5, 8, 13, 21, 40):
        assert curve.cum_hit_tokens[min(blocks, len(curve.cum_hit_tokens) - 1)] == simulate(
            requests, blocks
        )


def test_partial_last_block_takes_a_whole_slot_but_counts_its_tokens() -> None:
    # Two identical requests of 1.5 blocks: the second hits all 6 tokens, but only when the
    # cache holds 2 blocks (8 tokens of capacity), not 6.
    requests = [([1, 2], [4, 2]), ([1, 2], [4, 2])]
    curve = exact_curve(trace_from_requests(requests, BLOCK))
    assert curve.hit_rate(4) == pytest.approx(4 / 12)
    assert curve.hit_rate(7) == pytest.approx(4 / 12)
    assert curve.hit_rate(8) == pytest.approx(6 / 12)


def test_uncached_tail_counts_in_the_total_only() -> None:
    trace = trace_from_requests([([1], [4]), ([1], [4])], BLOCK, uncached_tokens=8)
    assert exact_curve(trace).max_hit_rate == pytest.approx(4 / 16)


def test_unchained_ids_are_counted_and_prefix_hits_still_stop_at_a_miss() -> None:
    # Block 5 appears under two different parents: not a prefix-chained trace.
    requests = [([1, 5], [4, 4]), ([2, 5], [4, 4]), ([3, 5], [4, 4])]
    curve = exact_curve(trace_from_requests(requests, BLOCK))
    assert curve.chain_violations == 2
    assert curve.max_hit_rate == 0.0  # every request misses its first block


def test_tiers_follow_the_single_stack() -> None:
    rng = random.Random(3)
    raw = [([rng.randrange(3) for _ in range(rng.randrange(1, 6))], BLOCK) for _ in range(200)]
    curve = exact_curve(trace_from_requests(_requests(raw), BLOCK))
    point = tier_point(curve, 8, 20)
    assert point.l1_hit_rate == curve.hit_rate(8)
    assert point.write_through_hit_rate == curve.hit_rate(20)
    assert point.exclusive_hit_rate == curve.hit_rate(28)
    assert point.exclusive_l2_share >= point.write_through_l2_share >= 0


def test_sampled_curve_at_full_rate_is_the_exact_curve() -> None:
    requests = _requests([([0, 1, 2], 3), ([0, 1], 4), ([0, 1, 2], 3)])
    trace = trace_from_requests(requests, BLOCK)
    assert np.array_equal(
        sampled_curve(trace, 1.0).cum_hit_tokens, exact_curve(trace).cum_hit_tokens
    )


def test_sampled_curve_is_a_curve_close_to_the_exact_one() -> None:
    rng = np.random.default_rng(5)
    docs = rng.zipf(1.3, size=4000) % 500
    lengths = rng.integers(1, 12, size=len(docs))
    requests = [
        ([int(d) * 64 + j for j in range(n)], [BLOCK] * n)
        for d, n in zip(docs, lengths, strict=True)
    ]
    trace = trace_from_requests(requests, BLOCK)
    exact, approx = exact_curve(trace), sampled_curve(trace, 0.25, seed=1)
    caps = np.arange(0, exact.saturation_tokens + BLOCK, BLOCK)
    rates = approx.hit_rates(caps)
    assert np.all(np.diff(rates) >= 0) and rates[-1] <= 1.0
    assert np.abs(rates - exact.hit_rates(caps)).max() < 0.05
    assert 0 < approx.sampled_accesses < trace.accesses


def test_bad_sample_rate_and_capacity_are_refused() -> None:
    trace = trace_from_requests([([1], [4])], BLOCK)
    with pytest.raises(ValueError):
        sampled_curve(trace, 0.0)
    with pytest.raises(ValueError):
        exact_curve(trace).hit_rate(-1)
