"""Test-only stand-ins for the GPU-only modules that importing sglang pulls in.

sglang (0.5.20, 0.5.23) imports triton, torchvision and sgl_kernel at module level, even on paths
that never launch a kernel. Their wheels are CUDA builds that fail (or are hundreds of MB) on a
CPU test machine, so the heavy lane registers permissive stand-ins under those names before
importing sglang. A stand-in accepts any attribute, call, subscription or subclassing and
does nothing; decorators (``@triton.jit``, ``@triton.autotune(...)``) hand back the decorated
function unchanged. Anything that would actually *run* a GPU kernel through one of these is a
bug in the test, and the tests never take such a path.

Real triton without a GPU driver raises RuntimeError when asked for its active driver
(``triton.runtime.driver.active`` / ``.default``); sglang 0.5.23's
kernels/ops/attention/fla/utils.py asks for it at import and falls back to the CPU only when
that raises, so the triton stand-in raises there too (for every release) instead of handing back
a stand-in; that is an attribute access, not a call, and is not recorded. Each stand-in reports
the version that the installed sglang release's own GPU install pairs with (VERSIONS).

Only names that are not importable for real get a stand-in, and never in the xputune package.
With XPUTUNE_STANDIN_CALLS=<dir> set, every call of a stand-in (other than bare decorator use)
appends "import <name>" (made while a module is being imported: decorator factories such as
triton.autotune(...) or triton.Config(...)) or "run <name>" (any other time) to
<dir>/calls-<pid>.txt, so the server lane can prove that a serving server never ran one.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
import types
from typing import Any

# Top-level names that are GPU-only here.
GPU_ONLY: tuple[str, ...] = ("triton", "torchvision", "sgl_kernel")
# The version each stand-in reports, per sglang release: what that release's GPU install pairs
# with (0.5.23: torch 2.14.1 -> triton 3.8.0, torchvision 0.29.1; sglang-kernel==0.4.10 pinned).
VERSIONS: dict[str, dict[str, str]] = {
    "0.5.20": {"triton": "3.5.1", "torchvision": "0.28.0", "sgl_kernel": "0.4.7"},
    "0.5.23": {"triton": "3.8.0", "torchvision": "0.29.1", "sgl_kernel": "0.4.10"},
}
# Stand-in attributes that raise on access as the real module does on a host without a GPU
# (triton/runtime/driver.py: DriverConfig.active and .default find no active driver).
RAISES: dict[str, str] = {
    "triton.runtime.driver.active": "0 active drivers ([]). There should only be one.",
    "triton.runtime.driver.default": "0 active drivers ([]). There should only be one.",
}


class _StandInMeta(type):
    """Metaclass of every stand-in object: attribute access (but RAISES), calls and [] succeed."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _attribute(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # bare decorator use: @triton.jit
        _record(cls.__qualname__)
        return _stand_in(f"{cls.__qualname__}()")

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __iter__(cls) -> Any:
        return iter(())

    def __bool__(cls) -> bool:
        return False


def _importing() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _record(name: str) -> None:
    directory = os.environ.get("XPUTUNE_STANDIN_CALLS")
    if not directory:
        return
    phase = "import" if _importing() else "run"
    try:
        with open(os.path.join(directory, f"calls-{os.getpid()}.txt"), "a") as fh:
            fh.write(f"{phase} {name}\n")
    except OSError:
        pass


def _stand_in(name: str) -> type:
    return _StandInMeta(name, (), {"__module__": "gpu_standins"})


def _attribute(name: str) -> type:
    """The stand-in for the dotted `name`, or the real module's error where it raises."""
    if name in RAISES:
        raise RuntimeError(RAISES[name])
    return _stand_in(name)


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _attribute(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []  # every stand-in is a package, so any submodule imports
        module.__version__ = versions()[spec.name.partition(".")[0]]
        module.__xputune_stand_in__ = True
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, roots: set[str]) -> None:
        self.roots = roots

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.partition(".")[0] not in self.roots:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)


def install() -> list[str]:
    """Register stand-ins for every GPU-only name that cannot be imported; returns those names."""
    for finder in sys.meta_path:
        if isinstance(finder, _Finder):
            return sorted(finder.roots)
    missing = {name for name in GPU_ONLY if not _importable(name)}
    if missing:
        sys.meta_path.insert(0, _Finder(missing))
    return sorted(missing)


@functools.cache
def versions() -> dict[str, str]:
    """The stand-ins' versions for the sglang installed beside this interpreter."""
    try:
        return versions_for(importlib.metadata.version("sglang"))
    except importlib.metadata.PackageNotFoundError:
        return versions_for(None)


def versions_for(release: str | None) -> dict[str, str]:
    """The stand-ins' versions for sglang `release`: those of the newest release in VERSIONS
    that is not newer than it (the oldest's when `release` is None or not a version)."""
    try:
        found = None if release is None else _release_key(release)
    except ValueError:
        found = None
    known = sorted(VERSIONS, key=_release_key)
    chosen = known[0]
    for candidate in known:
        if found is not None and _release_key(candidate) <= found:
            chosen = candidate
    return VERSIONS[chosen]


def _release_key(release: str) -> tuple[int, ...]:
    """(0, 5, 23) for "0.5.23" or "0.5.23.post1" (the numeric release segments only)."""
    parts = []
    for part in release.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    if not parts:
        raise ValueError(release)
    return tuple(parts)


def _importable(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
