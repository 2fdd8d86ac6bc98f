"""An empty trace is one line, not a traceback.

`xputune tiers --trace` of a trace with no request in it ended in a TraceError traceback
("block size must be > 0 tokens, got None"): nothing was read, so no block size was known. The
third-party input is Mooncake's own trace (tests/data/traces, Apache-2.0, source in its README)
cut to a window past its last line, which is what `sed -n`, `tail -n +N` or a filter that
matches nothing leave: an empty file, blank lines, or an empty gzip stream.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest

from xputune.plan.traces import EmptyTraceError, TraceReader, read_trace

MOONCAKE = Path(__file__).resolve().parents[1] / "data" / "traces"
TRACE = MOONCAKE / "mooncake-conversation-1171-1570.jsonl"


def window(first: int, last: int) -> bytes:
    """Lines first..last (1-based, inclusive) of the real trace, as `sed -n 'F,Lp'` prints."""
    lines = TRACE.read_bytes().splitlines(keepends=True)
    return b"".join(lines[first - 1 : last])


def variants(tmp_path: Path) -> dict[str, Path]:
    past_the_end = window(401, 500)  # the excerpt has 400 requests
    assert past_the_end == b""
    files = {
        "empty.jsonl": past_the_end,
        "blank.jsonl": b"\n\n  \n\t\n",
        "empty.jsonl.gz": gzip.compress(past_the_end),
    }
    out = {}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        out[name] = tmp_path / name
    return out


@pytest.mark.parametrize("fmt", ["auto", "mooncake", "generic"])
def test_the_reader_says_empty(fmt: str) -> None:
    for data in (b"", b"\n\n \n"):
        with pytest.raises(EmptyTraceError, match="trace: the trace is empty"):
            list(TraceReader(io.BytesIO(data), fmt))
        with pytest.raises(EmptyTraceError):
            read_trace(io.BytesIO(data), fmt)
        reader = TraceReader(io.BytesIO(data), fmt)
        with pytest.raises(EmptyTraceError):
            list(reader.block_ids())


@pytest.mark.parametrize(
    "extra",
    [(), ("--sample-rate", "0.5"), ("--trace-format", "mooncake"), ("--trace-format", "generic")],
)
def test_tiers_on_an_empty_trace_is_one_line(run_cli, tmp_path: Path, extra) -> None:
    for name, path in variants(tmp_path).items():
        code, out, err = run_cli("tiers", "--trace", str(path), *extra)
        assert code != 0 and out == "", (name, out)
        assert err == f"xputune: error: {path}: the trace is empty (no requests in it)\n", name


def test_the_real_window_itself_still_reads(run_cli) -> None:
    code, out, err = run_cli("tiers", "--trace", str(TRACE), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["schema_version"] == 1
