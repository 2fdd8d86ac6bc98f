"""The numbers a replay reports: percentiles, hit rates per tier, throughput.

Hit rate = cached prompt tokens / prompt tokens over the requests that completed, per tier
(device = L1, host = L2, storage = L3) and in total, token-weighted as `tiers` computes its
curve. Percentiles interpolate linearly between order statistics (numpy's default, "linear"),
so p50 of two values is their mean. Throughput counts completed requests and their tokens over
the wall time from the first request sent to the last one finished.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation; None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary(values: Sequence[float], scale: float = 1.0, digits: int = 3) -> dict[str, Any]:
    """p50/p90/p99, mean, min and max of `values` times `scale` (None for each when empty)."""
    out: dict[str, Any] = {}
    for q in PERCENTILES:
        p = percentile(values, q)
        out[f"p{q}"] = None if p is None else round(p * scale, digits)
    n = len(values)
    out["mean"] = round(sum(values) / n * scale, digits) if n else None
    out["min"] = round(min(values) * scale, digits) if n else None
    out["max"] = round(max(values) * scale, digits) if n else None
    return out


@dataclass(frozen=True)
class Record:
    """One replayed request: what was asked and what was measured (times in seconds, from
    the replay's start)."""

    index: int
    line: int
    prompt_tokens: int
    output_asked: int
    scheduled: float | None  # when the trace wanted it sent (open loop)
    sent: float
    ttft: float | None
    e2e: float | None
    output_tokens: int
    device: int
    host: int
    storage: int
    overhead: float
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def cached(self) -> int:
        return self.device + self.host + self.storage

    def document(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "line": self.line,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "sent_s": round(self.sent, 6),
            "scheduled_s": None if self.scheduled is None else round(self.scheduled, 6),
            "ttft_ms": None if self.ttft is None else round(self.ttft * 1e3, 3),
            "e2e_ms": None if self.e2e is None else round(self.e2e * 1e3, 3),
            "cached": {"device": self.device, "host": self.host, "storage": self.storage},
            "error": self.error,
        }


def hit_rates(records: Sequence[Record]) -> dict[str, float | None]:
    """Per tier and in total, over completed requests (None when none completed)."""
    done = [r for r in records if r.ok]
    total = sum(r.prompt_tokens for r in done)
    tiers = {
        "device": sum(r.device for r in done),
        "host": sum(r.host for r in done),
        "storage": sum(r.storage for r in done),
    }
    tiers["total"] = sum(tiers.values())
    return {k: (round(v / total, 6) if total else None) for k, v in tiers.items()}


def measured(records: Sequence[Record], elapsed: float) -> dict[str, Any]:
    """The measured part of a replay document."""
    done = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    inputs = sum(r.prompt_tokens for r in done)
    outputs = sum(r.output_tokens for r in done)
    lags = [r.sent - r.scheduled for r in records if r.scheduled is not None]
    errors: dict[str, int] = {}
    for r in failed:
        key = (r.error or "")[:120]
        errors[key] = errors.get(key, 0) + 1
    return {
        "requests": {"sent": len(records), "completed": len(done), "failed": len(failed)},
        "errors": [
            {"error": k, "count": v} for k, v in sorted(errors.items(), key=lambda x: -x[1])
        ],
        "tokens": {
            "input": inputs,
            "output": outputs,
            "cached_device": sum(r.device for r in done),
            "cached_host": sum(r.host for r in done),
            "cached_storage": sum(r.storage for r in done),
        },
        "hit_rate": hit_rates(records),
        "ttft_ms": summary([r.ttft for r in done if r.ttft is not None], 1e3),
        "e2e_ms": summary([r.e2e for r in done if r.e2e is not None], 1e3),
        "dispatch_lag_ms": summary(lags, 1e3) if lags else None,
        "client_overhead_us": summary([r.overhead for r in records if r.ttft is not None], 1e6, 1),
        "elapsed_s": round(elapsed, 3),
        "throughput": {
            "requests_per_s": round(len(done) / elapsed, 3) if elapsed > 0 else None,
            "input_tokens_per_s": round(inputs / elapsed, 1) if elapsed > 0 else None,
            "output_tokens_per_s": round(outputs / elapsed, 1) if elapsed > 0 else None,
        },
    }
