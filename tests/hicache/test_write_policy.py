"""A request counts once per node; distinct requests reach the selective threshold."""

from __future__ import annotations

import pytest

from xputune.hicache.write_policy import RequestHitGate, write_through_threshold


def _insert(gate, counts, rid, nodes):
    for node in nodes:
        if gate.admit(rid, node):
            counts[node] = counts.get(node, 0) + 1


def test_double_insert_of_one_request_counts_once():
    gate, counts = RequestHitGate("write_through_selective"), {}
    _insert(gate, counts, "r1", ["a", "b"])  # cache_unfinished_req
    _insert(gate, counts, "r1", ["a", "b", "c"])  # cache_finished_req
    assert counts == {"a": 1, "b": 1, "c": 1}
    assert not gate.should_write_through(counts["a"])
    assert gate.suppressed == 2


def test_second_request_reaches_the_threshold():
    gate, counts = RequestHitGate("write_through_selective"), {}
    _insert(gate, counts, "r1", ["a"])
    _insert(gate, counts, "r2", ["a"])
    _insert(gate, counts, "r1", ["a"])
    assert counts["a"] == 2
    assert gate.should_write_through(counts["a"])


def test_finish_releases_request_state_and_a_new_request_counts_again():
    gate, counts = RequestHitGate(), {}
    _insert(gate, counts, "r1", ["a", "b"])
    gate.finish("r1")
    assert gate.live_requests == 0 and not gate._by_node
    _insert(gate, counts, "r2", ["a"])
    assert counts["a"] == 2


def test_split_node_counts_as_already_bumped():
    gate, counts = RequestHitGate(), {}
    _insert(gate, counts, "r1", ["a"])
    gate.on_split("a", "a-prefix")  # a new prefix diverged inside node a
    _insert(gate, counts, "r1", ["a-prefix", "a"])
    assert counts == {"a": 1}
    gate.finish("r1")
    assert not gate._by_node


def test_forget_node_drops_it_from_live_requests():
    gate = RequestHitGate()
    gate.admit("r1", "a")
    gate.forget_node("a")
    assert gate.admit("r1", "a")


@pytest.mark.parametrize(
    ("policy", "count", "expected"),
    [
        ("write_back", 5, False),
        ("write_through", 1, True),
        ("write_through_selective", 1, False),
        ("write_through_selective", 2, True),
    ],
)
def test_thresholds(policy, count, expected):
    assert RequestHitGate(policy).should_write_through(count) is expected


def test_unknown_policy():
    with pytest.raises(ValueError, match="write_through_selective"):
        write_through_threshold("write_sometimes")


def test_records_of_requests_that_never_finish_are_bounded() -> None:
    gate = RequestHitGate(max_requests=3)
    for rid in range(10):  # ten requests, none of them finished
        assert gate.admit(rid, "root-child")
    assert gate.dropped == 7
    assert len(gate._by_request) == 3 and gate._by_node["root-child"] == {7, 8, 9}
    assert not gate.admit(9, "root-child")  # a live recent request still counts once
    assert gate.admit(0, "root-child")  # the oldest was forgotten: it may count again
