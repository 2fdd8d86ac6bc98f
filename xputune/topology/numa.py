"""NUMA nodes and CPU packages from /sys/devices/system and /proc/cpuinfo.

Real machines differ more than the x86 servers this tool targets suggest: node IDs can be
sparse, a node can hold memory and no CPUs, old kernels give only a `cpumap` mask, distance rows
can list possible rather than online nodes, a kernel without NUMA has no node directory at all,
and /proc/cpuinfo looks different on every architecture. Each is read as what it means.
"""

from __future__ import annotations

import re

from xputune.host.reader import Reader
from xputune.host.values import (
    format_cpulist,
    meminfo_bytes,
    parse_cpulist,
    parse_cpumask,
    parse_distances,
    parse_int,
)
from xputune.host.view import text_span
from xputune.topology.model import Cpu, CpuPackage, HugePages, NumaNode

NODE_DIR = "/sys/devices/system/node"
CPU_DIR = "/sys/devices/system/cpu"
CPUINFO = "/proc/cpuinfo"
#: Patterns of fallbacks (no node/online, no cpu/online) stay text, compiled by re on first
#: use: compiling a pattern costs a probe's start-up ~0.1 ms.
_NODE = r"^node(\d+)$"
_HUGEPAGES = re.compile(r"^hugepages-(\d+)kB$")
# Only the keys we use: one regex pass beats splitting every line of a 256-CPU cpuinfo.
# "processor" is "processor\t: 0" on x86/arm/ppc and "processor 0: version = ..." on s390x.
# A line start is matched as the newline before it (the text gets one in front): a pattern
# that starts with a literal lets the engine jump from newline to newline, where a MULTILINE
# "^" is tried at every character (3.5 -> 1 ms on the seed box's 370 KB cpuinfo).
_CPUINFO_KEYS = re.compile(
    r"\n(processor|vendor_id|vendor|model name|Processor|cpu|CPU implementer|physical id)"
    r"[ \t]*(\d*)[ \t]*:([^\n]*)"
)


def cpuinfo_fields(text: str, start: int = 0, end: int | None = None) -> list[tuple[str, str, str]]:
    """(key, number, rest of the line) for each line of text[start:end] that starts with a key
    used, without copying the text: the first line is matched with a newline put before it,
    the others from the newline that ends the line above."""
    end = len(text) if end is None else end
    newline = text.find("\n", start, end)
    found = _CPUINFO_KEYS.findall("\n" + text[start : end if newline < 0 else newline])
    if newline >= 0:
        found += _CPUINFO_KEYS.findall(text, newline, end)
    return found


def _cpuinfo(reader: Reader) -> list[tuple[str, str, str]]:
    """cpuinfo_fields of /proc/cpuinfo as reader.text would give it, decoded once: strip()
    and a newline put in front each copied the whole file (3 x 370 KB on the seed box)."""
    data = reader.data(CPUINFO, required=True)
    if data is None:
        return []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return cpuinfo_fields(reader.text(CPUINFO) or "")  # and its warning, as ever
    return cpuinfo_fields(text, *text_span(text))


#: arm64 "CPU implementer" codes (arch/arm64/include/asm/cputype.h).
_ARM_IMPLEMENTERS = {
    0x41: "ARM",
    0x42: "Broadcom",
    0x43: "Cavium",
    0x46: "Fujitsu",
    0x48: "HiSilicon",
    0x4E: "NVIDIA",
    0x50: "APM",
    0x51: "Qualcomm",
    0x61: "Apple",
    0xC0: "Ampere",
}


def node_ids(reader: Reader) -> list[int]:
    """Online node IDs, sorted; sparse IDs are normal. [] on a kernel built without NUMA."""
    online = reader.value(f"{NODE_DIR}/online", parse_cpulist)
    if online is not None:
        return list(online)
    return sorted(
        int(m.group(1)) for e in reader.view.listdir(NODE_DIR) if (m := re.match(_NODE, e))
    )


def _distance_columns(reader: Reader, online: list[int], width: int) -> list[int] | None:
    """Which node each column of a distance row is about.

    The kernel prints one column per online node, but recordings and some kernels show one per
    possible node (offline nodes included), or one per node directory.
    """
    if width == len(online):
        return online
    possible = reader.value(f"{NODE_DIR}/possible", parse_cpulist)
    if possible is not None and width == len(possible):
        return list(possible)
    present = sorted(
        int(m.group(1)) for e in reader.view.listdir(NODE_DIR) if (m := re.match(_NODE, e))
    )
    return present if width == len(present) else None


