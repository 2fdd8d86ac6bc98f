"""Test-only stand-ins for the GPU-only modules that importing sglang pulls in.

sglang 0.5.20 imports triton, torchvision and sgl_kernel at module level, even on code paths
that never launch a kernel. Their wheels are CUDA builds that fail (or are hundreds of MB) on a
CPU test machine, so the heavy lane registers permissive stand-ins under those names before
importing sglang. A stand-in accepts any attribute, call, subscription or subclassing and
does nothing; decorators (``@triton.jit``, ``@triton.autotune(...)``) hand back the decorated
function unchanged. Anything that would actually *run* a GPU kernel through one of these is a
bug in the test, and the tests never take such a path.

Only names that are not importable for real get a stand-in, and never in the xputune package.
With XPUTUNE_STANDIN_CALLS=<dir> set, every call of a stand-in (other than bare decorator use)
appends "import <name>" (made while a module is being imported: decorator factories such as
triton.autotune(...) or triton.Config(...)) or "run <name>" (any other time) to
<dir>/calls-<pid>.txt, so the server lane can prove that a serving server never ran one.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import Any

# Top-level names that are GPU-only here, with the version string their stand-in reports.
GPU_ONLY: dict[str, str] = {
    "triton": "3.5.1",
    "torchvision": "0.28.0",
    "sgl_kernel": "0.4.7",
}


class _StandInMeta(type):
    """Metaclass of every stand-in object: attribute access, calls and [] all succeed."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stand_in(f"{cls.__qualname__}.{name}")

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


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _stand_in(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []  # every stand-in is a package, so any submodule imports
        module.__version__ = GPU_ONLY[spec.name.partition(".")[0]]
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


def _importable(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
