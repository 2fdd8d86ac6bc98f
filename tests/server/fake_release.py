"""Test scaffold only: make the newest environment pose as a release the plugin never saw.

With XPUTUNE_TEST_FAKE_RELEASE=<version> (the lane's "moved" scenario), every process the
server starts (through tests/server/standin_site) sees `sglang.__version__` as that version,
and LayerLoadingEvent.wait with its parameter renamed (`layer_index` -> `layer`): the same
behaviour under a changed signature, as a later release could ship. The plugin must then turn
off the one feature whose target that is (the async lanes), say so in one line, and run the
rest; nothing else in SGLang notices, because SGLang calls wait() positionally.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

ENV = "XPUTUNE_TEST_FAKE_RELEASE"
CONTROLLER = "sglang.srt.managers.cache_controller"


def _rename_wait(module: ModuleType) -> None:
    cls = module.LayerLoadingEvent
    original = cls.wait

    def wait(self: Any, layer: int) -> Any:
        return original(self, layer)

    cls.wait = wait


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, patch: Any) -> None:
        self.inner, self.patch = inner, patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        self.patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, version: str) -> None:
        self.patches = {
            "sglang": lambda m: setattr(m, "__version__", version),
            CONTROLLER: _rename_wait,
        }

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        patch = self.patches.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, patch)
                return spec
        return None


def install() -> None:
    version = os.environ.get(ENV)
    if version and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(version))
