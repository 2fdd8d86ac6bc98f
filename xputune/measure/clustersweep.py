"""`sweep --instances`: the cluster question measured, run by run, beside its prediction.

For each instance count N, each routing policy and (with --compare-l3) with and without the L3
of the launch options, `xputune launch cluster` starts N servers behind sglang-router (the
launcher's checks, plan and plugin for every instance; the router is sglang-router's own); once
the router lists all N healthy, the trace is replayed through it on cold caches, every worker's
tier counters are added up, and plan/cluster.py predicts the same requests for N instances
under the same policy (measure/predict.predict_cluster). Then the set is stopped (SIGTERM to
the launcher, which stops every member).

What each run's L3 holds at its start: a file store gets a new folder per run, as a sweep's
sizes do (measure/l3store.py); a Mooncake store whose master the cluster starts itself (no
--l3-master) is new with every run; a master elsewhere outlives the runs, so it is refused
unless --clear-l3 (emptied through the first instance before the replay) or --keep-l3.

Only the policies plan/cluster.py predicts are swept (power_of_two routes by load, which a
trace does not hold).
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from xputune.errors import XputuneError
from xputune.measure import l3store
from xputune.measure.client import Endpoint
from xputune.measure.ports import server_port
from xputune.measure.serverproc import CLUSTER_OF_ONE, LaunchFailed, Server, dry_run
from xputune.measure.sweep import (
    METRICS,
    ClusterRun,
    Progress,
    Size,
    Step,
    SweepResult,
    first_workload,
    logs_and_policy,
    measure_step,
    run_steps,
)
from xputune.plan.cluster import ROUTINGS
from xputune.userfiles import printable

if TYPE_CHECKING:
    from xputune.measure.replay import Load
    from xputune.measure.workload import TraceSlice

#: The launcher's options that set what each run sets: the cluster's shape and ports.
OWN_OPTIONS = ("--instances", "--router", "--router-port", "--first-port")
#: Runs one sweep may ask for (each starts N servers).
MAX_RUNS = 64


def parse_instances(text: str) -> list[int]:
    """The instance counts of --instances, in the order given: as many as a launch takes."""
    from xputune.launch.cluster import MAX_INSTANCES
    from xputune.plan.cluster import parse_counts

    return parse_counts(text, MAX_INSTANCES)


def parse_routings(text: str) -> list[str]:
    """The policies of --routing, in the order given, each once."""
    out: list[str] = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        if word not in ROUTINGS:
            raise XputuneError(
                f"--routing: {printable(word)[:30]!r} is not a policy the sweep predicts "
                f"(one of {', '.join(ROUTINGS)})"
            )
        if word not in out:
            out.append(word)
    if not out:
        raise XputuneError(f"--routing: give one or more of {', '.join(ROUTINGS)}")
    return out


def _split(words: list[str], names: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(options among `words` named in `names`, each with its value; the others)."""
    taken: list[str] = []
    kept: list[str] = []
    i = 0
    while i < len(words):
        name, eq, _ = words[i].partition("=")
        if name in names:
            taken.append(words[i])
            if not eq and i + 1 < len(words):
                taken.append(words[i + 1])
                i += 1
        else:
            kept.append(words[i])
        i += 1
    return taken, kept


def without_l3(launch_opts: list[str]) -> list[str]:
    """The launch options with every L3 option (--l3 and --l3-*, each taking a value) taken
    out: the same cluster, private caches."""
    names = {w.partition("=")[0] for w in launch_opts}
    return _split(launch_opts, tuple(n for n in names if n == "--l3" or n.startswith("--l3-")))[1]


def check_cluster_args(launch_opts: list[str], sglang_args: list[str]) -> None:
    """Refuse options that fight the sweep over what it sets per run: the cluster's shape,
    its ports, each instance's L2 size."""
    from xputune.launch.sglang import user_value
    from xputune.measure.sweep import check_args

    check_args(sglang_args, launch_opts)
    taken, _ = _split(launch_opts, OWN_OPTIONS)
    if taken:
        raise XputuneError(
            f"--launch-opt {printable(taken[0])}: the sweep sets the cluster's shape and ports "
            "at every run (its --instances and --routing say which)"
        )
    for flag in ("--host", "--port"):
        if user_value(sglang_args, flag) is not None:
            raise XputuneError(f"sweep --instances sets {flag} for every instance: remove it")


