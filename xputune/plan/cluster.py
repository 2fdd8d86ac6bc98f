"""N instances behind a router: what each tier serves when a trace is split among them, each
with its own L1 and L2, and one L3 shared by all or none.

The field report's last claim is that a shared L3 "frees hit rate from single-instance
locality"; how much depends on how the router scatters a prefix's requests. The model:

- Routing assigns each request, in trace order, to an instance. round_robin (request i to
  instance i mod N) and random (seeded, uniform) are exact. cache_aware follows sglang-router's
  documented policy at balanced load: each instance has an approximate prefix tree of what was
  routed to it (here: the set of its requests' blocks, never evicted); a request goes to the
  instance whose tree matches the largest share of its blocks when that share exceeds
  CACHE_THRESHOLD, else to the instance with the smallest tree. Simplified: the router's load
  balancing (a request goes to the least loaded instance when loads differ by more than
  BALANCE_ABS and BALANCE_REL) needs request timing and service times, which a trace does not
  hold: the model assumes balanced load, so cache affinity is never overridden. The tree counts
  blocks where the router counts characters or tokens.
- Each instance runs the single-instance model of plan/hitrate.py on its own requests: a
  prefix LRU per tier, L2 holding what L1 holds (write-through), so a block hits its private
  L1 or L2 when its stack position in that instance's own request stream is within the size.
- The shared L3 is one LRU over every instance's accesses (each instance writes what it
  computes through to L3 and reads from it): a block L1 and L2 miss hits L3 when its position
  in the whole trace's stream is within L3's size. This treats a block written by another
  instance as present at once (transfers take time) and L3 as holding every block ever written
  until LRU eviction.
- The bound: one instance with N times the L1 and L2 (and the same L3): what no router can
  beat with private caches of that total size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from xputune.plan.traces import Trace

ROUTINGS = ("round_robin", "random", "cache_aware")
#: sglang-router's cache_aware defaults (its documentation): the match share above which a
#: request follows its prefix, and the load imbalance that overrides it (not modelled).
CACHE_THRESHOLD = 0.3
BALANCE_ABS = 64
BALANCE_REL = 1.5
#: Most instances a prediction takes (a router fronts tens of workers, not thousands).
MAX_INSTANCES = 1024


@dataclass(frozen=True)
class ClusterPoint:
    """Hit rates (token-weighted, over the whole trace) of N instances under one routing."""

    instances: int
    routing: str
    device: float  # served by an instance's own L1
    host: float  # by its own L2, beyond L1
    storage: float  # by the shared L3, beyond both (0 without L3)
    bound_total: float  # one instance with N x L1 and N x L2, the same L3
    requests_min: int  # requests the busiest and the idlest instance got
    requests_max: int

    @property
    def total(self) -> float:
        return self.device + self.host + self.storage

    @property
    def private(self) -> float:
        return self.device + self.host


def parse_counts(text: str, most: int = MAX_INSTANCES) -> list[int]:
    """The instance counts of an --instances comma list, in the order given, each once."""
    from xputune.errors import XputuneError

    counts: list[int] = []
    for word in (w.strip() for w in text.split(",")):
        if not word.isdigit() or not 1 <= int(word) <= most:
            shown = word if len(word) <= 20 else word[:20] + "..."
            raise XputuneError(
                f"--instances: {shown!r} is not a count of instances (1 to {most}); give a "
                "comma list such as 1,2,4,8"
            )
        counts.append(int(word))
    return list(dict.fromkeys(counts))


def assign(trace: Trace, instances: int, routing: str, seed: int = 0) -> np.ndarray:
    """The instance each request of `trace` goes to, in trace order."""
    import numpy as np

    if routing not in ROUTINGS:
        raise ValueError(f"unknown routing {routing!r}")
    if not 1 <= instances <= MAX_INSTANCES:
        raise ValueError(f"instances must be 1..{MAX_INSTANCES}")
    n = trace.requests
    if routing == "round_robin" or instances == 1:
        return np.arange(n, dtype=np.int64) % instances
    if routing == "random":
        return np.random.default_rng(seed).integers(0, instances, size=n, dtype=np.int64)
    return _cache_aware(trace, instances)


def spread(trace: Trace, instances: int, routing: str, seed: int = 0) -> list[int]:
    """How many of the trace's requests each instance gets under `routing`, most first (which
    instance is which is the router's to choose; how even the split is, is the model's)."""
    import numpy as np

    counts = np.bincount(assign(trace, instances, routing, seed), minlength=instances)
    return sorted(counts.tolist(), reverse=True)


def _cache_aware(trace: Trace, instances: int) -> np.ndarray:
    import numpy as np

    trees: list[set[int]] = [set() for _ in range(instances)]
    out = np.empty(trace.requests, dtype=np.int64)
    ids = trace.block_ids.tolist()
    offsets = trace.offsets.tolist()
    for r in range(trace.requests):
        blocks = ids[offsets[r] : offsets[r + 1]]
        best, best_share = 0, -1.0
        for k, tree in enumerate(trees):
            matched = 0
            for block in blocks:
                if block not in tree:
                    break
                matched += 1
            share = matched / len(blocks) if blocks else 0.0
            if share > best_share:
                best, best_share = k, share
        if best_share <= CACHE_THRESHOLD:
            best = min(range(instances), key=lambda k: len(trees[k]))
        trees[best].update(blocks)
        out[r] = best
    return out


def _positions(trace: Trace, requests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(stack positions, accesses' indices in `trace`) of the sub-stream of `requests`."""
    import numpy as np

    from xputune.plan.stackdist import dense_ids, stack_distances

    starts, ends = trace.offsets[requests], trace.offsets[requests + 1]
    lengths = ends - starts
    if len(requests) == 0 or int(lengths.sum()) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    index = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends, strict=True)])
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    dense, n_ids = dense_ids(trace.block_ids[index])
    positions, _ = stack_distances(dense, offsets, n_ids)
    return positions, index


