"""launch l3-donors: the donors `plan --role decode` plans, as shell lines and as supervised
processes (fake mooncake_client scripts and sleepers: this host has no RDMA NIC, so a live run
through the CLI only refuses). No test leaves a process behind: every child's pid is recorded
and killed in teardown if it is still there."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.fixtures.trees import host_tree
from xputune.host import open_host
from xputune.launch import donors
from xputune.launch.sglang import LaunchError
from xputune.plan.capacity import GB
from xputune.plan.l3 import L3Request
from xputune.topology.discover import discover

ROOT = Path(__file__).resolve().parents[2]
SEED = ("--example", "h3c-hygon-p800")
MASTER = ("--l3-master", "m1:50051")
#: The seed box's RDMA NICs: (device, NUMA node), in bus order.
SEED_NICS = [("mlx5_0", 1), ("mlx5_1", 3), ("mlx5_2", 5), ("mlx5_3", 7)]


@pytest.fixture(scope="module")
def seed():
    return discover(open_host(None, "h3c-hygon-p800"))


@pytest.fixture
def pids():
    """Pids of processes a test started (directly or not); killed at the end if still alive."""
    found: list[int] = []
    yield found
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


def _fake_client(folder: Path, mode: int = 0o755) -> Path:
    """A mooncake_client that records its argv and pid (by --port) and sleeps."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "mooncake_client"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys, time\n"
        "port = next(a for a in sys.argv if a.startswith('--port='))[7:]\n"
        "out = os.path.join(os.path.dirname(sys.argv[0]), port)\n"
        "with open(out + '.tmp', 'w') as f:\n"
        "    json.dump({'pid': os.getpid(), 'argv': sys.argv}, f)\n"
        "os.rename(out + '.tmp', out + '.json')\n"
        "time.sleep(120)\n"
    )
    script.chmod(mode)
    return script


@pytest.fixture(autouse=True)
def _tools_at_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """numactl and a mooncake_client on PATH, whatever this machine has: a dry run that
    would refuse ends 3, so each test takes away only what it is about (no_numactl, ...)."""
    folder = tmp_path / "tools"
    folder.mkdir()
    numactl = folder / "numactl"
    numactl.write_text('#!/bin/sh\nexec "$@"\n')
    numactl.chmod(0o755)
    _fake_client(folder)
    monkeypatch.setattr(donors, "package_client", lambda: None)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture
