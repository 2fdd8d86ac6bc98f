"""The streaming trace reader: the same Trace as the per-line reference parsers, the same
exact curve as exact_curve, errors that name the line, compressed streams."""

from __future__ import annotations

import gzip
import io
import json
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.cli.entry import main
from xputune.plan.hitrate import curve_from_batches, exact_curve, sampled_curve
from xputune.plan.traces import (
    TraceFormatError,
    TraceReader,
    parse_generic,
    parse_mooncake,
    read_trace,
)

U64 = 2**64 - 1


def _same(a, b) -> None:
    for field in ("block_ids", "block_tokens", "offsets"):
        x, y = getattr(a, field), getattr(b, field)
        assert x.dtype == y.dtype and np.array_equal(x, y), field
    assert a.block_size == b.block_size and a.uncached_tokens == b.uncached_tokens


def _same_curve(a, b) -> None:
    assert np.array_equal(a.cum_hit_tokens, b.cum_hit_tokens)
    for field in ("total_tokens", "accesses", "distinct_blocks", "chain_violations", "block_size"):
        assert getattr(a, field) == getattr(b, field), field


def _reader(text: str, chunk: int = 1 << 22, **kw) -> TraceReader:
    return TraceReader(io.BytesIO(text.encode()), chunk_bytes=chunk, **kw)


def _mooncake_lines(rng: random.Random, n: int, roots: int = 5, fanout: int = 4) -> list[str]:
    lines = []
    for t in range(n):
        k = rng.randrange(0, 9)
        ids, node = [], rng.randrange(roots)
        for _ in range(k):
            ids.append(node)
            node = node * fanout + 1 + rng.randrange(fanout)  # a prefix tree: id fixes path
        length = max(0, (k - 1) * 512 + rng.randrange(1, 700)) if k else rng.randrange(0, 50)
        if rng.random() < 0.1:
            ids = [rng.randrange(U64 + 1) for _ in range(k)]  # big ids
        fields = {"timestamp": t, "input_length": length, "output_length": 3, "hash_ids": ids}
        text = json.dumps(fields, separators=(",", ":") if rng.random() < 0.5 else None)
        lines.append(text + rng.choice(["\n", "\r\n", "\n\n", " \n"]))
    return lines


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk", [64, 1000, 1 << 22])
def test_mooncake_reader_gives_the_reference_trace_and_curve(seed: int, chunk: int) -> None:
    lines = _mooncake_lines(random.Random(seed), 300)
    text = "".join(lines)
    reader = _reader(text, chunk)
    new = read_trace(reader)
    _same(parse_mooncake(text.splitlines(keepends=True)), new)
    assert reader.slow_lines == 0  # the fast path took every line
    assert reader.requests == new.requests
    _same_curve(exact_curve(new), curve_from_batches(_reader(text, chunk)))


def test_generic_reader_gives_the_reference_trace() -> None:
    rng = random.Random(4)
    lines = []
    for i in range(400):
        k = rng.randrange(0, 6)
        rec: dict = {"hashes": [rng.randrange(7) for _ in range(k)]}
        if i == 0:
            rec["page_size"] = 16
        if rng.random() < 0.3:
            rec["chained"] = rng.random() < 0.5
        if k and rng.random() < 0.3:
            rec["input_length"] = (k - 1) * 16 + rng.randrange(1, 30)
        lines.append(json.dumps(rec) + "\n")
    text = "".join(lines)
    reader = _reader(text, 500)
    _same(parse_generic(lines), read_trace(reader))
    assert reader.slow_lines == 0
    with_tokens = [*lines, json.dumps({"tokens": list(range(40))}) + "\n"]
    _same(parse_generic(with_tokens), read_trace(_reader("".join(with_tokens), 500)))
    _same(
        parse_generic(lines[1:], page_size=8),
        read_trace(_reader("".join(lines[1:]), 300, fmt="generic", block_size=8)),
    )


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=30),
            st.fixed_dictionaries(
                {},
                optional={
                    "hash_ids": st.one_of(
                        st.lists(st.integers(-2, 2**65), max_size=5),
                        st.lists(st.integers(0, 40), max_size=5),
                        st.just([1.5]),
                        st.text(max_size=3),
                    ),
                    "input_length": st.one_of(
                        st.integers(-5, 5000), st.just(2**70), st.booleans(), st.none()
                    ),
                    "x": st.text(max_size=4),
                },
            ).map(json.dumps),
        ),
        max_size=8,
    ),
    st.sampled_from(["\n", "\r\n", "\r"]),
    st.sampled_from([16, 4096]),
)
def test_any_input_reads_like_the_reference(lines: list[str], end: str, chunk: int) -> None:
    """The same Trace, or a TraceFormatError naming the same line."""
    text = "".join(line.replace("\n", " ").replace("\r", " ") + end for line in lines)
    try:
        ref = parse_mooncake(io.StringIO(text, newline=None).readlines())
    except TraceFormatError as exc:
        with pytest.raises(TraceFormatError) as err:
            read_trace(_reader(text, chunk, fmt="mooncake"))
        assert err.value.line == exc.line
        return
    _same(ref, read_trace(_reader(text, chunk, fmt="mooncake")))


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        ('{"input_length": 10}', "'hash_ids'"),
        ('{"input_length": -5, "hash_ids": [1]}', ">= 0"),
        ('{"input_length": 10, "hash_ids": [1, 2]}', "input_length > 512"),
        ('{"input_length": 10, "hash_ids": [1, -2]}', "64-bit unsigned"),
        ('{"input_length": 10, "hash_ids": [1, 2.5]}', "integers"),
        ('{"input_length": 10, "hash_ids": [18446744073709551616]}', "64-bit unsigned"),
    ],
)
def test_a_bad_line_deep_in_a_big_trace_is_named(line: str, words: str) -> None:
    good = '{"input_length": 600, "hash_ids": [1, 2]}\n'
    text = good * 5000 + "\n" + line + "\n" + good * 10
    with pytest.raises(TraceFormatError) as err:
        read_trace(_reader(text, 4096, fmt="mooncake"), source="t.jsonl")
    assert err.value.line == 5002 and words in str(err.value)


