"""Copy bandwidth per host layout and direction, side by side with one plain copy of the bytes.

Each case moves `tokens` token slots of `layers` layers between per-layer "device" buffers and a
host pool in one layout, through the operators SGLang calls (per-layer loads, all-layer
write-back): layer_first transfer_kv_per_layer_mla / transfer_kv_all_layer_mla, page_first
transfer_kv_per_layer_mla_pf_lf / transfer_kv_all_layer_mla_lf_pf, page_first_direct
transfer_kv_per_layer_direct_pf_lf / transfer_kv_all_layer_direct_lf_pf. Its baseline is one
plain memcpy (host) or one host<->device copy (device) of the same total bytes, between the
case's own buffers when one layer is moved (else between two flat buffers), timed in the same
run, alternating with the case, so machine noise hits both; GB/s figures are best-of-repeats
(medians are kept too); the ratio is the median of the per-pair ratios (baseline time / case
time of back-to-back runs). The segment count is the planner's for the case.

A host pool of pool_layers layers is allocated untouched (a caller's `host_alloc`, e.g. a
huge-page buffer, or zeroed memory) and only what the case reads is written before timing, so
a 78-layer pool costs the memory of the layers moved, not of the whole pool.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from math import prod
from statistics import median
from typing import Any

import numpy as np

from xputune.kernels import ops
from xputune.kernels.backends import get as get_backend
from xputune.kernels.planner import (
    HOST_LAYOUTS,
    Endpoint,
    host_transfer_plan,
    plan,
    synthetic_indices,
)


@dataclass
class BenchRow:
    layout: str
    direction: str
    operator: str
    segments: int
    bytes: int
    seconds: float
    gbps: float
    baseline_gbps: float
    ratio: float
    median_gbps: float
    median_baseline_gbps: float
    ratio_min: float
    ratio_max: float


class _Host:
    """Both sides in host memory, moved by the host backend; baseline: one memcpy."""

    name = "host"

    def __init__(self, host_alloc: Callable[[int], Any] | None = None) -> None:
        self.backend = get_backend("host")
        self.host_alloc = host_alloc

    def host(self, shape: tuple[int, ...]) -> Any:
        return np.ones(shape, dtype=np.uint8)  # touched: no page faults inside the timing

    device = host

    def pool(self, shape: tuple[int, ...]) -> Any:
        """Untouched memory for a host pool: the caller's allocator, else zeroed pages."""
        if self.host_alloc is None:
            return np.zeros(shape, dtype=np.uint8)
        return np.asarray(self.host_alloc(prod(shape)), dtype=np.uint8).reshape(shape)

    def address(self, buf: Any) -> int:
        return int(buf.__array_interface__["data"][0])

    def sync(self) -> None:
        pass

    def flat(self, buf: Any, nbytes: int) -> Any:
        return buf.reshape(-1)[:nbytes]

    def baseline(self, dst: Any, src: Any) -> None:
        self.backend.memcpy(self.address(dst), self.address(src), src.nbytes)


class _Torch:
    """Device side on the torch device (CUDA, or Kunlunxin posing as it), host side pinned."""

    def __init__(self) -> None:
        import torch

        from xputune.kernels.backends import device_backend_name

        self.torch = torch
        self.name = device_backend_name()
        self.backend = get_backend(self.name)

    def host(self, shape: tuple[int, ...]) -> Any:
        return self.torch.ones(shape, dtype=self.torch.uint8).pin_memory()

    def device(self, shape: tuple[int, ...]) -> Any:
        return self.torch.ones(shape, dtype=self.torch.uint8, device="cuda")

    pool = host

    def address(self, buf: Any) -> int:
        return int(buf.data_ptr())

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def flat(self, buf: Any, nbytes: int) -> Any:
        return buf.reshape(-1)[:nbytes]

    def baseline(self, dst: Any, src: Any) -> None:
        dst.copy_(src, non_blocking=True)


