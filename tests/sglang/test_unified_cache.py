"""Count-once, the ghost list and the async lanes on the cache a 0.5.20 server builds.

UnifiedRadixCache with HiCache attached, its Python tree core and HiCacheController, driven
through the request lifecycle a prefill goes through (tests/sglang/world.py).

Every cache here is write_through_selective (backup at hit count 2), page size 4, on CPU; the
copies run through xputune.kernels (KERNELS switch) because sgl_kernel's are CUDA-only.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.sglang.world import LAYERS, PAGE, World
from xputune.sglang.config import PluginConfig

pytestmark = pytest.mark.usefixtures("unpinned_host_alloc")

PROMPT = list(range(100, 116))  # 16 tokens = 4 pages


@pytest.fixture
def make_world(sgl: Any, plugin: Any, runtime: Any) -> Any:
    def make(size: int = 64, **switches: bool) -> World:
        plugin.install(PluginConfig(kernels=True, **switches))
        return World(sgl, runtime, size)

    return make


def test_the_release_counts_one_request_twice(make_world: Any) -> None:
    w = make_world()
    w.serve("r1", PROMPT)
    node = w.node_for(PROMPT)
    assert node.hit_count == 2  # cache_unfinished_req + cache_finished_req
    assert w.pending_write_tokens() == [16]  # so selective wrote it through after one request


def test_count_once_makes_one_request_count_once(make_world: Any) -> None:
    w = make_world(count_once=True)
    w.serve("r1", PROMPT)
    node = w.node_for(PROMPT)
    assert node.hit_count == 1
    assert w.pending_write_tokens() == []
    assert not node.backuped
    assert w.cache.__dict__["_xputune_hit_gate"].live_requests == 0  # finished: record dropped


def test_a_second_distinct_request_still_triggers_the_backup(make_world: Any) -> None:
    w = make_world(count_once=True, lifo=True)
    w.serve("r1", PROMPT)
    w.serve("r2", PROMPT)  # its prefix match stops one page short, splitting the node at 12
    head, tail = w.node_for(PROMPT[:12]), w.node_for(PROMPT)
    assert (head.hit_count, tail.hit_count) == (2, 2)
    assert w.pending_write_tokens() == [12, 4]
    w.drain_writes()
    for node in (head, tail):
        assert node.backuped
        assert w.host_copy_matches(node)


def test_count_once_survives_a_split_between_the_two_inserts(make_world: Any) -> None:
    w = make_world(count_once=True)
    r1 = w.prefill(w.new_req("r1", PROMPT))  # unfinished insert: one node of 4 pages
    w.serve("r2", PROMPT[:8] + [7] * 8)  # another request splits that node after 2 pages
    head = w.node_for(PROMPT[:8])
    assert head is not None and head.hit_count == 2
    w.finish(r1)  # r1 already counted the head before the split: no third count
    assert head.hit_count == 2
    assert w.node_for(PROMPT).hit_count == 1


def test_a_node_dropped_from_l1_lands_in_the_ghost_list(make_world: Any) -> None:
    from xputune.hicache.ghost import chain_page_hashes

    w = make_world(count_once=True, ghost=True)
    w.serve("r1", PROMPT)
    assert not w.node_for(PROMPT).backuped
    assert w.evict_all() == 16
    assert w.node_for(PROMPT) is None  # dropped: no host copy existed
    ghost = w.cache.__dict__["_xputune_ghost"]
    expected = chain_page_hashes(PROMPT, PAGE)
    assert len(ghost) == 4 and all(h in ghost for h in expected)


def test_reinsert_backs_up_only_the_proven_prefix(make_world: Any) -> None:
    w = make_world(count_once=True, ghost=True, lifo=True)
    w.serve("r1", PROMPT)
    w.evict_all()
    again = PROMPT[:8] + [9] * 8  # pages 0-1 recur, pages 2-3 are new
    w.serve("r2", again)
    proven = w.node_for(PROMPT[:8])
    rest = w.node_for(again)
    assert proven is not None and rest is not None and rest.parent is proven
    assert proven.hit_count == 1  # below the threshold: only the ghost list wrote it
    assert w.pending_write_tokens() == [8]
    w.drain_writes()
    assert proven.backuped and len(w.slots(proven)[1]) == 8
    assert not rest.backuped
    assert w.host_copy_matches(proven)


def test_without_the_ghost_list_the_recurring_prefix_is_not_backed_up(make_world: Any) -> None:
    w = make_world(count_once=True)
    w.serve("r1", PROMPT)
    w.evict_all()
    w.serve("r2", PROMPT[:8] + [9] * 8)
    assert w.pending_write_tokens() == []


def test_async_write_back_is_launched_off_the_scheduler_thread(make_world: Any) -> None:
    import threading

    w = make_world(async_submit=True)
    pool = w.host
    launched: list[str] = []
    original = type(pool).backup_from_device_all_layer

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        launched.append(threading.current_thread().name)
        return original(self, *args, **kwargs)

    type(pool).backup_from_device_all_layer = spy
    try:
        w.serve("r1", PROMPT)  # the release's double count writes it through
        w.drain_writes()
    finally:
        type(pool).backup_from_device_all_layer = original
    node = w.node_for(PROMPT)
    assert node.backuped
    assert launched == ["xputune-hicache-d2h"]
    assert w.host_copy_matches(node)


def test_async_load_back_gates_each_layer_until_its_copy_is_launched(make_world: Any) -> None:
    import threading

    from sglang.srt.mem_cache.base_prefix_cache import InitLoadBackParams

    w = make_world(async_submit=True)
    w.serve("r1", PROMPT)
    w.drain_writes()
    node = w.node_for(PROMPT)
    expected = [w.host.kv_buffer[layer][w.slots(node)[1]].clone() for layer in range(LAYERS)]
    w.evict_all()
    assert node.evicted and node.backuped

    launched: list[str] = []
    pool_cls = type(w.host)
    original = pool_cls.load_to_device_per_layer

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        launched.append(threading.current_thread().name)
        return original(self, *args, **kwargs)

    pool_cls.load_to_device_per_layer = spy
    try:
        # Matched as the scheduler does (a match stops short of the prompt's last token, so the
        # prompt runs one page past the cached one): a host hit, nothing on the device.
        req = w.new_req("r2", PROMPT + [7] * PAGE)
        req.init_next_round_input(w.cache)
        assert req.host_hit_length == len(PROMPT)
        values, _ = w.cache.init_load_back(
            InitLoadBackParams(
                best_match_node=req.best_match_node, host_hit_length=req.host_hit_length, req=req
            )
        )
        assert len(values) == len(PROMPT)
        consumer = w.cache.ready_to_load_host_cache()
        counter = w.controller.layer_done_counter
        counter.set_consumer(consumer)
        for layer in range(LAYERS):
            counter.wait_until(layer)  # what attention does before reading layer N
            assert w.sglang_equal(w.kv.kv_buffer[layer][values], expected[layer])
    finally:
        pool_cls.load_to_device_per_layer = original
    assert launched == ["xputune-hicache-h2d"] * LAYERS
    for _ in range(10_000):
        if not w.controller.ack_load_queue:
            break
        w.cache.loading_check()
    assert not w.cache.ongoing_load_back
