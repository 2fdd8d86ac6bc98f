"""launch sglang -- --device cpu: no cards needed, tier from host memory, CPU engine env."""

from __future__ import annotations

import shlex

import pytest

from xputune.launch import cpu
from xputune.launch import sglang as launch
from xputune.launch.sglang import LaunchError

GIB = 1 << 30


def test_tier_steps_come_from_host_memory() -> None:
    tier = cpu.cpu_tier(24 * GIB, 1, 192, True, False, None)
    assert tier.steps == (1, 2, 4, 8) and tier.hicache_size_gb == 2
    assert cpu.cpu_tier(24 * GIB, 1, 192, True, False, "max").hicache_size_gb == 8
    # Two ranks split L2 unless they share one MLA buffer.
    assert cpu.cpu_tier(24 * GIB, 2, 192, True, False, "max").hicache_size_gb == 2
    assert cpu.cpu_tier(24 * GIB, 2, 192, True, True, "max").hicache_size_gb == 4
    with pytest.raises(LaunchError, match="at most 8 GB"):
        cpu.cpu_tier(24 * GIB, 1, 192, True, False, "64")
    with pytest.raises(LaunchError, match="leave no room"):
        cpu.cpu_tier(4 * GIB, 1, 192, True, False, None)


def test_omp_bind_splits_cpus_per_rank() -> None:
    assert cpu.omp_bind([0, 1], 2) == "0|1"
    assert cpu.omp_bind(list(range(8)), 2) == "0-3|4-7"
    with pytest.raises(LaunchError, match="needs 4 CPUs"):
        cpu.omp_bind([0, 1], 4)


def test_features_that_apply_on_cpu() -> None:
    wanted, notes = cpu.cpu_features(["lifo", "numa", "count-once"], shared=False)
    assert wanted == ["lifo", "count-once", "host-buffer", "kernels"]
    assert notes and notes[0].startswith("numa: dropped")
    assert "tp-shared" in cpu.cpu_features(["lifo"], shared=True)[0]


def test_cpu_dry_run_has_no_card_bindings(run_cli, tmp_path) -> None:
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(
        '{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, '
        '"num_attention_heads": 4, "num_key_value_heads": 2, "torch_dtype": "bfloat16"}'
    )
    code, out, err = run_cli(
        "launch", "sglang", "--dry-run", "--example", "h3c-hygon-p800", "--features",
        "lifo,count-once,numa", "--stats-dir", str(tmp_path / "stats"), "--",
        "--model-path", str(model), "--device", "cpu", "--tp-size", "2",
    )  # fmt: skip
    assert code == 0, err
    words = shlex.split(out.strip())
    env = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    assert env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert env["XPUTUNE_HICACHE_HOST_BUFFER"] == "1" and env["XPUTUNE_HICACHE_KERNELS"] == "1"
    assert env["XPUTUNE_HICACHE_STATS"] == str(tmp_path / "stats")
    assert "XPUTUNE_HICACHE_NUMA" not in env and "CUDA_VISIBLE_DEVICES" not in env
    assert "--numa-node" not in words and "--disaggregation-ib-device" not in words
    assert words[words.index("--page-size") + 1] == "1"
    assert words[words.index("--hicache-io-backend") + 1] == "kernel"
    assert "would refuse" not in err and "card(s) stay unused" in err
    assert "tier: " in err and "device cpu" in err


def test_cpu_launch_from_a_recording_refuses_to_exec(run_cli, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(launch, "execute", lambda spec: pytest.fail("must not exec"))
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(
        '{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, '
        '"num_attention_heads": 4, "num_key_value_heads": 2}'
    )
    code, out, err = run_cli(
        "launch", "sglang", "--example", "h3c-hygon-p800", "--",
        "--model-path", str(model), "--device", "cpu",
    )  # fmt: skip
    assert code != 0 and out == ""
    assert "drop --root/--example, or add --dry-run" in err
