"""One apply or rollback at a time per host: an flock on <state dir>/lock.

flock is released by the kernel when the holder dies (even by kill -9), so a crash never leaves
a stale lock behind; the pid written into the file is only for the message.
"""

from __future__ import annotations

import fcntl
import os
from types import TracebackType

from xputune.tune.errors import LockBusy

LOCK = "lock"


class StateLock:
    """Context manager holding the state-dir lock; `wait` blocks instead of failing."""

    def __init__(self, folder: str, wait: bool = False) -> None:
        self.path = os.path.join(folder, LOCK)
        self.wait = wait
        self._fd: int | None = None

    def holder(self) -> str:
        try:
            with open(self.path, encoding="ascii") as fh:
                pid = fh.read().strip()
        except OSError:
            return "unknown pid"
        return f"pid {pid}" if pid.isdigit() else "unknown pid"

    def __enter__(self) -> StateLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
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
