"""What `xputune launch sglang --dry-run --python P` prints is parsed by P's own sglang release.

For each release of the lanes (tests/sglang/releases.py) whose environment is here (the
`release` parameter of tests/server/conftest.py): the seed
box's launch for GLM-5 at TP 8, plain, with an L3 tier (Mooncake) and as a PD prefill server,
goes through that release's own parser (`ServerArgs.add_cli_args` on an argparse parser, then
`parse_args`) in that release's interpreter, with the GPU stand-ins as the server lane sets
them. It must parse, and what SGLang reads (hicache_size, numa_node, tp_size, the storage
backend and layout, the per-rank IB devices) must be what `xputune plan` says. The per-release
table of the launcher (xputune/launch/releases.py) is checked against the same parser.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.sglang.releases import python_for
from xputune.launch.releases import RELEASES as TABLE
from xputune.launch.releases import SPELLINGS

REPO = Path(__file__).resolve().parents[2]
STANDIN_SITE = Path(__file__).resolve().parent / "standin_site"
SEED = ("--example", "h3c-hygon-p800")
GLM = ("--model-path", "zai-org/GLM-5", "--tp", "8")
FIELDS = (
    "tp_size", "hicache_size", "numa_node", "enable_hierarchical_cache", "hicache_mem_layout",
    "hicache_io_backend", "hicache_write_policy", "hicache_storage_backend",
    "hicache_storage_backend_extra_config", "hicache_storage_prefetch_policy",
    "disaggregation_mode", "disaggregation_ib_device",
)  # fmt: skip
#: (launcher options, SGLang arguments after the model and --tp) of each variant
VARIANTS = {
    "plain": ((), ()),
    "l3-mooncake": (("--l3", "mooncake", "--l3-master", "127.0.0.1:1"), ()),
    "pd-prefill": ((), ("--disaggregation-mode", "prefill")),
}

# Runs in the release's interpreter: every argv of stdin through its own parser.
PARSE = r"""
import argparse, json, sys, warnings
warnings.simplefilter("ignore")
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser(prog="sglang.launch_server")
ServerArgs.add_cli_args(parser)
request = json.load(sys.stdin)
out = {"options": sorted({s for a in parser._actions for s in a.option_strings}),
       "storage_backends": [], "parsed": {}}
for action in parser._actions:
    if "--hicache-storage-backend" in action.option_strings:
        out["storage_backends"] = [str(c) for c in action.choices]
for name, argv in request["cases"].items():
    ns = parser.parse_args(argv)
    out["parsed"][name] = {k: getattr(ns, k, None) for k in request["fields"]}
sys.stdout.write("\nPARSED " + json.dumps(out, default=str) + "\n")
"""


def _sglang_argv(out: str) -> list[str]:
    words = shlex.split(out.replace("\\\n", " "))  # shell text, continued with " \\"
    start = words.index("-m")
    assert words[start + 1] == "sglang.launch_server"
    return words[start + 2 :]


def _own_parser(python: Path, cases: dict[str, list[str]]) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(STANDIN_SITE)  # the GPU stand-ins, as tests/server/server.py
    env["XPUTUNE_TEST_REPO"] = str(REPO)
    done = subprocess.run(
        [str(python), "-c", PARSE], input=json.dumps({"cases": cases, "fields": FIELDS}),
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("PARSED ")]
    assert done.returncode == 0 and lines, f"{python}: {done.stderr[-3000:]}"
    return json.loads(lines[-1][len("PARSED ") :])


@cache
def _parsed(version: str) -> dict[str, Any]:
    """The launcher's dry runs for the release, and its parser's reading of each (once)."""
    from xputune.cli.entry import main

    python = python_for(version)
    cases, plans = {}, {}
    for name, (ours, theirs) in VARIANTS.items():
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["launch", "sglang", "--dry-run", "--python", str(python), *SEED,
                         *ours, "--", *GLM, *theirs])  # fmt: skip
        # the recorded box drifts: a dry run ends as the launch would (1) and prints the command
        assert code == 1 and "critical setting(s) drift" in err.getvalue(), err.getvalue()
        cases[name] = _sglang_argv(out.getvalue())
        plan_out = io.StringIO()
        with contextlib.redirect_stdout(plan_out), contextlib.redirect_stderr(io.StringIO()):
            code = main(["plan", *SEED, "--model", "glm-5", "--tp", "8", "--python",
                         str(python), *ours, "-f", "json"])  # fmt: skip
        assert code == 0
        plans[name] = json.loads(plan_out.getvalue())
    return {"version": version, "cases": cases, "plans": plans, **_own_parser(python, cases)}


@pytest.fixture
def parsed(release: str) -> dict[str, Any]:
    """`release` is one of tests/sglang/releases.RELEASES (tests/server/conftest.py runs the
    test once per release, skipped with the reason where its environment is missing)."""
    return _parsed(release)


def test_the_printed_command_parses_as_the_plan_says(parsed) -> None:
    for name, got in parsed["parsed"].items():
        plan = parsed["plans"][name]
        assert plan["sglang"]["release"] == parsed["version"]
        assert got["tp_size"] == plan["model"]["tp"] == 8, name
        assert got["hicache_size"] == plan["tier"]["hicache_size_gb"] == 32, name
        assert got["numa_node"] == [r["numa_node"] for r in plan["ranks"]], name
        assert got["enable_hierarchical_cache"] is True
        layout = plan["sglang_args"][plan["sglang_args"].index("--hicache-mem-layout") + 1]
        assert got["hicache_mem_layout"] == layout
    plain, l3, pd = (parsed["parsed"][n] for n in VARIANTS)
    assert plain["hicache_storage_backend"] is None and plain["disaggregation_ib_device"] is None
    assert l3["hicache_storage_backend"] == "mooncake"
    assert l3["hicache_mem_layout"] == "page_first_direct"  # Kunlunxin: io direct
    extra = json.loads(l3["hicache_storage_backend_extra_config"])
    assert json.loads(extra["device_name"]) == parsed["plans"]["l3-mooncake"]["l3"]["device_map"]
    assert pd["disaggregation_mode"] == "prefill"
    per_rank = json.loads(pd["disaggregation_ib_device"])
    plan = parsed["plans"]["pd-prefill"]
    assert per_rank == json.loads(plan["disaggregation_args"][1])
    assert per_rank == {str(r["rank"]): r["rdma"] for r in plan["ranks"]}


def test_the_launchers_table_is_the_releases_own(parsed) -> None:
    row = TABLE[parsed["version"]]
    options = set(parsed["options"])
    for names in SPELLINGS.values():
        for spelling in names:
            assert row.accepts(spelling) == (spelling in options), spelling
    assert row.storage_backends == tuple(parsed["storage_backends"])
    assert ("--attn-dp-size" in options) == row.attn_dp
    assert ("--hicache-host-memory-fraction" in options) == row.sizes_l2_itself
