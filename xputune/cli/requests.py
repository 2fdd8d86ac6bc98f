"""The requests plan/ and launch/ take, built from the flags of plan and launch sglang: where a
CLI spelling (a comma list of cards, --force) becomes plain data."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xputune.plan.host_plan import PlanRequest
    from xputune.plan.models import NamedConfig


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
    node_reserve_gb: float | None = None,
) -> PlanRequest:
    """The flags of plan and launch sglang as plan/'s request (the model already read)."""
    from xputune.errors import XputuneError
    from xputune.plan.budget import DEFAULT_NODE_RESERVE
    from xputune.plan.capacity import GB
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
        allow_refused_tp=force,
        l3=l3_request,
        node_reserve=DEFAULT_NODE_RESERVE if node_reserve_gb is None else int(node_reserve_gb * GB),
    )
