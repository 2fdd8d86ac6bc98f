"""`xputune launch cluster`: N instances behind sglang-router on this host (launch/cluster.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from xputune.cli import exits
from xputune.cli.launch_run import (
    DRY_RUN,
    FEATURES,
    FORCE,
    LAUNCH_PROFILE,
    launch_request,
    refusal_status,
)
from xputune.cli.options import EXAMPLE, L3_SHARED, PLAN_SHARED, PYTHON, ROOT
from xputune.cli.spec import Command, Opt, Request
from xputune.host import open_host

MAX_PORT = 65535

LAUNCH_CLUSTER = Command(
    ("launch", "cluster"),
    "xputune.cli.cluster_run:run_cluster",
    (
        Opt("instances", ("--instances",), "SGLang instances to run, each with the plan's TP "
            "cards (with --device cpu, sharing the CPUs).", kind="int", min=1, max=64,
            required=True, metavar="N"),
        Opt("router", ("--router",), "sglang-router's policy: cache_aware (its default), "
            "round_robin, random, power_of_two.", kind="choice",
            choices=("cache_aware", "round_robin", "random", "power_of_two"),
            default="cache_aware"),
        Opt("router_port", ("--router-port",), "Where the router listens (127.0.0.1).",
            kind="int", min=1, max=MAX_PORT, default=30000, metavar="PORT"),
        Opt("first_port", ("--first-port",), "Instance i listens on this port + i "
            "(127.0.0.1).", kind="int", min=1, max=MAX_PORT, default=30001, metavar="PORT"),
        *PLAN_SHARED,
        *L3_SHARED,
        FEATURES,
        LAUNCH_PROFILE,
        FORCE,
        DRY_RUN.but(help="Print each member's environment and command; run nothing. Ends as "
                    "the launch would (see launch sglang)."),
        PYTHON,
        ROOT,
        EXAMPLE,
    ),
    passthrough="user_args",
    passthrough_metavar="SGLANG_ARGS",
    exits=(exits.DIFFERENCE, exits.PERMISSION, exits.UNSUPPORTED),
)  # fmt: skip


def run_cluster(req: Request) -> int:
    """Run N SGLang instances of one model behind sglang-router, with the L3 they share.

    Each instance is what `xputune launch sglang` would run (the same probe, plan, drift check,
    release table and cache plugin), on its own cards (instance i takes TP cards after
    instance i-1's, in the probe's order) and on port --first-port + i; with `--device cpu`
    in ARGS they share this host's CPUs. The L3 is the plan's: `--l3 file --l3-dir DIR`, one
    folder for all of them; `--l3 mooncake` with one master, started here as part of the set
    unless --l3-master names one elsewhere. The router is sglang-router's own, run with
    SGLang's interpreter (`python -m sglang_router.launch_router`), given every instance's
    URL and --router's policy; it waits for them to answer. `xputune replay --url` of the
    router drives the whole cluster.

    The members run as one set: each in its own process group, SIGTERM and SIGINT forwarded
    to all, and when one ends the others are stopped and the set ends with status 1 (so a
    service manager restarts all of it). Refusals are launch sglang's, one a line; --dry-run
    prints each member's command and ends as the launch would.

    Examples:

        xputune launch cluster -n --example h3c-hygon-p800 --instances 2 \\
            --router round_robin -- --model-path zai-org/GLM-5 --tp 4
        xputune launch cluster --instances 2 --l3 file --l3-dir /data/l3 -- \\
            --model-path /models/tiny --device cpu
    """
    model, tp = req.model, req.tp  # this runner rewrites them
    from xputune.cli.output import columns, shell_command
    from xputune.cli.refusals import refuse
    from xputune.launch import policy, preflight, procset
    from xputune.launch.cluster import prepare_cluster
    from xputune.launch.cpu import is_cpu_device
    from xputune.launch.sglang import user_value
    from xputune.plan.models import resolve_model
    from xputune.topology.discover import discover
    from xputune.userfiles import model_config, printable

    policy.refuse_recording(bool(req.root or req.example), req.dry_run, "a cluster")
    tp = policy.reconcile_tp(tp, req.user_args)
    model, config_text = policy.model_from_args(model, req.config, req.user_args)
    named = resolve_model(model, model_config(model, Path(config_text) if config_text else None))
    request = launch_request(req, named, tp)
    sglang = preflight.start(req.python)
    view = open_host(req.root, req.example)
    cluster = prepare_cluster(
        view, discover(view), request, instances=req.instances, router_policy=req.router,
        router_port=req.router_port, first_port=req.first_port,
        cpu=is_cpu_device(user_value(req.user_args, "--device")), sglang=sglang,
    )  # fmt: skip
    refusals = [f"{r}, or pass --force" for r in cluster.launch.refusals]
    status = refusal_status(cluster.launch)
    if status is not None and not req.dry_run:
        refuse(cluster.launch.blockers or refusals, status, "the cluster")
    said = [*cluster.launch.blockers, *refusals]
    for line in [*cluster.notes, *(f"would refuse: {r}" for r in said)]:
        sys.stderr.write(printable(line) + "\n")
    if req.dry_run:
        for name, argv, env in zip(cluster.names, cluster.commands, cluster.envs, strict=True):
            print(printable(f"# {name}"))
            for line in shell_command(argv, env, columns()).splitlines():
                print(printable(line))
        print(f"# the cluster answers at {cluster.router_url}")
        return status or exits.OK
    sys.stderr.flush()
    return procset.supervise(cluster.commands, cluster.names, envs=cluster.envs, kind="member")
