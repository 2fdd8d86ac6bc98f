"""`xputune plan` itself, free of typer: the typer command (cli/plan_host_cmds.py) and the fast
path (cli/fastpath.py, from SPEC) both call run_plan, so a plain `xputune plan` starts without
importing typer (DESIGN: plan within 2x of the probe) and both print the same bytes.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xputune.cli.checks import MAX_GB, MAX_GBPS, MAX_MS, MAX_TP, given
from xputune.cli.fastpath import EXAMPLE, ROOT, Opt, Spec, format_opt
from xputune.cli.output import Format, console, emit_data
from xputune.host import open_host

if TYPE_CHECKING:
    from xputune.plan.host_plan import PlanRequest
    from xputune.plan.models import NamedConfig

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
    Opt("l3", ("--l3",)),
    Opt("l3_pool_gb", ("--l3-pool-gb",), float, min=0, max=MAX_GB),
    Opt("l3_segment_gb", ("--l3-segment-gb",), float, min=0, max=MAX_GB),
    Opt("l3_master", ("--l3-master",), check=given),
    Opt("l3_protocol", ("--l3-protocol",)),
    Opt("l3_dir", ("--l3-dir",), check=given),
    Opt("l3_prefetch", ("--l3-prefetch",), default="timeout"),
    Opt("l3_host", ("--l3-host",), check=given),
)
SPEC = Spec(
    ("plan",),
    (
        *SHARED,
        Opt("role", ("--role",), default="prefill"),
        Opt("l3_gbps", ("--l3-gbps",), float, min=0, max=MAX_GBPS),
        Opt("recompute_us", ("--recompute-us-per-token",), float, min=0, max=MAX_MS),
        Opt("force", ("--force",), bool, False),
        ROOT,
        EXAMPLE,
        format_opt(),
    ),
    "run_plan",
)


def plan_request(
    named: NamedConfig,
    *,
    tp: int | None,
    strategy: str,
    tier: str | None,
    cards: str | None,
    dtype: str,
    write_policy: str,
    force: bool,
    l3: str | None,
    l3_pool_gb: float | None,
    l3_segment_gb: float | None,
    l3_master: str | None,
    l3_protocol: str | None,
    l3_dir: str | None,
    l3_prefetch: str,
    l3_host: str | None,
    role: str = "prefill",
    l3_gbps: float | None = None,
    recompute_us: float | None = None,
) -> PlanRequest:
    """The flags of plan and launch sglang as plan/'s request (the model already read)."""
    from xputune.errors import XputuneError
    from xputune.plan.host_plan import PlanRequest
    from xputune.plan.l3 import Assumptions, L3Request

    l3_only = {
        "--l3-pool-gb": l3_pool_gb, "--l3-segment-gb": l3_segment_gb, "--l3-master": l3_master,
        "--l3-protocol": l3_protocol, "--l3-dir": l3_dir, "--l3-host": l3_host,
        "--l3-gbps": l3_gbps, "--recompute-us-per-token": recompute_us,
    }  # fmt: skip
    given_l3 = [flag for flag, value in l3_only.items() if value is not None]
    if l3 is None and (given_l3 or role != "prefill"):
        raise XputuneError(f"{given_l3[0] if given_l3 else '--role'} needs --l3 mooncake|file")
    if l3 == "file" and l3_dir is None:
        raise XputuneError("--l3 file needs --l3-dir DIR (the folder of the L3 pages)")
    if l3 == "mooncake" and l3_dir is not None:
        raise XputuneError("--l3-dir is for --l3 file; Mooncake keeps its pages in the pool")
    l3_request = None
    if l3 is not None:
        assumptions = Assumptions()
        if recompute_us is not None:
            assumptions = replace(assumptions, recompute_us_per_token=recompute_us)
        if l3_gbps is not None:
            assumptions = replace(assumptions, l3_gb_s=l3_gbps)
        l3_request = L3Request(
            backend=l3, pool_gb=l3_pool_gb, segment_gb=l3_segment_gb, protocol=l3_protocol,
            role=role, master=l3_master, directory=l3_dir, prefetch_policy=l3_prefetch,
            local_hostname=l3_host, assumptions=assumptions,
        )  # fmt: skip
    return PlanRequest(
        model=named,
        dtype=dtype,
        tp=tp,
        strategy=strategy,
        cards=tuple(c.strip() for c in cards.split(",") if c.strip()) if cards else (),
        tier=tier,
        write_policy=write_policy,
        require_ido=not force,
        l3=l3_request,
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
    l3: str | None,
    l3_pool_gb: float | None,
    l3_segment_gb: float | None,
    l3_master: str | None,
    l3_protocol: str | None,
    l3_dir: str | None,
    l3_prefetch: str,
    l3_host: str | None,
    role: str,
    l3_gbps: float | None,
    recompute_us: float | None,
    force: bool,
    root: str | None,
    example: str | None,
    fmt: Format,
) -> None:
    """Plan bindings, tiers and SGLang flags for the host and model, and print them."""
    from xputune.plan.bindings import PlanError
    from xputune.plan.host_plan import plan_document, plan_for_host
    from xputune.plan.models import resolve_model
    from xputune.topology.discover import discover
    from xputune.userfiles import model_config

    named = resolve_model(model, model_config(model, Path(config) if config else None))
    if named is None:
        raise PlanError("give --model (a preset, a Hugging Face id or a config.json)")
    request = plan_request(
        named, tp=tp, strategy=strategy, tier=tier, cards=cards, dtype=dtype,
        write_policy=write_policy, force=force, l3=l3, l3_pool_gb=l3_pool_gb,
        l3_segment_gb=l3_segment_gb, l3_master=l3_master, l3_protocol=l3_protocol,
        l3_dir=l3_dir, l3_prefetch=l3_prefetch, l3_host=l3_host, role=role, l3_gbps=l3_gbps,
        recompute_us=recompute_us,
    )  # fmt: skip
    topo = discover(open_host(root, example))
    host_plan, notes = plan_for_host(topo, request)
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
    if "l3" in data:
        _render_l3(out, data["l3"])


