"""The XPU backend source, built against the host-memory XRE stand-in (kernels/testing/xpu)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.kernels import transfer_kv_all_layer_mla, transfer_kv_per_layer_direct_pf_lf
from xputune.kernels.cases import OPERATORS, directions_for, run_case
from xputune.kernels.planner import Endpoint, plan
from xputune.kernels.selftest import fake_xpu_placement


@pytest.fixture(scope="module")
def place():  # type: ignore[no-untyped-def]
    return fake_xpu_placement()


@pytest.fixture(scope="module")
def backend(place):  # type: ignore[no-untyped-def]
    return place.kwargs("h2d")["backend"]


CASES = [(op, d) for op in OPERATORS for d in directions_for(op)]


@pytest.mark.parametrize(("op", "direction"), CASES)
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_operator_on_xpu_equals_reference(place, op: str, direction: str, seed: int) -> None:  # type: ignore[no-untyped-def]
    result = run_case(op, direction, np.random.default_rng(seed), place)
    assert result.ok, result.detail


def test_one_submission_per_planned_segment(place, backend) -> None:  # type: ignore[no-untyped-def]
    """page_first_direct: a copy per page per layer; layer_first: one per layer."""
    page, pages, layers, dim = 8, 6, 3, 16
    item = dim * 4
    pool = np.arange(pages * layers * page * dim, dtype=np.float32).reshape(
        pages, layers, page, 1, dim)  # fmt: skip
    dev = [place.device(np.zeros((pages * page, 1, dim), np.float32)) for _ in range(layers)]
    idx = np.arange(pages * page, dtype=np.int64)
    before = backend.submitted
    for layer in range(layers):
        transfer_kv_per_layer_direct_pf_lf([pool], [dev[layer]], idx, idx, layer, page,
                                           backend=backend, direction="h2d")  # fmt: skip
    assert backend.submitted - before == pages * layers
    for layer in range(layers):
        assert np.array_equal(dev[layer].reshape(pages, page, dim), pool[:, layer, :, 0, :])

    host = [np.zeros((pages * page, 1, dim), np.float32) for _ in range(layers)]
    src_tbl = np.array([d.ctypes.data for d in dev], dtype=np.int64)
    before = backend.submitted
    transfer_kv_all_layer_mla(src_tbl, host, idx, idx, item, layers, backend=backend,
                              direction="d2h", src_slots=pages * page)  # fmt: skip
    planned = plan(idx, idx, src=Endpoint("layers"), dst=Endpoint("layers"), item_size=item,
                   num_layers=layers).count  # fmt: skip
    assert backend.submitted - before == planned == layers
    assert all(np.array_equal(h, d) for h, d in zip(host, dev, strict=True))


def test_wrong_direction_is_caught_by_the_runtime(place, backend) -> None:  # type: ignore[no-untyped-def]
    """The stand-in checks kinds like a card would: host memory is not device memory."""
    dev = place.device(np.zeros((4, 1, 4), np.float32))
    host = np.ones((4, 1, 4), np.float32)
    idx = np.arange(4, dtype=np.int64)
    with pytest.raises(RuntimeError, match="xpu_memcpy_async failed"):
        transfer_kv_all_layer_mla([host], [dev], idx, idx, 16, 1, backend=backend,
                                  direction="d2h")  # fmt: skip
    assert not dev.any()


def test_raw_tables_need_a_direction(backend) -> None:  # type: ignore[no-untyped-def]
    a = np.zeros((4, 1, 4), np.float32)
    table = np.array([a.ctypes.data], dtype=np.int64)
    idx = np.arange(4, dtype=np.int64)
    with pytest.raises(Exception, match="needs direction"):
        transfer_kv_all_layer_mla(table, table, idx, idx, 16, 1, backend=backend)


def test_copies_wait_for_the_stream(backend) -> None:  # type: ignore[no-untyped-def]
    """The stand-in defers copies to xpu_wait; with no caller stream the backend must wait."""
    lib = backend.lib
    lib.xpu_fake_waits.restype = ctypes.c_int64
    before = lib.xpu_fake_waits()
    assert backend.lib.xt_xpu_wait(None) == 0
    assert lib.xpu_fake_waits() == before + 1


def test_page_first_submits_one_copy_per_token_per_layer(place, backend) -> None:  # type: ignore[no-untyped-def]
    """What the planner predicts for page_first on a DMA engine: nothing merges, because a
    slot's next neighbour in the pool is a whole token of every layer away."""
    from xputune.kernels import transfer_kv_all_layer_mla_lf_pf, transfer_kv_per_layer_mla_pf_lf

    slots, layers, dim = 16, 3, 8
    item = dim * 4
    pool = np.arange(slots * layers * dim, dtype=np.float32).reshape(slots, layers, 1, dim)
    dev = [place.device(np.zeros((slots, 1, dim), np.float32)) for _ in range(layers)]
    host_idx, dev_idx = np.arange(8, dtype=np.int64), np.arange(4, 12, dtype=np.int64)
    pf = Endpoint("page_first", slots=slots, layers=layers)
    before = backend.submitted
    for layer in range(layers):
        transfer_kv_per_layer_mla_pf_lf(
            pool, dev[layer], host_idx, dev_idx, layer, item, layers * item, backend=backend,
            direction="h2d",
        )  # fmt: skip
        assert np.array_equal(dev[layer][dev_idx, 0], pool[host_idx, layer, 0])
    one = plan(host_idx, dev_idx, src=pf, dst=Endpoint("layers", slots=slots), item_size=item)
    assert backend.submitted - before == one.count * layers == 8 * layers

    out = np.zeros_like(pool)
    back = host_idx[::-1].copy()
    src_tbl = np.array([d.ctypes.data for d in dev], dtype=np.int64)
    before = backend.submitted
    transfer_kv_all_layer_mla_lf_pf(src_tbl, out, dev_idx, back, item, layers * item, layers,
                                    backend=backend, direction="d2h", src_slots=slots)  # fmt: skip
    every = plan(dev_idx, back, src=Endpoint("layers", slots=slots), dst=pf, item_size=item,
                 num_layers=layers)  # fmt: skip
    assert backend.submitted - before == every.count == 8 * layers
    assert np.array_equal(out[back], pool[host_idx])


def test_transfer_kv_direct_submits_one_copy_per_run_per_layer(place, backend) -> None:  # type: ignore[no-untyped-def]
    from xputune.kernels import transfer_kv_direct

    layers, dim = 3, 8
    host = [np.random.default_rng(k).random((16, 1, dim)).astype(np.float32) for k in range(layers)]
    dev = [place.device(np.zeros((16, 1, dim), np.float32)) for _ in range(layers)]
    host_idx = np.array([0, 1, 2, 3, 8, 9, 10, 11], dtype=np.int64)  # two runs of two pages
    dev_idx = np.arange(4, 12, dtype=np.int64)  # one run
    before = backend.submitted
    transfer_kv_direct(host, dev, host_idx, dev_idx, 4, backend=backend, direction="h2d")
    assert backend.submitted - before == 2 * layers
    assert all(np.array_equal(d[dev_idx], h[host_idx]) for h, d in zip(host, dev, strict=True))
