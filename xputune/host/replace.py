"""Replace a file in a folder held open, so a crash leaves the old file or the new one.

The writers of xputune's own state (journals, the tuning state, caches, the watch agent's
files) and of host files under a view share these. They sit below view.py and usercache.py,
which both use them, so neither has to import the other (view.py keeps the names for its
callers).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable

from xputune.errors import HostError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


#: Temporary files of write_replace_at: "<name>.tmp.<pid>", or ".<name>.tmp.<pid>" when hidden.
TMP_MARK = ".tmp."


def tmp_name(name: str, hidden: bool = False) -> str:
    """The temporary file write_replace_at writes `name` through, in the same directory.

    `hidden` puts a dot in front, for folders other programs read while we write: NFD's
    worker skips dot files and node_exporter reads only *.prom, so neither sees a half file.
    """
    return f"{'.' if hidden else ''}{name}{TMP_MARK}{os.getpid()}"


def write_replace_at(dir_fd: int, name: str, data: bytes, mode: int, hidden: bool = False) -> None:
    """Replace `name` in the directory `dir_fd` so a crash leaves the old or the new file.

    The temporary file (tmp_name) is created O_EXCL|O_NOFOLLOW (a planted file or link is
    never written through), given `mode` on its descriptor whatever the umask (fchmod: a
    name swapped for a symlink cannot redirect it), fsynced, renamed over (a symlink planted
    at `name` is replaced, never followed), and the directory fsynced so the rename survives
    a power cut. A failure removes it again. HostError when what the rename put in place is
    not the file we wrote (the folder's owner swapped the temporary name).
    """
    tmp = tmp_name(name, hidden)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=dir_fd)  # our own leftover (same pid after a kill: pid reuse)
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | _NOFOLLOW, mode, dir_fd=dir_fd
    )
    renamed = False
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        renamed = True
        os.fsync(dir_fd)
        # In a folder others can write to, the temporary name may have been swapped between
        # our open and the rename: then what stands at `name` now is not ours. Compared while
        # our descriptor is still open, so our inode's number cannot have been reused.
        ours = os.fstat(fd)
        try:
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != (ours.st_dev, ours.st_ino):
            raise HostError(
                f"{name} was replaced by another process while being written "
                "(its folder is writable by others); not trusting it"
            )
    except BaseException:
        if not renamed:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
        raise
    finally:
        os.close(fd)


def clean_tmp_at(
    dir_fd: int, names: Iterable[str], hidden: bool = False, min_age: float | None = None
) -> list[str]:
    """Remove leftovers (tmp_name) of killed writers of `names`; the names removed.

    Callers holding the state lock know no live writer owns one and pass no `min_age`.
    Writers without a lock (a metrics textfile that cron and the watch agent both write)
    pass `min_age` seconds: only temporaries untouched that long go, which a live writer's
    (written and renamed within milliseconds) never are. Entries are unlinked by name in
    `dir_fd`, never followed.
    """
    dot = "." if hidden else ""
    wanted = tuple(f"{dot}{n}{TMP_MARK}" for n in names)
    now = time.time()
    removed = []
    for entry in os.listdir(dir_fd):
        if not (entry.startswith(wanted) and entry.rpartition(TMP_MARK)[2].isdecimal()):
            continue
        with contextlib.suppress(FileNotFoundError):
            if min_age is not None:
                st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
                if now - st.st_mtime < min_age:
                    continue
            os.unlink(entry, dir_fd=dir_fd)
            removed.append(entry)
    if removed:
        os.fsync(dir_fd)
    return removed
