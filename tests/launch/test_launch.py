"""launch sglang without SGLang: the command line, the env, drift refusal, flag merging."""

from __future__ import annotations

import shlex

import pytest

from xputune.launch import sglang as launch
from xputune.launch.sglang import canonical, merge, split_flags

SEED = ("--example", "h3c-hygon-p800")


def _launch(run_cli, *args: str):
    return run_cli("launch", "sglang", *args)


def test_dry_run_prints_the_seed_binding_and_tier(run_cli) -> None:
    code, out, err = _launch(
        run_cli, "--dry-run", *SEED, "--", "--model-path", "zai-org/GLM-5", "--tp", "8"
    )
    assert code == 0
    line = out.strip()
    assert "\n" not in line
    words = shlex.split(line)
    i = words.index("--numa-node")
    assert words[i + 1 : i + 9] == ["1", "1", "3", "3", "5", "5", "7", "7"]
    assert "XPU_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in words
    assert "XPUTUNE_HICACHE_LIFO=1" in words
    assert "XPUTUNE_HICACHE_NUMA=1 1 3 3 5 5 7 7" in words  # host KV on each card's node
    assert "XPUTUNE_HICACHE_GHOST=1" not in words  # off unless asked for
    assert words[words.index("--hicache-mem-layout") + 1] == "layer_first"
    assert words[words.index("--hicache-size") + 1] == "32"
    assert "tier: 32 GB per rank (step 3 of 5" in err
    assert "would refuse" in err  # the fixture box is untuned: IDO off, numa balancing on
    assert "--tp-size" not in words  # the user's --tp already says it


def test_critical_drift_refuses_before_exec(run_cli, monkeypatch) -> None:
    def no_exec(spec):
        raise AssertionError("must not exec")

    monkeypatch.setattr(launch, "execute", no_exec)
    code, out, err = _launch(run_cli, *SEED, "--", "--model-path", "glm-5", "--tp", "8")
    assert code != 0 and out == ""
    assert err.strip().splitlines()[-1].startswith("xputune: error: 26 critical setting(s)")


def test_force_execs_with_merged_args(run_cli, monkeypatch) -> None:
    seen = []
    monkeypatch.setattr(launch, "execute", seen.append)
    code, _, err = _launch(
        run_cli,
        "--force",
        "--strategy",
        "shared",
        *SEED,
        "--",
        "--model-path",
        "glm-5",
        "--tp-size",
        "8",
        "--hicache-size",
        "100",
    )
    assert code == 0 and len(seen) == 1
    spec = seen[0]
    assert spec.env["XPUTUNE_HICACHE_TP_SHARED"] == "1"
    assert "XPUTUNE_HICACHE_NUMA" not in spec.env  # the shared buffer is interleaved instead
    assert spec.argv[1:3] == ["-m", "sglang.launch_server"]
    assert spec.argv.count("--hicache-size") == 1 and "100" in spec.argv
    assert any("--hicache-size: yours (100)" in c for c in spec.conflicts)
    assert "conflict:" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--", "--model-path", "some/unknown-model", "--tp", "8"), "cannot tell the model"),
        (("--tp", "4", "--", "--model-path", "glm-5", "--tp", "8"), "disagrees"),
        (("--model", "glm-5", "--tp", "9"), "needs 9 cards"),
        (("--model", "glm-5", "--tp", "8", "--features", "turbo"), "unknown cache feature"),
    ],
)
def test_bad_requests_fail_with_one_line(run_cli, args, message) -> None:
    code, out, err = _launch(run_cli, "--dry-run", *SEED, *args)
    assert code != 0 and out == ""
    assert message in err.strip().splitlines()[-1]


def test_flag_spellings_and_merge() -> None:
    assert canonical("--tp") == "--tp-size"
    assert canonical("--tensor-parallel-size") == "--tp-size"
    assert canonical("--hicache") == "--hicache"  # ambiguous prefix stays as typed
    assert split_flags(["--a=1", "--b", "2", "3", "--c"]) == [
        ("--a", ["1"]),
        ("--b", ["2", "3"]),
        ("--c", []),
    ]
    merged = merge(["--numa-node", "1", "1", "--hicache-size", "8"], ["--hicache-size=9"])
    assert merged.args == ["--hicache-size=9", "--numa-node", "1", "1"]
    assert len(merged.conflicts) == 1
    with pytest.raises(launch.LaunchError, match="does not follow"):
        split_flags(["stray", "--x"])
