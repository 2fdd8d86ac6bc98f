"""launch cluster: N instances as launch sglang would run them, on their own cards and ports,
behind sglang-router; dry runs on the seed box, and one real set on this machine (the stand-in
SGLang of tests/measure/fakesglang.py behind the real sglang-router) started, driven through
the router and stopped as one."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.measure.fakesglang import write_model

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "tests" / "measure" / "fake_site"
SEED = ("--example", "h3c-hygon-p800")
GLM = ("--", "--model-path", "zai-org/GLM-5", "--tp", "4")


def _members(out: str) -> dict[str, list[str]]:
    """The dry run's members: its `# name` lines, each with its command's words."""
    members: dict[str, list[str]] = {}
    name = ""
    for block in out.replace("\\\n", " ").splitlines():
        if block.startswith("# "):
            name = block[2:]
        elif name:
            members[name] = shlex.split(block)
    return members


def test_two_instances_split_the_cards_behind_the_router(run_cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    args = ("launch", "cluster", "-n", *SEED, "--instances", "2", "--router", "round_robin")
    code, out, err = run_cli(*args, *GLM)
    assert code == 1  # the seed box drifts: the launch would refuse, as launch sglang's would
    assert "would refuse: 26 critical setting(s) drift from profile hygon-p800" in err
    assert run_cli(*args, "--force", *GLM)[0] == 0
    members = _members(out)
    first, second, router = members.values()
    assert list(members)[:2] == [
        "instance 0 (port 30001, xpu0,xpu1,xpu2,xpu3)",
        "instance 1 (port 30002, xpu4,xpu5,xpu6,xpu7)",
    ]
    assert "XPU_VISIBLE_DEVICES=0,1,2,3" in first and "XPU_VISIBLE_DEVICES=4,5,6,7" in second
    assert first[first.index("--port") + 1] == "30001" and "sglang.launch_server" in first
    assert first[first.index("--numa-node") + 1 :][:4] == ["1", "1", "3", "3"]
    assert router[1:3] == ["-m", "sglang_router.launch_router"]
    workers = router[router.index("--worker-urls") + 1 : router.index("--policy")]
    assert workers == ["http://127.0.0.1:30001", "http://127.0.0.1:30002"]
    assert router[router.index("--policy") + 1] == "round_robin"
    assert out.splitlines()[-1] == "# the cluster answers at http://127.0.0.1:30000"
    long = [ln for ln in out.splitlines() if len(ln) > 80]
    assert all(len(max(ln.split(), key=len)) > 40 for ln in long)  # only a long path may


def _master_on_path(folder: Path, monkeypatch, mode: int = 0o755) -> Path:
    """A mooncake_master first on PATH, the mooncake package's own out of the way."""
    from xputune.launch import cluster

    folder.mkdir(parents=True, exist_ok=True)
    binary = folder / "mooncake_master"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(mode)
    monkeypatch.setattr(cluster, "package_binary", lambda name: None)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return binary


MOONCAKE = ("--l3", "mooncake", "--l3-protocol", "tcp")


def test_a_shared_mooncake_store_gets_its_master_in_the_set(
    run_cli, tmp_path: Path, monkeypatch
) -> None:
    binary = _master_on_path(tmp_path / "bin", monkeypatch)
    code, out, _ = run_cli(
        "launch", "cluster", "-n", *SEED, "--instances", "2", "--force", *MOONCAKE, *GLM
    )
    assert code == 0
    members = _members(out)
    assert next(iter(members)) == "master" and members["master"] == [
        str(binary), "--rpc_port=50051", "--rpc_address=127.0.0.1", "--metrics_host=127.0.0.1",
    ]  # fmt: skip
    instances = [words for name, words in members.items() if name.startswith("instance")]
    assert len(instances) == 2
    for words in instances:
        config = json.loads(words[words.index("--hicache-storage-backend-extra-config") + 1])
        assert config["master_server_address"] == "127.0.0.1:50051"


