"""`xputune bench host`: what 4 KB pages cost a pinned host KV buffer, against MADV_HUGEPAGE.

The field report (docs/field-report.md, 2.4) states that a 100 GB buffer of 4 KB pages needs ~26M
page-table entries, taxing CPU page tables, the IOMMU and the device's DMA translation, and that
registration pins pages so huge pages must be asked for before it. This measures that on any Linux
box: the same buffer is built twice (MADV_NOHUGEPAGE, then MADV_HUGEPAGE), faulted in, then pinned
(device runtime registration where present, mlock otherwise), and each run reports the fault and pin
times, the huge pages the kernel granted, the page-table memory it grew, and where the pages landed.
"""

from __future__ import annotations

import os
import re
import resource
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from xputune.devices.runtime import HostRegistrar, device_registrar
from xputune.errors import HostDataError, HostError, PermissionRequired
from xputune.hicache import linux_mm, numa_mem
from xputune.hicache.hostbuf import HostBuffer, mlock_registrar
from xputune.host import HostView, open_host
from xputune.host.values import current_choice

DEFAULT_SIZE = 1 << 30
MEMORY_FRACTION = 0.5  # of MemAvailable, one buffer at a time
PTE_BYTES = 8
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
CAP_IPC_LOCK = 14


def parse_size(text: str) -> int:
    """Bytes from "1G", "512MiB", "64m", "1048576" (binary units: sizes of memory)."""
    m = _SIZE_RE.match(text)
    if not m or (m.group(3) and m.group(2) == "" and m.group(3).lower() != "b"):
        raise HostError(f"cannot read size {text!r} (examples: 1G, 512MiB, 268435456)")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not value < 2**63:  # 5000 digits read as inf: no int() of it
        raise HostError(f"size {text[:40]!r} is beyond any memory")
    if value < linux_mm.PAGE_SIZE:
        raise HostError(f"size {text!r} is below one page ({linux_mm.PAGE_SIZE} bytes)")
    return int(value)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def estimated_page_table_bytes(size: int, huge_bytes: int) -> int:
    """Last-level entries a mapping needs: one PTE per 4 KB page, one PMD per 2 MiB huge page."""
    small = max(0, size - huge_bytes)
    return (small // linux_mm.PAGE_SIZE + huge_bytes // linux_mm.HUGE_PAGE_SIZE) * PTE_BYTES


@dataclass(frozen=True)
class PinRun:
    """One buffer build: `pages` is "4k" or "thp"."""

    pages: str
    size: int
    populate_s: float
    pin_s: float
    anon_huge_bytes: int
    page_table_bytes: int  # VmPTE growth measured while the buffer existed
    est_page_table_bytes: int
    translation_entries: int  # what an IOMMU / device MMU has to map for this buffer
    placement: dict[str, Any]
    vma_bytes: int  # the range smaps figures cover (more than size if the kernel merged VMAs)

    @property
    def pin_gib_s(self) -> float:
        return self.size / 2**30 / self.pin_s if self.pin_s > 0 else float("inf")


def _can_lock(size: int) -> bool:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft == resource.RLIM_INFINITY or soft >= size:
        return True
    from xputune.host import open_host
    from xputune.host.procinfo import status_field
    from xputune.host.values import parse_hex

    path = "/proc/self/status"
    value = status_field(open_host().read_text(path), "CapEff", path)
    return value is not None and bool(parse_hex(value, path, 64) >> CAP_IPC_LOCK & 1)


def choose_registrar(pin: str, size: int) -> HostRegistrar:
    """auto: the device runtime when one is loadable, else mlock; refuse early when mlock can't."""
    if pin in ("auto", "runtime"):
        found = device_registrar()
        if found is not None:
            return found
        if pin == "runtime":
            raise HostError("no device runtime (libcudart, libxpurt) found to register memory")
    elif pin != "mlock":
        raise HostError(f"unknown pin method {pin!r} (auto, mlock, runtime)")
    if not _can_lock(size):
        soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        raise PermissionRequired(
            f"mlock of {human_bytes(size)} exceeds the locked-memory limit "
            f"({human_bytes(soft)}): raise it (ulimit -l unlimited) or run as root"
        )
    return mlock_registrar()


@contextmanager
def _on_node_cpus(node: int | None):
    """Run on one node's CPUs so first touch has a well-defined home; yields that node."""
    if node is None:
        _, node = linux_mm.getcpu()
    cpus = numa_mem.node_cpus(node)
    before = os.sched_getaffinity(0)
    usable = set(cpus) & before
    if usable:
        os.sched_setaffinity(0, usable)
    try:
        yield node
    finally:
        if usable:
            os.sched_setaffinity(0, before)


def pin_run(
    size: int, huge: bool, registrar: HostRegistrar, bind_node: int | None, home: int
) -> PinRun:
    """Build, fault and pin one buffer; measure, then free it."""
    pte_before = linux_mm.page_table_bytes()
    buf = HostBuffer(size, node=bind_node, huge=huge, populate=True, strict=False)
    try:
        stats = buf.stats()
        pte = linux_mm.page_table_bytes() - pte_before
        t0 = time.perf_counter()
        registrar.register(buf.address, size)
        t = time.perf_counter() - t0
        try:
            placement = numa_mem.check_placement(buf.address, size, (home,))
        finally:
            registrar.unregister(buf.address)
    finally:
        buf.close()
    huge_bytes = min(stats.anon_huge, size)
    entries = (size - huge_bytes) // linux_mm.PAGE_SIZE + huge_bytes // linux_mm.HUGE_PAGE_SIZE
    return PinRun(
        pages="thp" if huge else "4k",
        size=size,
        populate_s=buf.timings.get("populate_s", 0.0),
        pin_s=t,
        anon_huge_bytes=huge_bytes,
        page_table_bytes=max(0, pte),
        est_page_table_bytes=estimated_page_table_bytes(size, huge_bytes),
        translation_entries=entries,
        placement=placement.as_dict(),
        vma_bytes=stats.end - stats.start,
    )


def thp_setting(host: HostView, name: str) -> str:
    path = f"/sys/kernel/mm/transparent_hugepage/{name}"
    text = host.read_optional(path)
    try:
        return "unavailable" if text is None else current_choice(text, path)
    except HostDataError:
        return "unavailable"


def plan_size(requested: int | None) -> tuple[int, bool]:
    """The size to test, rounded to 2 MiB, and whether it was capped to spare memory."""
    from xputune.host import open_host
    from xputune.host.values import meminfo_bytes

    available = meminfo_bytes(open_host().read_text("/proc/meminfo"), "MemAvailable", "meminfo")
    cap = int(available * MEMORY_FRACTION)
    size = requested if requested is not None else DEFAULT_SIZE
    capped = size > cap
    size = min(size, cap)
    size -= size % linux_mm.HUGE_PAGE_SIZE
    if size < linux_mm.HUGE_PAGE_SIZE:
        raise HostError(f"not enough free memory for a test buffer (available/2 = {cap} bytes)")
    return size, capped


def bench_host(size: int | None = None, node: int | None = None, pin: str = "auto") -> dict:
    """Both runs and the context needed to read them; a dict ready for JSON (schema 1)."""
    host = open_host()
    size, capped = plan_size(size)
    if node is not None and node not in numa_mem.allowed_nodes():
        allowed = ",".join(map(str, numa_mem.allowed_nodes()))
        raise HostError(f"NUMA node {node} is not usable here (allowed: {allowed})")
    registrar = choose_registrar(pin, size)
    with _on_node_cpus(node) as home:
        runs = [pin_run(size, huge, registrar, node, home) for huge in (False, True)]
    small, big = runs
    return {
        "schema_version": 1,
        "size_bytes": size,
        "capped": capped,
        "pin_method": registrar.name,
        "thp_enabled": thp_setting(host, "enabled"),
        "thp_defrag": thp_setting(host, "defrag"),
        "bind_node": node,
        "home_node": home,
        "online_nodes": list(numa_mem.online_nodes(host)),
        "runs": [asdict(r) | {"pin_gib_s": r.pin_gib_s} for r in runs],
        "pin_speedup": small.pin_s / big.pin_s if big.pin_s > 0 else None,
        "translation_ratio": small.translation_entries / max(1, big.translation_entries),
    }
