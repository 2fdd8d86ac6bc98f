"""The streaming trace reader: the same Trace as the per-line reference parsers, the same
exact curve as exact_curve and the same sampled curve as sampled_curve (streamed in two
passes), errors that name the line, compressed streams."""

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
from xputune.plan.hitrate import (
    TraceError,
    curve_from_batches,
    exact_curve,
    sampled_curve,
    sampled_curve_stream,
)
from xputune.plan.stackdist import IdCounter, scan_ids
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
        ('{"input_length": NaN, "hash_ids": [1]}', "NaN is not a number JSON allows"),
        ('{"input_length": 1e999, "hash_ids": [1]}', "1e999 is beyond the range"),
        ('{"input_length": 1' + "0" * 5000 + ', "hash_ids": [1]}', "thousands of digits"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"input_length": 10, "hash_ids": [' * 50_000, "nested too deeply"),
    ],
)
def test_a_bad_line_deep_in_a_big_trace_is_named(line: str, words: str) -> None:
    good = '{"input_length": 600, "hash_ids": [1, 2]}\n'
    text = good * 5000 + "\n" + line + "\n" + good * 10
    with pytest.raises(TraceFormatError) as err:
        read_trace(_reader(text, 4096, fmt="mooncake"), source="t.jsonl")
    assert err.value.line == 5002 and words in str(err.value)


class _Endless(io.RawIOBase):
    """`head`, then one line that never ends; fails the test past `most` bytes read."""

    def __init__(self, head: bytes, most: int) -> None:
        self.head, self.most, self.given = head, most, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        assert self.given < self.most, f"read {self.given:,} bytes of one line and went on"
        n = len(buffer)
        data = (self.head + b"7," * n)[:n] if self.given < len(self.head) else b"7," * n
        data = data[:n]
        buffer[: len(data)] = data
        self.given += len(data)
        self.head = self.head[len(data) :]
        return len(data)


@pytest.mark.parametrize("chunk", [64, 4096, 1 << 16])
@pytest.mark.parametrize("fmt", ["auto", "mooncake", "generic"])
def test_an_endless_line_is_refused_with_its_number(chunk: int, fmt: str) -> None:
    """One line with no end is held at most max_line bytes (and one read) before it is
    refused, naming its line: never read on until memory runs out."""
    good = b'{"input_length": 600, "hash_ids": [1, 2], "hashes": [1, 2], "page_size": 512}\n'
    head = good * 3 + b"\n" + b'{"input_length": 1, "hash_ids": ['
    limit = 100_000
    stream = _Endless(head, most=limit + 3 * chunk + len(head))
    reader = TraceReader(io.BufferedReader(stream), fmt, source="t.jsonl", chunk_bytes=chunk,
                         max_line=limit)  # fmt: skip
    with pytest.raises(TraceFormatError) as err:
        read_trace(reader)
    assert err.value.line == 5
    assert str(err.value) == "t.jsonl: line 5: longer than 100,000 bytes: not a request"


@pytest.mark.parametrize("chunk", [64, 1000])
def test_a_line_of_max_line_bytes_is_read_one_more_is_not(chunk: int) -> None:
    def line(size: int) -> str:  # a request of `size` bytes, padded with blanks
        text = '{"input_length": 512, "hash_ids": [1]}'
        return text[:-1] + " " * (size - len(text)) + text[-1:]

    good = '{"input_length": 600, "hash_ids": [1, 2]}\n'
    for size, ok in ((5000, True), (5001, False)):
        text = good * 2 + line(size) + "\n" + good
        assert len(line(size)) == size
        reader = _reader(text, chunk, max_line=5000)
        if ok:
            assert len(read_trace(reader).offsets) == 5
        else:
            with pytest.raises(TraceFormatError, match="line 3: longer than 5,000 bytes"):
                read_trace(reader)


