"""Test scaffold only: an L3 store that takes every write and never returns a hit.

Loaded by SGLang's own `dynamic` storage backend (`--hicache-storage-backend dynamic` with
module_path tests.server.blackhole_store, class_name BlackHoleStore; the lane puts the
checkout on the server's path). It is SGLang's file backend (HiCacheFile: pages written as
files under SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR) whose existence query always says no,
so SGLang writes L3, queries it, finds nothing and never reads back: the dead L3 tier of
SGLang users' reports (a store written and never read), made on purpose for the tier check.
"""

from __future__ import annotations

from typing import Any

from sglang.srt.mem_cache.hicache_storage import HiCacheFile


class BlackHoleStore(HiCacheFile):
    def __init__(self, storage_config: Any, kwargs: Any = None) -> None:
        # The dynamic factory calls backend_class(storage_config, kwargs); the folder comes
        # from SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR, as for the file backend.
        super().__init__(storage_config)

    def exists(self, key: str) -> bool:
        return False