def hugepage_pools(reader: Reader, folder: str) -> tuple[HugePages, ...]:
    pools = []
    for entry in reader.view.listdir(folder):
        match = _HUGEPAGES.match(entry)
        if not match:
            continue
        base = f"{folder}/{entry}"
        total = reader.value(f"{base}/nr_hugepages", _count)
        free = reader.value(f"{base}/free_hugepages", _count)
        if total is not None:
            pools.append(HugePages(int(match.group(1)), total, free if free is not None else 0))
    return tuple(sorted(pools, key=lambda p: p.size_kb))


def _count(text: str, path: str) -> int:
    return parse_int(text, path, minimum=0)


def _node_cpus(reader: Reader, base: str, online: tuple[int, ...] | None) -> tuple[int, ...]:
    """A node's online CPUs from cpulist, else from the cpumap mask of old kernels.

    The kernel drops a CPU from its node's mask when it goes offline; recordings of old
    kernels do not always, so offline CPUs are left out here too (never bind to them).
    """
    if reader.view.exists(f"{base}/cpulist"):
        cpus = reader.value(f"{base}/cpulist", parse_cpulist)
    else:
        cpus = reader.value(f"{base}/cpumap", parse_cpumask, required=True)
    if not cpus or online is None:
        return cpus or ()
    up = set(online)
    return tuple(c for c in cpus if c in up)


def _single_node(reader: Reader, cpus: tuple[int, ...]) -> NumaNode:
    """A kernel without NUMA is one node 0 holding every CPU and all memory."""
    total, free, reclaimable = _memory(reader, "/proc/meminfo")
    pools = hugepage_pools(reader, "/sys/kernel/mm/hugepages")
    return NumaNode(0, cpus, total, free, (10,), pools, reclaimable)


def _memory(reader: Reader, path: str) -> tuple[int | None, int | None, int | None]:
    """(MemTotal, MemFree, reclaimable) in bytes from a meminfo file; None for what cannot be
    read."""
    text = reader.text(path, required=True)
    if text is None:
        return None, None, None
    return (
        reader.parse(path, text, lambda t, p: meminfo_bytes(t, "MemTotal", p)),
        reader.parse(path, text, lambda t, p: meminfo_bytes(t, "MemFree", p)),
        reader.parse(path, text, reclaimable_bytes),
    )


def reclaimable_bytes(text: str, path: str) -> int:
    """The file LRU and reclaimable kernel memory of a meminfo (a node's or the host's).

    A node's meminfo has no MemAvailable line, so the kernel's estimate is rebuilt from the
    lines it is made of (si_mem_available: MemFree + file LRU + KReclaimable, less watermark
    terms only /proc/zoneinfo shows; plan/budget.py's reserve stands in for those).
    Shmem is not in the file LRU (it sits on the anon lists), so /dev/shm buffers are not
    counted as reclaimable. KReclaimable came in 4.20; older kernels show SReclaimable only.
    """
    kernel = "KReclaimable" if "KReclaimable:" in text else "SReclaimable"
    return sum(meminfo_bytes(text, key, path) for key in ("Active(file)", "Inactive(file)", kernel))


def discover_numa(reader: Reader, online: tuple[int, ...] | None) -> tuple[NumaNode, ...]:
    """The nodes; `online` (from online_cpus) keeps offline CPUs out of them."""
    ids = node_ids(reader)
    if not ids:
        return (_single_node(reader, online or ()),)
    nodes = []
    for node_id in ids:
        base = f"{NODE_DIR}/node{node_id}"
        if not reader.view.is_dir(base):
            reader.warn(f"{base}: node {node_id} is online but its directory is missing; skipped")
            continue
        total, free, reclaimable = _memory(reader, f"{base}/meminfo")
        nodes.append(
            NumaNode(
                id=node_id,
                cpus=_node_cpus(reader, base, online),
                memory_total_bytes=total,
                memory_free_bytes=free,
                distances=_distances(reader, f"{base}/distance", ids),
                hugepages=hugepage_pools(reader, f"{base}/hugepages"),
                memory_reclaimable_bytes=reclaimable,
            )
        )
    return tuple(nodes)


def _distances(reader: Reader, path: str, online: list[int]) -> tuple[int, ...]:
    """The row in the order of the online nodes; () when unknown."""
    row = reader.value(path, parse_distances, required=True)
    if row is None:
        return ()
    columns = _distance_columns(reader, online, len(row))
    if columns is None or not set(online) <= set(columns):
        reader.odd(path, " ".join(map(str, row)), f"expected {len(online)} distances, one per node")
        return ()
    by_node = dict(zip(columns, row, strict=True))
    return tuple(by_node[n] for n in online)


