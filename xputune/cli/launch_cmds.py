"""`xputune launch sglang`: probe, plan, check, then exec SGLang with all of it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from xputune.cli.common import ExampleOpt, RootOpt, host_from
from xputune.cli.plan_host_cmds import (
    CardsOpt,
    ConfigOpt,
    DtypeOpt,
    ModelOpt,
    StrategyOpt,
    TierOpt,
    build_plan,
)

launch_app = typer.Typer(
    help="Launch a serving engine with the probe's bindings, the plan's tier and the cache "
    "plugin switched on.",
    no_args_is_help=True,
)


def _model_from_path(model_path: str | None) -> tuple[str | None, Path | None]:
    """A preset or config.json for SGLang's --model-path: a local folder, else a known name."""
    if not model_path:
        return None, None
    folder = Path(model_path)
    if (folder / "config.json").is_file():
        return None, folder / "config.json"
    from xputune.plan.presets import presets

    tail = model_path.rstrip("/").rsplit("/", 1)[-1].lower()
    for name, entry in presets().items():
        names = [name, *(a.lower() for a in entry.get("aliases", []))]
        if tail in names or tail.replace("_", "-") in names:
            return name, None
    return None, None


@launch_app.command(
    "sglang",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def sglang(
    ctx: typer.Context,
    model: ModelOpt = None,
    config: ConfigOpt = None,
    tp: Annotated[
        int | None,
        typer.Option("--tp", help="TP size; default: SGLang's --tp-size from ARGS, else 1."),
    ] = None,
    strategy: StrategyOpt = "local",
    tier: TierOpt = None,
    cards: CardsOpt = None,
    dtype: DtypeOpt = "bf16",
    write_policy: Annotated[
        str, typer.Option("--write-policy", help="HiCache write policy.")
    ] = "write_through",
    features: Annotated[
        str,
        typer.Option(
            "--features",
            help="Cache plugin features, comma-separated: lifo, async, count-once, kernels, "
            "numa (host KV buffer on the plan's node), ghost, tp-shared (--strategy shared "
            "uses it instead of numa); 'none' for plain SGLang.",
        ),
    ] = "lifo,async,count-once,kernels,numa",
    profile: Annotated[
        str | None, typer.Option("--profile", "-p", help="Tuning profile to check against.")
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Launch despite critical drift (and all-nodes without IDO)."),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", "-n", help="Print the environment and command; run nothing."),
    ] = False,
    stats_dir: Annotated[
        str | None,
        typer.Option(
            "--stats-dir",
            help="Directory where each server process writes the cache plugin's counters "
            "(xputune-stats-<pid>.json).",
        ),
    ] = None,
    root: RootOpt = None,
    example: ExampleOpt = None,
) -> None:
    """Run `python -m sglang.launch_server` bound, sized and tuned for this machine.

    Computes --numa-node, --enable-hierarchical-cache, --hicache-size, --hicache-mem-layout
    layer_first, --hicache-io-backend, --hicache-write-policy and --disaggregation-ib-device
    from the probe and the plan, sets CUDA/XPU_VISIBLE_DEVICES and the cache plugin's switches,
    runs `xputune check` and refuses on critical drift unless --force, then merges your ARGS
    (after `--`): your flags win, and each conflict is reported.

    With `--device cpu` in ARGS it serves from host memory on a host without cards: no card
    bindings or drift check, the L2 tier sized from this host's memory, SGLang's CPU engine
    switched on, and the plugin features that apply (host-buffer and kernels added, numa
    dropped).

    Examples:

        xputune launch sglang -n --example h3c-hygon-p800 -- --model-path zai-org/GLM-5 --tp 8
        xputune launch sglang --strategy shared --tier max -- --model-path /models/GLM-5 --tp 8

        xputune launch sglang -- --model-path /models/tiny-llama --device cpu
    """
    from xputune.launch.cpu import is_cpu_device
    from xputune.launch.sglang import LaunchError, build_spec, execute, user_value
    from xputune.topology.discover import discover
    from xputune.tune import engine

    user_args = list(ctx.args)
    user_tp = user_value(user_args, "--tp-size")
    if user_tp is not None:
        if len(user_tp) != 1 or not user_tp[0].isdigit():
            raise LaunchError(f"--tp-size in ARGS must be one integer, got {' '.join(user_tp)}")
        if tp is not None and tp != int(user_tp[0]):
            raise LaunchError(f"--tp {tp} disagrees with --tp-size {user_tp[0]} in ARGS")
        tp = int(user_tp[0])
    if not model and not config:
        paths = user_value(user_args, "--model-path")
        model, config = _model_from_path(paths[0] if paths else None)
        if not model and not config:
            raise LaunchError(
                "cannot tell the model's KV size: pass --model PRESET or --config config.json "
                "(or a --model-path folder holding config.json)"
            )

    view = host_from(root, example)
    topo = discover(view)
    if is_cpu_device(user_value(user_args, "--device")):
        spec = _cpu_spec(
            topo, model, config, tp or 1, dtype, strategy, tier, write_policy, features,
            user_args, stats_dir,
        )  # fmt: skip
        if dry_run:
            print(spec.shell_line())
            return
        if root or example:
            raise LaunchError("a launch acts on this host: drop --root/--example, or add --dry-run")
        execute(spec)
        return
    plan = build_plan(
        topo, model, config, tp or 1, dtype, strategy, cards, tier, write_policy, force
    )
    selection = engine.select(topo, profile)
    rows = engine.check(engine.context(view, topo, selection), selection)
    drift = [r for r in rows if not r.holds]
    critical = [r for r in drift if r.severity == "critical"]
    _report_drift(drift)
    if critical and not force:
        message = (
            f"{len(critical)} critical setting(s) drift from profile {selection.profile.name}: "
            "run `xputune apply` (see `xputune check`), or pass --force"
        )
        if not dry_run:
            raise LaunchError(message)
        sys.stderr.write(f"would refuse: {message}\n")
    chosen = [f.strip() for f in features.split(",") if f.strip() and f.strip() != "none"]
    spec = build_spec(plan, user_args, chosen)
    if stats_dir:
        import os

        spec.env["XPUTUNE_HICACHE_STATS"] = os.path.abspath(stats_dir)
    for conflict in spec.conflicts:
        sys.stderr.write(f"conflict: {conflict}\n")
    for warning in plan.bindings.warnings:
        sys.stderr.write(f"warning: {warning}\n")
    steps = [t.hicache_size_gb for t in plan.capacity.tiers]
    step = steps.index(plan.tier.hicache_size_gb) + 1 if plan.tier.hicache_size_gb in steps else 0
    yours = user_value(user_args, "--hicache-size")
    sys.stderr.write(
        f"tier: {plan.tier.hicache_size_gb} GB per rank (step {step or '-'} of {len(steps)}, "
        f"max {plan.capacity.per_rank_max_gb:.0f} GB), {plan.tier.effective_tokens:,} tokens "
        f"in L2; strategy {plan.bindings.strategy}"
        + (f"; your --hicache-size {' '.join(yours)} is used instead" if yours else "")
        + "\n"
    )
    if dry_run:
        print(spec.shell_line())
        return
    execute(spec)


