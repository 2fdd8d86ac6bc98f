"""Build C sources from kernels/ on demand into a per-user cache and load them with ctypes.

Which libraries there are, and which of them come built with the wheel, is native.py's table;
load_native() loads a library by its name there: the one installed inside the package when
there is one (no compiler needed), else one built here on first use (a checkout, an editable
install, the CUDA and XPU backends that need the box's toolkit).

No torch C++ ABI is involved: each library exposes a small C ABI, so one build serves every
Python and torch version. The cache key is a hash of the source, the compiler and its flags, so
an edited source or another compiler rebuilds, and concurrent first uses do not race (the
library is built under a temporary name and renamed into place). nvcc works as the compiler too:
position-independent code is then asked for through -Xcompiler.

xputune runs as root and a library's constructor runs as whoever loads it, so a library is
loaded only from the checked cache folder of host/usercache.py (this user's, 0700, nothing
above it writable by others), and only after its descriptor, opened without following links,
shows a regular file of this user with one link that nobody else may write. dlopen then gets
/proc/self/fd/N, the very inode checked, so no path can be swapped in between. A library that
fails the check is rebuilt (one warning); a refused cache folder means building into a private
temporary folder for this run. A library installed with the wheel gets the same checks (root's
files trusted too: root installs packages) and is loaded the same way, through its descriptor;
a refused one is passed over with one warning and built on first use.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from xputune import trail
from xputune.errors import UnsupportedError, XputuneError
from xputune.host import usercache
from xputune.kernels import native

_loaded: dict[str, ctypes.CDLL] = {}
#: Descriptors libraries were loaded through, kept open: dlopen knows a library by the name it
#: was given, so a reused /proc/self/fd/N would hand back the library loaded before.
_held: list[int] = []
#: The largest library loaded (a CUDA fatbin for many architectures stays far below).
LIBRARY_CAP = 1 << 30
_KIND = "kernels"


def source_dir() -> Path:
    """kernels/ of a checkout, or the copy shipped inside an installed package."""
    found = native.source_dir()
    if found is None:
        raise UnsupportedError("kernel sources not found (no kernels/, no xputune/kernels_src/)")
    return found


def cache_dir() -> usercache.Folder:
    """The checked kernels cache, or (it was refused: one warning) a private folder."""
    found = usercache.folder(_KIND) or usercache.private(_KIND)
    if found is None:
        raise UnsupportedError("no folder to build kernels in that only this user can write")
    return found


def compiler() -> str:
    cc = native.c_compiler()
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
    key = native.digest(src_dir, sources, (cc, *cflags, *ldflags, *include_dirs))
    folder = cache_dir()
    target = f"lib{name}-{key}.so"
    if not force:
        fd = usercache.open_entry(folder, target, LIBRARY_CAP)  # refused: warned, rebuilt
        if fd is not None:
            os.close(fd)
            return Path(folder.path, target)
    tmp = f".{name}-{secrets.token_hex(8)}.so"
    try:  # made here (O_EXCL, no link followed) so the compiler writes a name that is ours
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                         dir_fd=folder.fd))  # fmt: skip
    except OSError as exc:
        raise UnsupportedError(f"building {name} failed: {folder.path}: {exc.strerror}") from exc
    pic = ["-Xcompiler", "-fPIC"] if Path(cc).name.startswith("nvcc") else ["-fPIC"]
    cmd = [
        cc,
        "-shared",
        *pic,
        *cflags,
        *(f"-I{d}" for d in (str(src_dir), *include_dirs)),
        *map(str, paths),
        "-o",
        os.path.join(folder.path, tmp),
        *ldflags,
    ]
    try:
        try:
            proc = trail.run(cmd, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise UnsupportedError(f"building {name} failed: cannot run {cc}: {exc}") from exc
        if proc.returncode != 0:
            raise UnsupportedError(f"building {name} failed: {_first_error(proc.stderr)}")
        try:
            _seal(folder, tmp, name)
            os.replace(tmp, target, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
        except OSError as exc:
            where = os.path.join(folder.path, target)
            raise UnsupportedError(f"building {name} failed: {where}: {exc.strerror}") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder.fd)
        raise
    return Path(folder.path, target)


def _seal(folder: usercache.Folder, tmp: str, name: str) -> None:
    """The compiler's output made 0700 whatever the umask, and on disk before it is renamed in."""
    fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder.fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsupportedError(f"building {name} failed: the output is not a regular file")
        os.fchmod(fd, 0o700)
        os.fsync(fd)
    finally:
        os.close(fd)


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
        lib = load_library(build(name, sources, **kwargs))  # type: ignore[arg-type]
        _loaded[name] = lib
    return lib


