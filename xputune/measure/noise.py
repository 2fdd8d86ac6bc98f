"""How far a measured figure or difference can be trusted: bootstrap intervals over requests.

Method (docs/measure.md, "Noise"): the percentile bootstrap. The requests of a run are drawn
with replacement REPLICATES times (the same draws for every step of a sweep: each step
replays the same requests, so a difference between two steps is computed request by request,
paired), each figure is recomputed on every draw, and its interval is the central CONFIDENCE
share of those values. A difference whose interval holds 0 is "no difference beyond noise".
The draws come from a fixed seed: the same records give the same intervals, run after run.

Everything a sweep reports is a ratio of sums over requests (a hit rate, a mean TTFT, a
least-squares slope), so a draw is a vector of counts per request and every figure of every
draw is one matrix product: counts (draws x requests) @ columns (requests x figures). Beyond
MAX_UNITS requests, runs of consecutive requests are drawn instead of single ones (the cost
stays bounded; a run keeps the requests of a burst together). This runs after the replay, on
the records, never on the replay's own clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

CONFIDENCE = 0.95
REPLICATES = 2000
SEED = 20_251_203
#: requests drawn one by one up to this many; beyond, runs of consecutive requests
MAX_UNITS = 10_000
#: counts held at once (draws x units), bounding memory: 4M counts, 32 MB
_CHUNK = 1 << 22
#: the words a difference within noise is reported with, wherever it is printed
NO_DIFFERENCE = "no difference beyond noise"


@dataclass(frozen=True)
class Interval:
    """A figure and its bootstrap interval (None where there was nothing to measure)."""

    value: float | None
    low: float | None
    high: float | None

    @property
    def beyond_noise(self) -> bool:
        """0 lies outside the interval (a difference the draws agree on the sign of)."""
        if self.low is None or self.high is None:
            return False
        return self.low > 0 or self.high < 0

    def scaled(self, factor: float) -> Interval:
        def s(x: float | None) -> float | None:
            return None if x is None else x * factor

        lo, hi = s(self.low), s(self.high)
        if factor < 0 and lo is not None and hi is not None:
            lo, hi = hi, lo
        return Interval(s(self.value), lo, hi)

    def document(self, digits: int = 6) -> dict[str, Any]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, digits)

        return {"value": r(self.value), "low": r(self.low), "high": r(self.high)}

    def difference(self, digits: int = 6) -> dict[str, Any]:
        """The document of a difference: with whether it is beyond noise."""
        return {**self.document(digits), "beyond_noise": self.beyond_noise}


def interval(value: float | None, draws: np.ndarray) -> Interval:
    """`value` with the central CONFIDENCE share of its values over the draws (draws where it
    is undefined, e.g. no request completed in them, are left out)."""
    if value is None or not np.isfinite(value):
        return Interval(None, None, None)
    finite = draws[np.isfinite(draws)]
    if not finite.size:
        return Interval(float(value), None, None)
    tail = (1.0 - CONFIDENCE) / 2
    low, high = np.quantile(finite, [tail, 1.0 - tail])
    return Interval(float(value), float(low), float(high))


Sums = tuple[float, np.ndarray]  # a sum over the requests, and over each draw


def ratio(num: Sums, den: Sums) -> tuple[float | None, np.ndarray]:
    """num / den, for the point sums and for every draw (NaN where den is 0)."""
    (n0, n), (d0, d) = num, den
    with np.errstate(divide="ignore", invalid="ignore"):
        draws = np.where(d != 0, n / np.where(d != 0, d, 1.0), np.nan)
    return (n0 / d0 if d0 else None), draws


def method(requests: int) -> dict[str, Any]:
    """How the intervals of a run of `requests` were drawn (the documents' "noise" part)."""
    per = _per_unit(requests)
    return {
        "method": "percentile bootstrap over requests, paired between steps",
        "confidence": CONFIDENCE,
        "replicates": REPLICATES,
        "seed": SEED,
        "requests": requests,
        "requests_per_draw": per,
    }


def _per_unit(n: int) -> int:
    return max(1, -(-n // MAX_UNITS))


class Bootstrap:
    """Sums of per-request columns over the same REPLICATES draws of `n` requests."""

    def __init__(self, n: int, replicates: int = REPLICATES, seed: int = SEED) -> None:
        if n < 0 or replicates < 1:
            raise ValueError("need n >= 0 requests and at least one replicate")
        self.n = n
        self.replicates = replicates
        self.seed = seed
        self.per_unit = _per_unit(n)
        self.units = -(-n // self.per_unit) if n else 0

    def sums(self, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the sums of each column, the sums of each column in every draw): shapes (k,) and
        (replicates, k) for columns of shape (n, k). The draws depend on n and the seed only,
        so two calls on the same n are paired."""
        cols = np.asarray(columns, dtype=np.float64)
        if cols.ndim != 2 or cols.shape[0] != self.n:
            raise ValueError(f"columns must be ({self.n}, k), got {cols.shape}")
        k = cols.shape[1]
        if self.n == 0:
            return np.zeros(k), np.zeros((self.replicates, k))
        units = np.add.reduceat(cols, np.arange(0, self.n, self.per_unit), axis=0)
        u = self.units
        rng = np.random.default_rng(self.seed)
        out = np.empty((self.replicates, k))
        rows = max(1, _CHUNK // u)
        for start in range(0, self.replicates, rows):
            r = min(rows, self.replicates - start)
            picks = rng.integers(0, u, size=(r, u))
            flat = (np.arange(r)[:, None] * u + picks).ravel()
            counts = np.bincount(flat, minlength=r * u).reshape(r, u)
            out[start : start + r] = counts @ units
        return units.sum(axis=0), out
