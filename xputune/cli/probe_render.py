"""Rich tables for the probe: the picture lstopo, lspci, topo -m and numactl -H give together."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from xputune.cli.output import ID, TEXT, add_row, fit, new_table, print_fitted, text, text_lines
from xputune.host.open import source_name
from xputune.host.values import format_cpulist
from xputune.topology.model import RELATION_HELP, Ordering, Topology
from xputune.topology.serialize import PCIE_ONLY
from xputune.topology.verdicts import settings_verdicts

if TYPE_CHECKING:
    from xputune.devices.info import VendorInfo

STYLE = {"ok": "green", "warn": "yellow", "bad": "red", "unknown": "dim"}
GIB = 1 << 30


def _bool(value: bool | None) -> str:
    return "?" if value is None else ("on" if value else "off")


def _ido(ordering: Ordering) -> Text:
    if ordering.ido_request is None:
        return text(f"unknown: {ordering.reason}", style="dim")
    shown = f"{_bool(ordering.ido_request)}/{_bool(ordering.ido_completion)}"
    on = ordering.ido_request and ordering.ido_completion
    return Text(shown, style="green" if on else "yellow")


def summary(topo: Topology) -> Text:
    total = sum(n.memory_total_bytes or 0 for n in topo.numa_nodes)
    families = sorted({c.model for c in topo.cards})
    return Text.assemble(
        ("Host ", "bold"),
        text(f"{source_name(topo.source)}: {topo.cpu.vendor} {topo.cpu.model_name}, "),
        f"{len(topo.cpu.packages) or 'unknown'} package(s), {topo.cpu.logical_cpus} CPUs, ",
        f"{len(topo.numa_nodes)} NUMA node(s), {total / GIB:,.0f} GiB; ",
        text(f"{len(topo.cards)} card(s) {', '.join(families)}; {len(topo.nics)} NIC(s); "),
        f"{len(topo.pci)} PCI functions",
    )


def _style(code: str) -> str:
    if code.startswith(("NV", "XL")):
        return "bold magenta"  # a vendor link (NVLink, XPU Link): nearer than any PCIe path
    return COLORS.get(code, "")


COLORS = {"X": "dim", "PIX": "green", "PXB": "green", "PHB": "cyan", "NODE": "yellow", "SYS": "red"}


def _affinity(topo: Topology) -> dict[str, tuple[str, str]]:
    found = {c.name: (c.local_cpus, c.numa_node) for c in topo.cards}
    found.update({n.name: (topo.pci[n.bdf].local_cpus, n.numa_node) for n in topo.nics})
    return {
        name: (format_cpulist(cpus) or "-", "-" if node is None else str(node))
        for name, (cpus, node) in found.items()
    }


def _cell(topo: Topology, row: str, col: str) -> Text:
    code = topo.relations[row][col]
    return text(code, style=_style(code))


def matrix(topo: Topology, source: str = PCIE_ONLY) -> Table:
    """The whole relation matrix of cards and NICs, as `nvidia-smi topo -m` prints it."""
    names = [c.name for c in topo.cards] + [n.name for n in topo.nics]
    table = new_table(f"Relations from {source}", [("", ID)])
    for name in names:
        table.add_column(text(name), justify="center", **ID)
    table.add_column("CPU Affinity", **ID)
    table.add_column("NUMA Affinity", justify="center", **TEXT)
    affinity = _affinity(topo)
    for row in names:
        add_row(table, row, *(_cell(topo, row, col) for col in names), *affinity[row])
    return table


def _near(topo: Topology, labels: list[str]) -> Table:
    nics = [n.name for n in topo.nics]
    near = new_table("NICs and CPUs near each card and NIC", [("", ID)])
    for label in labels:
        near.add_column(text(label), justify="center", **ID)
    near.add_column("CPU Affinity", **ID)
    near.add_column("NUMA Affinity", justify="center", **TEXT)
    affinity = _affinity(topo)
    for row in [c.name for c in topo.cards] + nics:
        add_row(near, row, *(_cell(topo, row, col) for col in nics), *affinity[row])
    return near


def narrow_matrix(topo: Topology, console: Console, source: str = PCIE_ONLY) -> list:
    """The same relations for a narrow terminal: cards against cards, the legend, then each
    card and NIC against the NICs and its affinity (NICs as nic0.. with a key line when
    their names do not fit)."""
    cards = [c.name for c in topo.cards]
    square = new_table(f"Relations from {source}: cards", [("", ID)])
    for name in cards:
        square.add_column(text(name), justify="center", **ID)
    for row in cards:
        add_row(square, row, *(_cell(topo, row, col) for col in cards))
    nics = [n.name for n in topo.nics]
    near = _near(topo, nics)
    if len(fit(console, near)) == 1:
        return [square, legend(), near]
    labels = [f"nic{i}" for i in range(len(nics))]
    key = ", ".join(f"{label} = {name}" for label, name in zip(labels, nics, strict=True))
    return [square, legend(), _near(topo, labels), text(f"  {key}", style="dim")]


def legend() -> Text:
    return Text("\n".join(f"  {k:<4} = {v}" for k, v in RELATION_HELP.items()), style="dim")


def cards_table(topo: Topology) -> Table:
    table = new_table(
        "Cards",
        [
            ("card", ID),
            ("bus id", ID),
            "model",
            "NUMA",
            "link",
            ("uplink", ID),
            ("nearest NIC", ID),
            "IDO req/cpl",
            "IDO on path",
        ],
    )
    for card in topo.cards:
        fn = topo.pci[card.bdf]
        link = text(fn.link.describe(), style="red" if fn.link.degraded else "")
        if fn.link.degraded:
            link.append(text(f" < {fn.link.describe('max')}"))
        path = topo.ports_on_path(card)
        known = [p.ordering for p in path if p.ordering.ido_request is not None]
        if len(known) < len(path):
            on_path = Text("unknown", style="dim")
        else:
            on = sum(1 for o in known if o.ido_request and o.ido_completion)
            on_path = Text(
                f"{on}/{len(path)} ports", style="green" if on == len(path) else "yellow"
            )
        add_row(
            table,
            card.name,
            card.bdf,
            card.model,
            "-" if card.numa_node is None else str(card.numa_node),
            link,
            card.uplink or "-",
            card.nearest_nic or "-",
            _ido(fn.ordering),
            on_path,
        )
    return table


def vendor_table(topo: Topology, vendor: Mapping[str, VendorInfo]) -> Table:
    """What the vendor library (xpuml, NVML) says about each card it knows."""
    table = new_table(
        "Cards as the vendor library reports them",
        [
            ("card", ID),
            ("bus id", ID),
            ("product", ID),
            "memory GiB",
            ("driver", ID),
            ("serial", ID),
            "source",
        ],
    )
    for card in topo.cards:
        info = vendor.get(card.bdf)
        if info is None:
            continue
        memory = info.memory_total_bytes
        add_row(
            table,
            card.name,
            card.bdf,
            info.product_name or "-",
            "-" if memory is None else f"{memory / GIB:,.1f}",
            info.driver_version or "-",
            info.serial or "-",
            info.provider,
        )
    return table


def paths_table(topo: Topology) -> Table:
    table = new_table(
        "PCIe ports on each card's path (root port first)",
        [("card", ID), ("bus id", ID), "kind", "device", "link", "IDO req/cpl", "relaxed ordering"],
    )
    for card in topo.cards:
        for i, fn in enumerate(topo.ports_on_path(card)):
            add_row(
                table,
                card.name if i == 0 else "",
                fn.bdf,
                fn.kind,
                fn.device_name,
                fn.link.describe(),
                _ido(fn.ordering),
                _bool(fn.ordering.relaxed_ordering),
            )
    return table


def uplinks_table(topo: Topology) -> Table:
    table = new_table(
        "Uplinks (switch upstream ports shared by cards)",
        [("uplink", ID), ("root port", ID), "cards", "NICs", "link"],
    )
    for up in topo.uplinks:
        add_row(
            table,
            up.bdf,
            up.root_port or "-",
            " ".join(up.cards),
            " ".join(up.nics) or "-",
            up.link.describe(),
        )
    return table


def _gib(size: int | None) -> str:
    return "?" if size is None else f"{size / GIB:,.1f}"


def numa_table(topo: Topology) -> Table:
    table = new_table(
        "NUMA nodes",
        [("node", ID), ("CPUs", ID), "memory GiB", "free GiB", "cards", "distances"],
    )
    for node in topo.numa_nodes:
        cards = " ".join(c.name for c in topo.cards if c.numa_node == node.id)
        add_row(
            table,
            str(node.id),
            format_cpulist(node.cpus) or "(memory only)",
            _gib(node.memory_total_bytes),
            _gib(node.memory_free_bytes),
            cards or "-",
            " ".join(map(str, node.distances)) or "?",
        )
    return table


def nics_table(topo: Topology) -> Table:
    table = new_table(
        "NICs",
        [("NIC", ID), ("bus id", ID), ("RDMA", ID), "NUMA", "speed", "layer", "state", "device"],
    )
    for nic in topo.nics:
        speed = f"{nic.speed_mbps // 1000} Gb/s" if nic.speed_mbps else "-"
        add_row(
            table,
            nic.name,
            nic.bdf,
            nic.rdma or "-",
            "-" if nic.numa_node is None else str(nic.numa_node),
            speed,
            nic.link_layer or "-",
            nic.operstate or "-",
            topo.pci[nic.bdf].device_name,
        )
    return table


def settings_table(topo: Topology) -> Table:
    table = new_table(
        "Host settings for the KV transfer path", [("setting", ID), "value", "verdict", "why"]
    )
    for v in settings_verdicts(topo):
        add_row(table, v.setting, v.value, text(v.verdict, style=STYLE[v.verdict]), v.why)
    return table


def render(
    topo: Topology,
    console: Console,
    vendor: Mapping[str, VendorInfo] | None = None,
    relation_source: str = PCIE_ONLY,
) -> None:
    parts: list = [summary(topo)]
    if topo.cards or topo.nics:
        whole = matrix(topo, relation_source)
        if len(fit(console, whole)) == 1 or not topo.cards:
            parts += [whole, legend()]
        else:
            parts += narrow_matrix(topo, console, relation_source)
    if topo.cards:
        parts.append(cards_table(topo))
        if vendor:
            parts.append(vendor_table(topo, vendor))
        parts.append(paths_table(topo))
    if topo.uplinks:
        parts.append(uplinks_table(topo))
    parts.append(numa_table(topo))
    if topo.nics:
        parts.append(nics_table(topo))
    parts.append(settings_table(topo))
    if topo.warnings:
        parts.append(text_lines((f"warning: {w}" for w in topo.warnings), style="yellow"))
    print_fitted(console, *parts)
