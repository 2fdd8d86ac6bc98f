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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from xputune.plan.netbenefit import LinearFit, break_even, fit_line

if TYPE_CHECKING:
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


def recompute_points(steps: Sequence[Step]) -> tuple[list[tuple[float, float]], str]:
    """(prompt tokens computed, TTFT ms) and where they come from."""

    def points(records: Sequence[Record], only_l1: bool) -> list[tuple[float, float]]:
        return [
            (float(r.prompt_tokens - r.cached), r.ttft * 1e3)
            for r in records
            if r.ok and r.ttft is not None and not (only_l1 and r.host + r.storage)
        ]

    base = [s for s in steps if not s.hicache and s.run is not None]
    if base:
        return points(base[0].records, False), "baseline requests"
    found = [p for s in steps if s.run is not None for p in points(s.records, True)]
    return found, "requests that loaded nothing from L2/L3"


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


def net_benefit(step: Step, base: Step, recompute: LinearFit | None) -> dict[str, Any] | None:
    """Per request, against the baseline: TTFT saved = compute saved - cost of moving KV."""
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
    return out


def _throughput(step: Step) -> float | None:
    if step.run is None or step.run.elapsed <= 0:
        return None
    return sum(1 for r in step.records if r.ok) / step.run.elapsed


def recompute_fit(steps: Sequence[Step]) -> LinearFit | None:
    return _fit(recompute_points(steps)[0])[0]


def knee_and_plateau(steps: Sequence[Step], min_gain: float) -> dict[str, Any]:
    """The knee of measured hit rate against L2 size, and the stop-at-plateau verdict."""
    from xputune.plan.knee import kneedle, plateau_rule

    sized = [
        s for s in steps if s.hicache and s.run is not None and s.hit_rate() is not None and s.info
    ]
    out: dict[str, Any] = {"knee": None, "plateau_rule": None}
    if not sized:
        return out
    xs = [float(s.info.host_tokens or 0) for s in sized]  # type: ignore[union-attr]
    rates = [float(s.hit_rate() or 0.0) for s in sized]
    k = kneedle(xs, rates)
    if k is not None:
        out["knee"] = {
            "size": sized[k].label,
            "host_tokens": sized[k].info.host_tokens,  # type: ignore[union-attr]
            "hit_rate": round(rates[k], 6),
        }
    ttfts = [s.ttft_mean_ms() for s in sized]
    verdict = plateau_rule(rates, min_gain, ttfts)
    out["plateau_rule"] = {
        "min_gain": min_gain,
        "stops_at": sized[verdict.stop_index].label,
        "first_flat_step_at": None
        if verdict.first_flat_index is None
        else sized[verdict.first_flat_index].label,
        "measurements_prefer": sized[verdict.best_index].label,
        "chosen_by": "lowest mean TTFT" if all(t is not None for t in ttfts) else "hit rate",
        "disagrees": verdict.disagrees,
        "missed_hit_rate": round(verdict.missed_gain, 6),
        "later_rises": [sized[i].label for i in verdict.later_rises],
    }
    return out
