"""replay beside SGLang's own benchmark (`python -m sglang.benchmark.serving --dataset-name
mooncake --cache-report`) on one real CPU server, on both ends of the supported range.

One server, one derived slice, two clients, one after the other, each from a cold cache
(POST /flush_cache between them, which empties L1 and the host pool alike): SGLang's benchmark
run by the release's own interpreter (tests/server/anchor_bench.py), then `xputune replay`.
One server rather than two started alike: the same process, pools and plugin for both, so a
difference cannot come from two servers differing; the two prompt sets share no token prefix
(text of "user: Round 1: ..." against synthesized ids), so neither client could be served what
the other left; the flush gives each the whole of both pools from its first request.

The slice (tests/server/anchor.py, derive_slice): the first 200 requests of the measure lane's
Mooncake slice, each cut to its first 4 blocks, block ids relabelled to five-digit numbers so
that each of the benchmark's blocks is 388 tokens with the lane's tokenizer, and replay sends
each block as 388 tokens plus the benchmark's 36-token ending as an uncached tail; one output
token each. Both clients send one request at a time in trace order. L1 is 4,096 tokens (the
longest prompt is 1,603), L2 64x that: block 0, which every request starts with, stays on the
device, and the conversations' returns, at least five requests later, come from the host.

Both sides report token-weighted sums, so the comparison is the per-tier share of prompt
tokens (the benchmark prints shares of the cached tokens; its token counts give the rest).
The difference is explained term by term within the bound docs/measure.md derives ("Beside
SGLang's own benchmark"); every term is computed for the run from the prompts themselves and
the server's pool sizes, nothing is fitted to the outcome. XPUTUNE_ANCHOR_REPORT=<file> writes
the side-by-side tables (and the numbers) as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.server import anchor
from tests.server.server import Server, join_stops
from tests.server.test_measure_lane import SLICE
from tests.sglang.releases import python_for

pytestmark = pytest.mark.timeout(600)

FEATURES = "lifo,async,kernels,host-buffer"
REQUESTS, MAX_BLOCKS = 200, 4
DEVICE_TOKENS, HOST_RATIO = 4096, 64
_report: dict[str, Any] = {}


def _save(release: str, doc: dict[str, Any]) -> None:
    _report[release] = doc
    path = os.environ.get("XPUTUNE_ANCHOR_REPORT")
    if path:
        Path(path).write_text(json.dumps(_report, indent=1))


def _text_prompt_tokens(port: int, text: str) -> int:
    """What the server counts for the benchmark's text (its tokenizer, its special tokens)."""
    body = {"text": text, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=120) as resp:
        return int(json.loads(resp.read())["meta_info"]["prompt_tokens"])


def _flush(server: Server) -> None:
    status, text = server.post("/flush_cache?timeout=30")
    assert status == 200 and text.startswith("Cache flushed"), (status, text)


