"""NUMA memory policy for host KV buffers: bind, interleave, and check where pages really are.

A host KV pool on the wrong node makes every D2H/H2D cross the socket link (docs/field-report.md,
2.4: binding to the card's node took the slowdown from +11.5% to -2.1%). Policies are set with the
raw mbind/set_mempolicy syscalls because libnuma may be missing, and placement is never assumed:
move_pages in query mode reports the node of each page, so a bind that silently fell back (cpuset
limits, a node out of memory with MPOL_PREFERRED) is visible.
"""

from __future__ import annotations

import ctypes
import errno
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from xputune.errors import HostError
from xputune.hicache import linux_mm
from xputune.host import HostView, open_host
from xputune.host.procinfo import status_field
from xputune.host.values import format_cpulist, parse_cpulist

MPOL_DEFAULT = 0
MPOL_PREFERRED = 1
MPOL_BIND = 2
MPOL_INTERLEAVE = 3
MPOL_LOCAL = 4
MPOL_MODE_FLAGS = (1 << 15) | (1 << 14) | (1 << 13)  # STATIC/RELATIVE_NODES, NUMA_BALANCING
MPOL_F_ADDR = 2
MPOL_MF_STRICT = 1
MPOL_MF_MOVE = 2

MODE_NAMES = {
    MPOL_DEFAULT: "default",
    MPOL_PREFERRED: "preferred",
    MPOL_BIND: "bind",
    MPOL_INTERLEAVE: "interleave",
    MPOL_LOCAL: "local",
}

_MASK_BITS = 1024  # MAX_NUMNODES on the largest x86_64 configs; get_mempolicy needs >= nr_node_ids
_MASK_WORDS = _MASK_BITS // 64
_MOVE_PAGES_CHUNK = 16384


class PlacementError(HostError):
    """Pages did not land where the policy asked (node full, cpuset, or a node that is offline)."""


def online_nodes(host: HostView | None = None) -> tuple[int, ...]:
    """Online NUMA nodes; (0,) on a kernel built without NUMA."""
    path = "/sys/devices/system/node/online"
    text = (host or open_host()).read_optional(path)
    return parse_cpulist(text, path) if text else (0,)


def node_cpus(node: int, host: HostView | None = None) -> tuple[int, ...]:
    """CPUs of a node (may be empty: a memory-only node)."""
    path = f"/sys/devices/system/node/node{node}/cpulist"
    text = (host or open_host()).read_optional(path)
    return parse_cpulist(text, path) if text else ()


def allowed_nodes() -> tuple[int, ...]:
    """Nodes this process may allocate on (cpuset.mems), which mbind must stay within."""
    path = "/proc/self/status"
    value = status_field(open_host().read_text(path), "Mems_allowed_list", path)
    return parse_cpulist(value, path) if value is not None else online_nodes()


