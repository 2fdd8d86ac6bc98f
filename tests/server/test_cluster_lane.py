"""Two real sglang servers on CPU behind the real sglang-router, replayed through the router and
set beside plan/cluster.py's prediction: round robin and cache_aware, each with a shared L3 (one
file store both servers read and write) and without one. One `xputune sweep --instances 2
--routing round_robin,cache_aware --compare-l3` runs all four: each run is `xputune launch
cluster` (every server through the launcher, the router sglang-router's own, pinned into the
oldest release's environment only: tests/sglang/install_sglang.py), on cold caches and an
empty store of its own.

The slice is the measure lane's (Mooncake's conversation trace), each 512-token block sent as 8
tokens, so that the prefix a turn left on the other server passes SGLang's prefetch threshold
(256 tokens: shorter misses are recomputed, never fetched from L3; the prediction knows it).
Round robin sends a conversation's turns to both servers in turn, so a turn's prefix was
computed by the other server: without L3 it is recomputed, with the shared store it is a
storage hit. What the lane holds: storage hits appear only with the shared L3; each tier is
within the measure lane's bound of the prediction (one token per request, as a rate, plus 0.01)
for round robin; cache_aware is reported beside them and held only to what it does (the
router's cache_aware matches request text, and a replay sends token ids: see
measure/router.py). XPUTUNE_MEASURE_REPORT=<file>.cluster.json keeps the document.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.server.server import (
    DEVICE,
    LAUNCH_ARGS,
    REPO,
    Report,
    Server,
    store_unavailable,
    sweep_environment,
)
from tests.sglang.releases import NEWEST, OLDEST, python_for, unavailable

pytestmark = pytest.mark.timeout(1500)

SLICE = str(REPO / "tests" / "data" / "traces" / "mooncake-conversation-1171-1570.jsonl")
FEATURES = "lifo,async,kernels,host-buffer"
REQUESTS = "200"
#: Tokens a trace block is sent as: prompts long enough that a turn's prefix from the other
#: server passes SGLang's prefetch threshold (256 tokens), and cut at the server's limit.
BLOCK_TOKENS = "8"
_save = Report(".cluster.json").save


def _rows(doc: dict[str, Any]) -> dict[str, tuple[float | None, float | None]]:
    return {r["tier"]: (r["predicted"], r["measured"]) for r in doc["comparison"]}


def _within_bound(doc: dict[str, Any], where: str) -> None:
    m = doc["measured"]
    bound = m["requests"]["completed"] / m["tokens"]["input"] + 0.01
    rows = {r["tier"]: r for r in doc["comparison"]}
    for tier in ("device", "host", "storage", "total"):
        if tier in rows and rows[tier]["difference"] is not None:
            assert abs(rows[tier]["difference"]) <= bound, f"{where}: {_rows(doc)}"


def _sweep(models, run_cli, tmp_path: Path, monkeypatch, *, release: str, l3: list[str],
           routing: str, compare_l3: bool) -> dict[str, Any]:  # fmt: skip
    """One `sweep --instances 2` of the tiny MHA model on `release`, its document."""
    sweep_environment(Server(models["mha"], tmp_path, FEATURES), monkeypatch, tmp_path)
    launch = shlex.join([
        "--write-policy", "write_through", "--features", FEATURES, *l3, "--l3-prefetch",
        "wait_complete", *LAUNCH_ARGS,
    ])  # fmt: skip
    code, out, err = run_cli(
        "sweep", "--trace", SLICE, "-n", REQUESTS, "--block-tokens", BLOCK_TOKENS, "-c", "1",
        "--max-output", "1", "--sizes", "x2", "--instances", "2", "--routing", routing,
        *(["--compare-l3"] if compare_l3 else []), "-f", "json", "--launch-opt", launch,
        "--python", str(python_for(release)), "--", "--model-path", str(models["mha"]),
        "--device", DEVICE, "--max-total-tokens", "1024", "--chunked-prefill-size", "128",
        "--skip-server-warmup", "--max-running-requests", "4",
    )  # fmt: skip
    assert code in (0, 1), err  # 1: the tier check named something (said in the document)
    doc = json.loads(out)
    for step in doc["steps"]:
        name = step["label"]
        assert step["cluster"]["instances"] == 2 and step["valid"], (name, step["invalid_reasons"])
        assert step["measured"]["requests"]["completed"] == int(REQUESTS), name
        assert len(step["cluster"]["workers"]) == 2, name
    return doc


def test_a_shared_l3_serves_what_round_robin_scattered(
    models, run_cli, tmp_path: Path, monkeypatch
) -> None:
    """Release 0.5.20, a file store: both policies, each with the store and without."""
    pytest.importorskip("sglang_router", reason="sglang-router is not installed here")
    store = tmp_path / "l3"
    store.mkdir()
    doc = _sweep(models, run_cli, tmp_path, monkeypatch, release=OLDEST,
                 l3=["--l3", "file", "--l3-dir", str(store)],
                 routing="round_robin,cache_aware", compare_l3=True)  # fmt: skip
    _save("sweep --instances 2", doc)
    steps = {s["label"]: s for s in doc["steps"]}
    assert list(steps) == ["2 rr +L3", "2 rr", "2 ca +L3", "2 ca"], doc["error"]
    with_l3, without = steps["2 rr +L3"], steps["2 rr"]
    for name in ("2 rr +L3", "2 rr"):  # every worker's own count of what it finished
        assert steps[name]["cluster"]["requests_per_worker"] == {
            "measured": [100, 100],
            "predicted": [100, 100],
        }, name
    for name in ("2 ca +L3", "2 ca"):  # how cache_aware spread them: reported, summed here
        spread = steps[name]["cluster"]["requests_per_worker"]
        assert sum(spread["measured"]) == sum(spread["predicted"]) == int(REQUESTS), spread
    storage = with_l3["measured"]["hit_rate"]["storage"]
    assert storage is not None and storage > 0.01, _rows(with_l3)  # the other server's pages
    for name in ("2 rr", "2 ca"):
        assert not steps[name]["measured"]["hit_rate"].get("storage"), _rows(steps[name])
    assert with_l3["measured"]["hit_rate"]["total"] > without["measured"]["hit_rate"]["total"]
    _within_bound(with_l3, "round_robin with the shared L3")
    _within_bound(without, "round_robin, private caches")


def test_a_mooncake_store_the_cluster_started_serves_both_instances(
    models, run_cli, tmp_path: Path, monkeypatch
) -> None:
    """Release 0.5.23, the Mooncake store over tcp with the master `launch cluster` starts as a
    member of the set (no --l3-master), and without it: round robin, storage hits only with
    the store, every tier within the bound."""
    for reason in (unavailable(NEWEST), store_unavailable()):
        if reason:
            pytest.skip(reason)
    probe = subprocess.run([str(python_for(NEWEST)), "-c", "import sglang_router"],
                           capture_output=True, check=False)  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"sglang-router is not installed for sglang {NEWEST}")
    mooncake = ["--l3", "mooncake", "--l3-protocol", "tcp", "--l3-segment-gb", "0.25",
                "--l3-host", "127.0.0.1"]  # fmt: skip
    doc = _sweep(models, run_cli, tmp_path, monkeypatch, release=NEWEST, l3=mooncake,
                 routing="round_robin", compare_l3=True)  # fmt: skip
    _save(f"sweep --instances 2 mooncake {NEWEST}", doc)
    assert doc["l3"]["between_sizes"] == "own_master", doc["l3"]
    shared, private = doc["steps"]
    assert shared["label"] == "2 rr +L3" and shared["server"]["storage_backend"] == "mooncake"
    storage = shared["measured"]["hit_rate"]["storage"]
    assert storage is not None and storage > 0.01, _rows(shared)
    assert private["label"] == "2 rr" and not private["measured"]["hit_rate"].get("storage")
    _within_bound(shared, f"round_robin with the Mooncake store, {NEWEST}")
    _within_bound(private, f"round_robin, private caches, {NEWEST}")
