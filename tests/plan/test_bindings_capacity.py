"""Bindings and capacity tiers on the seed box (2 Hygon, 8 nodes, 8 P800 on 1 1 3 3 5 5 7 7)."""

from __future__ import annotations

import pytest

from tests.conftest import SEED_BOX, host_tree
from xputune.host import open_host
from xputune.plan.bindings import PlanError, make_bindings, select_cards
from xputune.plan.capacity import capacity
from xputune.topology.discover import discover
from xputune.topology.model import Topology

GLM5_BYTES_PER_TOKEN = 78 * 656 * 2  # illustrative MLA size; the ratio tests do not depend on it


@pytest.fixture(scope="module")
def seed() -> Topology:
    return discover(open_host(str(SEED_BOX)))


def test_local_gives_the_seed_numa_nodes(seed: Topology) -> None:
    b = make_bindings(seed, 8, "local")
    assert b.numa_args == ["--numa-node", "1", "1", "3", "3", "5", "5", "7", "7"]
    assert b.ib_args == [
        "--disaggregation-ib-device",
        '{"0":"mlx5_0","1":"mlx5_0","2":"mlx5_1","3":"mlx5_1","4":"mlx5_2","5":"mlx5_2",'
        '"6":"mlx5_3","7":"mlx5_3"}',
    ]  # per rank (GPU id in the visible order): a comma list means "all of these, every GPU"
    assert all(r.memory_nodes == (r.numa_node,) for r in b.ranks)
    assert b.ranks[0].cpus == seed.node(1).cpus
    assert b.visible_devices == "0,1,2,3,4,5,6,7"


def test_local_per_card_maximum_is_about_75_gb(seed: Topology) -> None:
    cap = capacity(seed, make_bindings(seed, 8, "local"), GLM5_BYTES_PER_TOKEN, replicated=True)
    assert 70 <= cap.per_rank_max_gb <= 80
    assert any("0 2 4 6" in note for note in cap.notes)  # half the nodes stay idle
    sizes = [t.hicache_size_gb for t in cap.tiers]
    assert sizes == sorted(sizes) and sizes[0] == 8 and sizes[-1] == int(cap.per_rank_max_gb)


def test_all_nodes_refuses_without_ido_and_spreads_to_neighbours(seed: Topology) -> None:
    with pytest.raises(PlanError, match="ID-based ordering"):
        make_bindings(seed, 8, "all-nodes")
    b = make_bindings(seed, 8, "all-nodes", require_ido=False)
    assert b.numa_args == ["--numa-node", "1", "0", "3", "2", "5", "4", "7", "6"]
    assert b.warnings and "apply --ido" in b.warnings[0]
    cap = capacity(seed, b, GLM5_BYTES_PER_TOKEN, replicated=True)
    local = capacity(seed, make_bindings(seed, 8, "local"), GLM5_BYTES_PER_TOKEN, replicated=True)
    assert cap.per_rank_max_bytes > 1.9 * local.per_rank_max_bytes


def test_shared_multiplies_effective_tokens_by_tp(seed: Topology) -> None:
    local = capacity(seed, make_bindings(seed, 8, "local"), GLM5_BYTES_PER_TOKEN, replicated=True)
    shared = capacity(seed, make_bindings(seed, 8, "shared"), GLM5_BYTES_PER_TOKEN, replicated=True)
    # Same host memory spent: 8 per-rank copies vs one shared buffer of 8x the size.
    per_rank = local.tiers[-1]
    same_memory = per_rank.host_bytes_total // GLM5_BYTES_PER_TOKEN
    assert same_memory // per_rank.effective_tokens == 8
    assert shared.effective_tokens_max >= 8 * local.effective_tokens_max
    assert all(r.memory_nodes == tuple(range(8)) for r in make_bindings(seed, 8, "shared").ranks)


def test_shared_refuses_mha(seed: Topology) -> None:
    with pytest.raises(PlanError, match="MLA"):
        capacity(seed, make_bindings(seed, 8, "shared"), 4096, replicated=False)


def test_card_order_and_errors(seed: Topology) -> None:
    assert [c.name for c in select_cards(seed, 2, ["xpu3", "2"])] == ["xpu3", "xpu2"]
    with pytest.raises(PlanError, match="needs 9 cards"):
        select_cards(seed, 9)
    with pytest.raises(PlanError, match="no card"):
        select_cards(seed, 1, ["xpu9"])
    with pytest.raises(PlanError, match="twice"):
        select_cards(seed, 2, ["xpu1", "1"])
    with pytest.raises(PlanError, match="unknown strategy"):
        make_bindings(seed, 8, "everywhere")


def test_unknown_numa_node_cannot_be_sized() -> None:
    topo = discover(open_host(str(host_tree("small-numa-unknown"))))
    b = make_bindings(topo, 2, "local")
    assert b.numa_args == [] and b.warnings
    with pytest.raises(PlanError, match="NUMA node unknown"):
        capacity(topo, b, 1000, replicated=True)
