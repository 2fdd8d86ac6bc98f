"""The native libraries of kernels/: what each is built from, with what, and when.

One table feeds the three places that used to keep their own lists: setup.py (the libraries
built when the wheel is built), the loaders (build.load_native) and `xputune kernels build`.

Two times to build:
- WHEEL: plain C/C++ with no toolkit behind it (the host copy library, the stack-distance
  kernel of `xputune tiers`, the XPU backend over its host-memory test runtime). Built with the
  wheel into xputune/kernels/libs/, so an installed xputune needs no compiler for them.
- FIRST_USE: what needs a vendor toolkit that only the box with the accelerator has (nvcc,
  Kunlunxin's XRE): built on first use there, into the checked per-user cache.

A library built with the wheel is named after a digest of its sources, headers and flags
(packaged_name), and the loader computes that digest from the sources it ships beside it: a
library that does not match (a checkout whose sources were edited since someone built in
place) is not used, and the library is built on first use as in a checkout without one.

This module imports nothing of xputune, so setup.py can read it by path while building the wheel,
before xputune or its dependencies are installed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

WHEEL = "wheel"
FIRST_USE = "first use"

_PACKAGE_DIR = Path(__file__).resolve().parent.parent
#: Where the libraries built with the wheel are installed, inside the package.
PACKAGED_DIR = Path(__file__).resolve().parent / "libs"
#: The Extension name setup.py builds a library under (its file is renamed: packaged_name).
PACKAGED_MODULE = "xputune.kernels.libs"

_C = ("-O3", "-std=c11")
_CXX = ("-O3", "-std=c++17")
_XRE_ENV = ("XPUTUNE_XRE_HOME", "XRE_HOME", "XPURT_HOME", "XPU_HOME")
_XRE_DEFAULTS = ("/usr/local/xpu", "/usr/local/xre", "/opt/xpu", "/opt/xre")
_XRE_LIB_DIRS = ("so", "lib", "lib64")


@dataclass(frozen=True)
class Library:
    """One shared library with a small C ABI, loaded with ctypes (no Python C API in it)."""

    name: str  # the file is lib<name>...so
    title: str  # as `xputune kernels build` lists it
    sources: tuple[str, ...]  # inside kernels/
    when: str  # WHEEL or FIRST_USE
    language: str = "c"  # "c", "c++" or "cuda"
    cflags: tuple[str, ...] = _C
    ldflags: tuple[str, ...] = ("-pthread",)
    include_dirs: tuple[str, ...] = ()  # inside kernels/ (kernels/ itself always)
    toolkit: str | None = None  # "nvcc" or "xre": found at run time, else the build is skipped


_TABLE = (
    Library("xt_host", "host", ("host_copy.c",), WHEEL),
    Library("stackdist", "stackdist (tiers)", ("stackdist.c",), WHEEL),
    Library("xt_xpu_fake", "xpu (test runtime)", ("xpu_copy.cc",), WHEEL, language="c++",
            cflags=_CXX, include_dirs=("testing",)),
    Library("xt_cuda", "cuda", ("cuda_copy.cu",), FIRST_USE, language="cuda", cflags=_CXX,
            ldflags=(), toolkit="nvcc"),
    Library("xt_xpu", "xpu", ("xpu_copy.cc",), FIRST_USE, language="c++", cflags=_CXX,
            toolkit="xre"),
)  # fmt: skip
#: Every native library, by name.
LIBRARIES: dict[str, Library] = {lib.name: lib for lib in _TABLE}


def source_dir() -> Path | None:
    """kernels/ of a checkout, or the copy shipped inside an installed package."""
    for candidate in (_PACKAGE_DIR / "kernels_src", _PACKAGE_DIR.parent / "kernels"):
        if candidate.is_dir():
            return candidate
    return None


def digest(src_dir: Path, sources: tuple[str, ...] | list[str], parts: tuple[str, ...]) -> str:
    """What a library is built from: `parts` (compiler, flags), its sources, every header."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() + b"\0")
    for path in sorted(src_dir / s for s in sources) + sorted(src_dir.rglob("*.h")):
        h.update(str(path.relative_to(src_dir)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def packaged_name(lib: Library, src_dir: Path) -> str:
    """The file a WHEEL library is installed as: the same name wherever it was built."""
    flags = (*lib.cflags, *lib.ldflags, *lib.include_dirs)
    return f"lib{lib.name}-{digest(src_dir, lib.sources, flags)}.so"


def packaged(lib: Library, src_dir: Path) -> Path | None:
    """The library built with the wheel from exactly these sources, when it is installed."""
    if lib.when != WHEEL:
        return None
    path = PACKAGED_DIR / packaged_name(lib, src_dir)
    return path if path.is_file() else None


# -- toolchains: what builds a library on first use ---------------------------------------------


@dataclass(frozen=True)
class Toolchain:
    cc: str
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    include_dirs: tuple[str, ...]  # absolute, besides kernels/


def c_compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def cxx_compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")


def cuda_toolkit() -> Path | None:
    """nvcc from $NVCC, PATH, $CUDA_HOME or /usr/local/cuda; None when absent."""
    for candidate in (
        os.environ.get("NVCC"),
        shutil.which("nvcc"),
        os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def xre_home() -> Path | None:
    """An XRE install holding include/xpu/runtime.h and libxpurt.so, else None."""
    roots = [os.environ[v] for v in _XRE_ENV if os.environ.get(v)] + list(_XRE_DEFAULTS)
    for root in map(Path, roots):
        if (root / "include" / "xpu" / "runtime.h").is_file() and xre_libdir(root):
            return root
    return None


def xre_libdir(root: Path) -> Path | None:
    for sub in _XRE_LIB_DIRS:
        if (root / sub / "libxpurt.so").exists():
            return root / sub
    return None


def toolchain(lib: Library, src_dir: Path) -> Toolchain | str:
    """How to build `lib` here, or why it cannot be (one line: no compiler, no toolkit)."""
    includes = tuple(str(src_dir / d) for d in lib.include_dirs)
    if lib.toolkit == "nvcc":
        nvcc = cuda_toolkit()
        if nvcc is None:
            return "nvcc not found: set NVCC or CUDA_HOME to build the CUDA backend"
        arch = os.environ.get("XPUTUNE_CUDA_ARCH", "sm_75")
        return Toolchain(str(nvcc), (*lib.cflags, f"-arch={arch}"), lib.ldflags, includes)
    home = xre_home() if lib.toolkit == "xre" else None
    libdir = None if home is None else xre_libdir(home)
    if lib.toolkit == "xre" and (home is None or libdir is None):
        return (
            "Kunlunxin XRE not found (set XRE_HOME to a folder with include/xpu/runtime.h "
            "and so/libxpurt.so)"
        )
    cc = c_compiler() if lib.language == "c" else cxx_compiler()
    if cc is None:
        return (
            "no C compiler found (set CC or install gcc)"
            if lib.language == "c"
            else "no C++ compiler found (set CXX or install g++)"
        )
    if home is not None:
        ldflags = (f"-L{libdir}", f"-Wl,-rpath,{libdir}", "-lxpurt", *lib.ldflags)
        return Toolchain(cc, lib.cflags, ldflags, (*includes, str(home / "include")))
    return Toolchain(cc, lib.cflags, lib.ldflags, includes)
