"""What `tiers` predicts for the replayed requests at the server's own capacities, and why a
measurement may differ from it.

The prediction is plan.hitrate's exact curve of the very requests the replay sent (scaled,
cut to the server's limit) read at the server's L1 (its device pool), L2 (its host pool) and,
with a storage backend, an unbounded L3: three_tier_point, which models HiCache's inclusive
tiers with prefix-LRU eviction. It is computed before the replay and never adjusted to what was
measured. Where the two differ, differences() names the mechanisms that make a real server
depart from that model, each with the bound it puts on the gap for this run:

- the last prompt token: SGLang always computes it, so a fully cached prompt hits n - 1 of n;
- pages: with page size p a hit is a whole number of pages (up to p - 1 tokens fewer);
- outputs: the radix tree also keeps each request's output tokens, which take L1 and L2
  capacity the prediction gives to prompts;
- running requests: their KV sits in L1 while they run, so L1 holds less cache than its size;
  and requests in flight at once cannot reuse what the other is still computing;
- the write policy: the prediction's L2 holds a copy of every L1 block (write_through);
  write_through_selective backs a prefix up only after it is hit, write_back only on eviction;
- eviction order: SGLang evicts the least recently used leaf of its radix tree (one access time
  per node) where the prediction keeps one per block: ties and node splits can order evictions
  differently near the capacity's edge;
- chunked prefill: a prompt longer than the chunk is inserted chunk by chunk;
- synthesized tokens: two different blocks after a common prefix start with the same token once
  in (hi - lo) draws, which lengthens that hit by a token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xputune.measure.server import ServerInfo
    from xputune.measure.stats import Record
    from xputune.measure.tokens import TokenRange
    from xputune.measure.workload import Workload
    from xputune.plan.hitrate import HitCurve
    from xputune.plan.traces import Trace


#: SGLang's default prefetch_threshold (pages): it queries L3 only for a miss at least this
#: long (the storage backend's extra config can change it).
PREFETCH_THRESHOLD = 256


@dataclass(frozen=True)
class Prediction:
    device_tokens: int
    host_tokens: int | None  # None: L2 size unknown
    storage: bool
    device: float
    host: float | None
    storage_rate: float | None
    max_hit_rate: float

    @property
    def total(self) -> float | None:
        if self.host is None:
            return None
        return self.device + self.host + (self.storage_rate or 0.0)

    def rates(self) -> dict[str, float | None]:
        return {
            "device": round(self.device, 6),
            "host": None if self.host is None else round(self.host, 6),
            "storage": None if self.storage_rate is None else round(self.storage_rate, 6),
            "total": None if self.total is None else round(self.total, 6),
        }


def predict(curve: HitCurve, info: ServerInfo) -> Prediction:
    """The three tiers' hit rates of `curve` at the server's capacities."""
    from xputune.plan.hitrate import three_tier_point

    if not info.radix_cache:
        return Prediction(info.device_tokens, 0, False, 0.0, 0.0, None, curve.max_hit_rate)
    l3 = curve.saturation_tokens if info.storage_backend is not None else 0
    point = three_tier_point(curve, info.device_tokens, info.host_tokens or 0, l3)
    return _prediction(info, curve, point.device, point.host, point.storage)


def predict_cluster(trace: Trace, info: ServerInfo, instances: int, routing: str) -> Prediction:
    """The tiers' hit rates of `trace` split among `instances` servers like `info` by a router
    of policy `routing` (plan/cluster.py), one L3 shared by all when they have a storage
    backend (unbounded, as predict's), a request's L3 run counted only from SGLang's prefetch
    threshold up (shorter ones are recomputed: what makes a cluster's L3 pay or not)."""
    from xputune.plan.cluster import cluster_point
    from xputune.plan.hitrate import exact_curve

    curve = exact_curve(trace)
    if not info.radix_cache:
        return Prediction(info.device_tokens, 0, False, 0.0, 0.0, None, curve.max_hit_rate)
    l3 = curve.saturation_tokens if info.storage_backend is not None else None
    point = cluster_point(
        trace, instances, routing, info.device_tokens, info.host_tokens or 0, l3,
        storage_min_tokens=PREFETCH_THRESHOLD * info.page_size,
    )  # fmt: skip
    return _prediction(info, curve, point.device, point.host, point.storage)


def _prediction(
    info: ServerInfo, curve: HitCurve, device: float, host: float, storage: float
) -> Prediction:
    """A Prediction at the server's capacities: the L2 share unknown where L2's size is, the
    L3 share only with a storage backend."""
    has_storage = info.storage_backend is not None
    return Prediction(
        device_tokens=info.device_tokens,
        host_tokens=info.host_tokens,
        storage=has_storage,
        device=device,
        host=None if info.host_tokens is None else host,
        storage_rate=storage if has_storage else None,
        max_hit_rate=curve.max_hit_rate,
    )


def comparison(prediction: Prediction, measured: dict[str, float | None]) -> list[dict[str, Any]]:
    """Tier by tier: capacity, predicted and measured hit rate, and their difference."""
    tiers: list[tuple[str, int | None]] = [
        ("device", prediction.device_tokens),
        ("host", prediction.host_tokens),
    ]
    if prediction.storage:
        tiers.append(("storage", None))
    tiers.append(("total", None))
    predicted = prediction.rates()
    rows = []
    for tier, capacity in tiers:
        p, m = predicted[tier], measured.get(tier)
        rows.append(
            {
                "tier": tier,
                "capacity_tokens": capacity,
                "predicted": p,
                "measured": m,
                "difference": None if p is None or m is None else round(m - p, 6),
            }
        )
    return rows


def _pct(x: float) -> str:
    return f"{x:.2%}"


def differences(
    workload: Workload,
    info: ServerInfo,
    records: list[Record],
    *,
    concurrent: bool,
    vocab: TokenRange,
) -> list[str]:
    """Why this run's measurement can differ from its prediction, with each effect's bound."""
    done = [r for r in records if r.ok]
    inputs = sum(r.prompt_tokens for r in done)
    if not done or not inputs:
        return []
    n = len(done)
    notes = [
        f"SGLang computes every prompt's last token, so a fully cached prompt hits n-1 of n "
        f"tokens: up to {n} tokens ({_pct(n / inputs)} of the input) fewer than predicted"
    ]
    if info.page_size > 1:
        gap = (info.page_size - 1) * n
        notes.append(
            f"page size {info.page_size}: a hit is whole pages, up to {info.page_size - 1} "
            f"tokens fewer per request ({_pct(min(1.0, gap / inputs))} of the input at most)"
        )
    outputs = sum(r.output_tokens for r in done)
    if outputs:
        notes.append(
            f"the radix tree also keeps the {outputs:,} output tokens "
            f"({outputs / max(1, info.device_tokens):.2f}x L1) that the prediction leaves out: "
            "they take capacity from prompts, so the measurement can fall short at the "
            "capacity's edge"
        )
    if concurrent:
        notes.append(
            "requests ran at once: their KV is held in L1 while they run (less room for cache "
            "than L1's size) and one cannot reuse a prefix another is still computing; the "
            "prediction serves them one after another"
        )
    if info.hicache and info.write_policy not in (None, "write_through"):
        notes.append(
            f"write policy {info.write_policy}: the prediction's L2 holds a copy of every L1 "
            "block (write_through); this one backs a prefix up to L2 only "
            + (
                "once it is hit (selective): first-time blocks evicted from L1 are lost"
                if info.write_policy == "write_through_selective"
                else "when it is evicted from L1"
            )
        )
    chunk = info.chunked_prefill
    if chunk and any(r.prompt_tokens > chunk for r in done):
        longer = sum(1 for r in done if r.prompt_tokens > chunk)
        notes.append(
            f"{longer} prompt(s) longer than the prefill chunk ({chunk} tokens) were computed "
            "and inserted into the cache chunk by chunk"
        )
    notes.append(
        "eviction order: SGLang evicts the least recently used leaf of its radix tree (one "
        "access time per node), the prediction one block at a time: near a tier's capacity "
        "ties and node splits can evict different blocks"
    )
    notes.append(
        f"synthesized prompts: two different blocks that follow a common prefix start with the "
        f"same token once in {vocab.span} draws, which lengthens a hit by a token"
    )
    if workload.block_tokens != workload.trace_block:
        notes.append(
            f"the trace's {workload.trace_block}-token blocks were sent as "
            f"{workload.block_tokens} token{'s' if workload.block_tokens != 1 else ''} each; "
            "the prediction uses the same scaled blocks"
        )
    return notes
