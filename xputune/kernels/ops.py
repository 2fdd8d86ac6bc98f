"""SGLang's kvcacheio copy operators, vendor-neutral: same names, arguments and semantics.

For every i and processed layer l: dst[l][dst_indices[i]] = src[l][src_indices[i]] (K, and V
unless MLA), item_size bytes per token per layer. Buffers are numpy arrays (host) or torch
tensors (host, CUDA, or Kunlunxin's CUDA-posing device); the SGLang plugin can drop these in for
sgl_kernel.kvcacheio where that package is CUDA-only.

Host layouts (--hicache-mem-layout): layer_first pools are per-layer buffers to these operators
(transfer_kv_per_layer*, transfer_kv_all_layer*, and transfer_kv_direct for --hicache-io-backend
direct); page_first pools (slots, L, ...) are one buffer whose slots are layout_dim bytes apart
(transfer_kv_per_layer*_pf_lf loads one layer, transfer_kv_all_layer*_lf_pf writes all back);
page_first_direct pools (pages, L, page_size, ...) move page by page (*_direct_pf_lf / _lf_pf).

Each call validates, plans segments (planner.py), and hands the table to a backend: the
machine's device backend, or, when both sides are host memory, the host backend, which cuts the
same segments itself in C (host_copy.c) and copies them as it finds them. Keyword-only extras that
SGLang does not have:
  backend  "host" | "cuda" | "xpu" or a backend object (default: chosen from the buffers)
  mode     "direct" (segment table) or "kernel" (CUDA item kernel, pinned host memory). Default:
           direct, except the page_first operators on CUDA, which SGLang runs as item kernels
           too: their segments are one token of one layer each, a DMA submission apiece
  direction "h2d" | "d2h" | "d2d" | "h2h"; needed by the XPU backend for raw address tables
  stream   a raw stream handle (default: torch's current stream on a device, else our own)
  sync     wait before returning (default: yes on the host or without a caller's stream)
  src_slots / dst_slots  bound raw address tables so their indices can be range-checked
block_quota and num_warps_per_block size the kernel grid as upstream does; direct mode ignores
them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from math import prod
from typing import TYPE_CHECKING, Any

from xputune.kernels import backends as _backends
from xputune.kernels.buffers import (
    Buffer,
    LayerTable,
    check_item_size,
    describe,
    layer_table,
    tensor_on_device,
)
from xputune.kernels.planner import (
    Endpoint,
    KernelArgumentError,
    as_index_array,
    check_indices,
    check_layers,
    check_request,
    plan,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "transfer_kv_all_layer",
    "transfer_kv_all_layer_direct_lf_pf",
    "transfer_kv_all_layer_lf_pf",
    "transfer_kv_all_layer_mla",
    "transfer_kv_all_layer_mla_lf_pf",
    "transfer_kv_direct",
    "transfer_kv_per_layer",
    "transfer_kv_per_layer_direct_pf_lf",
    "transfer_kv_per_layer_mla",
    "transfer_kv_per_layer_mla_pf_lf",
    "transfer_kv_per_layer_pf_lf",
]

_DEFAULT_WARPS = 32
_MODES = ("direct", "kernel")


@dataclass
class _Side:
    """One side of a transfer: its geometry, one base list per K/V member, where it lives."""

    endpoint: Endpoint
    bases: list[np.ndarray]
    on_device: bool | None
    keep: list[object] = field(default_factory=list)


def _bases(*addresses: int) -> np.ndarray:
    import numpy as np

    return np.array(addresses, dtype=np.uint64)


def _layer_side(bufs: Sequence[Buffer], item_size: int, names: Sequence[str]) -> _Side:
    """K (and V) single-layer buffers, as SGLang's per-layer operators take them."""
    slots = min(b.slots(item_size, n) for b, n in zip(bufs, names, strict=True))
    kinds = {b.on_device for b in bufs}
    if len(kinds) > 1:
        raise KernelArgumentError(f"{' and '.join(names)} are not on the same device")
    return _Side(
        Endpoint("layers", slots=slots),
        [_bases(b.address) for b in bufs],
        kinds.pop(),
        [b.obj for b in bufs],
    )


