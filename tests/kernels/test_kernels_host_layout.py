"""The host backend's C planner (xt_host_copy_layout) and its copy paths against the oracles.

It must cut exactly the numpy planner's segments (count) and move exactly the bytes the layout
formulas say, for every pair of layouts, with one thread (copies as it plans), several (a table
split by bytes, or the emit sequence split into chunks of positions: forced on tiny transfers
here, with chunk boundaries inside merged segments), and with segments streamed past the cache
(forced on tiny transfers here).
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.kernels.backends.host import HostBackend, load_library
from xputune.kernels.planner import Endpoint, KernelArgumentError, plan

LAYOUTS = ["layers", "layer_first", "page_first", "page_first_direct"]


@contextmanager
def _streaming(on: bool) -> Iterator[None]:
    """With on, every transfer streams its small segments (threshold 0), however small; else
    the library's default threshold (these tests' transfers then never stream)."""
    lib = load_library()
    before = lib.xt_host_stream_min(0 if on else -1)
    try:
        yield
    finally:
        lib.xt_host_stream_min(before)


@contextmanager
def _position_split(on: bool) -> Iterator[None]:
    """With on, several threads always split the emit sequence into chunks of positions (the
    path of large page_first transfers), however few segments; else the library's default."""
    lib = load_library()
    before = lib.xt_host_split_min(0 if on else -1)
    try:
        yield
    finally:
        lib.xt_host_split_min(before)


@pytest.fixture(params=["cached", "streamed"])
def stream_mode(request: pytest.FixtureRequest) -> Iterator[str]:
    with _streaming(request.param == "streamed"):
        yield request.param


def _offset(ep: Endpoint, layer: int, slot: int, item: int) -> int:
    """Byte offset of (processed layer, slot) from its buffer, straight from the layout."""
    lay = ep.first_layer + layer
    if ep.layout == "layers":
        return slot * item
    if ep.layout == "layer_first":
        return (lay * (ep.slots or 0) + slot) * item
    if ep.layout == "page_first":
        return (slot * ep.layers + lay) * item
    page, in_page = divmod(slot, ep.page_size)
    return ((page * ep.layers + lay) * ep.page_size + in_page) * item


class _Side:
    """One side's memory: per member, one buffer per layer ("layers") or one flat buffer."""

    def __init__(self, ep: Endpoint, members: int, layers: int, item: int, pad: int, fill: bool):
        rng = np.random.default_rng(layers * 7 + item)
        per_buf = (ep.slots or 0) * item * (1 if ep.layout == "layers" else ep.layers)
        nbuf = layers if ep.layout == "layers" else 1
        # `pad` shifts every buffer off 64-byte alignment, so streamed lines get heads and tails.
        self.raw = [
            [
                rng.integers(0, 256, per_buf + pad, dtype=np.uint8)
                if fill
                else np.zeros(per_buf + pad, np.uint8)
                for _ in range(nbuf)
            ]
            for _ in range(members)
        ]
        self.pad = pad
        self.ep = ep

    def buf(self, member: int, layer: int) -> np.ndarray:
        bufs = self.raw[member]
        return bufs[layer if self.ep.layout == "layers" else 0][self.pad :]

    def bases(self) -> list[np.ndarray]:
        return [
            np.array([b[self.pad :].ctypes.data for b in bufs], dtype=np.uint64)
            for bufs in self.raw
        ]


def _expected(src: _Side, dst: _Side, si, di, members: int, layers: int, item: int):  # type: ignore[no-untyped-def]
    want = [[b.copy() for b in bufs] for bufs in dst.raw]
    for m in range(members):
        for layer in range(layers):
            s_mem = src.buf(m, layer)
            d_mem = want[m][layer if dst.ep.layout == "layers" else 0][dst.pad :]
            for s, d in zip(si.tolist(), di.tolist(), strict=True):
                a, b = _offset(src.ep, layer, s, item), _offset(dst.ep, layer, d, item)
                d_mem[b : b + item] = s_mem[a : a + item]
    return want


