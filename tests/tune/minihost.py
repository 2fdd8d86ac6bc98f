"""A small host tree for tuning tests: 1 root port, 1 switch, 2 P800 cards sharing its uplink.

Small enough to build in a few milliseconds per test and to reason about bit by bit; the
recorded seed-box fixture (xputune/examples/h3c-hygon-p800.tar.xz) covers the full 8-card machine.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

CAP_EXP = 0x10
PCIE_AT = 0x40  # where the PCIe capability sits in every function built here
PM_AT = 0x80


def config_space(
    vendor: int,
    device: int,
    class_code: int,
    port_type: int,
    bridge: bool,
    devctl2: int = 0x0000,
    size: int = 4096,
) -> bytes:
    """A config space with a PM capability, then PCIe (id 0x10), then an AER ext capability."""
    data = bytearray(size)
    struct.pack_into("<HH", data, 0, vendor, device)
    struct.pack_into("<H", data, 0x04, 0x0546)  # command: memory, master, serr, intx off
    struct.pack_into("<H", data, 0x06, 0x0010)  # status: capability list
    struct.pack_into("<I", data, 0x08, (class_code << 8) | 0x01)
    data[0x0E] = 0x01 if bridge else 0x00
    data[0x34] = PCIE_AT
    # PCIe capability: id, next, flags (version 2 | port type), devcap, devctl, ...
    data[PCIE_AT] = CAP_EXP
    data[PCIE_AT + 1] = PM_AT
    struct.pack_into("<H", data, PCIE_AT + 0x02, 0x0002 | (port_type << 4))
    struct.pack_into("<I", data, PCIE_AT + 0x04, 0x00008FC2)
    struct.pack_into("<H", data, PCIE_AT + 0x08, 0x2936)  # devctl: RO (bit 4) on, MPS, MRRS
    struct.pack_into("<I", data, PCIE_AT + 0x0C, 0x00477D05)  # lnkcap
    struct.pack_into("<H", data, PCIE_AT + 0x12, 0x1045)  # lnksta
    struct.pack_into("<I", data, PCIE_AT + 0x24, 0x00070B9F)  # devcap2
    struct.pack_into("<H", data, PCIE_AT + 0x28, devctl2)
    # PM capability, last in the list
    data[PM_AT] = 0x01
    data[PM_AT + 1] = 0x00
    struct.pack_into("<H", data, PM_AT + 2, 0x0003)
    if size > 256:
        struct.pack_into("<I", data, 0x100, 0x0001 | (2 << 16))  # AER, next 0
    return bytes(data)


@dataclass(frozen=True)
class Fn:
    bdf: str
    rel: str  # path under /sys/devices
    vendor: int
    device: int
    class_code: int
    port_type: int
    bridge: bool


FUNCTIONS = (
    Fn("0000:00:01.1", "pci0000:00/0000:00:01.1", 0x1D94, 0x14AB, 0x060400, 0x4, True),
    Fn("0000:01:00.0", "pci0000:00/0000:00:01.1/0000:01:00.0", 0x1000, 0xC030, 0x060400, 0x5, True),
    Fn(
        "0000:02:00.0",
        "pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0",
        0x1000,
        0xC030,
        0x060400,
        0x6,
        True,
    ),
    Fn(
        "0000:02:01.0",
        "pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:01.0",
        0x1000,
        0xC030,
        0x060400,
        0x6,
        True,
    ),
    Fn(
        "0000:03:00.0",
        "pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0/0000:03:00.0",
        0x1D22,
        0x3688,
        0x078000,
        0x0,
        False,
    ),
    Fn(
        "0000:04:00.0",
        "pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:01.0/0000:04:00.0",
        0x1D22,
        0x3688,
        0x078000,
        0x0,
        False,
    ),
    # Not on any card's path: must never be written.
    Fn("0000:00:02.0", "pci0000:00/0000:00:02.0", 0x1D94, 0x14AC, 0x060000, 0x9, False),
)
CARD_PATH_BDFS = {
    "0000:00:01.1",
    "0000:01:00.0",
    "0000:02:00.0",
    "0000:02:01.0",
    "0000:03:00.0",
    "0000:04:00.0",
}

MOUNTINFO = (
    "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro\n"
    "23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
    "24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "25 22 0:5 / /dev rw,nosuid,relatime shared:2 - devtmpfs udev rw,size=4096k,mode=755\n"
    "26 25 0:23 / /dev/shm rw,nosuid,nodev shared:3 - tmpfs tmpfs rw,size=65536k,inode64\n"
)


def write(root: str, rel: str, data: bytes | str, mode: int = 0o644) -> None:
    path = os.path.join(root, rel.lstrip("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
    os.chmod(path, mode)


def build(
    root: str,
    cpu_vendor: str = "HygonGenuine",
    lockdown: str = "none",
    thp: str = "always",
    shm_fstype: str = "tmpfs",
    numa_balancing: int = 1,
    config_size: int = 4096,
) -> str:
    """Write the tree under `root` and return it."""
    for fn in FUNCTIONS:
        base = f"sys/devices/{fn.rel}"
        write(root, f"{base}/vendor", f"{fn.vendor:#06x}\n")
        write(root, f"{base}/device", f"{fn.device:#06x}\n")
        write(root, f"{base}/class", f"{fn.class_code:#08x}\n")
        write(root, f"{base}/numa_node", "0\n")
        write(root, f"{base}/local_cpulist", "0-3\n")
        write(
            root,
            f"{base}/config",
            config_space(
                fn.vendor, fn.device, fn.class_code, fn.port_type, fn.bridge, size=config_size
            ),
        )
        link = os.path.join(root, "sys/bus/pci/devices", fn.bdf)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(f"../../../devices/{fn.rel}", link)
    node = "sys/devices/system/node"
    write(root, f"{node}/online", "0\n")
    write(root, f"{node}/node0/cpulist", "0-3\n")
    write(
        root,
        f"{node}/node0/meminfo",
        "Node 0 MemTotal:       16384000 kB\nNode 0 MemFree:        8192000 kB\n",
    )
    write(root, f"{node}/node0/distance", "10\n")
    cpuinfo = "".join(
        f"processor\t: {i}\nvendor_id\t: {cpu_vendor}\nmodel name\t: Test CPU\n"
        f"physical id\t: 0\ncore id\t\t: {i}\n\n"
        for i in range(4)
    )
    write(root, "proc/cpuinfo", cpuinfo)
    write(root, "proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/nvme0n1p2 ro\n")
    thp_dir = "sys/kernel/mm/transparent_hugepage"
    write(root, f"{thp_dir}/enabled", _choices(("always", "madvise", "never"), thp))
    write(
        root,
        f"{thp_dir}/defrag",
        _choices(("always", "defer", "defer+madvise", "madvise", "never"), "madvise"),
    )
    write(
        root,
        f"{thp_dir}/shmem_enabled",
        _choices(("always", "within_size", "advise", "never", "deny", "force"), "never"),
    )
    mountinfo = (
        MOUNTINFO
        if shm_fstype == "tmpfs"
        else MOUNTINFO.replace("- tmpfs tmpfs rw,size=65536k", f"- {shm_fstype} none rw")
    )
    write(root, "proc/self/mountinfo", mountinfo)
    write(root, "proc/sys/kernel/numa_balancing", f"{numa_balancing}\n")
    levels = ("none", "integrity", "confidentiality")
    write(root, "sys/kernel/security/lockdown", _choices(levels, lockdown))
    return root


def _choices(words: tuple[str, ...], current: str) -> str:
    return " ".join(f"[{w}]" if w == current else w for w in words) + "\n"


def snapshot(root: str, exclude: str = "var/lib/xputune") -> dict[str, bytes]:
    """Every regular file, symlink and directory under root (path -> bytes, link target, or
    b"<dir>"), for diffs: a directory left behind counts as a difference too, except the
    ancestors of `exclude` (the state directory's parents stay once created)."""
    out: dict[str, bytes] = {}
    for folder, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(folder, root)
        if rel_dir == exclude or rel_dir.startswith(exclude + os.sep):
            dirs[:] = []
            continue
        if rel_dir != "." and not exclude.startswith(rel_dir + os.sep):
            out[rel_dir + os.sep] = b"<dir>"
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if os.path.islink(path):
                out[rel] = b"->" + os.readlink(path).encode()
            else:
                with open(path, "rb") as fh:
                    out[rel] = fh.read()
    return out


class Tree:
    """A byte-exact record of a tree, re-checked cheaply: only files whose stat changed since
    the record are read again (a write always moves mtime), so comparing an 8-card tree of
    thousands of files after each fault-injection step stays fast."""

    def __init__(self, root: str, exclude: str = "var/lib/xputune") -> None:
        self.root = root
        self.exclude = exclude
        self.files = snapshot(root, exclude)
        self.stats = self._stats()

    def _stats(self) -> dict[str, tuple[int, int]]:
        out = {}
        for rel in self._walk():
            st = os.lstat(os.path.join(self.root, rel))
            out[rel] = (st.st_mtime_ns, st.st_size)
        return out

    def _walk(self) -> list[str]:
        rels = []
        for folder, dirs, files in os.walk(self.root):
            rel_dir = os.path.relpath(folder, self.root)
            if rel_dir == self.exclude or rel_dir.startswith(self.exclude + os.sep):
                dirs[:] = []
                continue
            links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
            rels.extend(os.path.normpath(os.path.join(rel_dir, n)) for n in files + links)
        return rels

    def changed(self) -> dict[str, tuple[bytes | None, bytes | None]]:
        """path -> (recorded, now) for every file whose bytes differ from the record."""
        now = self._stats()
        out: dict[str, tuple[bytes | None, bytes | None]] = {}
        for rel in set(now) | set(self.stats):
            if now.get(rel) == self.stats.get(rel):
                continue
            current = snapshot_one(self.root, rel) if rel in now else None
            if current != self.files.get(rel):
                out[rel] = (self.files.get(rel), current)
        return out


def snapshot_one(root: str, rel: str) -> bytes:
    path = os.path.join(root, rel)
    if os.path.islink(path):
        return b"->" + os.readlink(path).encode()
    with open(path, "rb") as fh:
        return fh.read()
