"""The probe's JSON/YAML document: a stable contract for scripts (add fields, never rename)."""

from __future__ import annotations

from collections.abc import Mapping

from xputune.host.values import format_cpulist
from xputune.topology.model import RELATION_HELP, Link, Ordering, Topology

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: start-up time
if TYPE_CHECKING:
    from typing import Any

SCHEMA_VERSION = 1
PCIE_ONLY = "PCIe (sysfs)"  # what the relation matrix is made of without a vendor source


def _link(link: Link) -> dict[str, Any]:
    return {
        "current_speed_gts": link.current_speed,
        "current_width": link.current_width,
        "max_speed_gts": link.max_speed,
        "max_width": link.max_width,
        "degraded": link.degraded,
    }


def _ordering(ordering: Ordering) -> dict[str, Any]:
    return {
        "request": ordering.ido_request,
        "completion": ordering.ido_completion,
        "relaxed_ordering": ordering.relaxed_ordering,
        "unknown_reason": ordering.reason,
    }


def to_dict(
    topo: Topology,
    vendor: Mapping[str, Mapping[str, Any]] | None = None,
    relation_source: str = PCIE_ONLY,
) -> dict[str, Any]:
    """The document; `vendor` maps a card's bus id to its vendor-library details.

    Vendor details are plain data made by the layer above (devices/), which topology/ must not
    import; a card without them gets "vendor_info": null (added in schema_version 1, additive;
    "vendor" was already the card's vendor family). `relation_source` says what "relations"
    is made of ("PCIe (sysfs)", or with the vendor's links: "PCIe (sysfs) + NVLink (NVML)",
    "PCIe (sysfs) + nvidia-smi topo -m", ...; added in schema_version 1, additive); relation
    codes then include NV# and XL, which "relation_legend" explains.
    """
    vendor = vendor or {}
    s = topo.settings
    return {
        "schema_version": SCHEMA_VERSION,
        "cpu": {
            "vendor": topo.cpu.vendor,
            "model_name": topo.cpu.model_name,
            "logical_cpus": topo.cpu.logical_cpus,
            "packages": [
                {"id": p.id, "cpus": format_cpulist(p.cpus), "numa_nodes": list(p.numa_nodes)}
                for p in topo.cpu.packages
            ],
        },
        "numa_nodes": [
            {
                "id": n.id,
                "cpus": format_cpulist(n.cpus),
                "memory_total_bytes": n.memory_total_bytes,
                "memory_free_bytes": n.memory_free_bytes,
                "memory_reclaimable_bytes": n.memory_reclaimable_bytes,
                "distances": list(n.distances),
                "hugepages": [
                    {"size_kb": h.size_kb, "total": h.total, "free": h.free} for h in n.hugepages
                ],
            }
            for n in topo.numa_nodes
        ],
        "cards": [
            {
                "name": c.name,
                "bdf": c.bdf,
                "vendor": c.vendor,
                "model": c.model,
                "vendor_id": topo.pci[c.bdf].vendor_hex,
                "device_id": topo.pci[c.bdf].device_hex,
                "numa_node": c.numa_node,
                "local_cpus": format_cpulist(c.local_cpus),
                "uplink": c.uplink,
                "nearest_nic": c.nearest_nic,
                "device_node": c.device_node,
                "vendor_info": dict(vendor[c.bdf]) if c.bdf in vendor else None,
                "link": _link(topo.pci[c.bdf].link),
                "ido": {
                    "request": topo.pci[c.bdf].ordering.ido_request,
                    "completion": topo.pci[c.bdf].ordering.ido_completion,
                },
                "path": [
                    {
                        "bdf": fn.bdf,
                        "kind": fn.kind,
                        "device": fn.device_name,
                        "ordering": _ordering(fn.ordering),
                    }
                    for fn in topo.ports_on_path(c)
                ],
            }
            for c in topo.cards
        ],
        "nics": [
            {
                "name": n.name,
                "bdf": n.bdf,
                "rdma": n.rdma,
                "numa_node": n.numa_node,
                "speed_mbps": n.speed_mbps,
                "link_layer": n.link_layer,
                "operstate": n.operstate,
                "device": topo.pci[n.bdf].device_name,
            }
            for n in topo.nics
        ],
        "uplinks": [
            {
                "bdf": u.bdf,
                "cards": list(u.cards),
                "nics": list(u.nics),
                "root_port": u.root_port,
                "link": _link(u.link),
            }
            for u in topo.uplinks
        ],
        "relations": topo.relations,
        "relation_legend": RELATION_HELP,
        "relation_source": relation_source,
        "settings": {
            "thp_enabled": s.thp_enabled,
            "thp_defrag": s.thp_defrag,
            "thp_shmem_enabled": s.thp_shmem_enabled,
            "shm_huge": s.shm.huge if s.shm else None,
            "shm_fstype": s.shm.fstype if s.shm else None,
            "shm_size_bytes": s.shm.size_bytes if s.shm else None,
            "numa_balancing": s.numa_balancing,
            "iommu": s.iommu,
            "iommu_groups": s.iommu_groups,
            "lockdown": s.lockdown,
            "hugepages": [
                {"size_kb": h.size_kb, "total": h.total, "free": h.free} for h in s.hugepages
            ],
        },
        "pci_functions": len(topo.pci),
        "pci": [
            {
                "bdf": fn.bdf,
                "parent": fn.parent,
                "host_bridge": fn.host_bridge,
                "vendor_id": fn.vendor_hex,
                "device_id": fn.device_hex,
                "class": None if fn.class_code is None else f"{fn.class_code:#08x}",
                "kind": fn.kind,
                "device": fn.device_name,
                "numa_node": fn.numa_node,
                "driver": fn.driver,
                "link": _link(fn.link),
            }
            for fn in topo.pci.values()
        ],
        "warnings": list(topo.warnings),
    }
