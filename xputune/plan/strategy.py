"""Which binding strategy (plan/bindings.py: local, all-nodes, shared) fits a host, and why.

Pure: a topology (and, when known, whether the model is MLA) in, a strategy and a one-line
reason out. The reasoning follows the field report (docs/field-report.md, 2.5 and 2.7):
- shared pays whenever the model is MLA and TP > 1: the latent KV is the same on every rank, so
  one buffer interleaved over all nodes holds it once instead of TP times, and only rank 0
  writes it (no two cards under a switch write to different nodes, so IDO does not matter).
- all-nodes pays only where local leaves memory idle: some cards share a NUMA node (or sit on
  a node without memory) while enough other nodes with memory have no card. It moves a card's
  host KV off its own node, so two cards under one switch write to different nodes, which
  strict PCIe ordering serializes: it needs ID-based ordering on every port of a shared uplink.
- local otherwise: each card already has a node of its own, the cards already cover every node
  with memory, there are too few nodes to give each card one, a card's node is unknown, or IDO
  is not (known to be) on where all-nodes needs it.

Used by `xputune labels` (the xputune.io/strategy label) and available to plan's output.
"""

from __future__ import annotations

from dataclasses import dataclass

from xputune.plan.bindings import _ido_gaps, select_cards
from xputune.topology.model import Card, Topology


@dataclass(frozen=True)
class StrategyAdvice:
    """strategy: local, all-nodes or shared (None: no cards to bind); reason: one line."""

    strategy: str | None
    reason: str


def recommend_strategy(
    topo: Topology, tp: int | None = None, mla: bool | None = None
) -> StrategyAdvice:
    """The strategy for ranks 0..tp-1 on the first tp cards in bus order (tp: all cards).

    mla: whether the model's KV is MLA (True allows shared); None when no model is named,
    in which case shared is only mentioned in the reason, never recommended.
    """
    if not topo.cards:
        return StrategyAdvice(None, "no cards: nothing to bind")
    cards = select_cards(topo, tp if tp is not None else len(topo.cards))
    if mla and len(cards) > 1:
        return StrategyAdvice(
            "shared",
            f"MLA model: one host buffer interleaved over every node holds the latent KV once "
            f"for all {len(cards)} ranks instead of {len(cards)} copies; only rank 0 writes it, "
            "so PCIe ordering does not limit it",
        )
    unknown = [c.name for c in cards if c.numa_node is None]
    if unknown:
        return StrategyAdvice(
            "local",
            f"the NUMA node of {', '.join(unknown)} is unknown: no node can be chosen for it",
        )
    with_memory = [n.id for n in topo.numa_nodes if n.memory_total_bytes]
    crowded = _crowded(cards, set(with_memory))
    if not crowded:
        return StrategyAdvice(
            "local", f"each of the {len(cards)} cards has a node with memory of its own"
        )
    used = {c.numa_node for c in cards}
    idle = [n for n in with_memory if n not in used]
    hint = "" if mla is False else "; for an MLA model, shared uses every node"
    if not idle:
        return StrategyAdvice(
            "local",
            f"{len(cards)} cards already cover every node with memory "
            f"({_nodes(with_memory)}){hint}",
        )
    if len(with_memory) < len(cards):
        return StrategyAdvice(
            "local",
            f"all-nodes needs a node with memory per card: {len(cards)} cards, "
            f"{len(with_memory)} nodes{hint}",
        )
    gaps = _ido_gaps(topo, cards)
    if gaps:
        return StrategyAdvice(
            "local",
            f"all-nodes would use the idle memory of node(s) {_nodes(idle)}, but "
            f"{len(gaps)} port(s) on shared switches lack ID-based ordering ({gaps[0]}): "
            f"run `xputune apply --ido` first{hint}",
        )
    shared_uplinks = any(len(u.cards) > 1 for u in topo.uplinks)
    why = (
        "ID-based ordering is on at every shared switch"
        if shared_uplinks
        else "no two cards share a switch"
    )
    return StrategyAdvice(
        "all-nodes",
        f"{len(crowded)} card(s) share a node while node(s) {_nodes(idle)} hold idle memory; "
        f"{why}, so a node per card is safe",
    )


def _crowded(cards: list[Card], with_memory: set[int]) -> list[str]:
    """Cards that local cannot give a node with memory of their own (bus order decides)."""
    seen: set[int | None] = set()
    out = []
    for card in cards:
        if card.numa_node in seen or card.numa_node not in with_memory:
            out.append(card.name)
        seen.add(card.numa_node)
    return out


def _nodes(ids: list[int]) -> str:
    return " ".join(str(i) for i in ids)
