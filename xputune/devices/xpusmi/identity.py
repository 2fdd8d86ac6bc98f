"""Card identity shared with `xputune probe`: the same names (xpu0.., gpu0..) and bus ids.

Probe names a vendor's cards by their position in PCI bus id order (topology.cards.PREFIX plus
that position) and joins vendor records by canonical bus id (busid.normalize_bus_id). Both
tools number cards in the same bus order, so a form that prints the tool's index (default
table, -L, -m, topo -m, a --query-gpu CSV with an index column) names card N "xpuN"/"gpuN":
right even when only some cards are listed.
The -q forms print no index, so there the name is the card's rank in bus id order, which is
right for a full listing (a `-q --id` of one card cannot know its rank: its name is null).
"""

from __future__ import annotations

from xputune.devices.xpusmi.model import SmiCard, SmiParseError, SmiReport
from xputune.topology.cards import PREFIX

INDEXED_FORMS = frozenset({"table", "list", "monitor", "topo", "csv", "nvml"})


def name_cards(cards: tuple[SmiCard, ...], vendor: str, form: str) -> tuple[SmiCard, ...]:
    """`cards` with `card` set; SmiParseError when two cards claim one bus id."""
    prefix = PREFIX.get(vendor, PREFIX["other"])
    seen: dict[str, int | None] = {}
    for card in cards:
        if card.bus_id is None:
            continue
        if card.bus_id in seen:
            raise SmiParseError(
                None,
                f"bus id {card.bus_id} appears twice (cards {seen[card.bus_id]} and {card.index})",
            )
        seen[card.bus_id] = card.index
    if form in INDEXED_FORMS:
        return tuple(
            c._replace(card=None if c.index is None else f"{prefix}{c.index}") for c in cards
        )
    if cards and len(seen) == len(cards) and len(cards) > 1:
        order = {bdf: rank for rank, bdf in enumerate(sorted(seen))}
        return tuple(c._replace(card=f"{prefix}{order[c.bus_id or '']}") for c in cards)
    return cards


def finish(report: SmiReport) -> SmiReport:
    """The report with its cards named (and refused when a bus id is duplicated)."""
    return report._replace(cards=name_cards(report.cards, report.vendor, report.form))
