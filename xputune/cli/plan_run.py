"""`xputune plan`: bindings, capacity tiers, the L3 tier and SGLang flags for one machine and
model; and the request plan/ and launch/ take, built from the flags (plan_request)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xputune.cli.options import (
    EXAMPLE,
    FORCE_IDO,
    FORMAT,
    L3_GBPS,
    L3_SHARED,
    PLAN_SHARED,
    PYTHON,
    RECOMPUTE,
    ROLE,
    ROOT,
)
from xputune.cli.output import Format, console, emit_data, is_quiet
from xputune.cli.spec import Command, Request
from xputune.host import open_host

if TYPE_CHECKING:
    from xputune.plan.host_plan import PlanRequest

PLAN = Command(
    ("plan",),
    "xputune.cli.plan_run:run_plan",
    (
        *PLAN_SHARED, *L3_SHARED, ROLE, L3_GBPS, RECOMPUTE, FORCE_IDO, PYTHON, ROOT,
        EXAMPLE, FORMAT,
    ),
)  # fmt: skip


def for_host(topo: Any, request: PlanRequest) -> Any:
    """plan_for_host, with the flag that overrides a refused TP size named in its refusal."""
    from xputune.plan.host_plan import RefusedTpError, plan_for_host

    try:
        return plan_for_host(topo, request)
    except RefusedTpError as exc:
        raise RefusedTpError(f"{exc} (--force plans it anyway)") from None


def run_plan(req: Request) -> None:
    """Bind each TP rank to a NUMA node and NIC, size HiCache L2, and print the SGLang flags.

    Puts the probe and the model's KV geometry together: which node each card's process and
    host KV live on, how much host memory each rank can give L2 under the strategy, a ladder of
    tiers from small to that maximum (try them in order; stop where the hit rate stops rising),
    and the flags for `python -m sglang.launch_server`, as the sglang release of --python (or
    XPUTUNE_SGLANG_PYTHON, else this Python) takes them (0.5.23, the newest supported, where
    it has none). --hicache-size is always given, per rank: from 0.5.21 SGLang would otherwise
    size L2 itself from host-wide free memory, blind to NUMA. The RDMA device per rank
    (--disaggregation-ib-device) is shown apart: SGLang reads it on a PD prefill or decode
    server only.

    Each NUMA node has an L2 budget: its free memory now (MemFree, page cache and reclaimable
    kernel memory, from the node's meminfo) less --node-reserve-gb, the L3 segments registered
    there and its ranks' own memory, divided among the cards bound to it. The ladder stops at
    the tightest node's budget, so no tier spills a pool onto another node; the table says
    which node cuts it. The plan also says where the printed command's pools land (SGLang
    binds each rank with numactl from --numa-node; 0.5.23's
    SGLANG_HICACHE_HOST_PARALLEL_ALLOC_THREADS prefaults them from threads under that
    binding) and that `launch sglang`'s own buffer is bound before its first touch.

    With --l3 it adds a tier behind L2: the Mooncake store (DRAM pooled over the cluster) or a
    folder. For a serving instance: the segment each rank mounts, the memory registered beside
    L2 on each NUMA node (and in 2 MiB pages), the RDMA device per rank, the storage flags, and
    the prefix length above which an L3 hit beats recomputing. With --role decode, for a node
    that only donates DRAM: one mooncake_client per RDMA NIC, bound to that NIC's node.

    Examples:

        xputune plan --example h3c-hygon-p800 --model glm-5 --tp 8
        xputune plan --model deepseek-v3 --tp 8 --strategy shared --format json
        xputune plan --model glm-5 --tp 8 --node-reserve-gb 48
        xputune plan --model glm-5 --tp 8 --l3 mooncake --l3-pool-gb 4096 \\
            --l3-master m1:50051
        xputune plan --model glm-5 --l3 mooncake --role decode --l3-master \\
            m1:50051
    """
    from xputune.launch import preflight
    from xputune.launch.policy import plan_document_for
    from xputune.plan.bindings import PlanError
    from xputune.plan.models import resolve_model
    from xputune.topology.discover import discover
    from xputune.userfiles import model_config

    named = resolve_model(
        req.model, model_config(req.model, Path(req.config) if req.config else None)
    )
    if named is None:
        raise PlanError("give --model (a preset, a Hugging Face id or a config.json)")
    from xputune.cli.requests import plan_request

    request = plan_request(named, req, req.tp)
    sglang = preflight.start(req.python)  # asks SGLang's interpreter while the host is read
    topo = discover(open_host(req.root, req.example))
    host_plan, notes = for_host(topo, request)
    data = plan_document_for(host_plan, notes, sglang)
    if req.fmt is not Format.table:
        emit_data(data, req.fmt)
        return
    _render(data)


def _render(data: dict[str, Any]) -> None:

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
    cap = data["capacity"]
    cut = f": node {cap['tightest_node']}'s budget" if cap["limited_by"] == "node budget" else ""
    tiers = new_table(
        f"L2 tiers (max {cap['per_rank_max_gb']} GB per rank{cut})",
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
    budgets = _budget_table(data["capacity"])
    print_fitted(out, ranks, tiers, *([budgets] if budgets is not None else []), keys=2)
    if not is_quiet():
        for note in data["capacity"]["notes"]:
            out.print(text(f"note: {note}"))
        for warning in data["warnings"]:
            out.print(text(f"warning: {warning}", "yellow"))
    from xputune.cli.output import columns, shell_command

    if not is_quiet():
        for note in data["sglang"]["notes"]:  # the release the flags are written for
            out.print(text(note))
    out.print()
    out.print("SGLang:", style="bold")
    argv = ["python", "-m", "sglang.launch_server", *data["sglang_args"]]
    for line in shell_command(argv, data["env"], columns()).splitlines():
        out.print(text(line), soft_wrap=True)
    if data["disaggregation_args"]:
        out.print(text("with --disaggregation-mode prefill|decode (PD disaggregation), add:"))
        for line in shell_command(data["disaggregation_args"], None, columns()).splitlines():
            out.print(text(line), soft_wrap=True)
    if "l3" in data:
        _render_l3(out, data["l3"])


def _budget_table(cap: dict[str, Any]) -> Any:
    """Each node's L2 budget: what is free now, what is taken off, what is left per card.
    The tightest node is marked when it, not the static share, sets the ladder's top."""
    from xputune.cli.output import TEXT, add_row, new_table

    if not cap.get("node_budgets"):
        return None
    right = {**TEXT, "justify": "right"}
    shared = all(n["l2_per_card_gb"] is None and n["sharers"] == 0 for n in cap["node_budgets"])
    last = "L2 share" if shared else "L2 per card"
    table = new_table(
        "L2 budget per NUMA node (GB, free now)",
        [("node", right), "cards", *((c, right) for c in (
            "free", "reserve", "L3", "ranks' own", last))],
    )  # fmt: skip
    cut = cap["limited_by"] == "node budget"

    def gb(value: float | None) -> str:
        return "-" if value is None else f"{value:,.1f}"

    for n in cap["node_budgets"]:
        cards = n["cards"]
        shown = " ".join(cards) if len(cards) <= 2 else f"{len(cards)} cards"
        if n["sharers"] > len(cards):  # local: the node's other cards keep their share
            shown += f" +{n['sharers'] - len(cards)}"
        left = n["l2_room_gb"] if shared else n["l2_per_card_gb"]
        mark = " <" if cut and n["tightest"] else ""
        add_row(
            table, str(n["node"]), shown, gb(n["free_gb"]), gb(n["reserve_gb"]),
            gb(n["l3_gb"]), gb(n["ranks_own_gb"]), gb(left) + mark,
        )  # fmt: skip
    return table


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
    from xputune.plan.capacity import GB
    from xputune.plan.l3 import donor_size_text

    for d in l3.get("donors", []):
        out.print(
            text(
                f"donor {d['nic']} ({d['rdma'] or '-'}) on node {d['numa_node']}: "
                f"{donor_size_text(d['segment_gb'] * GB)}"
            )
        )
        from xputune.cli.output import columns, shell_command
        from xputune.plan.l3 import HOST_VARIABLE

        command = shell_command(d["command"], None, columns() - 2, (HOST_VARIABLE,))
        for line in command.splitlines():
            out.print(text("  " + line), soft_wrap=True)
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
