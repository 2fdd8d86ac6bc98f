"""What each NUMA node can give L2 now: its free memory less a stated reserve, the L3 segments
registered there and the ranks' own memory, shared by the cards bound to it.

Why per node: the field report's largest host-side result is placement (binding each card's
host KV to its own node took degradation from +11.5% to -2.1%, docs/field-report.md 2.4), and
a binding only holds while the node has the pages. A pool bigger than its node's free memory
either fails or leaves the node: under a strict bind (SGLang's default numactl --membind,
xputune's own buffer's MPOL_BIND) the node reclaims and then the OOM killer steps in; under
SGLang's fallbacks (--preferred, or CPUs only without CAP_SYS_NICE) the pages past it land on
another node, silently, which is the unpinned case the binding was meant to remove
(launch/prefault.py follows SGLang's binding through its prefault threads).
Host-wide free memory split evenly over the ranks (SGLang's --hicache-host-memory-fraction)
cannot see any of this; so the ladder is cut per node.

Which free memory: a node's meminfo has no MemAvailable line, so the kernel's estimate is
rebuilt from the lines it is made of: MemFree plus what the kernel can hand back without
swapping, the file LRU and reclaimable kernel memory (topology/numa.py: reclaimable_bytes).
MemFree alone would call a node full whose memory merely holds page cache, which the first
allocation of the pool evicts. What the kernel's own estimate takes off on top (the low
watermarks, from /proc/zoneinfo) is part of the reserve here. Where a node's meminfo lacks the
page cache lines, MemFree alone is used and the plan says so.

The reserve (default 20 GB a node, `--node-reserve-gb` of plan and launch sglang): what the
node must keep for what is not running yet: RDMA transfer buffers of PD disaggregation (the
static model's 16 GiB, plan/capacity.py: Reserve), the page tables of the pools, and the
kernel's watermarks. Each
card's serving process is charged apart (Reserve.process_bytes_per_card, 10 GiB): it runs on
its node and first-touches there.

Pure: a topology and bindings in, budgets out; the reading is topology/'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from xputune.plan.bindings import Bindings
from xputune.plan.capacity import GB, Limit, Reserve
from xputune.topology.model import Topology

DEFAULT_NODE_RESERVE = 20 * GB
FREE_MEASURE = "MemFree + file LRU + reclaimable kernel memory"
FREE_ONLY = "MemFree only (no page cache lines in the node's meminfo)"


@dataclass(frozen=True)
class NodeBudget:
    """One node: what is free on it, what is taken off, and what is left per card.

    sharers: the cards its L2 room is split over (local binding: every card attached to it,
    planned or not, since another instance binds those cards there too; all-nodes: the ranks
    bound to it); 0 under shared, whose one buffer is interleaved over every node.
    """

    node: int
    cards: tuple[str, ...]  # the planned ranks' cards whose host KV it holds
    sharers: int
    available_bytes: int | None  # None: the node's meminfo did not say
    measure: str  # what available_bytes counts (FREE_MEASURE or FREE_ONLY)
    reserve_bytes: int
    l3_bytes: int  # L3 segments registered on it (Mooncake, prefill)
    ranks_bytes: int  # the serving processes that run on it

    @property
    def registered_room_bytes(self) -> int | None:
        """What is left for registered memory, L2 and L3 together."""
        if self.available_bytes is None:
            return None
        return max(0, self.available_bytes - self.reserve_bytes - self.ranks_bytes)

    @property
    def room_bytes(self) -> int | None:
        """What is left for L2 on the node."""
        room = self.registered_room_bytes
        return None if room is None else max(0, room - self.l3_bytes)

    @property
    def per_card_bytes(self) -> int | None:
        """Each sharing card's L2 (None under shared, or when the node's memory is unknown)."""
        room = self.room_bytes
        return None if room is None or not self.sharers else room // self.sharers


@dataclass(frozen=True)
class Budgets:
    """Every node that holds host KV, and the --hicache-size they allow (per rank)."""

    strategy: str
    reserve_bytes: int
    nodes: tuple[NodeBudget, ...]
    per_rank_bytes: int | None  # None: no node's free memory is known
    limiting_node: int | None
    notes: tuple[str, ...]

    def registered_room(self) -> dict[int, int]:
        """Node -> what it has for L2 and L3 together (the nodes whose memory is known)."""
        return {
            n.node: n.registered_room_bytes
            for n in self.nodes
            if n.registered_room_bytes is not None
        }

    def node(self, node_id: int) -> NodeBudget | None:
        return next((n for n in self.nodes if n.node == node_id), None)

    def limit(self) -> Limit | None:
        """The cap capacity() puts on the ladder; None where no node's free memory is known."""
        if self.per_rank_bytes is None or self.limiting_node is None:
            return None
        return Limit(self.per_rank_bytes, self.limiting_node, self._why(), self.notes)

    def _why(self) -> str:
        """The tightest node's arithmetic: what it has free, what is taken off, who shares it."""
        n = self.node(self.limiting_node)  # type: ignore[arg-type]
        assert n is not None and n.available_bytes is not None and n.room_bytes is not None
        taken = [f"the {n.reserve_bytes / GB:,.0f} GB reserve"]
        if n.l3_bytes:
            taken.append(f"{n.l3_bytes / GB:,.1f} GB of L3 segments")
        if n.ranks_bytes:
            taken.append(f"{n.ranks_bytes / GB:,.1f} GB for its ranks' own memory")
        less = ", ".join(taken[:-1]) + f" and {taken[-1]}" if len(taken) > 1 else taken[0]
        if n.sharers:
            each = f"{n.room_bytes // n.sharers / GB:,.1f} GB for each of its {n.sharers} card(s)"
        else:
            each = (
                f"{n.room_bytes / GB:,.1f} GB for its share of the buffer interleaved over "
                f"{len(self.nodes)} nodes"
            )
        return (
            f"node {n.node} has {n.available_bytes / GB:,.1f} GB free; less {less}, that is {each}"
        )