_CPU = r"^cpu(\d+)$"


def online_cpus(reader: Reader) -> tuple[int, ...] | None:
    """Online CPUs: cpu/online, else each cpuN directory whose own `online` is not 0.

    Old kernels and some recordings lack cpu/online; the per-CPU files then say which CPUs
    are offline (cpu0 often has no `online` file: it cannot be taken offline).
    """
    listed = reader.value(f"{CPU_DIR}/online", parse_cpulist)
    if listed is not None:
        return listed
    found = []
    for entry in reader.view.listdir(CPU_DIR):
        match = re.match(_CPU, entry)
        if match is None:
            continue
        state = reader.value(f"{CPU_DIR}/{entry}/online", parse_int)
        if state != 0:
            found.append(int(match.group(1)))
    return tuple(sorted(found)) or None


def discover_cpu(
    reader: Reader, nodes: tuple[NumaNode, ...], online: tuple[int, ...] | None
) -> Cpu:
    """CPU vendor, model and packages from /proc/cpuinfo (one file instead of one per CPU)."""
    fields: dict[str, str] = {}
    package_cpus: dict[int, list[int]] = {}
    processor: int | None = None
    listed = 0
    for key, number, value in _cpuinfo(reader):
        value = value.strip()
        if key == "processor":
            listed += 1
            digits = number or value  # s390x: "processor 0: ..."; elsewhere "processor : 0"
            processor = int(digits) if digits.isdecimal() else None
        elif key == "physical id":
            if processor is not None and value.isdecimal():
                package_cpus.setdefault(int(value), []).append(processor)
        else:
            fields.setdefault(key, value)
    node_cpus = {cpu for node in nodes for cpu in node.cpus}
    cpus = sorted(online or node_cpus or range(listed))
    if not cpus:
        reader.warn("no CPU found in /sys/devices/system/cpu/online, the nodes or /proc/cpuinfo")
    if not package_cpus:  # VMs, arm64, ppc64le and s390x cpuinfo have no "physical id"
        package_cpus = _packages_from_sysfs(reader, cpus)
    packages = []
    for pkg_id, members in sorted(package_cpus.items()):
        cpu_set = set(members)
        in_nodes = tuple(n.id for n in nodes if cpu_set & set(n.cpus))
        packages.append(CpuPackage(pkg_id, tuple(sorted(members)), in_nodes))
    return Cpu(
        vendor=_vendor(fields),
        model_name=fields.get("model name")
        or fields.get("Processor")
        or fields.get("cpu")
        or "unknown",
        logical_cpus=len(cpus),
        packages=tuple(packages),
    )


def _vendor(fields: dict[str, str]) -> str:
    if fields.get("vendor_id") or fields.get("vendor"):
        return fields.get("vendor_id") or fields["vendor"]
    implementer = fields.get("CPU implementer", "")
    try:
        return _ARM_IMPLEMENTERS.get(int(implementer, 16), f"arm implementer {implementer}")
    except ValueError:
        return "unknown"


def _packages_from_sysfs(reader: Reader, cpus: list[int]) -> dict[int, list[int]]:
    """Packages from each CPU's topology/physical_package_id; one package when none shows it.

    The kernel writes -1 where the platform does not say which package a CPU is in (POWER
    and s390 do so on every CPU, SPARC on some): that CPU's package is unknown, never
    package 0. Such CPUs, and CPUs without the file where others have it, are in no package,
    with one warning naming the first path and how many CPUs it holds for.
    """
    packages: dict[int, list[int]] = {}
    unknown: list[int] = []
    first: tuple[str, str | None] | None = None  # the first unknown: its path and its text
    shown_any = False
    for cpu in cpus:
        path = f"{CPU_DIR}/cpu{cpu}/topology/physical_package_id"
        if not reader.view.exists(path):
            unknown.append(cpu)
            continue
        shown_any = True
        text = reader.text(path)
        package = None if text is None else reader.parse(path, text, parse_int)
        if package is None or package < 0:
            unknown.append(cpu)
            first = first or (path, text)
            continue
        packages.setdefault(package, []).append(cpu)
    if not shown_any:
        return {0: cpus} if cpus else {}
    if unknown:
        path, text = first or (
            f"{CPU_DIR}/cpu{unknown[0]}/topology/physical_package_id",
            None,
        )
        reader.odd(
            path,
            text,
            "expected a package number (-1: the platform does not say, as on POWER, s390, SPARC)",
            f"the package of {len(unknown)} CPU(s) ({format_cpulist(unknown)}) is unknown",
        )
    return packages