def _table_side(tables: Sequence[LayerTable]) -> _Side:
    known = [t.slots for t in tables if t.slots is not None]
    kinds = {t.on_device for t in tables}
    return _Side(
        Endpoint("layers", slots=min(known) if known else None),
        [t.bases for t in tables],
        kinds.pop() if len(kinds) == 1 else None,
        [t.keep for t in tables],
    )


def _torch_stream() -> int | None:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return int(torch.cuda.current_stream().cuda_stream)


def _direction(src: _Side, dst: _Side, given: str | None) -> str | None:
    if given is not None:
        if given not in _backends.DIRECTIONS:
            raise KernelArgumentError(
                f"direction must be one of {', '.join(_backends.DIRECTIONS)}, got {given!r}"
            )
        return given
    if src.on_device is None or dst.on_device is None:
        return None
    return ("d" if src.on_device else "h") + "2" + ("d" if dst.on_device else "h")


def _run(
    src: _Side,
    dst: _Side,
    src_indices: object,
    dst_indices: object,
    *,
    item_size: int,
    num_layers: int,
    block_quota: int,
    num_warps_per_block: int,
    opts: dict[str, Any],
    item_kernel: bool = False,
) -> None:
    """Validate, pick the backend and mode, plan and copy. item_kernel: SGLang runs this
    operator as an item kernel (page_first), so CUDA defaults to kernel mode for it."""
    unknown = set(opts) - {"backend", "mode", "direction", "stream", "sync"}
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    si, di = check_request(src_indices, dst_indices, item_size, num_layers)
    direction = _direction(src, dst, opts.get("direction"))
    device_seen = (
        bool(src.on_device)
        or bool(dst.on_device)
        or tensor_on_device(src_indices)
        or tensor_on_device(dst_indices)
        or (direction not in (None, "h2h"))
    )
    backend = opts.get("backend")
    if backend is None:
        backend = _backends.device_backend_name() if device_seen else "host"
    if isinstance(backend, str):
        backend = _backends.get(backend)
    if backend.name == "host" and device_seen:
        raise KernelArgumentError("the host backend cannot reach device memory")
    if backend.name == "host" and direction is None:
        direction = "h2h"
    stream = opts.get("stream")
    if stream is None and backend.name != "host":
        stream = _torch_stream()
    sync = opts.get("sync")
    if sync is None:
        sync = backend.name == "host" or stream is None
    mode = opts.get("mode")
    if mode is None:
        mode = "kernel" if item_kernel and backend.name == "cuda" else "direct"
    if mode not in _MODES:
        raise KernelArgumentError(f"mode must be direct or kernel, got {mode!r}")
    if si.shape[0] == 0:
        return
    if mode == "direct" and backend.name == "host":
        # Planned and copied in one C call: same segments as plan(), no numpy temporaries.
        if src.endpoint.layout == dst.endpoint.layout == "layers":
            import numpy as np

            # The commonest case (every per-layer operator), with the least set-up.
            backend.copy_items(
                np.concatenate(src.bases), np.concatenate(dst.bases), si, di,
                item_size=item_size, src_slots=src.endpoint.slots, dst_slots=dst.endpoint.slots,
            )  # fmt: skip
        else:
            backend.copy_layout(
                src.endpoint, dst.endpoint, src.bases, dst.bases, si, di, item_size=item_size,
                num_layers=num_layers,
            )  # fmt: skip
        return
    if mode == "kernel":
        if backend.name != "cuda":
            raise KernelArgumentError(f"kernel mode needs the CUDA backend, not {backend.name}")
        # The planner's checks without its table: a page_first backup would otherwise build
        # a segment per token per layer (2.5M for 32K tokens x 78 layers) only to drop it.
        check_layers(src.endpoint, num_layers, "source")
        check_layers(dst.endpoint, num_layers, "destination")
        check_indices(si, src.endpoint, "src_indices")
        check_indices(di, dst.endpoint, "dst_indices")
        for sb, db in zip(src.bases, dst.bases, strict=True):
            backend.copy_items(
                src.endpoint, dst.endpoint, sb, db, si, di, item_size=item_size,
                num_layers=num_layers, block_quota=block_quota,
                num_warps_per_block=num_warps_per_block, stream=stream, sync=sync,
            )  # fmt: skip
        return
    import numpy as np

    segs = plan(si, di, src=src.endpoint, dst=dst.endpoint, item_size=item_size,
                num_layers=num_layers)  # fmt: skip
    parts = [segs.addresses(sb, db) for sb, db in zip(src.bases, dst.bases, strict=True)]
    if len(parts) == 1:
        s_addr, d_addr, nbytes = parts[0]
    else:
        s_addr, d_addr, nbytes = (np.concatenate(col) for col in zip(*parts, strict=True))
    backend.copy(s_addr, d_addr, nbytes, direction=direction, stream=stream, sync=sync)