def fake_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake first on PATH, and the mooncake package's own binary out of the way: the only
    mooncake_client there is (the test may take it away)."""
    (tmp_path / "tools" / "mooncake_client").unlink()
    script = _fake_client(tmp_path / "bin")
    monkeypatch.setattr(donors, "package_client", lambda: None)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    return script


@pytest.fixture
def no_numactl(monkeypatch: pytest.MonkeyPatch) -> None:
    real = donors.shutil.which
    monkeypatch.setattr(
        donors.shutil, "which", lambda name, *a, **k: None if name == "numactl" else real(name)
    )


def _plan_donors(run_cli, *extra: str) -> list[dict]:
    code, out, err = run_cli(
        "plan", *SEED, "-m", "glm-5", "--l3", "mooncake", "--role", "decode", *MASTER, *extra,
        "-f", "json",
    )  # fmt: skip
    assert code == 0, err
    return json.loads(out)["l3"]["donors"]


def _logical(out: str) -> list[str]:
    """The shell lines of `out`, a line continued with a backslash joined to the next."""
    return out.replace("\\\n", " ").splitlines()


def _lines(out: str) -> list[list[str]]:
    return [shlex.split(line) for line in _logical(out)]


def test_dry_run_on_the_seed_box_is_plan_s_donors_one_bound_line_per_rdma_nic(run_cli) -> None:
    planned = _plan_donors(run_cli)
    code, out, err = run_cli("launch", "l3-donors", "-n", *SEED, *MASTER)
    assert code == 0, err
    lines = _lines(out)
    assert len(lines) == len(SEED_NICS) == len(planned)
    client = donors.find_client()[0] or donors.CLIENT
    for words, (rdma, node), plan in zip(lines, SEED_NICS, planned, strict=True):
        assert words[:3] == ["numactl", f"--cpunodebind={node}", f"--membind={node}"]
        assert f"--device_names={rdma}" in words
        # plan's own command, word for word, with the binary that would run
        assert words == [client if w == donors.CLIENT else w for w in plan["command"]]
        # the size in the unit its flag gives it (GiB), said so: not 146.029 GB beside 136GB
        gib = next(w for w in words if w.startswith("--global_segment_size="))[22:-2]
        assert f"donor {plan['nic']} ({rdma}) on node {node}: {gib} GiB (" in err
        assert f"(--global_segment_size={gib}GB: Mooncake's GB is 2^30 bytes), port " in err
        assert round(int(gib) * 2**30 / 1e9, 3) == plan["segment_gb"]  # JSON keeps its GB
    assert "nodes 0 2 4 6 have no RDMA NIC" in err


def test_plan_s_table_says_each_donor_s_size_as_its_flag_does(run_cli, monkeypatch) -> None:
    """plan --role decode prints the same donors: their size in GiB, beside the flag."""
    monkeypatch.setenv("COLUMNS", "1000")  # each donor's line whole
    code, out, err = run_cli(
        "plan", *SEED, "-m", "glm-5", "--l3", "mooncake", "--role", "decode", *MASTER
    )
    assert code == 0, err
    said = [line for line in out.splitlines() if line.startswith("donor ")]
    assert len(said) == len(SEED_NICS)
    assert said[0] == (
        "donor ens1np0 (mlx5_0) on node 1: 136 GiB (--global_segment_size=136GB: Mooncake's GB "
        "is 2^30 bytes)"
    )
    assert all("146" not in line for line in said)  # no 146.029 GB beside it


def test_the_lines_are_shell_that_takes_the_address_from_mooncake_host(run_cli) -> None:
    code, out, _ = run_cli("launch", "l3-donors", "-n", *SEED, *MASTER, "--l3-protocol", "tcp")
    assert code == 0
    line = _logical(out)[0]
    assert '"--host=${MOONCAKE_HOST:?' in line  # double-quoted: the shell expands it
    show = f'set -- {line}; printf "%s\\n" "$@"'
    done = subprocess.run(
        ["sh", "-c", show], capture_output=True, text=True, timeout=30,
        env={**os.environ, "MOONCAKE_HOST": "10.0.0.9"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    words = done.stdout.splitlines()
    assert "--host=10.0.0.9" in words and "--protocol=tcp" in words
    assert not any(w.startswith("--device_names") for w in words)  # tcp: no device
    env = {k: v for k, v in os.environ.items() if k != "MOONCAKE_HOST"}
    unset = subprocess.run(["sh", "-c", show], capture_output=True, text=True, env=env, timeout=30)
    assert unset.returncode != 0 and "set MOONCAKE_HOST" in unset.stderr


def test_the_node_s_address_from_the_flag_or_the_environment(run_cli, monkeypatch) -> None:
    code, out, _ = run_cli("launch", "l3-donors", "-n", *SEED, *MASTER, "--l3-host", "10.0.0.7")
    assert code == 0
    assert all("--host=10.0.0.7" in words for words in _lines(out))
    monkeypatch.setenv("MOONCAKE_HOST", "fd00::7")
    code, out, err = run_cli("launch", "l3-donors", "-n", *SEED, *MASTER)
    assert code == 0 and "from MOONCAKE_HOST" in err
    assert all("--host=fd00::7" in words for words in _lines(out))
    for bad in ("10.0.0.7 --evil", "a\x1b[31mb", "host;rm"):
        code, out, err = run_cli("launch", "l3-donors", "-n", *SEED, *MASTER, "--l3-host", bad)
        assert code == 2 and out == ""
        assert err.startswith("xputune: error: --l3-host") and err.count("\n") == 1
        assert "\x1b" not in err


def test_a_cap_is_split_and_the_pool_is_put_in_nodes(run_cli) -> None:
    planned = _plan_donors(run_cli, "--l3-segment-gb", "400")
    code, out, err = run_cli(
        "launch", "l3-donors", "-n", *SEED, *MASTER, "--l3-segment-gb", "400",
        "--l3-pool-gb", "2000",
    )  # fmt: skip
    assert code == 0, err
    sizes = [w for words in _lines(out) for w in words if w.startswith("--global_segment_size")]
    # Mooncake reads "NGB" as GiB, and a donor gives whole ones
    gib = [round(d["segment_gb"] * 1e9 / 2**30) for d in planned]
    assert sizes == [f"--global_segment_size={n}GB" for n in gib]
    assert sum(d["segment_gb"] for d in planned) <= 400
    total = sum(d["segment_gb"] for d in planned)
    assert f"donates {total:g} GB of the 2,000 GB pool: {-(-2000 // int(total))} node(s)" in err


def test_numactl_missing_is_refused_unless_forced_then_unbound(
    run_cli, fake_client, no_numactl
) -> None:
    code, out, err = run_cli("launch", "l3-donors", "-n", *SEED, *MASTER)
    assert code == 3  # the status the run would end with: `-n && run` tells them apart
    assert "would refuse: numactl is missing" in err and "--force" in err
    assert all(words[0] == "numactl" for words in _lines(out))  # what would run, if allowed
    code, out, err = run_cli("launch", "l3-donors", "-n", *SEED, *MASTER, "--force")
    assert code == 0 and "would refuse" not in err
    assert "run unbound (--force)" in err
    assert all(words[0] == str(fake_client) for words in _lines(out))


def test_mooncake_client_from_path_or_said_missing(run_cli, fake_client, tmp_path) -> None:
    code, out, err = run_cli("launch", "l3-donors", "-n", *SEED, *MASTER)
    assert code == 0, err
    assert all(str(fake_client) in words for words in _lines(out))
    fake_client.chmod(0o777)  # anyone may rewrite it: root does not run it
    code, out, err = run_cli("launch", "l3-donors", "-n", *SEED, *MASTER)
    assert code == 3
    assert f"would refuse: {fake_client} is not a regular executable file" in err
    fake_client.unlink()
    code, out, err = run_cli("launch", "l3-donors", "-n", *SEED, *MASTER)
    assert "would refuse: mooncake_client not found" in err
    assert "mooncake-transfer-engine" in err


def test_each_reason_is_its_own_line(run_cli, fake_client, no_numactl) -> None:
    fake_client.unlink()
    code, _, err = run_cli("launch", "l3-donors", "-n", *SEED, *MASTER)
    said = [ln for ln in err.splitlines() if ln.startswith("would refuse: ")]
    assert code == 3 and len(said) == 2 and not any("; " in ln for ln in said), err


def test_the_package_s_own_binary_is_found_without_importing_it() -> None:
    found = donors.package_client()
    if found is None:
        pytest.skip("the mooncake package is not installed for this Python")
    assert found.name == "mooncake_client" and (found.parent / "__init__.py").is_file()
    assert donors.find_client() == (str(found.absolute()), None)
    probe = "import sys; from xputune.launch import donors; donors.package_client(); "
    probe += "print('mooncake' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.stdout.strip() == "False", done.stderr  # found, not imported


def test_no_live_run_from_a_recording_and_nothing_starts(run_cli, fake_client) -> None:
    tree = host_tree("h3c-hygon-p800")
    for where in (("--root", str(tree)), SEED):
        code, out, err = run_cli(
            "launch", "l3-donors", *where, *MASTER, "--l3-host", "10.0.0.7", "--force"
        )
        assert code == 2 and out == ""
        assert "not from this host" in err and err.count("\n") == 1
    assert not list(fake_client.parent.glob("*.json"))  # no donor started
    code, out, err = run_cli("launch", "l3-donors", "-n", "--root", str(tree), *MASTER)
    assert code == 0 and len(_lines(out)) == len(SEED_NICS)


def test_a_live_run_here_refuses_in_one_line_without_an_rdma_nic(run_cli, fake_client) -> None:
    here = discover(open_host(None, None))
    if any(n.rdma and n.operstate in (None, "up") for n in here.nics):
        pytest.skip("this host has an RDMA NIC: a live run would start donors")
    code, out, err = run_cli("launch", "l3-donors", *MASTER, "--l3-host", "10.0.0.7")
    assert code == 2 and out == ""
    assert err.startswith("xputune: error: no RDMA NIC") and err.count("\n") == 1
    assert not list(fake_client.parent.glob("*.json"))


def test_bad_values_are_one_line(run_cli) -> None:
    for args, words in (
        (("--l3-master", "nowhere"), "expected HOST:PORT"),
        ((*MASTER, "--l3-protocol", "udp"), "tcp, rdma"),
        ((*MASTER, "--l3-segment-gb", "0"), "must be a positive number"),
        ((), "--l3-master"),
    ):
        code, out, err = run_cli("launch", "l3-donors", "-n", *SEED, *args)
        assert code == 2 and out == "", (args, err)
        assert err.startswith("xputune: error: ") and words in err and err.count("\n") == 1


# -- supervision ---------------------------------------------------------------------------


def _wait_for(folder: Path, count: int, timeout: float = 60.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(folder.glob("*.json"))
        if len(found) >= count:
            return [json.loads(p.read_text()) for p in found]
        time.sleep(0.05)
    raise AssertionError(f"{count} donors did not start in {timeout} s")


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.timeout(120)
def test_the_plan_s_donors_run_and_one_killed_stops_the_set(
    seed, fake_client, no_numactl, pids
) -> None:
    """The seed box's four donors, unbound (--force: no numactl here), as fake clients: each
    gets exactly the planned argv; SIGKILL to one ends the set with status 1, all stopped."""
    req = L3Request("mooncake", role="decode", master="m1:50051", local_hostname="10.0.0.7")
    prepared = donors.prepare(seed, req, force=True)
    assert not prepared.refusals and len(prepared.commands) == len(SEED_NICS)
    said: list[str] = []
    victim: list[int] = []

    def kill_one() -> None:
        started = _wait_for(fake_client.parent, len(SEED_NICS))
        pids.extend(d["pid"] for d in started)
        victim.append(started[1]["pid"])
        os.kill(started[1]["pid"], signal.SIGKILL)

    killer = threading.Thread(target=kill_one, daemon=True)
    killer.start()
    code = donors.supervise(prepared.commands, prepared.names, grace_s=5, say=said.append)
    killer.join(timeout=60)
    assert code == donors.DONOR_ENDED
    runs = _wait_for(fake_client.parent, len(SEED_NICS))
    assert sorted(r["argv"] for r in runs) == sorted(prepared.commands)
    assert all(_gone(r["pid"]) for r in runs)
    assert sum("started, pid" in line for line in said) == len(SEED_NICS)
    argv = next(r["argv"] for r in runs if r["pid"] == victim[0])
    name = prepared.names[prepared.commands.index(argv)]
    assert f"donor {name} ended (signal SIGKILL): stopping the others" in said


SLEEPER = ["sleep", "120"]
#: Ignores SIGTERM, and so does the sleep it becomes (an ignored signal stays so across exec).
DEAF = ["sh", "-c", "trap '' TERM; exec sleep 120"]


@pytest.mark.timeout(60)
def test_a_donor_that_ends_stops_the_others(pids) -> None:
    said: list[str] = []
    started = time.monotonic()
    code = donors.supervise(
        [SLEEPER, ["sh", "-c", "sleep 0.3; exit 3"]], ["a", "b"], grace_s=5, say=said.append
    )
    assert code == donors.DONOR_ENDED and time.monotonic() - started < 20
    assert "donor b ended (status 3): stopping the others" in said
    pids.extend(int(line.rsplit(" ", 1)[1]) for line in said if "started, pid" in line)
    assert all(_gone(pid) for pid in pids)


@pytest.mark.timeout(60)
def test_a_donor_deaf_to_sigterm_is_killed_after_the_grace(pids) -> None:
    said: list[str] = []
    started = time.monotonic()
    code = donors.supervise([DEAF, ["true"]], ["deaf", "quick"], grace_s=0.5, say=said.append)
    assert code == donors.DONOR_ENDED and time.monotonic() - started < 20
    pids.extend(int(line.rsplit(" ", 1)[1]) for line in said if "started, pid" in line)
    assert all(_gone(pid) for pid in pids)


def test_a_donor_that_cannot_start_stops_those_started(tmp_path, pids) -> None:
    said: list[str] = []
    watched = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)
    before = [signal.getsignal(s) for s in watched]
    with pytest.raises(LaunchError, match=r"cannot start donor b: .*missing"):
        donors.supervise(
            [SLEEPER, [str(tmp_path / "missing")]], ["a", "b"], grace_s=5, say=said.append
        )
    pids.extend(int(line.rsplit(" ", 1)[1]) for line in said if "started, pid" in line)
    assert len(pids) == 1 and _gone(pids[0])
    assert [signal.getsignal(s) for s in watched] == before  # the handlers are given back


SUPERVISOR = """
import sys
from xputune.launch.donors import supervise
sys.exit(supervise([["sleep", "120"], ["sleep", "120"]], ["a", "b"], grace_s=5))
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_a_signal_to_the_supervisor_stops_every_donor(sig, status, pids) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR], stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True,
    )  # fmt: skip
    pids.append(proc.pid)
    started: list[int] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        if "started, pid" in line:
            started.append(int(line.rsplit(" ", 1)[1]))
            pids.append(started[-1])
        if len(started) == 2:
            break
    assert len(started) == 2, proc.stderr.read()
    proc.send_signal(sig)  # to the supervisor alone: the donors are in their own sessions
    assert proc.wait(timeout=60) == status
    assert f"{signal.Signals(sig).name}: stopping 2 donor(s)" in proc.stderr.read()
    assert all(_gone(pid) for pid in started)


def test_the_donor_lines_name_the_nic_and_node(seed) -> None:
    req = L3Request("mooncake", role="decode", master="m1:50051", segment_gb=100)
    prepared = donors.prepare(seed, req, force=True, environ={}, live=False)
    assert prepared.names == [
        "ens1np0 (mlx5_0)", "ens2np0 (mlx5_1)", "ens3np0 (mlx5_2)", "ens4np0 (mlx5_3)"
    ]  # fmt: skip
    assert sum(d.segment_bytes for d in prepared.plan.donors) <= 100 * GB
    assert prepared.plan.pool_tokens is None  # no model: the pool's tokens are unknown
    live = donors.prepare(seed, req, force=True, environ={}, live=True)
    assert any("this node's address is unknown" in r for r in live.refusals)
