"""A per-user cache of recordings' lookup tables, so opening one twice costs almost nothing.

Decompressing a bundled 8-card recording, parsing its 8,500 headers and building the view's
tables takes ~45 ms, longer than the whole discovery it serves; `probe`, `plan`, `check` and
`launch --dry-run --example` pay it on every run. The built tables (host/view.py's _Index) are
kept, keyed by the recording's content hash and this Python's marshal format, in the user's
cache (host/usercache.py), uncompressed: loading them is one marshal call.
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
from xputune.host import usercache
from xputune.host.tarread import MAX_UNPACKED, Member, iter_members, open_recording

#: Bump when the shape of the cached tables, or how the view builds them, changes.
FORMAT = 2

Index = TypeVar("Index")


def cache_dir() -> str:
    return os.path.join(usercache.base_dir(), "recordings")


def index(
    path: str,
    build: Callable[[Iterator[Member]], Index],
    well_formed: Callable[[object], bool],
) -> Index:
    """build(the recording's members), or its cached result when it holds this recording."""
    if not usercache.enabled():
        return build(iter_members(path))
    entry = os.path.join(cache_dir(), _key(path))
    found = usercache.load(entry, MAX_UNPACKED)
    if found is not None and well_formed(found):
        return found  # type: ignore[return-value]
    built = build(iter_members(path))
    if usercache.store(entry, built):
        _drop_stale(cache_dir(), os.path.basename(entry))
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


def _drop_stale(folder: str, kept: str) -> None:
    """Remove this recording's entries of other formats (an older xputune or Python left)."""
    digest = kept.split("-", 1)[0] + "-"
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if name.startswith(digest) and name != kept and ".tmp-" not in name:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))
