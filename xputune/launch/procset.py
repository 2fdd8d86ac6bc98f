"""A set of processes started, watched and stopped as one (L3 donors, a cluster's master,
instances and router): when one ends the others are stopped and the set ends with status 1, so
systemd or Kubernetes restarts the whole set; SIGTERM and SIGINT are forwarded to all of them.

Statuses of supervise(): ENDED (1) when a member ended (whatever its own status, which is
said), 0 when stopped by SIGTERM (a stop that was asked for), 130 by SIGINT.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from xputune.launch.sglang import LaunchError

#: How long stopped members get between SIGTERM and SIGKILL.
STOP_GRACE_S = 10.0
ENDED = 1


def to_stderr(line: str) -> None:
    """The default voice: a line on stderr, at once."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _status(rc: int) -> str:
    return f"signal {signal.Signals(-rc).name}" if rc < 0 else f"status {rc}"


def supervise(
    commands: Sequence[Sequence[str]],
    names: Sequence[str] | None = None,
    *,
    envs: Sequence[Mapping[str, str] | None] | None = None,
    kind: str = "member",
    grace_s: float = STOP_GRACE_S,
    say: Callable[[str], None] | None = None,
) -> int:
    """Run every command until one ends or SIGTERM/SIGINT arrives; then stop them all.

    Each command runs in its own session, with its own environment added to this one's where
    `envs` gives one, so a signal reaches it only through here (a terminal's Ctrl-C is
    forwarded once, not delivered twice) and its whole process group is stopped: the signal
    received (SIGTERM after a member ended), then SIGKILL after `grace_s`. Lines about a
    member call it `kind NAME`. Returns ENDED when a member ended, 0 after SIGTERM, 130 after
    SIGINT. Main thread only (it
    installs signal handlers, and restores the old ones before it returns).
    """
    names = list(names) if names is not None else [c[0] for c in commands]
    envs = list(envs) if envs is not None else [None] * len(commands)
    say = say or to_stderr
    received: list[int] = []  # SIGTERM/SIGINT, in order; SIGCHLD only wakes the wait

    def note(sig: int, _frame: object) -> None:
        if sig != signal.SIGCHLD:
            received.append(sig)

    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    os.set_blocking(wfd, False)
    old_wakeup = signal.set_wakeup_fd(wfd)  # ValueError outside the main thread
    old = {s: signal.signal(s, note) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for argv, name, env in zip(commands, names, envs, strict=True):
            if received:
                break
            try:
                proc = subprocess.Popen(
                    list(argv), stdin=subprocess.DEVNULL, start_new_session=True,
                    env=None if env is None else {**os.environ, **env},
                )  # fmt: skip
            except OSError as exc:
                raise LaunchError(f"cannot start {kind} {name}: {argv[0]}: {exc.strerror}") from exc
            procs.append(proc)
            say(f"{kind} {name}: started, pid {proc.pid}")
        return _wait(procs, names, received, rfd, say, kind)
    finally:
        _stop(procs, received[0] if received else signal.SIGTERM, grace_s)
        for sig, handler in old.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(old_wakeup)
        os.close(rfd)
        os.close(wfd)


def _ended(proc: subprocess.Popen[bytes]) -> int | None:
    """The member's status once it ended (negative: the signal that killed it), else None.

    WNOWAIT leaves it unreaped: until _stop reaps it, its pid (and so its process group's id)
    cannot be reused, so signalling the group never reaches a stranger.
    """
    if proc.returncode is not None:
        return proc.returncode
    info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _wait(
    procs: list[subprocess.Popen[bytes]],
    names: Sequence[str],
    received: list[int],
    wakeup: int,
    say: Callable[[str], None],
    kind: str,
) -> int:
    """Block until a member ends or a stop signal arrives; the status supervise returns."""
    while True:
        if received:
            say(f"{signal.Signals(received[0]).name}: stopping {len(procs)} {kind}(s)")
            return 130 if received[0] == signal.SIGINT else 0
        for proc, name in zip(procs, names, strict=False):
            rc = _ended(proc)
            if rc is not None:
                say(f"{kind} {name} ended ({_status(rc)}): stopping the others")
                return ENDED
        select.select([wakeup], [], [], 1.0)  # each signal, SIGCHLD too, writes a byte
        with contextlib.suppress(BlockingIOError):
            while os.read(wakeup, 512):
                pass


def _stop(procs: list[subprocess.Popen[bytes]], sig: int, grace_s: float) -> None:
    """Send `sig` to every member's process group; SIGKILL what is left after `grace_s`; reap.

    Only groups whose leader is not reaped yet are signalled (see _ended)."""
    for proc in procs:
        _signal_group(proc, sig)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    for proc in procs:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    if proc.returncode is not None:  # reaped: its group id may belong to someone else now
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # it leads its own group (start_new_session)
