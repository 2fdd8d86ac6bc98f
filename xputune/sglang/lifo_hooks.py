"""XPUTUNE_HICACHE_LIFO: the host KV pool hands out the most recently freed page first.

SGLang's HostKVCache (0.5.20 through 0.5.23, unchanged) keeps free slots FIFO (alloc from the
head of free_slots, freed slots appended at the tail), so write-backs wander over the whole
pinned pool. The hooks give every host pool (MLA and MHA inherit these methods) an xputune
LifoSlotAllocator, created whenever the pool is cleared, and route alloc / free /
available_size through it under the pool's own lock. Hit rate and eviction are unchanged:
only which free slot is reused moves.
"""

from __future__ import annotations

from typing import Any

from xputune.sglang import stats
from xputune.sglang.config import PluginConfig
from xputune.sglang.hooks import Hooks
from xputune.sglang.targets import POOL_BASE, Shape, Target

NAME = "lifo"
ATTR = "_xputune_lifo"
OBSERVER_ATTR = "_xputune_lifo_observer"  # set by the TP-shared host buffer before clear()

TARGETS = (
    Target(POOL_BASE + ".clear", ("self",)),
    Target(POOL_BASE + ".alloc", ("self", "need_size")),
    Target(POOL_BASE + ".free", ("self", "indices")),
    Target(POOL_BASE + ".available_size", ("self",)),
)


def allocator_of(pool: Any) -> Any:
    """The pool's LifoSlotAllocator, or None when the hook is not active on it."""
    return pool.__dict__.get(ATTR)


def _after_clear(result: Any, pool: Any) -> None:
    from xputune.hicache.lifo import LifoSlotAllocator

    lifo = allocator_of(pool)
    if lifo is not None and lifo.size == pool.logical_size:
        lifo.clear()
        return
    observer = pool.__dict__.get(OBSERVER_ATTR)
    pool.__dict__[ATTR] = LifoSlotAllocator(
        pool.logical_size, pool.logical_page_size, track_digest=True, observer=observer
    )


def _alloc(original: Any, pool: Any, need_size: int) -> Any:
    lifo = allocator_of(pool)
    if lifo is None:
        return original(pool, need_size)
    import torch

    with pool.lock:
        slots = lifo.alloc(need_size)
    if slots is None:
        return None
    stats.add("lifo_allocs")
    stats.add("lifo_alloc_tokens", len(slots))
    return torch.from_numpy(slots)


def _free(original: Any, pool: Any, indices: Any) -> int:
    lifo = allocator_of(pool)
    if lifo is None:
        return original(pool, indices)
    cpu = indices.cpu() if hasattr(indices, "cpu") else indices
    if len(cpu) == 0:
        return 0
    with pool.lock:
        lifo.free(cpu.numpy() if hasattr(cpu, "numpy") else cpu)
    return len(indices)


def _available_size(original: Any, pool: Any) -> int:
    lifo = allocator_of(pool)
    if lifo is None:
        return original(pool)
    return lifo.available_size()


def install(hooks: Hooks, cfg: PluginConfig) -> None:
    hooks.after(POOL_BASE + ".clear", _after_clear)
    hooks.around(POOL_BASE + ".alloc", _alloc)
    hooks.around(POOL_BASE + ".free", _free)
    hooks.around(POOL_BASE + ".available_size", _available_size)


SHAPES = (Shape("0.5.20", TARGETS, install),)