def test_gzip_trace_through_the_cli_has_the_same_curve(tmp_path: Path, capsys) -> None:
    text = "".join(_mooncake_lines(random.Random(9), 500))
    plain, packed = tmp_path / "t.jsonl", tmp_path / "t.jsonl.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    outs = []
    for path in (plain, packed):
        assert main(["tiers", "--trace", str(path), "-f", "json"]) == 0
        data = json.loads(capsys.readouterr().out)
        data["trace"].pop("file")
        outs.append(data)
    assert outs[0] == outs[1]
    ref = exact_curve(parse_mooncake(text.splitlines(keepends=True)))
    assert outs[0]["trace"]["distinct_blocks"] == ref.distinct_blocks
    assert outs[0]["trace"]["accesses"] == ref.accesses
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes(packed.read_bytes()[:-20])
    assert main(["tiers", "--trace", str(truncated)]) == 2
    err = capsys.readouterr().err
    assert "cannot read the trace" in err and "Traceback" not in err


def test_zstd_without_the_extra_is_a_clear_error(tmp_path: Path, capsys) -> None:
    path = tmp_path / "t.jsonl.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 16)
    try:
        import zstandard  # noqa: F401
    except ImportError:
        assert main(["tiers", "--trace", str(path)]) == 2
        assert "xputune[zstd]" in capsys.readouterr().err
    else:
        assert main(["tiers", "--trace", str(path)]) == 2  # corrupt: one line, no traceback
        assert "Traceback" not in capsys.readouterr().err


def test_cli_sampled_mode_is_the_library_sampled_curve(tmp_path: Path, capsys) -> None:
    text = "".join(_mooncake_lines(random.Random(2), 800, roots=40))
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    assert main(["tiers", "--trace", str(path), "--sample-rate", "0.25", "-f", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ref = sampled_curve(parse_mooncake(text.splitlines(keepends=True)), 0.25)
    assert data["trace"]["mode"] == "sampled" and data["trace"]["sample_rate"] == 0.25
    assert data["trace"]["distinct_blocks"] == ref.distinct_blocks


def test_root_sampling_skips_lines_and_matches_a_weighted_pass() -> None:
    """The skipping sampler (library only) keeps whole trees: the kept requests' pass with
    every block weighted by 1/rate is the one stack_distances gives with uniform weights."""
    from xputune.plan.hitrate import _curve_from_positions
    from xputune.plan.stackdist import dense_ids, stack_distances

    text = "".join(_mooncake_lines(random.Random(5), 3000, roots=400))
    reader = _reader(text, 2000, sample_rate=0.1)
    batches = list(reader)
    kept = read_trace(_reader(text, 2000, sample_rate=0.1))
    assert 0 < kept.requests < reader.requests == 3000
    dense, n = dense_ids(kept.block_ids)
    pos, _ = stack_distances(dense, kept.offsets, n, np.full(n, 10, np.int32))
    curve = curve_from_batches(iter(batches), 512, scale=10)
    assert np.array_equal(curve.cum_hit_tokens, _curve_from_positions(pos, kept.block_tokens * 10))
    roots = {int(kept.block_ids[o]) for o in kept.offsets[:-1] if o < kept.accesses}
    assert roots <= reader.kept_roots
