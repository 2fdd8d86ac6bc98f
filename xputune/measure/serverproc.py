"""A server the sweep starts, waits for and stops.

Its command is the launcher's (`python -m xputune launch sglang --dry-run ... -- ARGS`, the
stable contract; launch/'s internals are not imported for this): one dry run per sweep, which
runs every check of a launch (drift, the L3 preflight, and the preflight of SGLang's
interpreter: its release, the plugin) and prints the environment and the command, refusals as
"would refuse". Each step runs that command with its own L2 size and port (`sized_command`);
the baseline (HiCache off, which the launcher cannot be asked for) runs it with
--enable-hierarchical-cache, every --hicache-* flag and the cache plugin's switches taken out
(`baseline_command`). A server runs as a child in a session of its own, so its process group
holds SGLang's scheduler and detokenizer too. Ready means GET /server_info answers as SGLang.
Stopping sends SIGTERM to the server (the group's leader) and waits a grace period (SGLang
drains, then stops its own children), then SIGTERM to the group, then SIGKILL to what is left,
and waits until no process of the group remains (see Server.stop).

Logs go to files the sweep creates in a private 0700 directory (tempfile.mkdtemp).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from xputune.errors import XputuneError
from xputune.measure.client import Endpoint, ServerError, get_json
from xputune.userfiles import printable

_POLL = 0.5  # seconds between readiness checks


class LaunchFailed(XputuneError):
    """The launcher refused, or the server died before it was ready."""


def launcher_argv(
    launch_opts: list[str], sglang_args: list[str], dry_run: bool = False
) -> list[str]:
    head = [sys.executable, "-m", "xputune", "launch", "sglang"]
    return [*head, *(["--dry-run"] if dry_run else []), *launch_opts, "--", *sglang_args]


def _tail(path: Path, lines: int = 3) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 8192))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    last = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
    return printable(" | ".join(last))[:400]


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


def dry_run(launch_opts: list[str], sglang_args: list[str]) -> Command:
    """The command the launcher would run, from its --dry-run line.

    LaunchFailed with the launcher's own last line when it refuses, and when a real launch
    would be refused (critical drift without --force, what SGLang's environment lacks: "would
    refuse: ...").
    """
    argv = launcher_argv(launch_opts, sglang_args, dry_run=True)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise LaunchFailed(f"cannot run the launcher: {printable(str(exc))[:200]}") from None
    errors = [ln for ln in done.stderr.splitlines() if ln.strip()]
    if done.returncode != 0:
        last = errors[-1] if errors else f"exit status {done.returncode}"
        raise LaunchFailed(f"the launcher refused: {printable(last)[:300]}")
    refusal = [ln for ln in errors if ln.startswith("would refuse:")]
    if refusal:
        raise LaunchFailed(f"the launcher {printable(refusal[0])[:300]}")  # would refuse: ...
    # the line is shell text, continued with " \\" where it is long (cli/output.shell_command)
    lines = [ln for ln in done.stdout.replace("\\\n", " ").splitlines() if ln.strip()]
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


@dataclass
class Server:
    """One server process group; start() waits until it answers, stop() until it is gone."""

    argv: list[str]
    endpoint: Endpoint
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None

    def start(self, timeout: float) -> float:
        """Start it and wait until GET /server_info answers; the seconds that took."""
        t0 = time.monotonic()
        fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as log:
            try:
                self.proc = subprocess.Popen(
                    self.argv, env={**os.environ, **self.env}, stdout=log,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                )  # fmt: skip
            except (OSError, subprocess.SubprocessError) as exc:
                raise LaunchFailed(
                    f"cannot start {printable(self.argv[0])}: {printable(str(exc))[:200]}"
                ) from None
        try:
            while True:
                code = self.proc.poll()
                if code is not None:
                    raise LaunchFailed(
                        f"the server exited with status {code} before it was ready "
                        f"(log {self.log}): {_tail(self.log)}"
                    )
                try:
                    get_json(self.endpoint, "/server_info", timeout=5)
                    return time.monotonic() - t0
                except ServerError:
                    pass
                if time.monotonic() - t0 > timeout:
                    raise LaunchFailed(
                        f"the server was not ready after {timeout:.0f} s (log {self.log}): "
                        f"{_tail(self.log)}"
                    )
                time.sleep(_POLL)
        except BaseException:
            self.stop(grace=5.0)
            raise

    def stop(self, grace: float = 20.0) -> float:
        """SIGTERM the server, then its group, SIGKILL what is left; the seconds that took.

        SIGTERM goes to the session's leader first (SGLang's main process): it drains, stops
        its scheduler and detokenizer, and its resource tracker removes the semaphores it made.
        A SIGTERM to the whole group at once kills the tracker too, which leaves them behind.
        Whatever is left after `grace` gets SIGTERM as a group, then SIGKILL.
        """
        proc, self.proc = self.proc, None
        if proc is None:
            return 0.0
        t0 = time.monotonic()
        with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: stop waiting, kill
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, signal.SIGTERM)
            if not self._wait(proc, grace):
                self._signal(proc, signal.SIGTERM, min(grace, 5.0))
        self._signal(proc, signal.SIGKILL, 30.0)
        return time.monotonic() - t0

    @staticmethod
    def _wait(proc: subprocess.Popen, wait: float) -> bool:
        """Whether the leader and every process of its group are gone within `wait` s."""
        deadline = time.monotonic() + wait
        while True:
            if proc.poll() is not None and not _group_alive(proc.pid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    @classmethod
    def _signal(cls, proc: subprocess.Popen, sig: int, wait: float) -> None:
        """Signal the group, unless it is gone (its number may then be another's), and wait."""
        if cls._wait(proc, 0.0):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        cls._wait(proc, wait)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
