"""The L3 read's staging page on a CPU server: SGLang pins it and dies; the plugin unpins the
pool there, by behaviour (pinning and the pool's own allocation are tried first), not by
version or by the error's words (a CUDA build of torch says "no NVIDIA driver" instead)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sglang.world import PAGE, device_pool, host_pool
from xputune.sglang import cpu_pages

pytestmark = pytest.mark.usefixtures("unpinned_host_alloc")


def test_sglangs_own_staging_page_cannot_be_pinned_on_cpu(sgl: Any) -> None:
    pool = host_pool(sgl, device_pool(sgl), pin_memory=True)
    with pytest.raises(RuntimeError, match="pin_memory"):
        pool.get_dummy_flat_data_page()  # the upstream bug, as a CPU server meets it


def test_the_pool_is_unpinned_and_the_page_is_then_served(sgl: Any) -> None:
    pool = host_pool(sgl, device_pool(sgl), pin_memory=True)
    assert cpu_pages.unpin([pool]) == ["MLATokenToKVPoolHost"]
    page = pool.get_dummy_flat_data_page()
    assert not page.is_pinned() and page.numel() == pool.layer_num * PAGE * pool.kv_cache_dim
    assert cpu_pages.unpin([pool]) == []  # probed once


def test_a_pool_whose_page_allocates_is_left_alone(sgl: Any) -> None:
    pool = host_pool(sgl, device_pool(sgl), pin_memory=False)
    assert cpu_pages.unpin([pool]) == [] and pool.pin_memory is False


def test_a_fixed_release_passes_the_probe_and_nothing_changes(sgl: Any, monkeypatch) -> None:
    pool = host_pool(sgl, device_pool(sgl), pin_memory=True)
    monkeypatch.setattr(
        type(pool), "get_dummy_flat_data_page", lambda self: sgl.torch.zeros(4), raising=True
    )
    assert cpu_pages.unpin([pool]) == [] and pool.pin_memory is True


def test_a_host_where_pinning_works_is_left_alone(sgl: Any, monkeypatch) -> None:
    pool = host_pool(sgl, device_pool(sgl), pin_memory=True)
    monkeypatch.setattr(cpu_pages, "_pinning_works", lambda: True)
    assert cpu_pages.unpin([pool]) == [] and pool.pin_memory is True


def test_nothing_is_touched_where_an_accelerator_pins(sgl: Any, monkeypatch) -> None:
    pool = host_pool(sgl, device_pool(sgl), pin_memory=True)
    monkeypatch.setattr(cpu_pages, "_has_accelerator", lambda: True)
    assert cpu_pages.unpin([pool]) == [] and pool.pin_memory is True
