"""The smallest real SGLang cache stack on CPU: device pool, allocator, host pool, and the cache
a server builds (UnifiedRadixCache with HiCache attached, as mem_cache/registry.py does).

The scheduler steps a prefill goes through are replayed with SGLang's own objects (Req,
ReqToTokenPool, PagedTokenToKVPoolAllocator): match the prefix, lock it, allocate the new
slots, write the KV, then insert through cache_unfinished_req and cache_finished_req, which is
the double insert of the PD-disaggregated prefill path.
"""

from __future__ import annotations

from array import array
from typing import Any

from xputune.sglang import live

PAGE = 4
LAYERS = 2
KV_LORA_RANK = 8
ROPE_DIM = 4


def device_pool(sgl: Any, size: int = 64) -> Any:
    return sgl.memory_pool.MLATokenToKVPool(
        size=size, page_size=PAGE, dtype=sgl.torch.float32, kv_lora_rank=KV_LORA_RANK,
        qk_rope_head_dim=ROPE_DIM, layer_num=LAYERS, device="cpu", enable_memory_saver=False,
    )  # fmt: skip


def host_pool(sgl: Any, dev: Any, ratio: float = 2.0, pin_memory: bool = False) -> Any:
    return sgl.pool_mla.MLATokenToKVPoolHost(
        dev, ratio, 0, PAGE, "layer_first", pin_memory=pin_memory, device="cpu"
    )


class World:
    """A real UnifiedRadixCache with HiCache over a CPU MLA pool of `size` device slots."""

    def __init__(self, sgl: Any, server_args: Any, size: int = 64) -> None:
        self.sgl = sgl
        torch = sgl.torch
        self.kv = device_pool(sgl, size)
        self.allocator = sgl.allocator.PagedTokenToKVPoolAllocator(
            size=size, page_size=PAGE, dtype=torch.float32, device="cpu", kvcache=self.kv,
            need_sort=False,
        )  # fmt: skip
        self.req_to_token = sgl.memory_pool.ReqToTokenPool(
            size=8, max_context_len=256, device="cpu", enable_memory_saver=False
        )
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams

        params = CacheInitParams(
            disable=False, req_to_token_pool=self.req_to_token,
            token_to_kv_pool_allocator=self.allocator, page_size=PAGE,
            tp_cache_group=sgl.dist.group.WORLD,
        )  # fmt: skip
        from sglang.srt.mem_cache.unified_cache.components import ComponentType

        params.tree_components = (ComponentType.FULL,)
        self.cache = sgl.unified_radix_cache.UnifiedRadixCache(params)
        self.cache.init_hicache(server_args, params)
        self.controller = self.cache.cache_controller
        self.host = live.host_pool_of(self.cache)

    def new_req(self, rid: str, tokens: list[int]) -> Any:
        return self.sgl.Req(rid, "", array("q", tokens), self.sgl.SamplingParams())

    def prefill(self, req: Any) -> Any:
        """Match, lock, allocate, write KV (value = token id), then insert unfinished."""
        torch = self.sgl.torch
        cache = self.cache
        req.init_next_round_input(cache)
        cache.inc_lock_ref(req.last_node)
        n = len(req.origin_input_ids)
        prefix = req.prefix_indices.to(torch.int64)
        p = len(prefix)
        (row,) = self.req_to_token.alloc([req])
        new = self.allocator.alloc(n - p)
        if new is None:
            cache.evict(self.sgl.base_prefix_cache.EvictParams(num_tokens=n - p))
            new = self.allocator.alloc(n - p)
        assert new is not None, "device pool exhausted"
        slots = torch.cat([prefix, new.to(torch.int64)])
        self.req_to_token.write((row, slice(0, n)), slots.to(torch.int32))
        ids = torch.tensor(list(req.origin_input_ids), dtype=torch.float32)
        for layer in range(LAYERS):
            self.kv.kv_buffer[layer][new, 0, :] = ids[p:, None] + 1000 * layer
        req.set_extend_range(p, n)
        cache.cache_unfinished_req(req)
        return req

    def finish(self, req: Any) -> None:
        self.cache.cache_finished_req(req, kv_len_to_handle=len(req.origin_input_ids))
        self.req_to_token.free_rows([req.kv.req_pool_idx])
        req.kv.req_pool_idx = None

    def serve(self, rid: str, tokens: list[int]) -> Any:
        """One whole prefill request: insert unfinished, then finished."""
        req = self.prefill(self.new_req(rid, tokens))
        self.finish(req)
        return req

    def node_for(self, tokens: list[int]) -> Any:
        """The tree node whose path from the root is exactly `tokens` (None if none is)."""
        key = self.sgl.radix_cache.RadixKey(array("q", tokens))
        node, offset = self.cache.root_node, 0
        while offset < len(key):
            node = node.children.get(key[offset:].child_key(PAGE))
            if node is None:
                return None
            offset += len(node.key)
        return node if offset == len(key) else None

    def pending_write_tokens(self) -> list[int]:
        return [ack.num_tokens for ack in self.controller.ack_write_queue]

    def drain_writes(self, timeout: float = 10.0) -> None:
        """Let every queued write-back finish and be acknowledged (as the scheduler loop does)."""
        import time

        deadline = time.monotonic() + timeout
        self.controller.start_writing()
        while self.controller.ack_write_queue:
            self.cache.writing_check()
            if time.monotonic() > deadline:
                raise TimeoutError("write-backs not acknowledged")
            time.sleep(0.001)

    def evict_all(self) -> int:
        result = self.cache.evict(self.sgl.base_prefix_cache.EvictParams(num_tokens=10**6))
        return result.num_tokens_evicted

    def sglang_equal(self, a: Any, b: Any) -> bool:
        return bool(self.sgl.torch.equal(a, b))

    @staticmethod
    def slots(node: Any) -> tuple[Any, Any]:
        """(device slots, host slots) of a node's full KV (None where it has none)."""
        from sglang.srt.mem_cache.unified_cache.components import ComponentType

        data = node.component_data[ComponentType.FULL]
        return data.value, data.host_value

    def host_copy_matches(self, node: Any) -> bool:
        """The real copy: in every layer, the node's host KV equals the device KV it backs up."""
        host, device = self.host.kv_buffer, self.kv.kv_buffer
        on_device, on_host = self.slots(node)
        return all(
            self.sglang_equal(host[layer][on_host], device[layer][on_device])
            for layer in range(LAYERS)
        )
