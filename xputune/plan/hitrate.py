"""Prefix-cache hit rate at every capacity, from one pass over a trace.

Why: "how much host memory per card is worth giving to L2" is a question about the whole
hit-rate curve, not one point of it. Prefix curves have flat stretches followed by steep rises,
so probing capacities one by one (and stopping at the first plateau) can stop too early; the
curve shows the whole shape at the cost of one pass.

Semantics (the brute-force simulator in tests/plan/ is the independent definition):

- A trace is a sequence of requests; a request is a list of blocks, root first. Each block has
  an id (prefix-chained: an id fixes its whole prefix) and carries `tokens` tokens: the block
  size, except that a request's last block may be partial. The input tokens a request has
  beyond its last block (if a trace says so) can never hit but count in the total.
- The cache holds whole blocks. Capacity is counted in tokens of cache slots: each cached
  block takes `block_size` tokens of capacity even when it is a partial last block, so a
  capacity of C tokens holds floor(C / block_size) blocks.
- On a request, the hit is the longest prefix of its blocks that are all cached; its hit tokens
  are the tokens those blocks carry (a partial last block counts its real tokens). Then every
  block of the request becomes the most recently used (inserted if missing), and least recently
  used blocks are evicted while the cache holds more blocks than fit. Ancestors are made more
  recent than their descendants (blocks touched deepest first), so eviction always takes a
  leaf: the prefix-LRU that a radix cache such as SGLang's runs, where a request's whole path
  shares one access time and the least recently used leaf goes first.
- Hit rate = hit tokens / total input tokens, over the whole trace (no warm-up excluded).

Because the cache at capacity c is always the top c blocks of one LRU stack, a block is cached
before its request at capacity c exactly when its stack position then is <= c (Mattson). A
request's block is in its hit prefix when the running maximum of positions up to it is <= c.
So one pass yields, per block, the smallest capacity at which it hits, and the curve is a
cumulative sum. Two tiers follow from the same stack: a write-through L2 (holding a copy of
everything, as HiCache's write_through does) of size L2 >= L1 hits like one cache of size L2;
an exclusive L2 (L1 victims demoted to L2, hits promoted back) hits like one cache of L1 + L2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xputune.plan.traces import Trace

if TYPE_CHECKING:
    from collections.abc import Iterable

    import numpy as np

    from xputune.plan.traces import Batch, TraceReader


class TraceError(ValueError):
    """A trace that breaks the model above (kept a ValueError so pure callers need no CLI)."""


def trace_from_requests(
    requests: list[tuple[list[int], list[int]]], block_size: int, uncached_tokens: int = 0
) -> Trace:
    """Build a Trace from (block ids, tokens per block) pairs; handy for tests and small inputs."""
    import numpy as np

    ids = [i for blocks, _ in requests for i in blocks]
    toks = [t for _, tokens in requests for t in tokens]
    lengths = [len(blocks) for blocks, _ in requests]
    offsets = np.zeros(len(requests) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Trace(
        block_ids=np.asarray(ids, dtype=np.uint64),
        block_tokens=np.asarray(toks, dtype=np.int64),
        offsets=offsets,
        block_size=block_size,
        uncached_tokens=uncached_tokens,
    )


@dataclass(frozen=True)
class HitCurve:
    """Token-weighted prefix hit rate as a step function of capacity (in blocks, then tokens)."""

    block_size: int
    cum_hit_tokens: np.ndarray  # [s] = hit tokens with room for s blocks; float64, len >= 1
    total_tokens: float
    accesses: int
    distinct_blocks: int
    chain_violations: int = 0
    sample_rate: float = 1.0
    sampled_accesses: int = field(default=0)

    @property
    def exact(self) -> bool:
        return self.sample_rate >= 1.0

    @property
    def max_hit_rate(self) -> float:
        """The hit rate with unlimited capacity: everything but first touches hits."""
        return float(self.cum_hit_tokens[-1] / self.total_tokens) if self.total_tokens else 0.0

    @property
    def saturation_tokens(self) -> int:
        """The smallest capacity that reaches the maximum hit rate."""
        import numpy as np

        top = self.cum_hit_tokens[-1]
        slots = int(np.searchsorted(self.cum_hit_tokens, top, side="left"))
        return slots * self.block_size

    def hit_rate(self, capacity_tokens: int) -> float:
        if capacity_tokens < 0:
            raise ValueError(f"capacity must be >= 0 tokens, got {capacity_tokens}")
        if not self.total_tokens:
            return 0.0
        slots = min(capacity_tokens // self.block_size, len(self.cum_hit_tokens) - 1)
        return float(self.cum_hit_tokens[slots] / self.total_tokens)

    def hit_rates(self, capacities_tokens: np.ndarray) -> np.ndarray:
        import numpy as np

        caps = np.asarray(capacities_tokens, dtype=np.int64)
        if (caps < 0).any():
            raise ValueError("capacities must be >= 0 tokens")
        if not self.total_tokens:
            return np.zeros(len(caps))
        slots = np.minimum(caps // self.block_size, len(self.cum_hit_tokens) - 1)
        return self.cum_hit_tokens[slots] / self.total_tokens


def _curve_from_positions(positions: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Cumulative hit tokens per capacity in blocks; positions 0 are cold (never hit)."""
    import numpy as np

    warm = positions > 0
    hist = np.bincount(positions[warm], weights=tokens[warm].astype(np.float64), minlength=1)
    hist[0] = 0.0
    return np.cumsum(hist)


