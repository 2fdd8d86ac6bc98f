"""Net benefit of a prefix hit: load it from L2, or recompute it?

The field report's governing formula (docs/field-report.md, 1) is: net benefit = compute time saved
by hits - cost of moving KV across tiers. For one request whose n-token prefix hits in L2, loading
takes T(n) = a + b*n (a: fixed cost of the L2 path, b: transfer time per token) and recomputing
takes R(n) = c + d*n. Both are fitted from measurements by least squares. The hit pays off above the
break-even length n* = (a - c) / (d - b): shorter hits cost more than they save.

The slope b is also a bandwidth check: b * bandwidth is the bytes moved per token, which must
match the model's KV geometry; a mismatch means the fit is measuring something else.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LinearFit:
    """y = intercept + slope * x, with what the fit leaves unexplained (time in ms, x in tokens)."""

    intercept_ms: float
    slope_ms_per_token: float
    xs: tuple[float, ...] = ()
    ys: tuple[float, ...] = ()

    def at(self, tokens: float) -> float:
        return self.intercept_ms + self.slope_ms_per_token * tokens

    @property
    def residuals_ms(self) -> tuple[float, ...]:
        return tuple(y - self.at(x) for x, y in zip(self.xs, self.ys, strict=True))

    @property
    def rms_residual_ms(self) -> float:
        res = self.residuals_ms
        return math.sqrt(sum(r * r for r in res) / len(res)) if res else 0.0

    @property
    def r_squared(self) -> float | None:
        if len(self.ys) < 3:
            return None
        mean = sum(self.ys) / len(self.ys)
        total = sum((y - mean) ** 2 for y in self.ys)
        if total == 0:
            return None
        return 1.0 - sum(r * r for r in self.residuals_ms) / total

    @property
    def slope_us_per_token(self) -> float:
        return self.slope_ms_per_token * 1000.0


def fit_line(points: Sequence[tuple[float, float]]) -> LinearFit:
    """Least squares through (tokens, ms) points; one point means a line through the origin."""
    if not points:
        raise ValueError("no points to fit")
    xs = tuple(float(x) for x, _ in points)
    ys = tuple(float(y) for _, y in points)
    if any(x < 0 for x in xs) or any(y < 0 for y in ys):
        raise ValueError("tokens and times must be >= 0")
    if len(points) == 1:
        if xs[0] == 0:
            raise ValueError("one point at 0 tokens fixes no slope")
        return LinearFit(0.0, ys[0] / xs[0], xs, ys)
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("all points have the same token count; vary the prefix length")
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return LinearFit(my - slope * mx, slope, xs, ys)


@dataclass(frozen=True)
class BreakEven:
    """Where loading starts to beat recomputing. `tokens` is None when it never does."""

    tokens: float | None
    always: bool  # loading wins at every length (cheaper fixed cost and slope)
    saving_per_token_ms: float  # d - b: what each further hit token saves


def break_even(load: LinearFit, recompute: LinearFit) -> BreakEven:
    """The prefix length above which an L2 hit saves time (a + b n < c + d n)."""
    gap = load.intercept_ms - recompute.intercept_ms  # fixed cost loading adds
    gain = recompute.slope_ms_per_token - load.slope_ms_per_token
    if gain <= 0:
        return BreakEven(None, gap < 0 and gain == 0, gain)
    if gap <= 0:
        return BreakEven(0.0, True, gain)
    return BreakEven(gap / gain, False, gain)


def recompute_needed(load: LinearFit, floor_ms: float, tokens: float) -> float:
    """Recompute cost per token (ms) for break-even at `tokens` when R(n) = floor + d*n."""
    if tokens <= 0:
        raise ValueError("tokens must be > 0")
    return load.slope_ms_per_token + (load.intercept_ms - floor_ms) / tokens


def bytes_per_token(slope_ms_per_token: float, bandwidth_gb_s: float) -> float:
    """Bytes moved per token implied by a transfer slope at a bandwidth (GB = 1e9 bytes)."""
    return slope_ms_per_token / 1000.0 * bandwidth_gb_s * 1e9


def bandwidth_gb_s(slope_ms_per_token: float, bytes_per_tok: float) -> float:
    """Effective bandwidth implied by a transfer slope and the model's bytes per token."""
    if slope_ms_per_token <= 0:
        raise ValueError("slope must be > 0")
    return bytes_per_tok / (slope_ms_per_token / 1000.0) / 1e9
