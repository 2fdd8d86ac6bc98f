"""Host backend: multi-threaded memcpy over the segment table (kernels/host_copy.c).

The library comes built with the wheel (native.py's xt_host); a checkout builds it on first use.
"""

from __future__ import annotations

import ctypes
import os
from typing import TYPE_CHECKING

from xputune.errors import UnsupportedError
from xputune.kernels import build
from xputune.kernels.planner import Endpoint, KernelArgumentError, geometry

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

_ERANGE_SRC, _ERANGE_DST = -34, -35  # XT_ERANGE_* in kernels/xt_copy.h


def _env_threads() -> int:
    raw = os.environ.get("XPUTUNE_COPY_THREADS", "0").strip() or "0"
    try:
        return max(0, int(raw))
    except ValueError:
        raise UnsupportedError(f"XPUTUNE_COPY_THREADS={raw!r} is not a thread count") from None


def load_library() -> ctypes.CDLL:
    """The host library with its argument types declared."""
    lib = build.load_native("xt_host")
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.xt_host_copy.argtypes = [vp, vp, vp, i64, ctypes.c_int]
    lib.xt_host_copy.restype = ctypes.c_int
    lib.xt_host_copy_items.argtypes = [vp, vp, i64, vp, vp, i64, i64, i64, i64, ctypes.c_int,
                                       ctypes.POINTER(i64)]  # fmt: skip
    lib.xt_host_copy_items.restype = ctypes.c_int
    lib.xt_host_copy_layout.argtypes = [vp, vp, vp, vp, i64, i64, vp, vp, i64, i64, ctypes.c_int,
                                        ctypes.c_int, ctypes.POINTER(i64)]  # fmt: skip
    lib.xt_host_copy_layout.restype = ctypes.c_int
    lib.xt_host_stream_min.argtypes = [i64]
    lib.xt_host_stream_min.restype = i64
    lib.xt_host_split_min.argtypes = [i64]
    lib.xt_host_split_min.restype = i64
    lib.xt_host_memcpy.argtypes = [vp, vp, ctypes.c_uint64]
    lib.xt_host_memcpy.restype = None
    u64 = ctypes.c_uint64
    lib.xt_host_strided_memcpy.argtypes = [vp, vp, u64, u64, u64, u64]
    lib.xt_host_strided_memcpy.restype = None
    lib.xt_host_strided_read.argtypes = [vp, u64, u64, u64]
    lib.xt_host_strided_read.restype = u64
    lib.xt_host_thread_count.argtypes = [ctypes.c_uint64, ctypes.c_int]
    lib.xt_host_thread_count.restype = ctypes.c_int
    return lib


