"""Turn a KV transfer (token-slot index pairs x layers) into a table of contiguous copy segments.

Why this exists: on a DMA engine the number of submissions, not the bytes, decides whether a
layer reaches sequential bandwidth. The planner makes that count explicit and is the one place
that decides it for every backend: it cuts maximal runs where both index sequences step by one,
splits them where a layout is not contiguous, and merges neighbouring segments where both sides
happen to be contiguous (across layers, when the layout puts them next to each other).
page_first_direct never merges across pages, as SGLang's direct backend copies page by page.
The host backend applies the same rules in C (kernels/host_copy.c, from geometry() below) so
that it needs no numpy temporaries per call; a property test holds the two to the same count.

Everything is vectorized with numpy; there is no Python loop per token or per segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from xputune.errors import XputuneError

if TYPE_CHECKING:
    import numpy as np

Layout = Literal["layers", "layer_first", "page_first", "page_first_direct"]
# Host layouts SGLang offers (--hicache-mem-layout); "layers" is a table of per-layer buffers, the
# shape of the device pool (and of any side given as a list of per-layer tensors).
HOST_LAYOUTS: tuple[str, ...] = ("layer_first", "page_first", "page_first_direct")
ALL_LAYOUTS: tuple[str, ...] = ("layers", *HOST_LAYOUTS)


class KernelArgumentError(XputuneError, ValueError):
    """A copy operator or the planner was called with arguments that cannot describe a transfer."""


@dataclass(frozen=True)
class Endpoint:
    """One side of a transfer: how (layer, token slot) maps to a byte offset.

    layout: "layers" (one buffer per processed layer, slot s at s * item), "layer_first"
    (L, slots, item), "page_first" (slots, L, item) or "page_first_direct"
    (slots / page_size, L, page_size, item), all in one buffer for the flat layouts.
    slots: token slots per layer, for bounds checks; None where unknown (a raw address table).
    layers: layers the flat buffer holds (ignored for "layers").
    first_layer: the buffer layer that processed layer 0 maps to (a per-layer op on layer k).
    """

    layout: str
    slots: int | None = None
    layers: int = 1
    first_layer: int = 0
    page_size: int = 1

    def __post_init__(self) -> None:
        if self.layout not in ALL_LAYOUTS:
            raise KernelArgumentError(
                f"unknown layout {self.layout!r} (expected one of {', '.join(ALL_LAYOUTS)})"
            )
        if self.page_size < 1:
            raise KernelArgumentError(f"page size must be >= 1, got {self.page_size}")
        if self.layers < 1 or self.first_layer < 0:
            raise KernelArgumentError("layer counts must be positive and first_layer >= 0")
        if self.slots is not None and self.slots < 0:
            raise KernelArgumentError(f"slot count must be >= 0, got {self.slots}")
        if self.layout == "layer_first" and self.slots is None:
            raise KernelArgumentError("a layer_first side needs its slot count (layer stride)")
        if (
            self.layout == "page_first_direct"
            and self.slots is not None
            and self.slots % self.page_size
        ):
            raise KernelArgumentError(
                f"page_first_direct buffer holds {self.slots} slots, "
                f"not a whole number of {self.page_size}-token pages"
            )

    @property
    def flat(self) -> bool:
        return self.layout != "layers"

    @property
    def layers_contiguous_per_token(self) -> bool:
        """Whether layer l+1 of a slot can directly follow layer l (page-major layouts)."""
        return self.layout in ("page_first", "page_first_direct")


@dataclass(frozen=True)
class SegmentPlan:
    """The copy segments of one transfer, in submission order.

    src_buf/dst_buf index the side's base-address list (always 0 for a flat layout, the
    processed-layer index for "layers"); offsets are bytes from that base.
    """

    src_buf: np.ndarray
    src_off: np.ndarray
    dst_buf: np.ndarray
    dst_off: np.ndarray
    nbytes: np.ndarray
    tokens: int
    layers: int
    item_size: int
    runs: int

    @property
    def count(self) -> int:
        return int(self.nbytes.shape[0])

    @property
    def total_bytes(self) -> int:
        return self.tokens * self.layers * self.item_size

    def addresses(
        self, src_bases: Sequence[int] | np.ndarray, dst_bases: Sequence[int] | np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Absolute (src, dst, nbytes) as uint64 arrays, the table every backend consumes."""
        import numpy as np

        sb = np.asarray(src_bases, dtype=np.uint64)
        db = np.asarray(dst_bases, dtype=np.uint64)
        src = sb[self.src_buf] + self.src_off.astype(np.uint64)
        dst = db[self.dst_buf] + self.dst_off.astype(np.uint64)
        return src, dst, self.nbytes.astype(np.uint64)

    def summary(self) -> dict[str, int | float]:
        count = self.count
        return {
            "segments": count,
            "bytes": self.total_bytes,
            "runs_per_layer": self.runs,
            "mean_segment_bytes": round(self.total_bytes / count, 1) if count else 0.0,
            "max_segment_bytes": int(self.nbytes.max()) if count else 0,
        }


