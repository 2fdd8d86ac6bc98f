"""How two PCI devices reach each other, in `nvidia-smi topo -m` terms (X PIX PXB PHB NODE SYS).

A PCIe switch counts as one bridge however many of its ports a path crosses, as NVML counts it:
two cards below the same switch are PIX, below two levels of switches PXB.
"""

from __future__ import annotations

from xputune.topology.model import RELATIONS, PciFunction


def _bridge_unit(fn: PciFunction) -> str:
    """The switch (named by its upstream port) or root port a bridge function belongs to."""
    if fn.kind == "switch downstream" and fn.parent:
        return fn.parent
    return fn.bdf


def relation(
    pci: dict[str, PciFunction],
    a: tuple[str, ...],
    b: tuple[str, ...],
    a_node: int | None,
    b_node: int | None,
) -> str:
    """Relation between devices with root-port-first paths `a` and `b`."""
    if a[-1] == b[-1]:
        return "X"
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    if common == 0:
        if pci[a[0]].host_bridge == pci[b[0]].host_bridge:
            return "PHB"
        if a_node is not None and a_node == b_node:
            return "NODE"
        return "SYS"
    lca = pci[a[common - 1]]
    units = {_bridge_unit(lca)}
    for bdf in (*a[common:-1], *b[common:-1]):
        units.add(_bridge_unit(pci[bdf]))
    return "PIX" if len(units) == 1 else "PXB"


def rank(rel: str) -> int:
    return RELATIONS.index(rel)
