"""XPUTUNE_HICACHE_GHOST: remember L1 drops, back up only the prefix they prove (field report 2.6).

Under write_through_selective a node is backed up at its second distinct request. When the
reuse gap is longer than the node's stay in L1, the cache drops it first (a device leaf with
no host copy), the hit count dies with it, and the prefix never reaches L2. The hooks:
  - before a leaf without a host copy is dropped: add its page hashes (chained from the root,
    so each one names content and position) to a bounded GhostList;
  - around insert: after SGLang's insert, look the inserted key's page hashes up (deepest
    first); the first hit proves pages 0..i recurred, so the nodes covering exactly that prefix
    are backed up (the node straddling the boundary is split there first) and nothing beyond.
The cache hooked is UnifiedRadixCache, what every supported server builds (0.5.20 through
0.5.23, one shape): eviction of one device leaf is _evict_device_leaf(node_id, tracker), backups
are BackupKV actions the tree core builds and the cache executes. Both need the Python tree core
(UnifiedTreeCore): the Rust core that 0.5.21+ selects by default keeps its nodes out of Python
(its node_by_id raises), so the launcher sets SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python with
this feature and the startup check refuses the feature under any other core.
Only active while the cache's policy is write_through_selective (write_through already backs
everything up; write_back backs up on eviction).
"""

from __future__ import annotations

from typing import Any

from xputune.sglang.config import DEFAULT_GHOST_CAPACITY, PluginConfig
from xputune.sglang.hooks import Hooks
from xputune.sglang.targets import TREE_CORE, UNIFIED, Shape, Target

NAME = "ghost"
ATTR = "_xputune_ghost"
STATS_ATTR = "_xputune_ghost_stats"
POLICY = "write_through_selective"

TARGETS = (
    Target(UNIFIED + "._evict_device_leaf", ("self", "node_id", "tracker")),
    Target(UNIFIED + ".insert", ("self", "params")),
    Target(UNIFIED + "._execute_and_commit_kv_backup", ("self", "action", "write_back")),
    Target(UNIFIED + "._apply_cache_action", ("self", "action")),
    Target(TREE_CORE + ".node_by_id", ("self", "node_id")),
    Target(TREE_CORE + "._split_node", ("self", "key", "child", "split_len")),
    Target(TREE_CORE + "._build_backup_kv_action", ("self", "node", "write_back")),
)
# What must be hooked in the server's own cache for the feature to act (startup check).
LIVE = (UNIFIED + "._evict_device_leaf", UNIFIED + ".insert")


def ghost_of(cache: Any) -> Any:
    """The cache's GhostList, created on first use with the configured capacity."""
    ghost = cache.__dict__.get(ATTR)
    if ghost is None:
        from xputune.hicache.ghost import GhostList

        ghost = GhostList(_settings["capacity"])
        cache.__dict__[ATTR] = ghost
        cache.__dict__[STATS_ATTR] = {"dropped_pages": 0, "proven_backups": 0, "backed_tokens": 0}
    return ghost


def stats_of(cache: Any) -> dict[str, int]:
    ghost_of(cache)
    return cache.__dict__[STATS_ATTR]


def _namespace(key: Any) -> int:
    from xputune.hicache.ghost import root_hash

    extra, salt = getattr(key, "extra_key", None), getattr(key, "cache_salt", None)
    if extra is None and salt is None:
        return root_hash(None)
    return root_hash(f"{extra!r}|{salt!r}")


def _unit_tokens(key: Any) -> Any:
    """One int64 per logical unit of a RadixKey (a bigram counts by its first token)."""
    import numpy as np

    raw = key.raw_token_ids() if hasattr(key, "raw_token_ids") else key.token_ids
    return np.asarray(raw, dtype=np.int64)[: len(key)]


def page_hashes(key: Any, page_size: int) -> list[int]:
    """Chained 64-bit hashes of every full page of a key that starts at the root."""
    from xputune.hicache.ghost import chain_page_hashes

    return chain_page_hashes(_unit_tokens(key), page_size, _namespace(key))


def node_page_hashes(cache: Any, node: Any) -> list[int]:
    """The hashes of `node`'s own pages, chained through every ancestor up to the root."""
    import numpy as np

    from xputune.hicache.ghost import chain_page_hashes

    parts = []
    n = node
    while n is not None and n is not cache.root_node:
        parts.append(_unit_tokens(n.key))
        n = n.parent
    tokens = np.concatenate(parts[::-1]) if len(parts) > 1 else parts[0]
    hashes = chain_page_hashes(tokens, cache.page_size, _namespace(node.key))
    return hashes[len(hashes) - len(node.key) // cache.page_size :]


def _active(cache: Any) -> bool:
    controller = getattr(cache, "cache_controller", None)
    return getattr(controller, "write_policy", None) == POLICY


def _remember_dropped(cache: Any, node: Any) -> None:
    """A node leaving device memory with no host copy: its page hashes go to the ghost list."""
    hashes = node_page_hashes(cache, node)
    ghost_of(cache).add_many(hashes)
    stats_of(cache)["dropped_pages"] += len(hashes)


def _insert_then_backup(original: Any, cache: Any, params: Any) -> Any:
    """Insert, then back up the prefix of the key that the ghost list proves reused."""
    result = original(cache, params)
    ghost = cache.__dict__.get(ATTR)
    if ghost is None or len(ghost) == 0 or not _active(cache) or params.key is None:
        return result
    key = params.key.page_aligned(cache.page_size)
    proven = ghost.proven_prefix(page_hashes(key, cache.page_size)) * cache.page_size
    if proven:
        backup_proven_prefix(cache, key, proven)
    return result


def _before_evict_device_leaf(cache: Any, node_id: Any, tracker: Any) -> None:
    if not _active(cache):
        return
    node = cache.tree_core.node_by_id(node_id)
    if node.backuped or node.key is None or len(node.key) == 0:
        return  # a node with a host copy is demoted, not lost
    _remember_dropped(cache, node)


def backup_proven_prefix(cache: Any, key: Any, proven: int) -> int:
    """The unified cache's backup of key[:proven]: split there, back up that chain; tokens."""
    core = cache.tree_core
    node, offset, queued = core.root_node, 0, 0
    while offset < proven:
        child = node.children.get(key[offset:].child_key(cache.page_size))
        if child is None or child.evicted:
            break
        if offset + len(child.key) > proven:
            child, action = core._split_node(child.key, child, proven - offset)
            if action is not None:
                cache._apply_cache_action(action)
        if not child.backuped and child.write_through_pending_id is None:
            action = core._build_backup_kv_action(child, False)
            if getattr(cache, "linker", None) is not None:
                cache._apply_cache_action(action)
                written = len(child.key)
            else:
                written = cache._execute_and_commit_kv_backup(action, False)
            if written == 0:
                break  # no host room: nothing deeper may be backed up
            queued += written
            stats_of(cache)["proven_backups"] += 1
        offset += len(child.key)
        node = child
    stats_of(cache)["backed_tokens"] += queued
    return queued


_settings = {"capacity": DEFAULT_GHOST_CAPACITY}


def install(hooks: Hooks, cfg: PluginConfig) -> None:
    _settings["capacity"] = cfg.ghost_capacity
    hooks.before(UNIFIED + "._evict_device_leaf", _before_evict_device_leaf)
    hooks.around(UNIFIED + ".insert", _insert_then_backup)


SHAPES = (Shape("0.5.20", TARGETS, install),)
