"""The `xputune model` document: a load-time fit, its break-even against recomputing, and the
bytes per token the fit implies next to the model's own (schema "model").
"""

from __future__ import annotations

from typing import Any

from xputune.errors import XputuneError
from xputune.plan.inputs import csv_points, pair

# The field report's figures (docs/field-report.md, 3): T(n) = 779.1 ms + 13.539 us*n, 735 ms floor,
# 7.40 GB/s, GLM-5 on 8 cards.
SEED = {
    "fit_a": 779.1,
    "fit_b": 13.539,
    "floor_ms": 735.0,
    "bandwidth": 7.40,
    "model": "glm-5",
    "tp": 8,
}


def _fit_dict(fit) -> dict[str, Any]:
    out: dict[str, Any] = {
        "a_ms": round(fit.intercept_ms, 6),
        "b_us_per_token": round(fit.slope_us_per_token, 6),
    }
    if fit.xs:
        out["points"] = [
            {"tokens": x, "ms": y, "residual_ms": round(r, 4)}
            for x, y, r in zip(fit.xs, fit.ys, fit.residuals_ms, strict=True)
        ]
        out["rms_residual_ms"] = round(fit.rms_residual_ms, 4)
        out["r_squared"] = None if fit.r_squared is None else round(fit.r_squared, 6)
    return out


def model_report(
    *,
    point: list[str] | None,
    points_table: tuple[list[str], str] | None,
    fit_a: float | None,
    fit_b: float | None,
    recompute_us: float | None,
    recompute_point: list[str] | None,
    floor_ms: float,
    bandwidth: float | None,
    bytes_per_token: float | None,
    break_even_at: float | None,
    geometry,
) -> dict[str, Any]:
    """Fit, break-even and transfer figures as the JSON document of `xputune model`."""
    from xputune.plan.netbenefit import (
        LinearFit,
        bandwidth_gb_s,
        break_even,
        fit_line,
        recompute_needed,
    )
    from xputune.plan.netbenefit import bytes_per_token as implied_bytes

    pts = [pair(p, "--point") for p in point or []]
    if points_table is not None:
        pts += csv_points(*points_table)
    try:
        if pts:
            if fit_a is not None or fit_b is not None:
                raise XputuneError("give load points or --fit-a/--fit-b, not both")
            if len(pts) < 2:
                raise XputuneError("a load fit needs at least two points")
            load = fit_line(pts)
        elif fit_a is not None and fit_b is not None:
            load = LinearFit(fit_a, fit_b / 1000.0)
        else:
            raise XputuneError(
                "give --point TOKENS:MS (twice or more), --points FILE, "
                "or --fit-a and --fit-b (or --seed)"
            )
        recompute = None
        if recompute_point:
            if recompute_us is not None:
                raise XputuneError("give --recompute-point or --recompute-us-per-token, not both")
            recompute = fit_line([pair(p, "--recompute-point") for p in recompute_point])
        elif recompute_us is not None:
            recompute = LinearFit(floor_ms, recompute_us / 1000.0)
    except ValueError as exc:
        raise XputuneError(str(exc)) from None

    data: dict[str, Any] = {"schema_version": 1, "load_fit": _fit_dict(load)}
    data["load_fit"]["l2_fixed_ms"] = round(load.intercept_ms - floor_ms, 6)
    if recompute is not None:
        be = break_even(load, recompute)
        data["recompute_fit"] = _fit_dict(recompute)
        data["break_even"] = {
            "tokens": None if be.tokens is None else round(be.tokens, 1),
            "always_pays": be.always,
            "never_pays": be.tokens is None and not be.always,
            "saving_us_per_token_beyond": round(be.saving_per_token_ms * 1000.0, 6),
        }
    if break_even_at:
        data["recompute_us_per_token_for_break_even"] = {
            "at_tokens": break_even_at,
            "floor_ms": floor_ms,
            "us_per_token": round(recompute_needed(load, floor_ms, break_even_at) * 1000, 4),
        }
    transfer: dict[str, Any] = {}
    if bandwidth:
        transfer["bandwidth_gb_s"] = bandwidth
        transfer["implied_bytes_per_token"] = round(
            implied_bytes(load.slope_ms_per_token, bandwidth), 1
        )
    known = bytes_per_token or (geometry.bytes_per_token if geometry else None)
    if known:
        transfer["bytes_per_token_per_rank"] = known
        if geometry:
            transfer["model"] = geometry.name
            transfer["tp"] = geometry.tp
            transfer["dtype"] = geometry.dtype
        if load.slope_ms_per_token > 0:
            transfer["implied_bandwidth_gb_s"] = round(
                bandwidth_gb_s(load.slope_ms_per_token, known), 4
            )
        if "implied_bytes_per_token" in transfer:
            transfer["implied_over_model"] = round(transfer["implied_bytes_per_token"] / known, 4)
    if transfer:
        data["transfer"] = transfer
    return data
