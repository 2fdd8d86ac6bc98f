"""A cage for running xputune's CLI in-process on hostile arguments, as root, on a real machine.

The argument fuzz (test_arg_fuzz.py) hands every command empty paths, FIFOs, huge numbers and
worse. A bug there must show up as a failed test, never as a changed machine, a started
program or a hung run. Inside `Cage`:

1. No process starts and no signal is sent: an audit hook refuses os.exec*, os.posix_spawn*,
   os.spawn*, os.system, os.fork*, subprocess.Popen, os.kill and socket connections. A start
   is refused as FileNotFoundError, what a missing tool gives (a case the code handles
   anyway), and counted in `spawns`.
2. Nothing is written outside the cage's folders (its own temporary folder, and /dev/null as
   a file to open): the audit hook checks every open for writing and every rename, remove,
   mkdir, rmdir, symlink, link, chmod, chown, truncate and utime, resolving a dir_fd through
   /proc/self/fd; os.open is wrapped too, because its audit event carries no dir_fd.
3. The live host view is read-only: DirView("/") refuses writes and directory descriptors
   (journal, lock, units), whatever a command was told.
4. Time: every run gets an alarm, and watch's loop ends after one wait (the real wait, with
   the real --interval, on a stopper that is already readable).

2 and 3 raise `Caged`, a BaseException no handler in xputune catches: reaching them is a bug
(something tried to act outside the tree it was given), reported with the argv that did it.
Everything the cage refused is in `trips`. HOME, TMPDIR, XDG folders and MPLCONFIGDIR point
into the cage and no bytecode is written, so libraries' own caches stay inside too.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_SPAWN_EVENTS = frozenset(
    {
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.system",
        "os.fork",
        "os.forkpty",
        "subprocess.Popen",
        "pty.spawn",
    }
)
_SIGNAL_EVENTS = frozenset({"os.kill", "os.killpg", "signal.pthread_kill"})
# event -> (indexes of the path arguments, index of their dir_fd or None)
_PATH_EVENTS: dict[str, tuple[tuple[int, ...], int | None]] = {
    "os.remove": ((0,), 1),
    "os.mkdir": ((0,), 2),
    "os.rmdir": ((0,), 1),
    "os.symlink": ((1,), 2),
    "os.chmod": ((0,), 2),
    "os.chown": ((0,), 3),
    "os.truncate": ((0,), None),
    "os.utime": ((0,), 3),
    "shutil.rmtree": ((0,), None),
}
_TWO_DIR_FDS = {"os.rename": ((0, 2), (1, 3)), "os.link": ((0, 2), (1, 3))}


class Caged(BaseException):
    """The cage refused an action that no command may take here (a write outside the tree)."""


class FuzzTimeout(BaseException):
    """A run outlived its alarm (a FIFO opened for reading, a loop that does not end)."""


_STATE = threading.local()
_HOOKED = False


def _active() -> Cage | None:
    return getattr(_STATE, "cage", None)


def _hook(event: str, args: tuple[Any, ...]) -> None:
    cage = _active()
    if cage is None or cage.paused:
        return
    cage.paused = True  # the checks below must not audit themselves
    try:
        cage.audit(event, args)
    finally:
        cage.paused = False


def _resolve(path: Any, dir_fd: Any) -> str | None:
    """The absolute, symlink-resolved location of `path` (relative to dir_fd when given)."""
    if isinstance(path, int):  # an fd: fchmod, ftruncate, ...
        base, path = f"/proc/self/fd/{path}", ""
        try:
            return os.path.realpath(os.readlink(base))
        except OSError:
            return None
    try:
        path = os.fsdecode(path)
    except TypeError:
        return None
    if not os.path.isabs(path):
        if isinstance(dir_fd, int) and dir_fd >= 0:
            try:
                path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
            except OSError:
                return None
        else:
            path = os.path.abspath(path)
    return os.path.realpath(path)


class Cage:
    """See the module docstring. Use as `with Cage(tmp_path) as cage: ...`."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(os.path.realpath(folder))
        self.mp = pytest.MonkeyPatch()
        self.paused = False
        self.trips: list[str] = []
        self.spawns: list[str] = []
        self.allowed = [str(self.folder)]

    # -- the checks ----------------------------------------------------------------------
    def inside(self, where: str | None) -> bool:
        if where is None:
            return False
        return any(where == a or where.startswith(a.rstrip("/") + "/") for a in self.allowed)

    def refuse(self, what: str) -> None:
        self.trips.append(what)
        raise Caged(f"cage: refused {what}")

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event in _SPAWN_EVENTS:
            shown = repr(args[1] if len(args) > 1 else args)[:200]
            self.spawns.append(f"{event} {shown}")
            raise FileNotFoundError(errno.ENOENT, "cage: no process may start", event)
        if event in _SIGNAL_EVENTS:
            self.trips.append(f"{event} {args!r}")
            raise PermissionError(errno.EPERM, "cage: no signal may be sent", event)
        if event == "socket.connect":
            raise PermissionError(errno.EPERM, "cage: no network", event)
        if event == "open":
            path, _, flags = args
            if isinstance(path, int) or not isinstance(flags, int) or not flags & _WRITE_FLAGS:
                return
            where = _resolve(path, None)
            if where == "/dev/null" or self.inside(where):
                return
            # os.open with dir_fd is checked by the wrapper (it knows the dir_fd)
            if getattr(_STATE, "checked_open", False):
                return
            self.refuse(f"open {path!r} for writing ({where})")
            return
        if event in _PATH_EVENTS:
            indexes, fd_index = _PATH_EVENTS[event]
            dir_fd = args[fd_index] if fd_index is not None and fd_index < len(args) else None
            for i in indexes:
                where = _resolve(args[i], dir_fd)
                if not self.inside(where):
                    self.refuse(f"{event} {args[i]!r} ({where})")
            return
        if event in _TWO_DIR_FDS:
            for path_i, fd_i in _TWO_DIR_FDS[event]:
                dir_fd = args[fd_i] if fd_i < len(args) else None
                where = _resolve(args[path_i], dir_fd)
                if not self.inside(where):
                    self.refuse(f"{event} {args[path_i]!r} ({where})")

    # -- setting it up -------------------------------------------------------------------
    def _guard_os_open(self) -> None:
        real_open = os.open

        def guarded_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: Any = None) -> int:
            if flags & _WRITE_FLAGS and _active() is self and not self.paused:
                where = _resolve(path, dir_fd)
                if where != "/dev/null" and not self.inside(where):
                    self.refuse(f"os.open {path!r} for writing ({where})")
            _STATE.checked_open = True
            try:
                return real_open(path, flags, mode, dir_fd=dir_fd)
            finally:
                _STATE.checked_open = False

        self.mp.setattr(os, "open", guarded_open)

    def _guard_live_view(self) -> None:
        from xputune.host.view import DirView

        def refusing(name: str) -> None:
            real = getattr(DirView, name)

            def method(view: DirView, *args: Any, **kwargs: Any) -> Any:
                reading = name == "open_dir" and not (args[1:2] or [kwargs.get("create")])[0]
                if view.live and not reading:  # opening an existing folder to read is fine
                    self.refuse(f"DirView('/').{name}{args!r}")
                return real(view, *args, **kwargs)

            self.mp.setattr(DirView, name, method)

        for name in ("write_bytes", "open_dir", "makedirs", "replace_file", "remove", "rmdir"):
            refusing(name)
        refusing("symlink")

    def _one_wait_watch(self) -> None:
        from xputune.fleet import watch

        real_loop = watch.Watcher.loop

        def loop(watcher: Any, source: Any, stopper: Any) -> None:
            real_wait = source.wait

            def wait(timeout: float, stop: Any) -> Any:
                os.write(stop._write, b"x")  # a stop is pending: the real wait returns at once
                try:
                    return real_wait(timeout, stop)
                finally:
                    stop.signal = stop.signal or "cage"

            source.wait = wait
            return real_loop(watcher, source, stopper)

        self.mp.setattr(watch.Watcher, "loop", loop)

    def _environment(self) -> None:
        home = self.folder / "home"
        home.mkdir(exist_ok=True)
        cache = os.environ.get("XDG_CACHE_HOME")
        if cache:  # tests/conftest.py's own temporary cache
            self.allowed.append(os.path.realpath(cache))
        for name in ("HOME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
            self.mp.setenv(name, str(home))
        self.mp.setenv("MPLCONFIGDIR", str(home))
        for name in ("XPUTUNE_TEST_CRASH_AT_STEP", "XPUTUNE_NO_FASTPATH"):
            self.mp.delenv(name, raising=False)
        import tempfile

        self.mp.setattr(tempfile, "tempdir", str(home))
        self.mp.setattr(sys, "dont_write_bytecode", True)
        self.mp.chdir(home)

    def __enter__(self) -> Cage:
        global _HOOKED
        if not _HOOKED:  # an audit hook cannot be removed: one per process, idle outside
            sys.addaudithook(_hook)
            _HOOKED = True
        self._environment()
        self._guard_live_view()
        self._one_wait_watch()
        self._guard_os_open()  # last: setting up must not trip it
        _STATE.cage = self
        return self

    def __exit__(self, *exc: object) -> None:
        _STATE.cage = None
        self.mp.undo()

    # -- one run -------------------------------------------------------------------------
    @contextmanager
    def alarm(self, seconds: float) -> Iterator[None]:
        """FuzzTimeout in this thread after `seconds` (a blocked open or read is interrupted)."""

        def ring(signum: int, frame: object) -> None:
            raise FuzzTimeout(f"no answer within {seconds} s")

        previous = signal.signal(signal.SIGALRM, ring)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