def as_index_array(indices: object, name: str) -> np.ndarray:
    """A 1-D int64 numpy view of an index array or tensor; rejects every other dtype."""
    import numpy as np

    if hasattr(indices, "data_ptr") and hasattr(indices, "dtype"):  # a torch tensor
        if str(indices.dtype) != "torch.int64":
            raise KernelArgumentError(f"{name} must be int64 token slots, got {indices.dtype}")
        indices = indices.detach().cpu().numpy()  # type: ignore[attr-defined]
    if not isinstance(indices, np.ndarray):
        raise KernelArgumentError(
            f"{name} must be an int64 numpy array or torch tensor, got {type(indices).__name__}"
        )
    if indices.dtype != np.int64:
        raise KernelArgumentError(f"{name} must be int64 token slots, got {indices.dtype}")
    if indices.ndim != 1:
        raise KernelArgumentError(f"{name} must be 1-D, got shape {indices.shape}")
    return indices


def check_indices(idx: np.ndarray, ep: Endpoint, name: str) -> None:
    """Reject slots outside the side's buffer (or negative where its size is unknown)."""
    if idx.size:
        _check_range(int(idx.min()), int(idx.max()), ep, name)


def _check_range(lo: int, hi: int, ep: Endpoint, name: str) -> None:
    if lo < 0:
        raise KernelArgumentError(f"{name} holds a negative slot ({lo})")
    if ep.slots is not None and hi >= ep.slots:
        raise KernelArgumentError(
            f"{name} holds slot {hi}, out of range for a buffer of {ep.slots} slots"
        )


def _offsets(ep: Endpoint, layer: np.ndarray, slot: np.ndarray, item: int) -> np.ndarray:
    """Byte offset of (processed layer, slot) from the side's base."""
    import numpy as np

    layer_abs = layer + ep.first_layer
    if ep.layout == "layers":
        return slot * item
    if ep.layout == "layer_first":
        return (layer_abs * ep.slots + slot) * item
    if ep.layout == "page_first":
        return (slot * ep.layers + layer_abs) * item
    ps = ep.page_size
    page, in_page = np.divmod(slot, ps)
    return ((page * ep.layers + layer_abs) * ps + in_page) * item


def geometry(ep: Endpoint, item: int) -> tuple[tuple[int, int, int, int, int, int], int]:
    """The side as the host backend's C planner reads it, and the byte offset of first_layer.

    (per_layer, slots, page, page_stride, layer_stride, cut): slot s of processed layer l sits
    at base + (s // page) * page_stride + (s % page) * item + l * layer_stride, the same place
    _offsets computes; cut > 0 keeps runs and merges inside cut-slot pages (page_first_direct).
    """
    slots = -1 if ep.slots is None else ep.slots
    if ep.layout == "layers":
        return (1, slots, 1, item, 0, 0), 0
    if ep.layout == "layer_first":
        stride = (ep.slots or 0) * item
        return (0, slots, 1, item, stride, 0), ep.first_layer * stride
    if ep.layout == "page_first":
        return (0, slots, 1, ep.layers * item, item, 0), ep.first_layer * item
    ps = ep.page_size
    return (0, slots, ps, ep.layers * ps * item, ps * item, ps), ep.first_layer * ps * item


