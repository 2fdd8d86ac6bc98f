"""`xputune plan`: bindings, capacity tiers and SGLang flags for one machine and model."""

from __future__ import annotations

from typing import Annotated

import typer

from xputune.cli.common import ExampleOpt, Format, FormatOpt, RootOpt
from xputune.cli.plan_opts import (
    CardsOpt,
    ConfigOpt,
    DtypeOpt,
    ModelOpt,
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
    run_plan(
        model=model, config=config, tp=tp, strategy=strategy, tier=tier, cards=cards,
        dtype=dtype, write_policy=write_policy, force=force, root=root, example=example, fmt=fmt,
    )  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command()(plan)
