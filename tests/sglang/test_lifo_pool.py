"""LIFO on SGLang's real MLATokenToKVPoolHost (layer_first, CPU tensors, small sizes)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sglang.world import PAGE, device_pool, host_pool
from xputune.sglang.config import PluginConfig


def _pages(slots: Any) -> list[int]:
    return sorted({int(s) // PAGE for s in slots.tolist()})


def _reuse_after_free(pool: Any) -> tuple[list[int], list[int]]:
    """Take three pages, give back the first, take one more: which page comes back?"""
    a = pool.alloc(PAGE)
    pool.alloc(PAGE)
    pool.alloc(PAGE)
    pool.free(a)
    return _pages(a), _pages(pool.alloc(PAGE))


def test_unpatched_release_is_fifo(sgl: Any, plugin: Any) -> None:
    pool = host_pool(sgl, device_pool(sgl))
    freed, reused = _reuse_after_free(pool)
    assert reused != freed  # SGLang's own pool hands out a never-used page first


def test_lifo_reuses_the_page_freed_last(sgl: Any, plugin: Any) -> None:
    plugin.install(PluginConfig(lifo=True))
    pool = host_pool(sgl, device_pool(sgl))
    assert isinstance(pool, sgl.pool_base.HostKVCache)
    freed, reused = _reuse_after_free(pool)
    assert reused == freed


def test_lifo_keeps_sizes_and_whole_pages_in_order(sgl: Any, plugin: Any) -> None:
    plugin.install(PluginConfig(lifo=True))
    pool = host_pool(sgl, device_pool(sgl))
    total = pool.available_size()
    assert total == pool.size
    a = pool.alloc(3 * PAGE)
    b = pool.alloc(2 * PAGE)
    assert pool.available_size() == total - 5 * PAGE
    assert a.dtype == sgl.torch.int64
    assert a.tolist() == list(range(3 * PAGE))  # a fresh pool still starts at slot 0, in order
    pool.free(b)
    pool.free(a)
    again = pool.alloc(3 * PAGE)
    assert _pages(again) == _pages(a)  # the group freed last comes back first, page order kept
    assert pool.available_size() == total - 3 * PAGE
    assert pool.alloc(pool.available_size() + PAGE) is None  # SGLang's "evict, then retry"


def test_lifo_refuses_a_double_free(sgl: Any, plugin: Any) -> None:
    from xputune.hicache.lifo import AllocatorError

    plugin.install(PluginConfig(lifo=True))
    pool = host_pool(sgl, device_pool(sgl))
    a = pool.alloc(PAGE)
    pool.free(a)
    with pytest.raises(AllocatorError, match="double free"):
        pool.free(a)


def test_clear_resets_the_lifo_order(sgl: Any, plugin: Any) -> None:
    plugin.install(PluginConfig(lifo=True))
    pool = host_pool(sgl, device_pool(sgl))
    pool.alloc(4 * PAGE)
    pool.clear()
    assert pool.available_size() == pool.size
    assert pool.alloc(PAGE).tolist() == list(range(PAGE))


def test_lifo_slots_move_real_kv_through_the_pool(sgl: Any, plugin: Any) -> None:
    """A backup into LIFO-chosen slots lands where the pool's own load reads it back."""
    torch = sgl.torch
    plugin.install(PluginConfig(lifo=True, kernels=True))
    dev = device_pool(sgl)
    pool = host_pool(sgl, dev)
    first = pool.alloc(2 * PAGE)
    pool.free(first)
    host_slots = pool.alloc(2 * PAGE)  # LIFO: the same slots again
    assert host_slots.tolist() == first.tolist()
    dev_slots = torch.arange(8, 16, dtype=torch.int64)
    for layer in range(dev.layer_num):
        dev.kv_buffer[layer][dev_slots, 0, :] = torch.arange(8, 16, dtype=torch.float32)[:, None]
    pool.backup_from_device_all_layer(dev, host_slots, dev_slots, "kernel")
    back = torch.arange(32, 40, dtype=torch.int64)
    for layer in range(dev.layer_num):
        pool.load_to_device_per_layer(dev, host_slots, back, layer, "kernel")
        assert torch.equal(dev.kv_buffer[layer][back], dev.kv_buffer[layer][dev_slots])
