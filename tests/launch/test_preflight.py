"""The preflight of SGLang's interpreter (launch/preflight.py), against stand-in interpreters
that answer as told: which Python, what its answer means, the fix each problem names, and the
bounds on a child that fails, hangs or floods."""

from __future__ import annotations

import sys
import time

import pytest

from tests.launch.fakepython import GOOD, calls, fake_python
from xputune import __version__
from xputune.launch import preflight
from xputune.launch.releases import NEWEST, RELEASES
from xputune.launch.sglang import LaunchError


@pytest.fixture(autouse=True)
def _no_variables(monkeypatch) -> None:
    monkeypatch.delenv(preflight.PYTHON_VARIABLE, raising=False)
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)


def test_the_interpreter_is_the_option_then_the_variable_then_this_one(tmp_path, monkeypatch):
    fake = fake_python(tmp_path / "a")
    other = fake_python(tmp_path / "b")
    assert preflight.interpreter(None) == sys.executable
    monkeypatch.setenv(preflight.PYTHON_VARIABLE, str(other))
    assert preflight.interpreter(None) == str(other)
    assert preflight.interpreter(str(fake)) == str(fake)  # the option wins
    monkeypatch.setenv("PATH", str(tmp_path / "a"))
    assert preflight.interpreter("python") == str(fake)  # a bare name is looked up on PATH
    monkeypatch.chdir(tmp_path)
    assert preflight.interpreter("a/python") == str(fake)  # relative: made absolute


def test_a_venv_python_is_not_resolved_out_of_its_venv(tmp_path) -> None:
    real = fake_python(tmp_path / "base")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    link = tmp_path / "venv" / "bin" / "python"
    link.symlink_to(real)
    assert preflight.interpreter(str(link)) == str(link)


@pytest.mark.parametrize(
    ("given", "variable", "says"),
    [
        (None, "", "XPUTUNE_SGLANG_PYTHON is empty"),
        ("no-such-python-here", None, "--python no-such-python-here: not found on PATH"),
        ("/nonexistent/bin/python", None, "not an executable file"),
        (None, "/nonexistent/bin/python", "XPUTUNE_SGLANG_PYTHON /nonexistent/bin/python: not"),
    ],
)
def test_a_bad_interpreter_is_one_line(monkeypatch, given, variable, says) -> None:
    if variable is not None:
        monkeypatch.setenv(preflight.PYTHON_VARIABLE, variable)
    with pytest.raises(LaunchError, match=says):
        preflight.interpreter(given)


def test_a_folder_or_a_plain_file_is_no_interpreter(tmp_path) -> None:
    (tmp_path / "notexec").write_text("")
    for path in (tmp_path, tmp_path / "notexec"):
        with pytest.raises(LaunchError, match="not an executable file"):
            preflight.interpreter(str(path))


def test_a_tested_release_with_its_plugin_has_nothing_to_fix(tmp_path) -> None:
    fake = fake_python(tmp_path)
    found = preflight.ask(str(fake))
    assert found.sglang == "0.5.20" and found.xputune == __version__ and found.mooncake
    release, lines = preflight.release_of(found)
    assert release is RELEASES["0.5.20"] and lines == []
    assert preflight.problems(found, plugin_needed=True) == []
    assert calls(tmp_path) == ["probe"]  # the table knows 0.5.20: its parser is not asked
    assert preflight.describe(found) == (
        f"note: sglang 0.5.20 (tested) in {fake}, with the SGLang plugin of xputune {__version__}"
    )


def test_no_sglang_assumes_the_newest_and_says_how_to_install_it(tmp_path) -> None:
    fake = fake_python(tmp_path, {**GOOD, "sglang": None})
    found = preflight.ask(str(fake))
    release, lines = preflight.release_of(found)
    assert release.version == NEWEST == "0.5.23"
    assert lines == [f"note: no sglang in {fake}: the flags assume sglang 0.5.23, the newest "
                     "supported"]  # fmt: skip
    [problem] = preflight.problems(found, plugin_needed=True)
    assert problem.startswith(f"sglang is not installed for {fake}: install it there")
    assert f"`{fake} -m pip install sglang==0.5.23`" in problem and "--python" in problem


