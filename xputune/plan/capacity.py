"""How much host memory each card can give HiCache L2, and the ladder of tiers to try.

The field report's rule (docs/field-report.md, 3): try capacity tier by tier from small and stop
where the hit rate stops rising, because registered memory is itself a cost. So the ladder starts
small and doubles up to the most a card can get under the chosen strategy.

Sizes shown to SGLang are in GB (1e9 bytes): --hicache-size is per rank in GB.
"""

from __future__ import annotations

from dataclasses import dataclass

from xputune.plan.bindings import Bindings, PlanError
from xputune.topology.model import Topology

GB = 10**9
GIB = 1 << 30


@dataclass(frozen=True)
class Reserve:
    """Host memory that is not L2's: the OS, RDMA registered memory, the serving process."""

    os_fraction: float = 0.10  # of each node's memory: kernel, page cache, other services
    rdma_bytes_per_node: int = 16 * GIB  # memory registered by RDMA (PD transfer buffers)
    process_bytes_per_card: int = 10 * GIB  # the SGLang rank itself: staging, tokenizer, ...

    def node_usable(self, total: int) -> int:
        return max(0, int(total * (1 - self.os_fraction)) - self.rdma_bytes_per_node)


@dataclass(frozen=True)
class Limit:
    """A cap on the ladder besides the static share: what the tightest NUMA node has free now
    (plan/budget.py builds it), the node, and its arithmetic in one sentence."""

    per_rank_bytes: int
    node: int
    why: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tier:
    hicache_size_gb: int  # SGLang --hicache-size (per rank)
    host_bytes_total: int  # what the host really spends on L2 for the TP group
    tokens_per_rank: int  # tokens a rank's host pool holds
    effective_tokens: int  # distinct tokens L2 holds for the TP group


@dataclass(frozen=True)
class Capacity:
    strategy: str
    bytes_per_token: int  # host pool bytes per token on one rank
    replicated: bool  # True for MLA: every rank holds the same latent KV
    per_rank_max_bytes: int  # the ladder's top: the smaller of the two below
    effective_tokens_max: int
    tiers: tuple[Tier, ...]
    notes: tuple[str, ...]
    #: The static share: what a node gives L2 when idle (Reserve: 90% less RDMA buffers and
    #: the ranks' own memory), as the box is built.
    static_max_bytes: int = 0
    #: The node budget's cap (plan/budget.py); None: none known.
    limit: Limit | None = None

    @property
    def limited_by_budget(self) -> bool:
        """Whether a node's free memory, not the static share, sets the ladder's top."""
        return self.limit is not None and self.per_rank_max_bytes < self.static_max_bytes

    @property
    def per_rank_max_gb(self) -> float:
        return self.per_rank_max_bytes / GB


def _per_rank_max(topo: Topology, bindings: Bindings, reserve: Reserve) -> tuple[int, list[str]]:
    notes: list[str] = []
    if bindings.strategy == "shared":
        total = sum(reserve.node_usable(n.memory_total_bytes or 0) for n in topo.numa_nodes)
        buffer = total - reserve.process_bytes_per_card * len(bindings.ranks)
        notes.append(
            f"one shared buffer interleaved over {len(topo.numa_nodes)} nodes "
            f"({total / GB:,.0f} GB usable, minus the ranks' own memory)"
        )
        return max(0, buffer), notes
    limits = []
    for rank in bindings.ranks:
        if rank.numa_node is None:
            raise PlanError(f"rank {rank.rank} ({rank.card}): NUMA node unknown, cannot size L2")
        node = topo.node(rank.numa_node)
        if bindings.strategy == "local":
            sharers = sum(1 for c in topo.cards if c.numa_node == node.id) or 1
        else:
            sharers = 1
        if node.memory_total_bytes is None:
            raise PlanError(f"rank {rank.rank} ({rank.card}): memory of node {node.id} unknown")
        usable = reserve.node_usable(node.memory_total_bytes) // sharers
        limits.append(usable - reserve.process_bytes_per_card)
    per_rank = max(0, min(limits))
    if bindings.strategy == "local":
        used = {r.numa_node for r in bindings.ranks}
        idle = [n.id for n in topo.numa_nodes if n.id not in used and n.memory_total_bytes]
        if idle:
            notes.append(
                f"nodes {' '.join(map(str, idle))} hold no card: their memory is unused under "
                "local binding (all-nodes or shared can use it)"
            )
    return per_rank, notes


def capacity(
    topo: Topology,
    bindings: Bindings,
    bytes_per_token: int,
    *,
    replicated: bool,
    reserve: Reserve | None = None,
    smallest_gb: int = 8,
    limit: Limit | None = None,
) -> Capacity:
    """The most L2 per rank under `bindings.strategy` and a doubling ladder up to it.

    `limit` (plan/budget.py: the tightest node's budget) cuts the top to what a node has free
    now: the ladder never offers a size a node cannot hold, so no step spills off its node.
    """
    if bytes_per_token <= 0:
        raise PlanError(f"bytes per token must be positive, got {bytes_per_token}")
    if bindings.strategy == "shared" and not replicated:
        raise PlanError(
            "shared needs a model whose host KV is identical on every rank (MLA); "
            "MHA/GQA ranks hold different heads"
        )
    reserve = reserve or Reserve()
    static, notes = _per_rank_max(topo, bindings, reserve)
    per_rank = static
    if limit is not None:
        per_rank = min(static, limit.per_rank_bytes)
        notes.extend(limit.notes)
        notes.append(_limit_note(limit, static))
    tp = len(bindings.ranks)
    top_gb = per_rank // GB
    if top_gb < 1:
        if limit is not None and per_rank < static:
            raise PlanError(
                f"no host memory left for L2: {limit.why} (free memory on node {limit.node}, "
                "or lower --node-reserve-gb or the L3 segment)"
            )
        raise PlanError("no host memory left for L2 after the reserve")
    sizes = []
    size = min(smallest_gb, top_gb)
    while size < top_gb:
        sizes.append(size)
        size *= 2
    sizes.append(top_gb)
    tiers = []
    for gb in sizes:
        tokens = gb * GB // bytes_per_token
        host_total = gb * GB if bindings.strategy == "shared" else gb * GB * tp
        tiers.append(Tier(gb, host_total, tokens, tokens))
    if bindings.strategy != "shared" and replicated and tp > 1:
        notes.append(
            f"MLA host KV is identical on all {tp} ranks: L2 holds {tp} copies of the same "
            "tokens (shared mode keeps one)"
        )
    return Capacity(
        strategy=bindings.strategy,
        bytes_per_token=bytes_per_token,
        replicated=replicated,
        per_rank_max_bytes=per_rank,
        effective_tokens_max=per_rank // bytes_per_token,
        tiers=tuple(tiers),
        notes=tuple(notes),
        static_max_bytes=static,
        limit=limit,
    )


def _limit_note(limit: Limit, static: int) -> str:
    """Which limit sets the ladder's top, in one line."""
    if limit.per_rank_bytes >= static:
        return (
            f"every node's budget holds the static share ({static / GB:,.1f} GB per rank), "
            "which sets the ladder's top"
        )
    return f"the ladder stops at {limit.per_rank_bytes // GB} GB per rank: {limit.why}"
