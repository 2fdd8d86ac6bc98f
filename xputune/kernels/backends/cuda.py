"""CUDA backend (kernels/cuda_copy.cu): direct mode over the segment table, or the item kernel.

Built with nvcc on first use into the per-user kernel cache (native.py's xt_cuda: nvcc is on
the GPU box, not where the wheel is built); the CUDA runtime is linked statically (nvcc's
default), so the library does not depend on which libcudart torch ships. XPUTUNE_CUDA_ARCH
picks -arch (sm_75).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from xputune.errors import UnsupportedError
from xputune.kernels import build

if TYPE_CHECKING:
    import numpy as np

    from xputune.kernels.planner import Endpoint

LAYOUT_CODES = {"layers": 0, "layer_first": 1, "page_first": 2, "page_first_direct": 3}


class XtSide(ctypes.Structure):
    _fields_ = [
        ("layout", ctypes.c_int64),
        ("base", ctypes.c_uint64),
        ("tbl", ctypes.c_void_p),
        ("slots", ctypes.c_int64),
        ("layers", ctypes.c_int64),
        ("first_layer", ctypes.c_int64),
        ("page_size", ctypes.c_int64),
    ]


class CudaBackend:
    """Moves bytes with the CUDA runtime; unified addressing tells host from device."""

    name = "cuda"

    def __init__(self) -> None:
        lib = build.load_native("xt_cuda")
        vp, i64 = ctypes.c_void_p, ctypes.c_int64
        lib.xt_cuda_copy.argtypes = [vp, vp, vp, i64, vp, ctypes.c_int, ctypes.c_int]
        lib.xt_cuda_copy_items.argtypes = [
            ctypes.POINTER(XtSide), ctypes.POINTER(XtSide), vp, vp, ctypes.c_int,
            i64, i64, i64, ctypes.c_int, ctypes.c_int, vp, ctypes.c_int,
        ]  # fmt: skip
        lib.xt_cuda_error_string.restype = ctypes.c_char_p
        lib.xt_cuda_error_string.argtypes = [ctypes.c_int]
        lib.xt_cuda_runtime_version.restype = ctypes.c_int
        lib.xt_cuda_has_batch.restype = ctypes.c_int
        if lib.xt_cuda_runtime_version() < 0:
            raise UnsupportedError("the CUDA runtime found no usable driver or device")
        self.lib = lib
        self.has_batch = bool(lib.xt_cuda_has_batch())

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            text = self.lib.xt_cuda_error_string(rc).decode() if rc > 0 else f"code {rc}"
            raise RuntimeError(f"{what} failed: {text}")

    def copy(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        nbytes: np.ndarray,
        *,
        direction: str | None = None,
        stream: int | None = None,
        sync: bool = False,
        use_batch: bool = True,
    ) -> int:
        n = int(nbytes.shape[0])
        rc = self.lib.xt_cuda_copy(
            src.ctypes.data, dst.ctypes.data, nbytes.ctypes.data, n, stream, int(use_batch),
            int(sync),
        )  # fmt: skip
        self._check(rc, "cudaMemcpyAsync")
        return 1 if (use_batch and self.has_batch and stream and n > 1) else n

    def copy_items(
        self,
        src: Endpoint,
        dst: Endpoint,
        src_bases: np.ndarray,
        dst_bases: np.ndarray,
        src_indices: np.ndarray,
        dst_indices: np.ndarray,
        *,
        item_size: int,
        num_layers: int,
        block_quota: int,
        num_warps_per_block: int,
        stream: int | None,
        sync: bool,
        indices_on_host: bool = True,
        src_idx_address: int | None = None,
        dst_idx_address: int | None = None,
    ) -> int:
        """kernel mode: one launch, a warp per token slot, every processed layer."""
        sides = [_side(ep, bases) for ep, bases in ((src, src_bases), (dst, dst_bases))]
        n = int(src_indices.shape[0])
        rc = self.lib.xt_cuda_copy_items(
            ctypes.byref(sides[0]), ctypes.byref(sides[1]),
            src_indices.ctypes.data if indices_on_host else src_idx_address,
            dst_indices.ctypes.data if indices_on_host else dst_idx_address,
            int(indices_on_host), n, item_size, num_layers, block_quota, num_warps_per_block,
            stream, int(sync),
        )  # fmt: skip
        self._check(rc, "the copy kernel")
        return 1


def _side(ep: Endpoint, bases: np.ndarray) -> XtSide:
    table = ep.layout == "layers"
    return XtSide(
        layout=LAYOUT_CODES[ep.layout],
        base=0 if table else int(bases[0]),
        tbl=bases.ctypes.data if table else None,
        slots=ep.slots or 0,
        layers=ep.layers,
        first_layer=ep.first_layer,
        page_size=ep.page_size,
    )