def transfer_kv_per_layer_mla(
    src: Any,
    dst: Any,
    src_indices: Any,
    dst_indices: Any,
    item_size: int,
    block_quota: int = 2,
    num_warps_per_block: int = _DEFAULT_WARPS,
    **opts: Any,
) -> None:
    """One layer of MLA KV: dst[dst_indices[i]] = src[src_indices[i]], item_size bytes each."""
    s, d = describe(src, "src"), describe(dst, "dst", writable=True)
    _run(
        _layer_side([s], item_size, ["src"]), _layer_side([d], item_size, ["dst"]),
        src_indices, dst_indices, item_size=item_size, num_layers=1, block_quota=block_quota,
        num_warps_per_block=num_warps_per_block, opts=opts,
    )  # fmt: skip


def transfer_kv_per_layer(
    src_k: Any,
    dst_k: Any,
    src_v: Any,
    dst_v: Any,
    src_indices: Any,
    dst_indices: Any,
    item_size: int,
    block_quota: int = 2,
    num_warps_per_block: int = _DEFAULT_WARPS,
    **opts: Any,
) -> None:
    """One layer of MHA KV: the K and V buffers each copied as transfer_kv_per_layer_mla."""
    sk, sv = describe(src_k, "src_k"), describe(src_v, "src_v")
    dk, dv = describe(dst_k, "dst_k", writable=True), describe(dst_v, "dst_v", writable=True)
    _run(
        _layer_side([sk, sv], item_size, ["src_k", "src_v"]),
        _layer_side([dk, dv], item_size, ["dst_k", "dst_v"]),
        src_indices, dst_indices, item_size=item_size, num_layers=1, block_quota=block_quota,
        num_warps_per_block=num_warps_per_block, opts=opts,
    )  # fmt: skip


def _pop_slots(opts: dict[str, Any]) -> tuple[int | None, int | None]:
    return opts.pop("src_slots", None), opts.pop("dst_slots", None)


def transfer_kv_all_layer_mla(
    src_layers: Any,
    dst_layers: Any,
    src_indices: Any,
    dst_indices: Any,
    item_size: int,
    num_layers: int,
    block_quota: int = 2,
    num_warps_per_block: int = _DEFAULT_WARPS,
    **opts: Any,
) -> None:
    """Every layer of MLA KV. *_layers: int64/uint64 tables of per-layer base addresses (as
    SGLang passes them) or lists of per-layer buffers (which also bound-check the indices)."""
    s_slots, d_slots = _pop_slots(opts)
    _check_num_layers(num_layers)
    src = _table_side([layer_table(src_layers, num_layers, item_size, "src_layers", s_slots)])
    dst = _table_side([layer_table(dst_layers, num_layers, item_size, "dst_layers", d_slots)])
    _run(
        src, dst, src_indices, dst_indices, item_size=item_size, num_layers=num_layers,
        block_quota=block_quota, num_warps_per_block=num_warps_per_block, opts=opts,
    )  # fmt: skip


