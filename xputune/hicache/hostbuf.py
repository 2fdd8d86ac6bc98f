"""A private host KV buffer in the physical form the transfer path wants (field report, 2.4).

The order of steps is the point of this module:
  1. anonymous private mmap, aligned to 2 MiB so every huge page can be PMD-mapped;
  2. madvise(MADV_HUGEPAGE), and MADV_DONTFORK so a fork never copy-on-write-splits pinned pages;
  3. mbind to the card's NUMA node (or interleave), still before a single page exists;
  4. fault every page in (first touch happens under the policy, as huge pages);
  5. register with the device runtime (or mlock): registration pins pages, and THP can no
     longer merge 4 KB pages into huge ones after that, so it must come last;
  6. ask the kernel where the pages landed (move_pages) instead of trusting the policy.
"""

from __future__ import annotations

import errno
import mmap
import time
from collections.abc import Sequence
from typing import Any

from xputune.devices.runtime import HostRegistrar
from xputune.errors import HostError, PermissionRequired
from xputune.hicache import linux_mm, numa_mem
from xputune.hicache.numa_mem import Placement, PlacementError

__all__ = ["HostBuffer", "mlock_registrar", "populate"]


def mlock_registrar() -> HostRegistrar:
    """Pinning without a device runtime: mlock/munlock (needs RLIMIT_MEMLOCK or CAP_IPC_LOCK)."""
    sizes: dict[int, int] = {}

    def register(ptr: int, size: int) -> None:
        try:
            linux_mm.mlock(ptr, size)
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.ENOMEM, errno.EAGAIN):
                raise PermissionRequired(
                    f"mlock of {size / 2**20:.0f} MiB refused ({exc.strerror}): raise the "
                    "locked-memory limit (ulimit -l / LimitMEMLOCK=) or run with CAP_IPC_LOCK"
                ) from exc
            raise HostError(f"mlock failed: {exc.strerror}") from exc
        sizes[ptr] = size

    def unregister(ptr: int) -> None:
        linux_mm.munlock(ptr, sizes.pop(ptr))

    return HostRegistrar("mlock", register, unregister)


def populate(buf: mmap.mmap, offset: int, size: int, write: bool = True) -> None:
    """Fault a range in: MADV_POPULATE_* where the kernel has it (5.14+), else touch each page."""
    advice = linux_mm.MADV_POPULATE_WRITE if write else linux_mm.MADV_POPULATE_READ
    try:
        buf.madvise(advice, offset, size)
        return
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOSYS):
            raise HostError(f"cannot fault in host buffer: {exc.strerror}") from exc
    import numpy as np

    pages = np.frombuffer(buf, dtype=np.uint8, count=size, offset=offset)[:: linux_mm.PAGE_SIZE]
    try:
        if write:
            # Store each page's first byte back (from a copy: numpy skips a self-assignment);
            # the store faults the page in writable and keeps its contents.
            pages[:] = pages.copy()
        else:
            int(pages.sum())
    finally:
        del pages


class HostBuffer:
    """Anonymous, huge-page-advised, NUMA-placed and optionally registered host memory.

    `node` binds (MPOL_BIND) to one node; `interleave` spreads pages round-robin over the given
    nodes (True: every node this process may use). Neither: first-touch on the faulting CPU's
    node. `strict` raises PlacementError when move_pages shows pages off the asked nodes.
    """

    def __init__(
        self,
        size: int,
        *,
        node: int | None = None,
        interleave: Sequence[int] | bool | None = None,
        huge: bool = True,
        populate: bool = True,
        registrar: HostRegistrar | None = None,
        strict: bool = True,
    ) -> None:
        if size <= 0:
            raise HostError(f"host buffer size must be positive, got {size}")
        if node is not None and interleave:
            raise HostError("give a NUMA node to bind to or nodes to interleave over, not both")
        self.size = size
        self.huge = huge
        self.timings: dict[str, float] = {}
        self._registrar: HostRegistrar | None = None
        self._views: list[memoryview] = []
        self.expected_nodes: tuple[int, ...] = ()
        self.placement: Placement | None = None

        t0 = time.perf_counter()
        align = linux_mm.HUGE_PAGE_SIZE if size >= linux_mm.HUGE_PAGE_SIZE else 0
        try:
            self._mm = mmap.mmap(-1, size + align, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except OSError as exc:
            raise HostError(f"cannot map {size / 2**20:.0f} MiB host buffer: {exc}") from exc
        base = linux_mm.buffer_address(self._mm)
        self._offset = (-base) % align if align else 0
        self.address = base + self._offset
        try:
            self._setup(node, interleave, populate, registrar, strict, t0)
        except BaseException:
            self.close()
            raise

    def _setup(
        self,
        node: int | None,
        interleave: Sequence[int] | bool | None,
        do_populate: bool,
        registrar: HostRegistrar | None,
        strict: bool,
        t0: float,
    ) -> None:
        mm, off, size = self._mm, self._offset, self.size
        mm.madvise(linux_mm.MADV_HUGEPAGE if self.huge else linux_mm.MADV_NOHUGEPAGE, off, size)
        mm.madvise(linux_mm.MADV_DONTFORK, off, size)
        if node is not None:
            numa_mem.mbind(self.address, size, numa_mem.MPOL_BIND, [node])
            self.expected_nodes = (node,)
        elif interleave:
            nodes = numa_mem.allowed_nodes() if interleave is True else tuple(interleave)
            numa_mem.mbind(self.address, size, numa_mem.MPOL_INTERLEAVE, nodes)
            self.expected_nodes = tuple(sorted(nodes))
        self.timings["map_s"] = time.perf_counter() - t0

        if do_populate:
            t = time.perf_counter()
            populate(mm, off, size, write=True)
            self.timings["populate_s"] = time.perf_counter() - t
        if registrar is not None:
            t = time.perf_counter()
            registrar.register(self.address, size)
            self._registrar = registrar
            self.timings["register_s"] = time.perf_counter() - t
        if do_populate or registrar is not None:
            self.placement = numa_mem.check_placement(self.address, size, self.expected_nodes)
            if strict and not self.placement.ok:
                raise PlacementError(f"host buffer placement: {self.placement.describe()}")

    # -- access ---------------------------------------------------------------------------
    @property
    def registered_with(self) -> str | None:
        return self._registrar.name if self._registrar else None

    def view(self) -> memoryview:
        """A writable byte view; every view must be dropped before close()."""
        return memoryview(self._mm)[self._offset : self._offset + self.size]

    def array(self, dtype: Any = "uint8", shape: tuple[int, ...] | None = None) -> Any:
        """A numpy array over the buffer (no copy), e.g. a (layers, slots, dim) KV pool."""
        import numpy as np

        arr = np.frombuffer(
            self._mm, dtype=dtype, count=self.size // np.dtype(dtype).itemsize, offset=self._offset
        )
        return arr.reshape(shape) if shape is not None else arr

    def stats(self) -> linux_mm.MappingStats:
        """Kernel accounting of the mapping (Rss, AnonHugePages, Locked, ...)."""
        return linux_mm.mapping_stats(self.address)

    # -- lifetime -------------------------------------------------------------------------
    def close(self) -> None:
        """Unregister, then unmap; refuses while numpy arrays or views still point into it."""
        if self._registrar is not None:
            self._registrar.unregister(self.address)
            self._registrar = None
        mm = getattr(self, "_mm", None)
        if mm is None or mm.closed:
            return
        try:
            mm.close()
        except BufferError as exc:
            raise BufferError(
                "host buffer still has live views (numpy arrays or memoryviews); "
                "drop them before closing it"
            ) from exc

    def __enter__(self) -> HostBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
