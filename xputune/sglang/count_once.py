"""XPUTUNE_HICACHE_COUNT_ONCE: a radix node's hit count means distinct requests (field report 2.6).

In sglang 0.5.20 one request is inserted into the radix tree twice on its way through the
server (at the end of prefill by cache_unfinished_req, again at finish by cache_finished_req),
and every insert bumps the hit count of each node it walks: alone, the request reaches
write_through_selective's threshold of 2, and the policy silently becomes write_through.

Two shapes (targets.Shape), newest first:
  - built in (0.5.22 and later): InsertParams carries `inserted_len`, the length the inserting
    request already inserted, and the tree core counts only nodes past it, so a request counts
    each node once by itself. Nothing is hooked; the startup line says "built in".
  - 0.5.20: the hooks mark which request is inserting (around both cache_*_req methods of
    UnifiedRadixCache), let UnifiedTreeCore._inc_hit_count_and_check(node, chunked) bump only
    the first time that request passes a node (xputune's RequestHitGate), tell the gate when
    UnifiedTreeCore._split_node splits a node in two, and drop the request's record when
    cache_finished_req returns. Inserts made outside a request (tests, tools) count as before.
"""

from __future__ import annotations

import threading
from typing import Any

from xputune.sglang.config import PluginConfig
from xputune.sglang.hooks import Hooks
from xputune.sglang.targets import INSERT_PARAMS, TREE_CORE, UNIFIED, Shape, Target

NAME = "count_once"
GATE_ATTR = "_xputune_hit_gate"

TARGETS_0520 = (
    Target(UNIFIED + ".cache_unfinished_req", ("self", "req", "chunked", "kwargs")),
    Target(
        UNIFIED + ".cache_finished_req", ("self", "req", "is_insert", "kv_len_to_handle", "kwargs")
    ),
    Target(TREE_CORE + "._inc_hit_count_and_check", ("self", "node", "chunked")),
    Target(TREE_CORE + "._split_node", ("self", "key", "child", "split_len")),
)
# The release counts once itself: the insert knows what its request already inserted, and the
# counting takes the node alone (no `chunked`: a chunked stash no longer counts at all).
TARGETS_BUILTIN = (
    Target(INSERT_PARAMS + ".inserted_len", kind="field"),
    Target(TREE_CORE + "._inc_hit_count_and_check", ("self", "node")),
)
# What must be hooked in the server's own cache for the 0.5.20 shape to act (startup check).
LIVE = tuple(t.path for t in TARGETS_0520)

_current = threading.local()  # the request whose insert is running on this thread, its gate


def _policy(cache: Any) -> str:
    controller = getattr(cache, "cache_controller", None)
    return getattr(controller, "write_policy", None) or "write_through_selective"


def gate_of(cache: Any) -> Any:
    """The cache's RequestHitGate, created on first use with the cache's write policy.

    For the unified cache it lives on the tree core too, where the counting happens.
    """
    gate = cache.__dict__.get(GATE_ATTR)
    if gate is None:
        from xputune.hicache.write_policy import RequestHitGate

        gate = RequestHitGate(_policy(cache))
        cache.__dict__[GATE_ATTR] = gate
        core = cache.__dict__.get("tree_core")
        if core is not None and hasattr(core, "__dict__"):
            core.__dict__[GATE_ATTR] = gate
    return gate


def current_request() -> Any:
    return getattr(_current, "rid", None)


def _with_request(original: Any, cache: Any, req: Any, *args: Any, **kwargs: Any) -> Any:
    previous = getattr(_current, "rid", None), getattr(_current, "gate", None)
    _current.rid = getattr(req, "rid", None)
    _current.gate = gate_of(cache)
    try:
        return original(cache, req, *args, **kwargs)
    finally:
        _current.rid, _current.gate = previous


def _cache_finished_req(original: Any, cache: Any, req: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return _with_request(original, cache, req, *args, **kwargs)
    finally:
        rid = getattr(req, "rid", None)
        if rid is not None:
            gate_of(cache).finish(rid)


def _inc_hit_count_and_check(original: Any, core: Any, node: Any, chunked: bool = False) -> Any:
    rid = current_request()
    gate = getattr(_current, "gate", None)
    # Evicted nodes and chunked inserts never count in SGLang: they must not use up the turn.
    counts = rid is not None and gate is not None and not chunked and not node.evicted
    if counts and not gate.admit(rid, node.id):
        return False  # this request already counted here: no bump, no backup decision
    return original(core, node, chunked)


def _after_core_split(result: Any, core: Any, key: Any, child: Any, split_len: int) -> None:
    gate = core.__dict__.get(GATE_ATTR)
    new_node = result[0] if isinstance(result, tuple) else result
    if gate is not None and new_node is not None:
        gate.on_split(child.id, new_node.id)


def install(hooks: Hooks, cfg: PluginConfig) -> None:
    hooks.around(UNIFIED + ".cache_unfinished_req", _with_request)
    hooks.around(UNIFIED + ".cache_finished_req", _cache_finished_req)
    hooks.around(TREE_CORE + "._inc_hit_count_and_check", _inc_hit_count_and_check)
    hooks.after(TREE_CORE + "._split_node", _after_core_split)


SHAPES = (
    Shape("0.5.22", TARGETS_BUILTIN, builtin=True),
    Shape("0.5.20", TARGETS_0520, install),
)