def test_a_missing_plugin_names_the_pip_command_with_this_version(tmp_path) -> None:
    fake = fake_python(tmp_path, {**GOOD, "plugin": None, "xputune": None})
    found = preflight.ask(str(fake))
    [problem] = preflight.problems(found, plugin_needed=True, plain_ok=True)
    assert f"xputune's SGLang plugin is not installed for {fake}" in problem
    assert f"`{fake} -m pip install xputune=={__version__}`" in problem
    assert problem.endswith(", or --features none for plain SGLang")
    [cpu] = preflight.problems(found, plugin_needed=True, plain_ok=False)
    assert "--features none" not in cpu  # a CPU server needs the plugin's host buffer
    assert preflight.problems(found, plugin_needed=False) == []  # --features none
    assert preflight.describe(found).endswith("without xputune's SGLang plugin")


def test_a_plugin_that_does_not_load_or_is_another_version(tmp_path) -> None:
    broken = fake_python(tmp_path / "a", {**GOOD, "plugin_error": "ImportError: no numpy"})
    [problem] = preflight.problems(preflight.ask(str(broken)), plugin_needed=True)
    assert f"does not load in {broken} (ImportError: no numpy)" in problem
    assert f"-m pip install xputune=={__version__}" in problem
    older = fake_python(tmp_path / "b", {**GOOD, "xputune": "0.0.1"})
    [problem] = preflight.problems(preflight.ask(str(older)), plugin_needed=True)
    assert problem == (
        f"{older} has the SGLang plugin of xputune 0.0.1, this launcher is xputune "
        f"{__version__}: `{older} -m pip install xputune=={__version__}`"
    )


def test_sglang_plugins_that_leave_ours_out_are_named(tmp_path, monkeypatch) -> None:
    found = preflight.ask(str(fake_python(tmp_path)))
    monkeypatch.setenv("SGLANG_PLUGINS", "other, xputune")
    assert preflight.problems(found, plugin_needed=True) == []
    monkeypatch.setenv("SGLANG_PLUGINS", "other")
    [problem] = preflight.problems(found, plugin_needed=True)
    assert problem.startswith("SGLANG_PLUGINS=other leaves the xputune plugin out")


def test_a_path_with_spaces_is_quoted_in_the_fix(tmp_path) -> None:
    fake = fake_python(tmp_path / "my env", {**GOOD, "sglang": None})
    [problem] = preflight.problems(preflight.ask(str(fake)), plugin_needed=False)
    assert f"`'{fake}' -m pip install sglang==0.5.23`" in problem


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"status": 3, "stderr": "boom: no such module", "raw": "nothing"},
         "(exit status 3: boom: no such module)"),
        ({"raw": "just text, no answer"}, "(no answer)"),
        ({"raw": "xputune-preflight [1, 2]"}, "(no answer)"),
        ({"raw": "xputune-preflight {not json"}, "(no answer)"),
        ({"probe": {"error": "ModuleNotFoundError: importlib"}},
         "(ModuleNotFoundError: importlib)"),
    ],
)  # fmt: skip
def test_an_interpreter_that_fails_is_one_line_with_the_reason(tmp_path, kwargs, says) -> None:
    fake = fake_python(tmp_path, **kwargs)
    found = preflight.ask(str(fake))
    assert found.error is not None and found.sglang is None
    [problem] = preflight.problems(found, plugin_needed=True)
    assert problem.startswith(f"{fake} did not say what it has {says}")
    assert problem.endswith("name SGLang's interpreter with --python or XPUTUNE_SGLANG_PYTHON")
    assert preflight.release_of(found)[0].version == NEWEST