def _indices(pattern: str, slots: int, n: int, page: int, rng: np.random.Generator) -> np.ndarray:
    if pattern == "run":
        start = int(rng.integers(0, slots - n + 1))
        return np.arange(start, start + n, dtype=np.int64)
    if pattern == "pages":  # whole pages shuffled, as a paged allocator hands them out
        order = rng.permutation(slots // page)
        return (order[:, None] * page + np.arange(page)).ravel()[:n].astype(np.int64)
    if pattern == "repeats":  # unsorted, repeated, both ends of the range (sources only)
        idx = rng.integers(0, slots, n).astype(np.int64)
        idx[: min(n, 2)] = [0, slots - 1][: min(n, 2)]
        return rng.permutation(idx)
    return rng.permutation(slots)[:n].astype(np.int64)


@settings(max_examples=120, deadline=None)
@given(
    src_layout=st.sampled_from(LAYOUTS),
    dst_layout=st.sampled_from(LAYOUTS),
    page_size=st.sampled_from([1, 2, 4, 8]),
    pages=st.integers(1, 24),
    layers=st.integers(1, 3),
    extra_layers=st.integers(0, 2),
    members=st.integers(1, 2),
    item=st.sampled_from([1, 3, 8, 64, 100]),
    threads=st.sampled_from([1, 3]),
    pad=st.sampled_from([0, 5]),
    streamed=st.booleans(),
    split=st.booleans(),
    data=st.data(),
)
def test_c_planner_cuts_the_planners_segments_and_moves_the_reference_bytes(
    src_layout: str, dst_layout: str, page_size: int, pages: int, layers: int,
    extra_layers: int, members: int, item: int, threads: int, pad: int, streamed: bool,
    split: bool, data: st.DataObject,
) -> None:  # fmt: skip
    """Repeated destinations only with one thread: several threads may write one slot in any
    order (SGLang's destination slots are always distinct)."""
    slots = pages * page_size
    pool = layers + extra_layers
    first = data.draw(st.integers(0, extra_layers))
    src_ep = Endpoint(src_layout, slots=slots, layers=pool, first_layer=first, page_size=page_size)
    dst_ep = Endpoint(dst_layout, slots=slots, layers=pool, page_size=page_size)
    n = data.draw(st.integers(0, slots))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    patterns = ["run", "pages", "perm"]
    si = _indices(data.draw(st.sampled_from([*patterns, "repeats"])), slots, n, page_size, rng)
    dst_patterns = [*patterns, "repeats"] if threads == 1 else patterns
    di = _indices(data.draw(st.sampled_from(dst_patterns)), slots, n, page_size, rng)
    src = _Side(src_ep, members, layers, item, pad, fill=True)
    dst = _Side(dst_ep, members, layers, item, pad, fill=False)
    want = _expected(src, dst, si, di, members, layers, item)

    with _streaming(streamed), _position_split(split):
        count = HostBackend(threads=threads).copy_layout(
            src_ep, dst_ep, src.bases(), dst.bases(), si, di, item_size=item, num_layers=layers
        )
    planned = plan(si, di, src=src_ep, dst=dst_ep, item_size=item, num_layers=layers).count
    assert count == planned * members
    for got_bufs, want_bufs in zip(dst.raw, want, strict=True):
        for got, exp in zip(got_bufs, want_bufs, strict=True):
            assert np.array_equal(got, exp)


def _flat(n_slots: int, item: int, fill: int = 0) -> np.ndarray:
    return np.full(n_slots * item, fill, dtype=np.uint8)


def _copy(src_ep: Endpoint, dst_ep: Endpoint, src: np.ndarray, dst: np.ndarray, si, di,  # type: ignore[no-untyped-def]
          item: int, layers: int = 1, threads: int = 1) -> int:  # fmt: skip
    def bases(ep: Endpoint, arr: np.ndarray) -> list[np.ndarray]:
        if ep.layout != "layers":
            return [np.array([arr.ctypes.data], np.uint64)]
        stride = (ep.slots or 0) * item
        return [np.array([arr.ctypes.data + k * stride for k in range(layers)], np.uint64)]

    return HostBackend(threads=threads).copy_layout(
        src_ep, dst_ep, bases(src_ep, src), bases(dst_ep, dst),
        np.asarray(si, dtype=np.int64), np.asarray(di, dtype=np.int64), item_size=item,
        num_layers=layers,
    )  # fmt: skip


def test_no_indices_copy_nothing() -> None:
    ep = Endpoint("page_first", slots=4, layers=2)
    src, dst = _flat(8, 4, 7), _flat(8, 4)
    assert _copy(ep, ep, src, dst, [], [], 4) == 0
    assert not dst.any()


def test_adjacent_on_one_side_only_stays_two_segments() -> None:
    """Source slots run on (2, 3 | 4, 5) while the destination jumps back: two copies, not one."""
    ep = Endpoint("layer_first", slots=8, layers=1)
    src = np.arange(32, dtype=np.uint8)
    dst = _flat(8, 4)
    assert _copy(ep, ep, src, dst, [2, 3, 4, 5], [6, 7, 0, 1], 4) == 2
    assert dst.reshape(8, 4)[[6, 7, 0, 1]].tolist() == src.reshape(8, 4)[[2, 3, 4, 5]].tolist()


def test_a_repeated_slot_never_merges() -> None:
    ep = Endpoint("layers", slots=4)
    src = np.arange(16, dtype=np.uint8)
    dst = _flat(4, 4)
    assert _copy(ep, ep, src, dst, [1, 1, 1], [0, 1, 2], 4) == 3
    assert (dst.reshape(4, 4)[:3] == src.reshape(4, 4)[1]).all()


def test_contiguous_layers_merge_into_one_copy() -> None:
    """layer_first on both sides, every slot of every layer: the whole pool is one segment."""
    n, layers = 64, 3
    ep = Endpoint("layer_first", slots=n, layers=layers)
    src = np.random.default_rng(1).integers(0, 256, n * layers * 8, dtype=np.uint8)
    dst = np.zeros_like(src)
    assert _copy(ep, ep, src, dst, np.arange(n), np.arange(n), 8, layers) == 1
    assert np.array_equal(src, dst)


@pytest.mark.parametrize("page", [1, 4, 64])
def test_page_first_direct_pages_stay_separate_copies(page: int) -> None:
    """Long runs go through the eight-slot block scan; each page stays its own copy."""
    slots = 512
    pfd = Endpoint("page_first_direct", slots=slots, layers=1, page_size=page)
    src = np.random.default_rng(2).integers(0, 256, slots * 4, dtype=np.uint8)
    dst = np.zeros_like(src)
    idx = np.arange(3, slots, dtype=np.int64)
    assert _copy(pfd, pfd, src, dst, idx, idx, 4) == (slots - 1) // page - 3 // page + 1
    assert np.array_equal(src[12:], dst[12:]) and not dst[:12].any()


@pytest.mark.parametrize("direction", ["load", "store"])
def test_page_first_direct_one_side_still_cuts_at_its_pages(direction: str) -> None:
    """One layer: page p + 1 directly follows page p in memory, and the other side is one
    contiguous buffer, so only the page rule keeps the pages apart (as SGLang copies them)."""
    page, slots = 8, 64
    pfd = Endpoint("page_first_direct", slots=slots, layers=1, page_size=page)
    flat = Endpoint("layer_first", slots=slots, layers=1)
    src = np.random.default_rng(4).integers(0, 256, slots * 2, dtype=np.uint8)
    dst = np.zeros_like(src)
    idx = np.arange(5, 45, dtype=np.int64)
    eps = (pfd, flat) if direction == "load" else (flat, pfd)
    assert _copy(*eps, src, dst, idx, idx, 2) == 44 // page - 5 // page + 1
    assert plan(idx, idx, src=eps[0], dst=eps[1], item_size=2).count == 6
    assert np.array_equal(dst[10:90], src[10:90]) and not dst[:10].any() and not dst[90:].any()


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 300),
    bad_at=st.floats(0, 1, exclude_max=True),
    bad=st.sampled_from([-1, -(2**62), 300, 2**62, 2**63 - 1]),
    side=st.sampled_from(["src", "dst"]),
    layout=st.sampled_from(["layer_first", "page_first", "page_first_direct"]),
)
def test_a_bad_slot_anywhere_is_refused_before_any_byte_moves(
    n: int, bad_at: float, bad: int, side: str, layout: str
) -> None:
    """Runs are checked at their two ends only; a bad slot inside a long run must still be
    seen, wherever it sits, and nothing may be written."""
    slots = 300
    ep = Endpoint(layout, slots=slots, layers=1, page_size=4 if layout != "page_first" else 1)
    si, di = np.arange(n, dtype=np.int64), np.arange(n, dtype=np.int64)
    (si if side == "src" else di)[int(bad_at * n)] = bad
    src, dst = _flat(slots, 2, 9), _flat(slots, 2)
    with pytest.raises(KernelArgumentError, match=f"{side}_indices holds"):
        _copy(ep, ep, src, dst, si, di, 2)
    assert not dst.any()


