"""Caches of work xputune would otherwise redo: recordings' tables, profiles, built kernels.

xputune runs as root, so a cache is code and configuration it will act on: it must never come
from a place another user can write. This module is the one that decides where caches live
and the only reader and writer of their entries.

Where: $XPUTUNE_CACHE_DIR when set; else, for root, /var/cache/xputune (root never follows
HOME or XDG_CACHE_HOME, which sudo may leave pointing at another user's files); else
$XDG_CACHE_HOME/xputune or ~/.cache/xputune. Whatever the source, the folder is used only when
every folder above it is owned by root or this user and writable by nobody else (a sticky
root-owned one such as /tmp excepted), and it and each cache's subfolder are this user's,
mode 0700 (created so; tightened through the descriptor when looser). The checks run on
descriptors opened without following links, and every entry is then opened relative to the
checked folder's descriptor, so nothing swapped in after a check is ever used.

An entry is opened O_NOFOLLOW and loaded only when it is a regular file of this user, with one
link, writable by nobody else and within its size cap; a data entry then needs its header
(magic, payload length, CRC-32 of the payload) to hold before marshal sees a byte, and any
failure of marshal counts as a bad entry. The checksum is there for an entry cut short or
damaged on disk (a torn write, a bad sector, a bit flipped in the page cache), which CRC-32
catches, every error of up to 32 bits among them; against another writer the folder and entry
checks are the guard, since whoever can write an entry can write its checksum too, a
cryptographic one included. (SHA-256 was used before: importing hashlib loads OpenSSL, which
with hashing an entry cost a bundled-recording probe ~4 ms; zlib's CRC-32 ~0.5 ms.)

The files installed with xputune that hold code (the libraries built with the wheel) are opened
through the same checks (open_installed), root's files trusted as well as this user's.

A refused folder or entry means doing the work again, with one warning on stderr naming the
path and why; the entry is then rewritten (through a fresh 0600 file and a rename). An entry
an older xputune wrote is rebuilt without a warning. XPUTUNE_CACHE=off turns the data caches
off.
"""

from __future__ import annotations

import contextlib
import errno
import marshal
import os
import stat
import struct
import sys
import zlib
from collections.abc import Callable

from xputune.host.replace import TMP_MARK, write_replace_at
from xputune.tuples import NamedTuple

#: Root's default cache folder (root never uses a HOME-based one).
ROOT_DIR = "/var/cache/xputune"
#: An entry: magic, payload length, CRC-32 of the payload, then the marshal payload.
_MAGIC = b"xputune\x02"
_HEADER = struct.Struct("<8sQI")
#: The magic of entries an older xputune wrote (SHA-256 headers): not refused, just rebuilt.
_OLDER = (b"xputune\x01",)

_PATH = getattr(os, "O_PATH", os.O_RDONLY)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_ENTRY_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | _NOFOLLOW

_warned: set[str] = set()
_folders: dict[str, tuple[Folder, int, int]] = {}
_private: dict[str, Folder] = {}


class Folder(NamedTuple):
    """A checked cache folder: a descriptor on it, and its real path (for a compiler's -o)."""

    fd: int
    path: str


def base_dir() -> str:
    """Where xputune keeps its caches for the user running it (see the module docstring)."""
    chosen = os.environ.get("XPUTUNE_CACHE_DIR")
    if chosen:
        return chosen
    if os.geteuid() == 0:
        return ROOT_DIR
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "xputune")


def enabled() -> bool:
    """False when XPUTUNE_CACHE is off, 0 or no."""
    return os.environ.get("XPUTUNE_CACHE", "").lower() not in ("off", "0", "no")


def warn(message: str) -> None:
    """One line on stderr, once per process for each message: a cache is never worth more."""
    if message not in _warned:
        _warned.add(message)
        sys.stderr.write(f"xputune: warning: {message}\n")


def _shown(path: str) -> str:
    """A path as a message prints it: escaped when it holds control characters."""
    return path if path.isprintable() else ascii(path)[1:-1]


# -- folders ----------------------------------------------------------------------------------


def folder(kind: str) -> Folder | None:
    """The checked folder of one cache ("recordings", "profiles", "kernels"), or None.

    None means no cache of that kind for this run; why was said once on stderr. A folder
    checked earlier in this process is reused while its path still leads to it.
    """
    path = os.path.join(base_dir(), kind)
    known = _folders.get(path)
    if known is not None:
        with contextlib.suppress(OSError):
            st = os.stat(path)
            if (st.st_dev, st.st_ino) == known[1:]:
                return known[0]
        del _folders[path]  # its descriptor stays open: a caller may still hold the Folder
    found = checked(path, own=2, create=True, tighten=True)
    if found is not None:
        st = os.fstat(found.fd)
        _folders[path] = (found, st.st_dev, st.st_ino)
    return found


