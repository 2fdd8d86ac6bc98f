"""One host KV buffer shared by a whole TP group, for MLA models (seed 2.7).

MLA host KV is a replicated latent: every TP rank holds bit-identical data, so at TP 8 a
per-rank pool keeps 8 copies (1/8 of the nominal L2 capacity) and moves 8x the D2H traffic.
Here TP rank 0 creates one file in /dev/shm, every rank maps it MAP_SHARED, and only rank 0
writes KV into it; all ranks read with the same indices, which holds because HiRadixCache
all-reduces its acks, so the tree and the host allocator evolve identically on every rank.

The file holds users' prompts, so it is created O_EXCL with mode 0600 (a name squatted by
someone else fails instead of being reused), other ranks refuse a file that is not ours and
0600, and rank 0 unlinks it as soon as every rank has it mapped: from then on the memory lives
only in the mappings and vanishes with the last process, crash or not.

Physical form: MADV_HUGEPAGE on the mapping (huge pages need /dev/shm mounted huge=advise or
huge=always), and MPOL_INTERLEAVE over the usable nodes while pages are faulted in and
registered, so one shared pool does not pile onto a single node (NUMA binding per card stops
mattering in this mode).

Because correctness rests on identical allocator decisions, an optional self-check publishes a
digest of each rank's decisions in a small header after the data, and any rank that sees
another disagree at the same decision count raises AllocatorDivergence (and marks the header so
the others stop too) instead of reading another request's KV.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import stat
import time
from collections.abc import Sequence
from typing import Any

from xputune.devices.runtime import HostRegistrar
from xputune.errors import HostError
from xputune.hicache import linux_mm, numa_mem
from xputune.hicache.hostbuf import populate
from xputune.hicache.numa_mem import Placement
from xputune.host import open_host
from xputune.host.values import find_mount

SHM_DIR = "/dev/shm"
FILE_PREFIX = "xputune-"
MAGIC = b"XPUTSHM1"
VERSION = 1
MAX_WORLD = 256
BOARD_RING = 64  # digests kept per rank; a rank more than this many checks behind is skipped

# Header layout (bytes after the data): magic, version, world, size, ready, diverged, then one
# "mapped" byte per rank at 64, then each rank's ring of (count, digest) u64 pairs at 4096.
_H_WORLD_Q, _H_SIZE_Q, _H_FLAGS_Q = 1, 2, 3
_H_MAPPED = 64
_H_BOARD = 4096
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$")


class AllocatorDivergence(RuntimeError):
    """Two TP ranks made different host-allocator decisions: shared KV would be corrupted."""


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def shm_huge_mode(mountinfo: str, mount_point: str = SHM_DIR) -> str:
    """The huge= option of a tmpfs mount ("never" when the option is absent)."""
    mount = find_mount(mountinfo, mount_point, "/proc/self/mountinfo")
    return "not mounted" if mount is None else mount.huge


class TpSharedBuffer:
    """The TP group's host buffer as seen by one rank; construct it on every rank at once.

    Rank 0 returns once every rank has mapped the file and it is unlinked; other ranks return
    once rank 0 has created and faulted it in. `registrar` pins the mapping in every rank
    (each process needs its own registration for its own device).
    """

    def __init__(
        self,
        name: str,
        size: int,
        rank: int,
        world_size: int,
        *,
        registrar: HostRegistrar | None = None,
        interleave: Sequence[int] | bool = True,
        huge: bool = True,
        touch: bool = True,
        timeout: float = 300.0,
        shm_dir: str = SHM_DIR,
    ) -> None:
        if not _NAME_RE.match(name):
            raise HostError(f"shared buffer name {name!r}: use letters, digits, '.', '_', '-'")
        if not 1 <= world_size <= MAX_WORLD or not 0 <= rank < world_size:
            raise HostError(f"rank {rank} / world size {world_size} out of range")
        if size <= 0:
            raise HostError(f"shared buffer size must be positive, got {size}")
        self.name, self.size, self.rank, self.world_size = name, size, rank, world_size
        self.path = os.path.join(shm_dir, FILE_PREFIX + name)
        self.data_len = _round_up(size, linux_mm.HUGE_PAGE_SIZE)
        board = world_size * BOARD_RING * 16
        self.file_len = self.data_len + _round_up(_H_BOARD + board, linux_mm.PAGE_SIZE)
        self.file_mode = 0
        self.unlinked = False
        self._owner = False
        self.placement: Placement | None = None
        self.timings: dict[str, float] = {}
        self._registrar: HostRegistrar | None = None
        self._mm: mmap.mmap | None = None
        self._q: memoryview | None = None
        self._b: memoryview | None = None
        self._last_published = 0
        deadline = time.monotonic() + timeout
        try:
            fd = self._create() if rank == 0 else self._attach(deadline)
            try:
                self._map(fd, deadline)
            finally:
                os.close(fd)
            self._setup(registrar, interleave, huge, touch, deadline)
        except BaseException:
            self.close()
            raise

    # -- creation and attachment ----------------------------------------------------------
    def _create(self) -> int:
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except FileExistsError:
            raise HostError(
                f"{self.path} already exists: another server uses the name {self.name!r}, or "
                "one crashed before unlinking it (remove the file if no server runs)"
            ) from None
        except OSError as exc:
            raise HostError(f"cannot create {self.path}: {exc.strerror}") from exc
        self._owner = True
        try:
            os.fchmod(fd, 0o600)  # whatever the umask did
            os.ftruncate(fd, self.file_len)
        except OSError as exc:
            os.close(fd)
            raise HostError(f"cannot size {self.path}: {exc.strerror}") from exc
        self.file_mode = stat.S_IMODE(os.fstat(fd).st_mode)
        return fd

    def _attach(self, deadline: float) -> int:
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
        while True:
            try:
                fd = os.open(self.path, flags)
                break
            except FileNotFoundError:
                self._wait(deadline, "rank 0 to create the shared buffer")
            except OSError as exc:
                raise HostError(f"cannot open {self.path}: {exc.strerror}") from exc
        st = os.fstat(fd)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_uid != os.geteuid()
            or stat.S_IMODE(st.st_mode) & 0o077
        ):
            os.close(fd)
            raise HostError(
                f"{self.path} is not a private regular file of this user "
                f"(mode {stat.S_IMODE(st.st_mode):o}, uid {st.st_uid}); refusing to share KV"
            )
        self.file_mode = stat.S_IMODE(st.st_mode)
        while os.fstat(fd).st_size < self.file_len:
            try:
                self._wait(deadline, "rank 0 to size the shared buffer")
            except BaseException:
                os.close(fd)
                raise
        return fd

    def _map(self, fd: int, deadline: float) -> None:
        if os.fstat(fd).st_size != self.file_len:
            raise HostError(
                f"{self.path} is {os.fstat(fd).st_size} bytes, expected {self.file_len}: "
                "ranks disagree on the buffer size"
            )
        try:
            self._mm = mmap.mmap(fd, self.file_len, flags=mmap.MAP_SHARED)
        except OSError as exc:
            raise HostError(f"cannot map {self.path}: {exc.strerror}") from exc
        self.address = linux_mm.buffer_address(self._mm)
        header = memoryview(self._mm)[self.data_len :]
        self._q = header.cast("Q")
        self._b = header
        if self.rank == 0:
            header[0:8] = MAGIC
            self._q[_H_WORLD_Q] = VERSION | self.world_size << 32
            self._q[_H_SIZE_Q] = self.size
        else:
            while self._q[_H_FLAGS_Q] & 1 == 0:  # "ready": rank 0 has faulted the pages in
                self._wait(deadline, "rank 0 to fault in the shared buffer")
            if bytes(header[0:8]) != MAGIC or self._q[_H_WORLD_Q] != (
                VERSION | self.world_size << 32
            ):
                raise HostError(f"{self.path} was made by another version or TP size")
            if self._q[_H_SIZE_Q] != self.size:
                raise HostError(f"{self.path}: ranks disagree on the buffer size")

    def _setup(
        self,
        registrar: HostRegistrar | None,
        interleave: Sequence[int] | bool,
        huge: bool,
        touch: bool,
        deadline: float,
    ) -> None:
        assert self._mm is not None and self._b is not None and self._q is not None
        mm = self._mm
        mm.madvise(linux_mm.MADV_HUGEPAGE if huge else linux_mm.MADV_NOHUGEPAGE, 0, self.data_len)
        nodes: tuple[int, ...] = ()
        if interleave:
            nodes = numa_mem.allowed_nodes() if interleave is True else tuple(interleave)
            if self.rank == 0:  # shmem keeps one shared policy for the file, whoever faults
                numa_mem.mbind(self.address, self.data_len, numa_mem.MPOL_INTERLEAVE, nodes)
        if self.rank != 0:
            self._b[_H_MAPPED + self.rank] = 1

        t = time.perf_counter()
        with _policy(nodes):
            if self.rank == 0:
                populate(mm, 0, self.data_len, write=True)
            elif touch:
                populate(mm, 0, self.data_len, write=False)
            self.timings["populate_s"] = time.perf_counter() - t
            if registrar is not None:
                t = time.perf_counter()
                registrar.register(self.address, self.data_len)
                self._registrar = registrar
                self.timings["register_s"] = time.perf_counter() - t
        if self.rank == 0:
            self._q[_H_FLAGS_Q] = 1
            t = time.perf_counter()
            while not all(self._b[_H_MAPPED + r] for r in range(1, self.world_size)):
                self._wait(deadline, "every TP rank to map the shared buffer")
            os.unlink(self.path)
            self.unlinked = True
            self.timings["wait_ranks_s"] = time.perf_counter() - t
        self.placement = numa_mem.check_placement(self.address, self.data_len, nodes)

    def _wait(self, deadline: float, what: str) -> None:
        if time.monotonic() > deadline:
            raise HostError(f"TP rank {self.rank}: timed out waiting for {what} ({self.path})")
        time.sleep(0.002)

    # -- access ---------------------------------------------------------------------------
    @property
    def writes_to_host(self) -> bool:
        """Only rank 0 issues D2H into the shared buffer; other ranks skip their write-backs."""
        return self.rank == 0

    def view(self) -> memoryview:
        assert self._mm is not None
        return memoryview(self._mm)[: self.size]

    def array(self, dtype: Any = "uint8", shape: tuple[int, ...] | None = None) -> Any:
        import numpy as np

        assert self._mm is not None
        arr = np.frombuffer(self._mm, dtype=dtype, count=self.size // np.dtype(dtype).itemsize)
        return arr.reshape(shape) if shape is not None else arr

    def stats(self, pid: int | str = "self") -> linux_mm.MappingStats:
        return linux_mm.mapping_stats(self.address, pid)

    # -- allocator self-check -------------------------------------------------------------
    def publish_decisions(self, decisions: int, digest: int) -> None:
        """Allocator observer: post this rank's digest and compare it with every other rank's.

        Pass it as LifoSlotAllocator(observer=buf.publish_decisions). Raises
        AllocatorDivergence on a mismatch, on this rank and, via the header flag, on the others.
        """
        q = self._q
        assert q is not None
        if q[_H_FLAGS_Q] & 2:
            raise AllocatorDivergence("another TP rank saw host allocator divergence")
        slot = decisions % BOARD_RING
        mine = (_H_BOARD // 8) + 2 * (self.rank * BOARD_RING + slot)
        q[mine] = 0
        q[mine + 1] = digest
        q[mine] = decisions
        self._last_published = decisions
        for other in range(self.world_size):
            if other == self.rank:
                continue
            i = (_H_BOARD // 8) + 2 * (other * BOARD_RING + slot)
            count, theirs = q[i], q[i + 1]
            if count == decisions and q[i] == decisions and theirs != digest:
                q[_H_FLAGS_Q] = q[_H_FLAGS_Q] | 2
                raise AllocatorDivergence(
                    f"host allocator of TP rank {self.rank} differs from rank {other} after "
                    f"{decisions} decisions: stopping before shared KV is corrupted"
                )

    # -- lifetime -------------------------------------------------------------------------
    def close(self) -> None:
        """Unregister and unmap; a rank 0 that never finished setup removes its file."""
        if self._registrar is not None:
            self._registrar.unregister(self.address)
            self._registrar = None
        if self._owner and not self.unlinked:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            self.unlinked = True
        for view in (self._q, self._b):
            if view is not None:
                view.release()
        self._q = self._b = None
        if self._mm is not None and not self._mm.closed:
            try:
                self._mm.close()
            except BufferError as exc:
                raise BufferError(
                    "shared buffer still has live views (numpy arrays or memoryviews); "
                    "drop them before closing it"
                ) from exc

    def __enter__(self) -> TpSharedBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _policy:
    """Interleave this thread's faults (and registration) over `nodes`; no-op when empty."""

    def __init__(self, nodes: Sequence[int]) -> None:
        self.nodes = tuple(nodes)
        self._cm: Any = None

    def __enter__(self) -> None:
        if self.nodes:
            self._cm = numa_mem.thread_policy(numa_mem.MPOL_INTERLEAVE, self.nodes)
            self._cm.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self._cm is not None:
            self._cm.__exit__(*exc)


def live_shm_huge_mode(mount_point: str = SHM_DIR) -> str:
    """huge= of the live /dev/shm mount (this process's own mount namespace)."""
    text = open_host().read_optional("/proc/self/mountinfo")
    return "unknown" if text is None else shm_huge_mode(text, mount_point)