def transfer_kv_all_layer(
    src_k_layers: Any,
    dst_k_layers: Any,
    src_v_layers: Any,
    dst_v_layers: Any,
    src_indices: Any,
    dst_indices: Any,
    item_size: int,
    num_layers: int,
    block_quota: int = 2,
    num_warps_per_block: int = _DEFAULT_WARPS,
    **opts: Any,
) -> None:
    """Every layer of MHA KV: K and V tables each copied as transfer_kv_all_layer_mla."""
    s_slots, d_slots = _pop_slots(opts)
    _check_num_layers(num_layers)
    src = _table_side([
        layer_table(src_k_layers, num_layers, item_size, "src_k_layers", s_slots),
        layer_table(src_v_layers, num_layers, item_size, "src_v_layers", s_slots),
    ])  # fmt: skip
    dst = _table_side([
        layer_table(dst_k_layers, num_layers, item_size, "dst_k_layers", d_slots),
        layer_table(dst_v_layers, num_layers, item_size, "dst_v_layers", d_slots),
    ])  # fmt: skip
    _run(
        src, dst, src_indices, dst_indices, item_size=item_size, num_layers=num_layers,
        block_quota=block_quota, num_warps_per_block=num_warps_per_block, opts=opts,
    )  # fmt: skip


def _check_num_layers(num_layers: int) -> None:
    if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 1:
        raise KernelArgumentError(f"num_layers must be a positive int, got {num_layers!r}")


def _pf_direct_buffers(objs: Any, page_size: int, name: str) -> tuple[list[Buffer], int, int]:
    """page_first_direct host buffers (page_num, L, page_size, ...): (buffers, layers, item)."""
    if not isinstance(objs, Sequence) or len(objs) not in (1, 2):
        raise KernelArgumentError(f"{name} must be a list of 1 (MLA) or 2 (K, V) buffers")
    bufs = [describe(o, f"{name}[{i}]", writable=name.startswith("dst")) for i, o in
            enumerate(objs)]  # fmt: skip
    shape = bufs[0].shape
    if any(b.shape != shape or b.element_size != bufs[0].element_size for b in bufs):
        raise KernelArgumentError(f"{name} K and V buffers differ in shape or dtype")
    if len(shape) < 3 or shape[2] != page_size:
        raise KernelArgumentError(
            f"{name}[0] must be shaped (page_num, layers, page_size={page_size}, ...), got {shape}"
        )
    if len({b.on_device for b in bufs}) > 1:
        raise KernelArgumentError(f"{name} mixes host and device buffers")
    return bufs, shape[1], prod(shape[3:]) * bufs[0].element_size


def _consecutive_within_pages(idx: np.ndarray, page_size: int) -> bool:
    """idx steps by one inside every page_size-long page: one flat difference with the steps
    across page boundaries overwritten, half the cost of np.diff over (pages, page_size) rows.
    A function of its own so the 256 KB difference is freed before the other side's is made:
    two alive at once made glibc hand the heap's top back and fault it in again on every call
    (both sides of a 32K-token layer: np.diff 54 us, this 27 us, both differences alive at
    once 172 us, a tenth of the layer's copy)."""
    steps = idx[1:] - idx[:-1]
    steps[page_size - 1 :: page_size] = 1
    return bool((steps == 1).all())