def checked(path: str, own: int = 1, create: bool = False, tighten: bool = False) -> Folder | None:
    """`path` as a Folder when it can be trusted, else None and one warning saying why.

    Its last `own` components must belong to this user and be 0700 (created so when missing
    and `create`; when looser, tightened if `tighten`, else refused); every folder above
    them to root or this user, writable by nobody else unless root's and sticky. Links in
    `path` are resolved first; the walk then opens one component at a time without following
    any, so a link swapped in afterwards is refused, never followed.
    """
    real = os.path.realpath(path)
    try:
        return Folder(_walk(real, own, create, tighten), real)
    except _Refused as why:
        warn(f"no cache this run: {why}")  # names the folder at fault: once for all kinds
    return None


class _Refused(Exception):
    """Why a folder is not trusted (the text of a warning, naming the folder at fault)."""


def _walk(real: str, own: int, create: bool, tighten: bool) -> int:
    parts = [p for p in real.split("/") if p]
    euid = os.geteuid()
    fd = os.open("/", _PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            _check_above(os.fstat(fd), euid)
        except _Refused as why:
            raise _Refused(f"/ {why}") from None
        for i, part in enumerate(parts):
            mine = i >= len(parts) - own
            here = "/" + "/".join(parts[: i + 1])
            flags = (os.O_RDONLY if mine else _PATH) | os.O_DIRECTORY | _NOFOLLOW | os.O_CLOEXEC
            try:
                nfd = _open_or_make(part, flags, fd, create)
                os.close(fd)
                fd = nfd
                st = os.fstat(fd)
                if mine:
                    _own(fd, here, st, euid, tighten)
                else:
                    _check_above(st, euid)
            except _Refused as why:
                raise _Refused(f"{_shown(here)} {why}") from None
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    raise _Refused(f"{_shown(here)} is not a directory") from None
                raise _Refused(f"{_shown(here)}: {exc.strerror or exc}") from None
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_or_make(name: str, flags: int, dir_fd: int, create: bool) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise _Refused("does not exist") from None
    with contextlib.suppress(FileExistsError):  # another run made it first
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    return os.open(name, flags, dir_fd=dir_fd)


def _check_above(st: os.stat_result, euid: int) -> None:
    """A folder above a cache: root's or ours, and nobody else may write to it."""
    if st.st_uid not in (0, euid):
        raise _Refused(f"is owned by uid {st.st_uid}")
    if st.st_mode & 0o022 and not (st.st_uid == 0 and st.st_mode & stat.S_ISVTX):
        raise _Refused(f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})")


def _own(fd: int, here: str, st: os.stat_result, euid: int, tighten: bool) -> None:
    """The cache folder itself: ours, and 0700 from now on."""
    if st.st_uid != euid:
        raise _Refused(f"is owned by uid {st.st_uid}, not by this user (uid {euid})")
    mode = stat.S_IMODE(st.st_mode)
    if mode != 0o700:
        if not tighten:
            raise _Refused(f"has mode {mode:04o}, not 0700")
        os.fchmod(fd, 0o700)
        if mode & 0o022:
            warn(f"cache {_shown(here)} was writable by others (mode {mode:04o}); now 0700")


def private(kind: str) -> Folder | None:
    """A fresh checked folder for this run only, removed at exit (when the cache is refused)."""
    if kind in _private:
        return _private[kind]
    import atexit  # only when the cache is refused: start-up never pays for these imports
    import shutil
    import tempfile

    for parent in dict.fromkeys((tempfile.gettempdir(), "/tmp")):
        try:
            made = tempfile.mkdtemp(prefix=f"xputune-{kind}-", dir=parent)
        except OSError:
            continue
        atexit.register(shutil.rmtree, made, True)
        found = checked(made)
        if found is not None:
            _private[kind] = found
            return found
    return None


# -- entries ----------------------------------------------------------------------------------


