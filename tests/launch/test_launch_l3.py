"""launch sglang --l3: the storage flags, the layout the backend runs, and the preflight that
says in one line what is missing (the master, the mooncake package, libibverbs, the folder)."""

from __future__ import annotations

import json
import shlex
import socket

import pytest

from xputune.launch import l3check

SEED = ("--example", "h3c-hygon-p800")
GLM = ("--", "--model-path", "zai-org/GLM-5", "--tp", "8")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nobody listens once it is closed


def _words(out: str) -> list[str]:
    return shlex.split(out.replace("\\\n", " "))  # shell text, continued with " \\"


def _value(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def test_mooncake_on_the_seed_box_runs_page_first_direct_with_one_extra_config(
    run_cli, listener, monkeypatch
) -> None:
    monkeypatch.setattr(l3check, "_mooncake_missing", lambda *a: None)
    code, out, err = run_cli(
        "launch", "sglang", "-n", *SEED, "--l3", "mooncake", "--l3-master", listener,
        "--l3-segment-gb", "16", *GLM,
    )  # fmt: skip
    assert code == 1, err  # the seed box drifts
    words = _words(out)
    assert _value(words, "--hicache-mem-layout") == "page_first_direct"  # io direct (Kunlunxin)
    assert _value(words, "--hicache-storage-backend") == "mooncake"
    extra = json.loads(_value(words, "--hicache-storage-backend-extra-config"))
    assert extra["master_server_address"] == listener
    assert extra["global_segment_size"] == 16 * 10**9 and extra["protocol"] == "rdma"
    assert json.loads(extra["device_name"])["7"] == "mlx5_3"
    assert _value(words, "--hicache-storage-prefetch-policy") == "timeout"
    assert "each rank mounts 2 GB" in err
    assert "does not answer" not in err  # the master is there


def test_a_missing_master_is_one_refusal_line_and_force_launches_anyway(run_cli, monkeypatch):
    """Each reason on its own line with its own fix (drift's `xputune apply` once ran after the
    master's reason, as if it fixed that), and the dry run ends as the launch would: 1, drift
    first, so `launch --dry-run && launch` stops."""
    monkeypatch.setattr(l3check, "_mooncake_missing", lambda *a: None)
    master = f"127.0.0.1:{_closed_port()}"
    code, _, err = run_cli(
        "launch", "sglang", "-n", *SEED, "--l3", "mooncake", "--l3-master", master, *GLM
    )
    assert code == 1
    drift, reached = [line for line in err.splitlines() if line.startswith("would refuse:")]
    assert drift.startswith("would refuse: 26 critical setting(s) drift from profile")
    assert "xputune apply" in drift and "Mooncake" not in drift and drift.endswith("--force")
    assert reached.startswith(f"would refuse: the Mooncake master {master} does not answer (")
    assert reached.endswith(
        "start mooncake_master there, or name the one that runs with --l3-master, or pass --force"
    )
    code, _out, err = run_cli(
        "launch", "sglang", "-n", "--force", *SEED, "--l3", "mooncake", "--l3-master", master,
        *GLM,
    )  # fmt: skip
    assert code == 0 and "would refuse" not in err


def test_without_the_mooncake_package_the_refusal_says_what_to_install(monkeypatch) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert "pip install mooncake-transfer-engine" in l3check._mooncake_missing()


def test_without_libibverbs_the_refusal_names_the_debian_package(monkeypatch) -> None:
    import ctypes
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())

    def no_verbs(name: str, *a, **k):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_verbs)
    assert "apt install libibverbs1" in l3check._mooncake_missing()


def test_a_layer_first_in_args_is_said_to_be_rewritten(run_cli, listener, monkeypatch) -> None:
    monkeypatch.setattr(l3check, "_mooncake_missing", lambda *a: None)
    code, _out, err = run_cli(
        "launch", "sglang", "-n", *SEED, "--l3", "mooncake", "--l3-master", listener,
        *GLM, "--hicache-mem-layout", "layer_first",
    )  # fmt: skip
    assert code == 1  # the seed box drifts
    assert "SGLang rewrites it to page_first for mooncake" in err