def _render_l3(out: Any, l3: dict[str, Any]) -> None:
    """The L3 part of the plan: where its memory goes and when a hit pays."""

    from xputune.cli.output import TEXT, add_row, new_table, print_fitted, text

    right = {**TEXT, "justify": "right"}
    pool = (
        f"; pool {l3['pool_gb']:,g} GB ({l3['pool_tokens']:,} tokens at "
        f"{l3['store_bytes_per_token']:,} bytes each)"
        if l3["pool_gb"]
        else ""
    )
    where = f", master {l3['master']}" if l3["master"] else ""
    out.print()
    if l3["backend"] == "file":
        out.print(text(f"L3: file backend{pool}"))
    elif l3["role"] == "decode":
        out.print(text(f"L3 donor (decode node): mooncake over {l3['protocol']}{where}{pool}"))
    else:
        out.print(
            text(
                f"L3: mooncake over {l3['protocol']}{where}{pool}; this instance mounts "
                f"{l3['segment_gb']:,g} GB"
            )
        )
    if l3["nodes"] and l3["role"] == "prefill":
        nodes = new_table(
            "Registered memory per NUMA node (L2 pools and L3 segments)",
            [("node", right), ("L2 GB", right), ("L3 GB", right), ("registered GB", right),
             ("2 MiB pages", right), ("usable GB", right)],
        )  # fmt: skip
        for n in l3["nodes"]:
            usable = "-" if n["usable_gb"] is None else f"{n['usable_gb']:,.1f}"
            add_row(
                nodes, str(n["node"]), f"{n['l2_gb']:,.1f}", f"{n['segment_gb']:,.2f}",
                f"{n['registered_gb']:,.1f}", f"{n['hugepages_2m']:,}",
                usable + ("" if n["fits"] is not False else " (!)"),
            )  # fmt: skip
        print_fitted(out, nodes, keys=1)
    for d in l3.get("donors", []):
        out.print(
            text(
                f"donor {d['nic']} ({d['rdma'] or '-'}) on node {d['numa_node']}: "
                f"{d['segment_gb']:,g} GB"
            )
        )
        out.print(text("  " + _shell(d["command"])), soft_wrap=True)
    if "master_command" in l3:
        out.print(text(f"master (one per cluster): {shlex.join(l3['master_command'])}"))
    be = l3["break_even"]
    if be is not None:
        costs = (
            f"L3 {be['l3_gb_s_per_rank']:g} GB/s per rank ({be['l3_source']}) + "
            f"{be['l3_latency_ms']:g} ms, then L2 {be['l2_us_per_token']:.1f} us/token; "
            f"recompute {be['recompute_us_per_token']:g} us/token"
        )
        verdict = (
            "an L3 hit never pays at these rates"
            if be["never_pays"]
            else f"an L3 hit pays above {be['tokens']:,} tokens of prefix"
        )
        out.print(
            text(
                f"{verdict} ({costs}; --l3-gbps and --recompute-us-per-token replace the "
                "assumptions)"
            )
        )
    for note in l3["notes"]:
        out.print(text(f"note: {note}"))
    for warning in l3["warnings"]:
        out.print(text(f"warning: {warning}", "yellow"))


def _shell(words: list[str]) -> str:
    """A command as shell text; the donor's host variable is double-quoted, so it expands."""
    from xputune.plan.l3 import HOST_VARIABLE

    return " ".join(f'"{w}"' if HOST_VARIABLE in w else shlex.quote(w) for w in words)
