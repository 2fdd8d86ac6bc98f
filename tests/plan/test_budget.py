"""Per-node L2 budgets (plan/budget.py), pure: a node's free memory less the reserve, its L3
segments and its ranks' own memory, over its cards; the ladder never goes above the tightest.

The topologies are the bundled recordings with the nodes' memory replaced (the model is a
frozen named tuple: `_replace` is how a test builds the host it needs without files)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.host import open_host
from xputune.plan.bindings import PlanError, make_bindings
from xputune.plan.budget import (
    DEFAULT_NODE_RESERVE,
    FREE_MEASURE,
    FREE_ONLY,
    budgets_document,
    node_budgets,
)
from xputune.plan.capacity import GB, GIB, Reserve, capacity
from xputune.plan.host_plan import choose_tier, make_plan, plan_document
from xputune.plan.l3 import L3Request, segments_by_node
from xputune.plan.models import load_geometry
from xputune.topology.discover import discover
from xputune.topology.model import Topology

PROCESS = Reserve().process_bytes_per_card  # 10 GiB per card


@pytest.fixture(scope="module")
def seed() -> Topology:
    return discover(open_host(None, "h3c-hygon-p800"))


@pytest.fixture(scope="module")
def hgx() -> Topology:
    return discover(open_host(None, "nvidia-hgx-h100"))


def glm5(tp: int = 8):
    return load_geometry("glm-5", None, tp, "bf16")


def with_memory(
    topo: Topology, free: dict[int, int | None], reclaimable: int | None = 0
) -> Topology:
    """The host with these nodes' MemFree (bytes) and reclaimable memory replaced."""
    nodes = tuple(
        n._replace(memory_free_bytes=free[n.id], memory_reclaimable_bytes=reclaimable)
        if n.id in free
        else n
        for n in topo.numa_nodes
    )
    return topo._replace(numa_nodes=nodes)


def test_the_seed_box_node_has_its_meminfo_free_and_page_cache(seed: Topology) -> None:
    node = seed.node(1)  # Node 1 MemFree 191338598 kB; Active(file) 1664665, Inactive(file)
    # 3329331, KReclaimable 499399 kB (the recording's node1/meminfo)
    assert node.memory_free_bytes == 191_338_598 * 1024
    assert node.memory_reclaimable_bytes == (1_664_665 + 3_329_331 + 499_399) * 1024
    b = node_budgets(seed, make_bindings(seed, 8, "local"))
    one = b.node(1)
    assert one is not None and one.measure == FREE_MEASURE
    assert one.available_bytes == node.memory_free_bytes + node.memory_reclaimable_bytes
    assert one.reserve_bytes == DEFAULT_NODE_RESERVE and one.sharers == 2
    assert one.ranks_bytes == 2 * PROCESS and one.l3_bytes == 0
    assert one.per_card_bytes == (one.available_bytes - 20 * GB - 2 * PROCESS) // 2
    assert [n.node for n in b.nodes] == [1, 3, 5, 7]  # the nodes that hold host KV


def test_an_idle_box_is_cut_by_the_static_share_not_the_budget(seed: Topology) -> None:
    b = make_bindings(seed, 8, "local")
    cap = capacity(
        seed, b, glm5().bytes_per_token, replicated=True, limit=node_budgets(seed, b).limit()
    )
    assert not cap.limited_by_budget and cap.per_rank_max_bytes == cap.static_max_bytes
    assert any("sets the ladder's top" in n for n in cap.notes)


