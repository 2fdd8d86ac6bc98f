"""Random operator cases checked against the numpy reference, on any placement of the buffers.

Shared by `xputune kernels selftest` and the property tests, so the check a user runs on a
card is the check CI runs on the host. A Placement says where the two sides live (host numpy,
torch CPU, a torch device, the fake XPU's "device" memory) and which backend moves the bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xputune.kernels import reference as ref

OPERATORS = (
    "transfer_kv_per_layer_mla",
    "transfer_kv_per_layer",
    "transfer_kv_all_layer_mla",
    "transfer_kv_all_layer",
    "transfer_kv_per_layer_direct_pf_lf",
    "transfer_kv_all_layer_direct_lf_pf",
)
# The page_first_direct operators each go one way, as in SGLang.
FIXED_DIRECTION = {
    "transfer_kv_per_layer_direct_pf_lf": "h2d",
    "transfer_kv_all_layer_direct_lf_pf": "d2h",
}
DTYPES = (np.uint8, np.uint16, np.float32, np.int64)


@dataclass
class Placement:
    """Where host-side and device-side buffers live and which backend a call uses."""

    name: str
    host: Callable[[np.ndarray], Any] = lambda a: a.copy()
    device: Callable[[np.ndarray], Any] = lambda a: a.copy()
    to_numpy: Callable[[Any], np.ndarray] = lambda o: np.asarray(o)
    indices: Callable[[np.ndarray], Any] = lambda a: a
    address: Callable[[Any], int] = lambda o: int(o.__array_interface__["data"][0])
    table: Callable[[np.ndarray], Any] = lambda a: a
    kwargs: Callable[[str], dict[str, Any]] = field(default=lambda direction: {})
    sync: Callable[[], None] = lambda: None


@dataclass
class Geometry:
    slots: int
    layers: int
    page_size: int
    row_elems: int
    dtype: Any

    @property
    def item_size(self) -> int:
        return self.row_elems * np.dtype(self.dtype).itemsize


def random_geometry(rng: np.random.Generator) -> Geometry:
    page_size = int(rng.choice([1, 2, 4, 8, 16]))
    pages = int(rng.integers(2, 12))
    return Geometry(
        slots=page_size * pages,
        layers=int(rng.integers(1, 5)),
        page_size=page_size,
        row_elems=int(rng.integers(1, 40)),
        dtype=DTYPES[int(rng.integers(len(DTYPES)))],
    )


def random_indices(
    rng: np.random.Generator, slots: int, count: int, page_size: int = 1, whole_pages: bool = False
) -> np.ndarray:
    """Distinct slots mixing runs and scattered slots, as a paged allocator hands them out."""
    if whole_pages:
        pages = rng.permutation(slots // page_size)[: count // page_size].astype(np.int64)
        return (pages[:, None] * page_size + np.arange(page_size, dtype=np.int64)).ravel()
    if rng.random() < 0.3:
        start = int(rng.integers(0, slots - count + 1))
        return np.arange(start, start + count, dtype=np.int64)
    return rng.permutation(slots)[:count].astype(np.int64)


def _filled(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Random bytes viewed as dtype (NaN patterns included: outputs are compared as bytes)."""
    size = np.dtype(dtype).itemsize
    raw = rng.integers(0, 256, size=(*shape[:-1], shape[-1] * size), dtype=np.uint8)
    return raw.view(dtype)


@dataclass
class Result:
    operator: str
    direction: str
    ok: bool
    detail: str


