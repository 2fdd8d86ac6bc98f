"""Write a file so that a reader (node_exporter, NFD's worker) sees the old or the new one.

The text goes to a hidden temporary file in the same folder (NFD skips dot files, node_exporter
reads only *.prom), is flushed to disk, then renamed over the target: rename within one file
system is atomic. A failure leaves the old file as it was and no temporary behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

from xputune.errors import PermissionRequired, XputuneError


def write_atomic(folder: str, name: str, text: str, mode: int = 0o644) -> str:
    """Put `text` at folder/name atomically; the path written. Strict: one clear error."""
    if not os.path.isdir(folder):
        raise XputuneError(f"{folder}: no such directory")
    target = os.path.join(folder, name)
    if os.path.isdir(target):
        raise XputuneError(f"{target} is a directory; not writing")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    except PermissionError as exc:
        raise PermissionRequired(f"{folder}: permission denied writing {name}") from exc
    except OSError as exc:
        raise XputuneError(f"{folder}: cannot write {name}: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise XputuneError(f"{target}: cannot write: {exc.strerror or exc}") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # the rename itself survives a crash once the folder is synced
    with contextlib.suppress(OSError):
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return target
