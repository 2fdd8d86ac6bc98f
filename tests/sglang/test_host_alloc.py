"""The host KV buffer allocated by xputune (NUMA-bound or TP-shared) under SGLang's real pool.

On this CPU-only machine no device runtime exists, so registration is skipped (SGLang's pool
still asks for pinned memory); a single process stands for a TP group of one.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.sglang.world import device_pool, host_pool
from xputune.errors import HostError
from xputune.sglang.config import PluginConfig


def _pool_or_skip(sgl: Any) -> Any:
    try:
        return host_pool(sgl, device_pool(sgl), pin_memory=True)
    except HostError as exc:  # e.g. mbind refused inside a restricted container
        pytest.skip(f"host buffer placement not possible here: {exc}")


def test_numa_bound_buffer_backs_the_real_pool(sgl: Any, plugin: Any) -> None:
    from xputune.hicache.hostbuf import HostBuffer

    plugin.install(PluginConfig(numa_nodes=(0,)))
    pool = _pool_or_skip(sgl)
    (buf,) = pool.__dict__["_xputune_host_buffers"]
    assert isinstance(buf, HostBuffer) and buf.expected_nodes == (0,)
    assert pool.kv_buffer.data_ptr() == buf.address
    assert pool.kv_buffer.shape == (pool.layer_num, pool.size, 1, pool.kv_cache_dim)
    pool.kv_buffer[1, 5, 0, :] = 3.0
    assert float(buf.array("float32")[(pool.size + 5) * pool.kv_cache_dim]) == 3.0


def test_tp_shared_buffer_checks_the_lifo_allocator(sgl: Any, plugin: Any) -> None:
    from xputune.hicache.tpshared import TpSharedBuffer

    plugin.install(PluginConfig(tp_shared=True))
    pool = _pool_or_skip(sgl)
    shared = pool.__dict__["_xputune_shared_buffer"]
    assert isinstance(shared, TpSharedBuffer) and shared.writes_to_host
    assert pool.kv_buffer.data_ptr() == shared.address
    lifo = pool.__dict__["_xputune_lifo"]
    assert lifo.observer == shared.publish_decisions
    before = lifo.decisions
    pool.free(pool.alloc(8))
    assert lifo.decisions == before + 2 and lifo.digest != 0


def test_numa_list_shorter_than_the_card_index_is_one_clear_error(
    sgl: Any, plugin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from xputune.sglang.config import ConfigError

    monkeypatch.setenv("LOCAL_RANK", "3")
    plugin.install(PluginConfig(numa_nodes=(0, 0)))
    with pytest.raises(ConfigError, match="lists 2 node"):
        host_pool(sgl, device_pool(sgl), pin_memory=True)
