"""`xputune launch l3-donors`: a decode node's DRAM donors, started and kept as one set.

A decode node gives the cluster's L3 pool its spare DRAM through one mooncake_client per RDMA
NIC, each mounting a segment on its NIC's NUMA node (plan/l3.py: plan_decode sizes them,
donor_command words them; `xputune plan --l3 mooncake --role decode` prints the same). This
module turns that plan into commands this host can run and supervises them:

  - the donors are planned as `plan --role decode` plans them with its defaults: every card
    is a decode rank of the local strategy (its process's memory is kept off the donation);
  - preflight, one line each: mooncake_client not found (the mooncake package's own binary,
    else PATH), numactl missing (refused unless forced; then the donors run unbound, and
    that is said), this node's address unknown (--l3-host, else MOONCAKE_HOST); no RDMA NIC
    is plan_decode's own refusal;
  - supervision: every donor in its own process group; SIGTERM or SIGINT is forwarded to all
    of them; when one ends, the others are stopped and the set ends with status 1, so systemd
    or Kubernetes restarts the whole set (a pool that lost one donor's segment is not whole).

Statuses of supervise(): 1 when a donor ended (whatever its own status, which is said),
0 when stopped by SIGTERM (a stop that was asked for), 130 by SIGINT.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from xputune.launch.sglang import LaunchError
from xputune.plan.bindings import make_bindings
from xputune.plan.capacity import GB
from xputune.plan.l3 import L3Plan, L3Request, donor_command, donor_size_text, plan_decode
from xputune.topology.model import Topology

CLIENT = "mooncake_client"
NUMACTL = "numactl"
#: The variable a donor's --host comes from when --l3-host is not given (plan/l3.HOST_VARIABLE).
HOST_ENV = "MOONCAKE_HOST"
#: How long stopped donors get between SIGTERM and SIGKILL.
STOP_GRACE_S = 10.0
DONOR_ENDED = 1
#: A hostname, IPv4 or IPv6 address (an IPv6 zone too): what Mooncake's --host takes.
_ADDRESS = re.compile(r"[A-Za-z0-9._:%\[\]-]{1,253}")


@dataclass
class Donors:
    """The donors to run: one argv each, their names, and what to tell the user first."""

    plan: L3Plan
    names: list[str]  # "ens1np0 (mlx5_0)": how lines about a donor name it
    commands: list[list[str]]  # as they would be exec'd (mooncake_client resolved where found)
    notes: list[str] = field(default_factory=list)
    #: Why the donors must not start (a dry run only says it); empty when nothing is missing.
    refusals: list[str] = field(default_factory=list)


def _trusted(path: Path) -> bool:
    """A regular executable file that only root or this user can change (root runs it)."""
    try:
        st = path.stat()
    except OSError:
        return False
    return (
        stat.S_ISREG(st.st_mode)
        and bool(st.st_mode & stat.S_IXUSR)
        and st.st_uid in (0, os.geteuid())
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def package_client() -> Path | None:
    """The mooncake package's own mooncake_client (next to mooncake/__init__.py), found
    without importing the package; None when the package is not installed for this Python."""
    spec = importlib.util.find_spec("mooncake")
    if spec is None or not spec.origin:
        return None
    binary = Path(spec.origin).parent / CLIENT
    return binary if binary.exists() else None


def find_client() -> tuple[str | None, str | None]:
    """(mooncake_client's path, None) or (None, why it cannot be used): the package's binary
    first (the version xputune is tested with), else the first on PATH."""
    candidates = [p for p in (package_client(),) if p is not None]
    on_path = shutil.which(CLIENT)
    if on_path:
        candidates.append(Path(on_path))
    for path in candidates:
        if _trusted(path):
            return str(path.absolute()), None
    if candidates:
        return None, (
            f"{candidates[0]} is not a regular executable file that only root (or this user) "
            "can change: not running it"
        )
    return None, (
        f"{CLIENT} not found: it ships in the mooncake package (pip install "
        "mooncake-transfer-engine-non-cuda, or mooncake-transfer-engine on a CUDA host) or "
        "must be on PATH"
    )


def decode_bindings(topo: Topology):  # -> Bindings | None
    """The decode ranks `plan --role decode` assumes by default: every card, local strategy."""
    return make_bindings(topo, len(topo.cards), "local") if topo.cards else None


def check_address(text: str, where: str) -> str:
    if not _ADDRESS.fullmatch(text):
        raise LaunchError(
            f"{where} {text[:60]!r}: expected this node's hostname or IP address (what the "
            "other nodes reach it at)"
        )
    return text


def prepare(
    topo: Topology,
    req: L3Request,
    *,
    force: bool,
    environ: Mapping[str, str] | None = None,
    live: bool = True,
) -> Donors:
    """Plan the donors of this decode node and the commands that run them.

    `req` is plan's own request (role decode). `live`: the commands are to run (not a dry run),
    so this node's address must be known. Nothing starts here.
    """
    env = os.environ if environ is None else environ
    notes: list[str] = []
    refusals: list[str] = []
    if req.local_hostname is not None:
        check_address(req.local_hostname, "--l3-host")
    elif env.get(HOST_ENV):
        req = replace(req, local_hostname=check_address(env[HOST_ENV], HOST_ENV))
        notes.append(f"note: this node's address is {req.local_hostname} (from {HOST_ENV})")
    elif live:
        refusals.append(
            f"this node's address is unknown: pass --l3-host ADDR (in Kubernetes the pod's IP "
            f"from the downward API) or set {HOST_ENV}"
        )
    plan = plan_decode(topo, decode_bindings(topo), None, req)
    client, missing = find_client()
    if missing:
        refusals.append(missing)
    bound = shutil.which(NUMACTL) is not None
    if not bound:
        if force:
            notes.append(
                f"warning: {NUMACTL} is missing: the donors run unbound (--force), so a "
                "segment may be placed away from its NIC's node and cross the NUMA "
                "interconnect on every transfer"
            )
        else:
            refusals.append(
                f"{NUMACTL} is missing: it binds each donor to its NIC's node (Debian/Ubuntu: "
                "apt install numactl), or pass --force to run them unbound"
            )
    names, commands = [], []
    for donor in plan.donors:
        words = donor_command(plan, donor)
        if words[0] == NUMACTL and not bound and force:
            words = words[3:]  # numactl --cpunodebind=N --membind=N
        words = [client if w == CLIENT and client else w for w in words]
        names.append(f"{donor.nic} ({donor.rdma or '-'})")
        commands.append(words)
        notes.append(
            f"donor {donor.nic} ({donor.rdma or '-'}) on node {donor.numa_node}: "
            f"{donor_size_text(donor.segment_bytes)}, port {donor.port}"
        )
    notes += [f"note: {n}" for n in plan.notes]
    notes += [f"warning: {w}" for w in plan.warnings]
    if plan.pool_bytes and plan.segment_bytes:
        nodes = -(-plan.pool_bytes // plan.segment_bytes)
        notes.append(
            f"note: this node donates {plan.segment_bytes / GB:,g} GB of the "
            f"{plan.pool_bytes / GB:,g} GB pool: {nodes} node(s) like it fill it"
        )
    return Donors(plan, names, commands, notes, refusals)


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _status(rc: int) -> str:
    return f"signal {signal.Signals(-rc).name}" if rc < 0 else f"status {rc}"


def supervise(
    commands: Sequence[Sequence[str]],
    names: Sequence[str] | None = None,
    *,
    grace_s: float = STOP_GRACE_S,
    say: Callable[[str], None] = _say,
) -> int:
    """Run every command until one ends or SIGTERM/SIGINT arrives; then stop them all.

    Each donor runs in its own session, so a signal reaches it only through here (a terminal's
    Ctrl-C is forwarded once, not delivered twice) and its whole process group is stopped:
    the signal received (SIGTERM after a donor ended), then SIGKILL after `grace_s`. Returns
    DONOR_ENDED when a donor ended, 0 after SIGTERM, 130 after SIGINT. Main thread only (it
    installs signal handlers, and restores the old ones before it returns).
    """
    names = list(names) if names is not None else [c[0] for c in commands]
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
        for argv, name in zip(commands, names, strict=True):
            if received:
                break
            try:
                proc = subprocess.Popen(
                    list(argv), stdin=subprocess.DEVNULL, start_new_session=True
                )
            except OSError as exc:
                raise LaunchError(f"cannot start donor {name}: {argv[0]}: {exc.strerror}") from exc
            procs.append(proc)
            say(f"donor {name}: started, pid {proc.pid}")
        return _wait(procs, names, received, rfd, say)
    finally:
        _stop(procs, received[0] if received else signal.SIGTERM, grace_s)
        for sig, handler in old.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(old_wakeup)
        os.close(rfd)
        os.close(wfd)


def _ended(proc: subprocess.Popen[bytes]) -> int | None:
    """The donor's status once it ended (negative: the signal that killed it), else None.

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
) -> int:
    """Block until a donor ends or a stop signal arrives; the status supervise returns."""
    while True:
        if received:
            say(f"{signal.Signals(received[0]).name}: stopping {len(procs)} donor(s)")
            return 130 if received[0] == signal.SIGINT else 0
        for proc, name in zip(procs, names, strict=False):
            rc = _ended(proc)
            if rc is not None:
                say(f"donor {name} ended ({_status(rc)}): stopping the others")
                return DONOR_ENDED
        select.select([wakeup], [], [], 1.0)  # each signal, SIGCHLD too, writes a byte
        with contextlib.suppress(BlockingIOError):
            while os.read(wakeup, 512):
                pass


def _stop(procs: list[subprocess.Popen[bytes]], sig: int, grace_s: float) -> None:
    """Send `sig` to every donor's process group; SIGKILL what is left after `grace_s`; reap.

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