def _check_pages(si: np.ndarray, di: np.ndarray, page_size: int, aligned: np.ndarray) -> None:
    """Direct page copies move whole pages: runs of page_size slots, page-aligned on one side."""
    if si.shape[0] != di.shape[0]:
        raise KernelArgumentError(
            f"src_indices and dst_indices differ in length ({si.shape[0]} vs {di.shape[0]})"
        )
    if si.shape[0] % page_size:
        raise KernelArgumentError(
            f"{si.shape[0]} indices are not a whole number of {page_size}-token pages"
        )
    for idx, name in ((si, "src_indices"), (di, "dst_indices")):
        if page_size > 1 and not _consecutive_within_pages(idx, page_size):
            raise KernelArgumentError(f"{name} are not consecutive within each page")
    if (aligned[::page_size] % page_size).any():
        raise KernelArgumentError("page_first_direct page starts must be multiples of page_size")


def transfer_kv_per_layer_direct_pf_lf(
    src_ptrs: Any,
    dst_ptrs: Any,
    src_indices: Any,
    dst_indices: Any,
    layer_id: int,
    page_size: int,
    **opts: Any,
) -> None:
    """Load from a page_first_direct host pool into per-layer buffers, one copy per page.

    src_ptrs: [kv] (MLA) or [k, v], each (page_num, L, page_size, ...); dst_ptrs: the per-layer
    buffers for layers layer_id.. (MLA: m buffers; MHA: m K buffers then m V buffers).
    """
    _check_page_size(page_size)
    si, di = as_index_array(src_indices, "src_indices"), as_index_array(dst_indices, "dst_indices")
    src_bufs, layers, item = _pf_direct_buffers(src_ptrs, page_size, "src_ptrs")
    dst_list = _buffer_list(dst_ptrs, "dst_ptrs", len(src_bufs))
    m = len(dst_list) // len(src_bufs)
    if not isinstance(layer_id, int) or layer_id < 0 or layer_id + m > layers:
        raise KernelArgumentError(f"layer_id {layer_id} (+{m}) out of range for {layers} layers")
    _check_pages(si, di, page_size, si)
    dst_bufs = [describe(o, f"dst_ptrs[{i}]", writable=True) for i, o in enumerate(dst_list)]
    dst_side = _per_layer_side(dst_bufs, item, len(src_bufs), "dst_ptrs")
    src_side = _Side(
        Endpoint("page_first_direct", slots=src_bufs[0].shape[0] * page_size, layers=layers,
                 first_layer=layer_id, page_size=page_size),
        [_bases(b.address) for b in src_bufs], src_bufs[0].on_device, [b.obj for b in src_bufs],
    )  # fmt: skip
    _run(src_side, dst_side, si, di, item_size=item, num_layers=m, block_quota=2,
         num_warps_per_block=_DEFAULT_WARPS, opts=opts)  # fmt: skip


def transfer_kv_all_layer_direct_lf_pf(
    src_ptrs: Any,
    dst_ptrs: Any,
    src_indices: Any,
    dst_indices: Any,
    page_size: int,
    **opts: Any,
) -> None:
    """Write back per-layer buffers into a page_first_direct host pool, one copy per page/layer.

    src_ptrs: L per-layer buffers (MLA) or L K buffers then L V buffers; dst_ptrs: [kv] or [k, v],
    each (page_num, L, page_size, ...).
    """
    _check_page_size(page_size)
    si, di = as_index_array(src_indices, "src_indices"), as_index_array(dst_indices, "dst_indices")
    dst_bufs, layers, item = _pf_direct_buffers(dst_ptrs, page_size, "dst_ptrs")
    src_list = _buffer_list(src_ptrs, "src_ptrs", len(dst_bufs))
    m = len(src_list) // len(dst_bufs)
    if m > layers:
        raise KernelArgumentError(f"{m} source layers do not fit a pool of {layers} layers")
    _check_pages(si, di, page_size, di)
    src_bufs = [describe(o, f"src_ptrs[{i}]") for i, o in enumerate(src_list)]
    src_side = _per_layer_side(src_bufs, item, len(dst_bufs), "src_ptrs")
    dst_side = _Side(
        Endpoint("page_first_direct", slots=dst_bufs[0].shape[0] * page_size, layers=layers,
                 page_size=page_size),
        [_bases(b.address) for b in dst_bufs], dst_bufs[0].on_device, [b.obj for b in dst_bufs],
    )  # fmt: skip
    _run(src_side, dst_side, si, di, item_size=item, num_layers=m, block_quota=2,
         num_warps_per_block=_DEFAULT_WARPS, opts=opts)  # fmt: skip


