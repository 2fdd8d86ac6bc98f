"""The numbers a replay reports: percentiles, hit rates per tier, throughput.

Hit rate = cached prompt tokens / prompt tokens over the requests that completed, per tier
(device = L1, host = L2, storage = L3) and in total, token-weighted as `tiers` computes its
curve. Percentiles interpolate linearly between order statistics (numpy's default, "linear"),
so p50 of two values is their mean. Throughput counts completed requests and their tokens over
the wall time from the first request sent to the last one finished.

A run is valid when at least `min_completion` of the requests sent completed (default: every
one) and at least one did; otherwise it did not measure what it says, and `validity` says how
many failed and why (failures grouped by their reason, numbers aside). Hit rates and TTFT
carry bootstrap intervals (measure/noise.py), computed from the records after the run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

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


#: the longest reason and example kept per group of failures
REASON_MAX = 200
_NUMBER = re.compile(r"\d+")


def reason(error: str) -> str:
    """What groups a failure with others: its message with every number after the first
    ': ' written N (SGLang's messages carry the request's own lengths: "Input length (1018
    tokens) exceeds the maximum allowed length (1018 tokens)"); "HTTP 400: " stays."""
    head, sep, rest = error.partition(": ")
    text = head + sep + _NUMBER.sub("N", rest) if sep else _NUMBER.sub("N", error)
    return text[:REASON_MAX]


def failures(records: Sequence[Record]) -> list[dict[str, Any]]:
    """The failed requests grouped by reason, most first: each group's count, one message in
    full and the trace line of its first request."""
    groups: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.ok:
            continue
        message = r.error or "failed"
        key = reason(message)
        group = groups.get(key)
        if group is None:
            groups[key] = {"error": key, "count": 1, "example": message[:REASON_MAX],
                           "first_line": r.line}  # fmt: skip
        else:
            group["count"] += 1
    return sorted(groups.values(), key=lambda g: -g["count"])


def validity(records: Sequence[Record], min_completion: float = 1.0) -> list[str]:
    """Why the run did not measure what it says (empty: it did): fewer than `min_completion`
    (a fraction) of the requests sent completed, or none did."""
    sent = len(records)
    done = sum(1 for r in records if r.ok)
    if sent == 0:
        return ["no request was sent"]
    if done == 0:
        return [f"none of the {sent:,} requests sent completed"]
    if done < sent and done / sent < min_completion:
        top = failures(records)[0]
        return [
            f"{sent - done:,} of {sent:,} requests failed ({done / sent:.1%} completed, "
            f"below the threshold of {min_completion:.1%}, --min-completion); most often "
            f"({top['count']:,}x): {top['error']}"
        ]
    return []


def columns(records: Sequence[Record], n: int | None = None) -> np.ndarray:
    """Per request (rows by request index, n of them: the workload's length), the columns the
    intervals are made of: completed, prompt, device, host, storage, timed, TTFT ms. A request
    that failed or was never sent is a row of zeros."""
    import numpy as np

    size = n if n is not None else max((r.index for r in records), default=-1) + 1
    out = np.zeros((size, len(COLUMNS)))
    for r in records:
        if not r.ok or r.index >= size:
            continue
        timed = r.ttft is not None
        out[r.index] = (1.0, r.prompt_tokens, r.device, r.host, r.storage, float(timed),
                        r.ttft * 1e3 if timed else 0.0)  # type: ignore[operator]  # fmt: skip
    return out


COLUMNS = ("completed", "prompt", "device", "host", "storage", "timed", "ttft_ms")
TIERS = ("device", "host", "storage")


def intervals(records: Sequence[Record], n: int | None = None) -> dict[str, Any]:
    """Bootstrap intervals (measure/noise.py) of the hit rate per tier and in total and of
    the mean TTFT, over the requests that completed."""
    from xputune.measure.noise import Bootstrap, interval, ratio

    cols = columns(records, n)
    point, draws = Bootstrap(len(cols)).sums(cols)

    def col(name: str) -> tuple[float, np.ndarray]:
        i = COLUMNS.index(name)
        return float(point[i]), draws[:, i]

    prompt = col("prompt")
    rates: dict[str, Any] = {}
    for tier in TIERS:
        rates[tier] = interval(*ratio(col(tier), prompt)).document()
    tiers = [col(t) for t in TIERS]
    cached = (sum(p for p, _ in tiers), sum(d for _, d in tiers))
    rates["total"] = interval(*ratio(cached, prompt)).document()
    ttft = interval(*ratio(col("ttft_ms"), col("timed")))
    return {"hit_rate": rates, "ttft_mean_ms": ttft.document(3)}


def measured(records: Sequence[Record], elapsed: float, n: int | None = None) -> dict[str, Any]:
    """The measured part of a replay document (`n`: the workload's requests, which pairs the
    intervals of a sweep's steps)."""
    done = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    inputs = sum(r.prompt_tokens for r in done)
    outputs = sum(r.output_tokens for r in done)
    lags = [r.sent - r.scheduled for r in records if r.scheduled is not None]
    return {
        "requests": {"sent": len(records), "completed": len(done), "failed": len(failed)},
        "errors": failures(records),
        "tokens": {
            "input": inputs,
            "output": outputs,
            "cached_device": sum(r.device for r in done),
            "cached_host": sum(r.host for r in done),
            "cached_storage": sum(r.storage for r in done),
        },
        "hit_rate": hit_rates(records),
        "intervals": intervals(records, n),
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