def exact_curve(trace: Trace) -> HitCurve:
    """The exact curve: one stack-distance pass in C over every block access."""
    from xputune.plan.stackdist import dense_ids, stack_distances

    _check(trace)
    dense, n_ids = dense_ids(trace.block_ids)
    positions, violations = stack_distances(dense, trace.offsets, n_ids)
    return HitCurve(
        block_size=trace.block_size,
        cum_hit_tokens=_curve_from_positions(positions, trace.block_tokens),
        total_tokens=float(trace.total_tokens),
        accesses=trace.accesses,
        distinct_blocks=n_ids,
        chain_violations=violations,
        sampled_accesses=trace.accesses,
    )


def _block_size(block: int | None) -> int:
    """The trace's block size in tokens; a curve of blocks of no size means nothing."""
    if block is None or block <= 0:
        raise TraceError(f"block size must be > 0 tokens, got {block}")
    return block


def curve_from_batches(batches: Iterable[Batch], block_size: int | None = None) -> HitCurve:
    """The exact curve streamed from a trace reader's batches (traces.TraceReader).

    Same values as exact_curve on the same requests (the same pass, with hit tokens summed
    per position as it goes), in memory that grows with distinct blocks, not accesses.
    """
    from xputune.plan.stackdist import StackStream

    stream = StackStream()
    total = 0
    block = block_size
    for batch in batches:
        stream.feed(batch.ids, batch.counts, batch.last_tokens, batch.block)
        total += batch.tokens
        block = batch.block
    cum, n_ids, violations, accesses, _, _ = stream.result()
    if block is None:  # nothing kept: a reader knows its block size once it has read
        block = getattr(batches, "block", None)
    return HitCurve(
        block_size=_block_size(block),
        cum_hit_tokens=cum,
        total_tokens=float(total),
        accesses=accesses,
        distinct_blocks=n_ids,
        chain_violations=violations,
        sampled_accesses=accesses,
    )


