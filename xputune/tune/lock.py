"""One apply or rollback at a time per host: an flock on <state dir>/lock.

flock is released by the kernel when the holder dies (even by kill -9), so a crash never leaves
a stale lock behind; the pid written into the file is only for the message.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from types import TracebackType

from xputune.errors import HostError
from xputune.tune.errors import LockBusy
from xputune.tune.state import open_state_fd

LOCK = "lock"


class StateLock:
    """Context manager holding the state-dir lock; `wait` blocks instead of failing."""

    def __init__(self, folder: str, wait: bool = False, name: str = LOCK) -> None:
        self.folder = folder
        self.name = name  # another file for another role (the watch agent's own lock)
        self.path = os.path.join(folder, name)
        self.wait = wait
        self._fd: int | None = None

    def holder(self) -> str:
        """ "pid N" of the process holding the lock, as far as its file tells.

        The holder writes its pid just after it takes the lock, so a file found empty is
        read again for a moment before the pid is called unknown.
        """
        for attempt in range(20):
            try:
                fd = self._open(os.O_RDONLY)
                try:
                    pid = os.read(fd, 32).decode("ascii", "replace").strip()
                finally:
                    os.close(fd)
            except (OSError, HostError):
                return "unknown pid"
            if pid.isdigit():
                return f"pid {pid}"
            if pid or attempt == 19:
                return "unknown pid"
            time.sleep(0.005)
        return "unknown pid"

    def _open(self, flags: int) -> int:
        """The lock file, opened relative to the state dir's descriptor, never through a
        symlink, and only when it is a regular file (a FIFO or device is not opened to wait)."""
        dir_fd = open_state_fd(self.folder)
        try:
            fd = os.open(
                self.name,
                flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
                0o600,
                dir_fd=dir_fd,
            )
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):
                raise HostError(
                    f"{self.path} is a symlink or special file; refusing to lock through it "
                    "(nothing was changed; move it away and retry)"
                ) from None
            raise
        finally:
            os.close(dir_fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise HostError(f"{self.path} is not a regular file; refusing to lock it")
        return fd

    def __enter__(self) -> StateLock:
        fd = self._open(os.O_RDWR | os.O_CREAT)
        try:
            flags = fcntl.LOCK_EX if self.wait else fcntl.LOCK_EX | fcntl.LOCK_NB
            try:
                fcntl.flock(fd, flags)
            except BlockingIOError:
                raise LockBusy(
                    f"another xputune apply or rollback is running ({self.holder()}); "
                    "nothing was changed. Wait for it, or pass --wait to queue behind it"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd is not None:
            # The pid is left in place: it is only read while someone holds the lock.
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
