"""One host KV buffer shared by a whole TP group, for MLA models (docs/field-report.md, 2.7).

MLA host KV is a replicated latent: every TP rank holds bit-identical data, so at TP 8 a
per-rank pool keeps 8 copies (1/8 of the nominal L2 capacity) and moves 8x the D2H traffic.
Here TP rank 0 creates one buffer, every rank maps it MAP_SHARED, and only rank 0 writes KV
into it; all ranks read with the same indices, which holds because SGLang's HiCache all-reduces its
acks, so the tree and the host allocator evolve identically on every rank.

The buffer holds users' prompts and never has a name: rank 0 creates it O_TMPFILE in /dev/shm
(mode 0600; memfd_create where the filesystem lacks O_TMPFILE), so there is nothing in /dev/shm
for anyone to guess, squat, open or leave behind, whatever happens. The descriptor reaches the
other ranks over a Unix socket (SCM_RIGHTS) in a rendezvous directory only this user can write
(/run/xputune for root, $XDG_RUNTIME_DIR/xputune or ~/.cache/xputune/run otherwise; 0700,
owner-checked, no symlinks). Rank 0 answers only peers of its own uid (SO_PEERCRED) that name
the same group, TP size and buffer size; a rank accepts only an unnamed, private regular file
of its own uid. A socket left by a killed rank 0 holds no data: the next rank 0 replaces it, and
a rank that finds it gets "connection refused" and waits for a live one. The socket is removed
as soon as every rank has the buffer mapped, and on every failure path of rank 0.

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
import errno
import hashlib
import mmap
import os
import re
import signal
import socket
import stat
import struct
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
FILE_PREFIX = "xputune-"  # names of the field report's scheme; nothing is created under it any more
#: Test-only: SIGKILL rank 0 at a stage ("created", "populated", "listening", "handed").
KILL_ENV = "XPUTUNE_TEST_TPSHARED_KILL"
_HELLO = struct.Struct("<8sIIQ")  # magic, rank, world, size
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
        rendezvous_dir: str | None = None,
    ) -> None:
        if not _NAME_RE.match(name):
            raise HostError(f"shared buffer name {name!r}: use letters, digits, '.', '_', '-'")
        if not 1 <= world_size <= MAX_WORLD or not 0 <= rank < world_size:
            raise HostError(f"rank {rank} / world size {world_size} out of range")
        if size <= 0:
            raise HostError(f"shared buffer size must be positive, got {size}")
        self.name, self.size, self.rank, self.world_size = name, size, rank, world_size
        self.shm_dir = shm_dir
        self.rendezvous = rendezvous_dir or default_rendezvous_dir()
        tag = hashlib.sha256(name.encode()).hexdigest()[:32]
        #: The rendezvous socket (the only name on disk; no data behind it).
        self.path = os.path.join(self.rendezvous, f"tp-{tag}.sock")
        self.backing = ""
        self._listener: socket.socket | None = None
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
            private_dir(self.rendezvous)
            fd = self._create() if rank == 0 else self._attach(deadline)
            try:
                self._map(fd, deadline)
                self._setup(registrar, interleave, huge, touch, deadline, fd)
            finally:
                os.close(fd)
        except BaseException:
            self.close()
            raise

    # -- creation and attachment ----------------------------------------------------------
    def _create(self) -> int:
        """An unnamed 0600 file in shm_dir (O_TMPFILE), else a memfd; sized."""
        self._owner = True
        try:
            fd = os.open(self.shm_dir, os.O_RDWR | os.O_TMPFILE | os.O_CLOEXEC, 0o600)
            self.backing = f"{self.shm_dir} (O_TMPFILE, unnamed)"
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
                raise HostError(
                    f"cannot create a buffer in {self.shm_dir}: {exc.strerror}"
                ) from exc
            fd = os.memfd_create(f"xputune-tp-{os.getpid()}", os.MFD_CLOEXEC)
            self.backing = "memfd (shmem_enabled governs THP)"
        try:
            os.fchmod(fd, 0o600)  # whatever the umask did
            os.ftruncate(fd, self.file_len)
        except OSError as exc:
            os.close(fd)
            raise HostError(f"cannot size the shared buffer: {exc.strerror}") from exc
        self.file_mode = stat.S_IMODE(os.fstat(fd).st_mode)
        _test_kill("created")
        return fd

    def _listen(self) -> None:
        """Bind the rendezvous socket, replacing one a killed rank 0 left (never a live one)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            with contextlib.suppress(FileNotFoundError):
                st = os.lstat(self.path)
                if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
                    raise HostError(f"{self.path} is not a socket of this user; refusing it")
                probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    probe.connect(self.path)
                except ConnectionRefusedError:
                    os.unlink(self.path)  # a dead rank 0's: no data behind it
                else:
                    raise HostError(
                        f"another TP group already serves the shared buffer {self.name!r} "
                        f"({self.path}); pick another name"
                    )
                finally:
                    probe.close()
            old = os.umask(0o177)
            try:
                sock.bind(self.path)
            finally:
                os.umask(old)
            sock.listen(MAX_WORLD)
        except BaseException:
            sock.close()
            raise
        self._listener = sock
        _test_kill("listening")

    def _serve(self, fd: int, deadline: float) -> None:
        """Hand the descriptor to every other rank of the group, once each."""
        assert self._listener is not None
        waiting = set(range(1, self.world_size))
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                raise HostError(
                    f"TP rank 0: timed out waiting for every TP rank to map the shared buffer "
                    f"(ranks {sorted(waiting)} never came; {self.path})"
                )
            self._listener.settimeout(min(left, 0.5))
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            with conn:
                rank = self._greet(conn, deadline)
                if rank in waiting:
                    conn.sendall(b"OK")
                    socket.send_fds(conn, [struct.pack("<Q", self.file_len)], [fd])
                    waiting.discard(rank)
                    _test_kill("handed")

    def _greet(self, conn: socket.socket, deadline: float) -> int | None:
        """The peer's rank when it is this user's process asking for this very group."""
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        if uid != os.geteuid():
            return None
        conn.settimeout(max(0.05, min(5.0, deadline - time.monotonic())))
        try:
            hello = _recv_exact(conn, _HELLO.size)
        except OSError:
            return None
        magic, rank, world, size = _HELLO.unpack(hello)
        if magic != MAGIC or world != self.world_size or size != self.size:
            with contextlib.suppress(OSError):
                conn.sendall(b"NO")
            return None
        return rank if 0 < rank < world else None

    def _attach(self, deadline: float) -> int:
        """Ask rank 0 for the descriptor; wait while it is not there yet."""
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            try:
                sock.settimeout(max(0.05, min(5.0, deadline - time.monotonic())))
                sock.connect(self.path)
                creds = sock.getsockopt(
                    socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")
                )
                if struct.unpack("3i", creds)[1] != os.geteuid():
                    raise HostError(f"{self.path} is served by another user; refusing it")
                sock.sendall(_HELLO.pack(MAGIC, self.rank, self.world_size, self.size))
                answer = _recv_exact(sock, 2)
                if answer != b"OK":
                    raise HostError(
                        f"rank 0 of {self.name!r} refused rank {self.rank}: ranks disagree on "
                        "TP size or buffer size"
                    )
                _, fds, _, _ = socket.recv_fds(sock, 8, 1)
                if len(fds) != 1:
                    raise HostError(f"rank 0 of {self.name!r} sent no buffer")
                return self._check_received(fds[0])
            except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, EOFError):
                self._wait(deadline, "rank 0 to create the shared buffer")
            except TimeoutError:
                self._wait(deadline, "rank 0 to create the shared buffer")
            finally:
                sock.close()

    def _check_received(self, fd: int) -> int:
        st = os.fstat(fd)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_uid != os.geteuid()
            or stat.S_IMODE(st.st_mode) & 0o077
            or st.st_nlink != 0
        ):
            os.close(fd)
            raise HostError(
                f"the buffer rank 0 sent is not an unnamed private file of this user "
                f"(mode {stat.S_IMODE(st.st_mode):o}, uid {st.st_uid}, links {st.st_nlink}); "
                "refusing to share KV"
            )
        self.file_mode = stat.S_IMODE(st.st_mode)
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
        fd: int,
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
            _test_kill("populated")
            t = time.perf_counter()
            if self.world_size > 1:
                self._listen()
                self._serve(fd, deadline)
            while not all(self._b[_H_MAPPED + r] for r in range(1, self.world_size)):
                self._wait(deadline, "every TP rank to map the shared buffer")
            self._unlisten()
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
            self._unlisten()
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

    def _unlisten(self) -> None:
        """Remove our rendezvous socket (only ours: a later group may own the name now)."""
        if self._listener is None:
            return
        with contextlib.suppress(OSError):
            if self._listener.getsockname() == self.path:
                os.unlink(self.path)
        self._listener.close()
        self._listener = None

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


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("peer closed")
        data += chunk
    return data


def _test_kill(stage: str) -> None:
    if os.environ.get(KILL_ENV) == stage:
        os.kill(os.getpid(), signal.SIGKILL)


def default_rendezvous_dir() -> str:
    """A directory only this user can create entries in."""
    if os.geteuid() == 0:
        return "/run/xputune"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        with contextlib.suppress(OSError):
            st = os.lstat(runtime)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
                return os.path.join(runtime, "xputune")
    return os.path.join(os.path.expanduser("~"), ".cache", "xputune", "run")


def private_dir(path: str) -> None:
    """Create `path` 0700 (parents 0700 too) and check it: ours, 0700, not a symlink."""
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        st = os.lstat(path)
    except OSError as exc:
        raise HostError(f"cannot create rendezvous directory {path}: {exc.strerror}") from exc
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise HostError(f"rendezvous directory {path} is not a directory; refusing it")
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
        raise HostError(
            f"rendezvous directory {path} is not private to this user (uid {st.st_uid}, "
            f"mode {stat.S_IMODE(st.st_mode):04o}); refusing it"
        )
