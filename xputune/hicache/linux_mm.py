"""The few Linux memory-management calls the host buffers need, reached through ctypes.

Python's mmap module covers mapping and madvise, but not mlock, the NUMA memory-policy syscalls
or getcpu, and it hides the address a device runtime needs to register. Everything that talks to
libc lives here so the buffer modules read as policy, not plumbing. These calls act on this
process's own memory, so they (and the /proc/self readers below) are live by nature: there is no
recorded host to point them at.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
import platform
from dataclasses import dataclass
from functools import cache

from xputune.host import open_host, procinfo, procmaps

PAGE_SIZE = mmap.PAGESIZE
HUGE_PAGE_SIZE = 2 * 1024 * 1024  # a PMD-mapped THP on x86_64 and on 4K-granule aarch64

# madvise advice values not all Pythons name (uapi asm-generic/mman-common.h).
MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)
MADV_NOHUGEPAGE = getattr(mmap, "MADV_NOHUGEPAGE", 15)
MADV_DONTFORK = getattr(mmap, "MADV_DONTFORK", 10)
MADV_POPULATE_READ = 22  # Linux 5.14+
MADV_POPULATE_WRITE = 23  # Linux 5.14+

# Syscall numbers of the calls glibc does not wrap (libnuma does, but may be absent).
_SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "mbind": 237,
        "set_mempolicy": 238,
        "get_mempolicy": 239,
        "move_pages": 279,
        "getcpu": 309,
    },
    "aarch64": {
        "mbind": 235,
        "get_mempolicy": 236,
        "set_mempolicy": 237,
        "move_pages": 239,
        "getcpu": 168,
    },
}


@cache
def libc() -> ctypes.CDLL:
    """The C library with errno capture, loaded once."""
    lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    lib.syscall.restype = ctypes.c_long
    lib.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return lib


def syscall_number(name: str) -> int:
    """The number of `name` on this machine; OSError(ENOSYS) on an architecture we lack."""
    table = _SYSCALLS.get(platform.machine())
    if table is None or name not in table:
        raise OSError(errno.ENOSYS, f"{name}: no syscall number for {platform.machine()}")
    return table[name]


def raw_syscall(name: str, *args: int | ctypes.c_void_p | ctypes.Array | None) -> int:
    """Call `name` with integer/pointer args; raises OSError with the kernel's errno."""
    converted = [
        a if isinstance(a, ctypes.c_void_p | ctypes.Array) else ctypes.c_long(a or 0) for a in args
    ]
    rv = libc().syscall(ctypes.c_long(syscall_number(name)), *converted)
    if rv == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")
    return rv


def _check(rv: int, what: str) -> None:
    if rv != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def madvise(addr: int, length: int, advice: int) -> None:
    _check(libc().madvise(ctypes.c_void_p(addr), length, advice), "madvise")


def mlock(addr: int, length: int) -> None:
    """Pin (and fault in) a range: the CPU-only stand-in for cudaHostRegister."""
    _check(libc().mlock(ctypes.c_void_p(addr), length), "mlock")


def munlock(addr: int, length: int) -> None:
    _check(libc().munlock(ctypes.c_void_p(addr), length), "munlock")


def getcpu() -> tuple[int, int]:
    """(cpu, numa node) this thread runs on right now."""
    cpu, node = ctypes.c_uint(), ctypes.c_uint()
    raw_syscall(
        "getcpu",
        ctypes.c_void_p(ctypes.addressof(cpu)),
        ctypes.c_void_p(ctypes.addressof(node)),
        None,
    )
    return cpu.value, node.value


def buffer_address(buf: mmap.mmap) -> int:
    """Start address of a writable mmap; the temporary export is released before returning."""
    probe = ctypes.c_char.from_buffer(buf)
    try:
        return ctypes.addressof(probe)
    finally:
        del probe


# -- /proc/self readers ----------------------------------------------------------------------


@dataclass(frozen=True)
class MappingStats:
    """Kernel accounting for one VMA, from /proc/PID/smaps (sizes in bytes).

    A VMA can be larger than the buffer asked about when the kernel merged it with a neighbour
    of identical flags and policy; start/end say which range the figures cover.
    """

    start: int
    end: int
    name: str
    rss: int
    pss: int
    anon_huge: int
    shmem_pmd: int
    file_pmd: int
    locked: int
    kernel_page_size: int
    vm_flags: tuple[str, ...] = ()  # "hg" = MADV_HUGEPAGE, "dc" = MADV_DONTFORK, "lo" = mlocked


def mapping_stats(addr: int, pid: int | str = "self") -> MappingStats:
    """Smaps of the VMA holding `addr`; LookupError when no mapping covers it."""
    return parse_smaps(open_host().read_text(f"/proc/{pid}/smaps"), addr)


def parse_smaps(text: str, addr: int) -> MappingStats:
    """The smaps block whose range covers `addr` (read by host/procmaps.py, the one reader
    of the format)."""
    entry = procmaps.covering(procmaps.parse_smaps(text, "smaps")[0], addr)
    if entry is None:
        raise LookupError(f"no mapping covers address {addr:#x}")
    return MappingStats(
        start=entry.start,
        end=entry.end,
        name=entry.name,
        rss=entry.get("Rss"),
        pss=entry.get("Pss"),
        anon_huge=entry.get("AnonHugePages"),
        shmem_pmd=entry.get("ShmemPmdMapped"),
        file_pmd=entry.get("FilePmdMapped"),
        locked=entry.get("Locked"),
        kernel_page_size=entry.sizes.get("KernelPageSize", PAGE_SIZE),
        vm_flags=entry.vm_flags,
    )


def numa_maps_line(addr: int, pid: int | str = "self") -> str:
    """The /proc/PID/numa_maps line of the VMA starting at `addr` ("" without NUMA support)."""
    text = open_host().read_optional(f"/proc/{pid}/numa_maps")
    if text is None:
        return ""
    for line in text.splitlines():
        start, _, rest = line.partition(" ")
        if int(start, 16) == addr:
            return rest
    return ""


def parse_numa_maps(rest: str) -> tuple[str, dict[int, int]]:
    """(policy, pages per node) from the part of a numa_maps line after the address
    (host/procmaps.py reads it; HostDataError when it is not such a part)."""
    policy, _, _, _, pages, _ = procmaps.parse_numa_fields(rest)
    return str(policy), pages


def page_table_bytes(pid: int | str = "self") -> int:
    """VmPTE of a process: the memory its page tables take right now."""
    path = f"/proc/{pid}/status"
    value = procinfo.status_field(open_host().read_text(path), "VmPTE", path)
    return int(value.split()[0]) * 1024 if value else 0
