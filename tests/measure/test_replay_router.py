"""replay --url ROUTER: sglang-router in front of N servers is driven as one cluster. Its
workers' limits and counters are read behind it, and its hit rates are set beside plan/cluster.py's
prediction for N instances and the routing given. Stand-in servers (tests/measure/fakesglang.py)
behind the real sglang-router where it is installed, behind a stand-in of its /workers
list where it is not."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.measure.fakesglang import FakeSGLang, write_model
from xputune.measure.client import Endpoint, ServerError
from xputune.measure.predict import predict_cluster
from xputune.measure.router import read_target, workers
from xputune.measure.tiercounters import from_mapping
from xputune.measure.workload import build_workload

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces"
SLICE = str(TRACE / "mooncake-conversation-1171-1570.jsonl")


@pytest.fixture
def two(tmp_path) -> Iterator[list[FakeSGLang]]:
    model = write_model(str(tmp_path / "m"))
    with (
        FakeSGLang(model_path=model, device_tokens=1024, decode_ms=0.1) as a,
        FakeSGLang(model_path=model, device_tokens=2048, decode_ms=0.1) as b,
    ):
        yield [a, b]


class _Lister(BaseHTTPRequestHandler):
    """Only a router's /workers (and a 404 for /server_info, as sglang-router answers)."""

    def do_GET(self) -> None:
        if self.path == "/workers":
            body = json.dumps({"workers": [{"url": u} for u in self.server.urls]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_error(404)

    def log_message(self, *_args: object) -> None:
        pass


def _lister(urls: list[str]) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Lister)
    server.urls = urls  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_the_workers_behind_a_router_are_read_and_the_smallest_limits_kept(two) -> None:
    server, url = _lister([s.url for s in two])
    try:
        assert workers(Endpoint.parse(url)) == tuple(Endpoint.parse(s.url) for s in two)
        target = read_target(Endpoint.parse(url))
        assert target.instances == 2 and target.info.device_tokens == 1024
        assert read_target(Endpoint.parse(two[0].url)).workers == ()  # a server is one
    finally:
        server.shutdown()


def test_neither_a_server_nor_a_router_is_one_line() -> None:
    server, url = _lister([])  # answers /workers with an empty list, /server_info 404
    try:
        with pytest.raises(ServerError, match="does not look like an SGLang server"):
            read_target(Endpoint.parse(url))
    finally:
        server.shutdown()


def test_counters_of_the_workers_add_up() -> None:
    a = from_mapping({"host_written": 3, "device": 10, "host": 2})
    b = from_mapping({"host_written": 4, "device": 1, "storage": 5})
    both = a.plus(b)
    assert both.host_written == 7
    assert from_mapping({"requests": 3}).plus(from_mapping({"requests": 4})).requests == 7
    assert (both.served_by("device"), both.served_by("host"), both.served_by("storage")) == (
        11, 2, 5,
    )  # fmt: skip


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(120)
def test_a_replay_through_the_real_router_is_measured_beside_the_cluster_prediction(
    run_cli, two
) -> None:
    pytest.importorskip("sglang_router", reason="sglang-router is not installed here")
    port = _port()
    router = subprocess.Popen(
        [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls",
         *(s.url for s in two), "--policy", "round_robin", "--host", "127.0.0.1", "--port",
         str(port), "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                listed = json.loads(urllib.request.urlopen(url + "/workers", timeout=2).read())
                if all(w["is_healthy"] for w in listed["workers"]) and len(listed["workers"]) == 2:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and router.poll() is None
            time.sleep(0.3)
        code, out, err = run_cli(
            "replay", "--trace", SLICE, "--url", url, "--block-tokens", "1", "-n", "60",
            "-c", "1", "--max-output", "1", "--routing", "round_robin", "-f", "json",
        )  # fmt: skip
        assert code in (0, 1), err
        doc = json.loads(out)
        cluster = doc["cluster"]
        assert (cluster["instances"], cluster["routing"]) == (2, "round_robin")
        assert sorted(cluster["workers"]) == sorted(s.url for s in two)  # in the router's order
        assert doc["valid"] and doc["server"]["device_tokens"] == 1024
        assert two[0].requests == two[1].requests == 30  # round robin, one at a time
        # the stand-ins publish no counters: the spread is the model's alone
        assert cluster["requests_per_worker"] == {"measured": None, "predicted": [30, 30]}
        from xputune.cli.measure_cmds import _read_trace  # the same requests, rebuilt
        from xputune.cli.options import TraceFormat

        target = read_target(Endpoint.parse(url))
        sliced = _read_trace(SLICE, TraceFormat.auto, None, 0, 60)
        workload = build_workload(sliced, block_tokens=1, max_output=1,
                                  max_req_input_len=target.info.max_req_input_len)  # fmt: skip
        expected = predict_cluster(workload.trace(), target.info, 2, "round_robin")
        assert doc["predicted"]["hit_rate"] == expected.rates()
    finally:
        router.terminate()
        router.wait(timeout=30)
