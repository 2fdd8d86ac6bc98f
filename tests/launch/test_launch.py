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
    assert code == 1  # the box drifts: a launch would refuse (1), and so says the dry run
    assert all(line.endswith(" \\") for line in out.strip().splitlines()[:-1])  # shell text
    words = shlex.split(out.replace("\\\n", " "))
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


def _prepare(*user_args: str, force: bool = False, strategy: str = "local"):
    """policy.prepare on the seed box's recording, as a launch on that box would run it."""
    from xputune.host import open_host
    from xputune.launch import policy
    from xputune.plan.host_plan import PlanRequest
    from xputune.plan.models import resolve_model
    from xputune.topology.discover import discover

    view = open_host(None, "h3c-hygon-p800")
    user = list(user_args)
    tp = policy.reconcile_tp(None, user)
    model, _ = policy.model_from_args(None, None, user)
    request = policy.LaunchRequest(
        plan=PlanRequest(resolve_model(model, None), tp=tp, strategy=strategy),
        user_args=tuple(user),
        features=("lifo", "async", "count-once", "kernels", "numa"),
        force=force,
    )
    return policy.prepare(view, discover(view), request)


def test_critical_drift_is_a_refusal_a_real_launch_raises() -> None:
    launch = _prepare("--model-path", "glm-5", "--tp", "8")
    assert launch.drifting and launch.refusals[0].startswith("26 critical setting")
    assert _prepare("--model-path", "glm-5", "--tp", "8", force=True).refusals == []


@pytest.mark.parametrize("force", [False, True])
def test_a_recording_never_launches_even_with_force(run_cli, monkeypatch, force) -> None:
    monkeypatch.setattr(launch, "execute", lambda spec: pytest.fail("must not exec"))
    extra = ("--force",) if force else ()
    code, out, err = _launch(run_cli, *extra, *SEED, "--", "--model-path", "glm-5", "--tp", "8")
    assert code == 2 and out == ""
    assert "another machine's bindings" in err and "--force does not change that" in err


def test_force_execs_with_merged_args() -> None:
    spec = _prepare(
        "--model-path", "glm-5", "--tp-size", "8", "--hicache-size", "100",
        force=True, strategy="shared",
    ).spec  # fmt: skip
    assert spec.env["XPUTUNE_HICACHE_TP_SHARED"] == "1"
    assert "XPUTUNE_HICACHE_NUMA" not in spec.env  # the shared buffer is interleaved instead
    assert spec.argv[1:3] == ["-m", "sglang.launch_server"]
    assert spec.argv.count("--hicache-size") == 1 and "100" in spec.argv
    assert any("--hicache-size: yours (100)" in c for c in spec.conflicts)


def test_tp_defaults_to_the_cards_and_a_refused_size_needs_force(run_cli) -> None:
    code, out, err = _launch(run_cli, "-n", *SEED, "--", "--model-path", "zai-org/GLM-5")
    assert code == 1 and "--tp-size 8" in out  # 8 cards, not SGLang's 1
    code, out, err = _launch(run_cli, "-n", "--tp", "3", *SEED, "--model", "glm-5")
    assert code == 2 and out == "" and "64 attention heads" in err and "--force" in err
    code, out, err = _launch(run_cli, "-n", "--force", "--tp", "3", *SEED, "--model", "glm-5")
    assert code == 0 and "--tp-size 3" in out
    assert "warning: TP 3 does not divide the model's 64 attention heads" in err


def test_suggested_commands_name_the_recording(run_cli) -> None:
    _, _, err = _launch(run_cli, "-n", *SEED, "--", "--model-path", "glm-5", "--tp", "8")
    assert "run `xputune apply` on the host it was recorded on; here, on a copy: `mkdir " in err
    assert "(see `xputune check --example h3c-hygon-p800`)" in err  # reading works on it


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--", "--model-path", "some/unknown-model", "--tp", "8"), "cannot tell the model"),
        (("--tp", "4", "--", "--model-path", "glm-5", "--tp", "8"), "disagrees"),
        (("--model", "glm-5", "--tp", "16"), "needs 16 cards"),
        (("--model", "glm-5", "--tp", "9"), "64 attention heads"),
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