def _cpu_spec(
    topo, model, config, tp, dtype, strategy, tier, write_policy, features, user_args, stats_dir
):  # a Topology, the CLI's values -> LaunchSpec
    """The `--device cpu` launch: tier from this host's memory, CPU engine, plugin features."""
    from xputune.cli.plan_cmds import load_geometry
    from xputune.errors import XputuneError
    from xputune.launch.cpu import build_cpu_spec, cpu_tier
    from xputune.launch.sglang import user_value

    geometry = load_geometry(model, config, tp, dtype)
    if geometry is None:
        raise XputuneError("give --model NAME or --config config.json")
    host_bytes = sum(n.memory_total_bytes or 0 for n in topo.numa_nodes)
    shared = strategy == "shared"
    chosen = cpu_tier(host_bytes, tp, geometry.bytes_per_token, geometry.replicated, shared, tier)
    cpus = sorted(c for n in topo.numa_nodes for c in n.cpus)
    wanted = [f.strip() for f in features.split(",") if f.strip() and f.strip() != "none"]
    spec, notes = build_cpu_spec(
        user_args=user_args, features=wanted, tp=tp, tier=chosen, write_policy=write_policy,
        numa_nodes=sum(1 for n in topo.numa_nodes if n.cpus), cpus=cpus, shared=shared,
        stats_dir=stats_dir, python=sys.executable,
    )  # fmt: skip
    if topo.cards:
        sys.stderr.write(f"note: --device cpu: this host's {len(topo.cards)} card(s) stay unused\n")
    for note in notes:
        sys.stderr.write(f"note: {note}\n")
    for conflict in spec.conflicts:
        sys.stderr.write(f"conflict: {conflict}\n")
    yours = user_value(user_args, "--hicache-size")
    steps = chosen.steps
    step = steps.index(chosen.hicache_size_gb) + 1
    sys.stderr.write(
        f"tier: {chosen.hicache_size_gb} GB per rank (step {step} of {len(steps)}, "
        f"max {chosen.per_rank_max_gb:.0f} GB from this host's "
        f"{host_bytes / 2**30:.1f} GiB), {chosen.tokens_per_rank:,} tokens per rank in L2; "
        "device cpu (no card bindings, drift check skipped)"
        + (f"; your --hicache-size {' '.join(yours)} is used instead" if yours else "")
        + "\n"
    )
    return spec


def _report_drift(drift: list) -> None:  # list of tune Rows
    """One line per drifting knob: how many targets, the first one, and its fix."""
    by_knob: dict[str, list] = {}
    for row in drift:
        by_knob.setdefault(row.knob, []).append(row)
    for knob, rows in by_knob.items():
        first = rows[0]
        more = f" and {len(rows) - 1} more" if len(rows) > 1 else ""
        sys.stderr.write(
            f"{first.severity}: {knob}: {first.target}{more} is {first.actual}, expected "
            f"{first.expected} (fix: {first.fix})\n"
        )


def register(app: typer.Typer) -> None:
    app.add_typer(launch_app, name="launch")
