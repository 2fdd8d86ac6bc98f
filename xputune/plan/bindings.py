"""Per-rank NUMA bindings for a topology: where each TP rank's process and host KV live.

Three strategies, from the field report (docs/field-report.md, 2.4, 2.5 and 2.7):
- local: each card's process and host memory on its own NUMA node. Safe everywhere, but on a
  box where two cards share a node and half the nodes have no card, half the memory sits idle.
- all-nodes: every card gets a node of its own (its local node if free, else the nearest free
  one), so all memory is usable. Two cards under one switch then write to different nodes, which
  strict PCIe ordering serializes: this needs ID-based ordering on the shared uplinks.
- shared: one TP-shared host buffer interleaved over all nodes (MLA only: the latent KV is
  identical on every rank); processes stay on their local nodes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from xputune.errors import XputuneError
from xputune.topology.model import Card, Topology

STRATEGIES = ("local", "all-nodes", "shared")


class PlanError(XputuneError):
    """A plan that cannot be made for this machine (too few cards, missing IDO, ...)."""


@dataclass(frozen=True)
class RankBinding:
    rank: int
    card: str
    card_index: int  # the vendor runtime's device index (CUDA/XPU_VISIBLE_DEVICES)
    bdf: str
    local_node: int | None  # where the card is attached
    numa_node: int | None  # where the rank's process (and, unless shared, its host KV) lives
    memory_nodes: tuple[int, ...]  # nodes the host KV pages come from
    cpus: tuple[int, ...]
    nic: str | None
    rdma: str | None


@dataclass(frozen=True)
class Bindings:
    strategy: str
    ranks: tuple[RankBinding, ...]
    warnings: tuple[str, ...]

    @property
    def numa_args(self) -> list[str]:
        """SGLang's --numa-node: the i-th value for the i-th visible card."""
        if any(r.numa_node is None for r in self.ranks):
            return []
        return ["--numa-node", *(str(r.numa_node) for r in self.ranks)]

    @property
    def ib_args(self) -> list[str]:
        """--disaggregation-ib-device, one RDMA device per rank, when every rank has one.

        A JSON object, rank -> device: SGLang reads a comma list as "these devices for every
        GPU" (repeats dropped), and the per-GPU form as a map keyed by GPU id, which is the
        rank in the visible order the plan sets.
        """
        if not self.ranks or any(r.rdma is None for r in self.ranks):
            return []
        devices = {str(i): r.rdma for i, r in enumerate(self.ranks)}
        return ["--disaggregation-ib-device", json.dumps(devices, separators=(",", ":"))]

    @property
    def visible_devices(self) -> str:
        """The CUDA/XPU_VISIBLE_DEVICES value (vendor indices, in rank order)."""
        return ",".join(str(r.card_index) for r in self.ranks)


def select_cards(topo: Topology, tp: int, order: list[str] | None = None) -> list[Card]:
    """The cards of ranks 0..tp-1: `order` names (xpu3 or 3) in visible order, else bus order."""
    if tp < 1:
        raise PlanError(f"--tp must be at least 1, got {tp}")
    if order:
        by_name = {c.name: c for c in topo.cards}
        by_index = {str(c.index): c for c in topo.cards}
        cards = []
        for item in order:
            card = by_name.get(item) or by_index.get(item)
            if card is None:
                raise PlanError(f"no card {item!r} (cards: {', '.join(by_name) or 'none'})")
            if card in cards:
                raise PlanError(f"card {item!r} listed twice in the card order")
            cards.append(card)
    else:
        cards = list(topo.cards)
    if len(cards) < tp:
        raise PlanError(f"--tp {tp} needs {tp} cards, this host has {len(cards)}")
    return cards[:tp]


def _ido_gaps(topo: Topology, cards: list[Card]) -> list[str]:
    """Ports on the paths of cards that share an uplink whose IDO bits are off or unknown."""
    shared = {u.bdf for u in topo.uplinks if len(u.cards) > 1}
    gaps = []
    seen: set[str] = set()  # a switch or root port is on the path of every card below it
    for card in cards:
        if card.uplink not in shared:
            continue
        for fn in topo.ports_on_path(card):
            if fn.bdf in seen:
                continue
            seen.add(fn.bdf)
            o = fn.ordering
            if o.ido_request is None:
                gaps.append(f"{card.name} {fn.bdf} unknown ({o.reason})")
            elif not (o.ido_request and o.ido_completion):
                gaps.append(f"{card.name} {fn.bdf} off")
    return gaps


def _spread(topo: Topology, cards: list[Card]) -> dict[str, int]:
    """A distinct node per card: its own if still free, else the nearest free one by distance."""
    order = [n.id for n in topo.numa_nodes]
    free = [n.id for n in topo.numa_nodes if n.memory_total_bytes]
    if len(free) < len(cards):
        raise PlanError(f"all-nodes needs a node per card: {len(cards)} cards, {len(free)} nodes")
    chosen: dict[str, int] = {}
    for card in cards:
        home = card.numa_node if card.numa_node in order else order[0]
        distances = topo.node(home).distances

        def cost(
            node_id: int, distances: tuple[int, ...] = distances, home: int = home
        ) -> tuple[int, int]:
            # Unknown distances (an unreadable row): the node itself first, then by id.
            far = distances[order.index(node_id)] if distances else int(node_id != home)
            return (far, node_id)

        pick = min(free, key=cost)
        free.remove(pick)
        chosen[card.name] = pick
    return chosen


def make_bindings(
    topo: Topology,
    tp: int,
    strategy: str = "local",
    order: list[str] | None = None,
    *,
    require_ido: bool = True,
) -> Bindings:
    """Bindings for ranks 0..tp-1; all-nodes refuses without IDO unless require_ido is False."""
    if strategy not in STRATEGIES:
        raise PlanError(f"unknown strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
    cards = select_cards(topo, tp, order)
    nics = {n.name: n for n in topo.nics}
    warnings: list[str] = []
    all_nodes = tuple(n.id for n in topo.numa_nodes if n.memory_total_bytes)
    spread = _spread(topo, cards) if strategy == "all-nodes" else {}
    if strategy == "all-nodes":
        gaps = _ido_gaps(topo, cards)
        if gaps:
            message = (
                "all-nodes puts cards that share a switch on different nodes; without ID-based "
                f"ordering their host writes block each other ({len(gaps)} port(s) without IDO: "
                f"{gaps[0]}{', ...' if len(gaps) > 1 else ''}); run `xputune apply --ido`"
            )
            if require_ido:
                raise PlanError(message)
            warnings.append(message)

    ranks = []
    for rank, card in enumerate(cards):
        node = spread.get(card.name, card.numa_node)
        if node is not None and not topo.node(node).cpus:
            warnings.append(f"rank {rank}: node {node} has no CPUs; process runs on the card's")
            cpu_node = card.numa_node
        else:
            cpu_node = node
        cpus = topo.node(cpu_node).cpus if cpu_node is not None else card.local_cpus
        if strategy == "shared":
            memory = all_nodes
        elif node is not None:
            memory = (node,)
        else:
            memory = ()
            warnings.append(f"rank {rank} ({card.name}): NUMA node unknown, memory not bound")
        nic = nics.get(card.nearest_nic or "")
        ranks.append(
            RankBinding(
                rank=rank,
                card=card.name,
                card_index=card.index,
                bdf=card.bdf,
                local_node=card.numa_node,
                numa_node=node,
                memory_nodes=memory,
                cpus=cpus,
                nic=nic.name if nic else None,
                rdma=nic.rdma if nic else None,
            )
        )
    return Bindings(strategy, tuple(ranks), tuple(warnings))
