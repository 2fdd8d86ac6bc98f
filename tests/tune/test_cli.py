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
    assert code == 1  # a dry run that finds changes to make: drift
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
    assert code == 1 and data["dry_run"] is True and len(data["changes"]) == 9
    assert data["changes"][0] == {
        "knob": "pcie.ido",
        "where": "0000:00:01.1 root port (xpu0, xpu1)",
        "before": "off",
        "after": "on",
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--thp", "sometimes"], "'sometimes' is not one of always, madvise, never"),
        (["--numa-balancing", "maybe"], "'maybe' is not one of on, off"),
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
    assert code == 1 and "dry run: 27 change(s) planned" in out


# -- least surprise: a flag does what it names and no more ----------------------------------------


def test_a_knob_flag_alone_plans_that_knob_only(mini, run_cli):
    code, out, _ = run_cli("apply", "--ido", "--dry-run", "--root", mini, "--format", "json")
    changes = json.loads(out)["changes"]
    assert code == 1 and changes and {c["knob"] for c in changes} == {"pcie.ido"}
    code, out, _ = run_cli("apply", "--thp", "never", "-n", "--root", mini, "-f", "json")
    assert {c["knob"] for c in json.loads(out)["changes"]} == {"thp.enabled"}


def test_a_knob_flag_with_a_profile_applies_the_whole_profile(mini, run_cli):
    code, out, _ = run_cli(
        "apply", "--profile", "generic", "--thp", "always", "-n", "--root", mini, "-f", "json"
    )
    knobs = {c["knob"] for c in json.loads(out)["changes"]}
    assert code == 1 and {"shm.huge", "numa.balancing"} <= knobs


def test_overriding_a_critical_setting_needs_force_and_says_what(mini, run_cli):
    code, _, err = run_cli("apply", "--profile", "hygon-p800", "--no-ido", "-n", "--root", mini)
    assert code == 2 and "--no-ido overrides pcie.ido = on, critical in profile hygon-p800" in err
    assert "--force" in err
    code, out, _ = run_cli(
        "apply", "--profile", "hygon-p800", "--no-ido", "--force", "-n", "--root", mini
    )
    assert code == 1 and "dry run" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "pcie.ido", "--skip", "pcie.ido"], "--only and --skip both name pcie.ido"),
        (["--thp", "never", "--skip", "thp.enabled"], "--skip thp.enabled leaves it alone"),
        (["--ido", "--only", "shm.huge"], "--only shm.huge leaves it out"),
    ],
)
def test_contradictory_selections_are_errors(mini, run_cli, args, message):
    code, out, err = run_cli("apply", *args, "-n", "--root", mini)
    assert code == 2 and out == "" and message in err


def test_suggested_commands_carry_the_root_or_example(mini, run_cli):
    _, out, _ = run_cli("check", "--root", mini)
    fix = out.split("fix them all with:\n")[1].replace(" \\\n", " ")
    assert " ".join(fix.split()) == f"xputune apply --profile hygon-p800 --root {mini}"
    _, out, _ = run_cli("check", "--example", "h3c-hygon-p800", "--skip", "pcie.ido")
    out = " ".join(out.split())
    assert "xputune apply --profile hygon-p800 --skip pcie.ido on the host it was recorded" in out
    assert "&& xputune apply --profile hygon-p800 --skip pcie.ido --root h3c-hygon-p800" in out
    assert "--example" not in out  # apply refuses a recording (test_suggestions runs these)
    code, out, _ = run_cli("apply", "--ido", "--root", mini)
    assert code == 0 and f"undo with: xputune rollback --root {mini}" in out


def test_apply_and_rollback_under_root_change_that_tree_only(mini, tmp_path, run_cli):
    bystander = minihost.build(str(tmp_path / "other"))
    before = minihost.snapshot(bystander)
    start = minihost.snapshot(mini)
    assert run_cli("apply", "--root", mini)[0] == 0
    assert minihost.snapshot(mini) != start
    assert run_cli("rollback", "--root", mini)[0] == 0
    assert minihost.snapshot(bystander) == before
    changed = minihost.snapshot(mini)
    assert {k: v for k, v in changed.items() if not k.startswith("var/")} == {
        k: v for k, v in start.items() if not k.startswith("var/")
    }


# -- one verdict: probe and check judge a setting alike -------------------------------------------

PROBE_NAME = {
    "thp.enabled": "thp enabled",
    "thp.defrag": "thp defrag",
    "thp.shmem_enabled": "thp shmem_enabled",
    "shm.huge": "/dev/shm huge",
    "numa.balancing": "numa balancing",
}


@pytest.mark.parametrize("where", ["mini", "h3c-hygon-p800", "nvidia-hgx-h100"])
def test_probe_and_check_give_one_verdict(mini, where):
    from xputune.host import open_host
    from xputune.topology.verdicts import BASELINE, settings_verdicts
    from xputune.tune import engine

    view = open_host(mini, None) if where == "mini" else open_host(None, where)
    topo = engine.discover(view)
    probe = {v.setting: v for v in settings_verdicts(topo)}
    selection = engine.select(topo, "generic")
    rows = engine.check(engine.context(view, topo, selection), selection)
    assert set(BASELINE) == set(PROBE_NAME)
    for row in rows:
        if row.knob in PROBE_NAME:
            assert (probe[PROBE_NAME[row.knob]].verdict == "ok") == row.holds, row
    ido = engine.select(topo, "hygon-p800", only=["pcie.ido"])
    ido_rows = engine.check(engine.context(view, topo, ido), ido)
    value = probe["pcie ido"].value
    if topo.cards and "/" in value:
        on, total = value.split()[0].split("/")
        assert int(total) == len(ido_rows)
        assert int(on) == sum(r.holds for r in ido_rows)