def _check_page_size(page_size: int) -> None:
    if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
        raise KernelArgumentError(f"page_size must be a positive int, got {page_size!r}")


def _buffer_list(objs: Any, name: str, members: int) -> list[Any]:
    if not isinstance(objs, Sequence) or not objs or len(objs) % members:
        kind = "K buffers then as many V buffers" if members == 2 else "per-layer buffers"
        raise KernelArgumentError(f"{name} must be a non-empty list of {kind}")
    return list(objs)


def _per_layer_side(bufs: list[Buffer], item: int, members: int, name: str) -> _Side:
    """Per-layer buffers split into K (and V) base tables."""
    import numpy as np

    m = len(bufs) // members
    slots = min(b.slots(item, f"{name}[{i}]") for i, b in enumerate(bufs))
    kinds = {b.on_device for b in bufs}
    if len(kinds) > 1:
        raise KernelArgumentError(f"{name} mixes host and device buffers")
    bases = [
        np.array([b.address for b in bufs[k * m : (k + 1) * m]], dtype=np.uint64)
        for k in range(members)
    ]
    return _Side(Endpoint("layers", slots=slots), bases, kinds.pop(), [b.obj for b in bufs])


# --- page_first host pools: (slots, L, ...), one slot every layout_dim bytes ---------------------