def test_cpu_file_backend_keeps_layer_first_and_names_its_folder(run_cli, tmp_path) -> None:
    (tmp_path / "cfg.json").write_text(
        json.dumps(
            {
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "hidden_size": 64,
            }
        )
    )
    code, out, err = run_cli(
        "launch", "sglang", "-n", "--config", str(tmp_path / "cfg.json"), "--l3", "file",
        "--l3-dir", str(tmp_path), "--", "--model-path", "x", "--device", "cpu",
    )  # fmt: skip
    assert code == 0, err
    words = _words(out)
    assert f"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR={tmp_path}" in words
    assert _value(words, "--hicache-mem-layout") == "layer_first"
    assert _value(words, "--hicache-storage-backend") == "file"
    assert "--hicache-storage-backend-extra-config" not in words
    assert "would refuse" not in err


def test_cpu_mooncake_talks_tcp_and_runs_page_first(run_cli, tmp_path, listener, monkeypatch):
    monkeypatch.setattr(l3check, "_mooncake_missing", lambda *a: None)
    (tmp_path / "cfg.json").write_text(
        json.dumps(
            {
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "hidden_size": 64,
            }
        )
    )
    code, out, err = run_cli(
        "launch", "sglang", "-n", "--config", str(tmp_path / "cfg.json"), "--l3", "mooncake",
        "--l3-master", listener, "--l3-segment-gb", "0.5", "--l3-host", "127.0.0.1", "--",
        "--model-path", "x", "--device", "cpu",
    )  # fmt: skip
    assert code == 0, err
    words = _words(out)
    assert _value(words, "--hicache-mem-layout") == "page_first"
    extra = json.loads(_value(words, "--hicache-storage-backend-extra-config"))
    assert extra["protocol"] == "tcp" and "device_name" not in extra
    assert extra["local_hostname"] == "127.0.0.1" and extra["global_segment_size"] == 5 * 10**8


def test_a_cpu_segment_beyond_the_hosts_memory_is_refused(run_cli, tmp_path, listener, monkeypatch):
    monkeypatch.setattr(l3check, "_mooncake_missing", lambda *a: None)
    (tmp_path / "cfg.json").write_text(
        json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64})
    )
    code, _out, err = run_cli(
        "launch", "sglang", "-n", "--config", str(tmp_path / "cfg.json"), "--l3", "mooncake",
        "--l3-master", listener, "--l3-segment-gb", "100000", "--", "--model-path", "x",
        "--device", "cpu",
    )  # fmt: skip
    assert code == 3  # a launch would refuse: the L3 tier cannot work here
    assert "does not fit beside the L2 tier" in err and "would refuse" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--l3-master", "h:1"), "--l3-master needs --l3 mooncake|file"),
        (("--l3", "file"), "--l3 file needs --l3-dir DIR"),
        (("--l3", "mooncake", "--l3-dir", "/x"), "--l3-dir is for --l3 file"),
        (("--l3", "mooncake", "--l3-master", "nohost"), "expected HOST:PORT"),
        (("--l3", "mooncake", "--l3-protocol", "udp"), "is not one of tcp, rdma"),
        (("--l3", "mooncake", "--l3-segment-gb", "nan"), "--l3-segment-gb"),
    ],
)
def test_bad_l3_flags_are_one_usage_line(run_cli, args, message) -> None:
    code, out, err = run_cli("launch", "sglang", "-n", *SEED, *args, *GLM)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err, err


def test_the_folder_checks_say_what_is_wrong(tmp_path) -> None:
    assert "absolute path" in l3check._folder_problem("l3")
    assert "does not exist" in l3check._folder_problem(str(tmp_path / "nope"))
    assert l3check._folder_problem(str(tmp_path)) is None


def test_a_real_launch_refused_for_several_reasons_says_one_a_line(capsys) -> None:
    """A real launch stops before SGLang: one reason is its error line; several are one a
    line (each with its fix), and the error line counts them, with the dry run's status."""
    from xputune.cli.refusals import refuse
    from xputune.launch.sglang import LaunchError

    with pytest.raises(LaunchError) as one:
        refuse(["a: fix a, or pass --force"], 3)
    assert str(one.value) == "a: fix a, or pass --force" and one.value.exit_code == 3
    assert capsys.readouterr().err == ""
    with pytest.raises(LaunchError) as two:
        refuse(["a: fix a, or pass --force", "b: fix b, or pass --force"], 1)
    assert two.value.exit_code == 1
    assert str(two.value) == "2 reasons refuse the launch, each above with its fix"
    assert capsys.readouterr().err.splitlines() == [
        "refused: a: fix a, or pass --force",
        "refused: b: fix b, or pass --force",
    ]