def node_budgets(
    topo: Topology,
    bindings: Bindings,
    *,
    reserve_bytes: int = DEFAULT_NODE_RESERVE,
    process_bytes: int = Reserve().process_bytes_per_card,
    l3_by_node: Mapping[int, int] | None = None,
) -> Budgets:
    """The budget of each node that holds a rank's host KV, and the per-rank size they allow.

    Local and all-nodes: a rank can have no more than its node's room over the cards that
    share it, and one --hicache-size serves every rank, so the smallest decides. Shared: the
    buffer is interleaved evenly, one k-th on each of its k nodes, so it can be k times the
    smallest node's room.
    """
    if reserve_bytes < 0:
        raise ValueError(f"a node reserve cannot be negative, got {reserve_bytes}")
    l3 = dict(l3_by_node or {})
    shared = bindings.strategy == "shared"
    holding: dict[int, list[str]] = {}
    processes: dict[int, int] = {}
    for r in bindings.ranks:
        for node in r.memory_nodes:
            holding.setdefault(node, []).append(r.card)
        if r.numa_node is not None:
            processes[r.numa_node] = processes.get(r.numa_node, 0) + 1
    nodes: list[NodeBudget] = []
    notes: list[str] = []
    for node_id in sorted(holding):
        node = topo.node(node_id)
        cards = tuple(dict.fromkeys(holding[node_id]))
        if shared:
            sharers = 0
            running = processes.get(node_id, 0)
        elif bindings.strategy == "local":
            attached = sum(1 for c in topo.cards if c.numa_node == node_id)
            sharers = running = max(len(cards), attached)
        else:
            sharers = running = len(cards)
        available, measure = _available(node.memory_free_bytes, node.memory_reclaimable_bytes)
        if available is None:
            notes.append(
                f"node {node_id}: free memory unknown (its meminfo was not readable): only the "
                "static share limits L2 there"
            )
        elif measure == FREE_ONLY:
            notes.append(f"node {node_id}: free memory counted as {FREE_ONLY}")
        nodes.append(
            NodeBudget(
                node=node_id, cards=cards, sharers=sharers, available_bytes=available,
                measure=measure, reserve_bytes=reserve_bytes, l3_bytes=l3.get(node_id, 0),
                ranks_bytes=running * process_bytes,
            )
        )  # fmt: skip
    per_rank, limiting = _per_rank(nodes, shared)
    return Budgets(bindings.strategy, reserve_bytes, tuple(nodes), per_rank, limiting, tuple(notes))


def _available(free: int | None, reclaimable: int | None) -> tuple[int | None, str]:
    if free is None:
        return None, FREE_MEASURE
    if reclaimable is None:
        return free, FREE_ONLY
    return free + reclaimable, FREE_MEASURE


def _per_rank(nodes: list[NodeBudget], shared: bool) -> tuple[int | None, int | None]:
    """(the largest per-rank size every node holds, the node that sets it)."""
    known = [n for n in nodes if n.room_bytes is not None]
    if not known:
        return None, None
    if shared:
        tightest = min(known, key=lambda n: (n.room_bytes, n.node))
        return tightest.room_bytes * len(nodes), tightest.node  # type: ignore[operator]
    tightest = min(known, key=lambda n: (n.per_card_bytes, n.node))
    return tightest.per_card_bytes, tightest.node


def budgets_document(budgets: Budgets) -> dict[str, object]:
    """The per-node part of `plan --format json`'s "capacity" (schema "plan")."""

    def gb(value: int | None) -> float | None:
        return None if value is None else round(value / GB, 1)

    return {
        "node_reserve_gb": gb(budgets.reserve_bytes),
        "tightest_node": budgets.limiting_node,
        "node_budgets": [
            {
                "node": n.node,
                "cards": list(n.cards),
                "sharers": n.sharers,
                "free_gb": gb(n.available_bytes),
                "free_measure": n.measure,
                "reserve_gb": gb(n.reserve_bytes),
                "l3_gb": gb(n.l3_bytes),
                "ranks_own_gb": gb(n.ranks_bytes),
                "l2_room_gb": gb(n.room_bytes),
                "l2_per_card_gb": gb(n.per_card_bytes),
                "tightest": n.node == budgets.limiting_node,
            }
            for n in budgets.nodes
        ],
    }