def test_a_long_line_in_a_gzip_trace_is_bounded_after_decompression(tmp_path: Path, capsys) -> None:
    from xputune.plan.traces import MAX_LINE

    good = b'{"input_length": 600, "hash_ids": [1, 2]}\n'
    packed = tmp_path / "bomb.jsonl.gz"  # 17 KB on disk, one line of 17 MiB inside
    body = good * 3 + b'{"input_length": 1, "hash_ids": [' + b"1," * ((MAX_LINE >> 1) + 1)
    packed.write_bytes(gzip.compress(body + b"1]}\n" + good, compresslevel=1))
    assert main(["tiers", "--trace", str(packed)]) == 2
    err = capsys.readouterr().err
    assert err == f"xputune: error: {packed}: line 4: longer than 16 MiB: not a request\n"


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


# ------------------------------------------------------------------ the streamed sampled curve


def _same_sampled(a, b) -> None:
    """Every field of two curves equal, the arrays exactly."""
    assert a.cum_hit_tokens.dtype == b.cum_hit_tokens.dtype
    assert np.array_equal(a.cum_hit_tokens, b.cum_hit_tokens)
    for field in (
        "block_size",
        "total_tokens",
        "accesses",
        "distinct_blocks",
        "chain_violations",
        "sample_rate",
        "sampled_accesses",
    ):
        assert getattr(a, field) == getattr(b, field), field


def _zipf_lines(seed: int, n: int, prompts: int, docs: int = 300, zipf: float = 1.1) -> str:
    """Mooncake lines like the benchmark's: a shared system prompt, then a Zipf document."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, docs + 1) ** zipf
    doc = rng.choice(docs, size=n, p=weights / weights.sum())
    out = []
    for i in range(n):
        k = int(rng.integers(1, 12))
        p = int(rng.integers(0, max(1, prompts)))
        head = min(2, k) if prompts else 0
        ids = [p * 2 + j for j in range(head)]
        ids += [1000 + (p * docs + int(doc[i])) * 64 + j for j in range(k - head)]
        length = k * 512 - int(rng.integers(0, 512))
        out.append(json.dumps({"timestamp": i, "input_length": length, "hash_ids": ids}) + "\n")
    return "".join(out)


@pytest.mark.parametrize("rate", [0.5, 0.25, 0.1, 0.03, 0.01])
@pytest.mark.parametrize(
    ("kind", "seed"),
    [("tree", 0), ("tree", 1), ("tree", 2), ("zipf", 3), ("zipf", 4), ("flat", 5)],
)
def test_streamed_sampled_curve_is_sampled_curve(kind: str, seed: int, rate: float) -> None:
    """The exact arrays of today's in-memory estimator, on varied traces and rates."""
    if kind == "tree":
        text = "".join(_mooncake_lines(random.Random(seed), 3000, roots=60, fanout=5))
    elif kind == "zipf":
        text = _zipf_lines(seed, 3000, prompts=4)
    else:  # no shared prompt: hot set of documents only
        text = _zipf_lines(seed, 3000, prompts=0, zipf=0.6)
    ref = sampled_curve(parse_mooncake(text.splitlines(keepends=True)), rate, seed=seed)
    reader = _reader(text, 5000)
    _same_sampled(sampled_curve_stream(reader, rate, seed=seed), ref)
    assert reader.requests == len([ln for ln in text.splitlines() if ln.strip()])
    assert ref.sampled_accesses < ref.accesses


def test_streamed_sampled_curve_of_generic_traces() -> None:
    rng = random.Random(11)
    lines = []
    for i in range(2000):
        k = rng.randrange(0, 8)
        rec: dict = {"hashes": [rng.randrange(9) for _ in range(k)]}
        if i == 0:
            rec["page_size"] = 16
        if k and rng.random() < 0.3:
            rec["input_length"] = (k - 1) * 16 + rng.randrange(1, 30)
        lines.append(json.dumps(rec) + "\n")
    lines.insert(500, json.dumps({"tokens": list(range(70))}) + "\n")  # the per-line path
    text = "".join(lines)
    for rate in (0.5, 0.1):
        ref = sampled_curve(parse_generic(lines), rate)
        _same_sampled(sampled_curve_stream(_reader(text, 3000), rate), ref)


