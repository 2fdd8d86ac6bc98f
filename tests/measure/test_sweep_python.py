"""sweep --python: the servers run in SGLang's interpreter, asked once per sweep what it has
(the launcher's one dry run), not once per size; what it lacks stops the sweep before anything
starts; a recording's bindings never start a server here. The stand-in server of
tests/measure/fakesglang.py plays SGLang, behind a logging wrapper of this interpreter."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from tests.launch.fakepython import GOOD, fake_python
from tests.measure.fakesglang import write_model

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "tests" / "measure" / "fake_site"
SLICE = str(ROOT / "tests" / "data" / "traces" / "mooncake-conversation-1171-1570.jsonl")


@pytest.fixture
def stand_in(tmp_path, monkeypatch) -> dict[str, str]:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SITE), str(ROOT)]))
    monkeypatch.delenv("XPUTUNE_SGLANG_PYTHON", raising=False)
    record = tmp_path / "starts.jsonl"
    monkeypatch.setenv("FAKE_SGLANG_ARGV", str(record))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the sweep's log folder
    return {"model": write_model(str(tmp_path / "model")), "record": str(record)}


def _wrapper(folder: Path) -> Path:
    """This interpreter behind a script that logs what each call is for."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "python"
    log = folder / "calls"
    path.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = -c ]; then echo "preflight $3" >> {log}; else echo "$2" >> {log}; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    path.chmod(0o755)
    return path


def _args(model: str) -> list[str]:
    return ["--", "--model-path", model, "--device", "cpu", "--max-total-tokens", "1024"]


def test_the_preflight_runs_once_per_sweep_and_every_server_in_that_python(
    run_cli, stand_in, tmp_path
) -> None:
    python = _wrapper(tmp_path / "sglang-env" / "bin")
    code, out, err = run_cli(
        "sweep", "--trace", SLICE, "--sizes", "x1,x2", "--baseline", "--min-gain", "0",
        "--block-tokens", "1", "-n", "20", "-c", "1", "--max-output", "1", "--stop-grace", "5",
        "--python", str(python), "-f", "json", *_args(stand_in["model"]),
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert [s["label"] for s in doc["steps"]] == ["baseline", "x1", "x2"]
    logged = (python.parent / "calls").read_text().split("\n")
    assert [c for c in logged if c] == ["preflight probe", *["sglang.launch_server"] * 3]
    starts = [json.loads(ln) for ln in Path(stand_in["record"]).read_text().splitlines()]
    for start, size in zip(starts[1:], ("1", "2"), strict=True):
        argv = start["argv"]
        assert (
            argv.count("--hicache-ratio") == 1 and argv[argv.index("--hicache-ratio") + 1] == size
        )
        assert argv.count("--hicache-size") == 1 and argv.count("--port") == 1
    # the sizes are the sweep's, set in each server's command after the launcher's one dry
    # run: nothing the user sees calls them theirs or names a conflict over them
    assert "conflict" not in err and "yours" not in err and "your --hicache" not in err


def test_a_refusing_launcher_is_said_once_in_xputunes_voice(run_cli, stand_in) -> None:
    code, out, err = run_cli("sweep", "--trace", SLICE, "--sizes", "x2", "--", "--device", "cpu")
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith("xputune: error: the launcher refused: cannot tell the model's KV ")
    assert line.count("xputune: error:") == 1


def test_what_sglangs_python_lacks_stops_the_sweep_before_it_starts(
    run_cli, stand_in, tmp_path
) -> None:
    fake = fake_python(tmp_path / "env", {**GOOD, "plugin": None, "xputune": None})
    code, out, err = run_cli(
        "sweep", "--trace", SLICE, "--sizes", "x2", "--python", str(fake),
        *_args(stand_in["model"]),
    )  # fmt: skip
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("xputune: error: the launcher would refuse: xputune's SGLang plugin is ")
    assert "-m pip install xputune==" in err
    assert not Path(stand_in["record"]).exists()  # nothing was started


def test_the_variable_names_sglangs_python_for_the_sweep_too(
    run_cli, stand_in, tmp_path, monkeypatch
) -> None:
    fake = fake_python(tmp_path / "env", {**GOOD, "sglang": None})
    monkeypatch.setenv("XPUTUNE_SGLANG_PYTHON", str(fake))
    code, _, err = run_cli("sweep", "--trace", SLICE, "--sizes", "x2", *_args(stand_in["model"]))
    assert code == 2 and f"sglang is not installed for {fake}" in err


@pytest.mark.parametrize("opt", ["--example h3c-hygon-p800", "--root=/tmp/box"])
def test_a_recording_never_starts_a_sweeps_server(run_cli, stand_in, opt) -> None:
    code, out, err = run_cli(
        "sweep", "--trace", SLICE, "--sizes", "x2", "--launch-opt", opt,
        *_args(stand_in["model"]),
    )  # fmt: skip
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "the sweep starts its servers on this host" in err
    assert not Path(stand_in["record"]).exists()
