"""One streamed /generate, timed, over a kept-alive http.client connection.

Each worker thread owns one Client (one connection, reused request after request, opened again
only when the server closed it). A request's clock starts just before its bytes are written;
TTFT is stamped when the first SSE line carrying a token arrives, before that line is parsed;
the end-to-end latency when "[DONE]" arrives. Only the first token's chunk and the last chunk
are parsed (SGLang's chunks repeat every output id so far: parsing each would cost the client
O(n^2) per request and, with many streams at once, hold the GIL other threads wait for).

The client's own cost inside the TTFT window is measured per request as the CPU time of its
thread in that window (time.thread_time): request formatting, the send, reading the first
line. bench_replay.py measures the whole client against a bare http.client loop.

Every read is bounded: a response line at most LINE_MAX bytes, an error body ERROR_MAX, a JSON
document DOC_MAX. Text a server sends is shown through printable() and cut short.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from xputune.errors import XputuneError
from xputune.userfiles import printable

LINE_MAX = 16 << 20  # one SSE line (a chunk repeats all output ids: 1M ids is about 8 MB)
ERROR_MAX = 64 << 10  # an error response body
DOC_MAX = 64 << 20  # a JSON document such as /server_info (about 20 KB on 0.5.20)
DRAIN_MAX = 1 << 20  # what may follow "[DONE]" before the connection is given up


class ServerError(XputuneError):
    """The server cannot be reached or is not one a replay can drive."""


@dataclass(frozen=True)
class Endpoint:
    """Where the server listens: http(s)://host:port[/prefix]."""

    scheme: str
    host: str
    port: int
    prefix: str = ""

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        text = url.strip()
        if "://" not in text:
            text = "http://" + text
        try:
            parts = urlsplit(text)
            port = parts.port
        except ValueError as exc:
            raise XputuneError(f"--url {printable(url)!r}: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise XputuneError(
                f"--url {printable(url)!r}: give http://HOST:PORT (the server's address)"
            )
        if parts.query or parts.fragment:
            raise XputuneError(f"--url {printable(url)!r}: no query or fragment, only the base")
        default = 443 if parts.scheme == "https" else 80
        return cls(parts.scheme, parts.hostname, port or default, parts.path.rstrip("/"))

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)


def _why(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return printable(str(exc) or type(exc).__name__)[:200]


def get_json(endpoint: Endpoint, path: str, timeout: float = 10.0) -> Any:
    """GET a JSON document; ServerError (one line) when unreachable, not 200 or not JSON."""
    conn = endpoint.connect(timeout)
    where = f"{endpoint.url}{path}"
    try:
        conn.request("GET", endpoint.prefix + path, headers={"Accept": "application/json"})
        resp = conn.getresponse()
        body = resp.read(DOC_MAX + 1)
    except (OSError, http.client.HTTPException) as exc:
        raise ServerError(f"cannot reach {where}: {_why(exc)}") from None
    finally:
        conn.close()
    if resp.status != 200:
        raise ServerError(f"GET {where}: HTTP {resp.status} {printable(resp.reason)[:80]}")
    if len(body) > DOC_MAX:
        raise ServerError(f"GET {where}: more than {DOC_MAX >> 20} MiB: not a server's answer")
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise ServerError(f"GET {where}: the answer is not JSON") from None


@dataclass
class Outcome:
    """One request as measured. Times are seconds; `start` is on time.perf_counter's clock."""

    start: float
    ttft: float | None = None
    e2e: float | None = None
    prompt_tokens: int | None = None  # as the server counted them
    output_tokens: int = 0
    cached: int = 0
    device: int = 0
    host: int = 0
    storage: int = 0
    overhead: float = 0.0  # client CPU time inside the TTFT window
    error: str | None = None


def _error_message(body: bytes) -> str:
    try:
        doc = json.loads(body)
        message = doc.get("error", {}).get("message") or doc.get("message") or doc
    except (ValueError, AttributeError, RecursionError):
        message = body.decode("utf-8", "replace")
    return printable(" ".join(str(message).split()))[:200]


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _apply_meta(out: Outcome, meta: Any) -> None:
    """Counts from the last chunk's meta_info: tokens, and cached tokens per tier."""
    if not isinstance(meta, dict):
        return
    out.prompt_tokens = _int(meta.get("prompt_tokens")) or None
    out.output_tokens = _int(meta.get("completion_tokens"))
    out.cached = _int(meta.get("cached_tokens"))
    details = meta.get("cached_tokens_details")
    if isinstance(details, dict):
        out.device = _int(details.get("device"))
        out.host = _int(details.get("host"))
        out.storage = _int(details.get("storage"))
    else:  # no HiCache (or nothing cached): what is cached is on the device
        out.device = out.cached
    finish = meta.get("finish_reason")
    if isinstance(finish, dict) and finish.get("type") == "abort":
        out.error = "aborted by the server: " + printable(str(finish.get("message", "")))[:200]


def _has_token(chunk: Any) -> bool:
    return isinstance(chunk, dict) and bool(chunk.get("output_ids") or chunk.get("text"))


class Client:
    """One kept-alive connection to the server's /generate."""

    def __init__(self, endpoint: Endpoint, timeout: float = 600.0) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.path = endpoint.prefix + "/generate"
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def generate(self, body: bytes) -> Outcome:
        """Send one streamed /generate (the body asks for "stream": true) and time it."""
        if self._conn is None:
            self._conn = self.endpoint.connect(self.timeout)
        conn = self._conn
        cpu0 = time.thread_time()
        out = Outcome(start=time.perf_counter())
        try:
            conn.request("POST", self.path, body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                out.error = f"HTTP {resp.status}: {_error_message(resp.read(ERROR_MAX))}"
                self._drain(resp)
                return out
            self._stream(resp, out, cpu0)
        except (OSError, http.client.HTTPException, ValueError, RecursionError) as exc:
            out.error = f"{type(exc).__name__}: {_why(exc)}"
            self.close()
        return out

    def _stream(self, resp: http.client.HTTPResponse, out: Outcome, cpu0: float) -> None:
        last: bytes | None = None
        done = False
        while True:
            line = resp.readline(LINE_MAX + 1)
            if not line:
                break
            if len(line) > LINE_MAX:
                raise ValueError(f"a response line longer than {LINE_MAX >> 20} MiB")
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            if out.ttft is None:
                stamp = time.perf_counter()
                chunk = json.loads(payload)
                if _has_token(chunk):
                    out.ttft = stamp - out.start
                    out.overhead = time.thread_time() - cpu0
            last = payload
        out.e2e = time.perf_counter() - out.start
        if last is not None:
            chunk = json.loads(last)
            if isinstance(chunk, dict) and "error" in chunk and "meta_info" not in chunk:
                out.error = "server error: " + _error_message(last)
            else:
                _apply_meta(out, chunk.get("meta_info") if isinstance(chunk, dict) else None)
        if not done and out.error is None:
            out.error = "the stream ended before [DONE]"
        if out.ttft is None and out.error is None:
            out.error = "no token came back"
        if done:
            self._drain(resp)
        else:
            self.close()

    def _drain(self, resp: http.client.HTTPResponse) -> None:
        """Read what is left of a response so the connection can carry the next one."""
        left = DRAIN_MAX
        while left > 0:
            data = resp.read(min(left, 65536))
            if not data:
                return
            left -= len(data)
        self.close()