def test_a_run_that_wraps_past_the_largest_slot_is_refused() -> None:
    """2**63 - 1 then -2**63 steps by one in 64-bit arithmetic: still two bad ends."""
    ep = Endpoint("layers", slots=None)
    si = np.array([2**63 - 2, 2**63 - 1, -(2**63)], dtype=np.int64)
    di = np.arange(3, dtype=np.int64)
    with pytest.raises(KernelArgumentError, match="src_indices holds a negative slot"):
        _copy(ep, Endpoint("layers", slots=3), _flat(3, 1), _flat(3, 1), si, di, 1)


def test_bad_arguments_are_einval() -> None:
    lib = load_library()
    geo = np.array([1, 4, 1, 4, 0, 0] * 2, dtype=np.int64)
    idx = np.arange(2, dtype=np.int64)
    seg = ctypes.c_int64(5)
    args = (geo.ctypes.data, geo.ctypes.data + 48, 1, 1, idx.ctypes.data, idx.ctypes.data)
    base = np.array([idx.ctypes.data], np.uint64)
    rc = lib.xt_host_copy_layout(base.ctypes.data, base.ctypes.data, *args[:2], 1, 1,
                                 *args[4:], 2, 0, 0, 1, ctypes.byref(seg))  # fmt: skip
    assert rc == -22 and seg.value == 0  # item 0
    rc = lib.xt_host_copy_layout(None, None, *args[:2], 1, 1, *args[4:], 2, 4, 0, 1,
                                 ctypes.byref(seg))  # fmt: skip
    assert rc == -22  # no bases
    rc = lib.xt_host_copy_layout(None, None, *args[:2], 1, 1, *args[4:], 0, 4, 0, 1,
                                 ctypes.byref(seg))  # fmt: skip
    assert rc == 0 and seg.value == 0  # nothing to do needs no memory


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("nbytes", [(256 << 10) - 1, 256 << 10, (600 << 10) + 13])
def test_a_segment_larger_than_a_piece_is_copied_whole(
    stream_mode: str, threads: int, nbytes: int
) -> None:
    """Segments are handed to memcpy in 256 KiB pieces; the last piece is the remainder.
    Streamed, a large segment is whole lines with an unaligned head and tail."""
    rng = np.random.default_rng(nbytes)
    src = rng.integers(0, 256, nbytes + 3, dtype=np.uint8)
    dst = np.zeros(nbytes + 7, np.uint8)
    table = [np.array([a], np.uint64) for a in (src.ctypes.data + 3, dst.ctypes.data + 1)]
    HostBackend(threads=threads).copy(*table, np.array([nbytes], np.uint64))
    assert np.array_equal(dst[1 : nbytes + 1], src[3:]) and dst[0] == 0 and not dst[-6:].any()