def test_streamed_sampled_curve_reads_odd_lines_like_the_decoder() -> None:
    """Lines that the id scan leaves to the decoder (escapes, CRLF, the key twice, a float
    elsewhere) give the same curve; so do a gzip stream and one that cannot seek."""
    base = _zipf_lines(8, 2500, prompts=3)
    lines = base.splitlines(keepends=True)
    lines[10] = lines[10].replace('"timestamp"', '"time\\u0073tamp"')
    lines[700] = lines[700].replace('"timestamp": 700', '"note": "hash_ids"')
    lines[1400] = lines[1400].replace("\n", "\r\n")
    lines[2000] = lines[2000].replace('"timestamp": 2000', '"timestamp": 2000.5')
    text = "".join(lines)
    ref = sampled_curve(parse_mooncake(text.splitlines(keepends=True)), 0.1)
    _same_sampled(sampled_curve_stream(_reader(text, 4096), 0.1), ref)

    packed = gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(text.encode())), mode="rb")
    _same_sampled(sampled_curve_stream(TraceReader(packed, chunk_bytes=4096), 0.1), ref)

    class OneWay(io.RawIOBase):
        def __init__(self, data: bytes) -> None:
            self._inner = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def seekable(self) -> bool:
            return False

        def readinto(self, b) -> int:
            return self._inner.readinto(b)

    one_way = TraceReader(io.BufferedReader(OneWay(text.encode())), chunk_bytes=4096)
    _same_sampled(sampled_curve_stream(one_way, 0.1), ref)


def test_streamed_sampled_curve_edge_cases(tmp_path: Path) -> None:
    text = _zipf_lines(2, 400, prompts=2)
    exact = curve_from_batches(_reader(text))
    _same_curve(sampled_curve_stream(_reader(text), 1.0), exact)  # rate 1: the exact curve
    _same_curve(sampled_curve_stream(_reader(text), 0.7), exact)  # rounds to scale 1
    with pytest.raises(ValueError):
        sampled_curve_stream(_reader(text), 0.0)
    empty = sampled_curve_stream(_reader('{"input_length": 5, "hash_ids": []}\n'), 0.1)
    assert empty.accesses == 0 and empty.max_hit_rate == 0.0
    with pytest.raises(TraceFormatError) as err:  # a bad line is named, from either pass
        sampled_curve_stream(_reader(text + '{"input_length": 1, "hash_ids": [1, 2]}\n'), 0.1)
    assert err.value.line == 401


def test_a_trace_that_changes_between_the_passes_is_refused() -> None:
    first = _zipf_lines(1, 300, prompts=2).encode()
    second = _zipf_lines(2, 300, prompts=2).encode()

    class Changing(io.BytesIO):
        def seek(self, pos: int, whence: int = 0) -> int:
            self.__init__(second)
            return 0

    with pytest.raises(TraceError, match="read differently"):
        sampled_curve_stream(TraceReader(Changing(first)), 0.1)


def test_id_counter_ranks_like_numpy() -> None:
    rng = np.random.default_rng(3)
    ids = np.concatenate(
        [
            np.full(70_000, 7, np.uint64),  # counts past the tally, sorted instead
            np.full(66_000, 2**64 - 1, np.uint64),
            rng.integers(0, 5000, 200_000).astype(np.uint64) * np.uint64(2**40),
        ]
    )
    rng.shuffle(ids)
    counter = IdCounter()
    for part in np.array_split(ids, 7):
        counter.add(part)
    values, counts = np.unique(ids, return_counts=True)
    assert counter.info()[:2] == (len(values), len(ids))
    ranked = np.sort(counts)[::-1]
    for rank in (1, 2, 3, 10, 100, len(values)):
        assert counter.rank(rank) == ranked[rank - 1]
    assert counter.rank(0) == 0 and counter.rank(len(values) + 1) == 0
    least = int(ranked[50])
    assert set(counter.at_least(least).tolist()) == set(values[counts >= least].tolist())
    counter.close()


