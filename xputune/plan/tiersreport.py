"""The data behind `xputune tiers`: a curve read at capacities, its knee, a recommendation,
L1 + L2 combinations, and the stop-at-plateau rule checked against the whole curve or table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xputune.plan.geometry import KVGeometry
from xputune.plan.hitrate import (
    HitCurve,
    StorageRuns,
    default_grid,
    storage_runs,
    three_tier_point,
    tier_point,
    trace_from_batches,
)
from xputune.plan.knee import knee, plateau_rule, recommend
from xputune.plan.l3 import BreakEven, trace_break_even
from xputune.plan.traces import MeasuredTable

GB = 1e9


def _gb(tokens: float, geometry: KVGeometry | None) -> dict[str, float]:
    if geometry is None:
        return {}
    return {"gb_per_rank": round(tokens * geometry.bytes_per_token / GB, 3)}


def curve_report(
    curve: HitCurve,
    capacities: Sequence[int] | None,
    *,
    tolerance: float,
    min_gain: float,
    l1_tokens: int | None = None,
    geometry: KVGeometry | None = None,
) -> dict[str, Any]:
    caps = sorted(set(capacities)) if capacities else default_grid(curve)
    rates = [curve.hit_rate(c) for c in caps]
    out: dict[str, Any] = {
        "curve": [
            {"capacity_tokens": c, "hit_rate": round(r, 6), **_gb(c, geometry)}
            for c, r in zip(caps, rates, strict=True)
        ],
        "max_hit_rate": round(curve.max_hit_rate, 6),
        "saturation_tokens": curve.saturation_tokens,
    }
    k = knee(curve)
    out["knee"] = (
        None
        if k is None
        else {
            "capacity_tokens": k.capacity_tokens,
            "hit_rate": round(k.hit_rate, 6),
            **_gb(k.capacity_tokens, geometry),
        }
    )
    pick = recommend(curve, caps, tolerance)
    out["recommendation"] = (
        None
        if pick is None
        else {
            "capacity_tokens": pick,
            "hit_rate": round(curve.hit_rate(pick), 6),
            "rule": f"smallest capacity within {tolerance:.1%} of the best rate "
            "at these capacities",
            **_gb(pick, geometry),
        }
    )
    if len(caps) > 1:
        verdict = plateau_rule(rates, min_gain, tolerance=tolerance)
        out["plateau_rule"] = {
            "min_gain": min_gain,
            "stops_at_tokens": caps[verdict.stop_index],
            "curve_prefers_tokens": caps[verdict.best_index],
            "disagrees": verdict.disagrees,
            "missed_hit_rate": round(verdict.missed_gain, 6),
            "later_rises_tokens": [caps[i] for i in verdict.later_rises],
        }
    if l1_tokens is not None:
        rows = []
        for c in caps:
            t = tier_point(curve, l1_tokens, c)
            rows.append(
                {
                    "l2_capacity_tokens": c,
                    "l1_hit_rate": round(t.l1_hit_rate, 6),
                    "write_through_hit_rate": round(t.write_through_hit_rate, 6),
                    "exclusive_hit_rate": round(t.exclusive_hit_rate, 6),
                    "write_through_l2_share": round(t.write_through_l2_share, 6),
                    "exclusive_l2_share": round(t.exclusive_l2_share, 6),
                    **_gb(c, geometry),
                }
            )
        out["l1_tokens"] = l1_tokens
        out["tiers"] = rows
    return out


def measured_report(
    table: MeasuredTable,
    *,
    min_gain: float,
    tolerance: float,
    curve: HitCurve | None = None,
    geometry: KVGeometry | None = None,
) -> dict[str, Any]:
    rows = table.rows
    verdict = plateau_rule(
        [r.hit_rate for r in rows], min_gain, [r.ttft_ms for r in rows], tolerance
    )
    out: dict[str, Any] = {
        "unit": table.unit,
        "rows": [
            {"capacity": r.capacity, "hit_rate": r.hit_rate, "ttft_ms": r.ttft_ms} for r in rows
        ],
        "plateau_rule": {
            "min_gain": min_gain,
            "stops_at": rows[verdict.stop_index].capacity,
            "first_flat_step_at": None
            if verdict.first_flat_index is None
            else rows[verdict.first_flat_index].capacity,
            "full_table_prefers": rows[verdict.best_index].capacity,
            "chosen_by": "lowest ttft_ms"
            if all(r.ttft_ms is not None for r in rows)
            else "hit rate within tolerance of the best",
            "disagrees": verdict.disagrees,
            "missed_hit_rate": round(verdict.missed_gain, 6),
            "later_rises": [rows[i].capacity for i in verdict.later_rises],
        },
    }
    if curve is not None:
        to_tokens = None
        if table.unit == "tokens":

            def to_tokens(c: float) -> int:
                return int(c)
        elif geometry is not None:

            def to_tokens(c: float) -> int:
                return int(c * GB / geometry.bytes_per_token)

        if to_tokens is not None:
            out["trace_at_rows"] = [
                {
                    "capacity": r.capacity,
                    "capacity_tokens": to_tokens(r.capacity),
                    "trace_hit_rate": round(curve.hit_rate(to_tokens(r.capacity)), 6),
                }
                for r in rows
            ]
    return out


def tiers_document(
    *,
    trace_file: str | None,
    curve: HitCurve | None,
    requests: int,
    measured: MeasuredTable | None,
    capacities: Sequence[int],
    tolerance: float,
    min_gain: float,
    l1_tokens: int | None,
    geometry: KVGeometry | None,
    three_tiers: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`xputune tiers --format json` (schema tiers.json), from what the command read."""
    data: dict[str, Any] = {"schema_version": 1}
    if curve is not None:
        data["trace"] = {
            "file": trace_file,
            "requests": requests,
            "accesses": curve.accesses,
            "distinct_blocks": curve.distinct_blocks,
            "block_size": curve.block_size,
            "total_tokens": int(curve.total_tokens) if curve.exact else None,
            "chain_violations": curve.chain_violations,
            "mode": "exact" if curve.exact else "sampled",
            "sample_rate": curve.sample_rate,
        }
        data.update(
            curve_report(
                curve,
                capacities,
                tolerance=tolerance,
                min_gain=min_gain,
                l1_tokens=l1_tokens,
                geometry=geometry,
            )
        )
    else:
        data["curve"] = []
    if measured is not None:
        data["measured"] = measured_report(
            measured, min_gain=min_gain, tolerance=tolerance, curve=curve, geometry=geometry
        )
    if three_tiers is not None:
        data["three_tiers"] = three_tiers
    if geometry is not None:
        data["model"] = {
            "name": geometry.name,
            "tp": geometry.tp,
            "dtype": geometry.dtype,
            "bytes_per_token_per_rank": geometry.bytes_per_token,
        }
    return data


