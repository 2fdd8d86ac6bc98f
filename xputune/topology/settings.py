"""Read-out of the host settings the KV transfer path depends on.

Only reads: changing them is tune/'s job. Each value is None when the kernel does not expose it,
so the verdict can say "not available" instead of guessing.
"""

from __future__ import annotations

from xputune.host.reader import Reader
from xputune.host.values import Mount, current_choice, find_mount, parse_int, parse_size
from xputune.topology.model import Settings, ShmMount
from xputune.topology.numa import hugepage_pools

THP = "/sys/kernel/mm/transparent_hugepage"
MOUNTINFO = "/proc/self/mountinfo"
SHM = "/dev/shm"


def _shm(reader: Reader) -> ShmMount | None:
    """The /dev/shm mount on top of the stack (it can be mounted twice; the last one wins)."""
    text = reader.text(MOUNTINFO)
    mount = None if text is None else reader.parse(MOUNTINFO, text, _find_shm)
    if mount is None:
        return None
    size = mount.option("size")
    return ShmMount(
        mount_point=mount.mount_point,
        fstype=mount.fstype,
        options=mount.mount_options + mount.super_options,
        huge=mount.huge,
        size_bytes=None if size is None else reader.parse(MOUNTINFO, size, parse_size),
    )


def _find_shm(text: str, path: str) -> Mount | None:
    return find_mount(text, SHM, path)


def _non_negative(text: str, path: str) -> int:
    return parse_int(text, path, minimum=0)


def iommu_mode(cmdline: str, groups: int, default_type: str | None) -> str:
    args = dict(a.partition("=")[::2] for a in cmdline.split())
    if args.get("iommu") == "off" or "off" in (args.get("intel_iommu"), args.get("amd_iommu")):
        return "off"
    if groups == 0:
        return "off"
    if args.get("iommu") == "pt" or default_type == "identity":
        return "passthrough"
    return "translated"


def discover_settings(reader: Reader) -> Settings:
    groups = reader.view.listdir("/sys/kernel/iommu_groups")
    group_type = reader.text(f"/sys/kernel/iommu_groups/{groups[0]}/type") if groups else None
    cmdline = reader.text("/proc/cmdline") or ""
    return Settings(
        thp_enabled=reader.value(f"{THP}/enabled", current_choice),
        thp_defrag=reader.value(f"{THP}/defrag", current_choice),
        thp_shmem_enabled=reader.value(f"{THP}/shmem_enabled", current_choice),
        shm=_shm(reader),
        numa_balancing=reader.value("/proc/sys/kernel/numa_balancing", _non_negative),
        iommu=iommu_mode(cmdline, len(groups), group_type),
        iommu_groups=len(groups),
        kernel_cmdline=cmdline,
        lockdown=reader.value("/sys/kernel/security/lockdown", current_choice),
        hugepages=hugepage_pools(reader, "/sys/kernel/mm/hugepages"),
    )
