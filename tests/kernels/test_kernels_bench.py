"""The copy benchmark's plumbing (xputune/kernels/bench.py): counts and pools, not timings."""

from __future__ import annotations

import numpy as np

from xputune.kernels import bench


def test_segment_counts_per_layout_and_pattern() -> None:
    rows = bench.segment_counts(tokens=256, layers=3, page_size=16, item_size=64)
    got = {(r.pattern, r.layout): (r.h2d_per_layer, r.h2d_all_layers, r.d2h_all_layers)
           for r in rows}  # fmt: skip
    assert got[("contiguous", "layer_first")] == (1, 3, 3)
    assert got[("contiguous", "page_first")] == (256, 768, 768)
    assert got[("contiguous", "page_first_direct")] == (16, 48, 48)
    pages = got[("pages", "layer_first")]
    assert 1 < pages[0] <= 16 and pages[1:] == (3 * pages[0], 3 * pages[0])
    assert got[("pages", "page_first")] == (256, 768, 768)


def test_pools_come_from_the_callers_allocator() -> None:
    """Each layout's pool is asked of host_alloc at its full size (pool_layers layers), and
    so is the host side of the memcpy baseline when it cannot use the case's own buffers."""
    asked: list[int] = []

    def alloc(nbytes: int) -> np.ndarray:
        asked.append(nbytes)
        return np.zeros(nbytes, np.uint8)

    _, rows = bench.run(tokens=128, layers=1, pool_layers=4, item_size=64, page_size=16,
                        repeats=1, threads=1, host_alloc=alloc)  # fmt: skip
    assert asked == [128 * 4 * 64] * 6
    ops = {(r.layout, r.direction): (r.operator, r.segments) for r in rows}
    assert ops[("page_first", "h2d")] == ("per_layer_mla_pf_lf", 128)
    assert ops[("page_first", "d2h")] == ("all_layer_mla_lf_pf", 128)
    assert ops[("layer_first", "h2d")] == ("per_layer_mla", 1)
    assert ops[("page_first_direct", "d2h")] == ("all_layer_direct_lf_pf", 8)
    asked.clear()
    bench.run(
        tokens=64, layers=2, pool_layers=2, item_size=64, page_size=16, repeats=1, threads=1,
        layouts=("page_first",), directions=("d2h",), host_alloc=alloc,
    )  # fmt: skip
    assert asked == [64 * 2 * 64, 64 * 2 * 64]  # the pool, then the memcpy baseline's host side


def test_strided_reference_asks_one_page_first_pool_and_reports_both_patterns() -> None:
    """Part 3 of bench_copy: one pool of tokens x pool_layers items from host_alloc, a gather,
    a scatter and a read row, each with a figure for the pattern and for its baseline."""
    asked: list[int] = []

    def alloc(nbytes: int) -> np.ndarray:
        asked.append(nbytes)
        return np.zeros(nbytes, np.uint8)

    rows = bench.strided(tokens=64, pool_layers=3, item_size=32, repeats=1, host_alloc=alloc)
    assert asked == [64 * 3 * 32]
    assert [r.direction for r in rows] == ["gather", "scatter", "read"]
    assert all(r.stride == 96 and r.gbps > 0 and r.baseline_gbps > 0 for r in rows)