@pytest.mark.parametrize("threads", [1, 3])
def test_segment_tables_stream_small_segments_exactly(stream_mode: str, threads: int) -> None:
    """Every size from 0 to a few lines, at every alignment: heads and tails of streamed
    segments go through plain moves (copy_small), whole lines through streaming stores."""
    rng = np.random.default_rng(3)
    sizes = np.arange(0, 200, dtype=np.uint64)
    src = rng.integers(0, 256, 64 * 1024, dtype=np.uint8)
    dst = np.zeros(64 * 1024, np.uint8)
    want = np.zeros_like(dst)
    s_off = rng.integers(0, 64 * 1024 - 200, sizes.shape[0]).astype(np.uint64)
    d_off = (np.arange(sizes.shape[0], dtype=np.uint64) * 300 + sizes % 64).astype(np.uint64)
    for s, d, n in zip(s_off.tolist(), d_off.tolist(), sizes.tolist(), strict=True):
        want[d : d + n] = src[s : s + n]
    HostBackend(threads=threads).copy(
        np.uint64(src.ctypes.data) + s_off, np.uint64(dst.ctypes.data) + d_off, sizes
    )
    assert np.array_equal(dst, want)


def test_streaming_threshold_is_the_cache_size_or_what_was_set() -> None:
    lib = load_library()
    default = lib.xt_host_stream_min(-1)
    assert default >= 1 << 20  # a last-level cache, or the 32 MiB fallback
    assert lib.xt_host_stream_min(12345) == default
    assert lib.xt_host_stream_min(default) == 12345


