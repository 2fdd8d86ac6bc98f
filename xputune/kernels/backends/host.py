"""Host backend: multi-threaded memcpy over the segment table (kernels/host_copy.c)."""

from __future__ import annotations

import ctypes
import os
from typing import TYPE_CHECKING

from xputune.errors import UnsupportedError
from xputune.kernels import build
from xputune.kernels.planner import KernelArgumentError

if TYPE_CHECKING:
    import numpy as np

SOURCES = ["host_copy.c"]
_ERANGE_SRC, _ERANGE_DST = -34, -35  # XT_ERANGE_* in kernels/xt_copy.h


def _env_threads() -> int:
    raw = os.environ.get("XPUTUNE_COPY_THREADS", "0").strip() or "0"
    try:
        return max(0, int(raw))
    except ValueError:
        raise UnsupportedError(f"XPUTUNE_COPY_THREADS={raw!r} is not a thread count") from None


def load_library() -> ctypes.CDLL:
    """The host library with its argument types declared (built on first use)."""
    lib = build.load("xt_host", SOURCES)
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.xt_host_copy.argtypes = [vp, vp, vp, i64, ctypes.c_int]
    lib.xt_host_copy.restype = ctypes.c_int
    lib.xt_host_copy_items.argtypes = [vp, vp, i64, vp, vp, i64, i64, i64, i64, ctypes.c_int,
                                       ctypes.POINTER(i64)]  # fmt: skip
    lib.xt_host_copy_items.restype = ctypes.c_int
    lib.xt_host_memcpy.argtypes = [vp, vp, ctypes.c_uint64]
    lib.xt_host_memcpy.restype = None
    lib.xt_host_thread_count.argtypes = [ctypes.c_uint64, ctypes.c_int]
    lib.xt_host_thread_count.restype = ctypes.c_int
    return lib


class HostBackend:
    """Copies between host buffers (pageable or pinned) on the calling process's CPUs."""

    name = "host"

    def __init__(self, threads: int | None = None) -> None:
        self.lib = load_library()
        # 0 = automatic (one thread below 4 MiB, then up to one per usable CPU).
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
        if rc in (_ERANGE_SRC, _ERANGE_DST):
            src_side = rc == _ERANGE_SRC
            idx, slots = (src_indices, src_slots) if src_side else (dst_indices, dst_slots)
            name = "src_indices" if src_side else "dst_indices"
            lo, hi = int(idx.min()), int(idx.max())
            if lo < 0:
                raise KernelArgumentError(f"{name} holds a negative slot ({lo})")
            raise KernelArgumentError(
                f"{name} holds slot {hi}, out of range for a buffer of {slots} slots"
            )
        if rc != 0:
            raise MemoryError(f"host copy failed (code {rc})")
        return int(segments.value)

    def memcpy(self, dst_address: int, src_address: int, nbytes: int) -> None:
        """One plain memcpy from the same library: the baseline for benchmarks."""
        self.lib.xt_host_memcpy(dst_address, src_address, nbytes)
