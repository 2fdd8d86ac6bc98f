"""launch sglang --python: SGLang's interpreter runs the server and is asked first what it has;
what it lacks is one line with its fix and exit 3 (a dry run says it and prints the command).
Stand-in interpreters answer the preflight (tests/launch/fakepython.py)."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.launch.fakepython import GOOD, calls, fake_python
from xputune import __version__
from xputune.launch import preflight
from xputune.launch import sglang as launch

SEED = ("--example", "h3c-hygon-p800")
GLM = ("--", "--model-path", "zai-org/GLM-5", "--tp", "8")


@pytest.fixture(autouse=True)
def _no_variables(monkeypatch) -> None:
    monkeypatch.delenv(preflight.PYTHON_VARIABLE, raising=False)
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)


@pytest.fixture
def tiny(tmp_path) -> str:
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(
        '{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, '
        '"num_attention_heads": 4, "num_key_value_heads": 2, "torch_dtype": "bfloat16"}'
    )
    return str(model)


def _words(out: str) -> list[str]:
    return shlex.split(out.replace("\\\n", " "))


def _refusals(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("would refuse:")]


def test_the_command_runs_the_named_interpreter(run_cli, tmp_path) -> None:
    fake = fake_python(tmp_path / "sglang-env" / "bin")
    code, out, err = run_cli("launch", "sglang", "-n", "--python", str(fake), *SEED, *GLM)
    assert code == 1, err  # the seed box drifts
    words = _words(out)
    assert words[words.index("-m") - 1] == str(fake)
    assert f"note: sglang 0.5.20 (tested) in {fake}, with the SGLang plugin of xputune" in err
    assert not any("plugin" in r or "sglang is not" in r for r in _refusals(err))
    assert calls(fake.parent) == ["probe"]


def test_the_variable_names_it_when_the_option_does_not(run_cli, tmp_path, monkeypatch) -> None:
    fake = fake_python(tmp_path)
    monkeypatch.setenv("XPUTUNE_SGLANG_PYTHON", str(fake))
    code, out, _ = run_cli("launch", "sglang", "-n", *SEED, *GLM)
    assert code == 1 and f" {fake} -m sglang.launch_server" in " ".join(_words(out))
    monkeypatch.setenv("XPUTUNE_SGLANG_PYTHON", "")
    code, out, err = run_cli("launch", "sglang", "-n", *SEED, *GLM)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "XPUTUNE_SGLANG_PYTHON is empty" in err


def test_a_bad_python_is_a_usage_line(run_cli, tmp_path) -> None:
    code, out, err = run_cli("launch", "sglang", "-n", "--python", str(tmp_path), *SEED, *GLM)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "not an executable file" in err
    code, _, err = run_cli("launch", "sglang", "-n", "--python", "", *SEED, *GLM)
    assert code == 2 and "--python" in err


def test_a_dry_run_says_what_is_missing_and_prints_the_command(run_cli, tmp_path) -> None:
    fake = fake_python(tmp_path, {"sglang": None, "plugin": None, "mooncake": False})
    code, out, err = run_cli("launch", "sglang", "-n", "--python", str(fake), *SEED, *GLM)
    assert code == 3 and "sglang.launch_server" in out
    assert f"note: no sglang in {fake}: the flags assume sglang 0.5.23" in err
    sglang_line, plugin_line, drift = _refusals(err)
    assert sglang_line == (
        f"would refuse: sglang is not installed for {fake}: install it there (`{fake} -m pip "
        "install sglang==0.5.23`), or name SGLang's own interpreter with --python or "
        "XPUTUNE_SGLANG_PYTHON"
    )
    assert plugin_line == (
        f"would refuse: xputune's SGLang plugin is not installed for {fake} (no entry point "
        f"xputune in sglang.srt.plugins): `{fake} -m pip install xputune=={__version__}`, or "
        "--features none for plain SGLang"
    )
    assert "critical setting(s) drift" in drift  # the fixture box is untuned, as before


def test_features_none_needs_no_plugin(run_cli, tmp_path) -> None:
    fake = fake_python(tmp_path, {**GOOD, "plugin": None, "xputune": None})
    code, out, err = run_cli(
        "launch", "sglang", "-n", "--features", "none", "--python", str(fake), *SEED, *GLM
    )
    assert code == 1 and not any("plugin" in r for r in _refusals(err))
    assert "XPUTUNE_HICACHE_" not in out
    code, _, err = run_cli(
        "launch", "sglang", "-n", "--features", "none", "--stats-dir", str(tmp_path / "s"),
        "--python", str(fake), *SEED, *GLM,
    )  # fmt: skip
    assert any("plugin is not installed" in r for r in _refusals(err))  # stats are the plugin's


def test_a_real_launch_without_sglang_there_is_exit_3_and_the_fix(
    run_cli, tmp_path, monkeypatch, tiny
) -> None:
    monkeypatch.setattr(launch, "execute", lambda spec: pytest.fail("must not exec"))
    fake = fake_python(tmp_path / "env", {**GOOD, "sglang": None})
    for extra in ((), ("--force",)):  # --force does not launch what cannot start
        code, out, err = run_cli(
            "launch", "sglang", *extra, "--python", str(fake), "--",
            "--model-path", tiny, "--device", "cpu",
        )  # fmt: skip
        assert code == 3 and out == ""
        assert err.count("\n") == 1, err
        assert err.startswith(f"xputune: error: sglang is not installed for {fake}")
        assert f"`{fake} -m pip install sglang==0.5.23`" in err


def test_a_real_launch_with_another_xputune_there_is_exit_3(
    run_cli, tmp_path, monkeypatch, tiny
) -> None:
    monkeypatch.setattr(launch, "execute", lambda spec: pytest.fail("must not exec"))
    fake = fake_python(tmp_path / "env", {**GOOD, "xputune": "0.0.9"})
    code, _, err = run_cli(
        "launch", "sglang", "--features", "none", "--python", str(fake), "--",
        "--model-path", tiny, "--device", "cpu",
    )  # fmt: skip
    assert code == 3 and err.count("\n") == 1  # on CPU the plugin serves the host buffer
    assert f"has the SGLang plugin of xputune 0.0.9, this launcher is xputune {__version__}" in err
    assert f"-m pip install xputune=={__version__}`" in err


def test_a_real_launch_with_all_there_execs_that_interpreter(
    run_cli, tmp_path, monkeypatch, tiny
) -> None:
    ran = []
    monkeypatch.setattr(launch, "execute", ran.append)
    fake = fake_python(tmp_path / "env")
    code, _, err = run_cli(
        "launch", "sglang", "--python", str(fake), "--", "--model-path", tiny, "--device", "cpu"
    )
    assert code == 0, err
    [spec] = ran
    assert spec.argv[:3] == [str(fake), "-m", "sglang.launch_server"]
    assert spec.env["XPUTUNE_HICACHE_HOST_BUFFER"] == "1"


def test_an_untested_release_gets_flags_its_own_parser_takes(run_cli, tmp_path) -> None:
    options = ["--model-path", "--tp-size", "--enable-hicache", "--hicache-size",
               "--hicache-mem-layout", "--hicache-io-backend", "--hicache-write-policy",
               "--hicache-host-memory-fraction"]  # fmt: skip
    fake = fake_python(
        tmp_path, {**GOOD, "sglang": "0.5.99"}, {"options": options, "storage_backends": ["file"]}
    )
    code, out, err = run_cli("launch", "sglang", "-n", "--python", str(fake), *SEED, *GLM)
    assert code == 1, err
    words = _words(out)
    assert "--enable-hicache" in words and "--enable-hierarchical-cache" not in words
    assert "--numa-node" not in words
    assert "warning: sglang 0.5.99 has no --numa-node: left out" in err
    assert f"warning: sglang 0.5.99 in {fake} is untested (supported: 0.5.20-0.5.23)" in err
    assert calls(tmp_path) == ["probe", "parser"]


def test_the_l3_backend_and_its_package_are_asked_of_sglangs_interpreter(
    run_cli, tmp_path, listener
) -> None:
    l3 = ("--l3", "mooncake", "--l3-master", listener)
    fake = fake_python(tmp_path / "a", {**GOOD, "mooncake": False})
    code, _, err = run_cli("launch", "sglang", "-n", "--python", str(fake), *SEED, *l3, *GLM)
    assert code == 1
    assert any(f"the mooncake package is not installed for {fake}" in r for r in _refusals(err))
    parser = {"options": ["--model-path", "--tp-size"], "storage_backends": ["file"]}
    untested = fake_python(tmp_path / "b", {**GOOD, "sglang": "0.6.0"}, parser)
    code, _, err = run_cli("launch", "sglang", "-n", "--python", str(untested), *SEED, *l3, *GLM)
    assert code == 3  # what the release lacks comes first
    assert "would refuse: sglang 0.6.0 has no storage backend mooncake (it lists file)" in err


def test_a_prefill_server_gets_one_rdma_device_per_rank(run_cli, tmp_path) -> None:
    fake = fake_python(tmp_path, {**GOOD, "sglang": "0.5.23"})
    code, out, _ = run_cli("launch", "sglang", "-n", "--python", str(fake), *SEED, *GLM)
    assert code == 1 and "--disaggregation-ib-device" not in out  # read on a PD server only
    code, out, err = run_cli(
        "launch", "sglang", "-n", "--python", str(fake), *SEED, *GLM,
        "--disaggregation-mode", "prefill", "--enable-dp-attention", "--dp-size", "8",
    )  # fmt: skip
    assert code == 1, err
    words = _words(out)
    devices = json.loads(words[words.index("--disaggregation-ib-device") + 1])
    assert devices == {str(i): f"mlx5_{i // 2}" for i in range(8)}  # two cards per NIC
    assert "--enable-dp-attention" in words and "--attn-dp-size" not in words  # never rewritten
    assert "note: --enable-dp-attention is deprecated in sglang 0.5.23" in err
    assert "note: --hicache-size 32 is explicit, per rank: sglang 0.5.23's" in err


def test_the_preflight_is_started_once_and_read_where_it_is_needed(tmp_path) -> None:
    """policy.prepare takes a preflight already under way, as the CLI hands it over."""
    from xputune.host import open_host
    from xputune.launch import policy
    from xputune.plan.host_plan import PlanRequest
    from xputune.plan.models import resolve_model
    from xputune.topology.discover import discover

    fake = fake_python(tmp_path, {**GOOD, "plugin": None})
    view = open_host(None, "h3c-hygon-p800")
    request = policy.LaunchRequest(
        plan=PlanRequest(resolve_model("glm-5", None), tp=8),
        user_args=("--model-path", "glm-5"),
        features=(),
        force=True,
    )
    done = policy.prepare(view, discover(view), request, preflight.start(str(fake)))
    assert done.blockers == [] and done.refusals == []  # no features: no plugin needed
    assert done.spec.argv[0] == str(fake)
    assert calls(tmp_path) == ["probe"]