def _timed(fn: Callable[[], None], sync: Callable[[], None]) -> float:
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def _paired(
    call: Callable[[], None], base_call: Callable[[], None], repeats: int,
    sync: Callable[[], None], progress: Callable[[], None] | None = None,
) -> tuple[list[float], list[float]]:  # fmt: skip
    """(call times, baseline times) of `repeats` back-to-back pairs, after one untimed warm-up
    of each (it builds and loads the library and faults pages in)."""
    call()
    base_call()
    op_times: list[float] = []
    base_times: list[float] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection inside one timed call would land on one side only
    try:
        for i in range(repeats):
            # Alternate which goes first (ABBA), so "second in a pair" bias cancels out.
            if i % 2 == 0:
                op_times.append(_timed(call, sync))
                base_times.append(_timed(base_call, sync))
            else:
                base_times.append(_timed(base_call, sync))
                op_times.append(_timed(call, sync))
            if progress:
                progress()
    finally:
        if gc_was_enabled:
            gc.enable()
    return op_times, base_times


def _case(
    mem: Any, layout: str, direction: str, tokens: int, layers: int, pool_layers: int, item: int,
    page_size: int, pattern: str,
) -> tuple[str, int, Callable[[], None]]:  # fmt: skip
    """(operator label, segments per run, the call) for one layout and direction.

    Labels name the transfer_kv_* operator (per-layer ones are called once per layer moved).

    The host pool holds pool_layers layers (as a real pool holds all of them, which is what
    makes page_first strided); the first `layers` of them are moved.
    """
    slots = -(-tokens // page_size) * page_size
    host_idx = synthetic_indices(tokens, pattern, page_size, seed=1)
    dev_idx = np.arange(tokens, dtype=np.int64)
    dev = [mem.device((slots, item)) for _ in range(layers)]
    shapes = {
        "layer_first": (pool_layers, slots, item),
        "page_first": (slots, pool_layers, item),
        "page_first_direct": (slots // page_size, pool_layers, page_size, item),
    }
    pool = mem.pool(shapes[layout])
    h2d = direction == "h2d"
    if h2d:  # what the case reads, written now (untouched pages would all read one zero page)
        (pool[:layers] if layout == "layer_first" else pool[:, :layers])[...] = 1
        if layers == 1:  # the baseline's source, see call.regions
            mem.flat(pool, tokens * item)[...] = 1
    host_ep = Endpoint(layout, slots=slots, layers=pool_layers, page_size=page_size)
    dev_ep = Endpoint("layers", slots=slots)
    src_ep, dst_ep = (host_ep, dev_ep) if h2d else (dev_ep, host_ep)
    si, di = (host_idx, dev_idx) if h2d else (dev_idx, host_idx)
    segments = plan(si, di, src=src_ep, dst=dst_ep, item_size=item, num_layers=layers).count
    keep = (dev, pool)
    raw = "d2h" if mem.name != "host" else None  # a raw address table's memory kind
    dev_tbl = np.array([mem.address(d) for d in dev], dtype=np.int64)

    if layout == "layer_first" and h2d:
        label = "per_layer_mla"

        def call() -> None:
            for layer in range(layers):
                ops.transfer_kv_per_layer_mla(pool[layer], dev[layer], host_idx, dev_idx, item)
    elif layout == "layer_first":
        label = "all_layer_mla"
        dst_tbl = np.array([mem.address(pool[i]) for i in range(layers)], dtype=np.int64)

        def call() -> None:
            ops.transfer_kv_all_layer_mla(dev_tbl, dst_tbl, dev_idx, host_idx, item, layers,
                                          direction=raw)  # fmt: skip
    elif layout == "page_first" and h2d:
        label = "per_layer_mla_pf_lf"

        def call() -> None:
            for layer in range(layers):
                ops.transfer_kv_per_layer_mla_pf_lf(pool, dev[layer], host_idx, dev_idx, layer,
                                                    item, pool_layers * item)  # fmt: skip
    elif layout == "page_first":
        label = "all_layer_mla_lf_pf"

        def call() -> None:
            ops.transfer_kv_all_layer_mla_lf_pf(
                dev_tbl, pool, dev_idx, host_idx, item, pool_layers * item, layers, direction=raw
            )
    elif h2d:
        label = "per_layer_direct_pf_lf"

        def call() -> None:
            for layer in range(layers):
                ops.transfer_kv_per_layer_direct_pf_lf(
                    [pool], [dev[layer]], host_idx, dev_idx, layer, page_size
                )
    else:
        label = "all_layer_direct_lf_pf"

        def call() -> None:
            ops.transfer_kv_all_layer_direct_lf_pf(dev, [pool], dev_idx, host_idx, page_size)

    call.keep = keep  # type: ignore[attr-defined]
    # The baseline's buffers: with one layer moved, the op's own source and destination memory
    # (same pages, same huge-page backing, same caches), so the ratio isolates the operator.
    call.regions = (
        (  # type: ignore[attr-defined]
            (pool, dev[0]) if h2d else (dev[0], pool)
        )
        if layers == 1
        else None
    )
    return label, segments, call


def check_args(layers: int, pool_layers: int) -> None:
    from xputune.kernels.planner import KernelArgumentError

    if pool_layers < layers:
        raise KernelArgumentError(f"the pool holds {pool_layers} layers; cannot move {layers}")


def run(
    *,
    tokens: int = 32768,
    layers: int = 1,
    pool_layers: int = 4,
    item_size: int = 1152,
    page_size: int = 64,
    pattern: str = "contiguous",
    repeats: int = 7,
    layouts: tuple[str, ...] = HOST_LAYOUTS,
    directions: tuple[str, ...] = ("h2d", "d2h"),
    device: str = "host",
    threads: int = 0,
    progress: Callable[[], None] | None = None,
    host_alloc: Callable[[int], Any] | None = None,
) -> tuple[str, list[BenchRow]]:
    """(backend name, rows). device: "host" or "torch" (the torch device, CUDA or Kunlunxin).

    threads: host backend threads (0 = its automatic choice, 1 = the caller's thread only).
    host_alloc: bytes -> a writable uint8 array for the host pools (host device only), e.g.
    xputune's huge-page host buffer; default zeroed numpy memory.
    """
    check_args(layers, pool_layers)
    mem: Any = _Host(host_alloc) if device == "host" else _Torch()
    if mem.name == "host":
        mem.backend.threads = threads
    total = tokens * layers * item_size
    rows: list[BenchRow] = []
    for layout in layouts:
        for direction in directions:
            label, segments, call = _case(mem, layout, direction, tokens, layers, pool_layers,
                                          item_size, page_size, pattern)  # fmt: skip
            regions = call.regions  # type: ignore[attr-defined]
            if regions is None:  # host side from the pools' allocator (same page size), written
                flat_host, flat_dev = mem.pool((total,)), mem.device((total,))
                flat_host[...] = 1
                regions = (flat_host, flat_dev) if direction == "h2d" else (flat_dev, flat_host)
            base_src, base_dst = (mem.flat(r, total) for r in regions)

            def base_call() -> None:
                mem.baseline(base_dst, base_src)  # noqa: B023

            op_times, base_times = _paired(call, base_call, repeats, mem.sync, progress)
            # GB/s: best of the repeats (the run least disturbed on a shared machine). Ratio: the
            # median over back-to-back pairs, so slow drifts in machine load cancel out; min and
            # max show how far one pair can stray on this machine.
            t_op, t_base = min(op_times), min(base_times)
            gbps, base = total / t_op / 1e9, total / t_base / 1e9
            ratios = [b / o for o, b in zip(op_times, base_times, strict=True)]
            rows.append(BenchRow(
                layout, direction, label, segments, total, t_op, round(gbps, 3), round(base, 3),
                round(median(ratios), 3), round(total / median(op_times) / 1e9, 3),
                round(total / median(base_times) / 1e9, 3), round(min(ratios), 3),
                round(max(ratios), 3),
            ))  # fmt: skip
    return mem.name, rows


@dataclass
class StridedRow:
    """A plain C loop of memcpy over a page_first pool's items of one layer (what the strided
    pattern costs with the obvious code) against one memcpy of the same bytes."""

    # "gather" (pool to a contiguous buffer, a load), "scatter" (a backup), or "read": the
    # items only read (prefetched ahead), against a contiguous read of as many bytes
    direction: str
    items: int
    item_size: int
    stride: int  # bytes from one item of the pool to the next
    gbps: float  # best run
    baseline_gbps: float
    ratio_min: float  # memcpy time / loop time of back-to-back pairs
    ratio: float  # median
    ratio_max: float


def strided(
    *, tokens: int = 32768, pool_layers: int = 78, item_size: int = 1152, repeats: int = 7,
    host_alloc: Callable[[int], Any] | None = None,
) -> list[StridedRow]:  # fmt: skip
    """The page_first pattern's own price: `tokens` items of one layer out of a pool of
    `pool_layers` layers (one item every pool_layers * item_size bytes), gathered into and
    scattered from a contiguous buffer by a plain C loop of memcpy (xt_host_strided_memcpy),
    each paired with one memcpy of the same bytes between the same two buffers (the pool's
    first bytes), as run() pairs the operators; and the items only read, against one
    contiguous read of as many bytes (the pool's first ones). Why: page_first's ratio in run()
    says how far the operator is from memcpy; this says how far the layout itself puts the
    obvious code, and how fast one core can read the pattern at all."""
    mem = _Host(host_alloc)
    stride = pool_layers * item_size
    total = tokens * item_size
    pool = mem.pool((tokens, stride))
    pool[:, :item_size] = 1  # what the gather reads (untouched pages would read one zero page)
    flat = mem.flat(pool, total)
    flat[...] = 1
    dev = mem.host((tokens, item_size))
    backend = mem.backend
    p, d = mem.address(pool), mem.address(dev)
    rows = []
    for direction in ("gather", "scatter", "read"):
        if direction == "read":

            def call() -> None:
                backend.strided_read(p, item_size, tokens, stride)

            def base_call() -> None:
                backend.strided_read(p, total, 1, total)
        elif direction == "gather":

            def call() -> None:
                backend.strided_memcpy(d, p, item_size, tokens, item_size, stride)

            def base_call() -> None:
                mem.baseline(dev, flat)
        else:

            def call() -> None:
                backend.strided_memcpy(p, d, item_size, tokens, stride, item_size)

            def base_call() -> None:
                mem.baseline(flat, dev)

        op_times, base_times = _paired(call, base_call, repeats, mem.sync)
        ratios = [b / o for o, b in zip(op_times, base_times, strict=True)]
        rows.append(StridedRow(
            direction, tokens, item_size, stride, round(total / min(op_times) / 1e9, 3),
            round(total / min(base_times) / 1e9, 3), round(min(ratios), 3),
            round(median(ratios), 3), round(max(ratios), 3),
        ))  # fmt: skip
    return rows


@dataclass
class SegmentRow:
    """What the planner predicts one SGLang transfer costs in copy segments (submissions)."""

    pattern: str
    layout: str
    h2d_per_layer: int  # one load_to_device_per_layer call
    h2d_all_layers: int  # a whole prefix loaded, every layer's call
    d2h_all_layers: int  # one backup_from_device_all_layer call


def segment_counts(
    *, tokens: int, layers: int, page_size: int, item_size: int,
    patterns: tuple[str, ...] = ("contiguous", "pages"),
) -> list[SegmentRow]:  # fmt: skip
    """Segments per host layout for `tokens` tokens of a `layers`-layer model, per pattern of
    host slots (contiguous, or whole pages in any order: a paged allocator's scattered pages)."""
    rows = []
    for pattern in patterns:
        for layout in HOST_LAYOUTS:
            counts = [
                host_transfer_plan(
                    layout, tokens, page_size=page_size, layers=layers, item_size=item_size,
                    pattern=pattern, direction=direction, seed=1, moved_layers=moved,
                ).count
                for direction, moved in (("h2d", 1), ("h2d", layers), ("d2h", layers))
            ]  # fmt: skip
            rows.append(SegmentRow(pattern, layout, *counts))
    return rows


def rows_as_dicts(
    rows: list[BenchRow] | list[SegmentRow] | list[StridedRow],
) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]
