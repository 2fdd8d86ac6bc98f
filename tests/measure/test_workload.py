"""A trace turned into the requests a replay sends: the same blocks `tiers` reads, plus arrival
times and output lengths; scaled, cut to the server's limit, encoded."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.measure.tokens import TokenRange
from xputune.measure.workload import build_workload, encode_body, read_slice
from xputune.plan.hitrate import exact_curve
from xputune.plan.traces import TraceFormatError, parse_generic, parse_mooncake

VOCAB = TokenRange(10, 500)


def _mooncake(rows: list[dict]) -> io.BytesIO:
    return io.BytesIO("".join(json.dumps(r) + "\n" for r in rows).encode())


ROWS = [
    {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
    {"timestamp": 250, "input_length": 600, "output_length": 900, "hash_ids": [0, 3]},
    {"timestamp": 500, "input_length": 1536, "hash_ids": [0, 1, 2]},
]


def test_a_mooncake_slice_keeps_times_outputs_and_the_blocks() -> None:
    got = read_slice(_mooncake(ROWS))
    assert got.format == "mooncake" and got.block == 512 and got.skipped == 0
    first = got.requests[0]
    assert (first.line, first.at_ms, first.ids, first.output) == (1, 0.0, (0, 1, 2), 5)
    assert first.tokens == (512, 512, 76) and first.tail == 0
    assert got.requests[2].output is None
    sliced = read_slice(_mooncake(ROWS), skip=1, limit=1)
    assert [r.line for r in sliced.requests] == [2] and sliced.skipped == 1


def test_the_prediction_reads_the_same_requests_as_tiers() -> None:
    """Unscaled, the workload's trace gives the very curve `tiers` computes from the file."""
    text = "".join(json.dumps(r) + "\n" for r in ROWS * 5)
    workload = build_workload(read_slice(io.BytesIO(text.encode())))
    mine = exact_curve(workload.trace())
    theirs = exact_curve(parse_mooncake(text.splitlines()))
    assert np.array_equal(mine.cum_hit_tokens, theirs.cum_hit_tokens)
    assert mine.total_tokens == theirs.total_tokens


def test_generic_traces_are_chained_as_tiers_chains_them() -> None:
    lines = [
        json.dumps({"page_size": 4, "hashes": [7, 8, 9], "timestamp": 3}),
        json.dumps({"hashes": [7, 8, 1], "input_length": 11}),
        json.dumps({"tokens": [5, 6, 7, 8, 9]}),
    ]
    got = read_slice(io.BytesIO("\n".join(lines).encode()))
    assert got.format == "generic" and got.block == 4
    ref = parse_generic(lines)
    ids = [i for r in got.requests for i in r.ids]
    assert ids == [int(x) for x in ref.block_ids]
    assert got.requests[1].tokens == (4, 4, 3) and got.requests[0].at_ms == 3.0


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"timestamp": -1, "input_length": 5, "hash_ids": [1]}', "timestamp must be >= 0"),
        ('{"timestamp": "x", "input_length": 5, "hash_ids": [1]}', "timestamp must be a number"),
        ('{"input_length": 5, "output_length": 1.5, "hash_ids": [1]}', "output_length"),
        ('{"input_length": 5, "hash_ids": [1, 2]}', "need input_length"),
        ("[1, 2]", "expected a JSON object"),
        ('{"input_length": 5, "hash_ids": [1]', "not JSON"),
    ],
)
def test_a_bad_line_is_named(line: str, says: str) -> None:
    good = json.dumps(ROWS[0])
    with pytest.raises(TraceFormatError) as err:
        read_slice(io.BytesIO(f"{good}\n\n{line}\n".encode()), source="t.jsonl")
    assert str(err.value).startswith("t.jsonl: line 3: ") and says in str(err.value)


def test_a_line_past_the_bound_is_refused(monkeypatch) -> None:
    from xputune.measure import workload

    monkeypatch.setattr(workload, "LINE_MAX", 64)
    long = json.dumps({"input_length": 5, "hash_ids": list(range(40))})
    with pytest.raises(TraceFormatError, match="line 2: longer than"):
        first = '{"input_length": 5, "hash_ids": [1]}'
        read_slice(io.BytesIO(f"{first}\n{long}\n".encode()), source="t")


