"""What `xputune launch sglang --dry-run` prints is accepted by sglang 0.5.20 itself.

The argv goes through SGLang's own ServerArgs parser (so a misspelt or retired flag, or a value
of the wrong shape, fails here), and the environment goes through the plugin's own config
reader (so the launcher and the plugin agree on every switch).
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

import pytest

from xputune.sglang.config import PluginConfig

CASES = {
    "seed-local": (
        ("--example", "h3c-hygon-p800"),
        ("--model-path", "zai-org/GLM-5", "--tp", "8"),
        {"numa_node": [1, 1, 3, 3, 5, 5, 7, 7], "hicache_io_backend": "direct"},
        {"lifo", "count_once", "kernels", "async", "host_alloc"},
    ),
    "seed-shared": (
        ("--example", "h3c-hygon-p800", "--strategy", "shared", "--tier", "max"),
        ("--model-path", "zai-org/GLM-5", "--tp-size", "8"),
        {"hicache_io_backend": "direct"},
        {"lifo", "count_once", "kernels", "async", "host_alloc"},
    ),
    "seed-all-nodes-ghost": (
        ("--example", "h3c-hygon-p800", "--strategy", "all-nodes", "--force",
         "--features", "lifo,ghost,numa"),
        ("--model-path", "zai-org/GLM-5", "--tp", "8", "--hicache-write-policy",
         "write_through_selective"),
        {"numa_node": [1, 0, 3, 2, 5, 4, 7, 6], "hicache_write_policy": "write_through_selective"},
        {"lifo", "ghost", "host_alloc"},
    ),
    "nvidia-hgx": (
        ("--example", "nvidia-hgx-h100", "--model", "llama-3-70b"),
        ("--model-path", "/models/llama", "--tp", "4", "--mem-fraction-static", "0.8"),
        {"hicache_io_backend": "kernel", "mem_fraction_static": 0.8},
        {"lifo", "count_once", "kernels", "async", "host_alloc"},
    ),
}  # fmt: skip


def _split(line: str) -> tuple[dict[str, str], list[str]]:
    words = shlex.split(line.replace("\\\n", " "))  # shell text, continued with " \\"
    start = words.index("-m")
    assert words[start + 1] == "sglang.launch_server"
    env = dict(w.split("=", 1) for w in words[: start - 1])
    return env, words[start + 2 :]


@pytest.fixture(scope="module")
def sglang_parser(sgl: Any) -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    return parser


@pytest.mark.parametrize("case", sorted(CASES))
def test_dry_run_is_accepted_by_sglang_and_the_plugin(run_cli, sglang_parser, case) -> None:
    ours, theirs, expected, features = CASES[case]
    code, out, err = run_cli("launch", "sglang", "--dry-run", *ours, "--", *theirs)
    # a dry run ends as the launch would: 1 where the recorded box's settings drift
    drift = "critical setting(s) drift" in err
    assert code == (1 if drift else 0), err
    env, argv = _split(out.strip())

    parsed = sglang_parser.parse_args(argv)
    assert parsed.enable_hierarchical_cache is True
    assert parsed.hicache_mem_layout == "layer_first"
    assert parsed.hicache_size > 0
    for name, value in expected.items():
        assert getattr(parsed, name) == value, name

    cfg = PluginConfig.from_env(env)
    assert set(cfg.features()) == features
    assert cfg.tp_shared == ("shared" in case)
    if "numa_node" in expected:
        assert list(cfg.numa_nodes) == expected["numa_node"]  # buffer where the process is


def test_sglang_rejects_what_it_does_not_know(sglang_parser) -> None:
    """The check above can fail: a flag SGLang 0.5.20 lacks does not parse."""
    with pytest.raises(SystemExit):
        sglang_parser.parse_args(["--model-path", "m", "--hicache-mem-layout", "layer_last"])
    with pytest.raises(SystemExit):
        sglang_parser.parse_args(["--model-path", "m", "--xputune-numa", "1"])
