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

Every read is bounded in size: a response line at most LINE_MAX bytes, an error body
ERROR_MAX, a JSON document DOC_MAX. Text a server sends is shown through printable() and cut
short.

Every exchange is bounded in time by one deadline, set when it starts: a /generate by the
client's `timeout` (--timeout), a GET by its own. A socket's timeout alone bounds each recv,
not the whole: a stream that never ends, or a server that trickles one byte a second, would
reset it with every byte and hold the request forever. So each read of a response goes
through _DeadlineIO, which gives the socket only the time left before the deadline, and once
it has passed raises TimeoutError; the send (sendall: one total timeout since Python 3.5) and
the connect get the time left too. What a request past its deadline had is recorded as its
error ("no complete answer within N s"), never as a measurement. Not bounded: the name lookup
of a --url given as a host name (getaddrinfo has no timeout; replay's own end bounds the
run) and a TLS handshake that trickles (each of its reads has the time left at the connect).

Counts a server reports (meta_info's prompt_tokens, completion_tokens, cached_tokens and the
per-tier details) are whole numbers 0..COUNT_MAX; anything else (a float, a boolean, a
negative count, a 4,000-digit integer) makes that request's error, never a number averaged in.
"""

from __future__ import annotations

import http.client
import io
import json
import math
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
#: a token count a server may report, at most (--host-tokens has the same cap): 2^50 tokens
#: is a thousand times any pool there is; past it a number is garbage, not a count.
COUNT_MAX = 1 << 50


class ServerError(XputuneError):
    """The server cannot be reached or is not one a replay can drive."""

    status: int | None = None  # the HTTP status, when the server answered with another than 200


class ServerTimeout(ServerError):
    """The server was reached but did not answer in full before the deadline."""


class _DeadlineIO(io.RawIOBase):
    """A socket's reading side (its makefile's raw SocketIO) whose every read ends by one
    deadline (time.monotonic): the socket gets only the time left, none once it passed."""

    def __init__(self, raw: Any, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._raw, self._sock, self._deadline = raw, sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the deadline passed")
        self._sock.settimeout(left)
        return self._raw.readinto(b)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()  # gives back the makefile's hold on the socket
        super().close()


class _Response(http.client.HTTPResponse):
    """http.client's response, read through _DeadlineIO."""

    def __init__(self, sock: socket.socket, deadline: float, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        if math.isfinite(deadline):  # the base's makefile(), its raw SocketIO read by deadline
            self.fp = io.BufferedReader(_DeadlineIO(self.fp.detach(), sock, deadline))


class _Deadlined:
    """A connection whose responses are read by `deadline`; arm() sets it per exchange."""

    deadline: float = math.inf
    timeout: float | None
    sock: socket.socket | None

    def response_class(self, sock: socket.socket, *args: Any, **kwargs: Any) -> _Response:
        return _Response(sock, self.deadline, *args, **kwargs)

    def arm(self, deadline: float) -> None:
        """From now on every step of this connection ends by `deadline`."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the deadline passed")
        self.deadline = deadline
        self.timeout = left  # the connect, when there is none yet
        if self.sock is not None:
            self.sock.settimeout(left)  # the send: one total timeout for sendall


class _HTTP(_Deadlined, http.client.HTTPConnection):
    pass


class _HTTPS(_Deadlined, http.client.HTTPSConnection):
    pass


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
        shown = repr(printable(url if len(url) <= 100 else f"{url[:60]}... ({len(url):,} chars)"))
        if "://" not in text:
            text = "http://" + text
        try:
            parts = urlsplit(text)
            port = parts.port
        except ValueError as exc:
            raise XputuneError(f"--url {shown}: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise XputuneError(f"--url {shown}: give http://HOST:PORT (the server's address)")
        if parts.query or parts.fragment:
            raise XputuneError(f"--url {shown}: no query or fragment, only the base")
        if ":" not in parts.hostname:  # a name (an IPv6 literal is checked by urlsplit)
            try:
                parts.hostname.encode("idna")  # what the connection will send
            except UnicodeError:
                raise XputuneError(
                    f"--url {shown}: not a host name (each dot-separated part 1 to 63 characters)"
                ) from None
        default = 443 if parts.scheme == "https" else 80
        return cls(parts.scheme, parts.hostname, port or default, parts.path.rstrip("/"))

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        """A plain http.client connection (each recv bounded by `timeout`, the whole not)."""
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def _timed(self) -> _HTTP:
        """A connection whose exchanges each end by the deadline given to its arm()."""
        cls = _HTTPS if self.scheme == "https" else _HTTP
        return cls(self.host, self.port)


def _why(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return printable(str(exc) or type(exc).__name__)[:200]


def get_json(endpoint: Endpoint, path: str, timeout: float = 10.0) -> Any:
    """GET a JSON document, all of it within `timeout` seconds; ServerError (one line) when
    unreachable, not 200, not JSON or too large, ServerTimeout when not all there in time."""
    where = f"{endpoint.url}{path}"
    body = get_body(endpoint, path, timeout, DOC_MAX, "application/json")
    try:
        return json.loads(body)
    except RecursionError:
        raise ServerError(f"GET {where}: the answer is not JSON (nested too deeply)") from None
    except ValueError as exc:
        why = "an integer of thousands of digits" if "integer string" in str(exc) else "not JSON"
        raise ServerError(f"GET {where}: the answer is not JSON xputune reads ({why})") from None


def get_body(endpoint: Endpoint, path: str, timeout: float, limit: int, accept: str) -> bytes:
    """GET `path`, all of it within `timeout` seconds and `limit` bytes; ServerError (one
    line, with the HTTP status in `status`) when unreachable, not 200 or too large,
    ServerTimeout when not all there in time."""
    return _exchange(endpoint, "GET", path, timeout, limit, accept)


def post_body(endpoint: Endpoint, path: str, timeout: float, limit: int = ERROR_MAX) -> bytes:
    """POST `path` with no body (an admin endpoint such as /hicache/storage-backend/clear),
    the answer read whole within `timeout` seconds and `limit` bytes; the same errors as
    get_body, the HTTP status in `status` and the server's words in the message."""
    return _exchange(endpoint, "POST", path, timeout, limit, "*/*")


def _exchange(endpoint: Endpoint, method: str, path: str, timeout: float, limit: int,
              accept: str) -> bytes:  # fmt: skip
    deadline = time.monotonic() + timeout
    conn = endpoint._timed()
    where = f"{endpoint.url}{path}"
    try:
        conn.arm(deadline)
        headers = {"Accept": accept}
        if method == "POST":
            headers["Content-Length"] = "0"
        conn.request(method, endpoint.prefix + path, headers=headers)
        resp = conn.getresponse()
        body = resp.read(limit + 1)
    except TimeoutError:
        if conn.sock is None:  # not connected yet
            raise ServerError(f"cannot reach {where}: timed out") from None
        raise ServerTimeout(
            f"{method} {where}: no complete answer within {timeout:g} s (a server that hangs "
            "or trickles)"
        ) from None
    except (OSError, http.client.HTTPException) as exc:
        raise ServerError(f"cannot reach {where}: {_why(exc)}") from None
    finally:
        conn.close()
    if resp.status != 200:
        said = f": {_error_message(body[:limit])}" if method == "POST" and body.strip() else ""
        error = ServerError(
            f"{method} {where}: HTTP {resp.status} {printable(resp.reason)[:80]}{said}"
        )
        error.status = resp.status
        raise error
    if len(body) > limit:
        size = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit >> 10} KiB"
        raise ServerError(f"{method} {where}: more than {size}: not a server's answer")
    return body


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


