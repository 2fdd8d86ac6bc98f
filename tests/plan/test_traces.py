"""Trace and measured-table parsers: the formats, and errors that name the line."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.plan.traces import (
    EmptyTraceError,
    TraceFormatError,
    chain,
    parse_generic,
    parse_measured_table,
    parse_mooncake,
    sniff_format,
)


def _line(**fields) -> str:
    return json.dumps(fields) + "\n"


def test_mooncake_blocks_carry_512_tokens_but_the_last() -> None:
    lines = [
        _line(timestamp=0, input_length=1100, output_length=5, hash_ids=[0, 1, 2]),
        _line(timestamp=3, input_length=512, output_length=5, hash_ids=[0]),
    ]
    trace = parse_mooncake(lines)
    assert trace.block_size == 512
    assert trace.block_tokens.tolist() == [512, 512, 76, 512]
    assert trace.offsets.tolist() == [0, 3, 4]
    assert trace.total_tokens == 1100 + 512


def test_mooncake_tokens_beyond_the_ids_are_uncached() -> None:
    trace = parse_mooncake([_line(input_length=1500, hash_ids=[7])])
    assert trace.block_tokens.tolist() == [512]
    assert trace.uncached_tokens == 988


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        (_line(input_length=10), "'hash_ids'"),
        (_line(hash_ids=[1]), "'input_length'"),
        (_line(input_length=-5, hash_ids=[1]), ">= 0"),
        (_line(input_length=10, hash_ids=[1, 2]), "input_length > 512"),
        (_line(input_length=10, hash_ids=[1, -2]), "64-bit unsigned"),
        (_line(input_length="10", hash_ids=[1]), "integer"),
        (_line(input_length=10, hash_ids="1,2"), "list"),
    ],
)
def test_bad_mooncake_lines_name_the_line(line: str, words: str) -> None:
    good = _line(input_length=600, hash_ids=[1, 2])
    with pytest.raises(TraceFormatError) as err:
        parse_mooncake([good, "\n", line], source="t.jsonl")
    assert "t.jsonl: line 3:" in str(err.value) and words in str(err.value)
    assert err.value.line == 3


def test_generic_hashes_get_a_rolling_prefix_hash() -> None:
    lines = [_line(page_size=16, hashes=[5, 6]), _line(hashes=[9, 6])]
    trace = parse_generic(lines)
    ids = trace.block_ids.tolist()
    assert ids[:2] == chain([5, 6])
    assert ids[1] != ids[3]  # same page content, different prefix: different block
    assert trace.total_tokens == 64


def test_generic_chained_hashes_are_kept_and_input_length_trims_the_last_page() -> None:
    trace = parse_generic([_line(hashes=[5, 6], chained=True, input_length=20)], page_size=16)
    assert trace.block_ids.tolist() == [5, 6]
    assert trace.block_tokens.tolist() == [16, 4]


def test_generic_token_ids_are_paged_and_hashed() -> None:
    lines = [_line(tokens=list(range(10))), _line(tokens=[*range(8), 99])]
    trace = parse_generic(lines, page_size=4)
    ids = trace.block_ids.tolist()
    assert trace.block_tokens.tolist() == [4, 4, 2, 4, 4, 1]
    assert ids[:2] == ids[3:5] and ids[2] != ids[5]


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        ([_line(hashes=[1])], "no page size"),
        ([_line(page_size=4, hashes=[1]), _line(page_size=8, hashes=[1])], "differs"),
        ([_line(page_size=0, hashes=[1])], "> 0"),
        ([_line(page_size=4, pages=[1])], "'hashes' or 'tokens'"),
        ([_line(page_size=4, hashes=[1], chained="yes")], "true or false"),
    ],
)
def test_bad_generic_lines_are_refused(lines: list[str], words: str) -> None:
    with pytest.raises(TraceFormatError, match=words):
        parse_generic(lines)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=40),
            st.dictionaries(
                st.sampled_from(["hash_ids", "input_length", "x"]),
                st.one_of(
                    st.integers(-5, 3000),
                    st.lists(st.integers(-2, 2**65), max_size=4),
                    st.text(max_size=3),
                    st.none(),
                ),
                max_size=3,
            ).map(json.dumps),
        ),
        max_size=5,
    )
)
def test_any_garbage_gives_a_trace_or_a_trace_error(lines: list[str]) -> None:
    try:
        trace = parse_mooncake(lines)
    except EmptyTraceError as exc:
        assert not any(line.strip() for line in lines) and "the trace is empty" in str(exc)
        return
    except TraceFormatError as exc:
        assert "line " in str(exc)
        return
    # Whatever was accepted is a well-formed trace that accounts for every input token.
    records = [json.loads(line) for line in lines if line.strip()]
    assert trace.requests == len(records)
    assert trace.offsets[0] == 0 and trace.offsets[-1] == trace.accesses
    assert all(1 <= t <= trace.block_size for t in trace.block_tokens.tolist())
    assert trace.total_tokens == sum(r["input_length"] for r in records)


def test_sniff_format() -> None:
    assert sniff_format(_line(input_length=1, hash_ids=[1])) == "mooncake"
    assert sniff_format(_line(hashes=[1])) == "generic"
    assert sniff_format("garbage") == "generic"


def test_measured_table_accepts_fractions_and_percent_and_sorts() -> None:
    table = parse_measured_table(
        ["capacity_gb,hit_rate,ttft_ms", "# a comment", "80,72%,900", "15,0.46,1200"]
    )
    assert table.unit == "gb"
    assert [r.capacity for r in table.rows] == [15, 80]
    assert table.rows[1].hit_rate == pytest.approx(0.72)
    assert table.rows[0].ttft_ms == 1200


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        (["size,hit_rate"], "line 1: header needs capacity"),
        (["capacity_tokens,ttft_ms"], "header needs hit_rate"),
        (["capacity_tokens,hit_rate", "10,abc"], "line 2: hit_rate is not a number"),
        (["capacity_tokens,hit_rate", "10,1.5"], "within 0..1"),
        (["capacity_tokens,hit_rate", "-1,0.5"], "capacity must be >= 0"),
        (["capacity_tokens,hit_rate", "10"], "expected 2 fields"),
        (["capacity_tokens,hit_rate"], "no rows"),
    ],
)
def test_bad_measured_tables_name_the_line(lines: list[str], words: str) -> None:
    with pytest.raises(TraceFormatError, match=words):
        parse_measured_table(lines)