def load_library(path: Path) -> ctypes.CDLL:
    """dlopen a library build() made, through a descriptor checked as the module says.

    Without /proc (no /proc/self/fd to dlopen), the checked path itself is loaded: its folder
    and every folder above were just found writable by nobody but root and this user.
    """
    folder = usercache.checked(str(path.parent))
    fd = None if folder is None else usercache.open_entry(folder, path.name, LIBRARY_CAP)
    if fd is None:
        raise UnsupportedError(f"{path}: not loaded (missing, or not a library this user built)")
    return _dlopen(fd, path)


def _dlopen(fd: int, path: Path) -> ctypes.CDLL:
    """dlopen the inode `fd` was checked on, through /proc/self/fd/N (held open for good)."""
    by_fd = f"/proc/self/fd/{fd}"
    if not os.path.exists(by_fd):
        os.close(fd)
        return ctypes.CDLL(str(path))
    _held.append(fd)
    return ctypes.CDLL(by_fd)


# -- the libraries of native.py's table ----------------------------------------------------------


def packaged(name: str) -> Path | None:
    """Library `name` as built with the wheel from the sources shipped beside it, if installed."""
    try:
        src_dir = source_dir()
    except UnsupportedError:  # no sources shipped: nothing to check a library against
        return None
    return native.packaged(native.LIBRARIES[name], src_dir)


def build_native(name: str, force: bool = False) -> Path:
    """Build library `name` of native.py's table into the cache with this box's toolchain."""
    lib = native.LIBRARIES[name]
    src_dir = source_dir()
    chain = native.toolchain(lib, src_dir)
    if isinstance(chain, str):
        raise UnsupportedError(chain)
    return build(
        name, list(lib.sources), cflags=chain.cflags, ldflags=chain.ldflags,
        include_dirs=chain.include_dirs, cc=chain.cc, force=force,
    )  # fmt: skip


def _installed(name: str) -> tuple[Path, int] | None:
    """The library built with the wheel and a descriptor on it, when it may be trusted.

    Installed is not trusted by itself: a libs/ folder left group-writable (a umask, a
    careless chmod) would let another user's library run as root while the Python code
    beside it is still root's. So the installed library gets the cache's checks
    (usercache.open_installed); a refused one is passed over (one warning) and the library
    is built on first use, as where none is installed.
    """
    path = packaged(name)
    if path is None:
        return None
    fd = usercache.open_installed(str(path), LIBRARY_CAP, "built on first use instead")
    return None if fd is None else (path, fd)


def load_native(name: str) -> ctypes.CDLL:
    """Library `name` of native.py's table, loaded once per process.

    The one installed inside the package is loaded through the descriptor it was checked on
    (_installed); without a trusted one, it is built on first use and loaded through the
    checked cache as the module docstring says.
    """
    lib = _loaded.get(name)
    if lib is None:
        found = _installed(name)
        if found is None:
            lib = load_library(build_native(name))
        else:
            try:
                lib = _dlopen(found[1], found[0])
            except OSError as exc:
                raise UnsupportedError(f"{found[0]}: cannot be loaded: {exc}") from None
        _loaded[name] = lib
    return lib


@dataclass(frozen=True)
class Outcome:
    """What `xputune kernels build` did for one library."""

    title: str
    status: str  # "installed" (built with the wheel), "built", "skipped" or "failed"
    detail: str  # a path, or why not


def build_all(force: bool = False) -> list[Outcome]:
    """Every library of the table: the installed ones as they are, the others built here.

    A library whose toolkit (nvcc, XRE) is missing is skipped; one that fails to build (no
    compiler, a compiler error) is reported as failed with the first error line.
    """
    out = []
    for lib in native.LIBRARIES.values():
        found = _installed(lib.name)
        if found is not None:
            os.close(found[1])
            out.append(Outcome(lib.title, "installed", str(found[0])))
            continue
        if lib.toolkit is not None:
            chain = native.toolchain(lib, source_dir())
            if isinstance(chain, str):
                out.append(Outcome(lib.title, "skipped", chain))
                continue
        try:
            built = build_native(lib.name, force=force)
        except XputuneError as exc:
            out.append(Outcome(lib.title, "failed", str(exc)))
        else:
            out.append(Outcome(lib.title, "built", str(built)))
    return out
