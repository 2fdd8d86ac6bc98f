"""What xpu-smi says about the cards, whichever output form it came from.

Every field is optional because each form carries a different subset (-L: index, name, UUID;
-m: bus id, minor, memory, utilisation, firmware, name; -q and -q -x: most; topo -m: CPU and
NUMA affinity). Units are the tool's own: MiB, percent, degrees C, watts.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from xputune.errors import XputuneError

SCHEMA_VERSION = 1

# Output forms, named after the xpu-smi flags that produce them.
FORMS = {
    "list": "xpu-smi -L",
    "query": "xpu-smi -q",
    "xml": "xpu-smi -q -x",
    "monitor": "xpu-smi -m",
    "topo": "xpu-smi topo -m",
}


class SmiError(XputuneError):
    """xpu-smi could not be run, or its output could not be read."""


class SmiParseError(SmiError):
    """The text is not (or no longer, when truncated) an output of a known xpu-smi form."""

    def __init__(self, form: str | None, message: str, line: int | None = None) -> None:
        where = FORMS.get(form or "", "xpu-smi output")
        at = f" (line {line})" if line is not None else ""
        super().__init__(f"{where}: {message}{at}")
        self.form = form
        self.line = line


class SmiCard(NamedTuple):
    index: int | None = None  # position in the tool's listing (XPU N)
    bus_id: str | None = None  # canonical sysfs spelling
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    minor: int | None = None  # N of /dev/xpuN
    firmware: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
    utilization_pct: int | None = None
    memory_utilization_pct: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    cpu_affinity: str | None = None
    numa_affinity: int | None = None


class SmiTopo(NamedTuple):
    """The `topo -m` matrix: device names in column order and the relation of each pair."""

    devices: tuple[str, ...]
    relations: dict[str, dict[str, str]]
    legend: dict[str, str]  # relation code -> meaning
    nics: dict[str, str]  # NIC0 -> mlx5_0


class SmiReport(NamedTuple):
    form: str
    cards: tuple[SmiCard, ...]
    driver_version: str | None = None
    topology: SmiTopo | None = None

    def as_json(self) -> dict[str, Any]:
        """The `xputune smi --format json` document."""
        topo = self.topology
        return {
            "schema_version": SCHEMA_VERSION,
            "form": self.form,
            "driver_version": self.driver_version,
            "cards": [card._asdict() for card in self.cards],
            "topology": None
            if topo is None
            else {
                "devices": list(topo.devices),
                "relations": topo.relations,
                "legend": topo.legend,
                "nics": topo.nics,
            },
        }
