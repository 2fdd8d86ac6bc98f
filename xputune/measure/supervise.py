"""`launch sglang --verify`: run SGLang as a child instead of replacing this process, verify it
once it answers, then stay beside it until it ends.

Without --verify the launcher execs SGLang (launch/sglang.py: signals and exit status are
SGLang's own). Verifying needs a process left to do it, so here SGLang is started as a child
in this process's group and session, with this terminal: Ctrl-C reaches it as it would
without us (we ignore SIGINT and wait for it to act on it); SIGTERM and SIGHUP sent to us are
passed on to it. Once GET /server_info answers (its schedulers, and so their host pools,
exist by then), `on_ready` runs once with SGLang's pid; the wait for that answer has a
deadline, past which the server is left to run unverified with one line saying so. Our exit
status is SGLang's (128 + N when a signal N ended it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

from xputune.launch.sglang import LaunchError, LaunchSpec
from xputune.measure.client import Endpoint, ServerError, get_json

#: Seconds one readiness poll may take, and between polls.
POLL = 2.0
PAUSE = 0.5
FORWARDED = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _forwarding(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """SIGTERM/SIGHUP to us go on to `proc`; SIGINT is left to reach it from the terminal."""

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    before = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    before[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _status(code: int) -> int:
    return 128 - code if code < 0 else code


def wait_ready(proc: subprocess.Popen[bytes], endpoint: Endpoint, timeout: float) -> bool:
    """Whether the server answered /server_info within `timeout` (False: it exited first, or
    the deadline passed)."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            get_json(endpoint, "/server_info", timeout=min(POLL, left))
            return True
        except ServerError:
            time.sleep(min(PAUSE, max(0.0, deadline - time.monotonic())))
    return False


def run_verified(
    spec: LaunchSpec,
    endpoint: Endpoint,
    timeout: float,
    on_ready: Callable[[int], None],
    say: Callable[[str], None],
) -> int:
    """Run SGLang, call `on_ready(pid)` once it answers, and return its exit status."""
    env = dict(os.environ)
    env.update(spec.env)
    try:
        proc = subprocess.Popen(spec.argv, env=env)
    except OSError as exc:
        raise LaunchError(f"cannot start {spec.argv[0]}: {exc.strerror}") from exc
    with _forwarding(proc):
        if wait_ready(proc, endpoint, timeout):
            on_ready(proc.pid)
        elif proc.poll() is None:
            say(f"xputune verify: {endpoint.url} did not answer within {timeout:g} s; the "
                "server runs unverified (run `xputune verify --url "
                f"{endpoint.url}` once it is up)")  # fmt: skip
        return _status(proc.wait())


__all__ = ["run_verified", "wait_ready"]
