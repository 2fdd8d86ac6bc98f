"""A stand-in SGLang server for the replay and sweep tests: SGLang 0.5.20's HTTP protocol, a
toy two-tier prefix cache, and a latency model; no model, no torch. Test scaffold only.

Protocol (as measured on a real 0.5.20 server): GET /server_info (the resolved server args,
max_total_num_tokens, max_req_input_len, version), GET /health, POST /generate with
input_ids; "stream": true answers `data: {...}` SSE lines over chunked HTTP/1.1 (output_ids
so far, meta_info with prompt_tokens, completion_tokens, cached_tokens and, when something
was cached, cached_tokens_details {"device", "host"}, "storage" too with an L3), then
`data: [DONE]`. A prompt at or over max_req_input_len is one aborted chunk (HTTP 200) when
streamed, HTTP 400 otherwise; an empty one 400.

Cache: token-level prefix LRU. L1 holds `device_tokens` tokens, L2 (with HiCache) host
tokens as SGLang sizes them (ratio x L1, or --hicache-size GB / bytes per token), written
through; a hit never covers the prompt's last token. With --hicache-storage-backend an
unbounded L3 behind them, written through too and kept in a file, so it outlives the server
as SGLang's stores do: `file` in $SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR (SGLang's
default /tmp/hicache), any other backend in the file FAKE_SGLANG_POOL names (a pool shared
by every server given it; in memory without it); POST /hicache/storage-backend/clear empties
it. FAKE_SGLANG_L3_DROP makes a store that takes every write and keeps none (a dead L3 tier),
FAKE_SGLANG_CLEAR_FAIL one whose clear fails (HTTP 400, as SGLang answers a failed clear).

Latency: base + per uncached token + per token loaded from L2 or L3, then one decode step per
output token.

Run as a module it is `sglang.launch_server` (tests/measure/fake_site/sglang puts it there):
SGLang's flags are read, unknown ones ignored; SIGTERM stops it after FAKE_SGLANG_STOP_DELAY.
FAKE_SGLANG_FAIL makes it die at start, FAKE_SGLANG_START_DELAY start late, FAKE_SGLANG_ARGV
names a file where each start appends its argv, switches and pid; FAKE_SGLANG_BASE_MS,
_PREFILL_US, _HOST_US and _DECODE_MS set the latency model. POST /flush_cache empties it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL_CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "vocab_size": 512,
    "torch_dtype": "bfloat16",
}


def write_model(folder: str) -> str:
    """A model folder holding only the config.json the launcher and the replay read."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as fh:
        json.dump(MODEL_CONFIG, fh)
    return folder


class Store:
    """The L3 tier: a set of prefix keys, kept in a file (one key a line) when given one."""

    def __init__(self, path: str | None, drop: bool = False) -> None:
        self.path = path
        self.drop = drop
        self.keys: set[int] = set()
        if path and os.path.exists(path):
            with open(path) as fh:
                self.keys = {int(line) for line in fh if line.strip()}

    def add(self, keys: list[int]) -> None:
        if self.drop:
            return
        new = [k for k in keys if k not in self.keys]
        self.keys.update(new)
        if self.path and new:
            with open(self.path, "a") as fh:
                fh.write("".join(f"{k}\n" for k in new))

    def clear(self) -> None:
        self.keys.clear()
        if self.path:
            with open(self.path, "w"):
                pass


class Cache:
    """L1 and L2 as ordered dicts of prefix keys (one key per token), least recent first; L3
    (a Store) behind them when there is one."""

    def __init__(self, device: int, host: int, store: Store | None = None) -> None:
        self.device_cap, self.host_cap = device, host
        self.device: OrderedDict[int, None] = OrderedDict()
        self.host: OrderedDict[int, None] = OrderedDict()
        self.store = store
        self.lock = threading.Lock()

    @staticmethod
    def keys(ids: list[int]) -> list[int]:
        out, h = [], 0
        for t in ids:
            h = hash((h, t))
            out.append(h)
        return out

    def lookup(self, keys: list[int]) -> tuple[int, int, int]:
        """Tokens served from (L1, L2, L3)."""
        with self.lock:
            d = 0
            while d < len(keys) and keys[d] in self.device:
                d += 1
            h = d
            while h < len(keys) and keys[h] in self.host:
                h += 1
            s = h
            while self.store is not None and s < len(keys) and keys[s] in self.store.keys:
                s += 1
        limit = max(0, len(keys) - 1)
        host = max(0, min(h, limit) - d)
        storage = max(0, min(s, limit) - max(h, d))
        return min(d, limit), host, storage

    def insert(self, keys: list[int]) -> None:
        with self.lock:
            for tier, cap in ((self.device, self.device_cap), (self.host, self.host_cap)):
                if cap <= 0:
                    continue
                for k in reversed(keys):  # the root ends up most recent
                    tier[k] = None
                    tier.move_to_end(k)
                while len(tier) > cap:
                    tier.popitem(last=False)
            if self.store is not None:
                self.store.add(keys)


