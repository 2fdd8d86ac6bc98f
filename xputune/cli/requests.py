"""The requests plan/ and launch/ take, built from the flags of plan and launch sglang: where a
CLI spelling (a comma list of cards, --force) becomes plain data."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xputune.cli.spec import Request
    from xputune.plan.host_plan import PlanRequest
    from xputune.plan.models import NamedConfig


def plan_request(named: NamedConfig, req: Request, tp: int | None) -> PlanRequest:
    """The flags of plan and launch sglang (`req`) as plan/'s request: the model already read,
    the TP as the command settled it (launch reads it from SGLang's own arguments too). The L3
    judgement's flags (--role, --l3-gbps, --recompute-us-per-token) are plan's alone."""
    from xputune.errors import XputuneError
    from xputune.plan.budget import DEFAULT_NODE_RESERVE
    from xputune.plan.capacity import GB
    from xputune.plan.host_plan import PlanRequest
    from xputune.plan.l3 import Assumptions, L3Request

    role = getattr(req, "role", "prefill")
    l3_gbps = getattr(req, "l3_gbps", None)
    recompute_us = getattr(req, "recompute_us", None)
    l3, l3_dir = req.l3, req.l3_dir

    l3_only = {
        "--l3-pool-gb": req.l3_pool_gb,
        "--l3-segment-gb": req.l3_segment_gb,
        "--l3-master": req.l3_master,
        "--l3-protocol": req.l3_protocol,
        "--l3-dir": l3_dir,
        "--l3-host": req.l3_host,
        "--l3-gbps": l3_gbps,
        "--recompute-us-per-token": recompute_us,
    }
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
            backend=l3,
            pool_gb=req.l3_pool_gb,
            segment_gb=req.l3_segment_gb,
            protocol=req.l3_protocol,
            role=role,
            master=req.l3_master,
            directory=l3_dir,
            prefetch_policy=req.l3_prefetch,
            local_hostname=req.l3_host,
            assumptions=assumptions,
        )
    return PlanRequest(
        model=named,
        dtype=req.dtype,
        tp=tp,
        strategy=req.strategy,
        cards=tuple(c.strip() for c in req.cards.split(",") if c.strip()) if req.cards else (),
        tier=req.tier,
        write_policy=req.write_policy,
        require_ido=not req.force,
        allow_refused_tp=req.force,
        l3=l3_request,
        node_reserve=DEFAULT_NODE_RESERVE
        if req.node_reserve_gb is None
        else int(req.node_reserve_gb * GB),
    )
