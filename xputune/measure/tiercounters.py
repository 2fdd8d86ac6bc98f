"""The server's own count of what each cache tier wrote and served, from its /metrics page.

SGLang (0.5.20 through 0.5.23, started with --enable-metrics) publishes Prometheus counters
per scheduler; the ones a tier's health needs, summed over schedulers and labels:

  sglang:hicache_backup_tokens_total       tokens written from L1 to L2 (host), any policy
  sglang:backuped_tokens_total             tokens written from L2 to L3 (storage)
  sglang:prefetched_tokens_total           tokens read from L3 into L2 before admission
  sglang:storage_prefetch_hit_tokens_total tokens an L3 query reported present
  sglang:cached_tokens_total{cache_source} prompt tokens served, per source (device, host,
                                           storage); a label appears only after its first use
  sglang:num_requests_total                requests the server finished (how a router spread
                                           a replay over its workers)

A replay reads the page before and after its run and keeps the differences: what the run made
the tiers do. Only these names are kept; the page is read within a size bound (MAX_PAGE), a
line that is not a sample is skipped, and a value that is not a finite, non-negative number
is a parse error naming the line (a counter cannot be anything else).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xputune.measure.client import Endpoint

MAX_PAGE = 8 << 20  # bytes of /metrics read at most (a TP-8 server's page is ~1 MB)

WRITTEN_HOST = "sglang:hicache_backup_tokens_total"
WRITTEN_STORAGE = "sglang:backuped_tokens_total"
READ_STORAGE = "sglang:prefetched_tokens_total"
FOUND_STORAGE = "sglang:storage_prefetch_hit_tokens_total"
SERVED = "sglang:cached_tokens_total"
REQUESTS = "sglang:num_requests_total"
NAMES = (WRITTEN_HOST, WRITTEN_STORAGE, READ_STORAGE, FOUND_STORAGE, SERVED, REQUESTS)
TIERS = ("device", "host", "storage")


class CounterError(ValueError):
    """The /metrics page holds a value no counter can have."""


@dataclass(frozen=True)
class TierCounters:
    """What the tiers did, in tokens (a difference of two readings, or one reading)."""

    host_written: int = 0
    storage_written: int = 0
    storage_read: int = 0
    storage_found: int = 0
    served: tuple[tuple[str, int], ...] = ()  # (cache_source, tokens)
    requests: int = 0  # requests finished

    def served_by(self, tier: str) -> int:
        return dict(self.served).get(tier, 0)

    def plus(self, other: TierCounters) -> TierCounters:
        """Two servers' counters together (the workers behind a router)."""
        theirs = dict(other.served)
        tiers = list(dict.fromkeys([*(t for t, _ in self.served), *theirs]))
        mine = dict(self.served)
        return TierCounters(
            host_written=self.host_written + other.host_written,
            storage_written=self.storage_written + other.storage_written,
            storage_read=self.storage_read + other.storage_read,
            storage_found=self.storage_found + other.storage_found,
            served=tuple((t, mine.get(t, 0) + theirs.get(t, 0)) for t in tiers),
            requests=self.requests + other.requests,
        )

    def minus(self, before: TierCounters) -> TierCounters:
        """What happened between `before` and this reading (a counter only grows; a server
        restarted in between would make a difference negative, which is clamped to 0)."""
        old = dict(before.served)
        return TierCounters(
            host_written=max(0, self.host_written - before.host_written),
            storage_written=max(0, self.storage_written - before.storage_written),
            storage_read=max(0, self.storage_read - before.storage_read),
            storage_found=max(0, self.storage_found - before.storage_found),
            served=tuple((t, max(0, n - old.get(t, 0))) for t, n in self.served),
            requests=max(0, self.requests - before.requests),
        )

    def document(self) -> dict[str, object]:
        return {
            "host_written_tokens": self.host_written,
            "storage_written_tokens": self.storage_written,
            "storage_read_tokens": self.storage_read,
            "storage_found_tokens": self.storage_found,
            "served_tokens": {t: self.served_by(t) for t in TIERS},
            "requests": self.requests,
        }


def _value(text: str, line_no: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CounterError(f"/metrics line {line_no}: {text[:40]!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise CounterError(f"/metrics line {line_no}: counter value {text[:40]!r}")
    return value


def _source(labels: str) -> str | None:
    for part in labels.split(","):
        key, _, raw = part.partition("=")
        if key.strip() == "cache_source":
            return raw.strip().strip('"')
    return None


def parse(lines: Iterable[str]) -> TierCounters:
    """The counters of one /metrics page (Prometheus text format), summed over labels."""
    sums = dict.fromkeys(NAMES, 0.0)
    served: dict[str, float] = {}
    for line_no, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line.startswith("sglang:"):
            continue  # comments (# HELP, # TYPE) and other exporters' samples
        head, _, rest = line.partition(" ")
        name, brace, labels = head.partition("{")
        if name not in sums:
            continue
        value = _value(rest.split()[0] if rest.split() else "", line_no)
        if name == SERVED:
            source = _source(labels.rstrip("}")) if brace else None
            if source in TIERS:
                served[source] = served.get(source, 0.0) + value
        else:
            sums[name] += value
    return TierCounters(
        host_written=int(sums[WRITTEN_HOST]),
        storage_written=int(sums[WRITTEN_STORAGE]),
        storage_read=int(sums[READ_STORAGE]),
        storage_found=int(sums[FOUND_STORAGE]),
        served=tuple((t, int(served[t])) for t in TIERS if t in served),
        requests=int(sums[REQUESTS]),
    )


def read(endpoint: Endpoint, timeout: float = 10.0) -> tuple[TierCounters | None, str | None]:
    """The server's counters now, or (None, why not): a server started without
    --enable-metrics answers 404 there. Bounded like every read of a server (client.py)."""
    from xputune.measure.client import ServerError, get_body

    try:
        page = get_body(endpoint, "/metrics", timeout, MAX_PAGE, "text/plain")
    except ServerError as exc:
        if exc.status == 404:
            return None, "the server publishes no /metrics (start it with --enable-metrics)"
        return None, str(exc)
    return parse(page.decode("utf-8", "replace").splitlines()), None


def from_mapping(values: Mapping[str, int]) -> TierCounters:
    """Counters given by name (tests, and documents read back)."""
    return TierCounters(
        host_written=int(values.get("host_written", 0)),
        storage_written=int(values.get("storage_written", 0)),
        storage_read=int(values.get("storage_read", 0)),
        storage_found=int(values.get("storage_found", 0)),
        served=tuple((t, int(values[t])) for t in TIERS if t in values),
        requests=int(values.get("requests", 0)),
    )
