"""Where xputune keeps its own state (journal, lock) and how it writes it crash-safely.

The state directory is /var/lib/xputune on the live host and <root>/var/lib/xputune under
--root, so a fixture carries its own journal and tests never touch the machine's. These are
xputune's files, not host settings, so they are written directly rather than through the host
view (which can only change files that already exist).
"""

from __future__ import annotations

import os

from xputune.errors import HostError
from xputune.host import HostView

STATE_DIR = "/var/lib/xputune"


def fs_path(view: HostView, host_path: str) -> str:
    """The filesystem path of a host path under the view's root (writable views only)."""
    root = getattr(view, "root", None)
    if not isinstance(root, str) or not view.writable():
        raise HostError(f"{view.label} is read-only; extract it to a directory to change it")
    return root.rstrip("/") + host_path  # the live root "/" adds nothing


def state_dir(view: HostView, create: bool = True) -> str:
    """The state directory's filesystem path, created 0700 when `create`."""
    path = fs_path(view, STATE_DIR)
    if create:
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise HostError(f"cannot create state directory {path}: {exc.strerror}") from exc
    return path


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new file.

    Temp file in the same directory, fsync, rename over, fsync the directory (so the rename
    itself survives a power cut). The mode is set explicitly, whatever the umask.
    """
    folder = os.path.dirname(path) or "."
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(folder)
