"""Rich tables for `xputune smi`: only the columns the parsed form carries, then what was odd.

MIG devices get a table of their own under the cards (each row names its GPU's card): they are
slices of a GPU, not cards, so the cards table only counts them.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from xputune.cli.output import ID, TEXT, add_row, new_table, print_fitted, text, text_lines
from xputune.devices.xpusmi import SmiCard, SmiMig, SmiReport, SmiTopo


def _num(value: float | None, unit: str = "") -> str | None:
    if value is None:
        return None
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{shown}{unit}"


def _memory(card: SmiCard | SmiMig) -> str | None:
    used, total = card.memory_used_mib, card.memory_total_mib
    if used is None and total is None:
        return None
    return f"{'?' if used is None else used} / {'?' if total is None else total}"


IDS = {"card", "#", "bus id", "name", "minor", "firmware", "CPU affinity", "serial", "uuid"}

COLUMNS: tuple[tuple[str, Callable[[SmiCard], str | None]], ...] = (
    ("card", lambda c: c.card),
    ("#", lambda c: _num(c.index)),
    ("bus id", lambda c: c.bus_id),
    ("name", lambda c: c.name),
    ("minor", lambda c: _num(c.minor)),
    ("memory MiB used / total", _memory),
    ("util", lambda c: _num(c.utilization_pct, "%")),
    ("temp", lambda c: _num(c.temperature_c, " C")),
    ("power", lambda c: _num(c.power_w, " W")),
    ("firmware", lambda c: c.firmware),
    ("serial", lambda c: c.serial),
    ("uuid", lambda c: c.uuid),
    ("CPU affinity", lambda c: c.cpu_affinity),
    ("NUMA", lambda c: _num(c.numa_affinity)),
    ("MIG devices", lambda c: _num(len(c.mig_devices)) if c.mig_devices else None),
)


def cards_table(report: SmiReport) -> Table:
    cells = [[get(card) for _, get in COLUMNS] for card in report.cards]
    keep = [i for i in range(len(COLUMNS)) if any(row[i] is not None for row in cells)]
    title = f"Cards ({report.tool})"
    if report.driver_version:
        title += f", driver {report.driver_version}"
    table = new_table(
        text(title), [(COLUMNS[i][0], ID if COLUMNS[i][0] in IDS else TEXT) for i in keep]
    )
    for row in cells:
        add_row(table, *("-" if row[i] is None else row[i] for i in keep))
    return table


def matrix(topo: SmiTopo, tool: str) -> Table:
    table = new_table(text(f"Relations ({tool})"), [("", ID)])
    for name in topo.devices:
        table.add_column(text(name), justify="center", **ID)
    for row in topo.devices:
        if row in topo.relations:
            add_row(table, row, *(topo.relations[row].get(col) or "?" for col in topo.devices))
    return table


MIG_COLUMNS = (("card", ID), ("#", ID), ("GI", ID), ("CI", ID), ("MIG dev", ID))


def _mig_row(card: SmiCard, mig: SmiMig) -> tuple[str | None, ...]:
    ids = (card.card, _num(card.index), _num(mig.gpu_instance), _num(mig.compute_instance))
    return (*ids, _num(mig.index), _memory(mig), _num(mig.sm_count))


def mig_devices(report: SmiReport) -> Table:
    """One row per MIG device, under the card of its GPU: ids, its memory slice, its SMs."""
    table = new_table("MIG devices", [*MIG_COLUMNS, "memory MiB used / total", "SMs"])
    for card in report.cards:
        for mig in card.mig_devices:
            add_row(table, *("-" if v is None else v for v in _mig_row(card, mig)))
    return table


def processes(report: SmiReport) -> Table:
    """The process list; GI and CI columns only when some process runs in a MIG slice."""
    mig = any(p.gpu_instance is not None for p in report.processes)
    ids = [("GI", ID), ("CI", ID)] if mig else []
    table = new_table("Processes", [("#", ID), *ids, ("PID", ID), "type", "name", "memory MiB"])
    for p in report.processes:
        where = (p.gpu_instance, p.compute_instance) if mig else ()
        cells = (p.index, *where, p.pid, p.type, p.name, p.memory_mib)
        add_row(table, *("-" if v is None else str(v) for v in cells))
    return table


def render(report: SmiReport, console: Console) -> None:
    parts: list = [cards_table(report)]
    if report.topology is not None:
        parts.append(matrix(report.topology, report.tool))
        legend = {**report.topology.legend, **report.topology.nics}
        if legend:
            parts.append(text_lines((f"  {k:<4} = {v}" for k, v in legend.items()), style="dim"))
    if any(card.mig_devices for card in report.cards):
        parts.append(mig_devices(report))
    if report.processes:
        parts.append(processes(report))
    if report.warnings:
        parts.append(text_lines((f"warning: {w}" for w in report.warnings), style="yellow"))
    print_fitted(console, *parts)
