"""A whole HiCache plan for one machine: bindings, capacity ladder, chosen tier, SGLang flags.

Pure: it takes the topology and the model's KV geometry and returns data. `xputune plan`
renders it and `xputune launch sglang` turns it into a command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from xputune.plan.bindings import Bindings, PlanError, make_bindings
from xputune.plan.budget import DEFAULT_NODE_RESERVE, Budgets, budgets_document, node_budgets
from xputune.plan.capacity import GB, Capacity, Reserve, Tier, capacity
from xputune.plan.geometry import KVGeometry
from xputune.plan.l3 import (
    L3Plan,
    L3Request,
    l3_document,
    plan_decode,
    plan_prefill,
    segments_by_node,
    storage_layout,
)
from xputune.plan.models import REFUSES
from xputune.plan.strategy import StrategyAdvice, recommend_strategy
from xputune.topology.model import Topology

if TYPE_CHECKING:
    from xputune.plan.models import NamedConfig

WRITE_POLICIES = ("write_back", "write_through", "write_through_selective")


@dataclass(frozen=True)
class HostPlan:
    geometry: KVGeometry
    bindings: Bindings
    capacity: Capacity
    tier: Tier
    io_backend: str
    write_policy: str
    sglang_args: tuple[str, ...]
    env: dict[str, str]
    advice: StrategyAdvice  # the strategy this host and model call for, whatever was chosen
    l3: L3Plan | None = None
    #: What a PD-disaggregation server (--disaggregation-mode prefill|decode) adds: the RDMA
    #: device of each rank, which SGLang reads only there.
    pd_args: tuple[str, ...] = ()
    #: Each NUMA node's L2 budget (plan/budget.py): what capacity's ladder was cut to.
    budgets: Budgets | None = None


def choose_tier(cap: Capacity, tier: str | None) -> Tier:
    """`tier` is a 1-based ladder index, a size like "64GB", "max", or None (the ladder's middle).

    The middle is a starting point, not an answer: the field report's method
    (docs/field-report.md, 3) is to climb the ladder and stop where the hit rate stops rising
    (or use `xputune tiers --trace` to see the curve).
    """
    tiers = cap.tiers
    if tier is None:
        return tiers[(len(tiers) - 1) // 2]
    text = tier.strip().lower()
    if text == "max":
        return tiers[-1]
    if text.endswith("gb") and _whole(text[:-2].strip()):
        want = int(text[:-2])
        for t in tiers:
            if t.hicache_size_gb == want:
                return t
        if want > tiers[-1].hicache_size_gb:
            why = ""
            if cap.limited_by_budget and cap.limit is not None:
                why = f" (node {cap.limit.node}'s budget: what it has free now)"
            raise PlanError(
                f"tier {tier} exceeds the maximum of {tiers[-1].hicache_size_gb}GB per rank{why}"
            )
        return Tier(want, *_scaled(tiers[0], want))
    if _whole(text) and 1 <= int(text) <= len(tiers):
        return tiers[int(text) - 1]
    raise PlanError(f"tier {tier[:40]!r}: give 1..{len(tiers)}, a size like 64GB, or max")


def _whole(text: str) -> bool:
    """Plain digits int() takes at once: not "²" (a digit to isdigit), not 5000 of them."""
    return text.isascii() and text.isdigit() and len(text) <= 9


def _scaled(reference: Tier, gb: int) -> tuple[int, int, int]:
    factor = gb / reference.hicache_size_gb
    tokens = int(reference.tokens_per_rank * factor)
    return int(reference.host_bytes_total * factor), tokens, tokens


def make_plan(
    topo: Topology,
    geometry: KVGeometry,
    *,
    strategy: str = "local",
    order: list[str] | None = None,
    tier: str | None = None,
    write_policy: str = "write_through",
    reserve: Reserve | None = None,
    require_ido: bool = True,
    l3: L3Request | None = None,
    node_reserve: int = DEFAULT_NODE_RESERVE,
) -> HostPlan:
    """The plan. L3 is known before L2: a prefill instance's segment is a fixed size SGLang
    splits over the ranks, and a decode node's donors are sized from its memory first
    (donating is what that node is for); so each node's L2 budget is what they leave."""
    if write_policy not in WRITE_POLICIES:
        raise PlanError(f"write policy {write_policy!r}: choose from {', '.join(WRITE_POLICIES)}")
    bindings = make_bindings(topo, geometry.tp, strategy, order, require_ido=require_ido)
    reserve = reserve or Reserve()
    donors = plan_decode(topo, bindings, geometry, l3, reserve) if _decode(l3) else None
    budgets = node_budgets(
        topo, bindings, reserve_bytes=node_reserve, process_bytes=reserve.process_bytes_per_card,
        l3_by_node=_l3_by_node(bindings, l3, donors),
    )  # fmt: skip
    cap = capacity(
        topo, bindings, geometry.bytes_per_token, replicated=geometry.replicated, reserve=reserve,
        limit=budgets.limit(),
    )  # fmt: skip
    chosen = choose_tier(cap, tier)
    vendors = {topo.card(r.card).vendor for r in bindings.ranks}
    # Kunlunxin has no upstream kernel backend: direct copies per merged segment; NVIDIA has
    # SGLang's own copy kernels.
    io_backend = "direct" if "kunlunxin" in vendors else "kernel"
    l3_plan = None
    if l3 is not None:
        l3_plan = donors or plan_prefill(
            topo, bindings, geometry, chosen.hicache_size_gb * GB, l3, reserve,
            budgets.registered_room(),
        )  # fmt: skip
    serving_l3 = l3 is not None and l3.role == "prefill"
    layout = storage_layout(l3.backend, io_backend) if serving_l3 else "layer_first"
    if l3_plan is not None and layout == "page_first_direct":
        l3_plan = l3_plan.with_note(
            "Mooncake runs page_first_direct with --hicache-io-backend direct: L2 copies go "
            "back to one segment per page and layer (the field report's page_num x layer_num), "
            "not layer_first's merged runs; see `xputune kernels plan`"
        )
    args: list[str] = [
        "--tp-size", str(geometry.tp),
        "--enable-hierarchical-cache",
        "--hicache-size", str(chosen.hicache_size_gb),
        "--hicache-mem-layout", layout,
        "--hicache-io-backend", io_backend,
        "--hicache-write-policy", write_policy,
    ]  # fmt: skip
    args += bindings.numa_args
    visible = bindings.visible_devices
    env = {"CUDA_VISIBLE_DEVICES": visible}
    if "kunlunxin" in vendors:
        env["XPU_VISIBLE_DEVICES"] = visible
    if serving_l3:
        args += l3_plan.sglang_args()
        env.update(l3_plan.env())
    advice = recommend_strategy(topo, geometry.tp, mla=geometry.attention == "mla")
    return HostPlan(
        geometry, bindings, cap, chosen, io_backend, write_policy, tuple(args), env, advice,
        l3_plan, tuple(bindings.ib_args), budgets,
    )  # fmt: skip


def _decode(l3: L3Request | None) -> bool:
    return l3 is not None and l3.role == "decode"


def _l3_by_node(
    bindings: Bindings, l3: L3Request | None, donors: L3Plan | None
) -> dict[int, int] | None:
    """The L3 bytes each node registers: a prefill instance's segments, a decode node's
    donors."""
    if donors is not None:
        out: dict[int, int] = {}
        for d in donors.donors:
            if d.numa_node is not None:
                out[d.numa_node] = out.get(d.numa_node, 0) + d.segment_bytes
        return out
    return segments_by_node(bindings, l3) if l3 is not None else None


class RefusedTpError(PlanError):
    """A TP size SGLang refuses for this model (its attention heads do not split over it)."""


@dataclass(frozen=True)
class PlanRequest:
    """What `plan` and `launch sglang` ask of a host: the model already read (cli/ resolves
    --model/--config once, plan/models.py's resolve_model), and nothing spelled as a flag."""

    model: NamedConfig  # (name, config.json fields)
    dtype: str = "bf16"
    tp: int | None = None  # None: the host's card count
    strategy: str = "local"
    cards: tuple[str, ...] = ()  # rank order by card name or index; () is bus order
    tier: str | None = None
    write_policy: str = "write_through"
    require_ido: bool = True  # all-nodes needs IDO on shared uplinks; False only warns
    allow_refused_tp: bool = False  # a TP size SGLang refuses is planned anyway (a warning)
    l3: L3Request | None = None
    node_reserve: int = DEFAULT_NODE_RESERVE  # bytes each NUMA node keeps out of L2's budget


def plan_for_host(topo: Topology, req: PlanRequest) -> tuple[HostPlan, list[str]]:
    """The plan of `xputune plan` and `launch sglang`, and warnings (an odd TP size comes back
    as a warning with the reason)."""
    from xputune.plan.models import model_geometry, resolve_tp

    size = resolve_tp(req.tp, len(topo.cards))
    geometry, warnings = model_geometry(req.model, size, req.dtype, len(topo.cards))
    refused = [w for w in warnings if w.endswith(REFUSES)]
    if refused and not req.allow_refused_tp:
        raise RefusedTpError(refused[0])
    plan = make_plan(
        topo,
        geometry,
        strategy=req.strategy,
        order=list(req.cards) or None,
        tier=req.tier,
        write_policy=req.write_policy,
        require_ido=req.require_ido,
        l3=req.l3,
        node_reserve=req.node_reserve,
    )
    return plan, warnings


def plan_document(plan: HostPlan, warnings: list[str] = ()) -> dict:
    """The `plan --format json` document (schema "plan")."""
    from xputune.host.values import format_cpulist

    g, b, c = plan.geometry, plan.bindings, plan.capacity
    return {
        "schema_version": 1,
        "model": {
            "name": g.name,
            "attention": g.attention,
            "layers": g.layers,
            "tp": g.tp,
            "dtype": g.dtype,
            "bytes_per_token_per_rank": g.bytes_per_token,
            "replicated_across_ranks": g.replicated,
        },
        "strategy": b.strategy,
        "recommended_strategy": {
            "strategy": plan.advice.strategy,
            "reason": plan.advice.reason,
        },
        "ranks": [
            {
                "rank": r.rank,
                "card": r.card,
                "bdf": r.bdf,
                "card_numa_node": r.local_node,
                "numa_node": r.numa_node,
                "memory_nodes": list(r.memory_nodes),
                "cpus": format_cpulist(r.cpus),
                "nic": r.nic,
                "rdma": r.rdma,
            }
            for r in b.ranks
        ],
        "capacity": {
            "per_rank_max_gb": round(c.per_rank_max_gb, 1),
            "static_max_gb": round(c.static_max_bytes / GB, 1),
            "limited_by": "node budget" if c.limited_by_budget else "static share",
            **(budgets_document(plan.budgets) if plan.budgets is not None else {}),
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
        "disaggregation_args": list(plan.pd_args),
        "env": plan.env,
        "warnings": [*warnings, *b.warnings],
        **({"l3": l3_document(plan.l3)} if plan.l3 is not None else {}),
    }
