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
import re
from dataclasses import dataclass
from functools import cache

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

_SMAPS_HEAD = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) ")


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
    with open(f"/proc/{pid}/smaps") as f:
        text = f.read()
    return parse_smaps(text, addr)


def parse_smaps(text: str, addr: int) -> MappingStats:
    """The smaps block whose range covers `addr` (sizes turned from kB to bytes)."""
    block: dict[str, int] | None = None
    head: tuple[int, int, str] | None = None
    flags: tuple[str, ...] = ()
    for line in text.splitlines():
        m = _SMAPS_HEAD.match(line)
        if m:
            if block is not None:
                break
            start, end = int(m.group(1), 16), int(m.group(2), 16)
            if start <= addr < end:
                parts = line.split(None, 5)
                head = (start, end, parts[5] if len(parts) > 5 else "")
                block = {}
            continue
        if block is not None:
            key, _, rest = line.partition(":")
            fields = rest.split()
            if key == "VmFlags":
                flags = tuple(fields)
                continue
            if len(fields) == 2 and fields[1] == "kB" and fields[0].isdigit():
                block[key] = int(fields[0]) * 1024
    if block is None or head is None:
        raise LookupError(f"no mapping covers address {addr:#x}")
    return MappingStats(
        start=head[0],
        end=head[1],
        name=head[2],
        rss=block.get("Rss", 0),
        pss=block.get("Pss", 0),
        anon_huge=block.get("AnonHugePages", 0),
        shmem_pmd=block.get("ShmemPmdMapped", 0),
        file_pmd=block.get("FilePmdMapped", 0),
        locked=block.get("Locked", 0),
        kernel_page_size=block.get("KernelPageSize", PAGE_SIZE),
        vm_flags=flags,
    )


def numa_maps_line(addr: int, pid: int | str = "self") -> str:
    """The /proc/PID/numa_maps line of the VMA starting at `addr` ("" without NUMA support)."""
    try:
        with open(f"/proc/{pid}/numa_maps") as f:
            text = f.read()
    except FileNotFoundError:
        return ""
    for line in text.splitlines():
        start, _, rest = line.partition(" ")
        if int(start, 16) == addr:
            return rest
    return ""


def parse_numa_maps(rest: str) -> tuple[str, dict[int, int]]:
    """(policy, pages per node) from the part of a numa_maps line after the address."""
    policy, _, fields = rest.partition(" ")
    pages: dict[int, int] = {}
    for field in fields.split():
        key, _, value = field.partition("=")
        if len(key) > 1 and key[0] == "N" and key[1:].isdigit() and value.isdigit():
            pages[int(key[1:])] = int(value)
    return policy, pages


def page_table_bytes(pid: int | str = "self") -> int:
    """VmPTE of a process: the memory its page tables take right now."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmPTE:"):
                return int(line.split()[1]) * 1024
    return 0
