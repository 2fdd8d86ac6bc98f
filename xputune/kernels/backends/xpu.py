"""Kunlunxin XPU backend (kernels/xpu_copy.cc): xpu_memcpy_async per segment over XRE.

Built only where XRE's headers and libxpurt.so exist. `XpuBackend.fake()` builds the same
source against kernels/testing/xpu/runtime.h, a host-memory stand-in of those calls, so its
logic is tested on every machine.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import TYPE_CHECKING

from xputune.errors import UnsupportedError
from xputune.kernels import build

if TYPE_CHECKING:
    import numpy as np

SOURCES = ["xpu_copy.cc"]
KINDS = {"d2h": 0, "h2d": 1, "d2d": 2}  # XT_D2H / XT_H2D / XT_D2D in kernels/xt_copy.h
_CXXFLAGS = ("-O3", "-std=c++17")
_XRE_ENV = ("XPUTUNE_XRE_HOME", "XRE_HOME", "XPURT_HOME", "XPU_HOME")
_XRE_DEFAULTS = ("/usr/local/xpu", "/usr/local/xre", "/opt/xpu", "/opt/xre")
_LIB_DIRS = ("so", "lib", "lib64")


def xre_home() -> Path | None:
    """An XRE install holding include/xpu/runtime.h and libxpurt.so, else None."""
    roots = [os.environ[v] for v in _XRE_ENV if os.environ.get(v)] + list(_XRE_DEFAULTS)
    for root in map(Path, roots):
        if (root / "include" / "xpu" / "runtime.h").is_file() and _xre_libdir(root):
            return root
    return None


def _xre_libdir(root: Path) -> Path | None:
    for sub in _LIB_DIRS:
        if (root / sub / "libxpurt.so").exists():
            return root / sub
    return None


def _cxx() -> str:
    return os.environ.get("CXX") or "c++"


def build_real(force: bool = False) -> Path:
    home = xre_home()
    if home is None:
        raise UnsupportedError(
            "Kunlunxin XRE not found (set XRE_HOME to a folder with include/xpu/runtime.h "
            "and so/libxpurt.so)"
        )
    libdir = _xre_libdir(home)
    return build.build(
        "xt_xpu",
        SOURCES,
        cflags=_CXXFLAGS,
        ldflags=(f"-L{libdir}", f"-Wl,-rpath,{libdir}", "-lxpurt", "-pthread"),
        include_dirs=(str(home / "include"),),
        cc=_cxx(),
        force=force,
    )


def build_fake(force: bool = False) -> Path:
    return build.build(
        "xt_xpu_fake",
        SOURCES,
        cflags=_CXXFLAGS,
        ldflags=("-pthread",),
        include_dirs=(str(build.source_dir() / "testing"),),
        cc=_cxx(),
        force=force,
    )


class XpuBackend:
    """One xpu_memcpy_async per segment on one stream; the direction must be known."""

    name = "xpu"

    def __init__(self, library: Path) -> None:
        lib = build.load_library(library)
        vp = ctypes.c_void_p
        lib.xt_xpu_copy.argtypes = [vp, vp, vp, ctypes.c_int64, ctypes.c_int, vp, ctypes.c_int]
        lib.xt_xpu_copy.restype = ctypes.c_int
        lib.xt_xpu_wait.argtypes = [vp]
        lib.xt_xpu_submitted.restype = ctypes.c_int64
        self.lib = lib

    @classmethod
    def real(cls) -> XpuBackend:
        return cls(build_real())

    @classmethod
    def fake(cls) -> XpuBackend:
        """The backend over the host-memory XRE stand-in (tests, CI, selftest without a card)."""
        backend = cls(build_fake())
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
