"""The knee, the recommendation, and the stop-at-plateau rule against full data."""

from __future__ import annotations

from xputune.plan.hitrate import exact_curve, trace_from_requests
from xputune.plan.knee import knee, plateau_rule, recommend


def test_plateau_rule_stops_before_a_late_rise() -> None:
    rates = [0.30, 0.45, 0.455, 0.457, 0.70, 0.71]
    v = plateau_rule(rates, min_gain=0.01)
    assert v.stop_index == 1 and v.first_flat_index == 2
    assert v.later_rises == (4, 5)
    assert v.best_index == 4 and v.disagrees  # 0.70 is within 1 point of the best
    assert abs(v.missed_gain - 0.26) < 1e-9


def test_plateau_rule_uses_ttft_when_every_tier_has_it() -> None:
    # The seed's last row: a smaller L2 at the same hit rate was faster.
    v = plateau_rule([0.46, 0.72, 0.72], 0.01, ttft_ms=[1000.0, 700.0, 760.0])
    assert v.stop_index == 1 and v.best_index == 1 and not v.disagrees


def _two_working_sets():
    # 30 requests over a small hot set, then 30 over a larger one, repeated: the curve is
    # flat between the two set sizes and rises again past the larger one.
    small = [([1, 2], [4, 4])]
    big = [([100 + i, 200 + i], [4, 4]) for i in range(12)]
    return trace_from_requests((small * 3 + big) * 20, 4)


def test_knee_and_recommendation_on_a_stepped_curve() -> None:
    curve = exact_curve(_two_working_sets())
    k = knee(curve)
    assert k is not None and 0 < k.capacity_tokens <= curve.saturation_tokens
    tiers = [8, 16, 32, 64, 128, 256]
    pick = recommend(curve, tiers, tolerance=0.01)
    assert curve.hit_rate(pick) >= max(curve.hit_rate(t) for t in tiers) - 0.01
    assert all(curve.hit_rate(t) < curve.hit_rate(pick) - 0.01 for t in tiers if t < pick)
