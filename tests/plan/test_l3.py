"""L3 on the Mooncake store: segments, registered memory, donors and break-even, on the bundled
recordings (the seed's 8 x P800 box and an 8 x H100 HGX), and the three-tier hit split."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.host import open_host
from xputune.plan.bindings import PlanError, make_bindings
from xputune.plan.capacity import GB
from xputune.plan.geometry import KVGeometry
from xputune.plan.hitrate import HitCurve, three_tier_point
from xputune.plan.host_plan import make_plan, plan_document
from xputune.plan.l3 import (
    HOST_VARIABLE,
    HUGE_PAGE,
    MIN_SEGMENT_PER_RANK,
    Assumptions,
    L3Request,
    donor_command,
    master_command,
    parse_address,
    plan_decode,
    plan_prefill,
    storage_layout,
    store_bytes_per_token,
)
from xputune.plan.models import load_geometry
from xputune.topology.discover import discover
from xputune.topology.model import Topology


@pytest.fixture(scope="module")
def seed() -> Topology:
    return discover(open_host(None, "h3c-hygon-p800"))


@pytest.fixture(scope="module")
def hgx() -> Topology:
    return discover(open_host(None, "nvidia-hgx-h100"))


def glm5(tp: int = 8) -> KVGeometry:
    return load_geometry("glm-5", None, tp, "bf16")


def qwen(tp: int = 8) -> KVGeometry:
    return load_geometry("qwen3-32b", None, tp, "bf16")


def test_each_rank_mounts_its_share_and_the_device_map_names_the_nearest_nic(seed) -> None:
    b = make_bindings(seed, 8, "local")
    req = L3Request("mooncake", pool_gb=4096, segment_gb=8, master="10.1.2.3:50051")
    plan = plan_prefill(seed, b, glm5(), 32 * GB, req)
    assert plan.protocol == "rdma"  # every card has a ConnectX beside it
    assert [r.segment_bytes for r in plan.ranks] == [1 * GB] * 8  # 8 GB / (tp 8 x pp 1)
    assert plan.device_map == {
        "0": "mlx5_0", "1": "mlx5_0", "2": "mlx5_1", "3": "mlx5_1",
        "4": "mlx5_2", "5": "mlx5_2", "6": "mlx5_3", "7": "mlx5_3",
    }  # fmt: skip
    extra = plan.extra_config()
    assert extra["master_server_address"] == "10.1.2.3:50051"
    assert extra["global_segment_size"] == 8 * GB
    assert json.loads(extra["device_name"]) == plan.device_map  # a JSON map in a string
    assert plan.pool_tokens == 4096 * GB // glm5().bytes_per_token


def test_pipeline_stages_divide_the_segment_too(seed) -> None:
    b = make_bindings(seed, 4, "local")
    plan = plan_prefill(seed, b, glm5(4), 8 * GB, L3Request("mooncake", segment_gb=8, pp=2))
    assert {r.segment_bytes for r in plan.ranks} == {1 * GB}


def test_registered_memory_per_node_is_l2_plus_segments_in_huge_pages(seed) -> None:
    b = make_bindings(seed, 8, "local")
    plan = plan_prefill(seed, b, glm5(), 32 * GB, L3Request("mooncake", segment_gb=16))
    by_node = {n.node: n for n in plan.nodes}
    assert sorted(by_node) == [1, 3, 5, 7]  # two cards per node, as the seed box has them
    node = by_node[1]
    assert node.l2_bytes == 2 * 32 * GB and node.segment_bytes == 2 * 2 * GB
    assert node.registered_bytes == node.l2_bytes + node.segment_bytes
    assert node.hugepages == -(-node.registered_bytes // HUGE_PAGE)
    assert node.fits is True
    assert not plan.warnings


def test_a_segment_beyond_a_nodes_memory_is_warned_about(seed) -> None:
    b = make_bindings(seed, 8, "local")
    plan = plan_prefill(seed, b, glm5(), 64 * GB, L3Request("mooncake", segment_gb=1000))
    assert any(n.fits is False for n in plan.nodes)
    assert plan.warnings and "more than its" in plan.warnings[0]


def test_shared_l2_is_interleaved_over_every_node_and_held_once(seed) -> None:
    b = make_bindings(seed, 8, "shared")
    plan = plan_prefill(seed, b, glm5(), 64 * GB, L3Request("mooncake", segment_gb=8))
    l2 = sum(n.l2_bytes for n in plan.nodes)
    assert abs(l2 - 64 * GB) < 16  # one buffer for the group, not eight
    assert len({n.node for n in plan.nodes if n.l2_bytes}) == len(seed.numa_nodes)


def test_too_small_a_segment_is_refused_with_the_per_rank_minimum(seed) -> None:
    b = make_bindings(seed, 8, "local")
    with pytest.raises(PlanError, match="16 MiB per rank"):
        plan_prefill(seed, b, glm5(), 8 * GB, L3Request("mooncake", segment_gb=0.1))
    assert MIN_SEGMENT_PER_RANK == 16 << 20


def test_a_segment_larger_than_the_pool_is_refused(seed) -> None:
    b = make_bindings(seed, 8, "local")
    with pytest.raises(PlanError, match="larger than the whole pool"):
        plan_prefill(seed, b, glm5(), 8 * GB, L3Request("mooncake", pool_gb=4, segment_gb=8))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"backend": "s3"}, "choose from mooncake, file"),
        ({"backend": "mooncake", "protocol": "udp"}, "choose from tcp, rdma"),
        ({"backend": "mooncake", "role": "cache"}, "choose from prefill, decode"),
        ({"backend": "mooncake", "pool_gb": float("nan")}, "positive number"),
        ({"backend": "mooncake", "segment_gb": -1.0}, "positive number"),
        ({"backend": "mooncake", "master": "10.0.0.1"}, "HOST:PORT"),
        ({"backend": "mooncake", "master": "10.0.0.1:99999"}, "HOST:PORT"),
        ({"backend": "file", "role": "decode"}, "no decode donors"),
        ({"backend": "mooncake", "prefetch_policy": "eager"}, "prefetch policy"),
    ],
)
def test_bad_requests_are_one_clear_error(kwargs, message) -> None:
    with pytest.raises(PlanError, match=message):
        L3Request(**kwargs)


def test_addresses_parse_with_ipv6_brackets() -> None:
    assert parse_address("[fd00::1]:50051") == ("fd00::1", 50051)
    assert parse_address("master.example:7000") == ("master.example", 7000)


def test_tcp_is_chosen_without_rdma_nics_and_rdma_where_every_rank_has_one(hgx, seed) -> None:
    plan = plan_prefill(seed, make_bindings(seed, 8, "local"), glm5(), 8 * GB,
                        L3Request("mooncake"))  # fmt: skip
    assert plan.protocol == "rdma"
    forced = plan_prefill(seed, make_bindings(seed, 8, "local"), glm5(), 8 * GB,
                          L3Request("mooncake", protocol="tcp"))  # fmt: skip
    assert forced.protocol == "tcp" and "device_name" not in forced.extra_config()


def test_mla_stores_one_copy_mha_one_per_rank() -> None:
    assert store_bytes_per_token(glm5()) == glm5().bytes_per_token
    assert store_bytes_per_token(qwen()) == qwen().bytes_per_token * 8


def test_break_even_follows_the_nic_and_tcp_never_pays_for_glm5(seed) -> None:
    b = make_bindings(seed, 8, "local")
    rdma = plan_prefill(seed, b, glm5(), 8 * GB, L3Request("mooncake")).break_even
    assert rdma is not None and rdma.tokens is not None
    # 200 Gb/s x 0.8 / 8 bits, shared by the two ranks of each NIC: 10 GB/s per rank
    assert rdma.l3_gb_s == pytest.approx(10.0)
    per_token = glm5().bytes_per_token / 10e9 * 1e6
    assert rdma.l3_us_per_token == pytest.approx(per_token)
    gain = 28.2 - per_token - glm5().bytes_per_token / 7.40e9 * 1e6
    assert rdma.tokens == pytest.approx((1.0 + 44.0) * 1000 / gain)
    tcp = plan_prefill(seed, b, glm5(), 8 * GB, L3Request("mooncake", protocol="tcp")).break_even
    assert tcp is not None and tcp.tokens is None  # slower than recomputing at any length
    faster = plan_prefill(
        seed, b, glm5(), 8 * GB,
        L3Request("mooncake", assumptions=Assumptions(l3_gb_s=40.0)),
    ).break_even  # fmt: skip
    assert faster.tokens < rdma.tokens and faster.source == "given"


def test_decode_donors_sit_beside_their_nics(seed) -> None:
    b = make_bindings(seed, 8, "local")
    req = L3Request("mooncake", role="decode", master="10.1.2.3:50051", local_hostname="10.1.2.9")
    plan = plan_decode(seed, b, glm5(), req)
    assert [(d.rdma, d.numa_node) for d in plan.donors] == [
        ("mlx5_0", 1), ("mlx5_1", 3), ("mlx5_2", 5), ("mlx5_3", 7),
    ]  # fmt: skip
    node1 = seed.node(1)
    assert plan.donors[0].segment_bytes <= node1.memory_total_bytes
    assert all(d.segment_bytes % (1 << 30) == 0 and d.segment_bytes > 100 * GB
               for d in plan.donors)  # fmt: skip
    assert any("0 2 4 6" in n for n in plan.notes)  # the NIC-less nodes are named
    cmd = donor_command(plan, plan.donors[0])
    assert cmd[:3] == ["numactl", "--cpunodebind=1", "--membind=1"]
    assert "--device_names=mlx5_0" in cmd and "--host=10.1.2.9" in cmd
    # Mooncake reads "NGB" as N x 2^30 bytes: the donor mounts exactly what was planned
    assert f"--global_segment_size={plan.donors[0].segment_bytes >> 30}GB" in cmd
    assert master_command("10.1.2.3:7777") == ["mooncake_master", "--rpc_port=7777"]
    unnamed = plan_decode(seed, b, glm5(), L3Request("mooncake", role="decode"))
    assert f"--host={HOST_VARIABLE}" in donor_command(unnamed, unnamed.donors[0])


def test_a_decode_donation_cap_is_split_over_the_nics(seed) -> None:
    b = make_bindings(seed, 8, "local")
    plan = plan_decode(seed, b, glm5(), L3Request("mooncake", role="decode", segment_gb=400))
    assert sum(d.segment_bytes for d in plan.donors) <= 400 * GB
    assert len(plan.donors) == 4 and len({d.segment_bytes for d in plan.donors}) == 1


def test_make_plan_asks_for_the_layout_mooncake_really_runs(seed, hgx) -> None:
    kl = make_plan(seed, glm5(), l3=L3Request("mooncake", segment_gb=8))
    args = list(kl.sglang_args)
    assert args[args.index("--hicache-mem-layout") + 1] == "page_first_direct"  # io direct
    assert any("page_first_direct" in n for n in kl.l3.notes)
    assert args[args.index("--hicache-storage-backend") + 1] == "mooncake"
    extra = json.loads(args[args.index("--hicache-storage-backend-extra-config") + 1])
    assert extra["global_segment_size"] == 8 * GB
    nv = make_plan(hgx, glm5(), l3=L3Request("mooncake", segment_gb=8))
    nv_args = list(nv.sglang_args)
    assert nv_args[nv_args.index("--hicache-mem-layout") + 1] == "page_first"  # io kernel
    assert storage_layout("file", "direct") == "layer_first"
    doc = plan_document(nv)
    assert doc["l3"]["backend"] == "mooncake" and doc["l3"]["segment_gb"] == 8


def test_the_file_backend_sets_its_directory_and_keeps_layer_first(seed) -> None:
    plan = make_plan(seed, glm5(), l3=L3Request("file", directory="/var/lib/xputune-l3"))
    args = list(plan.sglang_args)
    assert args[args.index("--hicache-mem-layout") + 1] == "layer_first"
    assert "--hicache-storage-backend-extra-config" not in args
    assert plan.env["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] == "/var/lib/xputune-l3"
    with pytest.raises(PlanError, match="directory"):
        make_plan(seed, glm5(), l3=L3Request("file"))


def _curve(distances: list[int], block: int = 1) -> HitCurve:
    """A curve from stack distances (-1 = cold miss), one token per block."""
    from xputune.plan.hitrate import exact_curve, trace_from_requests

    ids: list[int] = []
    stack: list[int] = []
    fresh = 10**6
    for d in distances:
        if d < 0 or d >= len(stack):
            fresh += 1
            block_id = fresh
        else:
            block_id = stack[d]
        if block_id in stack:
            stack.remove(block_id)
        stack.insert(0, block_id)
        ids.append(block_id)
    return exact_curve(trace_from_requests([([i], [1]) for i in ids], block))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-1, 30), min_size=1, max_size=200),
    st.integers(0, 40),
    st.integers(0, 40),
    st.integers(0, 40),
)
def test_three_tiers_split_one_curve(distances, l1, l2, l3) -> None:
    curve = _curve(distances)
    t = three_tier_point(curve, l1, l2, l3)
    assert min(t.device, t.host, t.storage) >= -1e-12
    assert t.total == pytest.approx(curve.hit_rate(max(l1, l2, l3)))
    assert t.device == pytest.approx(curve.hit_rate(l1))
    if l3 <= max(l1, l2):
        assert t.storage == pytest.approx(0.0)


def test_l3_runs_are_the_storage_share_of_a_real_trace_and_split_at_the_break_even(
    run_cli,
) -> None:
    """Mooncake's own requests (tests/data/traces): the L3 runs add up to the storage share
    of the curve, and a lower bandwidth raises the break-even and lowers what pays."""
    from pathlib import Path

    trace = Path(__file__).resolve().parents[1] / "data" / "traces"
    trace = next(trace.glob("*.jsonl"))
    base = ["tiers", "--trace", str(trace), "--l1", "64K", "--l2", "1M", "--l3", "8M",
            "--model", "glm-5", "--tp", "8", "-f", "json"]  # fmt: skip
    docs = []
    for gbps in ("40", "10", "2"):
        code, out, err = run_cli(*base, "--l3-gbps", gbps)
        assert code == 0, err
        docs.append(json.loads(out))
    t = docs[0]["three_tiers"]
    total_tokens = docs[0]["trace"]["total_tokens"]
    shares = t["storage_runs"]["tokens"] / total_tokens  # the document rounds to 6 places
    assert shares == pytest.approx(t["storage_hit_rate"], abs=1e-6)
    assert t["device_hit_rate"] + t["host_hit_rate"] + t["storage_hit_rate"] == pytest.approx(
        t["total_hit_rate"], abs=2e-6
    )
    evens = [d["three_tiers"]["break_even"] for d in docs]
    assert evens[0]["tokens"] < evens[1]["tokens"] and evens[2]["never_pays"]
    shares = [d["three_tiers"]["storage_runs"]["paying_share"] for d in docs]
    assert shares[0] >= shares[1] >= shares[2] == 0.0


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 12), min_size=1, max_size=8), min_size=1, max_size=30),
    st.integers(0, 6),
    st.integers(0, 12),
    st.integers(0, 40),
)
def test_l3_runs_match_a_brute_force_lru(requests, l2, l3, threshold) -> None:
    """Against an LRU of blocks simulated directly, prefix by prefix."""
    from xputune.plan.hitrate import storage_runs, trace_from_requests

    chains = []
    for req in requests:  # prefix-chain the ids: a block id names its whole prefix
        chain, acc = [], 0
        for b in req:
            acc = acc * 31 + b + 1
            chain.append(acc)
        chains.append(chain)
    trace = trace_from_requests([(c, [1] * len(c)) for c in chains], 1)
    got = storage_runs(trace, l2, l3, threshold)

    def hits_within(capacity: int) -> list[int]:
        stack: list[int] = []
        out = []
        for chain in chains:
            depth = 0
            for block in chain:  # the longest cached prefix
                if block in stack[:capacity]:
                    depth += 1
                else:
                    break
            out.append(depth)
            for block in reversed(chain):  # deepest first: ancestors end most recent
                if block in stack:
                    stack.remove(block)
                stack.insert(0, block)
        return out

    runs = [b - a for a, b in zip(hits_within(l2), hits_within(max(l2, l3)), strict=True)]
    assert got.tokens == sum(runs)
    assert got.requests == sum(1 for r in runs if r)
    assert got.paying_tokens == sum(r for r in runs if r > threshold)
