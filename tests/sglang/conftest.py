"""The in-process lane: the xputune cache plugin against the real sglang 0.5.20 release, on CPU.

Every test here is marked `sglang` and skipped (with the reason) when sglang 0.5.20 is not
installed; `python tests/sglang/install_sglang.py` installs it. What stands in for what:
  - triton, torchvision, sgl_kernel: permissive import stand-ins (gpu_standins.py), because
    their wheels are CUDA builds; nothing here runs a kernel of theirs;
  - cudaHostRegister: the host pool's allocation function for device "cpu" skips pinning
    (`unpinned_host_alloc`), unless a test exercises the plugin's own host allocation;
  - torch.distributed: a real one-rank gloo group over an in-memory store (no sockets).
Everything else is SGLang's own code: HostKVCache, MLATokenToKVPoolHost, MLATokenToKVPool,
PagedTokenToKVPoolAllocator, ReqToTokenPool, HiCacheController, UnifiedRadixCache with its
Python tree core, Req, and the plugin loader and HookRegistry. Newer releases (0.5.23) are
proven in running servers only (tests/server), each in its own environment. The copies
between the CPU "device" pool and the host pool run through xputune.kernels (the plugin's
KERNELS switch), since sgl_kernel's are CUDA-only.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
SGLANG_VERSION = "0.5.20"


def _lane_unavailable() -> str | None:
    try:
        found = version("sglang")
    except PackageNotFoundError:
        return "sglang is not installed (python tests/sglang/install_sglang.py)"
    if found != SGLANG_VERSION:
        return f"sglang {found} is installed; this lane needs {SGLANG_VERSION}"
    try:
        version("torch")
    except PackageNotFoundError:
        return "torch is not installed (python tests/sglang/install_sglang.py)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _lane_unavailable()
    for item in items:
        if HERE not in Path(str(item.fspath)).resolve().parents:
            continue
        item.add_marker(pytest.mark.sglang)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def sgl() -> Any:
    """Import the real sglang modules once (with the GPU-only stand-ins) and return them."""
    import types

    from tests.sglang import gpu_standins

    gpu_standins.install()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch
        import torch.distributed as dist
        from sglang.srt import plugins
        from sglang.srt.managers import cache_controller
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.mem_cache import (
            allocator,
            base_prefix_cache,
            memory_pool,
            radix_cache,
            unified_radix_cache,
        )
        from sglang.srt.mem_cache.pool_host import base as pool_base
        from sglang.srt.mem_cache.pool_host import common as pool_common
        from sglang.srt.mem_cache.pool_host import mla as pool_mla
        from sglang.srt.plugins import hook_registry
        from sglang.srt.runtime_context import get_context
        from sglang.srt.sampling.sampling_params import SamplingParams

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return types.SimpleNamespace(
        torch=torch, dist=dist, cache_controller=cache_controller, allocator=allocator,
        base_prefix_cache=base_prefix_cache, unified_radix_cache=unified_radix_cache,
        memory_pool=memory_pool, radix_cache=radix_cache, pool_base=pool_base,
        pool_common=pool_common, pool_mla=pool_mla, plugins=plugins,
        hook_registry=hook_registry, get_context=get_context, Req=Req,
        SamplingParams=SamplingParams,
    )  # fmt: skip


@pytest.fixture
def plugin(sgl: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Install the plugin (by config or through the entry point); SGLang is restored after.

    HookRegistry has no undo, so every attribute any feature may hook is saved first and put
    back afterwards, together with the registry's own bookkeeping and the direct patches.
    """
    from xputune.sglang import plugin as xplugin
    from xputune.sglang.targets import resolve

    missing = object()
    saved: list[tuple[Any, str, Any]] = []
    paths = {t.path for m in xplugin.FEATURES.values() for s in m.SHAPES for t in s.targets}
    for path in sorted(paths | {t.path for t in xplugin.live.TARGETS}):
        owner_path, _, attr = path.rpartition(".")
        if not owner_path.startswith("sglang."):
            continue
        try:
            owner = resolve(owner_path)
        except (ImportError, AttributeError):
            continue  # a target of another release's shape
        saved.append((owner, attr, vars(owner).get(attr, missing)))
    registry = sgl.hook_registry.HookRegistry
    registry.reset()
    xplugin.forget_install()
    for name in list(__import__("os").environ):
        if name.startswith("XPUTUNE_HICACHE_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(sgl.plugins, "_plugins_loaded", False)
    try:
        yield xplugin
    finally:
        xplugin.forget_install()
        registry.reset()
        for owner, attr, value in reversed(saved):
            if value is missing:
                if attr in vars(owner):
                    delattr(owner, attr)
            else:
                setattr(owner, attr, value)


@pytest.fixture
def runtime(sgl: Any) -> Iterator[Any]:
    """A published SGLang config: hierarchical cache, write_through_selective, layer_first."""
    override = sgl.get_context().override_server_args(
        enable_hierarchical_cache=True,
        hicache_ratio=2.0,
        hicache_size=0,
        hicache_write_policy="write_through_selective",
        hicache_io_backend="kernel",
        hicache_mem_layout="layer_first",
        page_size=4,
        device="cpu",
    )
    server_args = override.install()
    try:
        yield server_args
    finally:
        override.restore()


@pytest.fixture
def unpinned_host_alloc(sgl: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-in for cudaHostRegister: host pools for device "cpu" are allocated unpinned."""
    common = sgl.pool_common

    def alloc(dims, dtype, device, pin_memory, allocator, registration_granularity_bytes=None):
        return common.alloc_with_host_register(dims, dtype, device, False, allocator)

    monkeypatch.setitem(common.ALLOC_MEMORY_FUNCS, "cpu", alloc)