def run_cluster_sweep(
    *,
    trace: TraceSlice,
    instances: list[int],
    routings: list[str],
    compare_l3: bool,
    size: Size | None,
    launch_opts: list[str],
    sglang_args: list[str],
    load: Load,
    block_tokens: int | None,
    max_output: int,
    token_range: tuple[int, int] | None,
    host_tokens: int | None = None,
    start_timeout: float = 600.0,
    stop_grace: float = 20.0,
    progress: Progress | None = None,
    clear_l3: bool = False,
    keep_l3: bool = False,
) -> SweepResult:
    """Every run (N x policy x L3 on/off), each on cold caches; every set stopped.

    The launcher runs once as a dry run of a cluster of one (its checks, the preflight of
    SGLang's interpreter, the L3 backend) before any set starts."""
    from xputune.launch.sglang import user_value

    check_cluster_args(launch_opts, sglang_args)
    progress = progress or Progress()
    extra = [] if user_value(sglang_args, "--enable-metrics") is not None else METRICS
    args = [*sglang_args, *extra, *(size.args() if size is not None else [])]
    command = dry_run(launch_opts, args, CLUSTER_OF_ONE)
    backend = l3store.backend_of(command)
    if compare_l3 and backend is None:
        raise XputuneError(
            "--compare-l3: the launch has no L3 tier to compare (--launch-opt '--l3 file "
            "--l3-dir DIR' or '--l3 mooncake ...' adds one)"
        )
    runs = [
        ClusterRun(n, routing, l3)
        for n in instances
        for routing in routings
        for l3 in ((True, False) if compare_l3 else (backend is not None,))
    ]
    if len(runs) > MAX_RUNS:
        raise XputuneError(f"{len(runs)} runs asked for; at most {MAX_RUNS} in one sweep")
    own_master = not _split(launch_opts, ("--l3-master",))[0]
    logs, policy = logs_and_policy(command, clear=clear_l3, keep=keep_l3,
                                   master_in_set=own_master)  # fmt: skip
    result = SweepResult([], None, None, None, logs, l3=policy, cluster=True)

    def each_run() -> None:
        for i, run in enumerate(runs):
            step = Step(run.label, size, os.path.join(logs, f"{i + 1}-{_file_label(run)}.log"),
                        cluster=run)  # fmt: skip
            result.steps.append(step)
            progress.step(i + 1, len(runs), run.label)
            if not _run_cluster(step, result, trace, progress, launch_opts=launch_opts,
                                args=args, load=load, block_tokens=block_tokens,
                                max_output=max_output, token_range=token_range,
                                host_tokens=host_tokens, start_timeout=start_timeout,
                                stop_grace=stop_grace, number=i + 1):  # fmt: skip
                result.interrupted = True
                return
            progress.done(step)

    return run_steps(result, each_run)


def _file_label(run: ClusterRun) -> str:
    return f"{run.instances}-{run.routing}" + ("-l3" if run.l3 else "")


def _launch_argv(run: ClusterRun, launch_opts: list[str], args: list[str], router_port: int,
                 first_port: int, l3_dir: str | None) -> list[str]:  # fmt: skip
    opts = launch_opts if run.l3 else without_l3(launch_opts)
    if l3_dir is not None:
        opts = [*_split(opts, ("--l3-dir",))[1], "--l3-dir", l3_dir]
    return [
        sys.executable, "-m", "xputune", "launch", "cluster", "--instances", str(run.instances),
        "--router", run.routing, "--router-port", str(router_port), "--first-port",
        str(first_port), *opts, "--", *args,
    ]  # fmt: skip


def _run_cluster(step: Step, result: SweepResult, trace: TraceSlice, progress: Progress, *,
                 launch_opts: list[str], args: list[str], load: Load,
                 block_tokens: int | None, max_output: int,
                 token_range: tuple[int, int] | None, host_tokens: int | None,
                 start_timeout: float, stop_grace: float, number: int) -> bool:  # fmt: skip
    """Launch the set, replay through its router, stop it; False when the replay was
    interrupted."""
    from xputune.measure import router
    from xputune.measure.predict import predict_cluster

    run = step.cluster
    assert run is not None
    policy = result.l3 if run.l3 else None
    try:
        router_port = server_port()
        first_port = server_port(run=run.instances)
    except OSError as exc:
        raise LaunchFailed(f"{step.label}: {exc}") from None
    endpoint = Endpoint("http", "127.0.0.1", router_port)
    if policy is not None:
        step.l3, _ = l3store.prepare(policy, number, _file_label(run))
    l3_dir = None if step.l3 is None else step.l3.folder
    argv = _launch_argv(run, launch_opts, args, router_port, first_port, l3_dir)
    server = Server(argv, endpoint, Path(step.log),
                    ready=lambda e, t: router.all_healthy(e, run.instances, t))  # fmt: skip
    try:
        step.start_s = server.start(start_timeout)
        target = router.read_target(endpoint, host_tokens)
        step.info = target.info
        step.cluster = replace(run, workers=tuple(w.url for w in target.workers))
        if not step.info.hicache:
            raise LaunchFailed(f"the instances of {step.label} run without HiCache")
        if policy is not None and policy.between_sizes == l3store.CLEARED and target.workers:
            assert step.l3 is not None
            l3store.clear(target.workers[0], step.l3)
        workload = first_workload(result, trace, step.info, token_range=token_range,
                                  block_tokens=block_tokens, max_output=max_output)  # fmt: skip
        requests = workload.trace()
        step.prediction = predict_cluster(requests, step.info, target.instances, run.routing)
        progress.ready(step)
        before, after = measure_step(step, result, target, load, progress)
        spread = router.requests_per_worker(requests, target.instances, run.routing, before,
                                            after)  # fmt: skip
        step.cluster = replace(step.cluster, requests=spread)
    finally:
        step.stop_s = server.stop(stop_grace)
        if step.l3 is not None:
            l3store.finish(step.l3)
    return step.run.stop != "interrupted"
