"""Kunlunxin XPU backend (kernels/xpu_copy.cc): xpu_memcpy_async per segment over XRE.

Built on first use, only where XRE's headers and libxpurt.so exist (native.py's xt_xpu).
`XpuBackend.fake()` loads the same source built against kernels/testing/xpu/runtime.h, a
host-memory stand-in of those calls (xt_xpu_fake, built with the wheel), so its logic is tested
on every machine.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from xputune.errors import UnsupportedError
from xputune.kernels import build

if TYPE_CHECKING:
    import numpy as np

KINDS = {"d2h": 0, "h2d": 1, "d2d": 2}  # XT_D2H / XT_H2D / XT_D2D in kernels/xt_copy.h


class XpuBackend:
    """One xpu_memcpy_async per segment on one stream; the direction must be known."""

    name = "xpu"

    def __init__(self, library: str) -> None:
        """`library`: xt_xpu (over XRE) or xt_xpu_fake (over the test runtime)."""
        lib = build.load_native(library)
        vp = ctypes.c_void_p
        lib.xt_xpu_copy.argtypes = [vp, vp, vp, ctypes.c_int64, ctypes.c_int, vp, ctypes.c_int]
        lib.xt_xpu_copy.restype = ctypes.c_int
        lib.xt_xpu_wait.argtypes = [vp]
        lib.xt_xpu_submitted.restype = ctypes.c_int64
        self.lib = lib

    @classmethod
    def real(cls) -> XpuBackend:
        return cls("xt_xpu")

    @classmethod
    def fake(cls) -> XpuBackend:
        """The backend over the host-memory XRE stand-in (tests, CI, selftest without a card)."""
        backend = cls("xt_xpu_fake")
        backend.name = "xpu-fake"
        return backend

    @property
    def submitted(self) -> int:
        return int(self.lib.xt_xpu_submitted())

    def copy(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        nbytes: np.ndarray,
        *,
        direction: str | None,
        stream: int | None = None,
        sync: bool = False,
    ) -> int:
        if direction not in KINDS:
            raise UnsupportedError(
                f"the XPU backend needs direction h2d, d2h or d2d (got {direction!r}); "
                "pass direction= when the sides are raw address tables"
            )
        n = int(nbytes.shape[0])
        before = self.submitted
        rc = self.lib.xt_xpu_copy(
            src.ctypes.data, dst.ctypes.data, nbytes.ctypes.data, n, KINDS[direction], stream,
            int(sync or stream is None),
        )  # fmt: skip
        if rc != 0:
            raise RuntimeError(f"xpu_memcpy_async failed (code {rc})")
        return self.submitted - before
