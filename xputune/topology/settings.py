"""Read-out of the host settings the KV transfer path depends on.

Only reads: changing them is tune/'s job. Each value is None when the kernel does not expose it,
so the verdict can say "not available" instead of guessing.
"""

from __future__ import annotations

from xputune.errors import HostDataError
from xputune.host import HostView
from xputune.topology.model import Settings, ShmMount
from xputune.topology.numa import hugepage_pools
from xputune.topology.values import bracketed, read_optional_int

THP = "/sys/kernel/mm/transparent_hugepage"
MOUNTINFO = "/proc/self/mountinfo"
SHM = "/dev/shm"
SIZE_SUFFIX = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _selector(view: HostView, path: str) -> str | None:
    text = view.read_optional(path)
    return None if text is None else bracketed(text, path)


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo_line(line: str, path: str = MOUNTINFO) -> tuple[str, str, tuple[str, ...]]:
    """(mount point, fstype, mount + super options) of one mountinfo line."""
    fields = line.split()
    try:
        sep = fields.index("-")
        mount_point = _unescape(fields[4])
        fstype = fields[sep + 1]
        options = tuple(fields[5].split(",")) + tuple(fields[sep + 3].split(","))
    except (ValueError, IndexError):
        raise HostDataError(path, line, "expected a mountinfo line") from None
    return mount_point, fstype, options


def _size(value: str) -> int | None:
    if value.endswith("%"):
        return None
    scale = SIZE_SUFFIX.get(value[-1:].lower(), 1)
    digits = value[:-1] if value[-1:].lower() in SIZE_SUFFIX else value
    return int(digits) * scale if digits.isdigit() else None


def read_shm(view: HostView) -> ShmMount | None:
    """The /dev/shm mount on top of the stack (it can be mounted twice; the last one wins)."""
    text = view.read_optional(MOUNTINFO)
    if text is None:
        return None
    found: ShmMount | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        mount_point, fstype, options = parse_mountinfo_line(line)
        if mount_point != SHM:
            continue
        values = dict(o.partition("=")[::2] for o in options)
        found = ShmMount(
            mount_point=mount_point,
            fstype=fstype,
            options=options,
            huge=values.get("huge", "never"),
            size_bytes=_size(values["size"]) if values.get("size") else None,
        )
    return found


def iommu_mode(cmdline: str, groups: int, default_type: str | None) -> str:
    args = dict(a.partition("=")[::2] for a in cmdline.split())
    if args.get("iommu") == "off" or "off" in (args.get("intel_iommu"), args.get("amd_iommu")):
        return "off"
    if groups == 0:
        return "off"
    if args.get("iommu") == "pt" or default_type == "identity":
        return "passthrough"
    return "translated"


def discover_settings(view: HostView) -> Settings:
    groups = view.listdir("/sys/kernel/iommu_groups")
    group_type = (
        view.read_optional(f"/sys/kernel/iommu_groups/{groups[0]}/type") if groups else None
    )
    cmdline = view.read_optional("/proc/cmdline") or ""
    return Settings(
        thp_enabled=_selector(view, f"{THP}/enabled"),
        thp_defrag=_selector(view, f"{THP}/defrag"),
        thp_shmem_enabled=_selector(view, f"{THP}/shmem_enabled"),
        shm=read_shm(view),
        numa_balancing=read_optional_int(view, "/proc/sys/kernel/numa_balancing", minimum=0),
        iommu=iommu_mode(cmdline, len(groups), group_type),
        iommu_groups=len(groups),
        kernel_cmdline=cmdline,
        lockdown=_selector(view, "/sys/kernel/security/lockdown"),
        hugepages=hugepage_pools(view, "/sys/kernel/mm/hugepages"),
    )
