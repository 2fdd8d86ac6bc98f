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

import importlib.util
import os
import re
import shutil
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from xputune.launch import procset
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
STOP_GRACE_S = procset.STOP_GRACE_S
DONOR_ENDED = procset.ENDED
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


def package_binary(name: str) -> Path | None:
    """The mooncake package's own binary `name` (next to mooncake/__init__.py), found without
    importing the package; None when the package is not installed for this Python."""
    spec = importlib.util.find_spec("mooncake")
    if spec is None or not spec.origin:
        return None
    binary = Path(spec.origin).parent / name
    return binary if binary.exists() else None


def package_client() -> Path | None:
    return package_binary(CLIENT)


def find_binary(name: str, packaged: Path | None) -> tuple[str | None, str | None]:
    """(the path of Mooncake's binary `name`, None) or (None, why it cannot be used): the
    package's own first (`packaged`, the version xputune is tested with), else the first on
    PATH; run as root only when only root or this user can change it."""
    candidates = [p for p in (packaged,) if p is not None]
    on_path = shutil.which(name)
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
        f"{name} not found: it ships in the mooncake package (pip install "
        "mooncake-transfer-engine-non-cuda, or mooncake-transfer-engine on a CUDA host) or "
        "must be on PATH"
    )


def find_client() -> tuple[str | None, str | None]:
    """mooncake_client as find_binary finds it."""
    return find_binary(CLIENT, package_client())


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


def supervise(
    commands: Sequence[Sequence[str]],
    names: Sequence[str] | None = None,
    *,
    grace_s: float = STOP_GRACE_S,
    say: Callable[[str], None] = procset.to_stderr,
) -> int:
    """The donors as one set (launch/procset.py): DONOR_ENDED when one ended, 0 after
    SIGTERM, 130 after SIGINT."""
    return procset.supervise(commands, names, kind="donor", grace_s=grace_s, say=say)