def _spatial_hash(block_ids: np.ndarray, seed: int) -> np.ndarray:
    """splitmix64 finaliser: spreads sequential ids (Mooncake numbers blocks 0, 1, 2...)."""
    import numpy as np

    with np.errstate(over="ignore"):
        z = block_ids.astype(np.uint64) + np.uint64((0x9E3779B97F4A7C15 * (seed + 1)) % 2**64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def sampled_curve(trace: Trace, rate: float, seed: int = 0) -> HitCurve:
    """An approximate curve from a spatially sampled trace (SHARDS, with an exact hot set).

    A block is kept when hash(block id) falls under `rate` (all its accesses, so its reuse
    pattern stays whole) and then stands for 1/rate blocks: stack positions and hit tokens are
    scaled by that weight. Plain SHARDS is badly off on prefix traces, whose hits concentrate
    on a few hot prefix chains (a system prompt, a popular document): whether one hot chain
    falls in the sample moves the curve by many points. So the most accessed blocks, as many
    as the sample holds, are kept too with weight 1 (exactly). On skewed traces the hot set
    carries most accesses, so this mode saves little time over the exact pass; its use is a
    check of the method and a smaller stack when the exact one would not fit.
    """
    import numpy as np

    from xputune.plan.stackdist import dense_ids, stack_distances

    if not 0.0 < rate <= 1.0:
        raise ValueError(f"sample rate must be in (0, 1], got {rate}")
    scale = round(1.0 / rate)
    if scale <= 1:
        return exact_curve(trace)
    _check(trace)
    dense, n_ids = dense_ids(trace.block_ids)
    counts = np.bincount(dense, minlength=n_ids)
    budget = max(1, n_ids // scale)
    cutoff = max(int(np.partition(counts, n_ids - budget)[n_ids - budget]), 2)
    hot = counts >= cutoff
    first = np.zeros(n_ids, dtype=np.int64)
    first[dense[::-1]] = np.arange(len(dense) - 1, -1, -1)  # an access of each id
    sampled = _spatial_hash(trace.block_ids[first], seed) < np.uint64(2**64 // scale)
    weights = np.where(hot, 1, np.where(sampled, scale, 0)).astype(np.int32)
    positions, _ = stack_distances(dense, trace.offsets, n_ids, weights)
    access_weight = weights[dense]
    tokens = trace.block_tokens * access_weight
    return HitCurve(
        block_size=trace.block_size,
        cum_hit_tokens=_curve_from_positions(positions, tokens),
        total_tokens=float(trace.total_tokens),
        accesses=trace.accesses,
        distinct_blocks=n_ids,
        sample_rate=1.0 / scale,
        sampled_accesses=int(np.count_nonzero(access_weight)),
    )


def sampled_curve_stream(reader: TraceReader, rate: float, seed: int = 0) -> HitCurve:
    """sampled_curve of the trace a reader reads, without holding the trace: the same values.

    Two passes. The first counts the accesses of every distinct block (stackdist.IdCounter,
    from the ids alone: reader.block_ids() scans plain Mooncake lines without decoding them),
    which gives what sampled_curve takes from the whole trace: the distinct blocks and the hot
    set (the distinct / scale most accessed blocks, ties included, accessed twice or more). The
    second reads the batches again (reader.rewind(): a seekable stream; any other is read once
    and its batches held, as read_trace would) and runs the weighted pass over the hot and the
    sampled blocks only (stackdist.StackStream).

    Memory: the counting pass holds 12 bytes a slot per distinct block (a table grown by 1.5x,
    about a third of the exact pass's state), freed before the second pass, which holds the hot
    and the sampled blocks only. The first pass is the bound: sampled_curve's hot set is defined
    by exact counts of every block, so keeping its values keeps a table of every block.
    """
    import numpy as np

    from xputune.plan.stackdist import IdCounter, StackStream

    if not 0.0 < rate <= 1.0:
        raise ValueError(f"sample rate must be in (0, 1], got {rate}")
    scale = round(1.0 / rate)
    if scale <= 1:
        return curve_from_batches(reader, reader.block)
    seekable = getattr(reader.stream, "seekable", None)
    held: list[Batch] | None = None
    counter = IdCounter()
    try:
        if seekable is not None and seekable():
            for ids in reader.block_ids():
                counter.add(ids)
        else:
            held = list(reader)
            for batch in held:
                counter.add(batch.ids)
        n_ids, accesses, idsum = counter.info()
        if n_ids:
            budget = max(1, n_ids // scale)
            cutoff = max(counter.rank(budget), 2)
            hot = counter.at_least(cutoff)
        else:
            hot = np.zeros(0, dtype=np.uint64)
    finally:
        counter.close()
    stream = StackStream(scale, hot, seed)
    del hot
    if held is None:
        reader.rewind()
    total = 0
    block = None
    for batch in reader if held is None else held:
        stream.feed(batch.ids, batch.counts, batch.last_tokens, batch.block)
        total += batch.tokens
        block = batch.block
    cum, _, _, fed, kept, fed_sum = stream.result()
    if fed != accesses or fed_sum != idsum:
        raise TraceError(
            f"the trace read differently the second time ({fed} block accesses, "
            f"{accesses} the first time): was it changed while being read?"
        )
    return HitCurve(
        block_size=_block_size(reader.block if block is None else block),
        cum_hit_tokens=cum,
        total_tokens=float(total),
        accesses=accesses,
        distinct_blocks=n_ids,
        sample_rate=1.0 / scale,
        sampled_accesses=kept,
    )


def _check(trace: Trace) -> None:
    _block_size(trace.block_size)
    if len(trace.block_ids) != len(trace.block_tokens):
        raise TraceError("block ids and block tokens differ in length")
    if len(trace.offsets) == 0 or trace.offsets[0] != 0 or trace.offsets[-1] != trace.accesses:
        raise TraceError("request offsets do not cover the block list")
    if len(trace.block_tokens) and (
        trace.block_tokens.min() < 1 or trace.block_tokens.max() > trace.block_size
    ):
        raise TraceError(f"each block must carry 1..{trace.block_size} tokens")


def default_grid(curve: HitCurve, points: int = 24) -> list[int]:
    """Capacities from one block to saturation, spaced geometrically, in whole blocks."""
    import numpy as np

    top_slots = max(1, curve.saturation_tokens // curve.block_size)
    slots = np.unique(np.round(np.geomspace(1, top_slots, num=points)).astype(np.int64))
    return [int(s) * curve.block_size for s in slots]


@dataclass(frozen=True)
class TierPoint:
    """Hit rates of an L1 + L2 pair; `l2_share` is what L2 adds over L1 alone."""

    l1_tokens: int
    l2_tokens: int
    l1_hit_rate: float
    write_through_hit_rate: float
    exclusive_hit_rate: float

    @property
    def write_through_l2_share(self) -> float:
        return self.write_through_hit_rate - self.l1_hit_rate

    @property
    def exclusive_l2_share(self) -> float:
        return self.exclusive_hit_rate - self.l1_hit_rate


def tier_point(curve: HitCurve, l1_tokens: int, l2_tokens: int) -> TierPoint:
    """L1 alone, and L1 + L2 when L2 mirrors L1 (write-through) or excludes it."""
    return TierPoint(
        l1_tokens=l1_tokens,
        l2_tokens=l2_tokens,
        l1_hit_rate=curve.hit_rate(l1_tokens),
        write_through_hit_rate=curve.hit_rate(max(l1_tokens, l2_tokens)),
        exclusive_hit_rate=curve.hit_rate(l1_tokens + l2_tokens),
    )


@dataclass(frozen=True)
class ThreeTierPoint:
    """Where the hits of L1 + L2 + L3 come from, each tier holding what the ones above hold.

    SGLang's HiCache backs L1 up to L2 and L2 up to the storage backend (write-through at each
    step), so with prefix-LRU order a block at stack distance d hits in L1 when d <= L1, in L2
    when L1 < d <= L2 and in L3 when L2 < d <= L3: three points of one curve. A tier smaller
    than the one above it adds nothing.
    """

    l1_tokens: int
    l2_tokens: int
    l3_tokens: int
    device: float  # hit rate served by L1
    host: float  # by L2
    storage: float  # by L3

    @property
    def total(self) -> float:
        return self.device + self.host + self.storage


def three_tier_point(
    curve: HitCurve, l1_tokens: int, l2_tokens: int, l3_tokens: int
) -> ThreeTierPoint:
    """The hit rate of each tier of an inclusive L1 / L2 / L3 hierarchy (see ThreeTierPoint)."""
    l2_reach = max(l1_tokens, l2_tokens)
    l3_reach = max(l2_reach, l3_tokens)
    device = curve.hit_rate(l1_tokens)
    host = curve.hit_rate(l2_reach)
    return ThreeTierPoint(
        l1_tokens=l1_tokens,
        l2_tokens=l2_tokens,
        l3_tokens=l3_tokens,
        device=device,
        host=host - device,
        storage=curve.hit_rate(l3_reach) - host,
    )


@dataclass(frozen=True)
class StorageRuns:
    """Per request, the tokens L3 serves beyond L2, judged against a break-even length.

    With prefix-LRU order the stack positions of one request never fall along its blocks, so
    the blocks L3 serves (L2 < position <= L3) are one contiguous run: one L3 fetch. A run
    shorter than the break-even costs more than recomputing it; a longer one saves.
    """

    requests: int  # requests with an L3 run
    tokens: int  # tokens served by L3 over the whole trace
    paying_requests: int  # runs longer than the break-even
    paying_tokens: int

    @property
    def paying_share(self) -> float:
        return self.paying_tokens / self.tokens if self.tokens else 0.0


def storage_runs(trace: Trace, l2_tokens: int, l3_tokens: int, break_even: float) -> StorageRuns:
    """The L3 runs of every request of `trace` (one stack pass in C; positions held)."""
    import numpy as np

    from xputune.plan.stackdist import dense_ids, stack_distances

    _check(trace)
    dense, n_ids = dense_ids(trace.block_ids)
    positions, _ = stack_distances(dense, trace.offsets, n_ids)
    l2_slots = l2_tokens // trace.block_size
    l3_slots = max(l2_slots, l3_tokens // trace.block_size)
    served = (positions > l2_slots) & (positions <= l3_slots)
    per_access = np.where(served, trace.block_tokens, 0)
    cum = np.concatenate(([0], np.cumsum(per_access, dtype=np.int64)))
    runs = cum[trace.offsets[1:]] - cum[trace.offsets[:-1]]
    paying = runs > break_even
    return StorageRuns(
        requests=int((runs > 0).sum()),
        tokens=int(runs.sum()),
        paying_requests=int(paying.sum()),
        paying_tokens=int(runs[paying].sum()),
    )


def trace_from_batches(batches: Iterable[Batch]) -> Trace:
    """A Trace in memory from a reader's batches (8 bytes per block access and more)."""
    import numpy as np

    ids, tokens, counts, uncached, block = [], [], [], 0, None
    for batch in batches:
        block = batch.block
        per = np.full(len(batch.ids), batch.block, dtype=np.int64)
        ends = np.cumsum(batch.counts) - 1
        nonempty = batch.counts > 0
        per[ends[nonempty]] = batch.last_tokens[nonempty]
        ids.append(batch.ids)
        tokens.append(per)
        counts.append(batch.counts)
        uncached += batch.uncached
    all_counts = np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)
    offsets = np.zeros(len(all_counts) + 1, dtype=np.int64)
    np.cumsum(all_counts, out=offsets[1:])
    return Trace(
        block_ids=np.concatenate(ids) if ids else np.zeros(0, dtype=np.uint64),
        block_tokens=np.concatenate(tokens) if tokens else np.zeros(0, dtype=np.int64),
        offsets=offsets,
        block_size=_block_size(block),
        uncached_tokens=uncached,
    )
