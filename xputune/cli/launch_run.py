"""`xputune launch sglang` itself, free of typer: the typer command (cli/launch_cmds.py) and
the fast path (cli/fastpath.py, from SPEC; only with --dry-run, which prints and runs nothing)
both call run_launch, so `xputune launch sglang --dry-run` starts without importing typer
(DESIGN: within 2x of the probe) and both print the same bytes.
"""

from __future__ import annotations

import sys

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
    features: str,
    profile: str | None,
    force: bool,
    dry_run: bool,
    stats_dir: str | None,
    root: str | None,
    example: str | None,
) -> None:
    """Prepare the SGLang launch (bindings, tier, plugin, drift check) and print or run it."""
    from xputune.launch import policy
    from xputune.launch.cpu import is_cpu_device
    from xputune.launch.sglang import execute, user_value
    from xputune.topology.discover import discover

    policy.refuse_recording(bool(root or example), dry_run)
    tp = policy.reconcile_tp(tp, user_args)
    model, config_text = policy.model_from_args(model, config, user_args)
    view = open_host(root, example)
    topo = discover(view)
    common = dict(
        user_args=user_args, model=model, config=config_text, tp=tp, dtype=dtype,
        strategy=strategy, tier=tier, write_policy=write_policy, features=features,
        stats_dir=stats_dir,
    )  # fmt: skip
    if is_cpu_device(user_value(user_args, "--device")):
        launch = policy.prepare_cpu(topo, **common)
    else:
        import shlex

        again = "".join(
            f" {flag} {shlex.quote(v)}"
            for flag, v in (("--root", root), ("--example", example))
            if v
        )
        launch = policy.prepare(
            view, topo, cards=cards, profile=profile, force=force, dry_run=dry_run, again=again,
            **common,
        )  # fmt: skip
    from xputune.userfiles import printable

    for line in launch.notes:  # drift lines quote the host's values: data
        sys.stderr.write(printable(line) + "\n")
    if dry_run:
        print(launch.spec.shell_line())
        return
    execute(launch.spec)
