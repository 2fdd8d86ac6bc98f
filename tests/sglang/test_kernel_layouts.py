"""XPUTUNE_HICACHE_KERNELS in every layout x io backend a 0.5.20 host pool copies with.

An L3 store rewrites the layout (mooncake: layer_first -> page_first with io kernel,
page_first_direct with io direct), so the plugin serves page_first and page_first_direct as
well as layer_first. Real MLA and MHA host pools back KV up from a CPU device pool and load it
back through SGLang's own methods (indices moved as HiCacheController.move_indices moves them);
the host copy is read straight from SGLang's buffer shapes for each layout, and the counters
show which of xputune's operators ran.
"""

from __future__ import annotations

import types
from typing import Any

import pytest

from tests.sglang.world import KV_LORA_RANK, LAYERS, PAGE, ROPE_DIM, device_pool
from xputune.sglang import kernel_hooks, live, stats
from xputune.sglang.config import PluginConfig

pytestmark = pytest.mark.usefixtures("unpinned_host_alloc")

HEADS, HEAD_DIM = 2, 4
# What each pool calls, written out independently of kernel_hooks.SERVED: (load, backup).
CALLS = {
    ("mla", "layer_first", "kernel"): ("transfer_kv_per_layer_mla", "transfer_kv_all_layer_mla"),
    ("mla", "page_first", "kernel"): (
        "transfer_kv_per_layer_mla_pf_lf", "transfer_kv_all_layer_mla_lf_pf",
    ),
    ("mla", "layer_first", "direct"): ("transfer_kv_direct", "transfer_kv_direct"),
    ("mla", "page_first_direct", "direct"): (
        "transfer_kv_per_layer_direct_pf_lf", "transfer_kv_all_layer_direct_lf_pf",
    ),
    ("mha", "layer_first", "kernel"): ("transfer_kv_per_layer", "transfer_kv_all_layer"),
    ("mha", "page_first", "kernel"): ("transfer_kv_per_layer_pf_lf", "transfer_kv_all_layer_lf_pf"),
    ("mha", "layer_first", "direct"): ("transfer_kv_direct", "transfer_kv_direct"),
    ("mha", "page_first_direct", "direct"): (
        "transfer_kv_per_layer_direct_pf_lf", "transfer_kv_all_layer_direct_lf_pf",
    ),
}  # fmt: skip


@pytest.fixture(autouse=True)
def fresh_stats() -> Any:
    stats.reset()
    yield
    stats.reset()


def _mha_device(sgl: Any, size: int = 64) -> Any:
    return sgl.memory_pool.MHATokenToKVPool(
        size=size, page_size=PAGE, dtype=sgl.torch.float32, head_num=HEADS, head_dim=HEAD_DIM,
        layer_num=LAYERS, device="cpu", enable_memory_saver=False,
    )  # fmt: skip


def _pools(sgl: Any, kind: str, layout: str) -> tuple[Any, Any]:
    from sglang.srt.mem_cache.pool_host import mha

    if kind == "mla":
        dev = device_pool(sgl)
        cls = sgl.pool_mla.MLATokenToKVPoolHost
    else:
        dev, cls = _mha_device(sgl), mha.MHATokenToKVPoolHost
    return dev, cls(dev, 2.0, 0, PAGE, layout, pin_memory=False, device="cpu")


def _device_layers(dev: Any, kind: str) -> list[Any]:
    """Every per-layer device buffer (MHA: K layers, then V layers)."""
    return list(dev.kv_buffer) if kind == "mla" else list(dev.k_buffer) + list(dev.v_buffer)


