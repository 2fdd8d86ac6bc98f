"""`xputune launch cluster`: N SGLang instances of one model on this host behind sglang-router,
with the L3 they share, started and stopped as one set (launch/procset.py).

Each instance is what `launch sglang` would run (the same plan, check, release table and
plugin), on its own cards and port: with cards, instance i takes the plan's TP cards i*TP to
(i+1)*TP - 1 in the probe's order; with `--device cpu` the instances share this host's CPUs
(said). The L3 is the plan's (`--l3 file --l3-dir DIR`: one folder for all; `--l3 mooncake`:
one master, started here as a member of the set unless `--l3-master` names one elsewhere).
The router is sglang-router's own (`python -m sglang_router.launch_router` in SGLang's
interpreter: nothing of it is rewritten here), given every instance's URL and the policy; it
waits for the instances itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from xputune.launch import policy
from xputune.launch.donors import find_binary, package_binary
from xputune.launch.sglang import LaunchError, split_flags
from xputune.plan.l3 import MASTER_PORT, master_command

if TYPE_CHECKING:
    from xputune.host import HostView
    from xputune.launch import preflight
    from xputune.topology.model import Topology

ROUTER_MODULE = "sglang_router.launch_router"
#: sglang-router's policies for one pool of workers (its `--policy` choices, manual aside).
POLICIES = ("cache_aware", "round_robin", "random", "power_of_two")
MAX_INSTANCES = 64
LOCAL_MASTER = f"127.0.0.1:{MASTER_PORT}"
#: mooncake_master's own flags for a master of this host's cluster (listening on every
#: interface by default).
LOCAL_ONLY = ("--rpc_address=127.0.0.1", "--metrics_host=127.0.0.1")
#: SGLang flags each instance gets from the cluster, not from ARGS.
OWN_FLAGS = ("--port", "--host", "--base-gpu-id")


@dataclass
class Cluster:
    """The set's members in start order (master, instances, router), and the first instance's
    launch: its notes, refusals and blockers are every instance's (one host, one check)."""

    names: list[str]
    commands: list[list[str]]
    envs: list[dict[str, str]]
    router_url: str
    launch: policy.Launch
    notes: list[str] = field(default_factory=list)


def _without_own_flags(args: tuple[str, ...]) -> list[str]:
    for name, _ in split_flags(list(args)):
        if name in OWN_FLAGS:
            raise LaunchError(f"{name} is the cluster's to set (one per instance): remove it")
    return list(args)


def _cards(topo: Topology, req: policy.LaunchRequest, instances: int) -> list[tuple[str, ...]]:
    """Each instance's cards: the plan's TP in a row, in the probe's order."""
    names = list(req.plan.cards) or [c.name for c in topo.cards]
    tp = req.plan.tp or len(names) // instances
    if tp < 1 or tp * instances > len(names):
        raise LaunchError(
            f"{instances} instance(s) of TP {tp or '?'} need {max(tp, 1) * instances} cards; "
            f"this host has {len(names)}: lower --instances or --tp"
        )
    return [tuple(names[i * tp : (i + 1) * tp]) for i in range(instances)]


def prepare_cluster(
    view: HostView,
    topo: Topology,
    req: policy.LaunchRequest,
    *,
    instances: int,
    router_policy: str,
    router_port: int,
    first_port: int,
    cpu: bool,
    sglang: preflight.Pending | None = None,
) -> Cluster:
    """The members of the set, or LaunchError when the host cannot hold them."""
    if not 1 <= instances <= MAX_INSTANCES:
        raise LaunchError(f"--instances must be 1 to {MAX_INSTANCES}")
    if router_policy not in POLICIES:
        raise LaunchError(f"unknown router policy {router_policy!r}")
    ports = [first_port + i for i in range(instances)]
    if router_port in ports or max(ports) > 65535:
        raise LaunchError(f"ports {ports[0]}-{ports[-1]} and the router's {router_port} overlap "
                          "or pass 65535: move --first-port or --router-port")  # fmt: skip
    user = _without_own_flags(req.user_args)
    names: list[str] = []
    commands: list[list[str]] = []
    envs: list[dict[str, str]] = []
    notes: list[str] = []
    l3 = req.plan.l3
    master_missing = None
    own_master = l3 is not None and l3.backend == "mooncake" and l3.master is None
    if own_master:
        l3 = replace(l3, master=LOCAL_MASTER)
        # on this host only: its RPC and metrics on the loopback, as the instances reach it
        command = [*master_command(LOCAL_MASTER), *LOCAL_ONLY]
        binary, master_missing = find_binary(command[0], package_binary(command[0]))
        names.append("master")
        commands.append([binary or command[0], *command[1:]])
        envs.append({})
        notes.append(f"note: the Mooncake master runs here, at {LOCAL_MASTER}, for every instance")
    split = [()] * instances if cpu else _cards(topo, req, instances)
    if cpu and instances > 1:
        notes.append(f"note: --device cpu: the {instances} instances share this host's CPUs")
    first = None
    for i, (port, cards) in enumerate(zip(ports, split, strict=True)):
        plan = replace(req.plan, l3=l3, cards=cards or req.plan.cards)
        one = replace(req, plan=plan, user_args=(*user, "--port", str(port)),
                      master_in_set=own_master)  # fmt: skip
        if cpu:
            launch = policy.prepare_cpu(topo, one, sglang)
        else:
            launch = policy.prepare(view, topo, one, sglang)
        first = first or launch
        names.append(f"instance {i} (port {port}" + (f", {','.join(cards)})" if cards else ")"))
        commands.append(list(launch.spec.argv))
        envs.append(dict(launch.spec.env))
    assert first is not None
    if master_missing:  # what this host lacks: a launch stops (exit 3), --force or not
        first.blockers.append(master_missing)
    python = first.spec.argv[0]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    names.append(f"router ({router_policy}, port {router_port})")
    commands.append([
        python, "-m", ROUTER_MODULE, "--worker-urls", *urls, "--policy", router_policy,
        "--host", "127.0.0.1", "--port", str(router_port),
    ])  # fmt: skip
    envs.append({})
    return Cluster(
        names=names,
        commands=commands,
        envs=envs,
        router_url=f"http://127.0.0.1:{router_port}",
        launch=first,
        notes=[*first.notes, *notes],
    )
