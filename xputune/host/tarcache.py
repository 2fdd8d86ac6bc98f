"""A per-user cache of recordings' member tables, so opening one twice costs almost nothing.

Decompressing a bundled 8-card recording and parsing its 8,500 headers takes ~50 ms, longer
than the whole discovery it serves; `plan`, `check` and `launch --dry-run --example` pay it on
every run. The parsed table is kept, keyed by the recording's content hash and this Python's
marshal format, in $XDG_CACHE_HOME/xputune (~/.cache/xputune). A cache entry is only ever a
copy of what tarread accepted (so within its caps) and is checked again on load; anything odd
about it, or an unwritable cache directory, just means reading the recording itself.
XPUTUNE_CACHE=off disables it.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import sys
import zlib

from xputune.errors import RecordingError
from xputune.host.tarread import (
    MAX_MEMBERS,
    MAX_UNPACKED,
    Member,
    iter_members,
    open_recording,
)

#: Bump when the shape of a cached table changes.
FORMAT = 1
_KINDS = frozenset({"file", "dir", "link", "hardlink", "other"})


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "xputune", "recordings")


def members(path: str) -> list[Member]:
    """The recording's members, from the cache when it holds this exact recording."""
    if os.environ.get("XPUTUNE_CACHE", "").lower() in ("off", "0", "no"):
        return list(iter_members(path))
    key = _key(path)
    entry = os.path.join(cache_dir(), key)
    found = _load(entry)
    if found is not None:
        return found
    table = list(iter_members(path))
    _store(entry, table)
    return table


def _key(path: str) -> str:
    """Content hash plus marshal format; opened as tarread opens it (never waits on a FIFO)."""
    fd = open_recording(path)
    hasher = hashlib.sha256()
    try:
        while chunk := os.read(fd, 1 << 20):
            hasher.update(chunk)
    except OSError as exc:
        raise RecordingError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    finally:
        os.close(fd)
    digest = hasher.hexdigest()[:32]
    return f"{digest}-{sys.implementation.cache_tag}-m{marshal.version}-f{FORMAT}"


def _load(entry: str) -> list[Member] | None:
    try:
        with open(entry, "rb") as fh:
            packed = fh.read(MAX_UNPACKED + 1)
        if len(packed) > MAX_UNPACKED:
            return None
        inflater = zlib.decompressobj()
        raw = inflater.decompress(packed, MAX_UNPACKED + 1)
        if len(raw) > MAX_UNPACKED or not inflater.eof:
            return None
        table = marshal.loads(raw)
    except (OSError, zlib.error, ValueError, EOFError, TypeError):
        return None
    return table if _well_formed(table) else None


def _well_formed(table: object) -> bool:
    """What tarread yields, and nothing else: a cache file is data, never trusted blindly."""
    if not isinstance(table, list) or len(table) > MAX_MEMBERS:
        return False
    for item in table:
        if not (
            isinstance(item, tuple)
            and len(item) == 3
            and isinstance(item[0], str)
            and item[1] in _KINDS
            and isinstance(item[2], (bytes if item[1] in ("file", "dir") else str))
        ):
            return False
    return True


def _store(entry: str, table: list[Member]) -> None:
    folder = os.path.dirname(entry)
    tmp = f"{entry}.tmp-{os.getpid()}"
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(zlib.compress(marshal.dumps(table), 1))
        os.replace(tmp, entry)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
