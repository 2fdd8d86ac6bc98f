"""The HTTP side: the server's address, /server_info read as SGLang's, one streamed /generate
timed, and every way a server can answer badly turned into one line (no traceback)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.measure.fakesglang import FakeSGLang, write_model
from xputune.errors import XputuneError
from xputune.measure.client import Client, Endpoint, ServerError, get_json
from xputune.measure.server import host_pool_tokens, parse_server_info, read_server, token_range
from xputune.measure.workload import encode_body


@pytest.fixture
def fake(tmp_path) -> Iterator[FakeSGLang]:
    with FakeSGLang(model_path=write_model(str(tmp_path / "m")), device_tokens=256) as server:
        yield server


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("127.0.0.1:31000", "http://127.0.0.1:31000"),
        ("http://localhost:8000/", "http://localhost:8000"),
        ("https://gw.example/sglang", "https://gw.example:443/sglang"),
        ("http://[::1]:9", "http://[::1]:9"),
    ],
)
def test_an_address_is_read_as_given(url: str, want: str) -> None:
    assert Endpoint.parse(url).url == want


@pytest.mark.parametrize("url", ["ftp://x:1", "http://:80", "http://h:99999", "http://h/?a=1"])
def test_a_bad_address_is_one_line(url: str) -> None:
    with pytest.raises(XputuneError) as err:
        Endpoint.parse(url)
    assert "\n" not in str(err.value) and "--url" in str(err.value)


def test_server_info_gives_the_capacities(fake: FakeSGLang) -> None:
    info = read_server(Endpoint.parse(fake.url))
    assert info.version == "0.5.20" and info.device_tokens == 256
    assert info.host_tokens == 513 and info.host_source == "ratio"  # 2 x 256, a page past
    assert info.vocab_size == 512 and info.hicache and info.write_policy == "write_through"
    vocab = token_range(info, None)
    assert (vocab.lo, vocab.hi) == (10, 512)


def test_the_host_pool_is_sized_as_sglang_sizes_it() -> None:
    assert host_pool_tokens(1024, 1, 2.0, 0, None) == 2049  # measured on a 0.5.20 server
    assert host_pool_tokens(1000, 64, 1.5, 0, None) == 1536
    assert host_pool_tokens(1000, 1, None, 1, 1000) == 1_000_001
    assert host_pool_tokens(1000, 1, None, 1, None) is None


def test_a_hicache_size_is_priced_with_the_model_config(tmp_path) -> None:
    doc = FakeSGLang(model_path=write_model(str(tmp_path / "m")), size_gb=1).server_info()
    doc["hicache_ratio"] = None
    info = parse_server_info(doc, "u")
    # llama config: 2 layers x K+V x 2 KV heads x 16 dims x 2 bytes = 256 bytes per token
    assert info.host_source == "size" and info.host_tokens == 1_000_000_000 // 256 + 1
    doc["model_path"] = str(tmp_path / "elsewhere")
    unknown = parse_server_info(doc, "u")
    assert unknown.host_tokens is None and unknown.host_source == "unknown"
    assert any("--host-tokens" in n for n in unknown.notes)
    assert parse_server_info(doc, "u", host_tokens=77).host_tokens == 77
    with pytest.raises(XputuneError, match="--token-range"):
        token_range(unknown, None)


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"status": "ok"}, "has no version"),
        ({"version": "1", "max_total_num_tokens": 0}, "max_total_num_tokens"),
        ([1, 2], "has no version"),
    ],
)
def test_a_server_that_is_not_sglang_is_one_line(doc, says: str) -> None:
    with pytest.raises(ServerError, match=says):
        parse_server_info(doc, "http://x:1")


def test_a_token_range_past_the_vocabulary_is_refused(fake: FakeSGLang) -> None:
    info = read_server(Endpoint.parse(fake.url))
    with pytest.raises(XputuneError, match="vocabulary of 512"):
        token_range(info, (10, 600))
    assert token_range(info, (3, 100)).span == 97


def test_a_streamed_generate_is_timed_and_counted(fake: FakeSGLang) -> None:
    client = Client(Endpoint.parse(fake.url))
    prompt = list(range(20, 120))
    first = client.generate(encode_body(prompt, 3))
    again = client.generate(encode_body([*prompt, 7, 8], 2))
    assert first.error is None and again.error is None
    assert first.ttft is not None and first.e2e is not None and 0 < first.ttft <= first.e2e
    assert (first.output_tokens, first.prompt_tokens, first.cached) == (3, 100, 0)
    assert (again.device, again.host, again.cached) == (100, 0, 100)
    assert 0 <= again.overhead < again.e2e
    conn = client._conn
    assert conn is not None and client.generate(encode_body([30, 31], 1)).error is None
    assert client._conn is conn  # kept alive


def test_refusals_are_recorded_not_raised(fake: FakeSGLang) -> None:
    client = Client(Endpoint.parse(fake.url))
    long = client.generate(encode_body(list(range(10, 300)), 1))  # over max_req_input_len
    assert long.error is not None and long.error.startswith("aborted by the server: Input len")
    empty = client.generate(encode_body([], 1))
    assert empty.error == "HTTP 400: input_ids cannot be empty."
    assert client.generate(encode_body([40, 41], 1)).error is None  # the connection goes on


class _Hostile(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    mode = "garbage"

    def log_message(self, *a) -> None:
        return

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.mode == "html":
            self._send(200, b"<html>hello</html>", "text/html")
        elif self.mode == "404":
            self._send(404, b"no")
        else:
            self._send(200, json.dumps({"version": "0.5.20", "max_total_num_tokens": 64}).encode())

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.mode == "garbage":
            self._send(200, b"data: {not json\n\n", "text/event-stream")
        elif self.mode == "cut":
            self._send(200, b'data: {"output_ids": [1], "meta_info": {}}\n\n', "text/event-stream")
        elif self.mode == "error":
            self._send(200, b'data: {"error": {"message": "boom \\u001b[31m"}}\n\ndata: [DONE]\n\n')
        else:
            self._send(500, b"x" * 100_000)


@pytest.fixture
def hostile() -> Iterator[tuple[str, type[_Hostile]]]:
    handler = type("H", (_Hostile,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("garbage", "JSONDecodeError"),
        ("cut", "the stream ended before [DONE]"),
        ("error", "server error: boom \\x1b[31m"),
        ("500", "HTTP 500: xxxx"),
    ],
)
def test_a_bad_answer_is_an_error_of_that_request(hostile, mode: str, says: str) -> None:
    url, handler = hostile
    handler.mode = mode
    out = Client(Endpoint.parse(url)).generate(encode_body([1, 2], 1))
    assert out.error is not None and says in out.error and len(out.error) < 300


@pytest.mark.parametrize(("mode", "says"), [("html", "is not JSON"), ("404", "HTTP 404")])
def test_server_info_that_is_not_json_is_one_line(hostile, mode: str, says: str) -> None:
    url, handler = hostile
    handler.mode = mode
    with pytest.raises(ServerError, match=says):
        get_json(Endpoint.parse(url), "/server_info")


def test_an_unreachable_server_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(ServerError, match=f"cannot reach http://127.0.0.1:{port}/server_info"):
            read_server(Endpoint.parse(f"127.0.0.1:{port}"))


def test_a_server_without_server_info_is_not_sglang(hostile) -> None:
    url, handler = hostile
    handler.mode = "404"
    with pytest.raises(ServerError, match=r"does not look like an SGLang server \(GET .*HTTP 404"):
        read_server(Endpoint.parse(url))


@pytest.mark.parametrize("url", ["x" * 10240, "http://a..b:1", "http://" + "y" * 64 + ".io"])
def test_a_host_name_no_connection_could_send_is_one_short_line(url: str) -> None:
    """Found by the argument fuzz: a 10,240-character --url reached the connection, whose
    IDNA encoding raised UnicodeError ("label too long") out of main()."""
    with pytest.raises(XputuneError, match="not a host name") as refused:
        Endpoint.parse(url)
    assert len(str(refused.value)) < 200
