"""Per-user cache files of parsed data: recordings' tables, profiles, built kernels.

One place decides where xputune keeps them ($XPUTUNE_CACHE_DIR, else $XDG_CACHE_HOME/xputune,
else ~/.cache/xputune) and how an entry is written and read. An entry is marshal data written
0600 in 0700 folders through a fresh temporary file and a rename, so a reader never sees half
of one. A cache is only ever a shortcut: an unreadable, oversized or odd entry, an unwritable
folder, or XPUTUNE_CACHE=off all just mean doing the work again, and callers check what they
load as they would check input.
"""

from __future__ import annotations

import contextlib
import marshal
import os


def base_dir() -> str:
    """Where xputune keeps its per-user caches."""
    chosen = os.environ.get("XPUTUNE_CACHE_DIR")
    if chosen:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "xputune")


def enabled() -> bool:
    """False when XPUTUNE_CACHE is off, 0 or no."""
    return os.environ.get("XPUTUNE_CACHE", "").lower() not in ("off", "0", "no")


def load(entry: str, cap: int) -> object | None:
    """The data kept at `entry`, or None (missing, larger than `cap` bytes, not marshal data)."""
    try:
        with open(entry, "rb") as fh:
            packed = fh.read(cap + 1)
        if len(packed) > cap:
            return None
        return marshal.loads(packed)
    except (OSError, ValueError, EOFError, TypeError):
        return None


def store(entry: str, data: object) -> bool:
    """Keep `data` at `entry`; False (and nothing left behind) when it cannot be kept."""
    tmp = f"{entry}.tmp-{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(entry), mode=0o700, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(marshal.dumps(data))  # ValueError: a type marshal cannot keep
        os.replace(tmp, entry)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    return True