def check_layers(ep: Endpoint, num_layers: int, side: str) -> None:
    """Refuse a transfer of more layers than a flat side's buffer holds from first_layer on."""
    if ep.flat and ep.first_layer + num_layers > ep.layers:
        raise KernelArgumentError(
            f"{side} buffer holds {ep.layers} layers; layers {ep.first_layer}.."
            f"{ep.first_layer + num_layers - 1} requested"
        )


def check_request(
    src_indices: object, dst_indices: object, item_size: int, num_layers: int
) -> tuple[np.ndarray, np.ndarray]:
    """The checks every transfer needs before anything is planned or copied."""
    si = as_index_array(src_indices, "src_indices")
    di = as_index_array(dst_indices, "dst_indices")
    if si.shape[0] != di.shape[0]:
        raise KernelArgumentError(
            f"src_indices and dst_indices differ in length ({si.shape[0]} vs {di.shape[0]})"
        )
    if item_size <= 0:
        raise KernelArgumentError(f"item_size must be positive, got {item_size}")
    if num_layers < 1:
        raise KernelArgumentError(f"num_layers must be >= 1, got {num_layers}")
    return si, di


def plan(
    src_indices: object,
    dst_indices: object,
    *,
    src: Endpoint,
    dst: Endpoint,
    item_size: int,
    num_layers: int = 1,
) -> SegmentPlan:
    """Segments that copy item_size bytes of every processed layer from src slot to dst slot."""
    import numpy as np

    si, di = check_request(src_indices, dst_indices, item_size, num_layers)
    check_layers(src, num_layers, "source")
    check_layers(dst, num_layers, "destination")
    n = si.shape[0]
    empty = np.zeros(0, dtype=np.int64)
    if n == 0:
        return SegmentPlan(empty, empty, empty, empty, empty, 0, num_layers, item_size, 0)

    check_indices(si, src, "src_indices")
    check_indices(di, dst, "dst_indices")

    # 1. Runs: break where either side stops stepping by one or stops being contiguous.
    brk = (np.diff(si) != 1) | (np.diff(di) != 1)
    for idx, ep in ((si, src), (di, dst)):
        if ep.layout == "page_first" and ep.layers > 1:
            brk[:] = True  # a slot's next neighbour is num_layers items away
        elif ep.layout == "page_first_direct":
            brk |= idx[1:] % ep.page_size == 0  # never across pages
    starts = np.concatenate(([0], np.flatnonzero(brk) + 1))
    lengths = np.diff(np.concatenate((starts, [n])))
    runs = starts.shape[0]

    # 2. One segment per (run, layer), ordered so that mergeable neighbours are adjacent:
    #    run-major where a side keeps a slot's layers together, layer-major otherwise.
    run_major = src.layers_contiguous_per_token or dst.layers_contiguous_per_token
    lay = np.arange(num_layers, dtype=np.int64)
    run = np.arange(runs, dtype=np.int64)
    if run_major:
        r_of, l_of = np.repeat(run, num_layers), np.tile(lay, runs)
    else:
        r_of, l_of = np.tile(run, num_layers), np.repeat(lay, runs)
    s_slot, d_slot = si[starts][r_of], di[starts][r_of]
    nbytes = lengths[r_of] * item_size
    s_off, d_off = _offsets(src, l_of, s_slot, item_size), _offsets(dst, l_of, d_slot, item_size)
    s_buf = l_of if not src.flat else np.zeros_like(l_of)
    d_buf = l_of if not dst.flat else np.zeros_like(l_of)

    # 3. Merge neighbours contiguous on both sides (same buffer, same page_first_direct page).
    if nbytes.shape[0] > 1:
        join = (
            (s_buf[1:] == s_buf[:-1])
            & (d_buf[1:] == d_buf[:-1])
            & (s_off[:-1] + nbytes[:-1] == s_off[1:])
            & (d_off[:-1] + nbytes[:-1] == d_off[1:])
        )
        for slot, ep in ((s_slot, src), (d_slot, dst)):
            if ep.layout == "page_first_direct":
                page = slot // ep.page_size
                join &= page[1:] == page[:-1]
        if join.any():
            heads = np.flatnonzero(np.concatenate(([True], ~join)))
            nbytes = np.add.reduceat(nbytes, heads)
            s_buf, s_off, d_buf, d_off = s_buf[heads], s_off[heads], d_buf[heads], d_off[heads]
    return SegmentPlan(s_buf, s_off, d_buf, d_off, nbytes, n, num_layers, item_size, runs)


