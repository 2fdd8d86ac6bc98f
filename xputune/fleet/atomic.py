"""Write a file so that a reader (node_exporter, NFD's worker) sees the old or the new one.

xputune writes these as root into folders that often belong to someone else (node_exporter's
textfile folder, NFD's features.d), so whoever owns the folder may rename, replace or plant
entries in it while we write. Everything therefore goes through one descriptor:

- The folder is opened once, O_DIRECTORY. Symlinks in the path the operator named are
  followed (a textfile folder behind a link is a common layout, and the path is the
  operator's choice, like any path given on a command line); from then on every step is
  relative to that descriptor, so swapping the folder afterwards redirects nothing.
- The text goes to a hidden temporary file in it (NFD skips dot files, node_exporter reads
  only *.prom), created O_EXCL|O_NOFOLLOW, given its mode with fchmod on the descriptor (a
  temporary name swapped for a symlink cannot lend our chmod to another file), flushed to
  disk, then renamed over the target: rename within one file system is atomic, and a symlink
  planted at the target's name is replaced, not followed. The folder is fsynced after, and
  what then stands at the name must be the file we wrote (the owner may have swapped the
  temporary name for its own entry): else one clear error, and nothing of ours is followed.
- New files are root's own (we create them), so nothing needs fchown.
- A writer killed half-way leaves a hidden temporary; the next write removes those older than
  a minute (a live writer's lasts milliseconds; two writers, cron and `xputune watch`, may
  share the folder without a lock).

A failure leaves the old file as it was and no temporary of ours behind.
"""

from __future__ import annotations

import errno
import os

from xputune.errors import HostError, PermissionRequired, XputuneError
from xputune.host.view import clean_tmp_at, write_replace_at

#: Temporaries of killed writers older than this are removed by the next write (seconds).
STALE_TMP_AGE = 60.0


def _open_folder(folder: str) -> int:
    """A descriptor on the folder the operator named; one clear error otherwise."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except PermissionError as exc:
        raise PermissionRequired(f"{folder}: permission denied") from exc
    except (FileNotFoundError, NotADirectoryError):
        raise XputuneError(f"{folder}: no such directory") from None
    except OSError as exc:
        raise XputuneError(f"{folder}: cannot open: {exc.strerror}") from exc
    return fd


def write_atomic(folder: str, name: str, text: str, mode: int = 0o644) -> str:
    """Put `text` at folder/name atomically; the path written. Strict: one clear error."""
    if not name or "/" in name or name in (".", ".."):
        raise XputuneError(f"{name!r} is not a file name")
    target = os.path.join(folder, name)
    data = text.encode("utf-8")
    dir_fd = _open_folder(folder)
    try:
        clean_tmp_at(dir_fd, (name,), hidden=True, min_age=STALE_TMP_AGE)
        write_replace_at(dir_fd, name, data, mode, hidden=True)
    except HostError as exc:
        raise XputuneError(os.path.join(folder, str(exc))) from None
    except PermissionError as exc:
        raise PermissionRequired(f"{folder}: permission denied writing {name}") from exc
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise XputuneError(f"{target} is a directory; not writing") from None
        raise XputuneError(f"{target}: cannot write: {exc.strerror or exc}") from exc
    finally:
        os.close(dir_fd)
    return target
