"""The frozen topology model: what a host is, built once by discovery and only read after.

Commands render this model; they never re-read files. Names follow the project's vocabulary:
a `card` is an accelerator, an `uplink` is the switch upstream port that cards share, a NUMA
`node` is a memory node.
"""

from __future__ import annotations

from xputune.tuples import NamedTuple

# Relation legend, nearest first (same letters as `nvidia-smi topo -m`). RELATIONS are the
# PCIe relations discovery derives from sysfs; NV# and XL are links between cards that only the
# vendor knows (devices/links.py merges them in), so they are in the legend but not ranked here.
RELATIONS = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")
RELATION_HELP = {
    "X": "self",
    "PIX": "at most one PCIe bridge between them",
    "PXB": "several PCIe bridges, no host bridge",
    "PHB": "through a PCIe host bridge (same root complex)",
    "NODE": "different host bridges within one NUMA node",
    "SYS": "across the NUMA interconnect (between sockets or dies)",
    "NV#": "a bonded set of # NVLinks (NVIDIA; from NVML or nvidia-smi, not PCIe)",
    "XL": "XPU Link between Kunlunxin cards (from xpu-smi, not PCIe)",
}


class HugePages(NamedTuple):
    """One huge page pool (whole host or one node)."""

    size_kb: int
    total: int
    free: int


class NumaNode(NamedTuple):
    id: int
    cpus: tuple[int, ...]
    memory_total_bytes: int | None  # None: meminfo unreadable (see warnings)
    memory_free_bytes: int | None
    distances: tuple[int, ...]  # in the order of Topology.numa_nodes; () when unknown
    hugepages: tuple[HugePages, ...] = ()
    #: What the kernel can hand back without swapping: the file LRU (Active(file) +
    #: Inactive(file)) and reclaimable kernel memory (KReclaimable; SReclaimable before 4.20).
    #: None: meminfo did not say (see warnings). plan/budget.py adds it to memory_free_bytes.
    memory_reclaimable_bytes: int | None = None

    @property
    def has_cpus(self) -> bool:
        return bool(self.cpus)


class CpuPackage(NamedTuple):
    id: int
    cpus: tuple[int, ...]
    numa_nodes: tuple[int, ...]


class Link(NamedTuple):
    """A PCIe link as sysfs reports it; speeds in GT/s."""

    current_speed: float | None
    current_width: int | None
    max_speed: float | None
    max_width: int | None

    @property
    def degraded(self) -> bool:
        """Running below capability: slower or narrower than the port can do."""
        if None not in (self.current_speed, self.max_speed) and (
            self.current_speed < self.max_speed  # type: ignore[operator]
        ):
            return True
        return None not in (self.current_width, self.max_width) and (
            self.current_width < self.max_width  # type: ignore[operator]
        )

    def describe(self, which: str = "current") -> str:
        speed = self.current_speed if which == "current" else self.max_speed
        width = self.current_width if which == "current" else self.max_width
        if speed is None and width is None:
            return "-"
        gen = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}.get(speed or 0.0)
        label = f"Gen{gen}" if gen else (f"{speed:g} GT/s" if speed else "?")
        return f"{label} x{width}" if width else label


class Ordering(NamedTuple):
    """Ordering bits of one PCIe function; None means unknown (config space not readable)."""

    ido_request: bool | None = None
    ido_completion: bool | None = None
    relaxed_ordering: bool | None = None
    reason: str | None = None  # why unknown, e.g. "needs root"


class PciFunction(NamedTuple):
    bdf: str
    sysfs_path: str  # host path of the device directory, e.g. /sys/devices/pci0000:00/...
    parent: str | None  # parent bridge's bdf; None when directly under a host bridge
    host_bridge: str  # "pci0000:00"
    vendor_id: int | None  # None: unreadable in sysfs and in config space (see warnings)
    device_id: int | None
    class_code: int | None  # 24-bit: base class, subclass, prog-if
    subsystem_vendor_id: int | None
    subsystem_device_id: int | None
    vendor_name: str
    device_name: str
    kind: str  # root port, switch upstream, switch downstream, bridge, endpoint
    port_type: str | None  # from the PCIe capability when config space was readable
    numa_node: int | None
    local_cpus: tuple[int, ...]
    link: Link
    driver: str | None
    iommu_group: int | None
    ordering: Ordering
    is_virtual_function: bool = False

    @property
    def is_bridge(self) -> bool:
        return self.class_code is not None and self.class_code >> 8 == 0x0604

    @property
    def vendor_hex(self) -> str | None:
        return None if self.vendor_id is None else f"{self.vendor_id:#06x}"

    @property
    def device_hex(self) -> str | None:
        return None if self.device_id is None else f"{self.device_id:#06x}"


class Card(NamedTuple):
    """An accelerator: a Kunlunxin XPU, an NVIDIA GPU or another processing accelerator."""

    name: str  # xpu0.., gpu0.., acc0..
    index: int  # index within its vendor family, PCI bus order
    bdf: str
    vendor: str  # kunlunxin, nvidia, other
    model: str
    numa_node: int | None
    local_cpus: tuple[int, ...]
    path: tuple[str, ...]  # bdfs from the root port down to the card itself
    uplink: str | None  # switch upstream port shared with other cards
    nearest_nic: str | None
    device_node: str | None = None  # e.g. xpu0 from /sys/class/xpu


class Nic(NamedTuple):
    name: str  # netdev name
    bdf: str
    rdma: str | None  # InfiniBand device name (mlx5_0)
    numa_node: int | None
    speed_mbps: int | None
    link_layer: str | None  # Ethernet or InfiniBand
    operstate: str | None
    path: tuple[str, ...]


class Uplink(NamedTuple):
    """A switch upstream port and the cards and NICs below it."""

    bdf: str
    cards: tuple[str, ...]
    nics: tuple[str, ...]
    link: Link
    root_port: str | None


class ShmMount(NamedTuple):
    mount_point: str
    fstype: str
    options: tuple[str, ...]
    huge: str  # never, always, within_size, advise (never when the option is absent)
    size_bytes: int | None


class Settings(NamedTuple):
    """Host settings the transfer path depends on, as read; None means not present."""

    thp_enabled: str | None
    thp_defrag: str | None
    thp_shmem_enabled: str | None
    shm: ShmMount | None
    numa_balancing: int | None
    iommu: str  # e.g. "passthrough (iommu=pt)", "translated", "off"
    iommu_groups: int
    kernel_cmdline: str
    lockdown: str | None
    hugepages: tuple[HugePages, ...]


class Cpu(NamedTuple):
    vendor: str  # GenuineIntel, AuthenticAMD, HygonGenuine, ...
    model_name: str
    logical_cpus: int
    packages: tuple[CpuPackage, ...]


class Topology(NamedTuple):
    cpu: Cpu
    numa_nodes: tuple[NumaNode, ...]
    pci: dict[str, PciFunction]
    cards: tuple[Card, ...]
    nics: tuple[Nic, ...]
    uplinks: tuple[Uplink, ...]
    settings: Settings
    relations: dict[str, dict[str, str]]
    warnings: tuple[str, ...]
    source: str

    def node(self, node_id: int) -> NumaNode:
        for node in self.numa_nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def card(self, name: str) -> Card:
        for card in self.cards:
            if card.name == name:
                return card
        raise KeyError(name)

    def ports_on_path(self, card: Card) -> tuple[PciFunction, ...]:
        """The card and every bridge port between it and its root port, card last."""
        return tuple(self.pci[bdf] for bdf in card.path)
