"""`xputune launch sglang` and `launch l3-donors`: thin typer commands over their runners."""

from __future__ import annotations

from typing import Annotated

import typer

from xputune.cli.checks import MAX_GB, MAX_TP, given
from xputune.cli.common import ExampleOpt, RootOpt
from xputune.cli.completion import complete_profiles
from xputune.cli.donors_run import run_donors
from xputune.cli.launch_run import run_launch
from xputune.cli.plan_opts import (
    CardsOpt,
    ConfigOpt,
    DtypeOpt,
    L3DirOpt,
    L3HostOpt,
    L3MasterOpt,
    L3Opt,
    L3PoolOpt,
    L3PrefetchOpt,
    L3ProtocolOpt,
    L3SegmentOpt,
    ModelOpt,
    StrategyOpt,
    TierOpt,
)

launch_app = typer.Typer(
    help="Launch a serving engine with the probe's bindings, the plan's tier and the cache "
    "plugin switched on; or a decode node's L3 donors.",
    no_args_is_help=True,
)


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
        typer.Option(
            "--tp",
            help="TP size; default: SGLang's --tp-size from ARGS, else the number of cards "
            "(1 with --device cpu).",
            min=1,
            max=MAX_TP,
        ),
    ] = None,
    strategy: StrategyOpt = "local",
    tier: TierOpt = None,
    cards: CardsOpt = None,
    dtype: DtypeOpt = "bf16",
    write_policy: Annotated[
        str, typer.Option("--write-policy", help="HiCache write policy.")
    ] = "write_through",
    l3: L3Opt = None,
    l3_pool_gb: L3PoolOpt = None,
    l3_segment_gb: L3SegmentOpt = None,
    l3_master: L3MasterOpt = None,
    l3_protocol: L3ProtocolOpt = None,
    l3_dir: L3DirOpt = None,
    l3_prefetch: L3PrefetchOpt = "timeout",
    l3_host: L3HostOpt = None,
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
        str | None,
        typer.Option(
            "--profile",
            "-p",
            help="Tuning profile to check against.",
            metavar="NAME",
            autocompletion=complete_profiles,
            callback=given,
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Launch despite critical drift (and all-nodes without IDO). Never launches "
            "from --root/--example: those are dry runs only.",
        ),
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
            metavar="DIR",
            callback=given,
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

    With --l3 mooncake (--l3-master HOST:PORT, --l3-protocol tcp|rdma) or --l3 file
    (--l3-dir DIR) it adds SGLang's storage tier: the backend, one extra-config (master,
    metadata server, protocol, device per rank, segment size) and the prefetch policy, with
    the layout the backend runs (page_first for Mooncake). It first checks that the master
    answers, that the mooncake package and libibverbs load, and that the segment fits, and says
    in one line what is missing (--force launches anyway).

    Examples:

        xputune launch sglang -n --example h3c-hygon-p800 -- --model-path zai-org/GLM-5 --tp 8
        xputune launch sglang --strategy shared --tier max -- --model-path /models/GLM-5 --tp 8

        xputune launch sglang -- --model-path /models/tiny-llama --device cpu

        xputune launch sglang --l3 mooncake --l3-master m1:50051 -- --model-path /m/GLM-5
    """
    run_launch(
        user_args=list(ctx.args), model=model, config=config, tp=tp, strategy=strategy,
        tier=tier, cards=cards, dtype=dtype, write_policy=write_policy, l3=l3,
        l3_pool_gb=l3_pool_gb, l3_segment_gb=l3_segment_gb, l3_master=l3_master,
        l3_protocol=l3_protocol, l3_dir=l3_dir, l3_prefetch=l3_prefetch, l3_host=l3_host,
        features=features,
        profile=profile, force=force, dry_run=dry_run, stats_dir=stats_dir, root=root,
        example=example,
    )  # fmt: skip


@launch_app.command("l3-donors", help=run_donors.__doc__)
def l3_donors(
    l3_master: Annotated[
        str,
        typer.Option(
            "--l3-master",
            help="mooncake_master's address, HOST:PORT: where every donor mounts its segment "
            "(in Kubernetes its Service, xputune-l3-master.NAMESPACE.svc:50051).",
            metavar="HOST:PORT",
            callback=given,
        ),
    ],
    l3_host: Annotated[
        str | None,
        typer.Option(
            "--l3-host",
            help="This node's address, the one the other nodes reach its donors at (in "
            "Kubernetes the pod's IP from the downward API). Default: $MOONCAKE_HOST.",
            metavar="ADDR",
            callback=given,
        ),
    ] = None,
    l3_protocol: Annotated[
        str | None,
        typer.Option(
            "--l3-protocol", help="Mooncake's transport: rdma (default) or tcp.", metavar="tcp|rdma"
        ),
    ] = None,
    l3_segment_gb: Annotated[
        float | None,
        typer.Option(
            "--l3-segment-gb",
            help="At most this many GB donated by the node, split over its donors (default: "
            "all its NICs' nodes can spare).",
            min=0,
            max=MAX_GB,
        ),
    ] = None,
    l3_pool_gb: Annotated[
        float | None,
        typer.Option(
            "--l3-pool-gb",
            help="The whole pool's size in GB, to say how many nodes like this one fill it.",
            min=0,
            max=MAX_GB,
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Run the donors unbound when numactl is missing. Never runs from "
            "--root/--example: those are dry runs only.",
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", "-n", help="Print one shell line per donor; run nothing."),
    ] = False,
    root: RootOpt = None,
    example: ExampleOpt = None,
) -> int:
    return run_donors(
        l3_master=l3_master, l3_host=l3_host, l3_protocol=l3_protocol,
        l3_segment_gb=l3_segment_gb, l3_pool_gb=l3_pool_gb, force=force, dry_run=dry_run,
        root=root, example=example,
    )  # fmt: skip


def register(app: typer.Typer) -> None:
    app.add_typer(launch_app, name="launch")