def test_scaling_truncation_and_output_caps() -> None:
    trace = read_slice(_mooncake(ROWS))
    w = build_workload(trace, block_tokens=8, max_req_input_len=21, max_output=100)
    first, second, third = w.requests
    assert first.tokens == (8, 8, 2)  # 76 of 512 tokens -> ceil(76 * 8 / 512) = 2
    assert second.tokens == (8, 2)  # 88 -> 2
    assert third.tokens == (8, 8, 4) and third.prompt_tokens == 20  # 24 cut to 21 - 1
    assert third.ids == (0, 1, 2) and w.longest_prompt == 20
    # 900 asked: 100 by --max-output, then 21 + 5 - 10 - 1 = 15, what SGLang generates
    assert (first.output, second.output, third.output) == (5, 15, 1)
    assert (w.truncated, w.outputs_capped, w.outputs_missing, w.outputs_limited) == (1, 1, 1, 1)
    assert w.block_tokens == 8 and w.trace_block == 512


@pytest.mark.parametrize("max_req_input_len", [2, 3, 17, 1018])
def test_prompts_stay_under_sglangs_own_limit(max_req_input_len: int) -> None:
    """SGLang aborts len(input_ids) >= max_req_input_len: a prompt one token shorter is kept
    whole, one of exactly max_req_input_len tokens loses its last token, and no request asks
    for more output than max_req_len - prompt - 1 (max_req_len = max_req_input_len + 5)."""
    from xputune.measure.workload import longest_output, longest_prompt

    assert longest_prompt(max_req_input_len) == max_req_input_len - 1
    lengths = (max_req_input_len - 1, max_req_input_len, 10 * max_req_input_len)
    rows = [
        {"input_length": n, "output_length": 512, "hash_ids": [100 * i + j for j in
                                                                range(-(-n // 512))]}
        for i, n in enumerate(lengths)
    ]  # fmt: skip
    w = build_workload(read_slice(_mooncake(rows)), max_req_input_len=max_req_input_len)
    assert [r.prompt_tokens for r in w.requests] == [max_req_input_len - 1] * 3
    assert w.truncated == 2
    for r in w.requests:
        assert r.output == longest_output(max_req_input_len, r.prompt_tokens) == 5
        assert r.prompt_tokens + r.output <= max_req_input_len + 5 - 1


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.lists(st.integers(0, 30), min_size=1, max_size=6), st.integers(1, 512)),
        min_size=1,
        max_size=15,
    ),
    n=st.integers(1, 16),
    limit=st.integers(1, 120),
)
def test_scaled_requests_keep_their_block_prefixes(rows, n: int, limit: int) -> None:
    """Scaling and cutting keep every prompt a sequence of whole blocks (its last one maybe
    partial) whose token prefixes are shared exactly where block ids are."""
    lines = [
        {"input_length": 512 * (len(ids) - 1) + last, "hash_ids": ids, "timestamp": i}
        for i, (ids, last) in enumerate(rows)
    ]
    # a prefix-chained id must always have the same parent: make ids depend on their prefix
    for row in lines:
        row["hash_ids"] = [hash(tuple(row["hash_ids"][: j + 1])) & 0xFFFF for j in
                           range(len(row["hash_ids"]))]  # fmt: skip
    w = build_workload(read_slice(_mooncake(lines)), block_tokens=n, max_req_input_len=limit + 1)
    bodies = [json.loads(w.body(r, VOCAB, stream=False))["input_ids"] for r in w.requests]
    for r, body in zip(w.requests, bodies, strict=True):
        assert len(body) == r.prompt_tokens <= limit  # SGLang refuses >= limit + 1
        assert r.output >= 1 and r.prompt_tokens + r.output <= limit + 1 + 4
        assert all(1 <= t <= n for t in r.tokens)
    for a, ba in zip(w.requests, bodies, strict=True):
        for b, bb in zip(w.requests, bodies, strict=True):
            k = 0
            while k < min(len(a.ids), len(b.ids)) and a.ids[k] == b.ids[k]:
                k += 1
            common = min(sum(a.tokens[:k]), sum(b.tokens[:k]))
            assert ba[:common] == bb[:common]


def test_the_body_is_sglang_generate_json() -> None:
    body = json.loads(encode_body([11, 12, 13], 4))
    assert body == {
        "input_ids": [11, 12, 13],
        "sampling_params": {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True},
        "stream": True,
    }
    assert "stream" not in json.loads(encode_body([1], 1, stream=False))


def test_requests_of_no_input_are_left_out() -> None:
    rows = [{"input_length": 0, "hash_ids": []}, ROWS[0]]
    w = build_workload(read_slice(_mooncake(rows)))
    assert len(w.requests) == 1 and w.empty == 1 and w.requests[0].index == 0