def cluster_point(
    trace: Trace,
    instances: int,
    routing: str,
    l1_tokens: int,
    l2_tokens: int,
    l3_tokens: int | None = None,
    seed: int = 0,
    storage_min_tokens: int = 0,
) -> ClusterPoint:
    """The hit rates of `instances` instances under `routing` (see the module docstring).

    `storage_min_tokens`: a request's L3 run shorter than this is recomputed, not fetched
    (SGLang prefetches from storage only a miss of at least its prefetch_threshold)."""
    import numpy as np

    from xputune.plan.stackdist import dense_ids, stack_distances

    block = trace.block_size
    l1, l2 = l1_tokens // block, max(l1_tokens, l2_tokens) // block
    where = assign(trace, instances, routing, seed)
    private = np.zeros(trace.accesses, dtype=np.int64)
    for k in range(instances):
        positions, index = _positions(trace, np.flatnonzero(where == k))
        private[index] = positions
    dense, n_ids = dense_ids(trace.block_ids)
    shared, _ = stack_distances(dense, trace.offsets, n_ids)
    tokens = trace.block_tokens.astype(np.float64)
    total = float(trace.total_tokens) or 1.0
    warm = private > 0
    in_l1 = warm & (private <= l1)
    in_l2 = warm & (private <= l2) & ~in_l1
    storage = 0.0
    l3 = None if l3_tokens is None else max(l2, l3_tokens // block)
    if l3 is not None:
        in_l3 = ~(in_l1 | in_l2) & (shared > 0) & (shared <= l3)
        served = np.where(in_l3, tokens, 0.0)
        if storage_min_tokens > 0 and trace.requests:
            runs = np.add.reduceat(served, trace.offsets[:-1]) if len(served) else served
            empty = trace.offsets[:-1] == trace.offsets[1:]  # reduceat's quirk: keep them 0
            runs = np.where(empty, 0.0, runs)
            served = np.where(np.repeat(runs >= storage_min_tokens, np.diff(trace.offsets)),
                              served, 0.0)  # fmt: skip
        storage = float(served.sum()) / total
    reach = l3 if l3 is not None else instances * l2
    big = max(instances * l2, reach)
    bound = float(tokens[(shared > 0) & (shared <= big)].sum()) / total
    counts = np.bincount(where, minlength=instances)
    return ClusterPoint(
        instances=instances,
        routing=routing,
        device=float(tokens[in_l1].sum()) / total,
        host=float(tokens[in_l2].sum()) / total,
        storage=storage,
        bound_total=bound,
        requests_min=int(counts.min()),
        requests_max=int(counts.max()),
    )


def cluster_report(
    trace: Trace,
    instances: list[int],
    routing: str,
    l1_tokens: int,
    l2_tokens: int,
    l3_tokens: int | None,
) -> dict:
    """The "cluster" part of `tiers --format json`: a row per instance count."""
    rows = []
    for n in instances:
        p = cluster_point(trace, n, routing, l1_tokens, l2_tokens, l3_tokens)
        rows.append({
            "instances": n,
            "device_hit_rate": round(p.device, 6),
            "host_hit_rate": round(p.host, 6),
            "storage_hit_rate": round(p.storage, 6),
            "total_hit_rate": round(p.total, 6),
            "private_hit_rate": round(p.private, 6),
            "bound_hit_rate": round(p.bound_total, 6),
            "requests_min": p.requests_min,
            "requests_max": p.requests_max,
        })  # fmt: skip
    return {
        "routing": routing,
        "l1_tokens": l1_tokens,
        "l2_tokens": l2_tokens,
        "l3_tokens": l3_tokens,
        "cache_threshold": CACHE_THRESHOLD if routing == "cache_aware" else None,
        "points": rows,
    }
