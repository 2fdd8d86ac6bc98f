"""XPUTUNE_HICACHE_COUNT_ONCE: a radix node's hit count means distinct requests (seed 2.6).

HiRadixCache 0.5.20 bumps hit_count inside insert(), and one request is inserted twice on the
prefill path (cache_unfinished_req, then cache_finished_req): alone it reaches
write_through_selective's threshold of 2, and the policy silently becomes write_through.

The hooks mark which request is inserting (around both cache_*_req methods, on HiRadixCache
only: the plain RadixCache is untouched), let _inc_hit_count through only the first time that
request passes a node (xputune's RequestHitGate), tell the gate when _split_node cuts a node in
two, and drop the request's record when cache_finished_req returns. Inserts made outside a
request (tests, tools) count as before.
"""

from __future__ import annotations

import threading
from typing import Any

from xputune.sglang.config import PluginConfig
from xputune.sglang.hooks import Hooks
from xputune.sglang.targets import HIRADIX, Target

NAME = "count_once"
GATE_ATTR = "_xputune_hit_gate"

TARGETS = (
    Target(HIRADIX + ".cache_unfinished_req", ("self", "req", "chunked")),
    Target(HIRADIX + ".cache_finished_req", ("self", "req", "is_insert", "kv_len_to_handle")),
    Target(HIRADIX + "._inc_hit_count", ("self", "node", "chunked")),
    Target(HIRADIX + "._split_node", ("self", "key", "child", "split_len")),
)

_current = threading.local()  # the request whose insert is running on this thread


def gate_of(cache: Any) -> Any:
    """The cache's RequestHitGate, created on first use with the cache's write policy."""
    gate = cache.__dict__.get(GATE_ATTR)
    if gate is None:
        from xputune.hicache.write_policy import RequestHitGate

        gate = RequestHitGate(cache.cache_controller.write_policy)
        cache.__dict__[GATE_ATTR] = gate
    return gate


def current_request() -> Any:
    return getattr(_current, "rid", None)


def _with_request(original: Any, cache: Any, req: Any, *args: Any, **kwargs: Any) -> Any:
    previous = getattr(_current, "rid", None)
    _current.rid = getattr(req, "rid", None)
    try:
        return original(cache, req, *args, **kwargs)
    finally:
        _current.rid = previous


def _cache_finished_req(original: Any, cache: Any, req: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return _with_request(original, cache, req, *args, **kwargs)
    finally:
        rid = getattr(req, "rid", None)
        if rid is not None:
            gate_of(cache).finish(rid)


def _inc_hit_count(original: Any, cache: Any, node: Any, chunked: bool = False) -> Any:
    rid = current_request()
    # A chunked insert never counts (SGLang skips it), so it must not use up the request's turn.
    if rid is not None and not chunked and not gate_of(cache).admit(rid, node.id):
        return None  # this request already counted here: no bump, no write-through decision
    return original(cache, node, chunked)


def _after_split(new_node: Any, cache: Any, key: Any, child: Any, split_len: int) -> None:
    gate = cache.__dict__.get(GATE_ATTR)
    if gate is not None and new_node is not None:
        gate.on_split(child.id, new_node.id)


def install(hooks: Hooks, cfg: PluginConfig) -> None:
    hooks.around(HIRADIX + ".cache_unfinished_req", _with_request)
    hooks.around(HIRADIX + ".cache_finished_req", _cache_finished_req)
    hooks.around(HIRADIX + "._inc_hit_count", _inc_hit_count)
    hooks.after(HIRADIX + "._split_node", _after_split)