def _host_token(host: Any, kind: str, layer: int, slot: int) -> list[Any]:
    """The host copy of one token of one layer, read from SGLang's shapes for its layout."""
    bufs = [host.kv_buffer] if kind == "mla" else [host.k_buffer, host.v_buffer]
    out = []
    for buf in bufs:
        if host.layout == "layer_first":
            out.append(buf[layer, slot])
        elif host.layout == "page_first":
            out.append(buf[slot, layer])
        else:  # page_first_direct: (pages, layers, page_size, ...)
            out.append(buf[slot // PAGE, layer, slot % PAGE])
    return out


def _moved(sgl: Any, host: Any, io: str, host_idx: Any, dev_idx: Any) -> tuple[Any, Any]:
    """Indices as HiCacheController hands them to the pool for this io backend."""
    controller = types.SimpleNamespace(io_backend=io, mem_pool_host=host, device="cpu")
    return sgl.cache_controller.HiCacheController.move_indices(controller, host_idx, dev_idx)


@pytest.mark.parametrize(("kind", "layout", "io"), sorted(CALLS))
def test_every_served_layout_moves_kv_through_xputunes_operators(
    sgl: Any, plugin: Any, kind: str, layout: str, io: str
) -> None:
    torch = sgl.torch
    plugin.install(PluginConfig(kernels=True))
    dev, host = _pools(sgl, kind, layout)
    if layout in ("layer_first", "page_first"):
        assert host.can_use_jit is False
    if layout == "page_first":
        assert host.can_use_write_back_jit is False and host.staging_token_capacity == 0
    layers = _device_layers(dev, kind)
    gen = torch.Generator().manual_seed(7)
    dev_slots = torch.tensor([9, 10, 11, 12, 20, 21, 22, 23], dtype=torch.int64)
    for buf in layers:
        buf[dev_slots] = torch.randn(buf[dev_slots].shape, generator=gen)
    host_slots = host.alloc(2 * PAGE)
    assert host_slots is not None
    host_slots = host_slots.flip(0) if io == "kernel" else host_slots  # any order the kernels take

    host.backup_from_device_all_layer(dev, *_moved(sgl, host, io, host_slots, dev_slots), io)
    for layer in range(LAYERS):
        for h, d in zip(host_slots.tolist(), dev_slots.tolist(), strict=True):
            want = [layers[layer][d]] + ([layers[LAYERS + layer][d]] if kind == "mha" else [])
            got = _host_token(host, kind, layer, h)
            assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True)), (layer, h)

    back = torch.arange(40, 48, dtype=torch.int64)
    for layer in range(LAYERS):
        host.load_to_device_per_layer(dev, *_moved(sgl, host, io, host_slots, back), layer, io)
    for buf in layers:
        assert torch.equal(buf[back], buf[dev_slots])

    load, backup = CALLS[(kind, layout, io)]
    counters = {k: v for k, v in stats.snapshot().items() if k.startswith("kernel_")}
    want: dict[str, int] = {}
    for op, calls in ((backup, 1), (load, LAYERS)):
        want["kernel_" + op] = want.get("kernel_" + op, 0) + calls
    assert counters == want


def test_page_first_pools_write_whole_tokens_where_l3_reads_pages(sgl: Any, plugin: Any) -> None:
    """The page an L3 store reads (get_data_page: every layer of page_size tokens) holds what
    the device held, in SGLang's page_first order."""
    torch = sgl.torch
    plugin.install(PluginConfig(kernels=True))
    dev, host = _pools(sgl, "mla", "page_first")
    dev_slots = torch.arange(16, 16 + PAGE, dtype=torch.int64)
    for layer, buf in enumerate(dev.kv_buffer):
        buf[dev_slots] = torch.arange(PAGE, dtype=torch.float32)[:, None, None] + 100 * layer
    host_slots = host.alloc(PAGE)
    host.backup_from_device_all_layer(dev, host_slots, dev_slots, "kernel")
    page = host.get_data_page(int(host_slots[0]), flat=False)  # (page_size, layers, 1, dim)
    want = torch.stack([buf[dev_slots] for buf in dev.kv_buffer], dim=1)
    assert page.shape == (PAGE, LAYERS, 1, KV_LORA_RANK + ROPE_DIM)
    assert torch.equal(page, want)


def _cache_with(pool: Any, io: str) -> Any:
    """The parts of a cache the startup check reads: its controller's host pool and io."""
    return types.SimpleNamespace(
        cache_controller=types.SimpleNamespace(mem_pool_host=pool, io_backend=io)
    )


@pytest.mark.parametrize(("kind", "layout", "io"), sorted(CALLS))
def test_startup_check_accepts_every_served_combination(
    sgl: Any, plugin: Any, kind: str, layout: str, io: str
) -> None:
    plugin.install(PluginConfig(kernels=True))
    _, host = _pools(sgl, kind, layout)
    problems, hooked = live.check_cache(_cache_with(host, io), ("kernels",))
    assert problems == [] and type(host).__name__ in hooked