def _page_first_side(
    bufs: Sequence[Buffer], names: Sequence[str], item_size: int, layout_dim: int, dim_name: str,
    first_layer: int = 0,
) -> _Side:  # fmt: skip
    """K (and V) page_first buffers: slot s of layer l at s * layout_dim + l * item_size.

    layout_dim is what SGLang passes (bytes of one token over all layers); it must be a whole
    number of item_size-byte layers and the buffers' row, so a layer_first or page_first_direct
    pool handed in by mistake is refused instead of read at the wrong strides.
    """
    for b, name in zip(bufs, names, strict=True):
        check_item_size(b, item_size, name)
    if not isinstance(layout_dim, int) or isinstance(layout_dim, bool) or layout_dim <= 0:
        raise KernelArgumentError(f"{dim_name} must be a positive int, got {layout_dim!r}")
    if layout_dim % item_size:
        raise KernelArgumentError(
            f"{dim_name} {layout_dim} is not a whole number of item_size={item_size} layers"
        )
    for b, name in zip(bufs, names, strict=True):
        row = b.row_bytes() if len(b.shape) > 1 else layout_dim
        if b.nbytes % layout_dim or row != layout_dim:
            raise KernelArgumentError(
                f"{name} is not a page_first buffer of {dim_name}={layout_dim}-byte slots "
                f"(shape {b.shape}, {row} bytes per row)"
            )
    layers = layout_dim // item_size
    if (
        not isinstance(first_layer, int)
        or isinstance(first_layer, bool)
        or not (0 <= first_layer < layers)
    ):
        raise KernelArgumentError(
            f"layer_id {first_layer!r} out of range for a page_first buffer of {layers} layers"
        )
    if len({b.on_device for b in bufs}) > 1:
        raise KernelArgumentError(f"{' and '.join(names)} are not on the same device")
    return _Side(
        Endpoint("page_first", slots=min(b.nbytes // layout_dim for b in bufs), layers=layers,
                 first_layer=first_layer),
        [_bases(b.address) for b in bufs], bufs[0].on_device, [b.obj for b in bufs],
    )  # fmt: skip


def transfer_kv_per_layer_mla_pf_lf(
    src: Any,
    dst: Any,
    src_indices: Any,
    dst_indices: Any,
    layer_id: int,
    item_size: int,
    src_layout_dim: int,
    block_quota: int = 2,
    num_warps_per_block: int = _DEFAULT_WARPS,
    **opts: Any,
) -> None:
    """Load one layer of MLA KV from a page_first pool: dst[dst_indices[i]] =
    src[src_indices[i], layer_id], src slots src_layout_dim bytes apart."""
    s, d = describe(src, "src"), describe(dst, "dst", writable=True)
    src_side = _page_first_side([s], ["src"], item_size, src_layout_dim, "src_layout_dim",
                                layer_id)  # fmt: skip
    _run(
        src_side, _layer_side([d], item_size, ["dst"]), src_indices, dst_indices,
        item_size=item_size, num_layers=1, block_quota=block_quota,
        num_warps_per_block=num_warps_per_block, opts=opts, item_kernel=True,
    )  # fmt: skip


def transfer_kv_per_layer_pf_lf(
    src_k: Any,
    dst_k: Any,
    src_v: Any,
    dst_v: Any,
    src_indices: Any,
    dst_indices: Any,
    layer_id: int,
    item_size: int,
    src_layout_dim: int,
    block_quota: int = 2,
    num_warps_per_block: int = _DEFAULT_WARPS,
    **opts: Any,
) -> None:
    """One layer of MHA KV from page_first K and V pools, each as in the MLA form."""
    sk, sv = describe(src_k, "src_k"), describe(src_v, "src_v")
    dk, dv = describe(dst_k, "dst_k", writable=True), describe(dst_v, "dst_v", writable=True)
    src_side = _page_first_side([sk, sv], ["src_k", "src_v"], item_size, src_layout_dim,
                                "src_layout_dim", layer_id)  # fmt: skip
    _run(
        src_side, _layer_side([dk, dv], item_size, ["dst_k", "dst_v"]), src_indices,
        dst_indices, item_size=item_size, num_layers=1, block_quota=block_quota,
        num_warps_per_block=num_warps_per_block, opts=opts, item_kernel=True,
    )  # fmt: skip


def transfer_kv_all_layer_mla_lf_pf(
    src_layers: Any,
    dst: Any,
    src_indices: Any,
    dst_indices: Any,
    item_size: int,
    dst_layout_dim: int,
    num_layers: int,
    block_quota: int = 2,
    num_warps_per_block: int = _DEFAULT_WARPS,
    **opts: Any,
) -> None:
    """Write every layer of MLA KV back into a page_first pool: dst[dst_indices[i], l] =
    src_layers[l][src_indices[i]]. src_layers: an address table or a list of layer buffers."""
    s_slots = opts.pop("src_slots", None)
    _check_num_layers(num_layers)
    src = _table_side([layer_table(src_layers, num_layers, item_size, "src_layers", s_slots)])
    d = describe(dst, "dst", writable=True)
    _run(
        src, _page_first_side([d], ["dst"], item_size, dst_layout_dim, "dst_layout_dim"),
        src_indices, dst_indices, item_size=item_size, num_layers=num_layers,
        block_quota=block_quota, num_warps_per_block=num_warps_per_block, opts=opts,
        item_kernel=True,
    )  # fmt: skip


def transfer_kv_all_layer_lf_pf(
    src_k_layers: Any,
    dst_k: Any,
    src_v_layers: Any,
    dst_v: Any,
    src_indices: Any,
    dst_indices: Any,
    item_size: int,
    dst_layout_dim: int,
    num_layers: int,
    block_quota: int = 2,
    num_warps_per_block: int = _DEFAULT_WARPS,
    **opts: Any,
) -> None:
    """Every layer of MHA KV into page_first K and V pools, each as
    transfer_kv_all_layer_mla_lf_pf."""
    s_slots = opts.pop("src_slots", None)
    _check_num_layers(num_layers)
    src = _table_side([
        layer_table(src_k_layers, num_layers, item_size, "src_k_layers", s_slots),
        layer_table(src_v_layers, num_layers, item_size, "src_v_layers", s_slots),
    ])  # fmt: skip
    dk, dv = describe(dst_k, "dst_k", writable=True), describe(dst_v, "dst_v", writable=True)
    dst = _page_first_side([dk, dv], ["dst_k", "dst_v"], item_size, dst_layout_dim,
                           "dst_layout_dim")  # fmt: skip
    _run(
        src, dst, src_indices, dst_indices, item_size=item_size, num_layers=num_layers,
        block_quota=block_quota, num_warps_per_block=num_warps_per_block, opts=opts,
        item_kernel=True,
    )  # fmt: skip


# --- transfer_kv_direct: --hicache-io-backend direct with a layer_first pool ----------------------


def transfer_kv_direct(
    src_layers: Any,
    dst_layers: Any,
    src_indices: Any,
    dst_indices: Any,
    page_size: int,
    **opts: Any,
) -> None:
    """dst_layers[j][dst_indices[i]] = src_layers[j][src_indices[i]] for every buffer pair j, a
    row (one token slot: the buffer's first axis) at a time, one copy per maximal run per pair.

    As in sgl_kernel, the pairs are whatever the caller lists (MHA passes K buffers, then V
    buffers), each pair moves rows of its own size, and the index count must be a whole number
    of pages, while runs may cross page boundaries. Pairs of one row size share one plan.
    """
    _check_page_size(page_size)
    si, di = as_index_array(src_indices, "src_indices"), as_index_array(dst_indices, "dst_indices")
    for objs, name in ((src_layers, "src_layers"), (dst_layers, "dst_layers")):
        if not isinstance(objs, Sequence) or isinstance(objs, (str, bytes)) or not objs:
            raise KernelArgumentError(f"{name} must be a non-empty list of per-layer buffers")
    if len(src_layers) != len(dst_layers):
        raise KernelArgumentError(
            f"src_layers and dst_layers differ in length ({len(src_layers)} vs {len(dst_layers)})"
        )
    check_request(si, di, 1, 1)
    if si.shape[0] % page_size:
        raise KernelArgumentError(
            f"{si.shape[0]} indices are not a whole number of {page_size}-token pages"
        )
    src_bufs = [describe(o, f"src_layers[{j}]") for j, o in enumerate(src_layers)]
    dst_bufs = [describe(o, f"dst_layers[{j}]", writable=True) for j, o in enumerate(dst_layers)]
    groups: dict[int, list[int]] = {}
    for j, (s, d) in enumerate(zip(src_bufs, dst_bufs, strict=True)):
        row = _first_axis_row(s)
        if row != _first_axis_row(d):
            raise KernelArgumentError(
                f"src_layers[{j}] rows are {row} bytes, dst_layers[{j}] rows {_first_axis_row(d)}"
            )
        groups.setdefault(row, []).append(j)
    # Every pair is checked before the first one moves (nothing half done on a bad pair).
    runs = [
        (
            _per_layer_side([src_bufs[j] for j in pairs], item, 1, "src_layers"),
            _per_layer_side([dst_bufs[j] for j in pairs], item, 1, "dst_layers"),
            item, len(pairs),
        )
        for item, pairs in groups.items()
    ]  # fmt: skip
    if len(runs) > 1:
        for src, dst, _, _ in runs:
            check_indices(si, src.endpoint, "src_indices")
            check_indices(di, dst.endpoint, "dst_indices")
    for src, dst, item, m in runs:
        _run(src, dst, si, di, item_size=item, num_layers=m, block_quota=2,
             num_warps_per_block=_DEFAULT_WARPS, opts=opts)  # fmt: skip


def _first_axis_row(buf: Buffer) -> int:
    """Bytes of one entry along the first axis, as torch slices it (an element for 1-D)."""
    return prod(buf.shape[1:]) * buf.element_size
