"""bench host: size parsing, estimates, and the command through the CLI's entry point."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xputune.errors import HostError, PermissionRequired
from xputune.hicache import hostbench
from xputune.hicache.hostbench import estimated_page_table_bytes, parse_size


@given(st.integers(4, 4096), st.sampled_from(["K", "M", "G", "k", "MiB", "GiB", "mb"]))
def test_parse_size_units(n, unit):
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit[0].lower()]
    assert parse_size(f"{n}{unit}") == n * scale


@pytest.mark.parametrize("text", ["", "abc", "1X", "-1G", "12", "1.5Q"])
def test_parse_size_rejects(text):
    with pytest.raises(HostError):
        parse_size(text)


def test_page_table_estimate_matches_the_seed_arithmetic():
    size = 100 << 30  # the seed's 100 GB buffer: ~26M 4 KB entries, 512x fewer huge ones
    assert estimated_page_table_bytes(size, 0) // 8 == 26_214_400
    assert estimated_page_table_bytes(size, size) * 512 == estimated_page_table_bytes(size, 0)
    half = estimated_page_table_bytes(size, size // 2)
    assert estimated_page_table_bytes(size, size) < half < estimated_page_table_bytes(size, 0)


def test_plan_size_caps_to_spare_memory():
    size, capped = hostbench.plan_size(1 << 60)
    assert capped and size % (2 << 20) == 0 and size < 1 << 60
    assert hostbench.plan_size(8 << 20) == (8 << 20, False)


def test_mlock_over_the_limit_is_refused_clearly(monkeypatch):
    monkeypatch.setattr(hostbench, "_can_lock", lambda size: False)
    with pytest.raises(PermissionRequired, match="ulimit -l"):
        hostbench.choose_registrar("mlock", 1 << 30)
    with pytest.raises(HostError, match="unknown pin method"):
        hostbench.choose_registrar("glue", 1 << 20)


def test_bench_host_json_reports_both_page_sizes(run_cli):
    code, out, err = run_cli("bench", "host", "--size", "8M", "--pin", "mlock", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["schema_version"] == 1 and data["size_bytes"] == 8 << 20
    assert [r["pages"] for r in data["runs"]] == ["4k", "thp"]
    small = data["runs"][0]
    assert small["anon_huge_bytes"] == 0
    assert small["translation_entries"] == (8 << 20) // 4096
    assert all(r["placement"]["ok"] for r in data["runs"])
    assert data["pin_method"] == "mlock"


def test_bench_host_table_and_bad_node(run_cli):
    code, out, _ = run_cli("bench", "host", "--size", "4M", "--pin", "mlock")
    assert code == 0 and "THP" in out
    code, out, err = run_cli("bench", "host", "--size", "4M", "--node", "999")
    assert code == 2 and out == "" and err.startswith("xputune: error: ")
