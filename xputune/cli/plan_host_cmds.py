"""`xputune plan`: bindings, capacity tiers and SGLang flags for one machine and model."""

from __future__ import annotations

from typing import Annotated

import typer

from xputune.cli.common import ExampleOpt, Format, FormatOpt, RootOpt
from xputune.cli.plan_opts import (
    CardsOpt,
    ConfigOpt,
    DtypeOpt,
    L3DirOpt,
    L3GbpsOpt,
    L3HostOpt,
    L3MasterOpt,
    L3Opt,
    L3PoolOpt,
    L3PrefetchOpt,
    L3ProtocolOpt,
    L3SegmentOpt,
    ModelOpt,
    RecomputeOpt,
    RoleOpt,
    StrategyOpt,
    TierOpt,
    TpOpt,
)
from xputune.cli.plan_run import run_plan

ForceOpt = Annotated[
    bool, typer.Option("--force", help="Plan all-nodes even when IDO is off (warns instead).")
]


def plan(
    model: ModelOpt = None,
    config: ConfigOpt = None,
    tp: TpOpt = None,
    strategy: StrategyOpt = "local",
    tier: TierOpt = None,
    cards: CardsOpt = None,
    dtype: DtypeOpt = "bf16",
    write_policy: Annotated[
        str,
        typer.Option(
            "--write-policy",
            help="write_through, write_back or "
            "write_through_selective (backs up prefixes hit at least twice).",
        ),
    ] = "write_through",
    l3: L3Opt = None,
    l3_pool_gb: L3PoolOpt = None,
    l3_segment_gb: L3SegmentOpt = None,
    l3_master: L3MasterOpt = None,
    l3_protocol: L3ProtocolOpt = None,
    l3_dir: L3DirOpt = None,
    l3_prefetch: L3PrefetchOpt = "timeout",
    l3_host: L3HostOpt = None,
    role: RoleOpt = "prefill",
    l3_gbps: L3GbpsOpt = None,
    recompute_us: RecomputeOpt = None,
    force: ForceOpt = False,
    root: RootOpt = None,
    example: ExampleOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Bind each TP rank to a NUMA node and NIC, size HiCache L2, and print the SGLang flags.

    Puts the probe and the model's KV geometry together: which node each card's process and
    host KV live on, how much host memory each rank can give L2 under the strategy, a ladder of
    tiers from small to that maximum (try them in order; stop where the hit rate stops rising),
    and the flags for `python -m sglang.launch_server`.

    With --l3 it adds a tier behind L2: the Mooncake store (DRAM pooled over the cluster) or a
    folder. For a serving instance: the segment each rank mounts, the memory registered beside
    L2 on each NUMA node (and in 2 MiB pages), the RDMA device per rank, the storage flags, and
    the prefix length above which an L3 hit beats recomputing. With --role decode, for a node
    that only donates DRAM: one mooncake_client per RDMA NIC, bound to that NIC's node.

    Examples:

        xputune plan --example h3c-hygon-p800 --model glm-5 --tp 8
        xputune plan --model deepseek-v3 --tp 8 --strategy shared --format json
        xputune plan --model glm-5 --tp 8 --l3 mooncake --l3-pool-gb 4096 --l3-master m1:50051
        xputune plan --model glm-5 --l3 mooncake --role decode --l3-master m1:50051
    """
    run_plan(
        model=model, config=config, tp=tp, strategy=strategy, tier=tier, cards=cards,
        dtype=dtype, write_policy=write_policy, l3=l3, l3_pool_gb=l3_pool_gb,
        l3_segment_gb=l3_segment_gb, l3_master=l3_master, l3_protocol=l3_protocol,
        l3_dir=l3_dir, l3_prefetch=l3_prefetch, l3_host=l3_host, role=role, l3_gbps=l3_gbps,
        recompute_us=recompute_us, force=force, root=root, example=example, fmt=fmt,
    )  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command()(plan)
