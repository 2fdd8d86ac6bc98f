"""`xputune plan`: bindings, capacity tiers and SGLang flags for one machine and model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from xputune.cli.common import ExampleOpt, Format, FormatOpt, RootOpt, console, emit_data, host_from

if TYPE_CHECKING:
    from xputune.plan.host_plan import HostPlan
    from xputune.topology.model import Topology

StrategyOpt = Annotated[
    str,
    typer.Option(
        "--strategy",
        "-s",
        help="local: process and host KV on the card's node (safe, may leave nodes idle); "
        "all-nodes: a node per card (needs PCIe IDO on shared switches); shared: one TP-shared "
        "host buffer interleaved over all nodes (MLA models).",
    ),
]
TierOpt = Annotated[
    str | None,
    typer.Option(
        "--tier",
        help="L2 size: a ladder step (1, 2, ...), a size like 64GB, or max. Default: the "
        "middle of the ladder; climb while the hit rate still rises.",
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option("--model", "-m", help="Model preset (e.g. glm-5, deepseek-v3, qwen3-32b)."),
]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="A Hugging Face config.json instead of --model.")
]
TpOpt = Annotated[int, typer.Option("--tp", help="Tensor-parallel size (ranks = cards).")]
CardsOpt = Annotated[
    str | None,
    typer.Option(
        "--cards",
        help="Card order for ranks 0..N-1 as CUDA/XPU visible order, e.g. xpu4,xpu5 or 4,5. "
        "Default: bus order.",
    ),
]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="KV cache dtype.")]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Plan all-nodes even when IDO is off (warns instead).")
]


def build_plan(
    topo: Topology,
    model: str | None,
    config: Path | None,
    tp: int,
    dtype: str,
    strategy: str,
    cards: str | None,
    tier: str | None,
    write_policy: str,
    force: bool,
) -> HostPlan:
    """Topology + geometry -> HostPlan; shared by `plan` and `launch sglang`."""
    from xputune.cli.plan_cmds import load_geometry
    from xputune.errors import XputuneError
    from xputune.plan.host_plan import make_plan

    geometry = load_geometry(model, config, tp, dtype)
    if geometry is None:
        raise XputuneError("give --model NAME or --config config.json")
    order = [c.strip() for c in cards.split(",") if c.strip()] if cards else None
    plan = make_plan(
        topo,
        geometry,
        strategy=strategy,
        order=order,
        tier=tier,
        write_policy=write_policy,
        require_ido=not force,
    )
    return plan


def plan_to_dict(plan: HostPlan) -> dict[str, Any]:
    g, b, c = plan.geometry, plan.bindings, plan.capacity
    return {
        "schema_version": 1,
        "model": {
            "name": g.name,
            "attention": g.attention,
            "layers": g.layers,
            "tp": g.tp,
            "dtype": g.dtype,
            "bytes_per_token_rank": g.bytes_per_token,
            "replicated_across_ranks": g.replicated,
        },
        "strategy": b.strategy,
        "ranks": [
            {
                "rank": r.rank,
                "card": r.card,
                "bdf": r.bdf,
                "card_numa_node": r.local_node,
                "numa_node": r.numa_node,
                "memory_nodes": list(r.memory_nodes),
                "cpus": _cpulist(r.cpus),
                "nic": r.nic,
                "rdma": r.rdma,
            }
            for r in b.ranks
        ],
        "capacity": {
            "per_rank_max_gb": round(c.per_rank_max_gb, 1),
            "effective_tokens_max": c.effective_tokens_max,
            "tiers": [
                {
                    "step": i + 1,
                    "hicache_size_gb": t.hicache_size_gb,
                    "host_gb_total": round(t.host_bytes_total / 1e9, 1),
                    "tokens_per_rank": t.tokens_per_rank,
                    "effective_tokens": t.effective_tokens,
                }
                for i, t in enumerate(c.tiers)
            ],
            "notes": list(c.notes),
        },
        "tier": {
            "hicache_size_gb": plan.tier.hicache_size_gb,
            "effective_tokens": plan.tier.effective_tokens,
        },
        "sglang_args": list(plan.sglang_args),
        "env": plan.env,
        "warnings": list(b.warnings),
    }


def _cpulist(cpus: tuple[int, ...]) -> str:
    from xputune.host.values import format_cpulist

    return format_cpulist(cpus)


def plan(
    model: ModelOpt = None,
    config: ConfigOpt = None,
    tp: TpOpt = 8,
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

    Examples:

        xputune plan --example h3c-hygon-p800 --model glm-5 --tp 8
        xputune plan --model deepseek-v3 --tp 8 --strategy shared --format json
    """
    from xputune.topology.discover import discover

    topo = discover(host_from(root, example))
    host_plan = build_plan(
        topo, model, config, tp, dtype, strategy, cards, tier, write_policy, force
    )
    data = plan_to_dict(host_plan)
    if fmt is not Format.table:
        emit_data(data, fmt)
        return
    _render(data)


def _render(data: dict[str, Any]) -> None:
    import shlex

    from rich.table import Table

    out = console()
    m = data["model"]
    out.print(
        f"[bold]{m['name']}[/] ({m['attention'].upper()}, {m['layers']} layers, "
        f"{m['dtype']}) at TP {m['tp']}: {m['bytes_per_token_rank']:,} bytes per token "
        f"per rank; strategy [bold]{data['strategy']}[/]"
    )
    ranks = Table(title="Bindings", title_justify="left")
    for col in (
        "rank",
        "card",
        "bus id",
        "card node",
        "process node",
        "host KV nodes",
        "CPUs",
        "NIC",
        "RDMA",
    ):
        ranks.add_column(col)
    for r in data["ranks"]:
        ranks.add_row(
            str(r["rank"]),
            r["card"],
            r["bdf"],
            str(r["card_numa_node"]),
            str(r["numa_node"]),
            " ".join(map(str, r["memory_nodes"])) or "-",
            r["cpus"],
            r["nic"] or "-",
            r["rdma"] or "-",
        )
    out.print(ranks)
    tiers = Table(
        title=f"L2 tiers (max {data['capacity']['per_rank_max_gb']} GB per rank)",
        title_justify="left",
    )
    for col in ("step", "--hicache-size GB", "host GB total", "tokens per rank", "distinct tokens"):
        tiers.add_column(col, justify="right")
    chosen = data["tier"]["hicache_size_gb"]
    for t in data["capacity"]["tiers"]:
        mark = " <" if t["hicache_size_gb"] == chosen else ""
        tiers.add_row(
            f"{t['step']}{mark}",
            str(t["hicache_size_gb"]),
            f"{t['host_gb_total']:,}",
            f"{t['tokens_per_rank']:,}",
            f"{t['effective_tokens']:,}",
        )
    out.print(tiers)
    for note in data["capacity"]["notes"]:
        out.print(f"note: {note}")
    for warning in data["warnings"]:
        out.print(f"[yellow]warning: {warning}[/]")
    env = " ".join(f"{k}={v}" for k, v in data["env"].items())
    out.print(
        "\n[bold]SGLang[/]: "
        + env
        + " python -m sglang.launch_server "
        + shlex.join(data["sglang_args"]),
        soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    app.command()(plan)
