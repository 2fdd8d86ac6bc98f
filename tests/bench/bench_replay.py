"""Benchmark: the replay client's own cost per request, against a bare HTTP loop to the same
server.

Target (docs/benchmarks.md): the client's overhead per request small enough not to show in
TTFT. Both sides send the same requests (the committed Mooncake slice, scaled by
--block-tokens), one at a time, to the same server, with its cache flushed before each run:

  bare    one http.client connection in a plain loop over bodies encoded beforehand: send,
          stamp the first SSE line, read to [DONE]; nothing parsed, nothing recorded
  replay  xputune.measure.replay.replay(), closed loop at concurrency 1: worker thread, body
          encoded from block ids, first and last chunks parsed, a Record per request

Rounds alternate the order (bare first, then replay first). Printed per round and as
min/median/max over rounds: wall time per request of each and their ratio, TTFT p50 of each
and their ratio, and the replay's own measure of its CPU time in the TTFT window (p50, us).

The server is the stand-in (tests/measure/fakesglang.py, a separate process: a fixed latency
model, so the client's cost is most visible), or a running SGLang with --url.

Run:
  .venv/bin/python tests/bench/bench_replay.py --rounds 5
  .venv/bin/python tests/bench/bench_replay.py --url http://127.0.0.1:30000 --block-tokens 8
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SLICE = ROOT / "tests" / "data" / "traces" / "mooncake-conversation-1171-1570.jsonl"


def start_stand_in(folder: str, base_ms: float) -> tuple[subprocess.Popen, str]:
    from tests.measure.fakesglang import write_model
    from xputune.measure.ports import server_port

    port = server_port()
    model = write_model(os.path.join(folder, "model"))
    code = "import sys; from tests.measure.fakesglang import main; main(sys.argv[1:])"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_SGLANG_BASE_MS": str(base_ms)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--port", str(port), "--model-path", model,
         "--max-total-tokens", "8192", "--enable-hierarchical-cache"],
        env=env, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        try:
            conn.request("GET", "/health")
            conn.getresponse().read()
            return proc, url
        except OSError:
            time.sleep(0.1)
        finally:
            conn.close()
    raise SystemExit("the stand-in server did not start")


def flush(endpoint) -> None:
    conn = endpoint.connect(30)
    conn.request("POST", endpoint.prefix + "/flush_cache", b"")
    conn.getresponse().read()
    conn.close()


def bare(endpoint, bodies: list[bytes]) -> tuple[float, list[float]]:
    """Seconds for all, and each TTFT, of a plain http.client loop."""
    conn = endpoint.connect(600)
    ttfts = []
    t_all = time.perf_counter()
    for body in bodies:
        t0 = time.perf_counter()
        conn.request("POST", endpoint.prefix + "/generate", body,
                     {"Content-Type": "application/json"})  # fmt: skip
        resp = conn.getresponse()
        first = None
        while True:
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data:"):
                if first is None:
                    first = time.perf_counter() - t0
                if b"[DONE]" in line:
                    break
        resp.read()
        ttfts.append(first or 0.0)
    took = time.perf_counter() - t_all
    conn.close()
    return took, ttfts


def run_replay(endpoint, workload, vocab) -> tuple[float, list[float], list[float]]:
    from xputune.measure.replay import Load, replay

    t0 = time.perf_counter()
    run = replay(workload, endpoint, vocab, Load(concurrency=1))
    took = time.perf_counter() - t0
    bad = [r.error for r in run.records if not r.ok]
    if bad:
        raise SystemExit(f"replay failed: {bad[0]}")
    return took, [r.ttft or 0.0 for r in run.records], [r.overhead for r in run.records]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a running SGLang server (default: the stand-in)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--block-tokens", type=int, default=4)
    ap.add_argument("--base-ms", type=float, default=1.0, help="stand-in latency floor, ms")
    ap.add_argument("--max-output", type=int, default=2)
    args = ap.parse_args()

    from xputune.measure.client import Endpoint
    from xputune.measure.server import read_server, token_range
    from xputune.measure.workload import build_workload, read_slice

    with tempfile.TemporaryDirectory() as folder:
        proc = None
        url = args.url
        if url is None:
            proc, url = start_stand_in(folder, args.base_ms)
        try:
            endpoint = Endpoint.parse(url)
            info = read_server(endpoint)
            vocab = token_range(info, None)
            with open(SLICE, "rb") as fh:
                sliced = read_slice(fh, limit=args.requests)
            workload = build_workload(
                sliced,
                block_tokens=args.block_tokens,
                max_req_input_len=info.max_req_input_len,
                max_output=args.max_output,
            )
            bodies = [workload.body(r, vocab) for r in workload.requests]  # fmt: skip
            n = len(bodies)
            print(
                f"server {url} ({'stand-in' if proc else 'given'}), {n} requests of "
                f"{workload.input_tokens / n:.0f} tokens on average, output {args.max_output}"
            )
            rows = []
            for rnd in range(args.rounds):
                order = ("bare", "replay") if rnd % 2 == 0 else ("replay", "bare")
                got = {}
                for what in order:
                    flush(endpoint)
                    if what == "bare":
                        took, ttft = bare(endpoint, bodies)
                        got[what] = (took / n, statistics.median(ttft), None)
                    else:
                        took, ttft, cpu = run_replay(endpoint, workload, vocab)
                        got[what] = (took / n, statistics.median(ttft), statistics.median(cpu))
                b, r = got["bare"], got["replay"]
                rows.append((b[0] and r[0] / b[0], b[1] and r[1] / b[1], r[2], b, r))
                print(
                    f"round {rnd + 1}: per request bare {b[0] * 1e3:.3f} ms, replay "
                    f"{r[0] * 1e3:.3f} ms (x{rows[-1][0]:.3f}); TTFT p50 bare "
                    f"{b[1] * 1e3:.3f} ms, replay {r[1] * 1e3:.3f} ms (x{rows[-1][1]:.3f}); "
                    f"replay CPU in the TTFT window p50 {r[2] * 1e6:.0f} us"
                )
            for i, label in ((0, "wall per request"), (1, "TTFT p50")):
                vals = sorted(row[i] for row in rows)
                print(
                    f"{label} replay/bare: min {vals[0]:.3f} median "
                    f"{statistics.median(vals):.3f} max {vals[-1]:.3f}"
                )
            extra = sorted((row[4][0] - row[3][0]) * 1e6 for row in rows)
            print(
                f"extra wall time per request (replay - bare): median "
                f"{statistics.median(extra):.0f} us (min {extra[0]:.0f}, max {extra[-1]:.0f})"
            )
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(10)


if __name__ == "__main__":
    main()
