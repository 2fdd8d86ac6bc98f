"""A whole HiCache plan for one machine: bindings, capacity ladder, chosen tier, SGLang flags.

Pure: it takes the topology and the model's KV geometry and returns data. `xputune plan`
renders it and `xputune launch sglang` turns it into a command line.
"""

from __future__ import annotations

from dataclasses import dataclass

from xputune.plan.bindings import Bindings, PlanError, make_bindings
from xputune.plan.capacity import Capacity, Reserve, Tier, capacity
from xputune.plan.geometry import KVGeometry
from xputune.topology.model import Topology

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


def choose_tier(cap: Capacity, tier: str | None) -> Tier:
    """`tier` is a 1-based ladder index, a size like "64GB", "max", or None (the ladder's middle).

    The middle is a starting point, not an answer: the seed's method is to climb the ladder and
    stop where the hit rate stops rising (or use `xputune tiers --trace` to see the curve).
    """
    tiers = cap.tiers
    if tier is None:
        return tiers[(len(tiers) - 1) // 2]
    text = tier.strip().lower()
    if text == "max":
        return tiers[-1]
    if text.endswith("gb") and text[:-2].strip().isdigit():
        want = int(text[:-2])
        for t in tiers:
            if t.hicache_size_gb == want:
                return t
        if want > tiers[-1].hicache_size_gb:
            raise PlanError(f"tier {tier} exceeds the maximum of {tiers[-1].hicache_size_gb}GB")
        return Tier(want, *_scaled(tiers[0], want))
    if text.isdigit() and 1 <= int(text) <= len(tiers):
        return tiers[int(text) - 1]
    raise PlanError(f"tier {tier!r}: give 1..{len(tiers)}, a size like 64GB, or max")


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
) -> HostPlan:
    if write_policy not in WRITE_POLICIES:
        raise PlanError(f"write policy {write_policy!r}: choose from {', '.join(WRITE_POLICIES)}")
    bindings = make_bindings(topo, geometry.tp, strategy, order, require_ido=require_ido)
    cap = capacity(
        topo, bindings, geometry.bytes_per_token, replicated=geometry.replicated, reserve=reserve
    )
    chosen = choose_tier(cap, tier)
    vendors = {topo.card(r.card).vendor for r in bindings.ranks}
    # Kunlunxin has no upstream kernel backend: direct copies per merged segment; NVIDIA has
    # SGLang's own copy kernels.
    io_backend = "direct" if "kunlunxin" in vendors else "kernel"
    args: list[str] = [
        "--tp-size", str(geometry.tp),
        "--enable-hierarchical-cache",
        "--hicache-size", str(chosen.hicache_size_gb),
        "--hicache-mem-layout", "layer_first",
        "--hicache-io-backend", io_backend,
        "--hicache-write-policy", write_policy,
    ]  # fmt: skip
    args += bindings.numa_args + bindings.ib_args
    visible = bindings.visible_devices
    env = {"CUDA_VISIBLE_DEVICES": visible}
    if "kunlunxin" in vendors:
        env["XPU_VISIBLE_DEVICES"] = visible
    return HostPlan(geometry, bindings, cap, chosen, io_backend, write_policy, tuple(args), env)
