"""plan/cluster.py: N instances behind a router, private L1 and L2 each, one shared L3.

Held to hand-worked cases (a conversation split by round robin is found again only in the
shared L3), to the single-instance model it must equal at N = 1 whatever the routing, and to
bounds on arbitrary traces (hypothesis)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.plan.cluster import CACHE_THRESHOLD, ROUTINGS, assign, cluster_point, spread
from xputune.plan.hitrate import exact_curve, three_tier_point, trace_from_requests

BLOCK = 16


def _trace(requests: list[list[int]]):
    return trace_from_requests([(ids, [BLOCK] * len(ids)) for ids in requests], BLOCK)


def test_a_conversation_split_by_round_robin_hits_only_in_the_shared_l3() -> None:
    # one conversation: each turn extends the last (blocks 1, 1-2, 1-2-3, 1-2-3-4)
    trace = _trace([[1], [1, 2], [1, 2, 3], [1, 2, 3, 4]])
    one = cluster_point(trace, 1, "round_robin", 64, 64, 1024)
    assert (one.device, one.host, one.storage) == (6 / 10, 0.0, 0.0)  # 1 + 2 + 3 of 10 blocks
    two = cluster_point(trace, 2, "round_robin", 64, 64, 1024)
    # turns 1 and 3 on instance 0, 2 and 4 on instance 1: each instance sees its own turns
    # only (turn 3 finds block 1 of turn 1; turn 4 finds blocks 1-2 of turn 2)
    assert two.device == pytest.approx(3 / 10)
    assert two.storage == pytest.approx(3 / 10)  # the rest of the prefix, from the other one
    assert two.total == pytest.approx(one.total)  # shared L3 gives back what routing scattered
    private = cluster_point(trace, 2, "round_robin", 64, 64, None)
    assert private.storage == 0.0 and private.total == pytest.approx(3 / 10)
    assert two.bound_total == pytest.approx(6 / 10)


def test_an_l3_run_shorter_than_the_prefetch_threshold_is_recomputed() -> None:
    """SGLang fetches from storage only a miss of at least prefetch_threshold tokens."""
    trace = _trace([[1], [1, 2], [1, 2, 3], [1, 2, 3, 4]])
    runs = [cluster_point(trace, 2, "round_robin", 64, 64, 1024, storage_min_tokens=m).storage
            for m in (0, BLOCK, BLOCK + 1)]  # fmt: skip
    assert runs == [pytest.approx(3 / 10), pytest.approx(3 / 10), 0.0]  # each run one block


def test_cache_aware_keeps_a_conversation_together_and_spreads_strangers() -> None:
    a = [[1], [1, 2], [1, 2, 3]]
    b = [[50], [50, 51], [50, 51, 52]]
    trace = _trace([a[0], b[0], a[1], b[1], a[2], b[2]])
    where = assign(trace, 2, "cache_aware").tolist()
    assert where[0] != where[1]  # no match above the threshold: the smaller tree takes it
    assert where[0::2] == [where[0]] * 3 and where[1::2] == [where[1]] * 3
    # with room for everything, splitting by conversation loses no hit at all
    point = cluster_point(trace, 2, "cache_aware", 1024, 1024, None)
    alone = cluster_point(trace, 1, "round_robin", 1024, 1024, None)
    assert point.total == pytest.approx(alone.total) == pytest.approx(6 / 12)
    assert 0 < CACHE_THRESHOLD < 1


def test_assignments() -> None:
    trace = _trace([[i] for i in range(1000)])
    assert assign(trace, 3, "round_robin").tolist() == [i % 3 for i in range(1000)]
    random = assign(trace, 4, "random", seed=7)
    assert random.tolist() == assign(trace, 4, "random", seed=7).tolist()  # seeded
    assert sorted(np.bincount(random, minlength=4)) > [150] * 4  # about 250 each
    with pytest.raises(ValueError):
        assign(trace, 0, "round_robin")
    with pytest.raises(ValueError):
        assign(trace, 2, "least_loaded")


_requests = st.lists(
    st.lists(st.integers(1, 40), min_size=1, max_size=6, unique=True), min_size=1, max_size=40
)


@settings(max_examples=60, deadline=None)
@given(
    _requests,
    st.sampled_from(ROUTINGS),
    st.integers(1, 5),
    st.integers(1, 8),
    st.integers(0, 8),
    st.one_of(st.none(), st.integers(0, 30)),
)
def test_rates_are_shares_and_one_instance_is_the_single_model(
    requests, routing, n, l1, l2_extra, l3
) -> None:
    # a conversation-like chain: each request a path from its first block (prefix order)
    trace = _trace([[r[0] * 100 + i for i in range(len(r))] for r in requests])
    l1_tokens, l2_tokens = l1 * BLOCK, (l1 + l2_extra) * BLOCK
    l3_tokens = None if l3 is None else l3 * BLOCK
    p = cluster_point(trace, n, routing, l1_tokens, l2_tokens, l3_tokens)
    assert min(p.device, p.host, p.storage) >= 0 and p.total <= 1 + 1e-9
    assert p.requests_min + (n - 1) * p.requests_max >= trace.requests >= p.requests_min * n
    if l3 is None:
        assert p.storage == 0
    single = cluster_point(trace, 1, routing, l1_tokens, l2_tokens, l3_tokens)
    curve = three_tier_point(exact_curve(trace), l1_tokens, l2_tokens, l3_tokens or l2_tokens)
    assert single.device == pytest.approx(curve.device)
    assert single.host == pytest.approx(curve.host)
    assert single.storage == pytest.approx(curve.storage if l3 is not None else 0.0)
    assert single.bound_total == pytest.approx(single.total)


TRACE = str(
    Path(__file__).resolve().parents[1]
    / "data"
    / "traces"
    / "mooncake-conversation-1171-1570.jsonl"
)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--instances", "0"], "'0' is not a count of instances (1 to 1024)"),
        (["--instances", "2,x"], "'x' is not a count of instances"),
        (["--instances", "2", "--l2", "4K"], "--instances needs --l1 and --l2"),
        (["--instances", "2", "--l1", "1K", "--l2", "4K", "--sample-rate", "0.5"],
         "--instances needs the exact curve"),
    ],
)  # fmt: skip
def test_tiers_instances_says_what_it_needs_in_one_line(run_cli, args, says) -> None:
    code, out, err = run_cli("tiers", "--trace", TRACE, *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and says in err, err


def test_tiers_instances_table_at_80_columns(run_cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli(
        "tiers", "--trace", TRACE, "--l1", "20K", "--l2", "60K", "--l3", "400K",
        "--instances", "1,2,4,8", "--routing", "round_robin",
    )  # fmt: skip
    assert code == 0
    block = out.split("round_robin over N instances")[1].split("bound: one instance")[0]
    rows = [ln for ln in block.splitlines() if ln.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == ["1", "2", "4", "8"]
    assert max(map(len, out.splitlines())) <= 80


def test_tiers_instances_plots_hit_rate_against_n(run_cli, tmp_path: Path) -> None:
    """With --instances the chart (terminal and --plot) is the cluster's, against N: its
    points are the table's, each N labelled on the axis."""
    import json
    import re

    svg = tmp_path / "n.svg"
    args = ["tiers", "--trace", TRACE, "--l1", "20K", "--l2", "60K", "--l3", "400K",
            "--instances", "1,2,4,8", "--routing", "round_robin"]  # fmt: skip
    code, out, _ = run_cli(*args, "--plot", str(svg))
    assert code == 0 and "instances (log scale)" in out and "capacity (tokens, log" not in out
    assert re.search(r"^\s+1\s+2\s+4\s+8$", out, re.M), out
    code, doc, _ = run_cli(*args, "--format", "json")
    points = json.loads(doc)["cluster"]["points"]
    drawn = svg.read_text()
    assert "cluster prefix hit rate vs instances (round_robin)" in drawn
    assert "private caches only (L1 + L2)" in drawn and "bound: one instance" in drawn
    for n in ("1", "2", "4", "8"):
        assert f'text-anchor="middle">{n}</text>' in drawn
    # three polylines of four points, the total's heights the table's total hit rates
    lines = re.findall(r'<polyline points="([^"]+)"', drawn)
    assert len(lines) == 3 and all(len(pl.split()) == 4 for pl in lines)
    top, height = 40, 420 - 40 - 56
    ys = [float(pt.split(",")[1]) for pt in lines[0].split()]
    assert [round(1 - (y - top) / height, 3) for y in ys] == [
        round(p["total_hit_rate"], 3) for p in points
    ]


def test_the_spread_counts_each_instance_s_requests_most_first() -> None:
    """Round robin splits evenly; cache_aware keeps a conversation on its instance."""
    talk = [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4], [9]]
    assert spread(_trace(talk), 2, "round_robin") == [3, 2]
    assert spread(_trace(talk), 2, "cache_aware") == [4, 1]
    assert spread(_trace(talk), 8, "round_robin") == [1, 1, 1, 1, 1, 0, 0, 0]
