"""`xputune plan` itself, free of typer: the typer command (cli/plan_host_cmds.py) and the fast
path (cli/fastpath.py, from SPEC) both call run_plan, so a plain `xputune plan` starts without
importing typer (DESIGN: plan within 2x of the probe) and both print the same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xputune.cli.checks import MAX_TP, given
from xputune.cli.fastpath import EXAMPLE, ROOT, Opt, Spec, format_opt
from xputune.cli.output import Format, console, emit_data
from xputune.host import open_host

# The options plan shares with launch sglang (cli/plan_opts.py), then plan's own.
SHARED = (
    Opt("model", ("--model", "-m"), check=given),
    Opt("config", ("--config",), check=given),
    Opt("tp", ("--tp",), int, min=1, max=MAX_TP),
    Opt("strategy", ("--strategy", "-s"), default="local"),
    Opt("tier", ("--tier",)),
    Opt("cards", ("--cards",)),
    Opt("dtype", ("--dtype",), default="bf16"),
    Opt("write_policy", ("--write-policy",), default="write_through"),
)
SPEC = Spec(
    ("plan",),
    (*SHARED, Opt("force", ("--force",), bool, False), ROOT, EXAMPLE, format_opt()),
    "run_plan",
)


def run_plan(
    model: str | None,
    config: str | None,
    tp: int | None,
    strategy: str,
    tier: str | None,
    cards: str | None,
    dtype: str,
    write_policy: str,
    force: bool,
    root: str | None,
    example: str | None,
    fmt: Format,
) -> None:
    """Plan bindings, tiers and SGLang flags for the host and model, and print them."""
    from xputune.plan.host_plan import plan_document, plan_for_host
    from xputune.topology.discover import discover
    from xputune.userfiles import model_config

    named = model_config(model, Path(config) if config else None)
    topo = discover(open_host(root, example))
    host_plan, notes = plan_for_host(
        topo, model, named, tp, dtype, strategy, cards, tier, write_policy, force
    )
    data = plan_document(host_plan, notes)
    if fmt is not Format.table:
        emit_data(data, fmt)
        return
    _render(data)


def _render(data: dict[str, Any]) -> None:
    import shlex

    from rich.text import Text

    from xputune.cli.output import ID, TEXT, add_row, new_table, print_fitted, text

    out = console()
    m = data["model"]
    out.print(
        Text.assemble(
            text(m["name"], "bold"),
            text(
                f" ({m['attention'].upper()}, {m['layers']} layers, {m['dtype']}) at TP "
                f"{m['tp']}: {m['bytes_per_token_per_rank']:,} bytes per token per rank; "
                "strategy "
            ),
            text(data["strategy"], "bold"),
        )
    )
    advice = data["recommended_strategy"]
    if advice["strategy"] not in (None, data["strategy"]):
        out.print(text(f"note: {advice['strategy']} is recommended here: {advice['reason']}"))
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
        add_row(
            ranks,
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
        add_row(
            tiers,
            f"{t['step']}{mark}",
            str(t["hicache_size_gb"]),
            f"{t['host_gb_total']:,}",
            f"{t['tokens_per_rank']:,}",
            f"{t['effective_tokens']:,}",
        )
    print_fitted(out, ranks, tiers, keys=2)
    for note in data["capacity"]["notes"]:
        out.print(text(f"note: {note}"))
    for warning in data["warnings"]:
        out.print(text(f"warning: {warning}", "yellow"))
    env = " ".join(f"{k}={v}" for k, v in data["env"].items())
    out.print(
        Text.assemble(
            "\n",
            ("SGLang", "bold"),
            text(f": {env} python -m sglang.launch_server {shlex.join(data['sglang_args'])}"),
        ),
        soft_wrap=True,
    )