def _printed(stdout: str) -> tuple[str, dict[str, float]]:
    """The benchmark's own "Cache Hit Details" block, and the tier shares of cached tokens it
    prints there."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "Cache Hit Details" in line)
    block = []
    for line in lines[start:]:
        block.append(line)
        if line.startswith("====="):
            break
    shares: dict[str, float] = {}
    after_rate = False
    for line in block:
        key, _, value = line.strip().partition(":")
        if key == "Cache hit rate":
            after_rate = True
        elif after_rate and value.strip().endswith("%"):
            tier = key.split(" ")[0].lower()
            shares[tier] = float(value.strip().rstrip("%"))
    return "\n".join(block), shares


def test_replay_beside_sglangs_own_benchmark(models, tmp_path: Path, run_cli, release: str) -> None:
    import numpy as np
    from transformers import AutoTokenizer

    from xputune.measure.tokens import TokenRange, prompt_tokens

    python = python_for(release)
    reason = anchor.has_benchmark(python)
    if reason is not None:
        pytest.skip(f"sglang {release}: {reason}")
    tokenizer = AutoTokenizer.from_pretrained(str(models["mha"]))
    sl = anchor.derive_slice(Path(SLICE), tmp_path / "slice.jsonl", REQUESTS, MAX_BLOCKS,
                             tokenizer)  # fmt: skip
    vocab = TokenRange(10, 512)  # the lane's vocabulary (tests/server/models.py), replay's own
    bench_out = tmp_path / "bench.jsonl"
    server = Server(
        models["mha"], tmp_path / "server", features=FEATURES, write_policy="write_through",
        max_total_tokens=DEVICE_TOKENS, release=release,
        extra_args=["--hicache-ratio", str(HOST_RATIO), "--chunked-prefill-size", "1024"],
    )  # fmt: skip
    with server:
        url = f"http://127.0.0.1:{server.port}"
        served_len = _text_prompt_tokens(server.port, anchor.bench_prompt(sl.ids[0]))
        _flush(server)
        bench = subprocess.run(
            anchor.bench_command(python, url, sl.path, REQUESTS, bench_out),
            env=anchor.bench_environment(), capture_output=True, text=True, timeout=300,
            check=False, cwd=tmp_path,
        )  # fmt: skip
        _flush(server)
        code, out, err = run_cli(
            "replay", "--trace", str(sl.path), "--url", url, "--block-size", str(sl.block),
            "--block-tokens", str(sl.block), "-n", str(REQUESTS), "-c", "1",
            "--max-output", "1", "--token-range", f"{vocab.lo}:{vocab.hi}", "-f", "json",
            "--per-request",
        )  # fmt: skip
        log = server.tail()
    join_stops()
    assert bench.returncode == 0, f"{bench.stdout[-3000:]}\n{bench.stderr[-3000:]}\n{log}"
    assert code == 0, f"{err}\n{log}"
    result = json.loads(bench_out.read_text().splitlines()[-1])
    doc = json.loads(out)

    # Both measured every request of the same workload, in the same order.
    assert result["completed"] == REQUESTS and not any(result["errors"]), result["errors"][:3]
    assert doc["valid"] and doc["measured"]["requests"]["completed"] == REQUESTS, doc["notes"]
    # Tokenization: the server counts the benchmark's text as the layout says (head, blocks of
    # `block` tokens, tail), and so does the benchmark (0.5.20: the client's own count; 0.5.23:
    # the server's, meta_info.prompt_tokens): the text/input_ids term of the bound is 0.
    layout = [sl.bench_tokens(r) for r in range(REQUESTS)]
    assert served_len == layout[0], (served_len, layout[0])
    assert result["input_lens"] == layout, "the benchmark's prompts are not the layout's"
    assert [r["prompt_tokens"] for r in doc["per_request"]] == [
        sl.replay_tokens(r) for r in range(REQUESTS)
    ]

    bench_prompts = [np.asarray(tokenizer.encode(anchor.bench_prompt(ids))) for ids in sl.ids]
    assert [len(p) for p in bench_prompts] == layout
    replay_prompts = [
        prompt_tokens(ids, [sl.block] * len(ids), sl.block, sl.tail, r + 1, vocab)
        for r, ids in enumerate(sl.ids)
    ]
    caps = {"device": doc["server"]["device_tokens"], "host": doc["server"]["host_tokens"]}
    b = anchor.bound(sl, bench_prompts, replay_prompts, caps)
    bench_side, replay_side = anchor.bench_side(result), anchor.replay_side(doc)
    rows = anchor.compare(bench_side, replay_side, b)
    printed_block, printed = _printed(bench.stdout)
    title = (
        f"sglang {release}, one server (L1 {caps['device']:,} tokens, L2 {caps['host']:,}), "
        f"{REQUESTS} requests of the derived slice, one at a time, in trace order, each client "
        "from a cold cache"
    )
    text = anchor.table(title, bench_side, replay_side, rows, b, printed)
    outliers = anchor.per_request_outliers(result, doc, b, sl.block)
    print(f"\n{printed_block}\n\n{text}\nrequests outside their own bound: {len(outliers)}")
    _save(release, {"table": text, "printed": printed_block, "rows": rows, "terms": b.terms,
                    "risky": b.risky, "outliers": outliers[:20]})  # fmt: skip

    # The run measured something in each tier it compares: block 0 on the device, the
    # conversations' returns from the host; no L3 here, and neither side reports one.
    assert replay_side.share("device") > 0.2 and replay_side.share("host") > 0.02, text
    assert bench_side.tokens["storage"] == replay_side.tokens["storage"] == 0, text
    # The benchmark's printed shares are its token counts (shares of the cached tokens).
    for tier in ("device", "host"):
        want = 100 * bench_side.tokens[tier] / bench_side.tokens["total"]
        assert abs(printed[tier] - want) <= 0.05, (printed, bench_side.tokens)
    for row in rows:
        assert row["within"], f"{row['tier']} outside the bound\n{text}\n{outliers[:10]}"
    # And request by request (the evidence that both sent the same requests in the same order:
    # the benchmark's outputs are listed in the order its tasks were made, not sent).
    assert outliers == [], f"{text}\n{json.dumps(outliers[:10], indent=1)}"