def test_the_master_the_set_starts_is_not_refused_for_not_answering_yet(
    run_cli, tmp_path: Path, monkeypatch
) -> None:
    """The instances' L3 preflight asks whether the master answers; the master a cluster
    starts itself is started first, so asking before the set starts would refuse every such
    launch. A master named elsewhere is still asked."""
    from xputune.launch import l3check

    _master_on_path(tmp_path / "bin", monkeypatch)
    monkeypatch.setattr(l3check, "_mooncake_missing", lambda *a: None)
    code, _, err = run_cli(
        "launch", "cluster", "-n", *SEED, "--instances", "2", *MOONCAKE, *GLM
    )  # fmt: skip
    assert code == 1 and "would refuse: 26 critical setting(s) drift" in err  # the seed box
    assert "does not answer" not in err, err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    code, _, err = run_cli(
        "launch", "cluster", "-n", *SEED, "--instances", "2", *MOONCAKE, "--l3-master", closed,
        *GLM,
    )  # fmt: skip
    assert code == 1 and f"would refuse: the Mooncake master {closed} does not answer" in err


def test_a_master_another_user_can_change_is_never_run(
    run_cli, tmp_path: Path, monkeypatch
) -> None:
    """Run as root, a master found on PATH that anyone may rewrite would run a planted binary."""
    binary = _master_on_path(tmp_path / "bin", monkeypatch, mode=0o777)
    code, _, err = run_cli(
        "launch", "cluster", "-n", *SEED, "--instances", "2", "--force", *MOONCAKE, *GLM
    )
    assert code == 3  # what this host lacks: --force does not launch it
    assert f"would refuse: {binary} is not a regular executable file" in err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--instances", "3", *GLM), "3 instance(s) of TP 4 need 12 cards; this host has 8"),
        (("--instances", "2", *GLM, "--port", "9"), "--port is the cluster's to set"),
        (("--instances", "2", "--first-port", "29999", *GLM), "overlap or pass 65535"),
        (("--instances", "0", *GLM), "invalid value for '--instances'"),
    ],
)
def test_what_cannot_run_is_one_line(run_cli, args, says) -> None:
    code, out, err = run_cli("launch", "cluster", "-n", *SEED, "--force", *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and says in err, err


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _get(url: str, timeout: float = 2.0) -> bytes:
    return urllib.request.urlopen(url, timeout=timeout).read()


@pytest.mark.timeout(180)
def test_a_real_set_answers_through_the_router_and_stops_as_one(tmp_path: Path) -> None:
    pytest.importorskip("sglang_router", reason="sglang-router is not installed here")
    router_port, first, second = _free_ports(3)
    if second != first + 1:
        first, second = first, first + 1
    env = {
        **os.environ, "PYTHONPATH": os.pathsep.join([str(SITE), str(ROOT)]),
        "COLUMNS": "200", "XPUTUNE_SGLANG_PYTHON": sys.executable,
    }  # fmt: skip
    env.pop("XPUTUNE_VENDOR_LIBRARIES", None)
    model = write_model(str(tmp_path / "model"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "xputune", "launch", "cluster", "--instances", "2", "--force",
         "--router", "round_robin", "--router-port", str(router_port), "--first-port",
         str(first), "--", "--model-path", model, "--device", "cpu", "--max-total-tokens",
         "1024"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")[-3000:]
            try:
                workers = json.loads(_get(f"http://127.0.0.1:{router_port}/workers"))["workers"]
                if len(workers) == 2 and all(w["is_healthy"] for w in workers):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the router never saw both instances healthy"
            time.sleep(0.5)
        body = json.dumps({"input_ids": [11, 12, 13], "sampling_params": {"max_new_tokens": 1}})
        for _ in range(2):
            request = urllib.request.Request(
                f"http://127.0.0.1:{router_port}/generate", data=body.encode(),
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            answer = json.loads(urllib.request.urlopen(request, timeout=30).read())
            assert answer["meta_info"]["prompt_tokens"] == 3
        for port in (first, second):
            assert _get(f"http://127.0.0.1:{port}/health") is not None
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0  # a stop that was asked for
        said = proc.stdout.read().decode(errors="replace")
        assert said.count(": started, pid ") == 3  # two instances and the router
        assert "SIGTERM: stopping 3 member(s)" in said
        for port in (router_port, first, second):
            with pytest.raises(OSError):
                _get(f"http://127.0.0.1:{port}/health", timeout=1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