@settings(max_examples=60, deadline=None)
@given(
    distance=st.integers(1, 63),
    nbytes=st.sampled_from([1023, 1024, 1152, 4096 + 17, (256 << 10) + 5, 600 << 10]),
    src_offset=st.integers(0, 4095),
    threads=st.sampled_from([1, 2]),
    streamed=st.booleans(),
)
def test_a_destination_just_past_its_source_modulo_4k_is_copied_exactly(
    distance: int, nbytes: int, src_offset: int, threads: int, streamed: bool
) -> None:
    """Such copies leave glibc's rep movsb for a vector loop (host_copy.c, short_distance), or
    stream when the transfer streams; every byte, the unaligned tail included, must still
    land, and none beyond."""
    rng = np.random.default_rng(nbytes + distance)
    src_buf = rng.integers(0, 256, nbytes + 8192, dtype=np.uint8)
    dst_buf = np.zeros(nbytes + 8192, np.uint8)
    s = src_buf.ctypes.data + src_offset
    d0 = dst_buf.ctypes.data
    dst_offset = (s + distance - d0) % 4096  # (dst - src) % 4096 == distance
    table = [np.array([a], np.uint64) for a in (s, d0 + dst_offset)]
    with _streaming(streamed):
        HostBackend(threads=threads).copy(*table, np.array([nbytes], np.uint64))
    want = np.zeros_like(dst_buf)
    want[dst_offset : dst_offset + nbytes] = src_buf[src_offset : src_offset + nbytes]
    assert np.array_equal(dst_buf, want)


