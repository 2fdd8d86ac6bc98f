"""What a vendor tool (xpu-smi, nvidia-smi, NVML) says about the cards, whichever form it came from.

Every field is optional because each form carries a different subset (-L: index, name, UUID;
-m: bus id, memory, utilisation, firmware, name; the default table: bus id, memory, utilisation,
power, temperature, the process list and MIG instances; -q and -q -x: most; topo -m: relations
and CPU/NUMA affinity; --query-gpu --format=csv: the columns the query named). Units are the
tools' own: MiB, percent, degrees C, watts. A value a tool printed but that cannot be read is
None here and one line in `warnings`; the document is refused only when nothing in it is
recognisable (docs/architecture.md: discovery degrades).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from xputune.errors import XputuneError

SCHEMA_VERSION = 1

# Output forms, named after the flags that produce them (the same for both vendors' tools).
FORMS = {
    "table": "(default table)",
    "list": "-L",
    "query": "-q",
    "xml": "-q -x",
    "monitor": "-m",
    "topo": "topo -m",
    "csv": "--query-gpu --format=csv",
    "nvml": "NVML",
}
TOOLS = {"kunlunxin": "xpu-smi", "nvidia": "nvidia-smi"}
VENDORS = tuple(TOOLS)


class SmiError(XputuneError):
    """The vendor tool could not be run, or its output could not be read."""


class SmiParseError(SmiError):
    """Nothing in the text is recognisable as an output of a known form (or a hostile document)."""

    def __init__(self, form: str | None, message: str, line: int | None = None) -> None:
        where = f"smi {FORMS[form]} output" if form in FORMS else "smi output"
        at = f" (line {line})" if line is not None else ""
        super().__init__(f"{where}: {message}{at}")
        self.form = form
        self.line = line


class SmiMig(NamedTuple):
    """One MIG device of the default table's "MIG devices" box, kept under its GPU.

    A MIG device is a slice of one GPU (a GPU instance, GI, holding compute instances, CI), not
    a card of its own: it has no bus id, and its memory is the slice's share of the GPU's.
    """

    index: int | None  # "MIG Dev": the device's number on its GPU (CUDA's MIG device order)
    gpu_instance: int | None  # GI ID
    compute_instance: int | None  # CI ID
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    sm_count: int | None = None  # streaming multiprocessors of the slice ("SM" column)


class SmiCard(NamedTuple):
    index: int | None = None  # position in the tool's listing (XPU N / GPU N)
    bus_id: str | None = None  # canonical sysfs spelling, the join key with probe
    name: str | None = None  # product name as the tool prints it
    uuid: str | None = None
    serial: str | None = None
    minor: int | None = None  # N of /dev/xpuN, /dev/nvidiaN
    firmware: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
    utilization_pct: float | None = None
    memory_utilization_pct: float | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    cpu_affinity: str | None = None
    numa_affinity: int | None = None
    card: str | None = None  # probe's card name (xpu0.., gpu0..), see identity.name_cards
    mig_devices: tuple[SmiMig, ...] = ()  # the MIG slices of this GPU (default table only)

    def as_json(self) -> dict[str, Any]:
        """The card's JSON object: its fields, MIG devices as objects (not bare lists)."""
        return {**self._asdict(), "mig_devices": [m._asdict() for m in self.mig_devices]}


class SmiProcess(NamedTuple):
    """One row of the default table's process list."""

    index: int | None  # the card's index in the tool's listing
    pid: int | None
    type: str | None
    name: str | None
    memory_mib: int | None  # None also where the tool cannot say (Windows WDDM prints N/A)
    gpu_instance: int | None = None  # GI ID of the MIG slice it runs in (N/A without MIG)
    compute_instance: int | None = None  # CI ID, likewise


class SmiTopo(NamedTuple):
    """The `topo -m` matrix: device names in column order and the relation of each pair.

    Device names are the tool's (XPU0, GPU3, NIC1, mlx5_0); `nics` maps NICn to the RDMA device
    name from the NIC legend (and a directly named RDMA device to itself). A relation the tool
    did not print (a short row) or printed as an unknown code is None.
    """

    devices: tuple[str, ...]
    relations: dict[str, dict[str, str | None]]
    legend: dict[str, str]  # relation code -> meaning
    nics: dict[str, str]  # NIC0 -> mlx5_0


class SmiReport(NamedTuple):
    form: str
    cards: tuple[SmiCard, ...]
    driver_version: str | None = None
    topology: SmiTopo | None = None
    vendor: str = "kunlunxin"
    processes: tuple[SmiProcess, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def tool(self) -> str:
        """The command that prints this form ("xpu-smi -q -x", "nvidia-smi topo -m", "NVML")."""
        if self.form == "nvml":
            return "NVML"
        flags = "" if self.form == "table" else f" {FORMS[self.form]}"
        return f"{TOOLS.get(self.vendor, 'smi')}{flags}"

    def as_json(self) -> dict[str, Any]:
        """The `xputune smi --format json` document (schema_version 1; fields only ever added)."""
        topo = self.topology
        return {
            "schema_version": SCHEMA_VERSION,
            "vendor": self.vendor,
            "form": self.form,
            "tool": self.tool,
            "driver_version": self.driver_version,
            "cards": [card.as_json() for card in self.cards],
            "processes": [p._asdict() for p in self.processes],
            "topology": None
            if topo is None
            else {
                "devices": list(topo.devices),
                "relations": topo.relations,
                "legend": topo.legend,
                "nics": topo.nics,
            },
            "warnings": list(self.warnings),
        }
