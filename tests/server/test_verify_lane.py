"""`xputune verify` on a real SGLang server's ranks, on both ends of the supported range.

One CPU server per release, MLA at TP 2 with the plugin's host buffer (each rank its own
HostBuffer; --hicache-ratio 40 makes each pool ~7.5 MiB, so whole 2 MiB huge pages fit),
started through `xputune launch sglang --verify --no-keep`: the launcher stays beside SGLang
and prints its verification after the plugin's startup line. Then `xputune verify --url` and
`--pid` read the same ranks. What they report is checked against what is really there on this
one-node machine: each rank is a scheduler process below the server, its pool is the mapping
of the size /server_info implies, on node 0, with the huge-page share the kernel's own smaps
gives (read here independently); drift is reported exactly when that share falls short.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.server.scenarios import BASE
from tests.server.server import DEVICE, REPO, Server

pytestmark = pytest.mark.timeout(900)
STARTUP = "xputune cache plugin on sglang"
VERIFIED = "xputune verify: 2 ranks of pid "


def _verify(*args: str) -> tuple[int, dict]:
    out = subprocess.run(
        [sys.executable, "-m", "xputune", "verify", *args, "--no-keep", "-f", "json"],
        capture_output=True, text=True, timeout=180, cwd=REPO,
    )  # fmt: skip
    assert out.stdout, out.stderr
    return out.returncode, json.loads(out.stdout)


def _smaps_sizes(pid: int, start: int) -> dict[str, int]:
    """The mapping's sizes in bytes, read here with a regex of our own."""
    text = Path(f"/proc/{pid}/smaps").read_text()
    block = text.split(f"{start:x}-", 1)[1].split("VmFlags", 1)[0]
    return {k: int(v) * 1024 for k, v in re.findall(r"^(\w+):\s+(\d+) kB", block, re.M)}


def _children(pid: int) -> set[int]:
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def _wait_for(server: Server, text: str, seconds: float = 120) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        log = server.log()
        if text in log:
            return log
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in the log:\n{server.tail(60)}")


def _check(doc: dict, code: int) -> None:
    """Every rank, against the kernel's own answers."""
    assert [r["rank"] for r in doc["ranks"]] == ["TP0", "TP1"], doc
    sglang = doc["ranks"][0]["pid"]
    assert doc["pool_expected_from"].startswith("/server_info of http://127.0.0.1:"), doc
    for rank in doc["ranks"]:
        assert rank["title"] == f"sglang::scheduler_{rank['rank']}"
        plan = rank["plan"]
        assert plan["nodes"] == [0] and plan["huge_pages"] is True, plan
        assert plan["source"] in ("the host's only NUMA node",) or "from the topology" in plan[
            "source"], plan  # fmt: skip
        pool = rank["pool"]
        assert pool is not None, doc["warnings"]
        assert pool["kind"] == "anon" and {"hg", "dc"} <= set(pool["vm_flags"]), pool
        expected = doc["pool_expected_bytes"]
        assert expected <= pool["size_bytes"] < expected + 4096, (expected, pool)
        assert pool["nodes"] == [{"node": 0, "bytes": pool["resident_bytes"], "share": 1.0}]
        sizes = _smaps_sizes(rank["pid"], int(pool["start"], 16))
        assert pool["resident_bytes"] == sizes["Rss"] and pool["huge_bytes"] == sizes[
            "AnonHugePages"], (pool, sizes)  # fmt: skip
        assert rank["cpus"]["on_node"] == "all"
        kinds = [f["kind"] for f in rank["findings"]]
        assert kinds in ([], ["small-pages"]), rank
        assert rank["verdict"] == ("drift" if kinds else "ok")
        assert rank["pid"] != sglang or rank["rank"] == "TP0"
    drift = any(r["findings"] for r in doc["ranks"])
    assert code == (1 if drift else 0) and doc["drift"] is drift


def test_verify_reads_a_live_servers_ranks(models, release: str, tmp_path: Path) -> None:
    if DEVICE != "cpu":
        pytest.skip("the lane reads a one-node CPU host")
    server = Server(
        models["mla"], tmp_path / "server", features=BASE, write_policy="write_through",
        extra_args=["--tp-size", "2", "--hicache-ratio", "40"],
        launcher_args=["--verify", "--no-keep"], release=release,
    )  # fmt: skip
    with server:
        log = _wait_for(server, VERIFIED)
        assert log.index(STARTUP) < log.index(VERIFIED), server.tail(60)
        line = next(ln for ln in log.splitlines() if VERIFIED in ln)
        assert line.endswith(": every rank's pool where it was planned") or (
            "drift in TP" in line and "small-pages" in line), line  # fmt: skip
        assert server.proc is not None
        launcher = server.proc.pid  # stays beside SGLang with --verify
        (sglang,) = [p for p in _children(launcher)]

        code, by_url = _verify("--url", f"http://127.0.0.1:{server.port}")
        assert by_url["server"]["pid"] == sglang  # the process listening on the port
        _check(by_url, code)
        assert {r["pid"] for r in by_url["ranks"]} <= _children(sglang)

        code, by_pid = _verify("--pid", str(launcher))
        assert by_pid["server"]["pid"] == launcher
        _check(by_pid, code)
        assert [r["pid"] for r in by_pid["ranks"]] == [r["pid"] for r in by_url["ranks"]]

        url = f"http://127.0.0.1:{server.port}"
        table = subprocess.run(
            [sys.executable, "-m", "xputune", "verify", "--url", url, "--no-keep"],
            capture_output=True, text=True, timeout=180, cwd=REPO, env={**os.environ,
                                                                          "COLUMNS": "80"},
        )  # fmt: skip
        assert table.returncode == code and "2 ranks of pid " in table.stdout, table.stderr
        assert max(len(ln) for ln in table.stdout.splitlines()) <= 80
        shown = log[log.index(STARTUP) - 30 :].splitlines()
        print(f"\n--- {release}: the launcher's log, from the plugin's startup line ---")
        print("\n".join(ln for ln in shown if "xputune" in ln or ln[:1] in "┏┃┡│└ptw2"))
        print(f"--- {release}: xputune verify --url {url} ---\n{table.stdout}{table.stderr}")
