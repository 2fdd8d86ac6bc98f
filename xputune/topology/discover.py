"""Build the frozen Topology of a host from its view, once."""

from __future__ import annotations

from xputune.errors import HostError
from xputune.host import HostView
from xputune.host.reader import Reader
from xputune.host.values import format_cpulist
from xputune.topology.cards import PREFIX, classify, xpu_class_devices
from xputune.topology.model import Card, Link, Nic, PciFunction, Topology, Uplink
from xputune.topology.nics import discover_nics
from xputune.topology.numa import discover_cpu, discover_numa, online_cpus
from xputune.topology.pci import discover_pci, path_to_root
from xputune.topology.relations import rank, relation
from xputune.topology.settings import discover_settings


def discover(view: HostView, strict: bool = False) -> Topology:
    """The whole host model, built even when parts of the tree are odd.

    What cannot be read becomes unknown with a warning in `Topology.warnings`; only a tree that
    is not a host at all, a root escape or a symlink loop stops discovery. `strict` stops at
    the first odd value instead, for checking recordings.
    """
    if not view.is_dir("/sys/devices"):
        raise HostError(f"{view.label}: not a host tree (expected sys/devices inside)")
    reader = Reader(view, strict)
    online = online_cpus(reader)
    nodes = discover_numa(reader, online)
    cpu = discover_cpu(reader, nodes, online)
    pci = discover_pci(reader)
    nics = discover_nics(reader, pci)
    cards = _cards(reader, pci)
    warnings = reader.warnings

    paths: dict[str, tuple[tuple[str, ...], int | None]] = {
        c.name: (c.path, c.numa_node) for c in cards
    }
    paths.update({n.name: (n.path, n.numa_node) for n in nics})
    relations = {
        a: {b: relation(pci, pa, pb, na, nb) for b, (pb, nb) in paths.items()}
        for a, (pa, na) in paths.items()
    }
    uplink_of = _uplinks(pci, cards)
    cards = tuple(
        c._replace(uplink=uplink_of.get(c.name), nearest_nic=_nearest_nic(c, nics, relations))
        for c in cards
    )
    uplinks = _uplink_groups(pci, cards, nics)

    all_cpus = {cpu_id for node in nodes for cpu_id in node.cpus}
    node_ids = {node.id for node in nodes}
    for fn in pci.values():
        expected = _link_capability(fn, pci)
        if expected is not None:
            warnings.append(
                f"{fn.bdf} ({fn.device_name}): link runs at {fn.link.describe()} "
                f"below what both ends can do ({expected})"
            )
    for card in cards:
        if card.numa_node is None:
            warnings.append(
                f"{card.name} ({card.bdf}): NUMA node unknown (numa_node is -1 or unreadable); "
                "bind it by hand or fix the firmware's proximity tables"
            )
        elif card.numa_node not in node_ids:
            warnings.append(f"{card.name}: numa_node {card.numa_node} is not an online node")
        elif not any(n.cpus for n in nodes if n.id == card.numa_node):
            warnings.append(f"{card.name}: NUMA node {card.numa_node} has no CPUs")
        if len(nodes) > 1 and set(card.local_cpus) == all_cpus:
            warnings.append(
                f"{card.name}: local_cpulist names all CPUs ({format_cpulist(card.local_cpus)}); "
                "trust numa_node instead"
            )
    return Topology(
        cpu=cpu,
        numa_nodes=nodes,
        pci=pci,
        cards=cards,
        nics=nics,
        uplinks=uplinks,
        settings=discover_settings(reader),
        relations=relations,
        warnings=tuple(warnings),
        source=view.label,
    )


def _link_capability(fn: PciFunction, pci: dict[str, PciFunction]) -> str | None:
    """What the link above `fn` should run at when it runs slower, else None.

    A link has two ends: a device (or switch upstream port) and the port above it. It is
    degraded only when it runs below what both ends support; a Gen2 NIC on a Gen5 root port is
    not. Ports facing down are skipped so each link is judged once, from its lower end.
    """
    if fn.kind in ("root port", "switch downstream"):
        return None
    link = fn.link
    parent = pci.get(fn.parent or "")
    speeds = [s for s in (link.max_speed, parent.link.max_speed if parent else None) if s]
    widths = [w for w in (link.max_width, parent.link.max_width if parent else None) if w]
    if not speeds or link.current_speed is None or link.current_width is None:
        return None
    best = Link(min(speeds), min(widths) if widths else None, None, None)
    slow = link.current_speed < min(speeds)
    narrow = bool(widths) and link.current_width < min(widths)
    return best.describe() if slow or narrow else None


def _cards(reader: Reader, pci: dict[str, PciFunction]) -> tuple[Card, ...]:
    xpu_bdfs = xpu_class_devices(reader)
    counters: dict[str, int] = {}
    cards = []
    for bdf, fn in pci.items():  # bus id order
        found = classify(fn, xpu_bdfs)
        if found is None:
            continue
        family, model = found
        index = counters.get(family, 0)
        counters[family] = index + 1
        cards.append(
            Card(
                name=f"{PREFIX[family]}{index}",
                index=index,
                bdf=bdf,
                vendor=family,
                model=model,
                numa_node=fn.numa_node,
                local_cpus=fn.local_cpus,
                path=path_to_root(pci, bdf),
                uplink=None,
                nearest_nic=None,
                device_node=xpu_bdfs.get(bdf),
            )
        )
    return tuple(cards)


def _uplinks(pci: dict[str, PciFunction], cards: tuple[Card, ...]) -> dict[str, str]:
    """card -> the deepest switch upstream port above it that other cards share."""
    below: dict[str, int] = {}
    for card in cards:
        for bdf in card.path[:-1]:
            if pci[bdf].kind == "switch upstream":
                below[bdf] = below.get(bdf, 0) + 1
    result: dict[str, str] = {}
    for card in cards:
        for bdf in reversed(card.path[:-1]):
            if pci[bdf].kind == "switch upstream" and below[bdf] > 1:
                result[card.name] = bdf
                break
    return result


def _nearest_nic(
    card: Card, nics: tuple[Nic, ...], relations: dict[str, dict[str, str]]
) -> str | None:
    if not nics:
        return None
    row = relations[card.name]

    def key(nic: Nic) -> tuple[int, int, int, str]:
        shared = sum(1 for x, y in zip(card.path, nic.path, strict=False) if x == y)
        return (rank(row[nic.name]), -shared, -(nic.speed_mbps or 0), nic.name)

    return min(nics, key=key).name


def _uplink_groups(
    pci: dict[str, PciFunction], cards: tuple[Card, ...], nics: tuple[Nic, ...]
) -> tuple[Uplink, ...]:
    groups: dict[str, list[str]] = {}
    for card in cards:
        if card.uplink:
            groups.setdefault(card.uplink, []).append(card.name)
    uplinks = []
    for bdf, names in sorted(groups.items()):
        root = path_to_root(pci, bdf)[0]
        uplinks.append(
            Uplink(
                bdf=bdf,
                cards=tuple(names),
                nics=tuple(n.name for n in nics if bdf in n.path),
                link=pci[bdf].link,
                root_port=root if root != bdf else None,
            )
        )
    return tuple(uplinks)
