"""SGLang 0.5.23's parallel THP prefault (launch/prefault.py): what it does to where the host
KV pages land, said by plan and by launch sglang, and never changed by the launcher."""

from __future__ import annotations

import pytest

from xputune.host import open_host
from xputune.launch.prefault import (
    VARIABLE,
    launch_lines,
    plan_lines,
    plugin_holds_pools,
    reads_variable,
    threads,
)
from xputune.launch.releases import RELEASES, from_parser
from xputune.launch.sglang import build_spec
from xputune.plan.host_plan import make_plan
from xputune.plan.models import load_geometry
from xputune.topology.discover import discover

R20, R23 = RELEASES["0.5.20"], RELEASES["0.5.23"]
PLUGIN = {"XPUTUNE_HICACHE_NUMA": "1 1 3 3 5 5 7 7", "XPUTUNE_HICACHE_LIFO": "1"}


def test_only_releases_from_0_5_23_read_the_variable() -> None:
    assert not reads_variable(R20) and not reads_variable(RELEASES["0.5.22"])
    assert reads_variable(R23) and reads_variable(from_parser("0.5.24", [], []))
    assert plan_lines(R20, True, {VARIABLE: "8"}) == []
    assert launch_lines(R20, {}, True, {VARIABLE: "8"}) == []


@pytest.mark.parametrize(
    "text, count", [(None, None), ("0", 0), (" 16 ", 16), ("-3", 0), ("lots", None)]
)
def test_the_user_s_setting(text: str | None, count: int | None) -> None:
    assert threads({} if text is None else {VARIABLE: text}) == count


def test_the_plan_says_the_binding_holds_the_pages_whoever_faults_them() -> None:
    lines = plan_lines(R23, True, {})
    assert len(lines) == 2
    assert "numactl --membind to its --numa-node" in lines[0]
    assert f"{VARIABLE}=N from N threads that inherit the binding" in lines[0]
    assert "the pool must fit its L2 budget" in lines[0] and "--preferred" in lines[0]
    assert "plugin feature numa" in lines[1] and "does not move them" in lines[1]


def test_unbound_the_threads_decide_and_a_setting_is_a_warning() -> None:
    lines = plan_lines(R23, False, {VARIABLE: "8"})
    assert "binds nothing" in lines[0]
    assert lines[1].startswith(f"warning: your {VARIABLE}=8 spreads each pool")
    assert launch_lines(R23, {}, False, {VARIABLE: "8"})[0].startswith("warning:")


def test_launch_says_it_only_where_the_setting_matters() -> None:
    assert launch_lines(R23, PLUGIN, True, {}) == []  # unset: nothing to say
    assert launch_lines(R23, PLUGIN, True, {VARIABLE: "0"}) == []
    (moot,) = launch_lines(R23, PLUGIN, True, {VARIABLE: "8"})
    assert "does not touch the host KV pools: the plugin allocates them" in moot
    (kept,) = launch_lines(R23, {"XPUTUNE_HICACHE_LIFO": "1"}, True, {VARIABLE: "8"})
    assert "under the rank's --numa-node binding" in kept
    assert plugin_holds_pools({"XPUTUNE_HICACHE_TP_SHARED": "1"})
    assert not plugin_holds_pools({"XPUTUNE_HICACHE_LIFO": "1"})


def test_the_launcher_leaves_the_variable_as_the_user_set_it(monkeypatch) -> None:
    topo = discover(open_host(None, "h3c-hygon-p800"))
    plan = make_plan(topo, load_geometry("glm-5", None, 8, "bf16"))
    monkeypatch.setenv(VARIABLE, "8")
    with_plugin = build_spec(plan, [], ["lifo", "numa"], "python", R23)
    assert VARIABLE not in with_plugin.env
    assert any("does not touch the host KV pools" in n for n in with_plugin.notes)
    plain = build_spec(plan, [], [], "python", R23)
    assert VARIABLE not in plain.env
    assert any("--numa-node binding" in n for n in plain.notes)
    monkeypatch.delenv(VARIABLE)
    assert not any(VARIABLE in n for n in build_spec(plan, [], [], "python", R23).notes)
