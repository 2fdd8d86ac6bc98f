"""The planner: segment counts, maximality, page rules, and byte-exact equivalence."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.kernels.planner import (
    Endpoint,
    KernelArgumentError,
    host_transfer_plan,
    plan,
    synthetic_indices,
)

SEED_TOKENS, SEED_PAGE, SEED_LAYERS, MLA_ITEM = 32768, 64, 78, 1152


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
@pytest.mark.parametrize("pattern", ["contiguous", "pages"])
def test_seed_case_counts(direction: str, pattern: str) -> None:
    """The field report's transfer (32K tokens, 78 layers, page 64, MLA 1152 B): one
    load_to_device_per_layer call moves one layer, a whole load or backup all 78. Host slots
    contiguous, or whole pages in any order (a paged allocator's scattered pages)."""
    host = synthetic_indices(SEED_TOKENS, pattern, SEED_PAGE, seed=1)
    runs = 1 + int(np.count_nonzero(np.diff(host) != 1))  # the device slots are one run
    assert runs == (1 if pattern == "contiguous" else 511)  # two shuffled pages happen to abut
    per_layer = {
        "layer_first": runs,  # one copy per run
        "page_first": SEED_TOKENS,  # a slot's next neighbour is 78 items away: one per token
        "page_first_direct": SEED_TOKENS // SEED_PAGE,  # one per page, never merged
    }

    def count(layout: str, moved: int | None) -> int:
        return host_transfer_plan(
            layout, SEED_TOKENS, page_size=SEED_PAGE, layers=SEED_LAYERS, item_size=MLA_ITEM,
            pattern=pattern, direction=direction, seed=1, moved_layers=moved,
        ).count  # fmt: skip

    for layout, want in per_layer.items():
        assert count(layout, 1) == want, layout
        assert count(layout, None) == want * SEED_LAYERS, layout
    assert count("page_first", None) == 2_555_904 and count("page_first_direct", None) == 39_936


def _flat_size(ep: Endpoint, layers: int, item: int) -> int:
    return (ep.slots or 0) * (layers if ep.layout == "layers" else ep.layers) * item


def _apply(segs, src_ep, dst_ep, src_mem, dst_mem, item, layers):  # type: ignore[no-untyped-def]
    """Execute a plan on byte arrays: per-layer buffers live back to back in one array."""

    def base(ep: Endpoint, buf: np.ndarray) -> np.ndarray:
        stride = (ep.slots or 0) * item
        return buf * stride if ep.layout == "layers" else np.zeros_like(buf)

    so = base(src_ep, segs.src_buf) + segs.src_off
    do = base(dst_ep, segs.dst_buf) + segs.dst_off
    for s, d, n in zip(so, do, segs.nbytes, strict=True):
        dst_mem[d : d + n] = src_mem[s : s + n]


def _reference(src_ep, dst_ep, si, di, src_mem, dst_mem, item, layers):  # type: ignore[no-untyped-def]
    """Per token per layer, straight from the layout formulas."""

    def off(ep: Endpoint, layer: int, slot: int) -> int:
        lay = ep.first_layer + layer
        if ep.layout == "layers":
            return (layer * ep.slots + slot) * item
        if ep.layout == "layer_first":
            return (lay * ep.slots + slot) * item
        if ep.layout == "page_first":
            return (slot * ep.layers + lay) * item
        p, o = divmod(slot, ep.page_size)
        return ((p * ep.layers + lay) * ep.page_size + o) * item

    for layer in range(layers):
        for s, d in zip(si, di, strict=True):
            a, b = off(src_ep, layer, int(s)), off(dst_ep, layer, int(d))
            dst_mem[b : b + item] = src_mem[a : a + item]


layout_st = st.sampled_from(["layers", "layer_first", "page_first", "page_first_direct"])


@settings(max_examples=80, deadline=None)
@given(
    src_layout=layout_st,
    dst_layout=layout_st,
    page_size=st.sampled_from([1, 2, 4, 8]),
    pages=st.integers(1, 6),
    layers=st.integers(1, 4),
    extra_layers=st.integers(0, 2),
    item=st.integers(1, 9),
    data=st.data(),
)
def test_plan_moves_exactly_the_reference_bytes(
    src_layout, dst_layout, page_size, pages, layers, extra_layers, item, data
) -> None:  # type: ignore[no-untyped-def]
    slots = pages * page_size
    pool_layers = layers + extra_layers
    first = data.draw(st.integers(0, extra_layers))
    src_ep = Endpoint(src_layout, slots=slots, layers=pool_layers, first_layer=first,
                      page_size=page_size)  # fmt: skip
    dst_ep = Endpoint(dst_layout, slots=slots, layers=pool_layers, page_size=page_size)
    n = data.draw(st.integers(0, slots))
    pattern = data.draw(st.sampled_from(["run", "perm"]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    if pattern == "run":
        s0, d0 = rng.integers(0, slots - n + 1, size=2)
        si, di = np.arange(s0, s0 + n), np.arange(d0, d0 + n)
    else:
        si, di = rng.permutation(slots)[:n], rng.permutation(slots)[:n]
    si, di = si.astype(np.int64), di.astype(np.int64)
    segs = plan(si, di, src=src_ep, dst=dst_ep, item_size=item, num_layers=layers)

    size_s = slots * item * (layers if src_layout == "layers" else pool_layers)
    size_d = slots * item * (layers if dst_layout == "layers" else pool_layers)
    src_mem = rng.integers(0, 256, size_s, dtype=np.uint8)
    got = np.zeros(size_d, dtype=np.uint8)
    want = np.zeros(size_d, dtype=np.uint8)
    _apply(segs, src_ep, dst_ep, src_mem, got, item, layers)
    _reference(src_ep, dst_ep, si, di, src_mem, want, item, layers)
    assert np.array_equal(got, want)
    assert int(segs.nbytes.sum()) == n * layers * item == segs.total_bytes
    assert segs.count <= n * layers
    # maximal: no two consecutive segments could have been one
    if segs.count > 1 and "page_first_direct" not in (src_layout, dst_layout):
        joinable = (
            (segs.src_buf[1:] == segs.src_buf[:-1])
            & (segs.dst_buf[1:] == segs.dst_buf[:-1])
            & (segs.src_off[:-1] + segs.nbytes[:-1] == segs.src_off[1:])
            & (segs.dst_off[:-1] + segs.nbytes[:-1] == segs.dst_off[1:])
        )
        assert not joinable.any()


@settings(max_examples=60, deadline=None)
@given(page_size=st.sampled_from([2, 4, 16]), pages=st.integers(1, 8), layers=st.integers(1, 5))
def test_page_first_direct_never_crosses_a_page(page_size: int, pages: int, layers: int) -> None:
    n = pages * page_size
    host = Endpoint("page_first_direct", slots=n, layers=layers, page_size=page_size)
    idx = np.arange(n, dtype=np.int64)
    # host to host, same layout: everything is contiguous, yet pages stay separate copies
    segs = plan(idx, idx, src=host, dst=host, item_size=8, num_layers=layers)
    page_bytes = page_size * 8
    assert segs.count == pages
    assert (segs.src_off // (page_bytes * layers) == (segs.src_off + segs.nbytes - 1)
            // (page_bytes * layers)).all()  # fmt: skip


def test_layers_merge_where_layout_makes_them_contiguous() -> None:
    n, layers = 16, 3
    idx = np.arange(n, dtype=np.int64)
    lf = Endpoint("layer_first", slots=n, layers=layers)
    pf = Endpoint("page_first", slots=n, layers=layers)
    dev = Endpoint("layers", slots=n)
    assert plan(idx, idx, src=lf, dst=lf, item_size=4, num_layers=layers).count == 1
    assert plan(idx, idx, src=pf, dst=pf, item_size=4, num_layers=layers).count == 1
    assert plan(idx, idx, src=dev, dst=lf, item_size=4, num_layers=layers).count == layers


def test_pages_pattern_keeps_page_long_runs() -> None:
    idx = synthetic_indices(4096, "pages", 64, seed=3)
    assert sorted(idx.tolist()) == list(range(4096))
    segs = host_transfer_plan("layer_first", 4096, page_size=64, layers=2, item_size=16,
                              pattern="pages", seed=3)  # fmt: skip
    assert segs.count <= 2 * 4096 // 64


@pytest.mark.parametrize(
    ("si", "di", "message"),
    [
        (np.arange(4), np.arange(3), "differ in length"),
        (np.arange(4), np.arange(4) + 100, "out of range"),
        (np.arange(4) - 1, np.arange(4), "negative"),
        (np.arange(4, dtype=np.int32), np.arange(4), "int64"),
        (np.arange(4.0), np.arange(4), "int64"),
        ([0, 1], np.arange(2), "numpy array"),
        (np.arange(4).reshape(2, 2), np.arange(4).reshape(2, 2), "1-D"),
    ],
)
def test_plan_rejects_bad_indices(si, di, message) -> None:  # type: ignore[no-untyped-def]
    ep = Endpoint("layers", slots=8)
    with pytest.raises(KernelArgumentError, match=message):
        plan(si, di, src=ep, dst=ep, item_size=4)


def test_plan_rejects_bad_geometry() -> None:
    idx = np.arange(2, dtype=np.int64)
    with pytest.raises(KernelArgumentError, match="unknown layout"):
        Endpoint("page_last")
    with pytest.raises(KernelArgumentError, match="whole number"):
        Endpoint("page_first_direct", slots=10, page_size=4)
    with pytest.raises(KernelArgumentError, match="slot count"):
        Endpoint("layer_first")
    ep = Endpoint("layer_first", slots=4, layers=2)
    with pytest.raises(KernelArgumentError, match="holds 2 layers"):
        plan(idx, idx, src=ep, dst=ep, item_size=4, num_layers=3)
    with pytest.raises(KernelArgumentError, match="item_size"):
        plan(idx, idx, src=ep, dst=ep, item_size=0)
    with pytest.raises(KernelArgumentError, match="unknown index pattern"):
        synthetic_indices(4, "zigzag", 2)
