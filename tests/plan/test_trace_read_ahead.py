"""TraceReader's read-ahead thread changes when chunks are read, never what comes out.

The reader's iterators run their reading in a worker thread a few chunks ahead of the consumer
(traces._read_ahead), so that reading overlaps the C stack pass. Held here: the batches, ids
and errors are those of reading inline (ahead=0) on any input; an error comes after the
batches before it; a consumer that stops early stops and joins the worker; a rewind after a
whole pass reads the trace again.
"""

from __future__ import annotations

import io
import json
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.plan.hitrate import curve_from_batches, sampled_curve_stream
from xputune.plan.traces import TraceFormatError, TraceReader, _read_ahead

WORKER = "xputune-trace-read-ahead"


def _workers() -> int:
    return sum(1 for t in threading.enumerate() if t.name == WORKER)


def _outcome(text: bytes, chunk: int, ahead: int, fmt: str = "auto", ids: bool = False):
    """('ok', arrays of every batch, counts) or ('error', type, line, message)."""
    reader = TraceReader(io.BytesIO(text), fmt, chunk_bytes=chunk, ahead=ahead, max_line=600)
    try:
        if ids:
            got = [a.tolist() for a in reader.block_ids()]
        else:
            got = [
                (b.ids.tolist(), b.counts.tolist(), b.last_tokens.tolist(), b.uncached, b.block)
                for b in reader
            ]
    except TraceFormatError as exc:
        return ("error", type(exc), exc.line, str(exc))
    return ("ok", got, reader.requests, reader.kept_requests, reader.slow_lines, reader.block)


@st.composite
def _good(draw) -> str:
    """A request both formats can hold: Mooncake's hash_ids and generic's hashes."""
    ids = draw(st.lists(st.integers(0, 2**64 - 1), max_size=6))
    length = (len(ids) - 1) * 512 + draw(st.integers(1, 512)) if ids else 0  # fits 512 and 16
    return json.dumps({"input_length": length, "hash_ids": ids, "hashes": ids, "page_size": 16})


ODD = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "hash_ids": st.one_of(st.lists(st.integers(-2, 40), max_size=4), st.just([1.5])),
            "hashes": st.lists(st.integers(0, 50), max_size=4),
            "page_size": st.sampled_from([4, 16, 0]),
            "input_length": st.one_of(st.integers(-3, 5000), st.booleans()),
        },
    ).map(json.dumps),
    st.just('{"input_length": NaN, "hash_ids": [1]}'),
    st.text(max_size=20),
    st.just('{"input_length": 512, "hash_ids": [' + "1, " * 300 + "1]}"),  # past max_line
)


@st.composite
def _traces(draw) -> list[str]:
    """Mostly good requests and blank lines; now and then one odd or bad line among them."""
    lines = draw(st.lists(st.one_of(_good(), _good(), _good(), st.just(""), st.just(" ")),
                          max_size=60))  # fmt: skip
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), draw(ODD))
    return lines


@settings(max_examples=150, deadline=None)
@given(
    _traces(),
    st.sampled_from(["\n", "\r\n", "\r"]),
    st.sampled_from([32, 300, 4096]),
    st.sampled_from(["auto", "mooncake", "generic"]),
    st.booleans(),
)
def test_read_ahead_reads_any_input_as_inline_reading_does(
    lines: list[str], end: str, chunk: int, fmt: str, ids: bool
) -> None:
    text = "".join(line.replace("\n", " ").replace("\r", " ") + end for line in lines).encode()
    inline = _outcome(text, chunk, 0, fmt, ids)
    assert _outcome(text, chunk, 2, fmt, ids) == inline
    assert _outcome(text, chunk, 1, fmt, ids) == inline
    assert _workers() == 0


def _lines(n: int, bad_at: int | None = None) -> bytes:
    good = [f'{{"input_length": 600, "hash_ids": [{i}, {i + 1}]}}\n' for i in range(n)]
    if bad_at is not None:
        good[bad_at - 1] = '{"input_length": 600, "hash_ids": [1, 2], "x": NaN}\n'
    return "".join(good).encode()


def test_an_error_comes_after_the_batches_before_it() -> None:
    text = _lines(400, bad_at=350)
    reader = TraceReader(io.BytesIO(text), chunk_bytes=2048, ahead=2)
    seen = 0
    with pytest.raises(TraceFormatError) as err:
        for batch in reader:
            seen += len(batch.counts)
    assert err.value.line == 350 and "NaN" in str(err.value)
    assert 300 < seen < 350  # every whole chunk before the bad line's
    assert _workers() == 0


class _Counting(io.BytesIO):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.reads = 0

    def read(self, size: int | None = -1) -> bytes:
        self.reads += 1
        return super().read(size)


def test_a_consumer_that_stops_early_stops_the_worker() -> None:
    stream = _Counting(_lines(5000))
    batches = iter(TraceReader(stream, chunk_bytes=1024, ahead=2))
    first = next(batches)
    assert len(first.counts) > 0
    batches.close()  # what a for loop left by break or an exception does
    assert _workers() == 0
    assert stream.reads < 10  # a few chunks ahead, not the whole trace
    assert stream.tell() < len(stream.getvalue())


def test_an_error_of_the_consumer_joins_the_worker() -> None:
    reader = TraceReader(io.BytesIO(_lines(3000)), chunk_bytes=1024, ahead=2)
    with pytest.raises(RuntimeError):
        for _ in reader:
            raise RuntimeError("the pass failed")
    assert _workers() == 0


def test_curves_with_and_without_read_ahead_are_the_same() -> None:
    rng = np.random.default_rng(5)
    rows = []
    for _ in range(3000):
        k = int(rng.integers(0, 12))
        ids = [int(x) for x in rng.integers(0, 400, k)]
        rows.append(json.dumps({"input_length": max(1, k * 512 - 7), "hash_ids": ids}) + "\n")
    text = "".join(rows).encode()

    def reader(ahead: int) -> TraceReader:
        return TraceReader(io.BytesIO(text), chunk_bytes=4096, ahead=ahead)

    inline, ahead = curve_from_batches(reader(0)), curve_from_batches(reader(2))
    assert np.array_equal(inline.cum_hit_tokens, ahead.cum_hit_tokens)
    assert inline.total_tokens == ahead.total_tokens and inline.accesses == ahead.accesses
    # the sampled curve reads twice (ids, rewind, batches): the worker is gone in between
    one, two = sampled_curve_stream(reader(0), 0.1), sampled_curve_stream(reader(2), 0.1)
    assert np.array_equal(one.cum_hit_tokens, two.cum_hit_tokens)
    assert _workers() == 0


def test_read_ahead_of_plain_items() -> None:
    assert list(_read_ahead(iter(range(100)), 3)) == list(range(100))
    assert list(_read_ahead(iter(range(5)), 0)) == list(range(5))

    def failing():
        yield 1
        raise MemoryError("no room")

    got = []
    with pytest.raises(MemoryError, match="no room"):
        for item in _read_ahead(failing(), 2):
            got.append(item)
    assert got == [1] and _workers() == 0