def test_an_interpreter_that_hangs_is_killed_at_the_deadline(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(preflight, "PROBE_DEADLINE", 0.5)
    fake = fake_python(tmp_path, sleep=30)
    t0 = time.monotonic()
    found = preflight.ask(str(fake))
    assert time.monotonic() - t0 < 10
    assert found.error == "no answer within the deadline"


def test_an_interpreter_that_floods_is_cut_at_the_bound(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(preflight, "MAX_ANSWER", 1000)
    fake = fake_python(tmp_path, raw="x" * 5000)
    found = preflight.ask(str(fake))
    assert found.error is not None and found.error.startswith("it wrote more than")


def test_an_interpreter_that_cannot_run_at_all(tmp_path) -> None:
    script = tmp_path / "python"
    script.write_text("not a script\x00")
    script.chmod(0o755)
    found = preflight.ask(str(script))
    assert found.error is not None and found.error.startswith("cannot run it")


def test_the_preflight_runs_while_the_launcher_works(tmp_path) -> None:
    fake = fake_python(tmp_path, sleep=1)
    t0 = time.monotonic()
    pending = preflight.start(str(fake))
    assert time.monotonic() - t0 < 0.5  # started, not waited for
    assert pending.result().sglang == "0.5.20"
    assert pending.result() is pending.result()  # asked once


PARSER = {
    "options": ["--model-path", "--tp-size", "--enable-hicache", "--hicache-size",
                "--hicache-mem-layout", "--hicache-io-backend", "--hicache-write-policy",
                "--hicache-host-memory-fraction", "--attn-dp-size", "--device", "--port"],
    "storage_backends": ["file", "mooncake", "seaweedfs", "newstore"],
}  # fmt: skip


def test_an_untested_release_is_described_by_its_own_parser(tmp_path) -> None:
    fake = fake_python(tmp_path, {**GOOD, "sglang": "0.5.99"}, PARSER)
    found = preflight.ask(str(fake))
    assert calls(tmp_path) == ["probe", "parser"]
    release, [line] = preflight.release_of(found)
    assert release.version == "0.5.99" and not release.tested
    assert release.storage_backends == ("file", "mooncake", "seaweedfs", "newstore")
    assert release.spelling("--enable-hierarchical-cache") == "--enable-hicache"
    assert release.spelling("--numa-node") is None
    assert line == (
        f"warning: sglang 0.5.99 in {fake} is untested (supported: 0.5.20-0.5.23): the flags "
        "are checked against its own parser"
    )
    assert preflight.problems(found, plugin_needed=True) == []  # untested is not refused


def test_an_older_release_is_said_to_be_older(tmp_path) -> None:
    fake = fake_python(tmp_path, {**GOOD, "sglang": "0.4.10.post2"}, PARSER)
    _, [line] = preflight.release_of(preflight.ask(str(fake)))
    assert "is older than the supported 0.5.20-0.5.23" in line


@pytest.mark.parametrize(
    "parser",
    [{"error": "ModuleNotFoundError: No module named 'triton'"}, {"options": []},
     {"options": ["--x"], "storage_backends": "file"}, None],
)  # fmt: skip
def test_an_untested_release_whose_parser_cannot_be_read_assumes_the_newest(
    tmp_path, parser
) -> None:
    fake = fake_python(tmp_path, {**GOOD, "sglang": "0.6.0"}, parser)
    release, [line] = preflight.release_of(preflight.ask(str(fake)))
    assert release is RELEASES[NEWEST]
    assert line.startswith(f"warning: sglang 0.6.0 in {fake} is untested")
    assert "its parser could not be read (" in line and line.endswith("assume sglang 0.5.23")


def test_the_script_runs_in_a_real_interpreter_without_sglang(tmp_path, monkeypatch) -> None:
    """The script itself, in a Python that has neither sglang nor the plugin on its path."""
    monkeypatch.chdir(tmp_path)  # the checkout's xputune.egg-info is not on -c's path
    import subprocess

    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", preflight.SCRIPT, "probe"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith(preflight.MARK)
    import json

    doc = json.loads(line[len(preflight.MARK) :])
    assert doc == {"sglang": None, "plugin": None, "mooncake": False}
