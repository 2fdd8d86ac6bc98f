"""Two real sglang servers on CPU behind the real sglang-router, replayed through the router and
set beside plan/cluster.py's prediction: round robin with a shared L3 (one file store both
servers read and write) and without one, and cache_aware beside them. Each server is launched
through `xputune launch sglang` (tests/server/server.py); the router is sglang-router's own
(pinned into the oldest release's environment only: tests/sglang/install_sglang.py).

The slice is the measure lane's (Mooncake's conversation trace), each 512-token block sent as 8
tokens, so that the prefix a turn left on the other server passes SGLang's prefetch threshold
(256 tokens: shorter misses are recomputed, never fetched from L3; the prediction knows it).
Round robin sends a conversation's turns to both servers in turn, so a turn's prefix was
computed by the other server: without L3 it is recomputed, with the shared store it is a
storage hit. What the lane holds: storage hits appear only with the shared L3; each tier is
within the measure lane's bound of the prediction (one token per request, as a rate, plus 0.01)
for round robin; cache_aware is reported beside them and held only to what it does (the
router's cache_aware matches request text, and a replay sends token ids: see
measure/router.py). XPUTUNE_MEASURE_REPORT=<file>.cluster.json keeps the documents.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.server.server import REPO, Server, join_stops
from tests.sglang.releases import OLDEST, python_for
from xputune.measure.ports import server_port

pytestmark = pytest.mark.timeout(1500)

SLICE = str(REPO / "tests" / "data" / "traces" / "mooncake-conversation-1171-1570.jsonl")
FEATURES = "lifo,async,kernels,host-buffer"
REQUESTS = "200"
#: Tokens a trace block is sent as: prompts long enough that a turn's prefix from the other
#: server passes SGLang's prefetch threshold (256 tokens), and cut at the server's limit.
BLOCK_TOKENS = "8"
_report: dict[str, Any] = {}


@contextlib.contextmanager
def router(ports: list[int], policy: str, workdir: Path):
    """sglang-router in front of the servers on `ports`, until every one is healthy there."""
    port = server_port()
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"router-{policy}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                str(python_for(OLDEST)),
                "-m",
                "sglang_router.launch_router",
                "--worker-urls",
                *(f"http://127.0.0.1:{p}" for p in ports),
                "--policy",
                policy,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
            with contextlib.suppress(OSError, ValueError, KeyError):
                listed = json.loads(urllib.request.urlopen(url + "/workers", timeout=2).read())
                if len(listed["workers"]) == len(ports) and all(
                    w["is_healthy"] for w in listed["workers"]
                ):
                    break
            assert time.monotonic() < deadline, "the router never saw every server healthy"
            time.sleep(0.5)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def _replay(run_cli, url: str, routing: str, skip: str) -> dict[str, Any]:
    code, out, err = run_cli(
        "replay", "--trace", SLICE, "--url", url, "--block-tokens", BLOCK_TOKENS, "--skip", skip,
        "-n", REQUESTS, "-c", "1", "--max-output", "1", "--routing", routing, "-f", "json",
    )  # fmt: skip
    assert code in (0, 1), err  # 1: the tier check named something (said in the document)
    return json.loads(out)


def _empty(ports: list[int]) -> None:
    """Every server's L1 and L2 flushed, and the shared store emptied (through one server: the
    next run must not find what the last one stored)."""
    from xputune.measure.client import Endpoint, post_body
    from xputune.measure.l3store import CLEAR, CLEAR_TIMEOUT

    post_body(Endpoint.parse(f"http://127.0.0.1:{ports[0]}"), CLEAR, CLEAR_TIMEOUT)
    for port in ports:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/flush_cache?timeout=30", data=b"", method="POST"
        )
        urllib.request.urlopen(request, timeout=60).read()


def _servers(models, workdir: Path, l3: list[str]) -> list[Server]:
    return [
        Server(
            models["mha"],
            workdir / name,
            FEATURES,
            write_policy="write_through",
            launcher_args=[*l3, "--l3-prefetch", "wait_complete"] if l3 else [],
            extra_args=["--enable-metrics"],
            release=OLDEST,
        )
        for name in ("a", "b")
    ]


def _save(name: str, doc: dict[str, Any]) -> None:
    _report[name] = doc
    path = os.environ.get("XPUTUNE_MEASURE_REPORT")
    if path:
        Path(f"{path}.cluster.json").write_text(json.dumps(_report, indent=1))


def _rows(doc: dict[str, Any]) -> dict[str, tuple[float | None, float | None]]:
    return {r["tier"]: (r["predicted"], r["measured"]) for r in doc["comparison"]}


def _within_bound(doc: dict[str, Any], where: str) -> None:
    m = doc["measured"]
    bound = m["requests"]["completed"] / m["tokens"]["input"] + 0.01
    rows = {r["tier"]: r for r in doc["comparison"]}
    for tier in ("device", "host", "storage", "total"):
        if tier in rows and rows[tier]["difference"] is not None:
            assert abs(rows[tier]["difference"]) <= bound, f"{where}: {_rows(doc)}"


def test_a_shared_l3_serves_what_round_robin_scattered(models, run_cli, tmp_path: Path) -> None:
    pytest.importorskip("sglang_router", reason="sglang-router is not installed here")
    store = tmp_path / "l3"
    store.mkdir()
    shared = _servers(models, tmp_path / "shared", ["--l3", "file", "--l3-dir", str(store)])
    private = _servers(models, tmp_path / "private", [])
    with shared[0], shared[1]:
        ports = [s.port for s in shared]
        with router(ports, "round_robin", tmp_path) as url:
            with_l3 = _replay(run_cli, url, "round_robin", "0")
        _empty(ports)
        with router(ports, "cache_aware", tmp_path) as url:
            aware = _replay(run_cli, url, "cache_aware", "0")
    join_stops()
    with private[0], private[1], router([s.port for s in private], "round_robin", tmp_path) as url:
        without = _replay(run_cli, url, "round_robin", "0")
    join_stops()
    for name, doc in (("round_robin + L3", with_l3), ("round_robin", without),
                      ("cache_aware + L3", aware)):  # fmt: skip
        _save(name, doc)
        assert doc["cluster"]["instances"] == 2 and doc["valid"], (name, doc["invalid_reasons"])
        assert doc["measured"]["requests"]["completed"] == int(REQUESTS), name
    storage = with_l3["measured"]["hit_rate"]["storage"]
    assert storage is not None and storage > 0.01, _rows(with_l3)  # the other server's pages
    assert not without["measured"]["hit_rate"].get("storage"), _rows(without)
    assert with_l3["measured"]["hit_rate"]["total"] > without["measured"]["hit_rate"]["total"]
    _within_bound(with_l3, "round_robin with the shared L3")
    _within_bound(without, "round_robin, private caches")
