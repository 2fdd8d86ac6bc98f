"""The tier check on real servers: an L3 store made to fail is named dead, with the server's
own counters as evidence; the same run with SGLang's real file store is not.

Both servers run the same slice of the Mooncake conversation trace (the measure lane's, each
block one token) with L2 at 2x L1 and an L3 store beside it, so the prediction gives L3 what
L1 and L2 lose: the returns of conversations L2 has already evicted. SGLang queries L3 only
for misses of at least prefetch_threshold pages (256 by default); the slice's prompts are
tens of tokens, so the lane sets it to one page in the store's extra config, and
wait_complete, so a slow read on two busy cores is not a miss. The failing store is SGLang's
own file backend whose existence query always says no (tests/server/blackhole_store.py,
loaded through SGLang's `dynamic` backend): written, queried, never read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.server.server import Server, join_stops
from tests.server.test_measure_lane import SLICE

pytestmark = pytest.mark.timeout(900)

FEATURES = "lifo,async,kernels,host-buffer"
PREFETCH = {"prefetch_threshold": 1}
BLACKHOLE = {
    "backend_name": "blackhole",
    "module_path": "tests.server.blackhole_store",
    "class_name": "BlackHoleStore",
    **PREFETCH,
}


def _replay(server: Server, run_cli) -> tuple[int, dict[str, Any], str]:
    with server:
        code, out, err = run_cli(
            "replay", "--trace", SLICE, "--url", f"http://127.0.0.1:{server.port}",
            "--block-tokens", "1", "-n", "200", "-c", "1", "--max-output", "1", "-f", "json",
        )  # fmt: skip
        log = server.tail()
    join_stops()
    assert out, f"{err}\n{log}"
    return code, json.loads(out), err


def _server(models, tmp_path: Path, release: str, backend: str, extra: dict[str, Any]) -> Server:
    store = tmp_path / "store"
    store.mkdir()
    return Server(
        models["mha"], tmp_path, features=FEATURES, write_policy="write_through",
        extra_args=[
            "--hicache-storage-backend", backend,
            "--hicache-storage-backend-extra-config", json.dumps(extra),
            "--hicache-storage-prefetch-policy", "wait_complete", "--enable-metrics",
        ],
        extra_env={"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": str(store)}, release=release,
    )  # fmt: skip


def test_a_store_that_never_returns_a_hit_is_a_dead_l3_tier(
    models, tmp_path: Path, run_cli, release: str
) -> None:
    code, doc, err = _replay(_server(models, tmp_path, release, "dynamic", BLACKHOLE), run_cli)
    check = doc["tier_check"]
    counters = check["counters"]
    msg = f"{release}: {json.dumps(check, indent=1)}\n{err}"
    assert code == 1, msg  # a finding: exit 1, "findings of a report"
    assert doc["measured"]["requests"]["failed"] == 0, msg
    assert counters is not None and counters["storage_written_tokens"] > 0, msg
    assert counters["served_tokens"]["storage"] == 0, msg
    (dead,) = [f for f in check["findings"] if f["tier"] == "storage"]
    assert dead["verdict"] == "dead", msg
    assert dead["summary"].startswith("L3 (storage): written "), msg
    assert dead["summary"].endswith(" tokens, served none"), msg


def test_the_same_run_with_sglangs_file_store_finds_l3_serving(
    models, tmp_path: Path, run_cli, release: str
) -> None:
    code, doc, err = _replay(_server(models, tmp_path, release, "file", PREFETCH), run_cli)
    check = doc["tier_check"]
    msg = f"{release}: {json.dumps(check, indent=1)}\n{doc['comparison']}\n{err}"
    assert doc["measured"]["tokens"]["cached_storage"] > 0, msg
    assert check["counters"]["served_tokens"]["storage"] > 0, msg
    assert not [f for f in check["findings"] if f["tier"] == "storage"], msg
    assert code in (0, 1), msg  # another tier may still be named; L3 is not
