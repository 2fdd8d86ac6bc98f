"""Plain numpy statements of what each copy operator must do: the oracle for tests and selftest.

Written as directly as the semantics read (fancy indexing per layer, no planner, no segments),
so that a bug in the planner or a backend cannot hide in a shared helper.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _rows(arr: np.ndarray, item_size: int) -> np.ndarray:
    """A (slots, item_size) byte view of a contiguous host array."""
    return arr.reshape(-1).view(np.uint8).reshape(-1, item_size)


def per_layer(
    src: np.ndarray, dst: np.ndarray, src_idx: np.ndarray, dst_idx: np.ndarray, item_size: int
) -> None:
    """dst[dst_idx[i]] = src[src_idx[i]] over item_size-byte slots."""
    _rows(dst, item_size)[dst_idx] = _rows(src, item_size)[src_idx]


def all_layer(
    src_layers: Sequence[np.ndarray],
    dst_layers: Sequence[np.ndarray],
    src_idx: np.ndarray,
    dst_idx: np.ndarray,
    item_size: int,
) -> None:
    for s, d in zip(src_layers, dst_layers, strict=True):
        per_layer(s, d, src_idx, dst_idx, item_size)


def _page_first(pool: np.ndarray) -> np.ndarray:
    """(slots, L, item) byte view of a page_first pool (slots, L, ...)."""
    return pool.reshape(-1).view(np.uint8).reshape(pool.shape[0], pool.shape[1], -1)


def per_layer_pf_lf(
    src_pool: np.ndarray, dst: np.ndarray, src_idx: np.ndarray, dst_idx: np.ndarray, layer_id: int
) -> None:
    """dst[dst_idx[i]] = src_pool[src_idx[i], layer_id]."""
    view = _page_first(src_pool)
    _rows(dst, view.shape[-1])[dst_idx] = view[src_idx, layer_id]


def all_layer_lf_pf(
    src_layers: Sequence[np.ndarray], dst_pool: np.ndarray, src_idx: np.ndarray,
    dst_idx: np.ndarray,
) -> None:  # fmt: skip
    """dst_pool[dst_idx[i], l] = src_layers[l][src_idx[i]] for each given layer l."""
    view = _page_first(dst_pool)
    for layer, src in enumerate(src_layers):
        view[dst_idx, layer] = _rows(src, view.shape[-1])[src_idx]


def direct(
    src_layers: Sequence[np.ndarray],
    dst_layers: Sequence[np.ndarray],
    src_idx: np.ndarray,
    dst_idx: np.ndarray,
) -> None:
    """Each pair moves its own rows (first axis): dst[dst_idx[i]] = src[src_idx[i]]."""
    for s, d in zip(src_layers, dst_layers, strict=True):
        per_layer(s, d, src_idx, dst_idx, s.nbytes // s.shape[0])


def _pf_tokens(pool: np.ndarray, page_size: int) -> np.ndarray:
    """(page_num, L, page_size, item) byte view of a page_first_direct pool."""
    pages, layers = pool.shape[0], pool.shape[1]
    return pool.reshape(-1).view(np.uint8).reshape(pages, layers, page_size, -1)


def per_layer_direct_pf_lf(
    src_ptrs: Sequence[np.ndarray],
    dst_ptrs: Sequence[np.ndarray],
    src_idx: np.ndarray,
    dst_idx: np.ndarray,
    layer_id: int,
    page_size: int,
) -> None:
    members = len(src_ptrs)
    m = len(dst_ptrs) // members
    for k, pool in enumerate(src_ptrs):
        view = _pf_tokens(pool, page_size)
        for j in range(m):
            dst = dst_ptrs[k * m + j]
            rows = _rows(dst, view.shape[-1])
            rows[dst_idx] = view[src_idx // page_size, layer_id + j, src_idx % page_size]


def all_layer_direct_lf_pf(
    src_ptrs: Sequence[np.ndarray],
    dst_ptrs: Sequence[np.ndarray],
    src_idx: np.ndarray,
    dst_idx: np.ndarray,
    page_size: int,
) -> None:
    members = len(dst_ptrs)
    m = len(src_ptrs) // members
    for k, pool in enumerate(dst_ptrs):
        view = _pf_tokens(pool, page_size)
        for j in range(m):
            rows = _rows(src_ptrs[k * m + j], view.shape[-1])
            view[dst_idx // page_size, j, dst_idx % page_size] = rows[src_idx]
