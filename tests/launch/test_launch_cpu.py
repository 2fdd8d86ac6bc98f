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


def _cpu_spec(features: list[str], tp: int) -> launch.LaunchSpec:
    tier = cpu.cpu_tier(24 * GIB, tp, 192, True, False, None)
    spec, _ = cpu.build_cpu_spec(
        user_args=["--model-path", "m", "--device", "cpu"], features=features, tp=tp,
        tier=tier, write_policy="write_through", numa_nodes=1, cpus=[0, 1], shared=False,
        python="python",
    )  # fmt: skip
    return spec


def test_tp_above_one_on_cpu_leaves_nccl_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA build of torch (the only one sglang 0.5.23's torch 2.14.1 has) brings libnccl,
    and SGLang then binds a PyNccl communicator to a CUDA device a CPU server lacks."""
    monkeypatch.delenv(cpu.NCCL_ENV, raising=False)
    assert _cpu_spec(["lifo"], 2).env[cpu.NCCL_ENV] == cpu.NO_NCCL
    assert cpu.NCCL_ENV not in _cpu_spec(["lifo"], 1).env
    monkeypatch.setenv(cpu.NCCL_ENV, "/opt/nccl/libnccl.so.2")  # the user's own choice wins
    assert cpu.NCCL_ENV not in _cpu_spec(["lifo"], 2).env


def test_the_ghost_list_gets_the_python_tree_core_unless_the_user_chose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from xputune.sglang.targets import TREE_CORE_ENV

    monkeypatch.delenv(TREE_CORE_ENV, raising=False)
    spec = _cpu_spec(["lifo", "ghost"], 1)
    assert spec.env[TREE_CORE_ENV] == "python"
    assert not [n for n in spec.notes if "ghost" in n], spec.notes
    assert TREE_CORE_ENV not in _cpu_spec(["lifo"], 1).env  # SGLang's default otherwise
    monkeypatch.setenv(TREE_CORE_ENV, "rust")
    spec = _cpu_spec(["lifo", "ghost"], 1)
    assert TREE_CORE_ENV not in spec.env
    assert [n for n in spec.notes if "keeps the ghost list off" in n], spec.notes
