"""Load-time fit, break-even against recompute, and the seed's conclusions."""

from __future__ import annotations

import pytest

from xputune.plan.netbenefit import (
    LinearFit,
    bandwidth_gb_s,
    break_even,
    bytes_per_token,
    fit_line,
    recompute_needed,
)

SEED = LinearFit(779.1, 13.539e-3)  # T(n) = 779.1 ms + 13.539 us * n
FLOOR_MS = 735.0


def test_fit_recovers_a_line_and_reports_residuals() -> None:
    noise = [0.4, -0.3, 0.1, -0.2, 0.0]
    pts = [
        (n, SEED.at(n) + e) for n, e in zip((1000, 4000, 8000, 16000, 32000), noise, strict=True)
    ]
    fit = fit_line(pts)
    assert fit.intercept_ms == pytest.approx(779.1, abs=0.5)
    assert fit.slope_us_per_token == pytest.approx(13.539, abs=0.01)
    assert sum(fit.residuals_ms) == pytest.approx(0.0, abs=1e-9)
    assert 0 < fit.rms_residual_ms < 0.5
    assert fit.r_squared > 0.9999


def test_fit_refuses_degenerate_input() -> None:
    with pytest.raises(ValueError):
        fit_line([])
    with pytest.raises(ValueError):
        fit_line([(100, 5.0), (100, 6.0)])
    assert fit_line([(100, 5.0)]).slope_ms_per_token == pytest.approx(0.05)


def test_break_even_cases() -> None:
    load = LinearFit(50.0, 0.01)
    assert break_even(load, LinearFit(0.0, 0.03)).tokens == pytest.approx(2500)
    assert break_even(load, LinearFit(60.0, 0.03)).always
    never = break_even(load, LinearFit(0.0, 0.005))
    assert never.tokens is None and not never.always


def test_seed_reproduces_its_conclusions() -> None:
    # 779 ms = 735 ms floor + 44 ms of L2 path; the seed's "break-even around 3K tokens" then
    # needs recompute at about twice the load slope per token.
    need = recompute_needed(SEED, FLOOR_MS, 3000) * 1000
    assert 27.0 < need < 29.0
    be = break_even(SEED, LinearFit(FLOOR_MS, need / 1000))
    assert be.tokens == pytest.approx(3000)
    # 13.539 us per token at 7.40 GB/s is about 100 KB per token.
    assert bytes_per_token(SEED.slope_ms_per_token, 7.40) == pytest.approx(100_188.6, rel=1e-4)
    assert bandwidth_gb_s(SEED.slope_ms_per_token, 100_188.6) == pytest.approx(7.40, rel=1e-4)
