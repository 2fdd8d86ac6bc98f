"""Root-confined access to a host's /sys and /proc.

Paths given to a view are host paths ("/sys/bus/pci/devices/0000:13:00.0/vendor"), whatever the
root. A view refuses to follow a symlink out of its root and reports loops, so a recording from
an untrusted machine can be probed safely. Every path read is remembered in `accessed`, which is
how `xputune record` captures exactly what the probe reads.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, repeat

from xputune import trail
from xputune.errors import (
    HostError,
    RecordingError,
    RootEscapeError,
    SymlinkLoopError,
    UnreadableValueError,
)
from xputune.host.replace import TMP_MARK as TMP_MARK
from xputune.host.replace import clean_tmp_at as clean_tmp_at
from xputune.host.replace import tmp_name as tmp_name
from xputune.host.replace import write_replace_at

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: start-up time
if TYPE_CHECKING:
    import mmap

MAX_SYMLINKS = 40  # the kernel's own limit (MAXSYMLINKS)


def shown(name: str) -> str:
    """tarread.shown, imported when a message needs it: a probe of the live host or of a
    folder reads no tarball, and tarread is ~0.2 ms of its start-up."""
    from xputune.host.tarread import shown as tar_shown

    return tar_shown(name)


def describe_mode(mode: int) -> str:
    """tarread.describe_mode, imported when a message needs it (see shown)."""
    from xputune.host.tarread import describe_mode as tar_describe_mode

    return tar_describe_mode(mode)


MiB = 1 << 20
#: Most bytes one read may return, by host path prefix (first match wins), so that a hostile
#: tree cannot make a probe read gigabytes. Margins are wide; a value past its cap is unknown.
READ_CAPS: tuple[tuple[str, int], ...] = (
    # Text attributes hold at most one page (4 KiB, 64 KiB on arm64/ppc64 kernels); the binary
    # ones a probe reads are small too (PCI config 4 KiB, VPD at most 32 KiB).
    ("/sys/", 1 * MiB),
    # /proc/cpuinfo is ~1.5 KB per CPU (~2 MB on a 1,024-CPU box); mountinfo of a busy
    # container host ~1-2 MB.
    ("/proc/", 16 * MiB),
)
#: Anything else a view reads: pci.ids (~1.4 MB and growing), unit files, journal entries.
DEFAULT_READ_CAP = 16 * MiB

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
#: Never wait (a FIFO), never take a terminal, never follow a link swapped in after resolving.
_OPEN_FLAGS = os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | _NOFOLLOW
#: A directory of a walk from the root: never through a symlink.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | _NOFOLLOW
_NUL_AND_SPACE = "\0 \t\n\r\x0b\x0c"


def text_span(text: str) -> tuple[int, int]:
    """(start, end): read_text keeps text[start:end] of a file that decodes to `text`.

    For a reader that must not copy a large text twice more (strip() of a 370 KB cpuinfo
    copies it, every time it ends in a newline): the same cut, whitespace as str.strip()
    sees it, then the trailing NULs of old kernels and what lies around them.
    """
    start, end = 0, len(text)
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start and text[end - 1] == "\0":
        while end > start and text[end - 1] in _NUL_AND_SPACE:
            end -= 1
        while end > start and text[end - 1].isspace():
            end -= 1
    return start, end


def read_cap(path: str) -> int:
    """The most bytes a read of host path `path` may return."""
    for prefix, cap in READ_CAPS:
        if path.startswith(prefix):
            return cap
    return DEFAULT_READ_CAP


def _too_large(label: str, path: str, cap: int) -> UnreadableValueError:
    return UnreadableValueError(f"{label}: {path} is larger than {cap} bytes")


def _not_regular(label: str, path: str, what: str) -> UnreadableValueError:
    return UnreadableValueError(f"{label}: {path} is not a regular file ({what})")


def _read_to_end(fd: int, size_hint: int, cap: int, short_is_end: bool = False) -> bytes | None:
    """Everything up to EOF, or None past `cap`.

    st_size only sizes the first read: sysfs says 4096 whatever an attribute holds and procfs
    says 0, while a seq_file hands out a page or so per read, so only EOF ends the loop. A
    regular file on disk (`short_is_end`) ends where a read returns less than asked: the
    empty read that would say so again is saved (one syscall per file of a probe).
    """
    chunks: list[bytes] = []
    total = 0
    want = max(size_hint, 4096) + 1
    while True:
        asked = min(want, cap + 1 - total)
        chunk = os.read(fd, asked)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > cap:
            return None
        if short_is_end and len(chunk) < asked:
            break
        want = max(total, 65536)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


#: The grain of a sparse read: PCI config space is read one aligned dword per access.
WORD = 4


class SparseBytes:
    """A file's bytes, read only where they are looked at (HostView.read_sparse).

    `len()` is what a whole read would return; an index or a slice reads the aligned words
    it covers, each once, with pread. Why: on a live host every dword of PCI config space is
    a config access, trapped by the hypervisor in a VM (~16 us on the development VM), so
    reading a 4 KiB config file whole to decode the few dozen bytes the capability walk looks
    at was most of a live probe's discovery (14 of 21 ms for six functions).
    """

    __slots__ = ("_error", "_fd", "_size", "_words")

    def __init__(self, fd: int, size: int, error: Callable[[OSError], Exception]) -> None:
        self._fd = fd
        self._size = size
        self._words: dict[int, bytes] = {}
        self._error = error  # how a failed read is worded (HostView.read_bytes's way)

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, key: int | slice) -> int | bytes:  # what bytes[key] is
        if isinstance(key, slice):
            start, stop, step = key.indices(self._size)
            if step != 1:
                return bytes(self[i] for i in range(start, stop, step))
            return self._span(start, stop) if stop > start else b""
        index = key.__index__()
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError("index out of range")
        return self._span(index, index + 1)[0]

    def _span(self, start: int, stop: int) -> bytes:
        """Bytes start..stop (inside the file), missing words read in one pread a run."""
        words = self._words
        first = start - start % WORD
        at = first
        while at < stop:
            if at in words:
                at += WORD
                continue
            end = at + WORD
            while end < stop and end not in words:
                end += WORD
            end = min(end, self._size)
            try:
                data = os.pread(self._fd, end - at, at)
                if len(data) != end - at:  # the file's end moved since it was found
                    raise OSError(errno.EIO, "changed size while being read")
            except OSError as exc:
                failed = self._error(exc)
                if failed is exc:
                    raise
                raise failed from exc
            for here in range(at, end, WORD):
                words[here] = data[here - at : here - at + WORD]
            at = end
        if stop <= first + WORD:  # one word (all a decoder asks at a time)
            return words[first][start - first : stop - first]
        return b"".join(words[a] for a in range(first, stop, WORD))[start - first : stop - first]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> SparseBytes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _end_of(fd: int, size: int) -> int | None:
    """Where a whole read of `fd` ends, tried where it may (st_size; sysfs gives anyone but
    root only the 64-byte header of a config file, 128 bytes of a CardBus bridge's) with a
    two-byte pread that returns one byte only there; None when at none of them."""
    for end in (size, 64, 128, 256):
        if 0 < end <= size and len(os.pread(fd, 2, end - 1)) == 1:
            return end
    return None


class _Whole:
    """read_sparse of a backend that reads a file whole (a recording): its bytes."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __enter__(self) -> bytes:
        return self.data

    def __exit__(self, *exc: object) -> None:
        return None


class HostView(ABC):
    """Read (and, where the root allows it, write) files of one host by host path."""

    #: Human-readable description of the root, used in messages.
    label: str
    #: True for the machine this process runs on.
    live: bool = False

    def __init__(self) -> None:
        self.accessed: set[str] = set()
        #: Contents as read, kept only when a recording is being made (see keep_contents).
        self.contents: dict[str, bytes] | None = None
        trail.host_view(self)

    def keep_contents(self) -> None:
        """Remember every file's bytes as read, so a recording holds exactly what was seen."""
        self.contents = {}

    # -- primitives each backend provides ---------------------------------------------------
    def realpath(self, path: str) -> str:
        """The host path `path` resolves to; raises RootEscapeError or HostError on a loop."""
        self.accessed.add(path)
        return self._realpath(path)

    @abstractmethod
    def _realpath(self, path: str) -> str: ...

    @abstractmethod
    def _read(self, real: str) -> bytes: ...

    @abstractmethod
    def _listdir(self, real: str) -> list[str]: ...

    @abstractmethod
    def _kind(self, real: str) -> str | None:
        """'file', 'dir', 'link' or None (missing) for an already-resolved path."""

    # -- conveniences shared by all backends ------------------------------------------------
    def exists(self, path: str) -> bool:
        try:
            return self._kind(self.realpath(path)) is not None
        except FileNotFoundError:
            return False

    def is_dir(self, path: str) -> bool:
        try:
            return self._kind(self.realpath(path)) == "dir"
        except FileNotFoundError:
            return False

    def read_bytes(self, path: str) -> bytes:
        """The whole file; FileNotFoundError when missing, HostError when unreadable."""
        self.accessed.add(path)
        real = self.realpath(path)
        try:
            data = self._read(real)
            if self.contents is not None:
                self.contents[path] = data
            return data
        except OSError as exc:
            failed = self._read_failed(path, exc)
            if failed is exc:
                raise
            raise failed from exc

    def _read_failed(self, path: str, exc: OSError) -> Exception:
        """What a failed read of `path` raises: FileNotFoundError as it is, else HostError."""
        if isinstance(exc, FileNotFoundError):
            return exc
        if isinstance(exc, PermissionError):
            return HostError(f"{self.label}: permission denied reading {path}")
        if isinstance(exc, IsADirectoryError):
            return HostError(f"{self.label}: {path} is a directory, expected a file")
        return HostError(f"{self.label}: cannot read {path}: {exc.strerror}")

    def read_sparse(self, path: str) -> SparseBytes | _Whole:
        """The file for a reader that looks at a few of its bytes (a config space's walk): a
        context manager giving what indexes, slices and len()s as read_bytes(path) would,
        with read_bytes's errors. A backend whose reads cost by the word (live sysfs) reads
        only the words looked at; any other reads the file whole, once, here."""
        return _Whole(self.read_bytes(path))

    def read_mapped(self, path: str) -> bytes | mmap.mmap:
        """The whole file for a reader that searches it (pci.ids, 1.4 MB) and slices what it
        finds: read_bytes(path), with its errors. The live host maps a file on disk instead
        of copying it (~0.5 ms of a probe): an object that finds, slices and len()s as the
        bytes would, valid while referenced."""
        return self.read_bytes(path)

    def read_text(self, path: str) -> str:
        """The file as text with surrounding whitespace removed, as sysfs attributes are read.

        Older kernels ended some attributes with "\\n\\0" (hwloc's recordings of real machines
        hold /sys/devices/system/node/online = b"0-3\\n\\x00"), so trailing NULs go too.
        """
        data = self.read_bytes(path)
        try:
            text = data.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise UnreadableValueError(f"{self.label}: {path} is not UTF-8 text") from exc
        if text.endswith("\0"):
            text = text.rstrip(_NUL_AND_SPACE).strip()
        return text

    def read_optional(self, path: str) -> str | None:
        """Like read_text, but None when the file does not exist (attributes vary by kernel)."""
        try:
            return self.read_text(path)
        except FileNotFoundError:
            self.accessed.add(path)
            return None

    def listdir(self, path: str) -> list[str]:
        """Sorted entries of a directory; [] when it does not exist."""
        self.accessed.add(path)
        try:
            real = self.realpath(path)
            return sorted(self._listdir(real))
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            return []
        except PermissionError as exc:
            raise HostError(f"{self.label}: permission denied listing {path}") from exc

    def readlink(self, path: str) -> str | None:
        """The target of the symlink `path` as stored, never followed (an fd link of /proc
        reads "socket:[123]", which names no file); None when `path` is no symlink."""
        self.accessed.add(path)
        return self._readlink(path)

    def _readlink(self, path: str) -> str | None:
        return None

    def link_name(self, path: str) -> str | None:
        """Last component of a symlink's target (a driver's or iommu group's name), or None."""
        self.accessed.add(path)
        try:
            return posixpath.basename(self.realpath(path))
        except FileNotFoundError:
            return None

    def write_bytes(self, path: str, data: bytes, offset: int | None = None) -> None:
        raise self.read_only_error()

    def writable(self) -> bool:
        return False

    def check_every_read(self) -> None:
        """From now on, check every read against a swap (apply and rollback call it): what
        they read decides what they write and whether a write took. A backend nobody else
        can change (a recording) needs nothing."""
        return None

    def read_only_error(self) -> HostError:
        """Why nothing can be written here, with what to do instead (TarView says how)."""
        return HostError(f"{self.label} is read-only")


class DirView(HostView):
    """A host rooted at a directory: the live machine ("/") or an extracted recording."""

    def __init__(self, root: str) -> None:
        super().__init__()
        self.root = os.path.realpath(root)
        self.live = self.root == "/"
        self.label = "this host" if self.live else root
        self._real_cache: dict[str, str] = {}
        #: lstat results seen while resolving (non-live roots), so _read can refuse a device
        #: node without opening it, and know the file it opens is the one it resolved; and
        #: the targets of the links met. Many host paths lead to one real path (through
        #: /sys/bus/pci/devices, /sys/class/net, ...): each real one is looked at once.
        self._stats: dict[str, tuple[int, int, int]] = {}  # (st_mode, st_ino, st_dev)
        self._links: dict[str, str] = {}
        #: Every read of a non-live tree checked by the kernel's name for its descriptor, not
        #: by the inode its resolution saw (check_every_read).
        self._checked_reads = False
        #: (real path, st_mode) of the last lstat of the realpath call under way, so that
        #: exists() and is_dir() right after resolving a path do not lstat it again.
        self._fresh: tuple[str, int] | None = None
        #: read_sparse reads only the words looked at (live sysfs: each is a config access).
        self.sparse_reads = self.live
        #: What a real path is prefixed with to name the file here (as _fs, inline).
        self._prefix = "" if self.live else self.root

    def _fs(self, host_path: str) -> str:
        return host_path if self.live else self.root + host_path

    def _realpath(self, path: str) -> str:
        if not path.startswith("/"):
            raise HostError(f"host paths are absolute, got {path!r}")
        self._fresh = None
        cached = self._real_cache.get(path)
        if cached is not None:
            return cached
        real = self._live_realpath(path) if self.live else self._confined_realpath(path)
        self._real_cache[path] = real
        return real

    def _live_realpath(self, path: str) -> str:
        """What os.path.realpath(path, strict=True) gives, each prefix resolved once and
        remembered, as in a tree: the attributes of one device cost one lstat each, where
        realpath lstats every component of every path and walks each link's target again
        (1,112 lstats for the 134 paths a probe of six functions resolves). A link to an
        absolute target is followed from /. A missing path is FileNotFoundError, as in a
        tree, not its own name (which made link_name of an absent `driver` link answer
        "driver"). /proc/self and /proc/thread-self name whoever asks (a child forked with
        this view), so what lies below them is resolved afresh each time, not remembered."""
        try:
            if path.startswith(("/proc/self", "/proc/thread-self")):
                return os.path.realpath(path, strict=True)
            return self._resolve(path.rstrip("/") or "/", path, [0])
        except (FileNotFoundError, NotADirectoryError):
            raise FileNotFoundError(errno.ENOENT, "no such file", path) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise SymlinkLoopError(f"{self.label}: symlink loop at {path}") from None
            raise HostError(f"{self.label}: cannot resolve {path}: {exc.strerror}") from exc

    def _confined_realpath(self, path: str) -> str:
        """Resolve so that `..` and absolute targets cannot escape the root.

        Each prefix is resolved once and remembered, so the attributes of one device cost one
        lstat each instead of one per path component.
        """
        self._fresh = None  # only what this call lstats counts as fresh
        return self._resolve(path.rstrip("/") or "/", path, [0])

    def _resolve(self, path: str, original: str, hops: list[int]) -> str:
        """Walk down from the longest prefix already resolved, one component at a time.

        A loop, not recursion per component: a symlink target may hold ~2,000 components
        ("./././..."), which would overflow Python's stack. Only following a link recurses,
        at most MAX_SYMLINKS deep.
        """
        cache = self._real_cache
        cached = cache.get(path)
        if cached is not None:
            return cached
        names: list[str] = []
        head = path
        base = "/"
        while head:
            cached = cache.get(head)
            if cached is not None:
                base = cached
                break
            head, _, name = head.rpartition("/")
            names.append(name)
        for name in reversed(names):
            head = f"{head}/{name}" if head != "/" else f"/{name}"
            base = self._step(base, name, original, hops)
            cache[head] = base
        return base

    def _step(self, base: str, name: str, original: str, hops: list[int]) -> str:
        """The real path of `name` inside the already-real directory `base`."""
        if name in ("", "."):
            return base
        if name == "..":
            if base == "/":
                if self.live:  # as the kernel takes /..
                    return base
                raise RootEscapeError(f"{self.label}: {original} leads outside the root")
            return posixpath.dirname(base)
        candidate = base.rstrip("/") + "/" + name
        if candidate in self._stats:  # seen by another path (a link leads here too)
            return candidate
        target = self._links.get(candidate)
        if target is None:
            try:
                st = os.lstat(self._prefix + candidate)
            except (FileNotFoundError, NotADirectoryError):
                raise FileNotFoundError(errno.ENOENT, "no such file", original) from None
            if not stat.S_ISLNK(st.st_mode):
                self._stats[candidate] = (st.st_mode, st.st_ino, st.st_dev)  # not all 20 fields
                self._fresh = (candidate, st.st_mode)
                return candidate
            try:
                target = os.readlink(self._prefix + candidate)
            except (FileNotFoundError, NotADirectoryError):
                raise FileNotFoundError(errno.ENOENT, "no such file", original) from None
            except OSError as exc:  # EINVAL: no longer a link; the tree changes under us
                raise HostError(
                    f"{self.label}: {shown(candidate)} changed while being resolved"
                ) from exc
            self._links[candidate] = target
        hops[0] += 1
        if hops[0] > MAX_SYMLINKS:
            raise SymlinkLoopError(f"{self.label}: symlink loop at {original}")
        if target.startswith("/"):
            if self.live:
                return self._resolve(target.rstrip("/") or "/", original, hops)
            raise RootEscapeError(
                f"{self.label}: symlink {shown(candidate)} -> {shown(target)} "
                "points outside the root"
            )
        if not target:
            raise FileNotFoundError(errno.ENOENT, "empty symlink", original)
        return self._resolve((base.rstrip("/") + "/" + target).rstrip("/") or "/", original, hops)

    def _refuse_special(self, real: str) -> None:
        """Refuse what lstat saw was not a regular file before opening it: opening a device
        node can itself act (a tape rewinds, a tty becomes ours)."""
        seen = self._stats.get(real)
        if seen is None or stat.S_ISREG(mode := seen[0]):
            return
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", real)
        raise _not_regular(self.label, real, describe_mode(mode))

    def _open_regular(self, real: str) -> tuple[int, int, int]:
        """Open without waiting, check with fstat: (descriptor, st_size, the path's cap) of a
        regular file no larger than its cap."""
        self._refuse_special(real)
        try:
            fd, st = self._open_read(real)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a socket
                raise _not_regular(self.label, real, "a socket") from None
            raise
        try:
            if not stat.S_ISREG(st.st_mode):
                if stat.S_ISDIR(st.st_mode):
                    raise IsADirectoryError(errno.EISDIR, "is a directory", real)
                raise _not_regular(self.label, real, describe_mode(st.st_mode))
            cap = read_cap(real)
            if st.st_size > cap:
                raise _too_large(self.label, real, cap)
        except BaseException:
            os.close(fd)
            raise
        return fd, st.st_size, cap

    def _read(self, real: str) -> bytes:
        """Open without waiting, check with fstat, read to EOF under the path's cap."""
        fd, size, cap = self._open_regular(real)
        try:
            # A file in a tree on disk ends where a read stops short; sysfs and procfs only
            # end at an empty read (a seq_file hands out a page or so at a time).
            data = _read_to_end(fd, size, cap, not self.live)
            if data is None:
                raise _too_large(self.label, real, cap)
            return data
        except BlockingIOError:
            raise UnreadableValueError(f"{self.label}: {real} would block") from None
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _read_errors(self, path: str, real: str) -> Iterator[None]:
        """A failed read of `path` (at `real`) worded as read_bytes words it."""
        try:
            yield
        except BlockingIOError:
            raise UnreadableValueError(f"{self.label}: {real} would block") from None
        except OSError as exc:
            failed = self._read_failed(path, exc)
            if failed is exc:
                raise
            raise failed from exc

    def read_mapped(self, path: str) -> bytes | mmap.mmap:
        """Live, a file outside /sys and /proc (whose sizes are no file's, and where mapping
        a PCI resource file would map the device): mapped read-only. Elsewhere, and when
        the file is empty or cannot be mapped, read as read_bytes reads it. A tree on disk
        may be changed by others while it is read; mapping a file another process truncates
        would fault, so only the live host's own files (pci.ids, root's) are mapped."""
        if not self.live or self.contents is not None or path.startswith(("/sys/", "/proc/")):
            return self.read_bytes(path)
        self.accessed.add(path)
        real = self.realpath(path)
        if real.startswith(("/sys/", "/proc/")):
            return self.read_bytes(path)
        with self._read_errors(path, real):
            fd, size, cap = self._open_regular(real)
            try:
                if size:
                    import mmap  # here: only a live probe that needs pci.ids maps a file

                    try:
                        return mmap.mmap(fd, size, prot=mmap.PROT_READ)
                    except (OSError, ValueError):
                        pass  # a filesystem that cannot map: read it
                data = _read_to_end(fd, size, cap)
            finally:
                os.close(fd)
            if data is None:
                raise _too_large(self.label, real, cap)
            return data

    def read_sparse(self, path: str) -> SparseBytes | _Whole:
        """Live: a SparseBytes, which reads only the words looked at (a config access each).
        A tree on disk (a read there costs by the call, not the byte) and a host being
        recorded (the recording keeps whole files) read the file whole."""
        if not self.sparse_reads or self.contents is not None:
            return super().read_sparse(path)
        self.accessed.add(path)
        real = self.realpath(path)
        with self._read_errors(path, real):
            fd, size, cap = self._open_regular(real)
            try:
                end = _end_of(fd, size)
                data = None if end is not None else _read_to_end(fd, size, cap, not self.live)
            except BaseException:
                os.close(fd)
                raise
            if end is not None:
                return SparseBytes(fd, end, lambda exc: self._read_failed(path, exc))
            os.close(fd)
            if data is None:
                raise _too_large(self.label, real, cap)
            return _Whole(data)

    def _listdir(self, real: str) -> list[str]:
        return os.listdir(self._fs(real))

    def _kind(self, real: str) -> str | None:
        fresh, self._fresh = self._fresh, None
        if fresh is not None and fresh[0] == real:  # lstat'd by the realpath just made
            mode = fresh[1]
        else:
            try:
                mode = os.lstat(self._fs(real)).st_mode
            except (FileNotFoundError, NotADirectoryError):
                return None
        if stat.S_ISDIR(mode):
            return "dir"
        if stat.S_ISLNK(mode):
            return "link"
        return "file"

    def writable(self) -> bool:
        return True

    def check_every_read(self) -> None:
        self._checked_reads = True

    def write_bytes(self, path: str, data: bytes, offset: int | None = None) -> None:
        """Write through the root; `offset` writes in place (config space), else truncates.

        One write call: a sysfs store sees the whole value at once, as `echo` gives it.
        The path is resolved as for a read (a sysfs tree legitimately holds symlinks inside
        the root), then its real path, which has none left, is opened by descriptor: walked
        from the root one directory at a time, O_NOFOLLOW. A directory swapped for a symlink
        after resolving is refused (one HostError), never written through.
        """
        real = self.realpath(path)
        try:
            fd = self._open_for_write(real, path, offset)
            try:
                written = os.write(fd, data) if offset is None else os.pwrite(fd, data, offset)
            finally:
                os.close(fd)
        except PermissionError as exc:
            raise HostError(f"{self.label}: permission denied writing {path}") from exc
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise HostError(f"{self.label}: cannot write {path}: {exc.strerror}") from exc
        if written != len(data):
            where = f" at {offset:#x}" if offset is not None else ""
            raise HostError(f"{self.label}: short write to {path}{where}")
        self.accessed.add(path)

    def _open_for_write(self, real: str, path: str, offset: int | None) -> int:
        """A descriptor on a regular file; a FIFO or device is refused, not waited on."""
        if offset is not None:
            flags = os.O_WRONLY
        elif self.live:
            flags = os.O_RDWR  # sysfs: no create, no truncate
        else:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        try:
            self._refuse_special(real)
        except UnreadableValueError as exc:
            raise self._not_writable(path) from exc
        try:
            fd = self._open_resolved(real, flags)  # a swapped directory: HostError, one line
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a FIFO with no reader, or a socket
                raise self._not_writable(path) from None
            raise
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise self._not_writable(path, describe_mode(mode))
        return fd

    def _not_writable(self, path: str, what: str = "") -> HostError:
        what = f" ({what})" if what else ""
        return HostError(f"{self.label}: {path} is not a regular file{what}; not writing")

    # -- strict writes: xputune's own files (state dir, journal, lock, units) --------------
    # Unlike sysfs attributes, these paths never legitimately contain a symlink, so they are
    # walked from the root one component at a time, openat-style, each directory opened
    # O_NOFOLLOW relative to its parent's descriptor: a symlink anywhere in the path (even one
    # that stays inside the root) is refused, and nothing swapped in between a check and the
    # write can redirect it.
    def _components(self, path: str) -> list[str]:
        if not path.startswith("/"):
            raise HostError(f"host paths are absolute, got {path!r}")
        names = [n for n in path.split("/") if n not in ("", ".")]
        if ".." in names:
            raise RootEscapeError(f"{self.label}: {shown(path)} contains '..'; not writing")
        return names

    def _symlink_refused(self, path: str) -> HostError:
        return HostError(
            f"{self.label}: {shown(path)} is a symlink; refusing to write through it "
            "(move it away and retry)"
        )

    def open_dir(self, path: str, create: bool = False, mode: int = 0o755) -> int:
        """A directory descriptor on `path`, walked without following any symlink.

        `create` makes missing directories with `mode` (exactly, whatever the umask).
        FileNotFoundError when a component is missing and not `create`.
        """
        return self._walk(path, create, mode, None)

    def makedirs(self, path: str, mode: int = 0o755) -> list[str]:
        """Create the missing directories of `path`; the ones created, deepest first."""
        created: list[str] = []
        os.close(self._walk(path, True, mode, created))
        return created[::-1]

    def _walk(self, path: str, create: bool, mode: int, created: list[str] | None) -> int:
        """Open each component relative to its parent's descriptor, O_NOFOLLOW: one openat
        per directory; a lstat only to word a refusal."""
        names = self._components(path)
        fd = os.open(self.root, _DIR_FLAGS)
        here = ""
        try:
            for name in names:
                here = f"{here}/{name}"
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise FileNotFoundError(errno.ENOENT, "no such directory", here) from None
                    sub = self._make_dir(fd, name, here, mode, created)
                except OSError as exc:
                    raise self._not_a_dir(fd, name, here, exc) from None
                os.close(fd)
                fd = sub
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _make_dir(self, fd: int, name: str, here: str, mode: int, created: list[str] | None) -> int:
        """mkdir `name` in `fd` with exactly `mode` (fchmod on its descriptor: the umask
        does not count); a descriptor on it. A concurrent writer may have made it first."""
        try:
            os.mkdir(name, mode, dir_fd=fd)
            made = True
        except FileExistsError:
            made = False
        try:
            sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            raise self._not_a_dir(fd, name, here, exc) from None
        if made:
            if created is not None:
                created.append(here)
            if stat.S_IMODE(os.fstat(sub).st_mode) != mode:
                os.fchmod(sub, mode)
        return sub

    def _not_a_dir(self, fd: int, name: str, here: str, exc: OSError) -> Exception:
        """What a failed O_NOFOLLOW|O_DIRECTORY open of `name` means, in one line."""
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            return exc
        try:
            link = stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
        except OSError:
            link = False
        if link:
            return self._symlink_refused(here)
        return HostError(f"{self.label}: {shown(here)} is not a directory")

    def _open_read(self, real: str) -> tuple[int, os.stat_result]:
        """A read descriptor on the resolved path `real`, and its fstat.

        Under a tree others may change, a directory swapped for a symlink between resolving
        and opening would let the read follow it out of the root (and a rollback verify what
        it restored against a file outside). Walking every read O_NOFOLLOW made a probe's
        discovery half again as slow (31 -> 49 ms on the seed box), so the path is opened as
        one and the descriptor is checked instead. The fstat the read needs anyway says
        whether it is the inode lstat found inside the root while resolving (same device and
        inode: nothing was swapped in between, and no further call is made); where it is
        not, or was not seen (a file since replaced, as our own writes replace them), the
        kernel's own name for it (/proc/self/fd) must be the path inside the root (+5 ms
        when every read needs it); else one HostError. Without /proc, the walk.
        That inode is only as good as the lstat that found it, and lstat follows a directory
        swapped for a symlink in the middle of the path: a rollback under such a race once
        read the untouched copy outside, took the value for restored and left it changed.
        So once apply or rollback asks (check_every_read), every read is checked by name.
        """
        path = self._fs(real)
        fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
        try:
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        if self.live:
            return fd, st
        seen = None if self._checked_reads else self._stats.get(real)
        if seen is not None and st.st_ino == seen[1] and st.st_dev == seen[2]:
            return fd, st
        try:
            opened = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            opened = None
        if opened == path:
            return fd, st
        os.close(fd)
        if opened is None:
            fd = self._open_resolved(real, os.O_RDONLY)
            try:
                return fd, os.fstat(fd)
            except BaseException:
                os.close(fd)
                raise
        raise HostError(
            f"{self.label}: {shown(real)} was moved while being opened (a directory swapped "
            "for a symlink?); not reading it"
        )

    def _open_resolved(self, real: str, flags: int) -> int:
        """Open the resolved path `real` (no symlink left in it) from the root, every
        directory O_NOFOLLOW: a directory swapped for a symlink since it was resolved is
        refused (HostError), never followed out of the root."""
        folder, _, name = real.rpartition("/")
        dir_fd = self._walk(folder or "/", False, 0, None)
        try:
            return os.open(name, flags | _OPEN_FLAGS, 0o644, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # the file itself swapped for a symlink
                raise self._symlink_refused(real) from None
            raise
        finally:
            os.close(dir_fd)

    def _parent(self, path: str, create: bool = False, mode: int = 0o755) -> tuple[int, str]:
        folder, _, name = path.rstrip("/").rpartition("/")
        if name in ("", ".", ".."):
            raise HostError(f"{self.label}: {shown(path)} does not name a file")
        return self.open_dir(folder or "/", create, mode), name

    def lkind(self, path: str) -> str | None:
        """'file', 'dir', 'link', 'other' or None, without following the last component."""
        try:
            fd, name = self._parent(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(fd)
        if stat.S_ISLNK(st.st_mode):
            return "link"
        if stat.S_ISDIR(st.st_mode):
            return "dir"
        return "file" if stat.S_ISREG(st.st_mode) else "other"

    def read_strict(self, path: str, cap: int = DEFAULT_READ_CAP) -> bytes | None:
        """A regular file's bytes, no symlink anywhere in the path; None when absent."""
        try:
            fd, name = self._parent(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            try:
                ffd = os.open(name, os.O_RDONLY | _OPEN_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise self._symlink_refused(path) from None
                raise
        finally:
            os.close(fd)
        try:
            st = os.fstat(ffd)
            if not stat.S_ISREG(st.st_mode):
                raise _not_regular(self.label, path, describe_mode(st.st_mode))
            data = None if st.st_size > cap else _read_to_end(ffd, st.st_size, cap)
            if data is None:
                raise _too_large(self.label, path, cap)
            return data
        finally:
            os.close(ffd)

    def _readlink(self, path: str) -> str | None:
        return self.readlink_strict(path)

    def readlink_strict(self, path: str) -> str | None:
        """The target of the symlink `path` (not followed); None when it is not a symlink."""
        try:
            fd, name = self._parent(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            return os.readlink(name, dir_fd=fd)
        except OSError:
            return None
        finally:
            os.close(fd)

    def replace_file(
        self, path: str, data: bytes, mode: int = 0o644, dir_mode: int = 0o755
    ) -> list[str]:
        """Atomically replace `path` (tmp file O_EXCL in the same directory, fsync, rename,
        fsync the directory); missing directories are created with `dir_mode`. The ones
        created, deepest first. Never follows a symlink; a symlink at `path` is refused."""
        folder = path.rstrip("/").rpartition("/")[0] or "/"
        created = self.makedirs(folder, dir_mode)
        fd, name = self._parent(path)
        try:
            if self._lkind_at(fd, name) not in (None, "file"):
                raise HostError(
                    f"{self.label}: {shown(path)} is not a regular file; refusing to replace it"
                )
            write_replace_at(fd, name, data, mode)
        finally:
            os.close(fd)
        return created

    @staticmethod
    def _lkind_at(fd: int, name: str) -> str | None:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return "link"
        return "file" if stat.S_ISREG(st.st_mode) else "other"

    def remove(self, path: str) -> bool:
        """Unlink a file or symlink (never what it points to); False when absent."""
        try:
            fd, name = self._parent(path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        try:
            if self._lkind_at(fd, name) == "other" and stat.S_ISDIR(
                os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            ):
                raise HostError(f"{self.label}: {shown(path)} is a directory; not removing")
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                return False
            os.fsync(fd)
            return True
        finally:
            os.close(fd)

    def rmdir(self, path: str) -> bool:
        """Remove an empty directory; False when absent or not empty (kept)."""
        try:
            fd, name = self._parent(path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                return False
            os.rmdir(name, dir_fd=fd)
            os.fsync(fd)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)

    def symlink(self, path: str, target: str, dir_mode: int = 0o755) -> list[str]:
        """Create (or replace) the symlink `path` -> `target`; created directories returned."""
        folder = path.rstrip("/").rpartition("/")[0] or "/"
        created = self.makedirs(folder, dir_mode)
        fd, name = self._parent(path)
        try:
            kind = self._lkind_at(fd, name)
            if kind not in (None, "link"):
                raise HostError(f"{self.label}: {shown(path)} exists and is not a symlink")
            if kind == "link":
                os.unlink(name, dir_fd=fd)
            os.symlink(target, name, dir_fd=fd)
            os.fsync(fd)
        finally:
            os.close(fd)
        return created


#: A recording as lookup tables, built once and cached (host/tarcache.py): each folder's real
#: host path -> {entry name: what it is}: bytes for a file (its content), str for a symlink (its
#: target), None for a folder (which has its own row), and a 1-tuple saying what it is for
#: anything else (a device, a FIFO, a sparse file). A plain dict of built-in types, so the cache
#: stores and loads it with marshal as it is: a second open builds nothing. Folder by folder
#: rather than one row per path, and with equal names and contents kept once (marshal then
#: writes each once and refers back to it): the seed box's 8,500 members load from 0.8 MB in
#: ~1 ms, where a row per full path took 1.5 MB and 5-8 ms.
_Index = dict[str, dict[str, "bytes | str | tuple[str] | None"]]

_NONE = type(None)
_MISSING = object()


def _index_well_formed(index: object) -> bool:
    """What _IndexBuilder makes, and nothing else: a cache file is data, never trusted blindly.

    Lookups go one name at a time from a folder's row (never "..", never "//", never a name
    holding "/"), so a forged name can only be unreachable; the types are what must hold.
    Each test runs over a whole table in C (map, set), not a Python loop per entry.
    """
    if type(index) is not dict or type(index.get("/")) is not dict:
        return False
    if set(map(type, index)) != {str} or not all(map(str.startswith, index, repeat("/"))):
        return False
    if set(map(type, index.values())) != {dict}:
        return False
    if not set(map(type, chain.from_iterable(index.values()))) <= {str}:
        return False
    kinds = set(map(type, chain.from_iterable(map(dict.values, index.values()))))
    if not kinds <= {bytes, str, _NONE, tuple}:
        return False
    if tuple in kinds:  # rare (devices, FIFOs): only then a loop over the entries
        return all(
            len(value) == 1 and type(value[0]) is str
            for value in chain.from_iterable(map(dict.values, index.values()))
            if type(value) is tuple
        )
    return True


def _index_of(
    kinds: dict[str, str],
    data: dict[str, bytes],
    targets: dict[str, str],
    children: dict[str, set[str]],
) -> _Index:
    """The builder's tables by path as an _Index, every equal name or content one object."""
    texts: dict[object, object] = {}  # names, link targets, what an "other" is
    blobs: dict[bytes, bytes] = {}  # apart: a bytes == str comparison warns under python -b
    text, blob = texts.setdefault, blobs.setdefault
    index: _Index = {}
    for path, kind in kinds.items():
        if kind != "dir":
            continue
        folder = path + "/" if path != "/" else "/"
        row: dict[str, bytes | str | tuple[str] | None] = {}
        for name in children.get(path, ()):
            child = folder + name
            what = kinds[child]
            if what == "file":
                row[text(name, name)] = blob(data[child], data[child])  # type: ignore[index]
            elif what == "link":
                row[text(name, name)] = text(targets[child], targets[child])  # type: ignore
            elif what == "dir":
                row[text(name, name)] = None  # type: ignore[index]
            else:
                other = (targets[child],)
                row[text(name, name)] = text(other, other)  # type: ignore
        index[path] = row
    return index


#: What stands at the top of a plain snapshot (`tar czf snap.tgz -C / sys proc`): there the
#: archive's own root is the host's, where a recording has one top folder holding them.
HOST_TOPS = frozenset({"sys", "proc"})


class _IndexBuilder:
    """Turns tarread's member stream into an _Index, refusing what no real recording holds.

    Where the host's root is. A recording (`xputune record`, hwloc-gather-topology) holds one
    top folder with sys/ and proc/ in it; a plain snapshot (`tar czf snap.tgz -C / sys proc`)
    holds sys/ and proc/ at its top. Members are read as under a top folder, which costs the
    common case nothing; a second name at the top means a snapshot whose root is the archive's
    own: what was read so far moves under its folder, once (_rebase), and at the end the top
    must hold sys/ or proc/. A lone top folder that is itself sys/ or proc/ (a snapshot of one
    tree: `tar czf s.tgz -C / sys`) moves likewise, unless it holds sys/devices as a
    recording's top folder does (a recording named sys).

    A member that repeats an earlier one is read as GNU tar extracts it, which is how an
    archive appended to with `tar -r` (or `tar -A`) reads: a directory again is the same
    directory; a file, link or special member again replaces the earlier one, the last one
    wins; a directory replaces a non-directory, and anything replaces an empty directory.
    Only a directory with members under it cannot be replaced (GNU tar cannot remove it
    either). A file at the top means there is no top folder.
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self.kinds: dict[str, str] = {"/": "dir"}
        self.data: dict[str, bytes] = {}
        self.targets: dict[str, str] = {}
        self.children: dict[str, set[str]] = {"/": set()}
        self.explicit: set[str] = set()  # directories that are members, not only implied
        self.top: str | None = None
        self.plain = False  # the archive's root is the host's (a plain snapshot)

    def build(self, members: Iterable[tuple[str, str, bytes | str]]) -> _Index:
        add = self._add
        for raw_name, kind, payload in members:
            host_path = self._host_path(raw_name)
            if host_path is None:
                continue
            if kind == "hardlink":
                kind, payload = self._hard_link(raw_name, payload)  # type: ignore[arg-type]
            elif kind == "link" and not payload:
                raise self._bad(f"symlink {shown(raw_name)} has an empty target")
            if host_path == "/" and kind != "dir" and self.top is not None:
                self._rebase(self.top)  # a file at the top: no top folder, so a snapshot
                host_path = "/" + self.top
            add(host_path, kind, payload, raw_name)
        if self.top is None:
            raise self._bad("the tarball is empty")
        top = self.top
        if not self.plain and top in HOST_TOPS and self.kinds.get("/sys/devices") != "dir":
            self._rebase(top)
        if self.plain and not self.children["/"] & HOST_TOPS:
            tops = sorted(self.children["/"])
            found = " and ".join(shown(t) for t in tops[:2]) + (", ..." if len(tops) > 2 else "")
            raise self._bad(f"expected one top folder, or sys/ and proc/ at the top; found {found}")
        return _index_of(self.kinds, self.data, self.targets, self.children)

    def _bad(self, why: str) -> RecordingError:
        return RecordingError(f"{self.label}: {why}")

    def _host_path(self, raw_name: str) -> str | None:
        """Where member `raw_name` sits on the host; None for the archive's "./" itself."""
        name = self._name(raw_name)
        if not name:
            return None
        if self.plain:
            rel = name
        else:
            first, _, rel = name.partition("/")
            if self.top is None:
                self.top = first
            elif first != self.top:
                self._rebase(self.top)
                rel = name
        return self._normal(rel, raw_name)

    def _name(self, raw_name: str) -> str:
        name = raw_name[2:] if raw_name.startswith("./") else raw_name
        if name.startswith("/"):
            raise self._bad(f"member {shown(raw_name)} has an absolute name")
        return name.rstrip("/")

    def _normal(self, rel: str, raw_name: str) -> str:
        """`rel` as a host path: no "." or empty components; ".." is a root escape."""
        if "." in rel or "//" in rel:
            parts = rel.split("/")
            if ".." in parts:
                raise RootEscapeError(
                    f"{self.label}: member {shown(raw_name)} leads outside the root"
                )
            rel = "/".join(p for p in parts if p not in ("", "."))
        return "/" + rel if rel else "/"

    def _rebase(self, top: str) -> None:
        """The archive's root is the host's: what was read so far moves under /`top`."""
        head = "/" + top

        def moved(path: str) -> str:
            return head if path == "/" else head + path

        self.kinds = {"/": "dir", **{moved(p): k for p, k in self.kinds.items()}}
        self.data = {moved(p): d for p, d in self.data.items()}
        self.targets = {moved(p): t for p, t in self.targets.items()}
        self.children = {"/": {top}, **{moved(p): c for p, c in self.children.items()}}
        self.explicit = {moved(p) for p in self.explicit}
        self.plain = True

    def _hard_link(self, raw_name: str, target: str) -> tuple[str, bytes | str]:
        """A hard link repeats an earlier member's data (tar stores it once)."""
        where = f"hard link {shown(raw_name)} -> {shown(target)}"
        if not target:
            raise self._bad(f"{where}: empty target")
        try:
            real = self._earlier(target)
        except RecordingError:
            real = None
        kind = self.kinds.get(real) if real else None
        if kind == "file":
            return kind, self.data[real]  # type: ignore[index]
        if kind == "other":
            return kind, self.targets[real]  # type: ignore[index]
        raise self._bad(f"{where}: names no earlier file")

    def _earlier(self, raw_name: str) -> str | None:
        """The host path of an earlier member's name, deciding nothing about the root."""
        name = self._name(raw_name)
        if not self.plain:
            first, _, name = name.partition("/")
            if first != self.top:
                return None
        return self._normal(name, raw_name)

    def _add(self, host_path: str, kind: str, payload: bytes | str, raw_name: str) -> None:
        kinds, children = self.kinds, self.children
        existing = kinds.get(host_path)
        if existing is not None:
            if existing == "dir" and kind == "dir":
                self.explicit.add(host_path)
                return  # the same directory again (GNU tar keeps it)
            self._replace(host_path, existing, kind, raw_name)
        kinds[host_path] = kind
        if kind == "file":
            self.data[host_path] = payload  # type: ignore[assignment]
        elif kind == "dir":
            self.explicit.add(host_path)
        else:
            self.targets[host_path] = payload  # type: ignore[assignment]
        child = host_path
        while child != "/":
            parent, _, name = child.rpartition("/")
            parent = parent or "/"
            kids = children.get(parent)
            if kids is None:
                kids = children[parent] = set()
            elif name in kids:
                break  # already linked, and so are its ancestors
            kids.add(name)
            above = kinds.get(parent)
            if above is None:
                kinds[parent] = "dir"
            elif above != "dir":
                raise self._bad(f"{shown(raw_name)} lies under {parent}, which is not a directory")
            child = parent

    def _replace(self, host_path: str, existing: str, kind: str, raw_name: str) -> None:
        """Drop what `host_path` was, as GNU tar removes it before extracting the repeat."""
        if existing == "dir":
            if self.children.get(host_path):
                raise self._bad(f"{shown(raw_name)} is a {kind} but other members lie under it")
            self.explicit.discard(host_path)
            self.children.pop(host_path, None)
        else:
            self.data.pop(host_path, None)
            self.targets.pop(host_path, None)


#: What the name of a recording file ends in.
TARBALL_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")


class TarView(HostView):
    """A recorded tarball read into memory: one top folder acts as the filesystem root."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.label = path
        from xputune.host import tarcache  # (and zlib, BLAKE2 with it): a folder needs neither

        self._index: _Index = tarcache.index(
            path, lambda members: _IndexBuilder(path).build(members), _index_well_formed
        )
        #: Resolved prefixes (host path -> real path), filled as paths are resolved.
        self._real: dict[str, str] = {}

    def copy_command(self) -> tuple[str, str]:
        """(shell line, folder): a writable copy of this recording in a new folder here.

        `--root FOLDER` reads it (open_host takes the folder tar leaves the recording's top
        folder in), so apply and rollback can change the copy. The folder is the file's name
        without its suffix; plain mkdir, so an existing folder of that name stops the line
        instead of being written into.
        """
        import shlex

        name = posixpath.basename(self.label)
        for suffix in sorted(TARBALL_SUFFIXES, key=len, reverse=True):
            if name.endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)]
                break
        folder = shlex.quote(name if name[:1] not in ("-", ".", "") else f"./{name}")
        return f"mkdir {folder} && tar xf {shlex.quote(self.label)} -C {folder}", folder

    def read_only_error(self) -> HostError:
        line, folder = self.copy_command()
        return HostError(
            f"{self.label} is a read-only recording; to change a copy of it, run: {line}, "
            f"then pass --root {folder}"
        )

    def _realpath(self, path: str) -> str:
        """Resolve within the recording; each prefix is resolved once and remembered.

        The recording never changes, so a prefix's resolution holds for good: the attributes
        of one device (/sys/bus/pci/devices/X/..., X a link up and down the tree) cost one
        dict lookup each, not a walk of the link's target (1,100 reads of the seed box went
        from 14 to 4 ms). A path holding ".." is walked without the cache.
        """
        real = self._real
        found = real.get(path)
        if found is not None:
            return found
        if not path.startswith("/"):
            raise HostError(f"host paths are absolute, got {path!r}")
        head, _, name = path.rpartition("/")
        base = real.get(head) if name not in ("", ".", "..") else None
        if base is not None:  # the folder is resolved: most reads are a file in one
            row = self._index.get(base)
            found = _MISSING if row is None else row.get(name, _MISSING)
            if found is _MISSING:
                raise FileNotFoundError(errno.ENOENT, "no such file", path)
            if type(found) is not str:
                candidate = base + "/" + name if base != "/" else "/" + name
                real[path] = candidate
                return candidate
        parts = [p for p in path.split("/") if p and p != "."]
        if ".." in parts:
            return self._walk("/", parts[::-1], path, None)
        keys = []
        key = ""
        for part in parts:
            key += "/" + part
            keys.append(key)
        done = len(keys)
        while done and keys[done - 1] not in real:
            done -= 1
        base = real[keys[done - 1]] if done else "/"
        # A stack, last component on top; the int under each of the path's own components
        # says which prefix is resolved once that component (and any link it is) is done.
        todo: list[str | int] = []
        for i in range(len(parts) - 1, done - 1, -1):
            todo.append(i)
            todo.append(parts[i])
        return self._walk(base, todo, path, keys)

    def _walk(self, resolved: str, todo: list[str | int], path: str, keys: list[str] | None) -> str:
        """Resolve the components on the stack `todo` (last on top) from `resolved`.

        A link pushes its target's components in O(length), where pop(0) on a
        30,000-component target would be quadratic.
        """
        index, real = self._index, self._real
        follows = 0
        while todo:
            part = todo.pop()
            if type(part) is int:
                real[keys[part]] = resolved  # type: ignore[index]
                continue
            if part == "..":
                if resolved == "/":
                    raise RootEscapeError(f"{self.label}: {path} leads outside the root")
                resolved = resolved.rpartition("/")[0] or "/"
                continue
            row = index.get(resolved)  # None: `resolved` is no folder
            target = _MISSING if row is None else row.get(part, _MISSING)  # type: ignore[arg-type]
            if target is _MISSING:
                raise FileNotFoundError(errno.ENOENT, "no such file", path)
            candidate = resolved + part if resolved == "/" else resolved + "/" + part
            if type(target) is not str:
                resolved = candidate
                continue
            follows += 1
            if follows > MAX_SYMLINKS:
                raise SymlinkLoopError(f"{self.label}: symlink loop at {path}")
            if target.startswith("/"):
                raise RootEscapeError(
                    f"{self.label}: symlink {shown(candidate)} -> {shown(target)} "
                    "points outside the root"
                )
            todo.extend(p for p in reversed(target.split("/")) if p and p != ".")
        return resolved  # type: ignore[return-value]

    def _readlink(self, path: str) -> str | None:
        folder, _, name = path.rstrip("/").rpartition("/")
        try:
            real = self._realpath(folder or "/")
        except (FileNotFoundError, NotADirectoryError):
            return None
        found = self._entry(real.rstrip("/") + "/" + name)
        return found if type(found) is str else None

    def _entry(self, real: str) -> object:
        """What the index holds for the real path `real` (see _Index), or _MISSING."""
        folder, _, name = real.rpartition("/")
        row = self._index.get(folder or "/")
        return _MISSING if row is None or not name else row.get(name, _MISSING)

    def _read(self, real: str) -> bytes:
        data = self._entry(real)
        if data is None or real == "/":
            raise IsADirectoryError(real)
        if type(data) is tuple:
            raise _not_regular(self.label, real, data[0])
        if type(data) is not bytes:  # a real path is never a link; absent: gone
            raise FileNotFoundError(errno.ENOENT, "no such file", real)
        cap = read_cap(real)
        if len(data) > cap:
            raise _too_large(self.label, real, cap)
        return data

    def _listdir(self, real: str) -> list[str]:
        row = self._index.get(real)
        if row is None:
            raise NotADirectoryError(real)
        return list(row)

    def _kind(self, real: str) -> str | None:
        if real == "/":
            return "dir"
        found = self._entry(real)
        if found is _MISSING:
            return None
        if found is None:
            return "dir"
        return "link" if type(found) is str else "file"  # a device or FIFO reads as a file

    def members(self) -> Iterator[tuple[str, str, bytes | str]]:
        """(host path, kind, payload) of every member below the root, folder by folder: kind
        "file" with its bytes, "link" with its target, "dir" with b"", "other" with what it
        is. What `record`'s tests and the cache's compare."""
        for folder, row in self._index.items():
            head = folder if folder != "/" else ""
            for name, value in row.items():
                path = f"{head}/{name}"
                if value is None:
                    yield path, "dir", b""
                elif type(value) is bytes:
                    yield path, "file", value
                elif type(value) is str:
                    yield path, "link", value
                else:
                    yield path, "other", value[0]  # type: ignore[index]


__all__ = ["HOST_TOPS", "TARBALL_SUFFIXES", "DirView", "HostView", "TarView"]
