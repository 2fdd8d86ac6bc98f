"""NUMA nodes and CPU packages from /sys/devices/system and /proc/cpuinfo."""

from __future__ import annotations

import re

from xputune.errors import HostDataError, HostError
from xputune.host import HostView
from xputune.host.cpulist import parse_cpulist
from xputune.topology.model import Cpu, CpuPackage, HugePages, NumaNode
from xputune.topology.values import parse_int

NODE_DIR = "/sys/devices/system/node"
_NODE = re.compile(r"^node(\d+)$")
_HUGEPAGES = re.compile(r"^hugepages-(\d+)kB$")
# Only the keys we use: one regex pass beats splitting every line of a 256-CPU cpuinfo.
_CPUINFO_KEYS = re.compile(r"^(processor|vendor_id|model name|physical id)\s*:(.*)$", re.M)


def node_ids(view: HostView) -> list[int]:
    """Online node IDs, sorted; sparse IDs are normal (distance columns follow this order)."""
    online = view.read_optional(f"{NODE_DIR}/online")
    if online is not None:
        return list(parse_cpulist(online, f"{NODE_DIR}/online"))
    ids = [int(m.group(1)) for e in view.listdir(NODE_DIR) if (m := _NODE.match(e))]
    return sorted(ids)


def _meminfo_bytes(text: str, path: str, key: str) -> int:
    for line in text.splitlines():
        # "Node 0 MemTotal:       201326592 kB"
        parts = line.split()
        if len(parts) >= 4 and parts[2] == f"{key}:":
            if parts[4:5] not in ([], ["kB"]):
                raise HostDataError(path, line, "expected a size in kB")
            return parse_int(parts[3], path, minimum=0) * 1024
    raise HostDataError(path, key, f"no {key} line")


def hugepage_pools(view: HostView, folder: str) -> tuple[HugePages, ...]:
    pools = []
    for entry in view.listdir(folder):
        match = _HUGEPAGES.match(entry)
        if not match:
            continue
        base = f"{folder}/{entry}"
        total = parse_int(view.read_text(f"{base}/nr_hugepages"), f"{base}/nr_hugepages", 0)
        free = parse_int(view.read_text(f"{base}/free_hugepages"), f"{base}/free_hugepages", 0)
        pools.append(HugePages(int(match.group(1)), total, free))
    return tuple(sorted(pools, key=lambda p: p.size_kb))


def discover_numa(view: HostView) -> tuple[NumaNode, ...]:
    ids = node_ids(view)
    nodes = []
    for node_id in ids:
        base = f"{NODE_DIR}/node{node_id}"
        if not view.is_dir(base):
            raise HostError(f"{view.label}: node {node_id} is online but {base} is missing")
        cpus = parse_cpulist(view.read_text(f"{base}/cpulist"), f"{base}/cpulist")
        meminfo_path = f"{base}/meminfo"
        meminfo = view.read_text(meminfo_path)
        distance_path = f"{base}/distance"
        raw = view.read_text(distance_path).split()
        distances = tuple(parse_int(d, distance_path, minimum=0) for d in raw)
        if len(distances) != len(ids):
            raise HostDataError(
                distance_path, " ".join(raw), f"expected {len(ids)} distances, one per node"
            )
        nodes.append(
            NumaNode(
                id=node_id,
                cpus=cpus,
                memory_total_bytes=_meminfo_bytes(meminfo, meminfo_path, "MemTotal"),
                memory_free_bytes=_meminfo_bytes(meminfo, meminfo_path, "MemFree"),
                distances=distances,
                hugepages=hugepage_pools(view, f"{base}/hugepages"),
            )
        )
    return tuple(nodes)


def discover_cpu(view: HostView, nodes: tuple[NumaNode, ...]) -> Cpu:
    """CPU vendor, model and packages from /proc/cpuinfo (one file instead of one per CPU)."""
    text = view.read_text("/proc/cpuinfo")
    vendor = model = ""
    package_cpus: dict[int, list[int]] = {}
    processor: int | None = None
    count = 0
    for key, value in _CPUINFO_KEYS.findall(text):
        value = value.strip()
        if key == "processor":
            processor = parse_int(value, "/proc/cpuinfo", 0)
            count += 1
        elif key == "vendor_id" and not vendor:
            vendor = value
        elif key == "model name" and not model:
            model = value
        elif key == "physical id" and processor is not None:
            package_cpus.setdefault(parse_int(value, "/proc/cpuinfo", 0), []).append(processor)
    if count == 0:
        raise HostDataError("/proc/cpuinfo", text[:40], "no processor entries")
    if not package_cpus:  # VMs and some arm64 boxes omit "physical id": one package
        package_cpus = {0: [n for node in nodes for n in node.cpus] or list(range(count))}
    packages = []
    for pkg_id, cpus in sorted(package_cpus.items()):
        cpu_set = set(cpus)
        members = tuple(n.id for n in nodes if cpu_set & set(n.cpus))
        packages.append(CpuPackage(pkg_id, tuple(sorted(cpus)), members))
    return Cpu(
        vendor=vendor or "unknown",
        model_name=model or "unknown",
        logical_cpus=count,
        packages=tuple(packages),
    )
