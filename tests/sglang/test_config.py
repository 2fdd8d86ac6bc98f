"""The launcher contract: XPUTUNE_HICACHE_* variables to PluginConfig (pure, no sglang needed)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xputune.sglang.config import ConfigError, PluginConfig, parse_node_list


def test_everything_is_off_by_default() -> None:
    cfg = PluginConfig.from_env({})
    assert cfg.features() == ()
    assert cfg.on_mismatch == "warn"


def test_switches_map_to_features_in_install_order() -> None:
    cfg = PluginConfig.from_env(
        {
            "XPUTUNE_HICACHE_GHOST": "1",
            "XPUTUNE_HICACHE_LIFO": "true",
            "XPUTUNE_HICACHE_KERNELS": "on",
            "XPUTUNE_HICACHE_ASYNC": "yes",
            "XPUTUNE_HICACHE_COUNT_ONCE": "0",
            "XPUTUNE_HICACHE_NUMA": "1 1 3 3",
            "XPUTUNE_HICACHE_GHOST_CAPACITY": "4096",
        }
    )
    assert cfg.features() == ("lifo", "ghost", "kernels", "async", "host_alloc")
    assert cfg.numa_nodes == (1, 1, 3, 3) and cfg.ghost_capacity == 4096


def test_tp_shared_brings_the_checked_lifo_allocator() -> None:
    cfg = PluginConfig.from_env({"XPUTUNE_HICACHE_TP_SHARED": "1"})
    assert cfg.features() == ("lifo", "host_alloc")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"XPUTUNE_HICACHE_LIFO": "maybe"}, "XPUTUNE_HICACHE_LIFO='maybe': expected 1 or 0"),
        ({"XPUTUNE_HICACHE_NUMA": "1,x"}, "expected NUMA node numbers"),
        ({"XPUTUNE_HICACHE_GHOST_CAPACITY": "0"}, "expected a positive integer"),
        ({"XPUTUNE_HICACHE_ON_MISMATCH": "ignore"}, "expected one of warn, exit"),
        ({"XPUTUNE_HICACHE_LIFE": "1"}, "unknown variable XPUTUNE_HICACHE_LIFE"),
    ],
)
def test_garbage_is_one_line_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PluginConfig.from_env(env)


@given(
    st.lists(st.integers(min_value=0, max_value=255), max_size=16),
    st.sampled_from([" ", ",", ", "]),
)
def test_node_lists_round_trip(nodes: list[int], sep: str) -> None:
    assert parse_node_list(sep.join(map(str, nodes))) == tuple(nodes)


def test_host_buffer_and_stats_switches() -> None:
    cfg = PluginConfig.from_env(
        {"XPUTUNE_HICACHE_HOST_BUFFER": "1", "XPUTUNE_HICACHE_STATS": "/tmp/xputune-stats"}
    )
    assert cfg.features() == ("host_alloc", "stats")
    assert cfg.host_alloc and cfg.stats_dir == "/tmp/xputune-stats"
    with pytest.raises(ConfigError, match="expected an absolute directory path"):
        PluginConfig.from_env({"XPUTUNE_HICACHE_STATS": "relative/dir"})