def test_startup_check_names_a_global_that_is_not_ours(
    sgl: Any, plugin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin.install(PluginConfig(kernels=True))
    _, host = _pools(sgl, "mla", "page_first")
    monkeypatch.setattr(sgl.pool_mla, "transfer_kv_all_layer_mla_lf_pf", lambda *a, **k: None)
    problems, _ = live.check_cache(_cache_with(host, "kernel"), ("kernels",))
    assert problems == [
        "kernels: sglang.srt.mem_cache.pool_host.mla.transfer_kv_all_layer_mla_lf_pf is not "
        "xputune's"
    ]


def test_startup_check_refuses_what_is_not_served_without_sglangs_operators(
    sgl: Any, plugin: Any
) -> None:
    """page_head (MHA) keeps SGLang's own operators, which this CPU host lacks; without the
    kernels feature nothing is served at all."""
    plugin.install(PluginConfig(kernels=True))
    _, host = _pools(sgl, "mha", "page_head")
    problems, _ = live.check_cache(_cache_with(host, "kernel"), ("kernels",))
    assert len(problems) == 1
    assert problems[0].startswith(
        "copies: MHATokenToKVPoolHost has no copy operators here for --hicache-mem-layout "
        "page_head --hicache-io-backend kernel"
    )
    assert kernel_hooks.SERVED_TEXT in problems[0]
    _, host = _pools(sgl, "mla", "page_first")
    problems, _ = live.check_cache(_cache_with(host, "kernel"), ())
    assert len(problems) == 1 and problems[0].startswith("copies: MLATokenToKVPoolHost")


def test_sglangs_own_operators_still_count_as_present(sgl: Any, plugin: Any) -> None:
    """Where sgl_kernel is importable, ours replace its operators but remember them, so a
    combination the plugin leaves to SGLang passes the check."""
    from sglang.srt.mem_cache.pool_host import mha

    stock = object()
    mha.transfer_kv_direct = stock
    try:
        plugin.install(PluginConfig(kernels=True))
        assert kernel_hooks.is_ours(mha.transfer_kv_direct)
        assert kernel_hooks.stock_operator(mha, "transfer_kv_direct") is stock
        _, host = _pools(sgl, "mha", "page_head")
        problems, _ = live.check_cache(_cache_with(host, "kernel"), ("kernels",))
        assert problems == []
    finally:
        plugin.forget_install()
        del mha.transfer_kv_direct


def test_layer_sharded_page_first_is_refused(sgl: Any, plugin: Any) -> None:
    """A layer-sharded MLA pool backs up layer by layer; for page_first SGLang does that only
    with its JIT kernel, which the plugin switches off."""
    plugin.install(PluginConfig(kernels=True))
    _, host = _pools(sgl, "mla", "page_first")
    host.device_pool.layer_shard_enabled = True
    problems, _ = live.check_cache(_cache_with(host, "kernel"), ("kernels",))
    assert len(problems) == 1 and "shards its device layers" in problems[0]
    _, host = _pools(sgl, "mla", "layer_first")
    host.device_pool.layer_shard_enabled = True
    assert live.check_cache(_cache_with(host, "kernel"), ("kernels",))[0] == []


@pytest.mark.parametrize("kind", ["mla", "mha"])
def test_jit_paths_are_switched_off_where_sglang_would_take_them(
    sgl: Any, plugin: Any, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """As on a CUDA host with SGLang's JIT kernels built: a page_first pool would load through
    the one-layer JIT kernel and write back through the staged JIT kernel, past our globals."""
    from sglang.srt.mem_cache.pool_host import mha

    module = sgl.pool_mla if kind == "mla" else mha
    monkeypatch.setattr(module, "_is_cuda", True)
    monkeypatch.setattr(module, "can_use_hicache_jit_kernel", lambda **_: True)
    monkeypatch.setattr(module, "can_use_write_back_jit_kernel", lambda **_: True)
    staging = ("staging_buffer",) if kind == "mla" else ("staging_k_buffer", "staging_v_buffer")
    _, stock = _pools(sgl, kind, "page_first")
    assert stock.can_use_jit and stock.can_use_write_back_jit and stock.staging_token_capacity
    assert all(getattr(stock, a) is not None for a in staging)
    plugin.install(PluginConfig(kernels=True))
    _, host = _pools(sgl, kind, "page_first")
    assert not host.can_use_jit and not host.can_use_write_back_jit
    assert host.staging_token_capacity == 0 and all(getattr(host, a) is None for a in staging)


@pytest.mark.parametrize(
    ("layout", "io"), [("page_first", "kernel"), ("page_first_direct", "direct"),
                       ("layer_first", "direct")],
)  # fmt: skip
def test_the_servers_cache_backs_up_in_each_layout(
    sgl: Any, plugin: Any, layout: str, io: str
) -> None:
    """The cache a server builds (UnifiedRadixCache with HiCacheController;
    write_through_selective: one request's double count triggers the backup) copies into the
    host pool through xputune's operator."""
    from tests.sglang.world import World

    override = sgl.get_context().override_server_args(
        enable_hierarchical_cache=True, hicache_ratio=2.0, hicache_size=0,
        hicache_write_policy="write_through_selective", hicache_io_backend=io,
        hicache_mem_layout=layout, page_size=PAGE, device="cpu",
    )  # fmt: skip
    server_args = override.install()
    try:
        plugin.install(PluginConfig(kernels=True))
        w = World(sgl, server_args)
        assert w.host.layout == layout
        prompt = list(range(100, 116))
        w.serve("r1", prompt)
        w.drain_writes()
        node = w.node_for(prompt)
        assert node.backuped
        on_device, on_host = w.slots(node)
        for layer in range(LAYERS):
            for h, d in zip(on_host.tolist(), on_device.tolist(), strict=True):
                (got,) = _host_token(w.host, "mla", layer, h)
                assert w.sglang_equal(got, w.kv.kv_buffer[layer][d]), (layer, h)
        backup = CALLS[("mla", layout, io)][1]
        assert stats.snapshot().get("kernel_" + backup) == 1
    finally:
        override.restore()