def three_tier_report(
    curve: HitCurve,
    l1_tokens: int,
    l2_tokens: int,
    l3_tokens: int,
    geometry: KVGeometry | None = None,
    batches: Sequence[Any] = (),
    l3_gb_s: float | None = None,
    recompute_us: float | None = None,
) -> dict[str, Any]:
    """The "three_tiers" part of `tiers --format json`: hits by tier of L1 + L2 + L3, and with
    the model's geometry the break-even of an L3 hit (at `l3_gb_s` per rank, else over the
    assumed NIC: plan/l3.py) and how many of this trace's L3 hits (its `batches` read again)
    are long enough to pay."""
    break_even: BreakEven | None = None
    runs: StorageRuns | None = None
    if geometry is not None:
        break_even = trace_break_even(geometry, l3_gb_s, recompute_us)
        threshold = float("inf") if break_even.tokens is None else break_even.tokens
        trace = trace_from_batches(list(batches))
        runs = storage_runs(trace, max(l1_tokens, l2_tokens), l3_tokens, threshold)
    t = three_tier_point(curve, l1_tokens, l2_tokens, l3_tokens)
    out: dict[str, Any] = {
        "l1_tokens": l1_tokens,
        "l2_tokens": l2_tokens,
        "l3_tokens": l3_tokens,
        "device_hit_rate": round(t.device, 6),
        "host_hit_rate": round(t.host, 6),
        "storage_hit_rate": round(t.storage, 6),
        "total_hit_rate": round(t.total, 6),
        "break_even": None,
        "storage_runs": None,
    }
    if break_even is not None:
        out["break_even"] = {
            "tokens": None if break_even.tokens is None else round(break_even.tokens),
            "never_pays": break_even.tokens is None,
            "l3_gb_s_per_rank": break_even.l3_gb_s,
            "l3_source": break_even.source,
            "l3_latency_ms": break_even.l3_latency_ms,
            "recompute_us_per_token": break_even.recompute_us_per_token,
        }
    if runs is not None:
        out["storage_runs"] = {
            "requests": runs.requests,
            "tokens": runs.tokens,
            "paying_requests": runs.paying_requests,
            "paying_tokens": runs.paying_tokens,
            "paying_share": round(runs.paying_share, 6),
        }
    return out