@pytest.mark.parametrize(
    ("src_layout", "dst_layout", "pattern"),
    [
        ("layers", "page_first", "perm"),  # a page_first backup: a segment per token per layer
        ("page_first", "layers", "pages"),  # a page_first load
        ("layers", "layer_first", "pages"),  # runs of a page, merged across layers
        ("layer_first", "layer_first", "run"),  # one run, merged into a segment per member
        ("layers", "page_first_direct", "pages"),
        ("page_first_direct", "layers", "repeats"),
    ],
)
@pytest.mark.parametrize(("threads", "forced"), [(2, False), (3, False), (2, True), (4, True)])
def test_threads_move_the_bytes_and_count_the_segments_of_one_thread(
    src_layout: str, dst_layout: str, pattern: str, threads: int, forced: bool, stream_mode: str
) -> None:
    """Several threads (the position split, chunk boundaries inside merged segments when
    forced; else whichever path the size picks) give one thread's bytes and segment count."""
    slots, page, pool, layers, members, item = 2048, 16, 5, 4, 2, 24
    rng = np.random.default_rng(threads * 10 + forced)
    src_ep = Endpoint(src_layout, slots=slots, layers=pool, first_layer=1, page_size=page)
    dst_ep = Endpoint(dst_layout, slots=slots, layers=pool, page_size=page)
    src_pattern = pattern
    dst_pattern = "pages" if pattern == "repeats" else pattern
    si = _indices(src_pattern, slots, slots - page, page, rng)
    di = _indices(dst_pattern, slots, slots - page, page, rng)
    src = _Side(src_ep, members, layers, item, 3, fill=True)
    results = []
    for n_threads in (1, threads):
        dst = _Side(dst_ep, members, layers, item, 3, fill=False)
        with _position_split(forced and n_threads > 1):
            count = HostBackend(threads=n_threads).copy_layout(
                src_ep, dst_ep, src.bases(), dst.bases(), si, di, item_size=item,
                num_layers=layers,
            )  # fmt: skip
        results.append((count, dst.raw))
    (one_count, one_raw), (many_count, many_raw) = results
    assert many_count == one_count
    assert one_count == plan(si, di, src=src_ep, dst=dst_ep, item_size=item,
                             num_layers=layers).count * members  # fmt: skip
    for got_bufs, want_bufs in zip(many_raw, one_raw, strict=True):
        for got, want in zip(got_bufs, want_bufs, strict=True):
            assert np.array_equal(got, want)
    want = _expected(src, _Side(dst_ep, members, layers, item, 3, fill=False), si, di, members,
                     layers, item)  # fmt: skip
    for got_bufs, want_bufs in zip(many_raw, want, strict=True):
        for got, exp in zip(got_bufs, want_bufs, strict=True):
            assert np.array_equal(got, exp)