class HostBackend:
    """Copies between host buffers (pageable or pinned) on the calling process's CPUs."""

    name = "host"

    def __init__(self, threads: int | None = None) -> None:
        self.lib = load_library()
        # 0 = automatic: one thread below 8 MiB, then one per 4 MiB up to 4, never more than
        # the idle CPUs of this process's affinity mask (threads inherit it: a server bound to
        # a NUMA node copies on that node's CPUs).
        self.threads = threads if threads is not None else _env_threads()

    def thread_count(self, total_bytes: int) -> int:
        """Threads a copy of total_bytes would use (1 for small copies, at most the CPUs)."""
        return int(self.lib.xt_host_thread_count(total_bytes, self.threads))

    def copy(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        nbytes: np.ndarray,
        *,
        direction: str | None = "h2h",
        stream: int | None = None,
        sync: bool = True,
    ) -> int:
        if direction not in (None, "h2h"):
            raise UnsupportedError(f"the host backend copies host to host only, not {direction}")
        n = int(nbytes.shape[0])
        rc = self.lib.xt_host_copy(
            src.ctypes.data, dst.ctypes.data, nbytes.ctypes.data, n, self.threads
        )
        if rc != 0:
            raise MemoryError(f"host copy failed (code {rc})")
        return n

    def copy_items(
        self,
        src_bases: np.ndarray,
        dst_bases: np.ndarray,
        src_indices: np.ndarray,
        dst_indices: np.ndarray,
        *,
        item_size: int,
        src_slots: int | None,
        dst_slots: int | None,
    ) -> int:
        """Per-layer buffers on both sides: cut runs and copy in C (see host_copy.c).

        Same segments as the planner's for this case; returns their count. Indices are
        range-checked in C before any byte moves.
        """
        segments = ctypes.c_int64(0)
        rc = self.lib.xt_host_copy_items(
            src_bases.ctypes.data, dst_bases.ctypes.data, int(src_bases.shape[0]),
            src_indices.ctypes.data, dst_indices.ctypes.data, int(src_indices.shape[0]),
            item_size, -1 if src_slots is None else src_slots,
            -1 if dst_slots is None else dst_slots, self.threads, ctypes.byref(segments),
        )  # fmt: skip
        _raise_for(rc, (src_indices, src_slots), (dst_indices, dst_slots))
        return int(segments.value)

    def copy_layout(
        self,
        src: Endpoint,
        dst: Endpoint,
        src_bases: Sequence[np.ndarray],
        dst_bases: Sequence[np.ndarray],
        src_indices: np.ndarray,
        dst_indices: np.ndarray,
        *,
        item_size: int,
        num_layers: int,
    ) -> int:
        """Plan and copy in one C call, any host layouts on either side (host_copy.c).

        *_bases: one uint64 base table per member (K, V), each num_layers long for a "layers"
        side and one long for a flat one. Cuts and merges the planner's segments (the count is
        returned, times members) without building their table in numpy; indices are
        range-checked in C before any byte moves, the layer range here.
        """
        import numpy as np

        from xputune.kernels.planner import check_layers

        check_layers(src, num_layers, "source")
        check_layers(dst, num_layers, "destination")
        sg, s_off = geometry(src, item_size)
        dg, d_off = geometry(dst, item_size)
        sb = np.concatenate(src_bases) + np.uint64(s_off) if s_off else np.concatenate(src_bases)
        db = np.concatenate(dst_bases) + np.uint64(d_off) if d_off else np.concatenate(dst_bases)
        geo = np.array((*sg, *dg), dtype=np.int64)
        si = np.ascontiguousarray(src_indices, dtype=np.int64)
        di = np.ascontiguousarray(dst_indices, dtype=np.int64)
        segments = ctypes.c_int64(0)
        rc = self.lib.xt_host_copy_layout(
            sb.ctypes.data, db.ctypes.data, geo.ctypes.data, geo.ctypes.data + 48,
            len(src_bases), num_layers, si.ctypes.data, di.ctypes.data, int(si.shape[0]),
            item_size, int(src.layers_contiguous_per_token or dst.layers_contiguous_per_token),
            self.threads, ctypes.byref(segments),
        )  # fmt: skip
        _raise_for(rc, (si, src.slots), (di, dst.slots))
        return int(segments.value)

    def memcpy(self, dst_address: int, src_address: int, nbytes: int) -> None:
        """One plain memcpy from the same library: the baseline for benchmarks."""
        self.lib.xt_host_memcpy(dst_address, src_address, nbytes)

    def strided_memcpy(
        self, dst_address: int, src_address: int, item: int, count: int, dst_stride: int,
        src_stride: int,
    ) -> None:  # fmt: skip
        """A plain C loop of memcpy over strided items: a benchmark's reference for what a
        strided layout costs with the obvious code (no bounds: the caller's own buffers)."""
        self.lib.xt_host_strided_memcpy(dst_address, src_address, item, count, dst_stride,
                                        src_stride)  # fmt: skip

    def strided_read(self, src_address: int, item: int, count: int, stride: int) -> int:
        """Read count items one every stride bytes (prefetched ahead unless stride == item, a
        contiguous read); returns their XOR. A benchmark's bound on any copy of the pattern."""
        return int(self.lib.xt_host_strided_read(src_address, item, count, stride))


def _raise_for(
    rc: int, src: tuple[np.ndarray, int | None], dst: tuple[np.ndarray, int | None]
) -> None:
    """Turn the C library's return code into the error a caller sees."""
    if rc in (_ERANGE_SRC, _ERANGE_DST):
        src_side = rc == _ERANGE_SRC
        idx, slots = src if src_side else dst
        name = "src_indices" if src_side else "dst_indices"
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0:
            raise KernelArgumentError(f"{name} holds a negative slot ({lo})")
        raise KernelArgumentError(
            f"{name} holds slot {hi}, out of range for a buffer of {slots} slots"
        )
    if rc != 0:
        raise MemoryError(f"host copy failed (code {rc})")
