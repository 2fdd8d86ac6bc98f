"""The live path without SGLang: this very test process's host buffer, read through the live
host view, checked against the kernel's other answers (move_pages, its own smaps as the test
reads it); and a stand-in server whose child is retitled as SGLang's schedulers are, found by
`xputune verify --pid`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from xputune.errors import HostError
from xputune.hicache.hostbuf import HostBuffer
from xputune.host import open_host
from xputune.host.reader import Reader
from xputune.placement.intent import Intent
from xputune.placement.judge import judge
from xputune.placement.procs import RankId
from xputune.placement.read import read_rank

MIB = 1 << 20
REPO = Path(__file__).resolve().parents[2]
RANK = RankId(0, None, None, "TP0")


def _kernel_huge_bytes(pid: int | str, start: int) -> tuple[int, int]:
    """(Rss, AnonHugePages) of the mapping at `start`, read here with a regex of our own."""
    text = Path(f"/proc/{pid}/smaps").read_text()
    block = text.split(f"{start:x}-", 1)[1].split("VmFlags", 1)[0]
    sizes = dict(re.findall(r"^(\w+):\s+(\d+) kB", block, re.M))
    return int(sizes["Rss"]) * 1024, int(sizes["AnonHugePages"]) * 1024


def _thp_mode() -> str:
    text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    return text.split("[", 1)[1].split("]", 1)[0]


@pytest.fixture
def bound_buffer():
    try:
        buf = HostBuffer(64 * MIB, node=0)
    except HostError as exc:  # a container that forbids mbind: nothing to read here
        pytest.skip(f"cannot bind a buffer here: {exc}")
    array = buf.array()
    array[::4096] = 7  # a numpy view over the buffer, written through
    yield buf
    del array
    buf.close()


def test_this_process_read_live(bound_buffer: HostBuffer) -> None:
    reader = Reader(open_host())
    facts = read_rank(reader, os.getpid(), RANK, "pytest", 64 * MIB)
    pool = facts.pool
    assert pool is not None, reader.warnings
    assert pool.smaps.start == bound_buffer.address and pool.smaps.size == 64 * MIB
    assert pool.kind == "anon" and {"hg", "dc"} <= set(pool.smaps.vm_flags)
    assert pool.numa is not None and str(pool.numa.policy) == "bind:0"
    # where the pages are: numa_maps as read, against move_pages' own answer
    assert pool.numa.bytes_per_node == {0: 64 * MIB}
    assert set(bound_buffer.placement.pages) == {0} and bound_buffer.placement.missing == 0
    # the page size: smaps as read, against the same file read by the test itself
    rss, huge = _kernel_huge_bytes("self", bound_buffer.address)
    assert (pool.smaps.resident, pool.smaps.huge) == (rss, huge)
    if _thp_mode() == "never":
        assert huge == 0
    assert facts.mems is not None and 0 in facts.mems
    assert facts.cpus is not None and set(facts.cpus) == os.sched_getaffinity(0)
    plan = Intent("bind", (0,), True, "thp", False, 0, "this test")
    v = judge(facts, plan, {0: tuple(sorted(os.sched_getaffinity(0)))}, None)
    assert v.resident == 64 * MIB and v.share(0) == 1.0 and v.cpus_on_node == "all"
    small = [f.kind for f in v.findings] == ["small-pages"]
    assert small == (huge < 0.9 * rss), (huge, rss, v.findings)


def test_four_kilobyte_pages_where_huge_ones_were_planned_are_drift() -> None:
    try:
        buf = HostBuffer(32 * MIB, node=0, huge=False)  # MADV_NOHUGEPAGE: 4 KB pages only
    except HostError as exc:
        pytest.skip(f"cannot bind a buffer here: {exc}")
    try:
        facts = read_rank(Reader(open_host()), os.getpid(), RANK, "pytest", 32 * MIB)
        assert facts.pool is not None and facts.pool.smaps.start == buf.address
        assert facts.pool.smaps.huge == 0 and "nh" in facts.pool.smaps.vm_flags
        plan = Intent("bind", (0,), True, "thp", False, 0, "this test")
        v = judge(facts, plan, {}, None)
        assert [f.kind for f in v.findings] == ["small-pages"]
    finally:
        buf.close()


@pytest.fixture
def standin():
    """The stand-in server (standin_server.py) with the plugin's NUMA variable; its pids."""
    env = {
        **os.environ,
        "XPUTUNE_HICACHE_NUMA": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))),
    }
    argv = [
        sys.executable,
        str(Path(__file__).with_name("standin_server.py")),
        str(48 * MIB),
        "0",
        "--",
        "--model-path",
        "x",
        "--hicache-size",
        str(48 * MIB / 1e9),
        "--port",
        "1",
    ]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, start_new_session=True)
    try:
        line = proc.stdout.readline().decode() if proc.stdout else ""
        if not line.strip():
            pytest.skip("the stand-in did not start (cannot bind a buffer here?)")
        parent, child = (int(x) for x in line.split())
        yield parent, child
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the stand-in and its child
        proc.wait(timeout=30)


def test_a_retitled_child_of_a_stand_in_server_is_found_and_judged(standin) -> None:
    parent, child = standin
    out = subprocess.run(
        [sys.executable, "-m", "xputune", "verify", "--pid", str(parent), "--no-keep", "-fjson"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    doc = json.loads(out.stdout)
    (rank,) = doc["ranks"]
    assert rank["pid"] == child and rank["title"] == "sglang::scheduler_TP0" and rank["tp"] == 0
    assert rank["plan"]["source"] == f"XPUTUNE_HICACHE_NUMA[0] in the environment of pid {parent}"
    assert rank["plan"]["mode"] == "bind" and rank["plan"]["nodes"] == [0]
    pool = rank["pool"]
    assert pool["size_bytes"] == 48 * MIB and pool["policy"] == "bind:0"
    assert pool["nodes"] == [{"node": 0, "bytes": 48 * MIB, "share": 1.0}]
    rss, huge = _kernel_huge_bytes(child, int(pool["start"], 16))
    assert (pool["resident_bytes"], pool["huge_bytes"]) == (rss, huge)
    assert doc["pool_expected_from"].startswith("--hicache-size 0.050331648")
    expected = "drift" if huge < 0.9 * rss else "ok"
    assert rank["verdict"] == expected and out.returncode == (1 if expected == "drift" else 0)
    # the environ of a retitled process is blank, as setproctitle leaves it
    assert not Path(f"/proc/{child}/environ").read_bytes().strip(b"\0")
