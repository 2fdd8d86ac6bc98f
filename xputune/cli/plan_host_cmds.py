"""`xputune plan`: bindings, capacity tiers and SGLang flags for one machine and model."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from xputune.cli.common import ExampleOpt, Format, FormatOpt, RootOpt, console, emit_data, host_from
from xputune.cli.plan_opts import (
    CardsOpt,
    ConfigOpt,
    DtypeOpt,
    ModelOpt,
    StrategyOpt,
    TierOpt,
    TpOpt,
)

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
    from xputune.plan.host_plan import plan_document, plan_for_host
    from xputune.topology.discover import discover

    topo = discover(host_from(root, example))
    host_plan, notes = plan_for_host(
        topo, model, str(config) if config else None, tp, dtype, strategy, cards, tier,
        write_policy, force,
    )  # fmt: skip
    data = plan_document(host_plan, notes)
    if fmt is not Format.table:
        emit_data(data, fmt)
        return
    _render(data)


def _render(data: dict[str, Any]) -> None:
    import shlex

    from xputune.cli.output import ID, TEXT, new_table, print_fitted

    out = console()
    m = data["model"]
    out.print(
        f"[bold]{m['name']}[/] ({m['attention'].upper()}, {m['layers']} layers, "
        f"{m['dtype']}) at TP {m['tp']}: {m['bytes_per_token_per_rank']:,} bytes per token "
        f"per rank; strategy [bold]{data['strategy']}[/]"
    )
    advice = data["recommended_strategy"]
    if advice["strategy"] not in (None, data["strategy"]):
        out.print(f"note: {advice['strategy']} is recommended here: {advice['reason']}")
    ranks = new_table(
        "Bindings",
        [
            ("rank", ID),
            ("card", ID),
            ("bus id", ID),
            "card node",
            "process node",
            "host KV nodes",
            ("CPUs", ID),
            ("NIC", ID),
            ("RDMA", ID),
        ],
    )
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
    right = {**TEXT, "justify": "right"}
    tiers = new_table(
        f"L2 tiers (max {data['capacity']['per_rank_max_gb']} GB per rank)",
        [
            (col, right)
            for col in (
                "step", "--hicache-size GB", "host GB total", "tokens per rank", "distinct tokens"
            )
        ],
    )  # fmt: skip
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
    print_fitted(out, ranks, tiers, keys=2)
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