def _mask(nodes: Iterable[int]) -> ctypes.Array:
    words = (ctypes.c_ulong * _MASK_WORDS)()
    for node in nodes:
        if not 0 <= node < _MASK_BITS:
            raise HostError(f"NUMA node {node} is out of range 0..{_MASK_BITS - 1}")
        words[node // 64] |= 1 << (node % 64)
    return words


def _unmask(words: ctypes.Array) -> tuple[int, ...]:
    return tuple(i * 64 + b for i in range(_MASK_WORDS) for b in range(64) if words[i] >> b & 1)


def _policy_error(exc: OSError, what: str, nodes: Sequence[int]) -> HostError:
    if exc.errno == errno.EINVAL:
        allowed = format_cpulist(allowed_nodes())
        return HostError(
            f"{what} to NUMA node(s) {format_cpulist(nodes)} refused: this process may only "
            f"use node(s) {allowed} (offline node or cpuset.mems)"
        )
    if exc.errno == errno.ENOSYS:
        return HostError(f"{what}: this kernel has no NUMA memory-policy support")
    return HostError(f"{what} failed: {exc.strerror or exc}")


def mbind(addr: int, length: int, mode: int, nodes: Sequence[int] = (), flags: int = 0) -> None:
    """Set the policy of an address range; with MPOL_MF_MOVE, pages already there migrate."""
    try:
        linux_mm.raw_syscall("mbind", addr, length, mode, _mask(nodes), _MASK_BITS + 1, flags)
    except OSError as exc:
        raise _policy_error(exc, "mbind", nodes) from exc


def set_mempolicy(mode: int, nodes: Sequence[int] = ()) -> None:
    """Set the calling thread's default policy (applies to pages it faults in from now on)."""
    try:
        if mode in (MPOL_DEFAULT, MPOL_LOCAL):
            linux_mm.raw_syscall("set_mempolicy", mode, None, 0)
        else:
            linux_mm.raw_syscall("set_mempolicy", mode, _mask(nodes), _MASK_BITS + 1)
    except OSError as exc:
        raise _policy_error(exc, "set_mempolicy", nodes) from exc


def get_mempolicy(addr: int | None = None) -> tuple[int, tuple[int, ...]]:
    """(mode, nodes) of the thread, or of the VMA holding `addr` (shared policy for shmem)."""
    mode = ctypes.c_int()
    words = (ctypes.c_ulong * _MASK_WORDS)()
    linux_mm.raw_syscall(
        "get_mempolicy",
        ctypes.c_void_p(ctypes.addressof(mode)),
        words,
        _MASK_BITS + 1,
        addr or 0,
        MPOL_F_ADDR if addr is not None else 0,
    )
    return mode.value & ~MPOL_MODE_FLAGS, _unmask(words)


@contextmanager
def thread_policy(mode: int, nodes: Sequence[int]) -> Iterator[None]:
    """Apply a thread policy for the duration of a block (e.g. interleave while registering)."""
    old_mode, old_nodes = get_mempolicy()
    set_mempolicy(mode, nodes)
    try:
        yield
    finally:
        set_mempolicy(old_mode, old_nodes)


def page_nodes(addr: int, length: int, samples: int = 4096) -> list[int]:
    """Node of up to `samples` evenly spread pages (negative errno for a page not present)."""
    page = linux_mm.PAGE_SIZE
    npages = max(1, length // page)
    step = max(1, npages // samples)
    addrs = [addr + i * page for i in range(0, npages, step)]
    out: list[int] = []
    for lo in range(0, len(addrs), _MOVE_PAGES_CHUNK):
        chunk = addrs[lo : lo + _MOVE_PAGES_CHUNK]
        ptrs = (ctypes.c_void_p * len(chunk))(*chunk)
        status = (ctypes.c_int * len(chunk))()
        try:
            linux_mm.raw_syscall("move_pages", 0, len(chunk), ptrs, None, status, 0)
        except OSError as exc:
            raise HostError(f"move_pages (placement query) failed: {exc.strerror}") from exc
        out.extend(status)
    return out


@dataclass(frozen=True)
class Placement:
    """Where a buffer's pages are, against where they were asked to be."""

    expected: tuple[int, ...]  # nodes the policy allows; () = no expectation
    mode: str  # the policy the kernel reports for the range
    pages: dict[int, int] = field(default_factory=dict)  # node -> sampled pages present there
    missing: int = 0  # sampled pages not faulted in yet

    @property
    def sampled(self) -> int:
        return sum(self.pages.values()) + self.missing

    @property
    def stray(self) -> int:
        """Sampled pages on a node outside the expected set."""
        if not self.expected:
            return 0
        return sum(n for node, n in self.pages.items() if node not in self.expected)

    @property
    def ok(self) -> bool:
        """Every present page is on an expected node; for interleave, every node got some."""
        if self.stray:
            return False
        if self.mode == "interleave" and self.sampled >= 4 * len(self.expected):
            return all(self.pages.get(node, 0) > 0 for node in self.expected)
        return True

    def describe(self) -> str:
        spread = ", ".join(f"N{node}={n}" for node, n in sorted(self.pages.items())) or "none"
        want = format_cpulist(self.expected) if self.expected else "any"
        verdict = "ok" if self.ok else "MISPLACED"
        return f"{self.mode} want N{want}: {spread} ({self.missing} not present) {verdict}"

    def as_dict(self) -> dict[str, object]:
        return {
            "expected_nodes": list(self.expected),
            "mode": self.mode,
            "pages_per_node": {str(k): v for k, v in sorted(self.pages.items())},
            "missing": self.missing,
            "ok": self.ok,
        }


def check_placement(
    addr: int, length: int, expected: Sequence[int] = (), samples: int = 4096
) -> Placement:
    """Query the policy and the node of sampled pages of a range; never moves anything."""
    try:
        mode, _ = get_mempolicy(addr)
        mode_name = MODE_NAMES.get(mode, str(mode))
    except OSError:
        mode_name = "unknown"
    counts = Counter(page_nodes(addr, length, samples))
    missing = sum(n for node, n in counts.items() if node < 0)
    pages = {node: n for node, n in counts.items() if node >= 0}
    return Placement(tuple(sorted(expected)), mode_name, pages, missing)
