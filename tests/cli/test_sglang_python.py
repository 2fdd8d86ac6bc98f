"""--python and XPUTUNE_SGLANG_PYTHON: one option, declared once (cli/options.py), taken by
launch sglang, plan and sweep, said in their help and man pages with the variable; and plan
writing its flags for the release that interpreter has."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.launch.fakepython import GOOD, fake_python
from xputune.cli import exits, registry
from xputune.cli.options import PYTHON

MAN = Path(__file__).resolve().parents[2] / "man"
SEED = ("--example", "h3c-hygon-p800")


@pytest.fixture(autouse=True)
def _no_variable(monkeypatch) -> None:
    monkeypatch.delenv("XPUTUNE_SGLANG_PYTHON", raising=False)


@pytest.mark.parametrize("words", [("launch", "sglang"), ("plan",), ("sweep",)])
def test_the_option_is_the_shared_one_and_its_variable_is_said(run_cli, words) -> None:
    assert PYTHON in registry.load(words).options  # the same object, not a copy
    code, out, _ = run_cli(*words, "--help")
    assert code == 0
    flat = " ".join(out.split())
    assert "--python PATH" in flat and "XPUTUNE_SGLANG_PYTHON" in flat
    page = (MAN / f"xputune-{'-'.join(words)}.1").read_text()
    environment = page.split(".SH ENVIRONMENT", 1)[1]
    assert "XPUTUNE_SGLANG_PYTHON" in environment


def test_launch_lists_exit_3_for_what_sglangs_environment_lacks(run_cli) -> None:
    from xputune.cli.launch_run import LAUNCH_SGLANG

    assert exits.UNSUPPORTED == 3 and exits.UNSUPPORTED in LAUNCH_SGLANG.exits
    assert PYTHON in LAUNCH_SGLANG.options


def test_plan_writes_the_flags_for_the_release_there(run_cli, tmp_path) -> None:
    old = fake_python(tmp_path / "a", {**GOOD, "sglang": "0.5.20"})
    new = fake_python(tmp_path / "b", {**GOOD, "sglang": "0.5.23"})
    args = ("plan", *SEED, "--model", "glm-5", "--tp", "8")
    code, out, _ = run_cli(*args, "--python", str(old), "-f", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["sglang"]["release"] == doc["sglang"]["installed"] == "0.5.20"
    assert doc["sglang"]["python"] == str(old) and doc["sglang"]["tested"] is True
    assert not any("explicit" in n for n in doc["sglang"]["notes"])
    assert "--disaggregation-ib-device" not in doc["sglang_args"]  # PD servers only
    assert doc["disaggregation_args"][0] == "--disaggregation-ib-device"
    assert json.loads(doc["disaggregation_args"][1])["7"] == "mlx5_3"
    code, out, err = run_cli(*args, "--python", str(new))
    assert code == 0, err
    flat = " ".join(out.split())
    assert "--hicache-size 32 is explicit, per rank: sglang 0.5.23's" in flat
    assert "blind to NUMA" in flat
    assert "with --disaggregation-mode prefill|decode (PD disaggregation), add:" in flat


def test_plan_without_sglang_there_assumes_the_newest(run_cli, tmp_path) -> None:
    bare = fake_python(tmp_path, {**GOOD, "sglang": None})
    code, out, _ = run_cli("plan", *SEED, "--model", "glm-5", "--tp", "8", "--python", str(bare),
                           "-f", "json")  # fmt: skip
    assert code == 0  # plan starts nothing: what is missing is a note, not a refusal
    doc = json.loads(out)
    assert doc["sglang"]["release"] == "0.5.23" and doc["sglang"]["installed"] is None
    assert doc["sglang"]["notes"][0].startswith(f"note: no sglang in {bare}: the flags assume")