def run_case(op_name: str, direction: str, rng: np.random.Generator, place: Placement) -> Result:
    """Build one random case, run the operator and the reference, compare every output byte."""
    from xputune import kernels

    g = random_geometry(rng)
    op = getattr(kernels, op_name)
    item = g.item_size
    pf = op_name in FIXED_DIRECTION
    count = g.page_size * int(rng.integers(1, g.slots // g.page_size + 1)) if pf else int(
        rng.integers(1, g.slots + 1)
    )  # fmt: skip
    mha = op_name in ("transfer_kv_per_layer", "transfer_kv_all_layer") or (
        pf and rng.random() < 0.5
    )
    members = 2 if mha else 1
    src_on_dev, dst_on_dev = direction[0] == "d", direction[-1] == "d"
    src_put = place.device if src_on_dev else place.host
    dst_put = place.device if dst_on_dev else place.host
    layer_shape = (g.slots, 1, g.row_elems)
    pool_shape = (g.slots // g.page_size, g.layers, g.page_size, 1, g.row_elems)
    kw = place.kwargs(direction)

    if op_name.startswith("transfer_kv_per_layer") and not pf:
        srcs = [_filled(rng, layer_shape, g.dtype) for _ in range(members)]
        dsts = [_filled(rng, layer_shape, g.dtype) for _ in range(members)]
        si, di = random_indices(rng, g.slots, count), random_indices(rng, g.slots, count)
        expect = [d.copy() for d in dsts]
        for s, e in zip(srcs, expect, strict=True):
            ref.per_layer(s, e, si, di, item)
        s_objs, d_objs = [src_put(a) for a in srcs], [dst_put(a) for a in dsts]
        if mha:
            op(s_objs[0], d_objs[0], s_objs[1], d_objs[1], place.indices(si), place.indices(di),
               item, **kw)  # fmt: skip
        else:
            op(s_objs[0], d_objs[0], place.indices(si), place.indices(di), item, **kw)
    elif not pf:
        srcs = [_filled(rng, layer_shape, g.dtype) for _ in range(members * g.layers)]
        dsts = [_filled(rng, layer_shape, g.dtype) for _ in range(members * g.layers)]
        si, di = random_indices(rng, g.slots, count), random_indices(rng, g.slots, count)
        expect = [d.copy() for d in dsts]
        ref.all_layer(srcs, expect, si, di, item)
        s_objs, d_objs = [src_put(a) for a in srcs], [dst_put(a) for a in dsts]
        as_table = rng.random() < 0.5

        def side(objs: list[Any], k: int) -> Any:
            part = objs[k * g.layers : (k + 1) * g.layers]
            if not as_table:
                return part
            return place.table(np.array([place.address(o) for o in part], dtype=np.int64))

        extra = {"src_slots": g.slots, "dst_slots": g.slots} if as_table else {}
        if mha:
            op(side(s_objs, 0), side(d_objs, 0), side(s_objs, 1), side(d_objs, 1),
               place.indices(si), place.indices(di), item, g.layers, **extra, **kw)  # fmt: skip
        else:
            op(side(s_objs, 0), side(d_objs, 0), place.indices(si), place.indices(di), item,
               g.layers, **extra, **kw)  # fmt: skip
    elif op_name == "transfer_kv_per_layer_direct_pf_lf":
        srcs = [_filled(rng, pool_shape, g.dtype) for _ in range(members)]
        m = int(rng.integers(1, g.layers + 1))
        layer_id = int(rng.integers(0, g.layers - m + 1))
        dsts = [_filled(rng, layer_shape, g.dtype) for _ in range(members * m)]
        si = random_indices(rng, g.slots, count, g.page_size, whole_pages=True)
        di = random_indices(rng, g.slots, count, g.page_size, whole_pages=True)
        expect = [d.copy() for d in dsts]
        ref.per_layer_direct_pf_lf(srcs, expect, si, di, layer_id, g.page_size)
        s_objs, d_objs = [src_put(a) for a in srcs], [dst_put(a) for a in dsts]
        op(s_objs, d_objs, place.indices(si), place.indices(di), layer_id, g.page_size, **kw)
    else:
        m = int(rng.integers(1, g.layers + 1))
        srcs = [_filled(rng, layer_shape, g.dtype) for _ in range(members * m)]
        dsts = [_filled(rng, pool_shape, g.dtype) for _ in range(members)]
        si = random_indices(rng, g.slots, count, g.page_size, whole_pages=True)
        di = random_indices(rng, g.slots, count, g.page_size, whole_pages=True)
        expect = [d.copy() for d in dsts]
        ref.all_layer_direct_lf_pf(srcs, expect, si, di, g.page_size)
        s_objs, d_objs = [src_put(a) for a in srcs], [dst_put(a) for a in dsts]
        op(s_objs, d_objs, place.indices(si), place.indices(di), g.page_size, **kw)

    place.sync()
    got = [place.to_numpy(o) for o in d_objs]
    bad = sum(int(not np.array_equal(a.view(np.uint8), b.view(np.uint8)))
              for a, b in zip(got, expect, strict=True))  # fmt: skip
    detail = (
        f"{count} tokens, {g.layers} layers, item {item} B, page {g.page_size}, "
        f"{'MHA' if mha else 'MLA'}, {np.dtype(g.dtype).name}"
    )
    if bad:
        detail = f"{bad} of {len(got)} outputs differ ({detail})"
    return Result(op_name, direction, not bad, detail)


def directions_for(op_name: str) -> tuple[str, ...]:
    fixed = FIXED_DIRECTION.get(op_name)
    return (fixed,) if fixed else ("h2d", "d2h")
