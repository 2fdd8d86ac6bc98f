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
    "transfer_kv_per_layer_mla_pf_lf",
    "transfer_kv_all_layer_mla_lf_pf",
    "transfer_kv_per_layer_pf_lf",
    "transfer_kv_all_layer_lf_pf",
    "transfer_kv_direct",
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
    """Distinct slots: one run, page-long runs shuffled, or scattered slots, as a paged
    allocator hands them out (whole_pages: shuffled whole pages only)."""
    if whole_pages:
        pages = rng.permutation(slots // page_size)[: count // page_size].astype(np.int64)
        return (pages[:, None] * page_size + np.arange(page_size, dtype=np.int64)).ravel()
    draw = rng.random()
    if draw < 0.3:
        start = int(rng.integers(0, slots - count + 1))
        return np.arange(start, start + count, dtype=np.int64)
    if draw < 0.55:  # page-long runs in any order, cut anywhere
        pages = rng.permutation(slots // page_size).astype(np.int64)
        return (pages[:, None] * page_size + np.arange(page_size, dtype=np.int64)).ravel()[:count]
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


@dataclass
class _Case:
    """One drawn case: geometry, where each side goes, the operator and its extra kwargs."""

    rng: np.random.Generator
    g: Geometry
    place: Placement
    op: Callable[..., Any]
    count: int
    mha: bool
    src_put: Callable[[np.ndarray], Any]
    dst_put: Callable[[np.ndarray], Any]
    kw: dict[str, Any]

    @property
    def members(self) -> int:
        return 2 if self.mha else 1

    @property
    def layer_shape(self) -> tuple[int, ...]:
        return (self.g.slots, 1, self.g.row_elems)

    def filled(self, shape: tuple[int, ...], n: int) -> list[np.ndarray]:
        return [_filled(self.rng, shape, self.g.dtype) for _ in range(n)]

    def indices(self, *, whole_pages: bool = False) -> tuple[np.ndarray, np.ndarray]:
        g = self.g
        return (
            random_indices(self.rng, g.slots, self.count, g.page_size, whole_pages),
            random_indices(self.rng, g.slots, self.count, g.page_size, whole_pages),
        )

    def sides(self, objs: list[Any], per: int, as_table: bool) -> list[Any]:
        """Each member's per-layer buffers: as a list, or as a raw address table."""
        parts = [objs[k * per : (k + 1) * per] for k in range(self.members)]
        if not as_table:
            return parts
        return [
            self.place.table(np.array([self.place.address(o) for o in p], dtype=np.int64))
            for p in parts
        ]


def _per_layer(c: _Case) -> tuple[list[Any], list[np.ndarray]]:
    srcs, dsts = c.filled(c.layer_shape, c.members), c.filled(c.layer_shape, c.members)
    si, di = c.indices()
    expect = [d.copy() for d in dsts]
    for s, e in zip(srcs, expect, strict=True):
        ref.per_layer(s, e, si, di, c.g.item_size)
    s_objs, d_objs = [c.src_put(a) for a in srcs], [c.dst_put(a) for a in dsts]
    idx = (c.place.indices(si), c.place.indices(di))
    if c.mha:
        c.op(s_objs[0], d_objs[0], s_objs[1], d_objs[1], *idx, c.g.item_size, **c.kw)
    else:
        c.op(s_objs[0], d_objs[0], *idx, c.g.item_size, **c.kw)
    return d_objs, expect


def _all_layer(c: _Case) -> tuple[list[Any], list[np.ndarray]]:
    g = c.g
    srcs = c.filled(c.layer_shape, c.members * g.layers)
    dsts = c.filled(c.layer_shape, c.members * g.layers)
    si, di = c.indices()
    expect = [d.copy() for d in dsts]
    ref.all_layer(srcs, expect, si, di, g.item_size)
    s_objs, d_objs = [c.src_put(a) for a in srcs], [c.dst_put(a) for a in dsts]
    as_table = c.rng.random() < 0.5
    s_sides, d_sides = c.sides(s_objs, g.layers, as_table), c.sides(d_objs, g.layers, as_table)
    extra = {"src_slots": g.slots, "dst_slots": g.slots} if as_table else {}
    idx = (c.place.indices(si), c.place.indices(di))
    if c.mha:
        c.op(s_sides[0], d_sides[0], s_sides[1], d_sides[1], *idx, g.item_size, g.layers,
             **extra, **c.kw)  # fmt: skip
    else:
        c.op(s_sides[0], d_sides[0], *idx, g.item_size, g.layers, **extra, **c.kw)
    return d_objs, expect


def _pf_load(c: _Case) -> tuple[list[Any], list[np.ndarray]]:
    """transfer_kv_per_layer[_mla]_pf_lf: one layer out of page_first pools (slots, L, 1, row)."""
    g = c.g
    srcs = c.filled((g.slots, g.layers, 1, g.row_elems), c.members)
    dsts = c.filled(c.layer_shape, c.members)
    si, di = c.indices()
    layer_id = int(c.rng.integers(0, g.layers))
    expect = [d.copy() for d in dsts]
    for s, e in zip(srcs, expect, strict=True):
        ref.per_layer_pf_lf(s, e, si, di, layer_id)
    s_objs, d_objs = [c.src_put(a) for a in srcs], [c.dst_put(a) for a in dsts]
    args = (c.place.indices(si), c.place.indices(di), layer_id, g.item_size, g.layers * g.item_size)
    if c.mha:
        c.op(s_objs[0], d_objs[0], s_objs[1], d_objs[1], *args, **c.kw)
    else:
        c.op(s_objs[0], d_objs[0], *args, **c.kw)
    return d_objs, expect


def _pf_store(c: _Case) -> tuple[list[Any], list[np.ndarray]]:
    """transfer_kv_all_layer[_mla]_lf_pf: m <= L per-layer buffers into page_first pools."""
    g = c.g
    m = int(c.rng.integers(1, g.layers + 1))
    srcs = c.filled(c.layer_shape, c.members * m)
    dsts = c.filled((g.slots, g.layers, 1, g.row_elems), c.members)
    si, di = c.indices()
    expect = [d.copy() for d in dsts]
    for k, e in enumerate(expect):
        ref.all_layer_lf_pf(srcs[k * m : (k + 1) * m], e, si, di)
    s_objs, d_objs = [c.src_put(a) for a in srcs], [c.dst_put(a) for a in dsts]
    as_table = c.rng.random() < 0.5
    s_sides = c.sides(s_objs, m, as_table)
    extra = {"src_slots": g.slots} if as_table else {}
    idx = (c.place.indices(si), c.place.indices(di))
    dims = (g.item_size, g.layers * g.item_size, m)
    if c.mha:
        c.op(s_sides[0], d_objs[0], s_sides[1], d_objs[1], *idx, *dims, **extra, **c.kw)
    else:
        c.op(s_sides[0], d_objs[0], *idx, *dims, **extra, **c.kw)
    return d_objs, expect


def _direct(c: _Case) -> tuple[list[Any], list[np.ndarray]]:
    """transfer_kv_direct: L (MLA) or 2L (K then V; V rows sometimes another size) pairs."""
    g = c.g
    shapes = [c.layer_shape] * g.layers
    if c.mha:
        v_elems = g.row_elems if c.rng.random() < 0.6 else int(c.rng.integers(1, 40))
        shapes += [(g.slots, 1, v_elems)] * g.layers
    srcs = [_filled(c.rng, shape, g.dtype) for shape in shapes]
    dsts = [_filled(c.rng, shape, g.dtype) for shape in shapes]
    si, di = c.indices()
    expect = [d.copy() for d in dsts]
    ref.direct(srcs, expect, si, di)
    s_objs, d_objs = [c.src_put(a) for a in srcs], [c.dst_put(a) for a in dsts]
    c.op(s_objs, d_objs, c.place.indices(si), c.place.indices(di), g.page_size, **c.kw)
    return d_objs, expect


def _pf_direct_load(c: _Case) -> tuple[list[Any], list[np.ndarray]]:
    g = c.g
    srcs = c.filled(_pool_shape(g), c.members)
    m = int(c.rng.integers(1, g.layers + 1))
    layer_id = int(c.rng.integers(0, g.layers - m + 1))
    dsts = c.filled(c.layer_shape, c.members * m)
    si, di = c.indices(whole_pages=True)
    expect = [d.copy() for d in dsts]
    ref.per_layer_direct_pf_lf(srcs, expect, si, di, layer_id, g.page_size)
    s_objs, d_objs = [c.src_put(a) for a in srcs], [c.dst_put(a) for a in dsts]
    c.op(s_objs, d_objs, c.place.indices(si), c.place.indices(di), layer_id, g.page_size, **c.kw)
    return d_objs, expect


def _pf_direct_store(c: _Case) -> tuple[list[Any], list[np.ndarray]]:
    g = c.g
    m = int(c.rng.integers(1, g.layers + 1))
    srcs = c.filled(c.layer_shape, c.members * m)
    dsts = c.filled(_pool_shape(g), c.members)
    si, di = c.indices(whole_pages=True)
    expect = [d.copy() for d in dsts]
    ref.all_layer_direct_lf_pf(srcs, expect, si, di, g.page_size)
    s_objs, d_objs = [c.src_put(a) for a in srcs], [c.dst_put(a) for a in dsts]
    c.op(s_objs, d_objs, c.place.indices(si), c.place.indices(di), g.page_size, **c.kw)
    return d_objs, expect


def _pool_shape(g: Geometry) -> tuple[int, ...]:
    return (g.slots // g.page_size, g.layers, g.page_size, 1, g.row_elems)


_BUILDERS: dict[str, Callable[[_Case], tuple[list[Any], list[np.ndarray]]]] = {
    "transfer_kv_per_layer_mla": _per_layer,
    "transfer_kv_per_layer": _per_layer,
    "transfer_kv_all_layer_mla": _all_layer,
    "transfer_kv_all_layer": _all_layer,
    "transfer_kv_per_layer_direct_pf_lf": _pf_direct_load,
    "transfer_kv_all_layer_direct_lf_pf": _pf_direct_store,
    "transfer_kv_per_layer_mla_pf_lf": _pf_load,
    "transfer_kv_all_layer_mla_lf_pf": _pf_store,
    "transfer_kv_per_layer_pf_lf": _pf_load,
    "transfer_kv_all_layer_lf_pf": _pf_store,
    "transfer_kv_direct": _direct,
}
# Operators with separate K and V arguments; the list-taking ones draw MLA or MHA.
_MHA = ("transfer_kv_per_layer", "transfer_kv_all_layer", "transfer_kv_per_layer_pf_lf",
        "transfer_kv_all_layer_lf_pf")  # fmt: skip
_EITHER = ("transfer_kv_direct", *FIXED_DIRECTION)


def run_case(op_name: str, direction: str, rng: np.random.Generator, place: Placement) -> Result:
    """Build one random case, run the operator and the reference, compare every output byte."""
    from xputune import kernels

    g = random_geometry(rng)
    pages = op_name in _EITHER  # whole pages of indices, as SGLang's direct backend needs
    count = g.page_size * int(rng.integers(1, g.slots // g.page_size + 1)) if pages else int(
        rng.integers(1, g.slots + 1)
    )  # fmt: skip
    mha = op_name in _MHA or (op_name in _EITHER and rng.random() < 0.5)
    src_on_dev, dst_on_dev = direction[0] == "d", direction[-1] == "d"
    case = _Case(
        rng, g, place, getattr(kernels, op_name), count, mha,
        place.device if src_on_dev else place.host, place.device if dst_on_dev else place.host,
        place.kwargs(direction),
    )  # fmt: skip
    d_objs, expect = _BUILDERS[op_name](case)

    place.sync()
    got = [place.to_numpy(o) for o in d_objs]
    bad = sum(int(not np.array_equal(a.view(np.uint8), b.view(np.uint8)))
              for a, b in zip(got, expect, strict=True))  # fmt: skip
    detail = (
        f"{count} tokens, {g.layers} layers, item {g.item_size} B, page {g.page_size}, "
        f"{'MHA' if mha else 'MLA'}, {np.dtype(g.dtype).name}"
    )
    if bad:
        detail = f"{bad} of {len(got)} outputs differ ({detail})"
    return Result(op_name, direction, not bad, detail)


def directions_for(op_name: str) -> tuple[str, ...]:
    fixed = FIXED_DIRECTION.get(op_name)
    return (fixed,) if fixed else ("h2d", "d2h")
