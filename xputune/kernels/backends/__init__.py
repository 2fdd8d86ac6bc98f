"""Copy backends: each moves the bytes of a segment table; the planner decides the table.

host (always), cuda (libcudart + a built kernels/cuda_copy.cu) and xpu (Kunlunxin XRE). Device
backends are chosen by XPUTUNE_COPY_BACKEND=cuda|xpu, else by what the machine has: the CUDA
runtime first unless only XRE is found (Kunlunxin's torch poses as CUDA, so the tensor's device
type cannot tell the two apart).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Protocol

from xputune.errors import UnsupportedError

if TYPE_CHECKING:
    import numpy as np

DIRECTIONS = ("h2h", "h2d", "d2h", "d2d")


class CopyBackend(Protocol):
    name: str

    def copy(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        nbytes: np.ndarray,
        *,
        direction: str | None,
        stream: int | None,
        sync: bool,
    ) -> int:
        """Copy every segment; return the number of submissions made."""
        ...


_cache: dict[str, CopyBackend] = {}


def get(name: str) -> CopyBackend:
    """A backend by name, built and loaded on first use."""
    backend = _cache.get(name)
    if backend is not None:
        return backend
    if name == "host":
        from xputune.kernels.backends.host import HostBackend

        backend = HostBackend()
    elif name == "cuda":
        from xputune.kernels.backends.cuda import CudaBackend

        backend = CudaBackend()
    elif name == "xpu":
        from xputune.kernels.backends.xpu import XpuBackend

        backend = XpuBackend.real()
    else:
        raise UnsupportedError(f"unknown copy backend {name!r} (host, cuda, xpu)")
    _cache[name] = backend
    return backend


def device_backend_name() -> str:
    """Which device backend this machine uses (env override, else what is installed)."""
    forced = os.environ.get("XPUTUNE_COPY_BACKEND", "").strip().lower()
    if forced:
        if forced not in ("cuda", "xpu"):
            raise UnsupportedError(f"XPUTUNE_COPY_BACKEND={forced!r}: expected cuda or xpu")
        return forced
    from xputune.kernels.native import cuda_toolkit, xre_home

    if cuda_toolkit() is None and xre_home() is not None:
        return "xpu"
    return "cuda"
