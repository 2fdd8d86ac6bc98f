"""L3 in running sglang servers on CPU, on both ends of the supported range (0.5.20 and 0.5.23,
each in its own environment), every server launched through `xputune launch sglang --l3 ...`,
everything on 127.0.0.1 and stopped by pid.

  mooncake  one mooncake_master (started here), servers A and B on it over tcp: A serves a
            300-token prompt P; B, which never saw P, serves it from the pool (storage tokens,
            the same greedy tokens), and a prompt nobody served is a miss on B. The copies
            between device and host ran through xputune's page_first operators (counters).
  file      one server with --l3 file: P, /flush_cache, P again comes from the folder.
For the MLA (DeepSeek-V2-style) and MHA (Llama-style) tiny models of tests/server/models.py.
XPUTUNE_SERVER_REPORT=<file> also writes what each test saw (tests/server/test_server_lane.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.server import scenarios
from tests.server.server import Server, store_unavailable
from xputune.measure.ports import server_port

pytestmark = pytest.mark.timeout(900)

KINDS = ("mla", "mha")
FEATURES = "lifo,async,kernels,host-buffer"
_seen: dict[str, Any] = {}


@contextlib.contextmanager
def mooncake_master(workdir: Path):
    """mooncake_master on 127.0.0.1 (rpc and metrics on free ports), stopped by its pid."""
    import mooncake

    binary = Path(mooncake.__file__).parent / "mooncake_master"
    port = server_port()
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / "master.log", "wb") as log:
        proc = subprocess.Popen(
            [str(binary), f"--rpc_port={port}", "--rpc_address=127.0.0.1",
             f"--metrics_port={server_port()}", "--metrics_host=127.0.0.1"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    try:
        _wait_listening(port, proc, workdir / "master.log")
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    import socket

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"mooncake_master exited: {log.read_text(errors='replace')}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.2)
    raise AssertionError(f"mooncake_master not listening on {port}")


def _l3_server(model: Path, workdir: Path, l3: list[str], release: str) -> Server:
    # wait_complete: SGLang's default (timeout) gives up on a prefetch after 1 s + 0.25 s per
    # 1K tokens, which 300 one-token pages read on two busy cores can miss: a slow hit would
    # then read as a miss. The test is about what L3 holds, not how fast this box reads it.
    return Server(
        model, workdir, FEATURES, write_policy="write_through",
        launcher_args=[*l3, "--l3-prefetch", "wait_complete"], release=release,
    )  # fmt: skip


def _mooncake(model: Path, workdir: Path, release: str) -> dict[str, Any]:
    p = scenarios.prompts()
    with mooncake_master(workdir / "master") as master:
        l3 = ["--l3", "mooncake", "--l3-master", master, "--l3-protocol", "tcp",
              "--l3-segment-gb", "0.25", "--l3-host", "127.0.0.1"]  # fmt: skip
        # A stays up while B serves: P's pages live in the segment A mounted into the pool.
        with _l3_server(model, workdir / "a", l3, release) as a:
            a_first = a.generate(p["A"])
            a_stats = a.stats(settle=2.0)  # the backup to the pool is asynchronous
            with _l3_server(model, workdir / "b", l3, release) as b:
                b_first = b.generate(p["A"])
                b_fresh = b.generate(p["B"])
                b_stats = b.stats()
                log = a.log() + b.log()
    return {
        "a": a_first, "b": b_first, "b_fresh": b_fresh, "a_stats": a_stats,
        "b_stats": b_stats, "log": log,
    }  # fmt: skip


def _file(model: Path, workdir: Path, release: str) -> dict[str, Any]:
    p = scenarios.prompts()
    folder = workdir / "l3"
    folder.mkdir(parents=True)
    l3 = ["--l3", "file", "--l3-dir", str(folder)]
    with _l3_server(model, workdir / "s", l3, release) as server:
        first = server.generate(p["A"])
        files = _pages_written(folder, scenarios.LENGTH - 1)  # the backup is asynchronous
        # SGLang flushes only once no transfer is in flight: it waits up to 30 s for that
        status, reply = server.post("/flush_cache?timeout=30")
        assert status == 200, reply
        again = server.generate(p["A"])
        return {"first": first, "again": again, "files": files, "stats": server.stats(),
                "log": server.log()}  # fmt: skip


def _pages_written(folder: Path, want: int, limit: float = 90.0) -> list[str]:
    """The .bin pages in `folder` once `want` are there (or the limit passed), and settled:
    a flush while they are still being written cancels the rest (HiCacheController.reset)."""
    deadline = time.monotonic() + limit
    while True:
        pages = sorted(f.name for f in folder.iterdir() if f.suffix == ".bin")
        if len(pages) >= want or time.monotonic() > deadline:
            time.sleep(1.0)
            return sorted(f.name for f in folder.iterdir() if f.suffix == ".bin")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def l3_lane(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    reason = store_unavailable()

    def get(release: str, kind: str, backend: str) -> dict[str, Any]:
        if backend == "mooncake" and reason:
            pytest.skip(reason)
        key = f"{release}/{kind}/{backend}"
        if key not in _seen:
            workdir = tmp_path_factory.mktemp(f"l3-{release}-{kind}-{backend}")
            t0 = time.monotonic()
            run = _mooncake if backend == "mooncake" else _file
            _seen[key] = run(models[kind], workdir, release)
            _seen[key]["seconds"] = round(time.monotonic() - t0, 1)
        return _seen[key]

    yield get
    report = os.environ.get("XPUTUNE_SERVER_REPORT")
    if report:  # beside the main lane's report: <file>.l3.json
        summary = {k: {n: v for n, v in r.items() if n != "log"} for k, r in _seen.items()}
        Path(f"{report}.l3.json").write_text(json.dumps(summary, indent=1, default=vars))


@pytest.mark.parametrize("kind", KINDS)
def test_a_prompt_one_server_cached_is_a_storage_hit_on_another(
    l3_lane, release: str, kind: str
) -> None:
    run = l3_lane(release, kind, "mooncake")
    a, b, fresh = run["a"], run["b"], run["b_fresh"]
    msg = f"{release} {kind}: A {a}; B {b}; B's unseen prompt {fresh}"
    assert a.cached == 0, msg
    assert b.storage >= scenarios.LENGTH - 16 and b.device == 0, msg  # from A, via the pool
    assert b.output_ids == a.output_ids, msg
    assert b.logprobs == pytest.approx(a.logprobs, abs=1e-3), msg
    assert fresh.cached == 0 and fresh.storage == 0, msg  # the pool holds only what was served
    assert "HiCache prefetch success" in run["log"], msg


@pytest.mark.parametrize("kind", KINDS)
def test_the_page_first_operators_are_the_ones_the_servers_called(
    l3_lane, release: str, kind: str
) -> None:
    run = l3_lane(release, kind, "mooncake")
    a, b = run["a_stats"], run["b_stats"]
    msg = f"{release} {kind}: A {a}; B {b}"
    mla = "_mla" if kind == "mla" else ""
    assert a.get(f"kernel_transfer_kv_all_layer{mla}_lf_pf", 0) > 0, msg  # D2H into page_first
    assert b.get(f"kernel_transfer_kv_per_layer{mla}_pf_lf", 0) > 0, msg  # H2D out of it
    assert not any(k.startswith("kernel_") and not k.endswith(("_lf_pf", "_pf_lf"))
                   for k in (*a, *b)), msg  # fmt: skip
    assert b.get("h2d_tokens", 0) >= run["b"].storage, msg


@pytest.mark.parametrize("kind", KINDS)
def test_the_file_backend_round_trips_after_a_flush(l3_lane, release: str, kind: str) -> None:
    run = l3_lane(release, kind, "file")
    first, again = run["first"], run["again"]
    msg = f"{release} {kind}: first {first}, after /flush_cache {again}, {len(run['files'])} files"
    assert first.cached == 0, msg
    assert len(run["files"]) >= scenarios.LENGTH - 16, msg  # one .bin per page (page size 1)
    assert again.storage >= scenarios.LENGTH - 16 and again.device == 0, msg
    assert again.output_ids == first.output_ids, msg


@pytest.mark.parametrize("backend", ["mooncake", "file"])
def test_the_cpu_pinning_workaround_is_named_in_the_startup_line(
    l3_lane, release: str, backend: str
) -> None:
    log = l3_lane(release, "mla", backend)["log"]
    lines = [ln for ln in log.splitlines() if "xputune cache plugin on sglang" in ln]
    assert lines and all("worked around: cpu_unpinned_pages" in ln for ln in lines), lines
