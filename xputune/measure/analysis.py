"""What a sweep's measurements say: the load and recompute lines, net benefit, knee, plateau.

The lines are plan/netbenefit.py's (fit_line, break_even: the same least squares `xputune
model` runs on typed-in points), fitted here to requests the sweep measured:

- load, T(n) = a + b*n: all-hit requests of the HiCache sizes (the whole prompt but its last
  page came from cache) with some of it loaded from L2 or L3; n = tokens loaded from there,
  T = TTFT. The field report's measurement (docs/field-report.md, 3), without anyone typing
  points in.
- recompute, R(n) = c + d*n: the baseline's requests (HiCache off), n = prompt tokens the
  server computed (prompt - cached), R = TTFT; without a baseline, the HiCache sizes'
  requests that loaded nothing from L2 or L3.

Net benefit of a size against the baseline, per request: TTFT saved (measured) = compute saved
by its extra hits (d x extra hit tokens) - cost of moving KV across tiers (what is left).

Every difference carries its bootstrap interval (measure/noise.py: the same draws of requests
for every step, so differences are paired request by request), and one whose interval holds 0
is "no difference beyond noise", never a finding: the preferred size is the one whose mean
TTFT (or hit rate) is beyond noise better than every other size's, else none (the sizes tied
with the best are listed). A TTFT difference between two sizes whose hits (in total, from L2
and from L3) do not differ beyond noise is not the cache's doing (the host's load moved between
the steps, or the servers differ otherwise): it is said so, and such sizes tie. A knee is
reported only when the hit rate rises beyond noise across the sizes, with the share of draws
that put it there.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from xputune.plan.netbenefit import LinearFit, break_even, fit_line

if TYPE_CHECKING:
    import numpy as np

    from xputune.measure.noise import Interval
    from xputune.measure.stats import Record
    from xputune.measure.sweep import Step


def load_points(steps: Sequence[Step]) -> list[tuple[float, float]]:
    """(tokens loaded from L2/L3, TTFT ms) of the all-hit requests of the HiCache sizes."""
    out = []
    for step in steps:
        if not step.hicache or step.info is None:
            continue
        page = step.info.page_size
        for r in step.records:
            loaded = r.host + r.storage
            if r.ok and r.ttft is not None and loaded > 0 and r.cached >= r.prompt_tokens - page:
                out.append((float(loaded), r.ttft * 1e3))
    return out


def _recompute_records(steps: Sequence[Step]) -> tuple[list[Record], str]:
    """The requests the recompute line is fitted to, and where they come from."""

    def chosen(records: Sequence[Record], only_l1: bool) -> list[Record]:
        return [
            r
            for r in records
            if r.ok and r.ttft is not None and not (only_l1 and r.host + r.storage)
        ]

    base = [s for s in steps if not s.hicache and s.run is not None]
    if base:
        return chosen(base[0].records, False), "baseline requests"
    found = [r for s in steps if s.run is not None for r in chosen(s.records, True)]
    return found, "requests that loaded nothing from L2/L3"


def recompute_points(steps: Sequence[Step]) -> tuple[list[tuple[float, float]], str]:
    """(prompt tokens computed, TTFT ms) and where they come from."""
    records, source = _recompute_records(steps)
    return [(float(r.prompt_tokens - r.cached), r.ttft * 1e3) for r in records], source  # type: ignore[operator]


def _fit(points: list[tuple[float, float]]) -> tuple[LinearFit | None, str | None]:
    if len(points) < 2:
        return None, f"{len(points)} request(s) to fit: need two or more"
    if len({x for x, _ in points}) < 2:
        return None, "every request had the same token count: nothing to fit a slope to"
    return fit_line(points), None


def fit_document(fit: LinearFit | None, reason: str | None, source: str) -> dict[str, Any]:
    if fit is None:
        return {"fitted": False, "reason": reason, "source": source}
    return {
        "fitted": True,
        "source": source,
        "a_ms": round(fit.intercept_ms, 4),
        "b_us_per_token": round(fit.slope_us_per_token, 4),
        "points": len(fit.xs),
        "tokens_min": min(fit.xs),
        "tokens_max": max(fit.xs),
        "rms_residual_ms": round(fit.rms_residual_ms, 4),
        "r_squared": None if fit.r_squared is None else round(fit.r_squared, 6),
    }


def fits(steps: Sequence[Step]) -> dict[str, Any]:
    """The load line, the recompute line and their break-even (netbenefit.break_even)."""
    load, why_load = _fit(load_points(steps))
    points, source = recompute_points(steps)
    recompute, why_recompute = _fit(points)
    out: dict[str, Any] = {
        "load_fit": fit_document(load, why_load, "all-hit requests loading from L2/L3"),
        "recompute_fit": fit_document(recompute, why_recompute, source),
        "break_even": None,
    }
    if load is not None and recompute is not None:
        be = break_even(load, recompute)
        out["break_even"] = {
            "tokens": None if be.tokens is None else round(be.tokens, 1),
            "always_pays": be.always,
            "never_pays": be.tokens is None and not be.always,
            "saving_per_token_us": round(be.saving_per_token_ms * 1e3, 4),
            "reliable": _reliable(load) and _reliable(recompute),
        }
    return out


#: a line explains at least this share of its times' variance before a break-even is trusted
MIN_R_SQUARED = 0.5


def _reliable(fit: LinearFit) -> bool:
    """Whether a fitted line says something: time rises with tokens and explains most of it
    (on a noisy host, or with few distinct lengths, it does not, and the break-even of two
    such lines is arithmetic on noise)."""
    r2 = fit.r_squared
    return fit.slope_ms_per_token > 0 and r2 is not None and r2 >= MIN_R_SQUARED


# ------------------------------------------------------------------------------ noise


class Paired:
    """Every step's per-request columns (stats.columns) over the same bootstrap draws: the
    figures of a step and the differences between steps, each with its interval."""

    def __init__(self, steps: Sequence[Step], n: int | None = None) -> None:
        import numpy as np

        from xputune.measure.noise import Bootstrap
        from xputune.measure.stats import columns

        ran = [s for s in steps if s.run is not None]
        if n is None:
            n = max((r.index for s in ran for r in s.records), default=-1) + 1
        self.n = n
        self.index = {id(s): i for i, s in enumerate(ran)}
        width = 7  # stats.COLUMNS
        blocks = [columns(s.records, n) for s in ran]
        fit = np.zeros((n, 5))  # the recompute line's points: count, x, y, x*x, x*y
        for r in _recompute_records(steps)[0]:
            if r.index < n:
                x, y = float(r.prompt_tokens - r.cached), r.ttft * 1e3  # type: ignore[operator]
                fit[r.index] += (1.0, x, y, x * x, x * y)
        matrix = np.hstack([*blocks, fit]) if blocks else fit
        point, draws = Bootstrap(n).sums(matrix)
        self._point, self._draws, self._width = point, draws, width
        self._fit = len(ran) * width

    def has(self, step: Step) -> bool:
        return id(step) in self.index

    def _col(self, step: Step, name: str) -> tuple[float, np.ndarray]:
        from xputune.measure.stats import COLUMNS

        i = self.index[id(step)] * self._width + COLUMNS.index(name)
        return float(self._point[i]), self._draws[:, i]

    def hit_rate(self, step: Step, tier: str | None = None) -> tuple[float | None, np.ndarray]:
        """The total hit rate (or one tier's: device, host, storage), point and draws."""
        from xputune.measure.noise import ratio

        if tier is not None:
            return ratio(self._col(step, tier), self._col(step, "prompt"))
        parts = [self._col(step, t) for t in ("device", "host", "storage")]
        cached = (sum(p for p, _ in parts), sum(d for _, d in parts))
        return ratio(cached, self._col(step, "prompt"))  # type: ignore[arg-type]

    def serve_alike(self, a: Step, b: Step) -> bool:
        """The two steps' hits differ by no more than noise, in total and from L2 and L3: what
        tells their TTFTs apart is then not the cache."""
        return not any(
            self.diff(self.hit_rate(a, tier), self.hit_rate(b, tier)).beyond_noise
            for tier in (None, "host", "storage")
        )

    def ttft_mean(self, step: Step) -> tuple[float | None, np.ndarray]:
        from xputune.measure.noise import ratio

        return ratio(self._col(step, "ttft_ms"), self._col(step, "timed"))

    def cached_mean(self, step: Step) -> tuple[float | None, np.ndarray]:
        from xputune.measure.noise import ratio

        parts = [self._col(step, t) for t in ("device", "host", "storage")]
        cached = (sum(p for p, _ in parts), sum(d for _, d in parts))
        return ratio(cached, self._col(step, "completed"))  # type: ignore[arg-type]

    def slope(self) -> tuple[float | None, np.ndarray]:
        """The recompute line's slope d (ms per token), for the points and every draw."""
        import numpy as np

        f = self._fit
        c, x, y, xx, xy = self._draws[:, f : f + 5].T
        den = c * xx - x * x  # least squares, as plan.netbenefit.fit_line
        with np.errstate(divide="ignore", invalid="ignore"):
            draws = np.where(den > 0, (c * xy - x * y) / np.where(den > 0, den, 1.0), np.nan)
        c0, x0, y0, xx0, xy0 = (float(v) for v in self._point[f : f + 5])
        den0 = c0 * xx0 - x0 * x0
        return ((c0 * xy0 - x0 * y0) / den0 if den0 > 0 else None), draws

    @staticmethod
    def diff(a: tuple[float | None, np.ndarray], b: tuple[float | None, np.ndarray]) -> Interval:
        """b - a, paired, with its interval."""
        from xputune.measure.noise import interval

        (pa, da), (pb, db) = a, b
        if pa is None or pb is None:
            return interval(None, db - da)
        return interval(pb - pa, db - da)


#: the verdicts of a difference between sizes, by (TTFT beyond noise, hits beyond noise)
STEP_VERDICTS = {
    (True, True): "beyond noise",
    (False, False): "no difference beyond noise",
    (True, False): "TTFT differs without a hit difference beyond noise",
    (False, True): "hits differ without a TTFT difference beyond noise",
}


def differences(steps: Sequence[Step], paired: Paired) -> list[dict[str, Any]]:
    """Hit rate and mean TTFT of each HiCache size against the size before it, paired, and
    what they allow to say (a TTFT difference between sizes that serve alike is not the
    cache's: the host's load moved, or the servers differ otherwise)."""
    sized = [s for s in steps if s.hicache and paired.has(s)]
    out = []
    for a, b in itertools.pairwise(sized):
        ttft = paired.diff(paired.ttft_mean(a), paired.ttft_mean(b))
        out.append({
            "from": a.label,
            "to": b.label,
            "hit_rate": paired.diff(paired.hit_rate(a), paired.hit_rate(b)).difference(),
            "ttft_mean_ms": ttft.difference(3),
            "verdict": STEP_VERDICTS[ttft.beyond_noise, not paired.serve_alike(a, b)],
        })  # fmt: skip
    return out


#: the verdicts of a net benefit, by (TTFT saved beyond noise, extra hits beyond noise)
VERDICTS = {
    (True, True): "beyond noise",
    (False, False): "no difference beyond noise",
    (True, False): "TTFT differs without extra hits beyond noise",
    (False, True): "extra hits without a TTFT difference beyond noise",
}


def _net_intervals(step: Step, base: Step, paired: Paired) -> dict[str, Any]:
    from xputune.measure.noise import interval

    saved = paired.diff(paired.ttft_mean(step), paired.ttft_mean(base))  # base - step
    extra = paired.diff(paired.cached_mean(base), paired.cached_mean(step))
    out: dict[str, Any] = {
        "ttft_saved_ms": saved.difference(3),
        "extra_hit_tokens": extra.difference(2),
        "compute_saved_ms": None,
        "moving_cost_ms": None,
    }
    d, d_draws = paired.slope()
    (mb, db), (ms, ds) = paired.ttft_mean(base), paired.ttft_mean(step)
    (cb, cbd), (cs, csd) = paired.cached_mean(base), paired.cached_mean(step)
    if d is not None and None not in (mb, ms, cb, cs):
        compute_draws = (csd - cbd) * d_draws
        compute = interval((cs - cb) * d, compute_draws)  # type: ignore[operator]
        moving = interval(compute.value - saved.value, compute_draws - (db - ds))  # type: ignore[operator]
        out["compute_saved_ms"] = compute.difference(3)
        out["moving_cost_ms"] = moving.difference(3)
    out["verdict"] = VERDICTS[saved.beyond_noise, extra.beyond_noise]
    return out


def net_benefit(
    step: Step, base: Step, recompute: LinearFit | None, paired: Paired | None = None
) -> dict[str, Any] | None:
    """Per request, against the baseline: TTFT saved = compute saved - cost of moving KV, each
    with its interval (`paired`: the sweep's draws; made here when not given)."""
    mine, theirs = step.ttft_mean_ms(), base.ttft_mean_ms()
    if mine is None or theirs is None:
        return None
    done = [r for r in step.records if r.ok]
    base_done = [r for r in base.records if r.ok]
    extra = sum(r.cached for r in done) / len(done) - sum(r.cached for r in base_done) / len(
        base_done
    )
    saved = theirs - mine
    out: dict[str, Any] = {
        "ttft_saved_ms": round(saved, 3),
        "ttft_ratio": round(mine / theirs, 4) if theirs > 0 else None,
        "extra_hit_tokens": round(extra, 2),
        "compute_saved_ms": None,
        "moving_cost_ms": None,
    }
    if recompute is not None:
        compute = extra * recompute.slope_ms_per_token
        out["compute_saved_ms"] = round(compute, 3)
        out["moving_cost_ms"] = round(compute - saved, 3)
    bt = _throughput(step)
    bb = _throughput(base)
    out["throughput_ratio"] = round(bt / bb, 4) if bt and bb else None
    paired = paired if paired is not None else Paired([base, step])
    noise = _net_intervals(step, base, paired)
    out["verdict"] = noise.pop("verdict")
    out["intervals"] = noise
    return out


def _throughput(step: Step) -> float | None:
    if step.run is None or step.run.elapsed <= 0:
        return None
    return sum(1 for r in step.records if r.ok) / step.run.elapsed


def recompute_fit(steps: Sequence[Step]) -> LinearFit | None:
    return _fit(recompute_points(steps)[0])[0]


def knee_and_plateau(
    steps: Sequence[Step], min_gain: float, paired: Paired | None = None
) -> dict[str, Any]:
    """The knee of measured hit rate against L2 size, and the stop-at-plateau verdict, each
    with what noise allows to say (`paired`: the sweep's draws; made here when not given)."""
    import numpy as np

    from xputune.plan.knee import kneedle, plateau_rule

    sized = [
        s for s in steps if s.hicache and s.run is not None and s.hit_rate() is not None and s.info
    ]
    out: dict[str, Any] = {"knee": None, "knee_verdict": None, "plateau_rule": None}
    if not sized:
        return out
    paired = paired if paired is not None else Paired(steps)
    xs = [float(s.info.host_tokens or 0) for s in sized]  # type: ignore[union-attr]
    rates = [float(s.hit_rate() or 0.0) for s in sized]
    draws = np.column_stack([paired.hit_rate(s)[1] for s in sized])
    k = kneedle(xs, rates)
    if len(sized) < 3:
        out["knee_verdict"] = "none (fewer than three sizes)"
    elif k is None:
        out["knee_verdict"] = "none (the hit rate does not rise over the sizes)"
    elif k == 0:
        out["knee_verdict"] = "none (the hit rate rises faster at the larger sizes)"
    else:
        top = int(np.argmax(rates))
        rise = paired.diff(paired.hit_rate(sized[0]), paired.hit_rate(sized[top]))
        if not rise.beyond_noise:
            out["knee_verdict"] = (
                f"none: no difference beyond noise in hit rate from {sized[0].label} to "
                f"{sized[top].label}"
            )
        else:
            knees = _kneedle_draws(np.asarray(xs), draws)
            found = knees[knees >= 0]
            tail = (1 - _confidence()) / 2
            low = int(np.quantile(found, tail, method="lower")) if found.size else k
            high = int(np.quantile(found, 1 - tail, method="higher")) if found.size else k
            out["knee_verdict"] = "knee"
            out["knee"] = {
                "size": sized[k].label,
                "host_tokens": sized[k].info.host_tokens,  # type: ignore[union-attr]
                "hit_rate": round(rates[k], 6),
                "share": round(float(np.mean(knees == k)), 4),
                "low": sized[low].label,
                "high": sized[high].label,
                "rise": rise.difference(),
            }
    ttfts = [s.ttft_mean_ms() for s in sized]
    verdict = plateau_rule(rates, min_gain, ttfts)
    by_ttft = all(t is not None for t in ttfts)
    metric = paired.ttft_mean if by_ttft else paired.hit_rate
    best = verdict.best_index
    # tied with the best: within noise of it; by TTFT, also a size that serves the same hits
    # as a tied one (its TTFT gap is not the cache's)
    top = metric(sized[best])
    near = {j for j, s in enumerate(sized)
            if j == best or not paired.diff(top, metric(s)).beyond_noise}  # fmt: skip
    grew = by_ttft
    while grew:
        more = {j for j in range(len(sized)) if j not in near
                and any(paired.serve_alike(sized[i], sized[j]) for i in near)}  # fmt: skip
        near |= more
        grew = bool(more)
    tied = sorted(near)
    missed = max(range(verdict.stop_index, len(sized)), key=lambda j: (rates[j], -j))
    out["plateau_rule"] = {
        "min_gain": min_gain,
        "stops_at": sized[verdict.stop_index].label,
        "first_flat_step_at": None
        if verdict.first_flat_index is None
        else sized[verdict.first_flat_index].label,
        "measurements_prefer": sized[best].label if len(tied) == 1 else None,
        "chosen_by": "lowest mean TTFT" if by_ttft else "hit rate",
        "within_noise_of_best": [sized[j].label for j in tied],
        "disagrees": verdict.stop_index not in tied,
        "missed_hit_rate": round(verdict.missed_gain, 6),
        "missed_hit_rate_interval": paired.diff(
            paired.hit_rate(sized[verdict.stop_index]), paired.hit_rate(sized[missed])
        ).difference(),
        "later_rises": [sized[i].label for i in verdict.later_rises],
    }
    return out


def _confidence() -> float:
    from xputune.measure.noise import CONFIDENCE

    return CONFIDENCE


def _kneedle_draws(xs: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """plan.knee.kneedle on every draw (rows of `rates`) at once: the knee's index, -1 where a
    draw's curve is flat or has no point above its chord."""
    import numpy as np

    y0 = rates[:, :1]
    top = rates.max(axis=1, keepdims=True)
    rising = (top > y0)[:, 0] & np.isfinite(rates).all(axis=1)
    xn = (xs - xs[0]) / (xs[-1] - xs[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        yn = (rates - y0) / np.where(top > y0, top - y0, 1.0)
    knees = np.argmax(np.nan_to_num(yn, nan=-np.inf) - xn, axis=1)
    return np.where(rising & (knees > 0), knees, -1)  # 0: no point above the chord