def test_scan_ids_takes_only_plain_lines() -> None:
    plain = b'{"input_length": 5, "hash_ids": [1, 18446744073709551615]}\n\n {"hash_ids":[]}\n'
    assert scan_ids(plain, b"hash_ids").tolist() == [1, 2**64 - 1]
    for odd in (
        b'{"hash_ids": [1], "x": "\\u0041"}\n',  # an escape
        b'{"hash_ids": [1]}\r\n',
        b'{"x": "hash_ids", "hash_ids": [1]}\n',  # the key twice
        b'{"hash_ids": [1.5]}\n',
        b'{"hash_ids": [18446744073709551616]}\n',
        b'{"hash_ids": [-1]}\n',
        b'{"input_length": 5}\n',
        b"[1, 2]\n",
    ):
        assert scan_ids(odd, b"hash_ids") is None, odd


def test_exact_stream_through_many_table_growths() -> None:
    """Enough distinct blocks for the id table to grow (by 1.5x) several times, and a long
    stack: the streamed curve is still exact_curve's."""
    rng = np.random.default_rng(9)
    n = 50_000
    docs = np.where(np.arange(n) % 2, rng.zipf(1.2, n) % 30_000, rng.integers(0, 10**6, n))
    lines = []
    for i in range(n):
        k = 1 + i % 9
        ids = [int(docs[i]) * 16 + j for j in range(k)]
        lines.append(f'{{"input_length": {k * 512}, "hash_ids": {ids}}}\n')
    text = "".join(lines)
    reader = _reader(text)
    curve = curve_from_batches(reader)
    assert curve.distinct_blocks > 100_000  # the table started at 65536 slots
    _same_curve(exact_curve(parse_mooncake(text.splitlines(keepends=True))), curve)


TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
REAL = TRACES / "mooncake-conversation-1171-1570.jsonl"  # Mooncake's own requests


@pytest.mark.parametrize("chunk", [97, 4096, 1 << 22])
def test_the_real_trace_reads_whole_up_to_its_longest_line(chunk: int) -> None:
    """Mooncake's own requests (tests/data/traces): with the line bound at exactly its longest
    line the bounded reader gives the reference trace; one byte less and that line (counted
    here, not by the reader) is refused by number."""
    data = REAL.read_bytes()
    lines = data.split(b"\n")
    longest = max(range(len(lines)), key=lambda i: len(lines[i]))
    bound = len(lines[longest])
    ref = parse_mooncake(data.decode().splitlines(keepends=True))
    reader = TraceReader(io.BytesIO(data), source="real", chunk_bytes=chunk, max_line=bound)
    _same(ref, read_trace(reader))
    if chunk < bound:  # a line within one read is never held longer than the read
        tight = TraceReader(io.BytesIO(data), source="real", chunk_bytes=chunk,
                            max_line=bound - 1)  # fmt: skip
        with pytest.raises(TraceFormatError) as err:
            read_trace(tight)
        assert err.value.line == longest + 1


def test_the_real_trace_with_an_endless_last_request_is_refused_there(
    tmp_path: Path, capsys
) -> None:
    data = REAL.read_bytes()
    packed = tmp_path / "real.jsonl.gz"
    tail = b'{"timestamp": 1, "input_length": 5, "hash_ids": [' + b"7," * (9 << 20)
    packed.write_bytes(gzip.compress(data + tail, compresslevel=1))
    assert main(["tiers", "--trace", str(packed)]) == 2
    count = data.count(b"\n")
    assert capsys.readouterr().err == (
        f"xputune: error: {packed}: line {count + 1}: longer than 16 MiB: not a request\n"
    )
