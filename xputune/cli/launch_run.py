"""`xputune launch sglang` itself, free of typer: the typer command (cli/launch_cmds.py) and
the fast path (cli/fastpath.py, from SPEC; only with --dry-run, which prints and runs nothing)
both call run_launch, so `xputune launch sglang --dry-run` starts without importing typer
(DESIGN: within 2x of the probe) and both print the same bytes.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from xputune.cli.checks import given
from xputune.cli.fastpath import EXAMPLE, ROOT, Opt, Spec
from xputune.cli.plan_run import SHARED
from xputune.host import open_host

SPEC = Spec(
    ("launch", "sglang"),
    (
        *SHARED,
        Opt("features", ("--features",), default="lifo,async,count-once,kernels,numa"),
        Opt("profile", ("--profile", "-p"), check=given),
        Opt("force", ("--force",), bool, False),
        Opt("dry_run", ("--dry-run", "-n"), bool, False),
        Opt("stats_dir", ("--stats-dir",), check=given),
        ROOT,
        EXAMPLE,
    ),
    "run_launch",
    passthrough="user_args",
    needs="dry_run",
)


def run_launch(
    user_args: list[str],
    model: str | None,
    config: str | None,
    tp: int | None,
    strategy: str,
    tier: str | None,
    cards: str | None,
    dtype: str,
    write_policy: str,
    l3: str | None,
    l3_pool_gb: float | None,
    l3_segment_gb: float | None,
    l3_master: str | None,
    l3_protocol: str | None,
    l3_dir: str | None,
    l3_prefetch: str,
    l3_host: str | None,
    features: str,
    profile: str | None,
    force: bool,
    dry_run: bool,
    stats_dir: str | None,
    root: str | None,
    example: str | None,
) -> None:
    """Prepare the SGLang launch (bindings, tier, plugin, drift check) and print or run it."""
    from xputune.cli.plan_run import plan_request
    from xputune.launch import policy
    from xputune.launch.cpu import is_cpu_device
    from xputune.launch.sglang import LaunchError, execute, user_value
    from xputune.plan.models import resolve_model
    from xputune.topology.discover import discover
    from xputune.userfiles import model_config, printable

    policy.refuse_recording(bool(root or example), dry_run)
    tp = policy.reconcile_tp(tp, user_args)
    model, config_text = policy.model_from_args(model, config, user_args)
    named = resolve_model(model, model_config(model, Path(config_text) if config_text else None))
    request = policy.LaunchRequest(
        plan=plan_request(
            named, tp=tp, strategy=strategy, tier=tier, cards=cards, dtype=dtype,
            write_policy=write_policy, force=force, l3=l3, l3_pool_gb=l3_pool_gb,
            l3_segment_gb=l3_segment_gb, l3_master=l3_master, l3_protocol=l3_protocol,
            l3_dir=l3_dir, l3_prefetch=l3_prefetch, l3_host=l3_host,
        ),
        user_args=tuple(user_args),
        features=tuple(f.strip() for f in features.split(",") if f.strip() not in ("", "none")),
        profile=profile,
        force=force,
        stats_dir=stats_dir,
    )  # fmt: skip
    view = open_host(root, example)
    topo = discover(view)
    if is_cpu_device(user_value(user_args, "--device")):
        launch = policy.prepare_cpu(topo, request)
    else:
        launch = policy.prepare(view, topo, request)
    refusal = "; ".join(launch.refusals)
    if launch.drifting:
        from xputune.cli.suggest import same_host, suggested

        profiled = ["--profile", profile] if profile else []
        fix = suggested(["apply", *profiled], view, root, mark="`")
        see = shlex.join(["xputune", "check", *profiled]) + same_host(root, example)
        refusal += f": run {fix} (see `{see}`)"
    if refusal:
        refusal += ", or pass --force"
        if not dry_run:
            raise LaunchError(refusal)
        launch.notes.append(f"would refuse: {refusal}")
    for line in launch.notes:  # drift lines quote the host's values: data
        sys.stderr.write(printable(line) + "\n")
    if dry_run:
        print(launch.spec.shell_line())
        return
    execute(launch.spec)