def open_entry(where: Folder, name: str, cap: int) -> int | None:
    """A descriptor on entry `name` when it may be trusted, else None (one warning if present).

    Trusted: a regular file (not followed through a link) of this user with one link,
    writable by nobody else, of at most `cap` bytes. Opened O_NONBLOCK: a planted FIFO
    never blocks the open.
    """
    shown = _shown(os.path.join(where.path, name))
    try:
        fd = os.open(name, _ENTRY_FLAGS, dir_fd=where.fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = "a symbolic link" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        warn(f"cache entry {shown} refused ({why}); rebuilt")
        return None
    why = _entry_fault(os.fstat(fd), cap)
    if why:
        os.close(fd)
        warn(f"cache entry {shown} refused ({why}); rebuilt")
        return None
    return fd


def _entry_fault(st: os.stat_result, cap: int, root_too: bool = False) -> str | None:
    """Why an entry may not be loaded, or None; `root_too` also trusts root's files."""
    euid = os.geteuid()
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if root_too and st.st_uid not in (0, euid):
        return f"owned by uid {st.st_uid}, not by root or this user (uid {euid})"
    if not root_too and st.st_uid != euid:
        return f"owned by uid {st.st_uid}, not by this user (uid {euid})"
    if st.st_mode & 0o022:
        return f"writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    if st.st_nlink != 1:
        return f"{st.st_nlink} hard links"
    if st.st_size > cap:
        return f"larger than {cap} bytes"
    return None


def open_installed(path: str, cap: int, instead: str) -> int | None:
    """A descriptor on `path`, a file installed with xputune, when it may be trusted, else None.

    The package's own files (the libraries built with the wheel) hold code that root runs, so
    they get the cache's checks, with root's files trusted too (root installs packages): every
    folder from / down is root's or this user's and writable by nobody else (a sticky
    root-owned one such as /tmp excepted, but never the file's own folder), and the file,
    opened without following links, is a regular file of root or this user with one link,
    writable by nobody else, of at most `cap` bytes. None without a word when it is absent;
    when refused, one warning naming the place at fault and what is done `instead`.
    """
    real_dir = os.path.realpath(os.path.dirname(path))
    name = os.path.basename(path)
    try:
        return _open_installed(real_dir, name, cap)
    except FileNotFoundError:
        return None
    except _Refused as why:
        warn(f"installed {_shown(os.path.join(real_dir, name))} refused ({why}); {instead}")
    return None


def _open_installed(real_dir: str, name: str, cap: int) -> int:
    dir_fd = _walk(real_dir, 0, False, False)
    try:
        mode = stat.S_IMODE(os.fstat(dir_fd).st_mode)
        if mode & 0o022:  # sticky or not: its own folder is where a file would be swapped
            raise _Refused(f"{_shown(real_dir)} is writable by others (mode {mode:04o})")
        try:
            fd = os.open(name, _ENTRY_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise _Refused(
                "a symbolic link" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
            ) from None
    finally:
        os.close(dir_fd)
    fault = _entry_fault(os.fstat(fd), cap, root_too=True)
    if fault:
        os.close(fd)
        raise _Refused(fault)
    return fd


def load(kind: str, name: str, cap: int) -> object | None:
    """The data kept as entry `name` of cache `kind`, or None (missing, refused, cache off).

    `cap` bounds the payload. The header's length and hash are checked before marshal reads
    a byte, so only what store() wrote is ever unmarshalled; anything else is refused.
    """
    where = folder(kind) if enabled() else None
    if where is None:
        return None
    fd = open_entry(where, name, cap + _HEADER.size)
    if fd is None:
        return None
    try:
        blob = _read_all(fd, cap + _HEADER.size)
    except OSError:
        blob = b""
    finally:
        os.close(fd)
    shown = _shown(os.path.join(where.path, name))
    why = _blob_fault(blob)
    if why == _STALE:
        return None  # written by an older xputune: rebuilt without a word
    if why is None:
        try:
            return marshal.loads(memoryview(blob)[_HEADER.size :])
        except Exception as exc:  # any failure at all: not data this module wrote
            why = f"unreadable ({type(exc).__name__})"
    warn(f"cache entry {shown} refused ({why}); rebuilt")
    return None


def _read_all(fd: int, cap: int) -> bytes:
    """Up to EOF, at most cap + 1 bytes (so a file grown since its fstat shows as too long)."""
    chunks = []
    total = 0
    want = min(os.fstat(fd).st_size, cap) + 1  # sized reads: no buffer of `cap` bytes
    while total <= cap and (chunk := os.read(fd, want)):
        chunks.append(chunk)
        total += len(chunk)
        want = min(1 << 16, cap + 1 - total)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


_STALE = "an older xputune's entry"


def _blob_fault(blob: bytes) -> str | None:
    if len(blob) < _HEADER.size:
        return "shorter than its header"
    magic, length, checksum = _HEADER.unpack_from(blob)
    if magic != _MAGIC:
        return _STALE if magic in _OLDER else "no xputune cache header"
    if length != len(blob) - _HEADER.size:
        return f"payload of {len(blob) - _HEADER.size} bytes where the header says {length}"
    if zlib.crc32(memoryview(blob)[_HEADER.size :]) != checksum:
        return "payload does not match its checksum"
    return None


def store(kind: str, name: str, data: object, cap: int) -> bool:
    """Keep `data` as entry `name` of cache `kind`; False when it is not kept (nothing left).

    Data larger than `cap` (what load would accept) is not kept.
    """
    where = folder(kind) if enabled() else None
    if where is None:
        return False
    try:
        blob = pack(data)
    except ValueError:  # a type marshal cannot keep
        return False
    if len(blob) > cap + _HEADER.size:
        return False
    try:
        write_replace_at(where.fd, name, blob, 0o600)
    except OSError:
        return False
    return True


def pack(data: object) -> bytes:
    """An entry's bytes: header (magic, payload length, CRC-32 of the payload), then payload."""
    payload = marshal.dumps(data)
    return _HEADER.pack(_MAGIC, len(payload), zlib.crc32(payload)) + payload


def prune(kind: str, stale: Callable[[str], bool]) -> None:
    """Remove the entries of cache `kind` whose name is `stale` (older formats)."""
    where = folder(kind) if enabled() else None
    if where is None:
        return
    with contextlib.suppress(OSError):
        for name in os.listdir(where.fd):
            if TMP_MARK not in name and stale(name):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=where.fd)
