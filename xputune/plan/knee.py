"""Reading a hit-rate curve: its knee, a recommended tier, and the stop-at-plateau rule.

The field report's advice (docs/field-report.md, 3) is to grow L2 tier by tier and stop at the first
plateau, because capacity past the plateau only adds registered-memory cost. Prefix curves can rise
again after a flat stretch (a working set that fits only past some size), so the rule is checked
here against the whole curve (or against every measured tier) and the disagreements are reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xputune.plan.hitrate import HitCurve


@dataclass(frozen=True)
class Knee:
    capacity_tokens: int
    hit_rate: float


def knee(curve: HitCurve) -> Knee | None:
    """Kneedle on the exact step curve: the capacity farthest above the chord to saturation.

    Both axes are normalised (capacity to saturation, hit rate to its maximum), so the knee is
    where the curve stops paying more than its average rate of return per token of capacity.
    """
    import numpy as np

    top = curve.cum_hit_tokens[-1]
    slots = curve.saturation_tokens // curve.block_size
    if top <= 0 or slots < 2:
        return None
    best = kneedle(np.arange(slots + 1), curve.cum_hit_tokens[: slots + 1])
    if best is None:
        return None
    return Knee(best * curve.block_size, float(curve.cum_hit_tokens[best] / curve.total_tokens))


def kneedle(xs: Sequence[float], ys: Sequence[float]) -> int | None:
    """The index of the point farthest above the chord from the first point to the last, both
    axes normalised to 0..1 (Kneedle); None for fewer than three points or a flat line.

    knee() reads an exact curve with it; a sweep reads its measured tiers the same way.
    """
    import numpy as np

    x = np.asarray(xs, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    if len(x) < 3 or x[-1] <= x[0] or y.max() <= y[0]:
        return None
    xn = (x - x[0]) / (x[-1] - x[0])
    yn = (y - y[0]) / (y.max() - y[0])
    return int(np.argmax(yn - xn))


def recommend(curve: HitCurve, tiers: Sequence[int], tolerance: float) -> int | None:
    """The smallest tier within `tolerance` (a hit-rate fraction) of the best reachable rate.

    The best rate is the curve's maximum, or the largest tier's rate when tiers stop short of
    saturation: a tier cannot be blamed for reuse that no offered tier can capture.
    """
    if not tiers:
        return None
    ordered = sorted(tiers)
    best = max(curve.hit_rate(t) for t in ordered)
    for tier in ordered:
        if curve.hit_rate(tier) >= best - tolerance:
            return tier
    return ordered[-1]


@dataclass(frozen=True)
class PlateauVerdict:
    """Where the stop-at-plateau rule stops, and what it misses after that."""

    stop_index: int  # the tier the rule settles on
    first_flat_index: int | None  # the tier whose gain fell under min_gain (None: never)
    best_index: int  # the tier the full data prefer
    missed_gain: float  # hit rate of the best later tier minus the stop tier's
    later_rises: tuple[int, ...]  # tiers after the stop that gain >= min_gain over it

    @property
    def disagrees(self) -> bool:
        return self.best_index != self.stop_index


def plateau_rule(
    hit_rates: Sequence[float],
    min_gain: float,
    ttft_ms: Sequence[float | None] | None = None,
    tolerance: float | None = None,
) -> PlateauVerdict:
    """Apply the field report's rule to tiers in increasing capacity and compare with all of them.

    The rule: go up while each step adds at least `min_gain` of hit rate; at the first step
    that adds less, keep the previous tier. The full-data choice: the tier with the lowest
    TTFT when every tier has one (what the field report actually optimises), else the smallest tier
    within `tolerance` (default: min_gain) of the best hit rate.
    """
    n = len(hit_rates)
    if n == 0:
        raise ValueError("no tiers")
    stop, flat = n - 1, None
    for i in range(1, n):
        if hit_rates[i] - hit_rates[i - 1] < min_gain:
            stop, flat = i - 1, i
            break
    later = tuple(j for j in range(stop + 1, n) if hit_rates[j] - hit_rates[stop] >= min_gain)
    if ttft_ms is not None and len(ttft_ms) == n and all(t is not None for t in ttft_ms):
        best = min(range(n), key=lambda i: (ttft_ms[i], i))  # type: ignore[arg-type]
    else:
        tol = min_gain if tolerance is None else tolerance
        top = max(hit_rates)
        best = next(i for i in range(n) if hit_rates[i] >= top - tol)
    missed = max((hit_rates[j] for j in range(stop + 1, n)), default=hit_rates[stop])
    return PlateauVerdict(stop, flat, best, max(0.0, missed - hit_rates[stop]), later)