def synthetic_indices(tokens: int, pattern: str, page_size: int, seed: int = 0) -> np.ndarray:
    """Host-side token slots for a model transfer: contiguous, whole pages shuffled, or random.

    "pages" mimics a paged allocator that hands out free pages in any order (runs stay
    page-long); "random" is the worst case, every slot anywhere.
    """
    import numpy as np

    if tokens < 0:
        raise KernelArgumentError(f"token count must be >= 0, got {tokens}")
    if pattern == "contiguous":
        return np.arange(tokens, dtype=np.int64)
    rng = np.random.default_rng(seed)
    if pattern == "pages":
        pages = -(-tokens // page_size)
        order = rng.permutation(pages).astype(np.int64)
        slots = (order[:, None] * page_size + np.arange(page_size, dtype=np.int64)).ravel()
        return slots[:tokens]
    if pattern == "random":
        return rng.permutation(tokens).astype(np.int64)
    raise KernelArgumentError(f"unknown index pattern {pattern!r} (contiguous, pages, random)")


def host_transfer_plan(
    layout: str,
    tokens: int,
    *,
    page_size: int,
    layers: int,
    item_size: int,
    pattern: str = "contiguous",
    direction: str = "d2h",
    seed: int = 0,
    moved_layers: int | None = None,
) -> SegmentPlan:
    """The plan SGLang's direct backend would submit to move `tokens` between HBM and a host pool.

    The device side is a table of per-layer buffers; the host side is `layout`, a pool of
    `layers` layers of which the first `moved_layers` (default: all) move, e.g. 1 for one
    per-layer load. Device slots are contiguous (a request's KV as the device allocator hands it
    out, page-aligned); host slots follow `pattern`.
    """
    if layout not in HOST_LAYOUTS:
        raise KernelArgumentError(
            f"unknown host layout {layout!r} (expected one of {', '.join(HOST_LAYOUTS)})"
        )
    if page_size < 1 or layers < 1 or item_size < 1:
        raise KernelArgumentError("page size, layer count and item size must be positive")
    host_idx = synthetic_indices(tokens, pattern, page_size, seed)
    dev_idx = synthetic_indices(tokens, "contiguous", page_size)
    slots = -(-tokens // page_size) * page_size
    host = Endpoint(layout, slots=slots, layers=layers, page_size=page_size)
    dev = Endpoint("layers", slots=slots)
    moved = layers if moved_layers is None else moved_layers
    if direction == "d2h":
        return plan(dev_idx, host_idx, src=dev, dst=host, item_size=item_size, num_layers=moved)
    if direction == "h2d":
        return plan(host_idx, dev_idx, src=host, dst=dev, item_size=item_size, num_layers=moved)
    raise KernelArgumentError(f"direction must be h2d or d2h, got {direction!r}")
