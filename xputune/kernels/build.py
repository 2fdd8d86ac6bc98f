"""Build C sources from kernels/ on demand into a per-user cache and load them with ctypes.

No torch C++ ABI is involved: each library exposes a small C ABI, so one build serves every
Python and torch version. The cache key is a hash of the source, the compiler and its flags, so
an edited source or another compiler rebuilds, and concurrent first uses do not race (the
library is built under a temporary name and renamed into place). nvcc works as the compiler too:
position-independent code is then asked for through -Xcompiler.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from xputune.errors import UnsupportedError
from xputune.host import usercache

_PACKAGE_DIR = Path(__file__).resolve().parent.parent
_loaded: dict[str, ctypes.CDLL] = {}


def source_dir() -> Path:
    """kernels/ of a checkout, or the copy shipped inside an installed package."""
    for candidate in (_PACKAGE_DIR / "kernels_src", _PACKAGE_DIR.parent / "kernels"):
        if candidate.is_dir():
            return candidate
    raise UnsupportedError("kernel sources not found (neither kernels/ nor xputune/kernels_src/)")


def cache_dir() -> Path:
    path = Path(usercache.base_dir()) / "kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise UnsupportedError("no C compiler found (set CC or install gcc)")
    return cc


def build(
    name: str,
    sources: list[str],
    *,
    cflags: tuple[str, ...] = ("-O3", "-std=c11"),
    ldflags: tuple[str, ...] = ("-pthread",),
    include_dirs: tuple[str, ...] = (),
    cc: str | None = None,
    force: bool = False,
) -> Path:
    """Compile `sources` (names inside kernels/) into a shared library; return its path."""
    src_dir = source_dir()
    cc = cc or compiler()
    paths = [src_dir / s for s in sources]
    digest = hashlib.sha256()
    for part in (cc, *cflags, *ldflags, *include_dirs):
        digest.update(part.encode() + b"\0")
    for path in sorted(paths) + sorted(src_dir.rglob("*.h")):
        digest.update(str(path.relative_to(src_dir)).encode() + b"\0" + path.read_bytes())
    target = cache_dir() / f"lib{name}-{digest.hexdigest()[:16]}.so"
    if target.exists() and not force:
        return target
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".so", dir=target.parent)
    os.close(fd)
    pic = ["-Xcompiler", "-fPIC"] if Path(cc).name.startswith("nvcc") else ["-fPIC"]
    cmd = [
        cc,
        "-shared",
        *pic,
        *cflags,
        *(f"-I{d}" for d in (str(src_dir), *include_dirs)),
        *map(str, paths),
        "-o",
        tmp,
        *ldflags,
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        os.unlink(tmp)
        raise UnsupportedError(f"building {name} failed: cannot run {cc}: {exc}") from exc
    if proc.returncode != 0:
        os.unlink(tmp)
        raise UnsupportedError(f"building {name} failed: {_first_error(proc.stderr)}")
    os.replace(tmp, target)
    return target


def _first_error(stderr: str) -> str:
    """The compiler's first line that names an error, not its "In file included from" preamble."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower():
            return line
    return lines[0] if lines else "unknown error"


def load(name: str, sources: list[str], **kwargs: object) -> ctypes.CDLL:
    """Build if needed and load once per process."""
    lib = _loaded.get(name)
    if lib is None:
        lib = ctypes.CDLL(str(build(name, sources, **kwargs)))  # type: ignore[arg-type]
        _loaded[name] = lib
    return lib
