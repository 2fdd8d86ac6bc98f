"""The command line: exit codes, JSON shape, help that teaches, clear refusals."""

from __future__ import annotations

import json
import tarfile

import pytest

from tests.fixtures.trees import host_tree
from tests.tune import minihost


def test_check_exits_1_on_drift_and_0_when_all_hold(mini, run_cli):
    code, out, _ = run_cli("check", "--root", mini, "--format", "json")
    data = json.loads(out)
    assert code == 1 and data["schema_version"] == 1 and data["ok"] is False
    assert data["profile"] == "hygon-p800" and data["profile_choice"] == "recommended"
    drift = [r for r in data["rows"] if r["verdict"] == "drift"]
    assert {r["knob"] for r in drift} == {
        "pcie.ido",
        "thp.shmem_enabled",
        "shm.huge",
        "numa.balancing",
    }
    assert all(r["fix"] for r in drift)
    assert run_cli("apply", "--root", mini)[0] == 0
    code, out, _ = run_cli("check", "--root", mini, "--format", "json")
    assert code == 0 and json.loads(out)["ok"] is True


def test_check_table_names_expected_actual_and_the_fix(mini, run_cli):
    code, out, _ = run_cli("check", "--root", mini, "--profile", "generic")
    assert code == 1
    assert "sysctl -w kernel.numa_balancing=0" in out
    assert "mount -o remount,huge=advise /dev/shm" in out
    assert "xputune apply --profile generic" in out


def test_apply_prints_a_diff_and_the_way_back(mini, run_cli):
    code, out, _ = run_cli("apply", "--root", mini, "--dry-run", "--only", "numa.balancing")
    assert code == 0
    assert "-/proc/sys/kernel/numa_balancing: on" in out
    assert "+/proc/sys/kernel/numa_balancing: off" in out
    code, out, _ = run_cli(
        "apply", "--root", mini, "--numa-balancing", "off", "--only", "numa.balancing"
    )
    assert code == 0 and f"xputune rollback --root {mini}" in out
    code, out, _ = run_cli("rollback", "--root", mini, "--format", "json")
    data = json.loads(out)
    assert data["restored"] == [
        {"knob": "numa.balancing", "where": "/proc/sys/kernel/numa_balancing", "original": "on"}
    ]


def test_apply_json_lists_changes(mini, run_cli):
    code, out, _ = run_cli("apply", "--root", mini, "--dry-run", "-f", "json")
    data = json.loads(out)
    assert code == 0 and data["dry_run"] is True and len(data["changes"]) == 9
    assert data["changes"][0] == {
        "knob": "pcie.ido",
        "where": "0000:00:01.1 root port (xpu0, xpu1)",
        "before": "off",
        "after": "on",
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--thp", "sometimes"], "'sometimes' is not a valid thp.enabled value"),
        (["--numa-balancing", "maybe"], "not a numa.balancing value"),
        (["--only", "thp.enabeld"], "unknown knob 'thp.enabeld'"),
        (["--profile", "nosuch"], "no profile named 'nosuch'"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(mini, run_cli, args, message):
    code, _, err = run_cli("apply", "--root", mini, *args)
    assert code != 0 and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_apply_on_a_recording_is_refused_clearly(mini, tmp_path, run_cli):
    tarball = str(tmp_path / "rec.tar.gz")
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(mini, arcname="rec")
    code, _, err = run_cli("apply", "--root", tarball)
    assert code != 0 and "read-only recording" in err and "tar xf" in err
    assert run_cli("check", "--root", tarball)[0] == 1  # reading a recording is fine


def test_lockdown_refusal_through_the_cli(tmp_path, run_cli):
    root = minihost.build(str(tmp_path / "h"), lockdown="integrity")
    before = minihost.snapshot(root, exclude="-")
    code, _, err = run_cli("apply", "--root", root)
    assert code == 4 and "lockdown is 'integrity'" in err and "--skip pcie.ido" in err
    assert minihost.snapshot(root, exclude="-") == before


def test_recommend_and_profiles_json(mini, run_cli):
    code, out, _ = run_cli("recommend", "--root", mini, "-f", "json")
    data = json.loads(out)
    assert code == 0 and data["recommended"] == "hygon-p800"
    scores = {c["profile"]: (c["eligible"], c["score"]) for c in data["candidates"]}
    assert scores["nvidia-hopper"][0] is False
    assert scores["hygon-p800"][1] > scores["kunlunxin-p800"][1] > scores["generic"][1]
    code, out, _ = run_cli("profiles", "hygon-p800", "-f", "json")
    shown = json.loads(out)
    assert shown["chain"] == ["generic", "kunlunxin-p800", "hygon-p800"]
    assert shown["knobs"]["numa.balancing"]["value"] == "off"


def test_recommend_picks_by_cpu_vendor_and_cards(tmp_path, run_cli):
    amd = minihost.build(str(tmp_path / "amd"), cpu_vendor="AuthenticAMD")
    assert (
        json.loads(run_cli("recommend", "--root", amd, "-f", "json")[1])["recommended"]
        == "kunlunxin-p800"
    )


def test_recommend_on_the_nvidia_fixture(run_cli):
    root = str(host_tree("nvidia-hgx-h100"))
    data = json.loads(run_cli("recommend", "--root", root, "-f", "json")[1])
    assert data["recommended"] == "nvidia-hopper"
    rows = json.loads(run_cli("check", "--root", root, "-f", "json")[1])["rows"]
    assert "pcie.ido" not in {r["knob"] for r in rows}  # left to the NVIDIA driver


def test_non_root_config_space_reads_as_unknown_not_off(run_cli):
    root = str(host_tree("small-nonroot-config"))
    rows = json.loads(run_cli("check", "--root", root, "-f", "json")[1])["rows"]
    ido = [r for r in rows if r["knob"] == "pcie.ido"]
    assert ido and all(r["verdict"] == "unknown" and "needs root" in r["note"] for r in ido)


@pytest.mark.parametrize("command", ["check", "apply", "rollback", "recommend", "profiles"])
def test_help_teaches_with_an_example(run_cli, command):
    code, out, _ = run_cli(command, "--help")
    assert code == 0 and "Example" in out


def test_shipped_examples_are_read_only_for_apply_and_rollback(run_cli):
    from xputune.host.open import example_names

    if "h3c-hygon-p800" not in example_names():
        pytest.skip("seed-box example not shipped")
    for command in ("apply", "rollback"):
        code, _, err = run_cli(command, "--example", "h3c-hygon-p800")
        assert code == 2 and "read-only recording" in err
    code, out, _ = run_cli("apply", "--example", "h3c-hygon-p800", "--dry-run")
    assert code == 0 and "dry run: 27 change(s) planned" in out
