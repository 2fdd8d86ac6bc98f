"""A per-user cache of recordings' lookup tables, so opening one twice costs almost nothing.

Decompressing a bundled 8-card recording, parsing its 8,500 headers and building the view's
tables takes ~45 ms, longer than the whole discovery it serves; `probe`, `plan`, `check` and
`launch --dry-run --example` pay it on every run. The built tables (host/view.py's _Index) are
kept, keyed by the recording's content hash and this Python's marshal format, in the user's
cache (host/usercache.py), uncompressed: loading them is one marshal call (~1 ms).
usercache loads only an entry it wrote itself into a folder nobody else can write (owner, mode,
no link, header and checksum); the tables are then checked again by the caller's
`well_formed`, as any input would be. Anything odd about an entry, or a refused or unwritable
cache folder, just means reading the recording itself. XPUTUNE_CACHE=off disables it.

The key is a BLAKE2b digest of the recording's bytes: a recording someone else made must not
be able to collide with another's entry, so a cryptographic hash, and CPython's own BLAKE2
(module _blake2), because importing hashlib loads OpenSSL first, ~3 ms of a 60 ms probe.
"""

from __future__ import annotations

import marshal
import os
import sys
from collections.abc import Callable, Iterator

from xputune.errors import RecordingError
from xputune.host import usercache
from xputune.host.tarread import MAX_UNPACKED, Member, iter_members, open_recording

try:
    from _blake2 import blake2b
except ImportError:  # a Python built without its own BLAKE2
    from hashlib import blake2b

#: Bump when the shape of the cached tables, or how the view builds them, changes.
#: (3: entries carry usercache's header; 4: a row per folder, equal values kept once.)
FORMAT = 4
KIND = "recordings"

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: start-up time
if TYPE_CHECKING:
    from typing import TypeVar

    Index = TypeVar("Index")


def index(
    path: str,
    build: Callable[[Iterator[Member]], Index],
    well_formed: Callable[[object], bool],
) -> Index:
    """build(the recording's members), or its cached result when it holds this recording."""
    if not usercache.enabled():
        return build(iter_members(path))
    entry = _key(path)
    found = usercache.load(KIND, entry, MAX_UNPACKED)
    if found is not None and well_formed(found):
        return found  # type: ignore[return-value]
    built = build(iter_members(path))
    if usercache.store(KIND, entry, built, MAX_UNPACKED):
        usercache.prune(KIND, lambda name: _stale(name, entry))
    return built


def _stale(name: str, entry: str) -> bool:
    """This recording's entries of other formats (an older xputune or Python left them), and
    any of formats 1-3, keyed by a SHA-256 this xputune no longer computes: no recording
    opened again would ever name them."""
    if name == entry:
        return False
    if name.startswith(entry.split("-", 1)[0] + "-"):
        return True
    return name.rsplit("-f", 1)[-1] in ("1", "2", "3")


def _key(path: str) -> str:
    """Content hash plus marshal format; opened as tarread opens it (never waits on a FIFO)."""
    fd = open_recording(path)
    hasher = blake2b(digest_size=16)
    try:
        while chunk := os.read(fd, 1 << 20):
            hasher.update(chunk)
    except OSError as exc:
        raise RecordingError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    finally:
        os.close(fd)
    digest = hasher.hexdigest()
    return f"{digest}-{sys.implementation.cache_tag}-m{marshal.version}-f{FORMAT}"
