"""Hostile servers for the deadline tests: they speak enough of SGLang's HTTP to be taken for
it, then hold a client as a broken or malicious server would. Test scaffold only.

Modes (HostileServer(mode) in-process, or `python -m tests.measure.hostile --port N` with
HOSTILE_SGLANG_MODE=mode, which is what tests/measure/hostile_site's sglang.launch_server runs):

  forever        /server_info answers; each /generate streams one token chunk every 50 ms
                 and never sends [DONE]
  trickle        /server_info answers; each /generate answer (status line, headers, chunks)
                 comes one byte per second
  info_trickle   /server_info comes one byte per second (a whole, valid answer, in minutes)
  info_doc       /server_info answers the bytes in HostileServer.doc (absurd numbers)
  exit           (as a process) exits with status 3 at once, before it listens

Every loop ends when the client goes, or when the server is stopped (in-process: stop();
as a process: SIGTERM, Python's default: it dies at once).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def server_info(vocab_model: str | None = None) -> dict[str, Any]:
    """An answer as SGLang 0.5.20 gives it, small: HiCache on, 1,024 tokens of L1."""
    return {
        "version": "0.5.20",
        "model_path": vocab_model,
        "tp_size": 1,
        "page_size": 1,
        "max_total_num_tokens": 1024,
        "max_req_input_len": 1018,
        "chunked_prefill_size": -1,
        "disable_radix_cache": False,
        "enable_hierarchical_cache": True,
        "hicache_ratio": 2.0,
        "hicache_size": 0,
        "hicache_write_policy": "write_through",
        "hicache_storage_backend": None,
    }


def _json_response(doc: bytes) -> bytes:
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(doc)}\r\n\r\n"
    )
    return head.encode() + doc


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
_TOKEN = b'data: {"text": "x", "output_ids": [7], "meta_info": {"prompt_tokens": 5}}\n\n'


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        return

    @property
    def hostile(self) -> HostileServer:
        return self.server.hostile  # type: ignore[attr-defined]

    def _trickle(self, data: bytes) -> None:
        """One byte a second, until done, the client gone or the server stopped."""
        for i in range(len(data)):
            if self.hostile.stopping.is_set():
                return
            self.wfile.write(data[i : i + 1])
            self.wfile.flush()
            self.hostile.stopping.wait(1.0)

    def do_GET(self) -> None:
        h = self.hostile
        try:
            if self.path != "/server_info":
                self.wfile.write(_json_response(b"{}"))
            elif h.mode == "info_trickle":
                self._trickle(_json_response(json.dumps(server_info()).encode()))
            elif h.mode == "info_doc":
                self.wfile.write(_json_response(h.doc))
            else:
                self.wfile.write(_json_response(json.dumps(server_info()).encode()))
        except OSError:  # the client went
            return

    def do_POST(self) -> None:
        h = self.hostile
        h.requests += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            if h.mode == "trickle":
                self._trickle(_STREAM_HEAD + _chunk(_TOKEN) + _chunk(b"data: [DONE]\n\n"))
                return
            self.wfile.write(_STREAM_HEAD)
            while not h.stopping.wait(0.05):  # forever: a token, never [DONE]
                self.wfile.write(_chunk(_TOKEN))
                self.wfile.flush()
        except OSError:
            return


class HostileServer:
    """A hostile server on 127.0.0.1 in this process (a thread per connection)."""

    def __init__(self, mode: str, doc: bytes = b"{}", port: int = 0) -> None:
        self.mode, self.doc = mode, doc
        self.requests = 0  # /generate requests
        self.stopping = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self.server.daemon_threads = True
        self.server.hostile = self  # type: ignore[attr-defined]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> HostileServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> HostileServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str]) -> None:
    """`python -m sglang.launch_server ARGS` for the sweep's hostile cases."""
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    args, _ = p.parse_known_args(argv)
    mode = os.environ.get("HOSTILE_SGLANG_MODE", "info_trickle")
    if mode == "exit":
        print("RuntimeError: the hostile server gives up at once", file=sys.stderr)
        sys.exit(3)
    server = HostileServer(mode, port=args.port)
    server.server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
