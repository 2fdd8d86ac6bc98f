"""Rich tables for `xputune smi`: only the columns the parsed form carries, then what was odd."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from xputune.cli.output import ID, TEXT, add_row, new_table, print_fitted, text, text_lines
from xputune.devices.xpusmi import SmiCard, SmiReport, SmiTopo


def _num(value: float | None, unit: str = "") -> str | None:
    if value is None:
        return None
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{shown}{unit}"


def _memory(card: SmiCard) -> str | None:
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


def processes(report: SmiReport) -> Table:
    table = new_table("Processes", [("#", ID), ("PID", ID), "type", "name", "memory MiB"])
    for p in report.processes:
        cells = (p.index, p.pid, p.type, p.name, p.memory_mib)
        add_row(table, *("-" if v is None else str(v) for v in cells))
    return table


def render(report: SmiReport, console: Console) -> None:
    parts: list = [cards_table(report)]
    if report.topology is not None:
        parts.append(matrix(report.topology, report.tool))
        legend = {**report.topology.legend, **report.topology.nics}
        if legend:
            parts.append(text_lines((f"  {k:<4} = {v}" for k, v in legend.items()), style="dim"))
    if report.processes:
        parts.append(processes(report))
    if report.warnings:
        parts.append(text_lines((f"warning: {w}" for w in report.warnings), style="yellow"))
    print_fitted(console, *parts)
