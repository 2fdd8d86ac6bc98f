"""recommend_strategy: local, all-nodes or shared from the topology, and agreement with plan."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import NVIDIA_BOX, SEED_BOX
from xputune.host import open_host
from xputune.plan.bindings import PlanError, make_bindings
from xputune.plan.strategy import recommend_strategy
from xputune.topology.discover import discover
from xputune.topology.model import Ordering, Topology

ON = Ordering(True, True, False)
OFF = Ordering(False, False, False)


@pytest.fixture(scope="module")
def seed() -> Topology:
    return discover(open_host(str(SEED_BOX)))


def with_ido(topo: Topology, ordering: Ordering = ON) -> Topology:
    return topo._replace(pci={b: f._replace(ordering=ordering) for b, f in topo.pci.items()})


def test_seed_without_ido_stays_local_and_says_what_to_run(seed: Topology) -> None:
    advice = recommend_strategy(seed)
    assert advice.strategy == "local"
    assert "node(s) 0 2 4 6" in advice.reason and "xputune apply --ido" in advice.reason
    assert "for an MLA model, shared" in advice.reason  # named when no model is known


def test_seed_with_ido_spreads_over_every_node(seed: Topology) -> None:
    advice = recommend_strategy(with_ido(seed))
    assert advice.strategy == "all-nodes"
    assert "4 card(s) share a node" in advice.reason and "0 2 4 6" in advice.reason
    assert "ordering is on at every shared switch" in advice.reason
    assert recommend_strategy(with_ido(seed), tp=2).strategy == "all-nodes"  # xpu0, xpu1 on 1


def test_mla_recommends_shared_for_more_than_one_rank(seed: Topology) -> None:
    assert recommend_strategy(seed, mla=True).strategy == "shared"
    assert "instead of 8 copies" in recommend_strategy(seed, mla=True).reason
    assert recommend_strategy(seed, tp=1, mla=True).strategy == "local"
    not_mla = recommend_strategy(seed, mla=False)
    assert not_mla.strategy == "local" and "MLA" not in not_mla.reason


def test_cards_covering_every_node_stay_local() -> None:
    h100 = discover(open_host(str(NVIDIA_BOX)))  # 8 cards on nodes 0 0 0 0 1 1 1 1
    advice = recommend_strategy(with_ido(h100))
    assert advice == recommend_strategy(h100)
    assert advice.strategy == "local" and "cover every node with memory (0 1)" in advice.reason


def test_a_node_of_its_own_too_few_nodes_unknown_node_and_no_cards(seed: Topology) -> None:
    own = seed._replace(cards=tuple(c._replace(numa_node=i) for i, c in enumerate(seed.cards)))
    assert recommend_strategy(own).reason == "each of the 8 cards has a node with memory of its own"
    assert recommend_strategy(own).strategy == "local"

    few = with_ido(seed)._replace(
        numa_nodes=tuple(
            n._replace(memory_total_bytes=None) if n.id in (0, 2) else n for n in seed.numa_nodes
        )
    )
    advice = recommend_strategy(few)
    assert advice.strategy == "local" and "8 cards, 6 nodes" in advice.reason

    lost = seed._replace(cards=(seed.cards[0]._replace(numa_node=None), *seed.cards[1:]))
    advice = recommend_strategy(with_ido(lost))
    assert advice.strategy == "local" and "NUMA node of xpu0 is unknown" in advice.reason

    assert recommend_strategy(seed._replace(cards=())).strategy is None


def test_too_many_ranks_is_plan_s_error(seed: Topology) -> None:
    with pytest.raises(PlanError, match="needs 9 cards"):
        recommend_strategy(seed, tp=9)


def _plan_would_spread(topo: Topology, tp: int) -> bool:
    """plan's own answer: all-nodes can be made with IDO required and moves some card."""
    try:
        bindings = make_bindings(topo, tp, "all-nodes")
    except PlanError:
        return False
    return any(r.numa_node != r.local_node for r in bindings.ranks)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    nodes=st.lists(st.integers(0, 7), min_size=8, max_size=8),
    memory=st.lists(st.booleans(), min_size=8, max_size=8),
    ido=st.lists(st.booleans(), min_size=1, max_size=24),
    tp=st.integers(1, 8),
)
def test_all_nodes_exactly_where_plan_makes_it_and_moves_a_card(
    seed: Topology, nodes: list[int], memory: list[bool], ido: list[bool], tp: int
) -> None:
    """The recommendation never names a strategy plan would refuse, and never leaves out one
    that would give some card a different node (the signal labels used before)."""
    path = sorted({fn.bdf for c in seed.cards for fn in seed.ports_on_path(c)})
    pci = dict(seed.pci)
    for i, bdf in enumerate(path):
        pci[bdf] = pci[bdf]._replace(ordering=ON if ido[i % len(ido)] else OFF)
    topo = seed._replace(
        pci=pci,
        cards=tuple(c._replace(numa_node=n) for c, n in zip(seed.cards, nodes, strict=True)),
        numa_nodes=tuple(
            n._replace(memory_total_bytes=n.memory_total_bytes if keep else None)
            for n, keep in zip(seed.numa_nodes, memory, strict=True)
        ),
    )
    advice = recommend_strategy(topo, tp=tp)
    assert advice.strategy in ("local", "all-nodes") and advice.reason
    assert (advice.strategy == "all-nodes") == _plan_would_spread(topo, tp), advice.reason


def test_plan_carries_the_recommended_strategy(run_cli) -> None:
    """plan shows the recommendation next to the strategy it was asked for."""
    import json

    _, doc, _ = run_cli("plan", "--example", "h3c-hygon-p800", "--model", "glm-5", "--tp", "8",
                        "-f", "json")  # fmt: skip
    data = json.loads(doc)
    assert data["strategy"] == "local"
    assert data["recommended_strategy"]["strategy"] == "shared"  # MLA at TP 8
    _, doc, _ = run_cli("plan", "--example", "h3c-hygon-p800", "--model", "qwen3-32b", "--tp",
                        "8", "-f", "json")  # fmt: skip
    advice = json.loads(doc)["recommended_strategy"]
    assert advice["strategy"] == "local"
    assert "24 port(s) on shared switches lack ID-based ordering" in advice["reason"]  # as check
    code, out, _ = run_cli("plan", "--example", "h3c-hygon-p800", "--model", "glm-5", "--tp", "8")
    assert code == 0 and "note: shared is recommended here" in out
