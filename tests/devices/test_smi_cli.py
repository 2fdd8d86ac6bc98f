"""`xputune smi`: saved outputs of every form, the installed tool (a stand-in script), errors."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest
import yaml

from tests.devices.conftest import DATA
from xputune.devices.xpusmi import run

CAT, SLEEP = shutil.which("cat"), shutil.which("sleep")  # scripts run with PATH emptied


@pytest.fixture
def no_tool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty PATH and no known install path: xpu-smi is nowhere."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(run, "KNOWN_PATHS", ())
    return tmp_path


def _tool(folder: Path, script: str) -> Path:
    path = folder / "xpu-smi"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize(
    ("name", "form"),
    [
        ("list.txt", "list"),
        ("query.txt", "query"),
        ("query.xml", "xml"),
        ("monitor.txt", "monitor"),
        ("topo.txt", "topo"),
    ],
)
def test_saved_output_as_json(run_cli, name: str, form: str) -> None:
    code, out, err = run_cli("smi", "--input", str(DATA / name), "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["schema_version"] == 1 and doc["form"] == form and len(doc["cards"]) == 8


def test_table_and_yaml(run_cli) -> None:
    code, out, _ = run_cli("smi", "-i", str(DATA / "query.xml"))
    assert code == 0 and "driver 5.0.21.26" in out and "0000:e4:00.0" in out
    assert out.count("Kunlunxin P800") == 8
    code, out, _ = run_cli("smi", "-i", str(DATA / "monitor.txt"), "-f", "yaml")
    assert code == 0 and yaml.safe_load(out)["cards"][6]["utilization_pct"] is None


def test_no_tool_and_no_input_is_one_line(run_cli, no_tool: Path) -> None:
    code, out, err = run_cli("smi")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("xputune: error: xpu-smi not found on PATH")


def test_runs_the_xml_form(run_cli, no_tool: Path) -> None:
    _tool(no_tool, f'[ "$*" = "-q -x" ] && exec {CAT} {DATA / "query.xml"}\nexit 3\n')
    code, out, _ = run_cli("smi", "-f", "json")
    assert code == 0 and json.loads(out)["form"] == "xml"


def test_falls_back_to_the_text_form(run_cli, no_tool: Path) -> None:
    script = (
        '[ "$*" = "-q -x" ] && { echo "unknown option -x" >&2; exit 1; }\n'
        f'[ "$*" = "-q" ] && exec {CAT} {DATA / "query.txt"}\n'
        "exit 3\n"
    )
    _tool(no_tool, script)
    code, out, _ = run_cli("smi", "-f", "json")
    assert code == 0 and json.loads(out)["form"] == "query"


def test_both_forms_failing_is_one_line(run_cli, no_tool: Path) -> None:
    _tool(no_tool, 'echo "No XPU found" >&2\nexit 9\n')
    code, _, err = run_cli("smi")
    assert code == 2 and err.count("\n") == 1 and "-q: exit 9: No XPU found" in err


def test_another_tool_of_the_same_name(run_cli, no_tool: Path) -> None:
    _tool(no_tool, 'echo "Intel(R) XPU System Management Interface -- v1.2"\n')
    code, _, err = run_cli("smi")
    assert code == 2 and "unrelated tool of the same name" in err and err.count("\n") == 1


def test_a_hung_tool_times_out(run_cli, no_tool: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tool(no_tool, f"exec {SLEEP} 5\n")
    monkeypatch.setattr(run, "TIMEOUT_S", 0.2)
    code, _, err = run_cli("smi")
    assert code == 2 and "no answer within 0.2 s" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"garbage\n", "not a known form"),
        (b'<xpu_smi_log><xpu id="0000:23:00.0">', "malformed or cut-off XML"),
    ],
)
def test_bad_input_file_is_one_line(run_cli, tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "saved.txt"
    path.write_bytes(content)
    code, out, err = run_cli("smi", "--input", str(path))
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


def test_missing_input_file_is_one_line(run_cli, tmp_path: Path) -> None:
    code, _, err = run_cli("smi", "--input", str(tmp_path / "nope.txt"))
    assert code == 2 and err == f"xputune: error: smi output not found: {tmp_path / 'nope.txt'}\n"


def test_reads_stdin(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    stdin = io.TextIOWrapper(io.BytesIO((DATA / "topo.txt").read_bytes()))
    monkeypatch.setattr(sys, "stdin", stdin)
    code, out, _ = run_cli("smi", "--input", "-", "-f", "json")
    assert code == 0 and json.loads(out)["topology"]["nics"]["NIC0"] == "mlx5_0"