def test_a_short_node_stops_the_ladder_for_every_rank(seed: Topology) -> None:
    # node 3 has 60 GB free: 60 - 20 reserve - 2 x 10 GiB = 18.5 GB, 9.26 GB per card
    short = with_memory(seed, {3: 60 * GB})
    plan = make_plan(short, glm5())
    cap = plan.capacity
    assert cap.limited_by_budget and cap.limit is not None and cap.limit.node == 3
    per_card = (60 * GB - 20 * GB - 2 * PROCESS) // 2
    assert cap.per_rank_max_bytes == per_card
    assert [t.hicache_size_gb for t in cap.tiers] == [8, per_card // GB]
    assert all(t.hicache_size_gb * GB <= per_card for t in cap.tiers)
    assert plan.tier.hicache_size_gb * GB <= per_card
    note = next(n for n in cap.notes if n.startswith("the ladder stops at 9 GB"))
    assert "node 3 has 60.0 GB free" in note and "2 card(s)" in note
    with pytest.raises(PlanError, match=r"16GB exceeds .* 9GB per rank \(node 3's budget"):
        choose_tier(cap, "16GB")
    doc = plan_document(plan)["capacity"]
    assert doc["limited_by"] == "node budget" and doc["tightest_node"] == 3
    assert [n["tightest"] for n in doc["node_budgets"]] == [False, True, False, False]


def test_a_node_with_nothing_left_refuses_with_its_arithmetic(seed: Topology) -> None:
    with pytest.raises(PlanError, match=r"no host memory left for L2: node 5 has 30\.0 GB free"):
        make_plan(with_memory(seed, {5: 30 * GB}), glm5())


def test_the_reserve_is_the_operator_s(seed: Topology) -> None:
    short = with_memory(seed, {3: 60 * GB})
    more = make_plan(short, glm5(), node_reserve=10 * GB).capacity.per_rank_max_bytes
    less = make_plan(short, glm5(), node_reserve=30 * GB).capacity.per_rank_max_bytes
    assert more - less == 10 * GB  # two cards share the 20 GB the reserve moved
    with pytest.raises(ValueError, match="negative"):
        node_budgets(seed, make_bindings(seed, 8, "local"), reserve_bytes=-1)


def test_mooncake_segments_come_off_the_node_they_register_on(seed: Topology) -> None:
    short = with_memory(seed, {3: 60 * GB})
    l3 = L3Request("mooncake", segment_gb=16)  # 2 GB a rank, two ranks a node
    assert segments_by_node(make_bindings(seed, 8, "local"), l3) == {
        1: 4 * GB, 3: 4 * GB, 5: 4 * GB, 7: 4 * GB,
    }  # fmt: skip
    plan = make_plan(short, glm5(), l3=l3)
    node3 = plan.budgets.node(3)
    assert node3.l3_bytes == 4 * GB
    assert plan.capacity.per_rank_max_bytes == (60 * GB - 20 * GB - 4 * GB - 2 * PROCESS) // 2
    assert all(n.fits for n in plan.l3.nodes)  # L2 and L3 fit what the node has free now
    assert (
        len(plan.l3.nodes) == 4 and plan.l3.nodes[1].usable_bytes == 60 * GB - 20 * GB - 2 * PROCESS
    )


def test_a_decode_node_s_donors_come_first(seed: Topology) -> None:
    plan = make_plan(seed, glm5(), l3=L3Request("mooncake", role="decode"))
    donated = {d.numa_node: d.segment_bytes for d in plan.l3.donors}
    budgets = plan.budgets
    assert {n.node: n.l3_bytes for n in budgets.nodes} == donated
    assert plan.capacity.per_rank_max_bytes < 10 * GB  # what the donors leave
    assert plan.capacity.limited_by_budget


def test_shared_may_be_k_times_the_tightest_node(seed: Topology) -> None:
    b = make_bindings(seed, 8, "shared")
    short = with_memory(seed, {6: 60 * GB})  # a node with no card: no ranks' memory there
    budgets = node_budgets(short, b)
    assert len(budgets.nodes) == 8 and all(n.sharers == 0 for n in budgets.nodes)
    assert budgets.limiting_node == 6
    assert budgets.per_rank_bytes == 8 * (60 * GB - 20 * GB)
    assert budgets.node(6).per_card_bytes is None
    cap = capacity(short, b, glm5().bytes_per_token, replicated=True, limit=budgets.limit())
    assert cap.per_rank_max_bytes == 8 * 40 * GB and cap.limited_by_budget


def test_all_nodes_gives_each_rank_its_own_node_s_room(seed: Topology) -> None:
    b = make_bindings(seed, 8, "all-nodes", require_ido=False)
    budgets = node_budgets(with_memory(seed, {2: 50 * GB}), b)
    assert all(n.sharers == 1 for n in budgets.nodes)
    assert budgets.limiting_node == 2 and budgets.per_rank_bytes == 50 * GB - 20 * GB - PROCESS


def test_local_keeps_room_for_the_cards_of_another_instance(seed: Topology) -> None:
    # ranks on xpu0 and xpu2 only: xpu1 and xpu3 still sit on nodes 1 and 3, bound there by
    # whatever serves them
    b = make_bindings(seed, 2, "local", ["xpu0", "xpu2"])
    one = node_budgets(seed, b).node(1)
    assert one.cards == ("xpu0",) and one.sharers == 2 and one.ranks_bytes == 2 * PROCESS


def test_unknown_free_memory_leaves_the_static_share(seed: Topology) -> None:
    blind = with_memory(seed, {n.id: None for n in seed.numa_nodes})
    b = make_bindings(blind, 8, "local")
    budgets = node_budgets(blind, b)
    assert budgets.per_rank_bytes is None and budgets.limiting_node is None
    assert any("free memory unknown" in n for n in budgets.notes)
    cap = capacity(blind, b, glm5().bytes_per_token, replicated=True, limit=budgets.limit())
    assert cap.per_rank_max_bytes == cap.static_max_bytes and not cap.limited_by_budget
    doc = budgets_document(budgets)
    assert doc["tightest_node"] is None and doc["node_budgets"][0]["free_gb"] is None


def test_without_page_cache_lines_free_is_memfree_alone(seed: Topology) -> None:
    plain = with_memory(seed, {1: 100 * GB}, reclaimable=None)
    budgets = node_budgets(plain, make_bindings(plain, 8, "local"))
    assert budgets.node(1).measure == FREE_ONLY and budgets.node(1).available_bytes == 100 * GB
    assert any("MemFree only" in n for n in budgets.notes)


def test_the_nvidia_box_splits_each_node_over_its_four_gpus(hgx: Topology) -> None:
    budgets = node_budgets(hgx, make_bindings(hgx, 8, "local"))
    assert [(n.node, n.sharers) for n in budgets.nodes] == [(0, 4), (1, 4)]
    assert all(n.ranks_bytes == 4 * PROCESS for n in budgets.nodes)


# -- the arithmetic, whatever the host -----------------------------------------------------
NODE_BYTES = st.integers(min_value=0, max_value=4 << 40)


@settings(max_examples=200, deadline=None)
@given(
    free=st.lists(st.one_of(st.none(), NODE_BYTES), min_size=8, max_size=8),
    reclaimable=st.one_of(st.none(), st.integers(min_value=0, max_value=64 << 30)),
    reserve=st.integers(min_value=0, max_value=256 * GB),
    process=st.integers(min_value=0, max_value=64 * GIB),
    l3=st.lists(st.integers(min_value=0, max_value=512 * GB), min_size=8, max_size=8),
    strategy=st.sampled_from(["local", "all-nodes", "shared"]),
)
def test_budgets_are_never_negative_and_never_add_up_to_more_than_the_node_has(
    seed: Topology,
    free: list[int | None],
    reclaimable: int | None,
    reserve: int,
    process: int,
    l3: list[int],
    strategy: str,
) -> None:
    host = with_memory(seed, dict(enumerate(free)), reclaimable)
    b = make_bindings(host, 8, strategy, require_ido=False)
    budgets = node_budgets(
        host, b, reserve_bytes=reserve, process_bytes=process, l3_by_node=dict(enumerate(l3))
    )
    for n in budgets.nodes:
        if n.available_bytes is None:
            assert n.room_bytes is None and n.per_card_bytes is None
            continue
        left = n.available_bytes - reserve - n.l3_bytes
        assert n.room_bytes >= 0 and n.room_bytes <= max(0, left)
        if n.sharers:
            assert n.per_card_bytes >= 0
            assert n.per_card_bytes * n.sharers <= max(0, left - n.ranks_bytes)
    if budgets.per_rank_bytes is None:
        assert all(n.available_bytes is None for n in budgets.nodes)
        return
    assert budgets.per_rank_bytes >= 0
    if strategy == "shared":  # one buffer, an even share on each of its nodes
        share = budgets.per_rank_bytes / len(budgets.nodes)
        assert all(share <= n.room_bytes for n in budgets.nodes if n.room_bytes is not None)
        return
    for r in b.ranks:  # every rank's pool fits its own node's share
        node = budgets.node(r.numa_node)
        if node.per_card_bytes is not None:
            assert budgets.per_rank_bytes <= node.per_card_bytes