class FakeSGLang:
    def __init__(
        self,
        *,
        device_tokens: int = 1024,
        hicache: bool = True,
        ratio: float = 2.0,
        size_gb: int = 0,
        page_size: int = 1,
        vocab: int = 512,
        model_path: str | None = None,
        write_policy: str = "write_through",
        base_ms: float = 1.0,
        prefill_us: float = 20.0,
        host_us: float = 5.0,
        decode_ms: float = 0.5,
        host: str = "127.0.0.1",
        port: int = 0,
        bytes_per_token: int = 1024,
        storage_backend: str | None = None,
        storage_path: str | None = None,
    ) -> None:
        self.device_tokens = device_tokens
        self.hicache = hicache
        self.ratio, self.size_gb, self.page_size = ratio, size_gb, page_size
        self.vocab, self.model_path, self.write_policy = vocab, model_path, write_policy
        self.base_ms, self.prefill_us = base_ms, prefill_us
        self.host_us, self.decode_ms = host_us, decode_ms
        if not hicache:
            host_tokens = 0
        elif size_gb > 0:
            host_tokens = (int(size_gb * 1e9 // bytes_per_token) // page_size + 1) * page_size
        else:
            host_tokens = (int(device_tokens * ratio) // page_size + 1) * page_size
        self.host_tokens = host_tokens
        self.storage_backend = storage_backend if hicache else None
        drop = bool(os.environ.get("FAKE_SGLANG_L3_DROP"))
        store = Store(storage_path, drop) if self.storage_backend else None
        self.cache = Cache(device_tokens, host_tokens, store)
        self.clears = 0
        self.max_req_input_len = device_tokens - 6
        self.requests = 0
        self.server = ThreadingHTTPServer((host, port), _Handler)
        self.server.daemon_threads = True
        self.server.fake = self  # type: ignore[attr-defined]
        self.thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeSGLang:
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeSGLang:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def server_info(self) -> dict[str, Any]:
        return {
            "model_path": self.model_path,
            "tp_size": 1,
            "page_size": self.page_size,
            "max_total_tokens": self.device_tokens,
            "chunked_prefill_size": 128,
            "disable_radix_cache": False,
            "enable_hierarchical_cache": self.hicache,
            "hicache_ratio": self.ratio,
            "hicache_size": self.size_gb,
            "hicache_write_policy": self.write_policy,
            "hicache_storage_backend": self.storage_backend,
            "kv_cache_dtype": "auto",
            "max_total_num_tokens": self.device_tokens,
            "max_req_input_len": self.max_req_input_len,
            "status": "ready",
            "version": "0.5.20",
        }


def _meta(prompt: int, done: int, device: int, host: int, finish: Any,
          storage: int | None = None) -> dict[str, Any]:  # fmt: skip
    cached = device + host + (storage or 0)
    details: dict[str, int] = {"device": device, "host": host}
    if storage is not None:
        details["storage"] = storage
    return {
        "id": "fake",
        "finish_reason": finish,
        "prompt_tokens": prompt,
        "completion_tokens": done,
        "cached_tokens": cached,
        "cached_tokens_details": details if cached else None,
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as uvicorn: small SSE writes go out at once

    def log_message(self, *args: Any) -> None:  # quiet
        return

    @property
    def fake(self) -> FakeSGLang:
        return self.server.fake  # type: ignore[attr-defined]

    def _json(self, status: int, doc: Any) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _text(self, status: int, text: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/server_info":
            self._json(200, self.fake.server_info())
        elif self.path in ("/health", "/model_info"):
            self._json(200, {"model_path": self.fake.model_path})
        else:
            self._json(404, {"detail": "Not Found"})

    def _chunk(self, doc: Any) -> None:
        data = b"data: " + (doc if isinstance(doc, bytes) else json.dumps(doc).encode()) + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self) -> None:
        if self.path == "/flush_cache":
            with self.fake.cache.lock:
                self.fake.cache.device.clear()
                self.fake.cache.host.clear()
            self._json(200, {"flushed": True})
            return
        if self.path == "/hicache/storage-backend/clear":
            store = self.fake.cache.store
            if store is None or os.environ.get("FAKE_SGLANG_CLEAR_FAIL"):
                self._text(400, "")
                return
            with self.fake.cache.lock:
                store.clear()
            self.fake.clears += 1
            self._text(200, "Hierarchical cache storage backend cleared.\n")
            return
        if self.path != "/generate":
            self._json(404, {"detail": "Not Found"})
            return
        fake = self.fake
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        ids = body.get("input_ids") or []
        n = int(body.get("sampling_params", {}).get("max_new_tokens", 1))
        stream = bool(body.get("stream"))
        fake.requests += 1
        if not ids:
            self._json(400, {"error": {"message": "input_ids cannot be empty."}})
            return
        if any(t >= fake.vocab or t < 0 for t in ids):
            self._json(400, {"error": {"message": "token id out of the vocabulary"}})
            return
        if len(ids) >= fake.max_req_input_len:  # SGLang: len(input_ids) >= max_req_input_len
            why = f"Input length ({len(ids)} tokens) exceeds the maximum allowed length"
            if not stream:
                self._json(400, {"error": {"message": why}})
                return
            self._begin_stream()
            finish = {"type": "abort", "message": why, "status_code": 400}
            self._chunk({"text": "", "output_ids": [7], "meta_info": _meta(1, 1, 0, 0, finish)})
            self._end_stream()
            return
        keys = fake.cache.keys(ids)
        device, host, storage = fake.cache.lookup(keys)
        if fake.page_size > 1:
            device -= device % fake.page_size
            host -= (device + host) % fake.page_size
            storage -= (device + host + storage) % fake.page_size
        uncached = len(ids) - device - host - storage
        loaded = host + storage
        work_us = uncached * fake.prefill_us + loaded * fake.host_us
        time.sleep((fake.base_ms + work_us / 1e3) / 1e3)
        l3 = storage if fake.storage_backend else None
        fake.cache.insert(keys)
        outputs = [(ids[-1] + i) % fake.vocab for i in range(1, n + 1)]
        if not stream:
            meta = _meta(len(ids), n, device, host, {"type": "length", "length": n}, l3)
            self._json(200, {"text": "", "output_ids": outputs, "meta_info": meta})
            return
        self._begin_stream()
        for i in range(1, n + 1):
            finish = {"type": "length", "length": n} if i == n else None
            meta = _meta(len(ids), i, device, host, finish, l3)
            self._chunk({"text": "x", "output_ids": outputs[:i], "meta_info": meta})
            if i < n:
                time.sleep(fake.decode_ms / 1e3)
        self._end_stream()

    def _begin_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _end_stream(self) -> None:
        self._chunk(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def main(argv: list[str]) -> None:
    """`python -m sglang.launch_server ARGS` for the sweep tests."""
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--model-path", default=None)
    p.add_argument("--max-total-tokens", type=int, default=1024)
    p.add_argument("--enable-hierarchical-cache", action="store_true")
    p.add_argument("--hicache-ratio", type=float, default=2.0)
    p.add_argument("--hicache-size", type=int, default=0)
    p.add_argument("--hicache-write-policy", default="write_through")
    p.add_argument("--page-size", type=int, default=1)
    p.add_argument("--hicache-storage-backend", default=None)
    args, _ = p.parse_known_args(argv)
    if os.environ.get("FAKE_SGLANG_FAIL"):
        print("RuntimeError: not enough memory for the KV cache", file=sys.stderr)
        sys.exit(3)
    time.sleep(float(os.environ.get("FAKE_SGLANG_START_DELAY", "0")))
    fake = FakeSGLang(
        device_tokens=args.max_total_tokens, hicache=args.enable_hierarchical_cache,
        ratio=args.hicache_ratio, size_gb=args.hicache_size, page_size=args.page_size,
        model_path=args.model_path, write_policy=args.hicache_write_policy,
        host=args.host, port=args.port,
        base_ms=float(os.environ.get("FAKE_SGLANG_BASE_MS", "1")),
        decode_ms=float(os.environ.get("FAKE_SGLANG_DECODE_MS", "0.5")),
        prefill_us=float(os.environ.get("FAKE_SGLANG_PREFILL_US", "20")),
        host_us=float(os.environ.get("FAKE_SGLANG_HOST_US", "5")),
        storage_backend=args.hicache_storage_backend,
        storage_path=_store_path(args.hicache_storage_backend),
    )  # fmt: skip
    stop_delay = float(os.environ.get("FAKE_SGLANG_STOP_DELAY", "0"))
    stopping = threading.Event()

    def on_term(*_: Any) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_term)
    record = os.environ.get("FAKE_SGLANG_ARGV")
    if record:
        with open(record, "a") as fh:
            fh.write(json.dumps({"argv": argv, "env": _switches(), "pid": os.getpid()}) + "\n")
    fake.start()
    while not stopping.wait(0.1):
        pass
    time.sleep(stop_delay)
    fake.stop()
    sys.exit(0)


def _store_path(backend: str | None) -> str | None:
    """Where the L3 of `backend` lives: SGLang's file folder (created as SGLang does), or the
    pool file FAKE_SGLANG_POOL names."""
    if backend == "file":
        folder = os.environ.get("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR") or "/tmp/hicache"
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, "fake-l3.keys")
    return os.environ.get("FAKE_SGLANG_POOL") if backend else None


def _switches() -> dict[str, str]:
    keep = ("XPUTUNE_HICACHE_", "SGLANG_")
    return {k: v for k, v in os.environ.items() if k.startswith(keep)}


if __name__ == "__main__":
    main(sys.argv[1:])