class _Unusable(ValueError):
    """A count in meta_info that is no count."""


def shown(value: Any) -> str:
    """A value from a server as a message quotes it: short, printable, and a number never
    through the int-to-str conversion that Python refuses past 4,300 digits."""
    from xputune.plan.traces import shown as number

    if isinstance(value, int | float) and not isinstance(value, bool):
        return number(value)
    return printable(repr(value))[:60]


def _int(meta: dict[str, Any], key: str) -> int:
    """A count of meta_info: 0 when absent or null, else a whole number 0..COUNT_MAX."""
    value = meta.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= COUNT_MAX:
        raise _Unusable(f"{key} = {shown(value)}")
    return value


def _apply_meta(out: Outcome, meta: Any) -> None:
    """Counts from the last chunk's meta_info: tokens, and cached tokens per tier."""
    if not isinstance(meta, dict):
        return
    try:
        out.prompt_tokens = _int(meta, "prompt_tokens") or None
        out.output_tokens = _int(meta, "completion_tokens")
        out.cached = _int(meta, "cached_tokens")
        details = meta.get("cached_tokens_details")
        if isinstance(details, dict):
            out.device = _int(details, "device")
            out.host = _int(details, "host")
            out.storage = _int(details, "storage")
        else:  # no HiCache (or nothing cached): what is cached is on the device
            out.device = out.cached
    except _Unusable as exc:
        out.prompt_tokens, out.output_tokens = None, 0
        out.cached = out.device = out.host = out.storage = 0
        out.error = f"the server reported a count that is no count: {exc}"
        return
    finish = meta.get("finish_reason")
    if isinstance(finish, dict) and finish.get("type") == "abort":
        out.error = "aborted by the server: " + printable(str(finish.get("message", "")))[:200]


def _has_token(chunk: Any) -> bool:
    return isinstance(chunk, dict) and bool(chunk.get("output_ids") or chunk.get("text"))


class Client:
    """One kept-alive connection to the server's /generate."""

    def __init__(self, endpoint: Endpoint, timeout: float = 600.0) -> None:
        self.endpoint = endpoint
        self.timeout = timeout  # one request, all told: from its send to its last byte
        self.path = endpoint.prefix + "/generate"
        self._conn: _HTTP | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def generate(self, body: bytes) -> Outcome:
        """Send one streamed /generate (the body asks for "stream": true) and time it; it
        ends by `timeout` seconds after it starts, whatever the server does."""
        if self._conn is None:
            self._conn = self.endpoint._timed()
        conn = self._conn
        cpu0 = time.thread_time()
        out = Outcome(start=time.perf_counter())
        try:
            conn.arm(time.monotonic() + self.timeout)
            conn.request("POST", self.path, body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                out.error = f"HTTP {resp.status}: {_error_message(self._body(resp))}"
                self._drain(resp)
                return out
            self._stream(resp, out, cpu0)
        except TimeoutError:  # the first token may have come: the request did not complete
            out.error = f"no complete answer within {self.timeout:g} s (--timeout)"
            self.close()
        except (OSError, http.client.HTTPException, ValueError, RecursionError) as exc:
            out.error = f"{type(exc).__name__}: {_why(exc)}"
            self.close()
        return out

    def _body(self, resp: http.client.HTTPResponse) -> bytes:
        """An error response's body, what of it comes before the deadline."""
        try:
            return resp.read(ERROR_MAX)
        except (OSError, http.client.HTTPException):
            self.close()
            return b""

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
        """Read what is left of a response so the connection can carry the next one; a
        connection whose rest does not come (by the deadline) is closed instead."""
        if self._conn is None:
            return
        left = DRAIN_MAX
        try:
            while left > 0:
                data = resp.read(min(left, 65536))
                if not data:
                    return
                left -= len(data)
        except (OSError, http.client.HTTPException):
            pass
        self.close()
