"""A server the sweep starts, waits for and stops.

Its command is the launcher's (`python -m xputune launch sglang --dry-run ... -- ARGS`, the
stable contract; launch/'s internals are not imported for this): one dry run per sweep, which
runs every check of a launch (drift, the L3 preflight, and the preflight of SGLang's
interpreter: its release, the plugin) and prints the environment and the command, refusals as
"would refuse". Each step runs that command with its own L2 size and port (`sized_command`);
the baseline (HiCache off, which the launcher cannot be asked for) runs it with
--enable-hierarchical-cache, every --hicache-* flag and the cache plugin's switches taken out
(`baseline_command`). A server runs as a child in a session of its own, so its process group
holds SGLang's scheduler and detokenizer too. Ready means GET /server_info answers, in full
within its own deadline (a server that trickles or hangs is not ready), and the start timeout
holds whatever the server does: each poll gets at most the time left. Stopping sends SIGTERM
to the server (the group's leader) and waits a grace period (SGLang drains, then stops its own
children), then SIGTERM to the group, then SIGKILL to what is left, and waits until no
process of the group remains (see Server.stop).

Signals go only where they are meant to. xputune runs as root: a signal sent to a number
whose process has been reaped may reach whatever process the kernel gave that number next.
So the leader is never reaped until the very end of stop(): whether it has exited is asked
with waitid(WNOWAIT), which leaves it a zombie, and while it is unreaped its number, and so
its group's, belongs to it and to nobody else: os.kill(pid) and os.killpg(pid) reach our
processes or none. Once it is reaped (Popen.wait, the last step), nothing is signalled again,
not even with signal 0. A server that dies before it is ready is found this way too, and its
group is cleaned up the same way (a zombie leader still holds the group's number). Whether
any process other than the leader is left in the group is read from /proc (each process's
stat: its group and state; zombies count as gone) through the host view.

Logs go to files the sweep creates in a private 0700 directory (tempfile.mkdtemp).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from xputune import trail
from xputune.errors import XputuneError
from xputune.measure.client import Endpoint, ServerError, get_json
from xputune.userfiles import printable

_POLL = 0.5  # seconds between readiness checks
_POLL_TIMEOUT = 5.0  # one readiness check, at most (and never past the start timeout)
_FAILED_START_GRACE = 5.0  # stop()'s grace when the server did not start
_KILL_WAIT = 30.0  # after SIGKILL to the group: how long to wait for it to go


class LaunchFailed(XputuneError):
    """The launcher refused, or the server died before it was ready."""


#: The launcher of one server, and of a one-instance cluster (whose L3 preflight knows the
#: Mooncake master it starts itself is not up before the set is).
SERVER = ("launch", "sglang")
CLUSTER_OF_ONE = ("launch", "cluster", "--instances", "1")


def launcher_argv(
    launch_opts: list[str],
    sglang_args: list[str],
    dry_run: bool = False,
    launcher: tuple[str, ...] = SERVER,
) -> list[str]:
    head = [sys.executable, "-m", "xputune", *launcher]
    return [*head, *(["--dry-run"] if dry_run else []), *launch_opts, "--", *sglang_args]


_LOG_TAIL = 64 << 10  # bytes of a failed server's log read for its cause and last lines
_TRACEBACK = "Traceback (most recent call last):"
#: A line that names an exception (Python's last traceback line, or `python -m`'s own
#: "Error while finding module specification ... (ModuleNotFoundError: No module named ...)").
_EXCEPTION = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b|\bNo module named\b")


def _cause(lines: list[str]) -> int | None:
    """The index of the line that says why the server died: the end of its last traceback
    (the first unindented line after "Traceback (most recent call last):", which may come
    after a log prefix on that line), else the last line that names an exception."""
    marks = [i for i, line in enumerate(lines) if _TRACEBACK in line]
    if marks:
        for i in range(marks[-1] + 1, len(lines)):
            if lines[i].strip() and not lines[i][:1].isspace():
                return i
    for i in range(len(lines) - 1, -1, -1):
        if _EXCEPTION.search(lines[i]):
            return i
    return None


def _tail(path: Path, lines: int = 3) -> str:
    """What a server that did not start said, as ": ..." ("" when its log holds nothing):
    the cause first and whole, then what it logged after it, cut. SGLang logs lines after
    the cause (a child's sigquit, warnings), and a cut of the last lines once showed those
    and lost the cause (`No module named 'sglang'`) past the cut."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - _LOG_TAIL))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    all_lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    if size > _LOG_TAIL:
        all_lines = all_lines[1:]  # the first may be the end of a line cut by the seek
    at = _cause(all_lines)
    after = all_lines if at is None else all_lines[at + 1 :]  # what it said after the cause
    last = printable(" | ".join(ln.strip() for ln in after[-lines:]))
    last = last if len(last) <= 300 else last[:297] + "..."
    if at is None:
        return f": {last}" if last else ""
    return f": {printable(all_lines[at].strip())}" + (f" (then: {last})" if last else "")


def without_hicache(flags: list[str]) -> list[str]:
    """SGLang flags with --enable-hierarchical-cache and every --hicache-* flag removed."""
    from xputune.launch.sglang import canonical, split_flags

    out: list[str] = []
    for name, values in split_flags(flags):
        if canonical(name) == "--enable-hierarchical-cache" or name.startswith("--hicache-"):
            continue
        out += [name, *values]
    return out


def without(flags: list[str], names: tuple[str, ...]) -> list[str]:
    """SGLang flags without the ones named (any spelling SGLang takes)."""
    from xputune.launch.sglang import canonical, split_flags

    out: list[str] = []
    for name, values in split_flags(flags):
        if canonical(name) not in names:
            out += [name, *values]
    return out


@dataclass(frozen=True)
class Command:
    """The launcher's command: SGLang's interpreter and module, its flags, the environment
    xputune sets (the process inherits the rest)."""

    head: list[str]  # [python, "-m", "sglang.launch_server"]
    flags: list[str]
    env: dict[str, str]


def dry_run(
    launch_opts: list[str], sglang_args: list[str], launcher: tuple[str, ...] = SERVER
) -> Command:
    """The command the launcher would run, from its --dry-run line (a cluster's: its
    instance's, printed before the router's).

    LaunchFailed with the launcher's own last line when it refuses, and when a real launch
    would be refused (critical drift without --force, what SGLang's environment lacks: "would
    refuse: ...").
    """
    argv = launcher_argv(launch_opts, sglang_args, dry_run=True, launcher=launcher)
    try:
        done = trail.run(argv, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise LaunchFailed(f"cannot run the launcher: {printable(str(exc))[:200]}") from None
    errors = [ln for ln in done.stderr.splitlines() if ln.strip()]
    # a dry run that would refuse ends with the launch's status (1 or 3) and says why first
    refusal = [ln for ln in errors if ln.startswith("would refuse:")]
    if refusal:
        raise LaunchFailed(f"the launcher {printable(refusal[0])}")  # would refuse: ..., whole
    if done.returncode != 0:
        last = errors[-1] if errors else f"exit status {done.returncode}"
        last = last.removeprefix("xputune: error: ")  # its own voice, not said twice
        raise LaunchFailed(f"the launcher refused: {printable(last)[:300]}")
    # the line is shell text, continued with " \\" where it is long (cli/output.shell_command)
    lines = [ln for ln in done.stdout.replace("\\\n", " ").splitlines() if ln.strip()]
    servers = [ln for ln in lines if "sglang.launch_server" in ln and not ln.startswith("#")]
    lines = servers[-1:] or lines
    words = shlex.split(lines[-1]) if lines else []
    env: dict[str, str] = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    if "sglang.launch_server" not in words:
        shown = printable(lines[-1])[:200] if lines else "nothing"
        raise LaunchFailed(f"the launcher's dry run printed no SGLang command: {shown}")
    cut = words.index("sglang.launch_server") + 1
    return Command(words[:cut], words[cut:], env)


#: What each step sets itself.
STEP_FLAGS = ("--hicache-size", "--hicache-ratio", "--port")


def sized_command(command: Command, step_args: list[str]) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of one HiCache step: the launcher's command with the step's L2 size
    and port in place of its own."""
    return [*command.head, *without(command.flags, STEP_FLAGS), *step_args], dict(command.env)


def baseline_command(command: Command, step_args: list[str]) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of the baseline: the launcher's command without HiCache."""
    env = {k: v for k, v in command.env.items() if not k.startswith("XPUTUNE_HICACHE_")}
    flags = without_hicache(without(command.flags, STEP_FLAGS))
    return [*command.head, *flags, *step_args], env


class _Leader:
    """The server's process, which leads its own process group (start_new_session).

    It is reaped only by reap(), so until then its pid, which is also its group's id, is
    its own (a zombie holds the number as a running process does): the signals below reach
    it and its group, or nothing. After reap() they do nothing."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.reaped = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ended(self) -> str | None:
        """How it ended ("status 3", "signal 9"), asked without reaping it; None while it
        runs."""
        if self.reaped:
            return "an unknown status"
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped by someone else: its number is no longer ours
            self.reaped = True
            return "an unknown status"
        if info is None:
            return None
        if info.si_code == os.CLD_EXITED:
            return f"status {info.si_status}"
        return f"signal {info.si_status}"

    def signal(self, sig: int) -> None:
        if not self.reaped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, sig)

    def signal_group(self, sig: int) -> None:
        if not self.reaped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    def gone(self) -> bool:
        """It has exited and no other process of its group is left (zombies aside)."""
        return self.ended() is not None and not _others_in_group(self.pid)

    def wait(self, seconds: float) -> bool:
        """Whether it and its whole group are gone within `seconds`."""
        deadline = time.monotonic() + seconds
        while True:
            if self.gone():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def reap(self, seconds: float = 5.0) -> None:
        """Collect its exit status (the last step: nothing is signalled after it)."""
        if self.reaped:
            return
        try:
            self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:  # unkillable (in the kernel): Popen reaps it later
            return
        self.reaped = True


def _others_in_group(pgid: int) -> bool:
    """Whether a process other than `pgid` itself is in process group `pgid`, read from
    /proc/N/stat ("pid (comm) state ppid pgrp ..."); zombies are dead. True when /proc
    cannot tell (better a longer wait than a group taken for gone)."""
    from xputune.errors import HostError
    from xputune.host import open_host

    view = open_host()
    try:
        names = view.listdir("/proc")
    except HostError:
        return True
    if "self" not in names:  # no procfs here
        return True
    group = str(pgid)
    for name in names:
        if not name.isdigit() or name == group:
            continue
        try:
            stat = view.read_optional(f"/proc/{name}/stat")
        except (HostError, OSError):  # gone between the listing and the read
            continue
        fields = (stat or "").rpartition(")")[2].split()
        if len(fields) > 2 and fields[2] == group and fields[0] not in ("Z", "X"):
            return True
    return False


@dataclass
class Server:
    """One server process group; start() waits until it answers, stop() until it is gone."""

    argv: list[str]
    endpoint: Endpoint
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    leader: _Leader | None = None
    #: Whether it is ready, asked within a deadline (ServerError: not yet); default: GET
    #: /server_info answers in full. A router is ready when it lists its workers healthy.
    ready: Callable[[Endpoint, float], bool] | None = None

    def start(self, timeout: float) -> float:
        """Start it and wait until it is ready (GET /server_info answers); the seconds that
        took. Ends by `timeout` (plus the stop of a server that did not start), whatever it
        does."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as log:
            try:
                proc = subprocess.Popen(
                    self.argv, env={**os.environ, **self.env}, stdout=log,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                )  # fmt: skip
            except (OSError, subprocess.SubprocessError) as exc:
                raise LaunchFailed(
                    f"cannot start {printable(self.argv[0])}: {printable(str(exc))[:200]}"
                ) from None
        self.leader = leader = _Leader(proc)
        try:
            while True:
                how = leader.ended()
                if how is not None:
                    raise LaunchFailed(
                        f"the server exited with {how} before it was ready"
                        f"{_tail(self.log)} (log {self.log})"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LaunchFailed(
                        f"the server was not ready after {timeout:g} s{_tail(self.log)} "
                        f"(log {self.log})"
                    )
                try:
                    if self.ready is None:
                        get_json(self.endpoint, "/server_info", timeout=min(_POLL_TIMEOUT, left))
                        return time.monotonic() - t0
                    if self.ready(self.endpoint, min(_POLL_TIMEOUT, left)):
                        return time.monotonic() - t0
                except ServerError:
                    pass
                time.sleep(max(0.0, min(_POLL, deadline - time.monotonic())))
        except BaseException:
            self.stop(grace=_FAILED_START_GRACE)
            raise

    def stop(self, grace: float = 20.0) -> float:
        """SIGTERM the server, then its group, SIGKILL what is left; the seconds that took.

        SIGTERM goes to the session's leader first (SGLang's main process): it drains, stops
        its scheduler and detokenizer, and its resource tracker removes the semaphores it made.
        A SIGTERM to the whole group at once kills the tracker too, which leaves them behind.
        Whatever is left after `grace` gets SIGTERM as a group, then SIGKILL. The leader is
        reaped last, so every signal here reaches this server's processes or none (_Leader).
        """
        leader, self.leader = self.leader, None
        if leader is None:
            return 0.0
        t0 = time.monotonic()
        with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: stop waiting, kill
            if leader.ended() is None:
                leader.signal(signal.SIGTERM)
            if not leader.wait(grace):
                leader.signal_group(signal.SIGTERM)
                leader.wait(min(grace, 5.0))
        if not leader.gone():
            leader.signal_group(signal.SIGKILL)
            leader.wait(_KILL_WAIT)
        leader.reap()
        return time.monotonic() - t0
