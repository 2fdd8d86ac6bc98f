"""A per-user cache of recordings' lookup tables, so opening one twice costs almost nothing.

Decompressing a bundled 8-card recording, parsing its 8,500 headers and building the view's
tables takes ~45 ms, longer than the whole discovery it serves; `probe`, `plan`, `check` and
`launch --dry-run --example` pay it on every run. The built tables (host/view.py's _Index) are
kept, keyed by the recording's content hash and this Python's marshal format, in
$XDG_CACHE_HOME/xputune (~/.cache/xputune), uncompressed: loading them is one marshal call.
A cache entry is only ever a copy of what the view built from what tarread accepted (so
within its caps), and is checked again on load by the caller's `well_formed`; anything odd
about it, or an unwritable cache directory, just means reading the recording itself.
XPUTUNE_CACHE=off disables it.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import sys
from collections.abc import Callable, Iterator
from typing import TypeVar

from xputune.errors import RecordingError
from xputune.host.tarread import MAX_UNPACKED, Member, iter_members, open_recording

#: Bump when the shape of the cached tables, or how the view builds them, changes.
FORMAT = 2

Index = TypeVar("Index")


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "xputune", "recordings")


def index(
    path: str,
    build: Callable[[Iterator[Member]], Index],
    well_formed: Callable[[object], bool],
) -> Index:
    """build(the recording's members), or its cached result when it holds this recording."""
    if os.environ.get("XPUTUNE_CACHE", "").lower() in ("off", "0", "no"):
        return build(iter_members(path))
    entry = os.path.join(cache_dir(), _key(path))
    found = _load(entry)
    if found is not None and well_formed(found):
        return found  # type: ignore[return-value]
    built = build(iter_members(path))
    _store(entry, built)
    return built


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


def _load(entry: str) -> object | None:
    try:
        with open(entry, "rb") as fh:
            packed = fh.read(MAX_UNPACKED + 1)
        if len(packed) > MAX_UNPACKED:
            return None
        return marshal.loads(packed)
    except (OSError, ValueError, EOFError, TypeError):
        return None


def _store(entry: str, built: object) -> None:
    folder = os.path.dirname(entry)
    tmp = f"{entry}.tmp-{os.getpid()}"
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(marshal.dumps(built))
        os.replace(tmp, entry)
        _drop_stale(folder, os.path.basename(entry))
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _drop_stale(folder: str, kept: str) -> None:
    """Remove this recording's entries of other formats (an older xputune or Python left)."""
    digest = kept.split("-", 1)[0] + "-"
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if name.startswith(digest) and name != kept and ".tmp-" not in name:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))