@pytest.mark.parametrize("threads", [2, 3])
def test_a_bad_slot_is_refused_before_threads_start(threads: int) -> None:
    """The range check stays ahead of every path: nothing is written by any thread."""
    slots = 4096
    ep = Endpoint("page_first", slots=slots, layers=2)
    flat = Endpoint("layers", slots=slots)
    si = np.arange(slots, dtype=np.int64)
    di = np.random.default_rng(5).permutation(slots).astype(np.int64)
    di[slots // 2] = slots
    src, dst = _flat(slots, 8, 9), _flat(slots * 2, 8)
    with _position_split(True), pytest.raises(KernelArgumentError, match="dst_indices holds"):
        _copy(flat, ep, src, dst, si, di, 8, 1, threads)
    assert not dst.any()


def test_the_strided_reference_loop_moves_every_item() -> None:
    """xt_host_strided_memcpy (bench_copy's page_first reference): item k from src + k *
    src_stride to dst + k * dst_stride, nothing between the items."""
    item, count, s_stride, d_stride = 24, 50, 72, 40
    src = np.random.default_rng(6).integers(0, 256, count * s_stride, dtype=np.uint8)
    dst = np.zeros(count * d_stride, np.uint8)
    HostBackend(threads=1).strided_memcpy(dst.ctypes.data, src.ctypes.data, item, count,
                                          d_stride, s_stride)  # fmt: skip
    got, want = dst.reshape(count, d_stride), src.reshape(count, s_stride)
    assert np.array_equal(got[:, :item], want[:, :item]) and not got[:, item:].any()


def test_the_strided_read_reference_reads_every_word_of_every_item() -> None:
    """xt_host_strided_read: the XOR of every 8-byte word of the items, none between them."""
    item, count, stride = 40, 30, 88
    buf = np.random.default_rng(8).integers(0, 2**63, count * stride // 8, dtype=np.uint64)
    want = np.bitwise_xor.reduce(buf.reshape(count, stride // 8)[:, : item // 8].ravel())
    backend = HostBackend(threads=1)
    assert backend.strided_read(buf.ctypes.data, item, count, stride) == int(want)
    whole = np.bitwise_xor.reduce(buf)
    assert backend.strided_read(buf.ctypes.data, buf.nbytes, 1, buf.nbytes) == int(whole)


@pytest.mark.parametrize(
    ("src_at", "dst_at", "side"), [(5, 2, "dst"), (2, 5, "src"), (3, 3, "src")]
)
def test_with_bad_slots_on_both_sides_the_first_one_names_the_side(
    src_at: int, dst_at: int, side: str
) -> None:
    """Every slot its own run (page_first): both index arrays are checked whole first, and a
    bad slot found there is then looked for in order, so the first bad one still decides."""
    slots = 64
    ep = Endpoint("page_first", slots=slots, layers=2)
    flat = Endpoint("layers", slots=slots)
    si, di = np.arange(slots, dtype=np.int64), np.arange(slots, dtype=np.int64)
    si[src_at], di[dst_at] = slots, -1
    src, dst = _flat(slots * 2, 4, 9), _flat(slots, 4)
    with pytest.raises(KernelArgumentError, match=f"{side}_indices holds"):
        _copy(ep, flat, src, dst, si, di, 4)
    assert not dst.any()


@pytest.mark.parametrize("distance", [0, 16, 2048])
@pytest.mark.parametrize("scale", [1, 4])
def test_large_segments_of_a_streamed_transfer_are_copied_exactly(
    distance: int, scale: int
) -> None:
    """A transfer of 1 to 4 caches streams its small segments and the large ones just past
    their source modulo 4 KiB; from 4 caches on, every segment. Each way, every byte lands."""
    sizes = [(600 << 10) + 13, 1000, 64 * 1024 + 7]
    total = sum(sizes)
    rng = np.random.default_rng(distance + scale)
    src = rng.integers(0, 256, total + 8192, dtype=np.uint8)
    dst = np.zeros(total + 8192, np.uint8)
    s0, d0 = src.ctypes.data + 8, dst.ctypes.data
    d_first = (s0 + distance - d0) % 4096  # (dst - src) % 4096 == distance for the first
    s_off = np.cumsum([0, *sizes[:-1]]).astype(np.uint64)
    want = np.zeros_like(dst)
    for so, n in zip(s_off.tolist(), sizes, strict=True):
        want[d_first + so : d_first + so + n] = src[8 + so : 8 + so + n]
    with _streaming(True):
        load_library().xt_host_stream_min(total // scale)
        HostBackend(threads=1).copy(np.uint64(s0) + s_off, np.uint64(d0 + d_first) + s_off,
                                    np.array(sizes, np.uint64))  # fmt: skip
    assert np.array_equal(dst, want)


@pytest.mark.parametrize(
    ("src_layout", "dst_layout"),
    [("page_first_direct", "layers"), ("layer_first", "layers"), ("layers", "layer_first")],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_large_runs_from_scattered_sources_stream_exactly(
    src_layout: str, dst_layout: str, threads: int
) -> None:
    """Runs of whole shuffled pages (above the streaming size of one segment) are streamed
    while the next run's source is asked for line by line; every byte must land, unaligned
    heads and tails included, and the count stays the planner's."""
    slots, page, pool, layers, item = 40 * 64, 64, 3, 2, 300
    rng = np.random.default_rng(9)
    src_ep = Endpoint(src_layout, slots=slots, layers=pool, page_size=page)
    dst_ep = Endpoint(dst_layout, slots=slots, layers=pool, page_size=page)
    si = _indices("pages", slots, slots - 3 * page, page, rng)
    di = _indices("pages", slots, slots - 3 * page, page, rng)
    src = _Side(src_ep, 1, layers, item, 5, fill=True)
    dst = _Side(dst_ep, 1, layers, item, 3, fill=False)
    want = _expected(src, dst, si, di, 1, layers, item)
    with _streaming(True), _position_split(threads > 1):
        count = HostBackend(threads=threads).copy_layout(
            src_ep, dst_ep, src.bases(), dst.bases(), si, di, item_size=item, num_layers=layers
        )
    assert count == plan(si, di, src=src_ep, dst=dst_ep, item_size=item, num_layers=layers).count
    for got_bufs, want_bufs in zip(dst.raw, want, strict=True):
        for got, exp in zip(got_bufs, want_bufs, strict=True):
            assert np.array_equal(got, exp)
