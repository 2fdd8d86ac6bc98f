"""`xputune replay` as a user runs it: a table or a document, one line for each bad input, and
Ctrl-C that stops with what was measured."""

from __future__ import annotations

import _thread
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.measure.fakesglang import FakeSGLang, write_model

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces"
SLICE = str(TRACE / "mooncake-conversation-1171-1570.jsonl")


@pytest.fixture
def fake(tmp_path) -> Iterator[FakeSGLang]:
    model = write_model(str(tmp_path / "m"))
    with FakeSGLang(model_path=model, device_tokens=1024, decode_ms=0.1) as server:
        yield server


def test_a_replay_prints_hits_by_tier_beside_the_prediction(run_cli, fake) -> None:
    code, out, err = run_cli(
        "replay", "--trace", SLICE, "--url", fake.url, "--block-tokens", "1", "-n", "120",
        "-c", "2", "--max-output", "2",
    )  # fmt: skip
    assert code == 0, err
    flat = " ".join(out.split())  # lines are folded at 80 columns
    assert "120 requests (lines 1-120)" in flat and "512-token blocks sent as 1" in flat
    assert "L1 1,024 tokens, L2 2,049 tokens (ratio 2), write_through" in flat
    for row in ("device (L1)", "host (L2)", "total", "TTFT ms p50", "throughput"):
        assert row in flat
    assert "why the measurement can differ from the prediction" in flat


def test_the_document_holds_every_request(run_cli, fake) -> None:
    code, out, err = run_cli(
        "replay", "--trace", SLICE, "--url", fake.url, "--block-tokens", "2", "--skip", "100",
        "-n", "30", "--speedup", "1000", "--per-request", "-f", "json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["trace"]["first_line"] == 101 and doc["trace"]["requests"] == 30
    assert doc["load"]["mode"] == "open" and doc["load"]["speedup"] == 1000
    assert doc["measured"]["requests"]["completed"] == 30 and len(doc["per_request"]) == 30
    assert doc["measured"]["dispatch_lag_ms"] is not None
    assert doc["predicted"]["device_tokens"] == 1024 and doc["predicted"]["host_tokens"] == 2049
    assert sum(r["prompt_tokens"] for r in doc["per_request"]) == doc["trace"]["input_tokens"]
    assert err == ""  # no progress bar off a terminal


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_bad_inputs_are_one_line(run_cli, fake, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    untimed = tmp_path / "untimed.jsonl"
    untimed.write_text('{"input_length": 600, "hash_ids": [1, 2]}\n')
    cases = [
        (["--url", f"127.0.0.1:{_closed_port()}"], "cannot reach http://127.0.0.1:"),
        (["--url", "ftp://x"], "--url 'ftp://x': give http://HOST:PORT"),
        (["--trace", str(empty)], "empty.jsonl: no requests to replay"),
        (["--trace", str(tmp_path / "nope.jsonl")], "nope.jsonl"),
        (["--trace", str(untimed)], "give --concurrency N (closed loop)"),
        (["--token-range", "5"], "--token-range: expected LO:HI"),
        (["--token-range", "10:9999"], "past the model's vocabulary of 512"),
    ]
    for extra, says in cases:
        argv = ["replay", "--trace", SLICE, "--url", fake.url, "-n", "3", *extra]
        code, out, err = run_cli(*argv)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("xputune: error: "), argv
        assert says in lines[0], (argv, lines)
        assert out == ""


def test_a_server_that_is_not_sglang_is_one_line(run_cli) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Other(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"name": "some other server"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Other)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        code, _, err = run_cli("replay", "--trace", SLICE, "--url", url)
    finally:
        server.shutdown()
        server.server_close()
    assert code == 2 and err == f"xputune: error: {url} does not look like an SGLang server " \
        "(/server_info has no version)\n"  # fmt: skip


def test_ctrl_c_prints_what_was_measured_and_exits_130(run_cli, fake) -> None:
    timer = threading.Timer(1.0, _thread.interrupt_main)
    timer.start()
    try:
        code, out, err = run_cli(
            "replay", "--trace", SLICE, "--url", fake.url, "--block-tokens", "1", "-f", "json"
        )  # the slice's own clock: minutes long
    finally:
        timer.cancel()
    assert code == 130, err
    doc = json.loads(out)
    assert doc["run"]["stop"] == "interrupted" and doc["run"]["unsent"] > 0
    assert doc["measured"]["requests"]["completed"] >= 1
