"""NVLink and XPU Link in the probe's relation matrix: the vendor's link codes over sysfs's PCIe.

sysfs knows only PCIe, so discovery's matrix says PIX/PXB/PHB/NODE/SYS between cards that are
also joined by NVLink or Kunlunxin's XPU Link. A vendor matrix (NVML's NVLink state, or a
`nvidia-smi topo -m` / `xpu-smi topo -m` output) knows the links. The merge rules:

- a card pair the vendor shows as NV# or XL# takes the vendor's code;
- every other relation stays as PCIe says; where the vendor shows a different PCIe-level code,
  PCIe is kept and one warning lists the pairs that disagree;
- vendor keys join probe's cards by bus id (canonical, `busid.normalize_bus_id`) where the
  matrix has them, else by card name, which is card order: both tools and probe number a
  vendor's cards in PCI bus order (`xpusmi.identity`, the same join `xputune smi` uses).
  Keys that are neither (NICs: mlx5_0) are not cards and are left alone.

`with_vendor_links` is pure; `vendor_links` picks the source (link_sources.py). Relations
between cards and NICs are never changed: NVLink and XPU Link join cards only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from xputune import trail
from xputune.devices.busid import normalize_bus_id
from xputune.topology.cards import PREFIX
from xputune.topology.model import Card, Topology
from xputune.topology.serialize import PCIE_ONLY

PCIE_CODES = frozenset({"PIX", "PXB", "PHB", "NODE", "SYS"})
ALIASES = {"SOC": "SYS"}  # older nvidia-smi releases wrote SOC for what is now SYS
LINK_CODE = re.compile(r"^(?:NV[0-9]{1,3}|XL[0-9]{0,3})$", re.ASCII)
CARD_NAME = re.compile(r"^(?:xpu|gpu|acc)[0-9]{1,6}$", re.ASCII)
SHOWN_PAIRS = 6  # pairs named in a disagreement warning before "and N more"

Matrix = Mapping[str, Mapping[str, str | None]]


def is_link(code: str | None) -> bool:
    """True for a vendor link code (NV18, XL, XL8), not a PCIe-level one."""
    return code is not None and LINK_CODE.match(code) is not None


def _join(topo: Topology, keys: list[str], source: str) -> tuple[dict[str, Card], list[str]]:
    """Vendor key -> probe card, plus warnings for card keys that match no card."""
    by_bdf = {c.bdf: c for c in topo.cards}
    by_name = {c.name: c for c in topo.cards}
    joined: dict[str, Card] = {}
    unmatched: list[str] = []
    by_order: set[str] = set()
    for key in keys:
        bdf = normalize_bus_id(key)
        if bdf is not None:
            card = by_bdf.get(bdf)
        elif CARD_NAME.match(key):
            card = by_name.get(key)
            if card is not None:
                by_order.add(card.vendor)
        else:
            continue  # a NIC (mlx5_0, NIC3): not a card
        if card is None:
            unmatched.append(key)
        else:
            joined[key] = card
    warnings: list[str] = []
    if unmatched:
        warnings.append(
            f"relation matrix: {source} names card(s) probe did not find: "
            f"{', '.join(unmatched)}; their links are left out"
        )
    for vendor in sorted(by_order):
        prefix = PREFIX.get(vendor, PREFIX["other"])
        theirs = sum(1 for key in keys if CARD_NAME.match(key) and key[: len(prefix)] == prefix)
        ours = sum(1 for c in topo.cards if c.vendor == vendor)
        if theirs != ours:
            warnings.append(
                f"relation matrix: {source} lists {theirs} card(s) and probe found {ours}; "
                "they were matched by card order (no bus ids), which may pair them wrongly"
            )
    return joined, warnings


def with_vendor_links(topo: Topology, matrix: Matrix, source: str = "vendor matrix") -> Topology:
    """`topo` with NV#/XL relations from `matrix` between the cards it joins, and warnings.

    `matrix[a][b]` is the vendor's code for devices a and b (keys: bus ids or card names, as
    `xpusmi.links.relation_matrix` or `nvml.read` give them); None or a missing entry means
    the vendor does not say. `source` names the matrix in warnings ("nvidia-smi topo -m").
    """
    return merge_links(topo, matrix, source)[0]


def merge_links(topo: Topology, matrix: Matrix, source: str) -> tuple[Topology, bool]:
    """As with_vendor_links, plus whether the matrix named any of topo's cards at all."""
    if not topo.cards:
        return topo, False
    keys = list(dict.fromkeys([*matrix, *(col for row in matrix.values() for col in row)]))
    joined, warnings = _join(topo, keys, source)
    relations = {row: dict(cols) for row, cols in topo.relations.items()}
    position = {c.name: i for i, c in enumerate(topo.cards)}
    disagree: dict[tuple[str, str], tuple[str, str]] = {}
    for key_a, card_a in joined.items():
        row = matrix.get(key_a, {})
        for key_b, card_b in joined.items():
            if card_a.name == card_b.name:
                continue
            code = row.get(key_b)
            code = ALIASES.get(code, code) if code is not None else None
            if code is None:
                continue
            ours = relations[card_a.name][card_b.name]
            if is_link(code):
                relations[card_a.name][card_b.name] = code
                back = matrix.get(key_b, {}).get(key_a)
                if back is None:  # a one-sided report (a row cut off): a link joins both ways
                    relations[card_b.name][card_a.name] = code
            elif (code in PCIE_CODES or code == "X") and code != ours and not is_link(ours):
                a, b = sorted((card_a.name, card_b.name), key=position.__getitem__)
                disagree.setdefault((a, b), (code, ours))
    if disagree:
        shown = [
            f"{a}-{b} ({theirs} there, {ours} in sysfs)"
            for (a, b), (theirs, ours) in sorted(
                disagree.items(), key=lambda item: (position[item[0][0]], position[item[0][1]])
            )
        ]
        cut = len(shown) if trail.active() else SHOWN_PAIRS  # --verbose: every pair
        more = len(shown) - cut
        listed = ", ".join(shown[:cut]) + (f" and {more} more" if more > 0 else "")
        warnings.append(
            f"relation matrix: {source} and {PCIE_ONLY} disagree on {len(disagree)} card "
            f"pair(s), PCIe kept: {listed}"
        )
    if relations == topo.relations and not warnings:
        return topo, bool(joined)
    return topo._replace(relations=relations, warnings=(*topo.warnings, *warnings)), bool(joined)


def has_links(topo: Topology) -> bool:
    """Whether any card pair of `topo` carries a vendor link code."""
    return any(is_link(code) for row in topo.relations.values() for code in row.values())
