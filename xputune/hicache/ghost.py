"""Ghost list: remember pages evicted from L1 without a host copy, to prove reuse later.

The field report's fix (docs/field-report.md, 2.6).

With write_through_selective counting distinct requests, a prefix whose reuse gap is longer than
its stay in L1 is evicted (hit count reset) before its second request arrives, so it would never
be backed up. The ghost list keeps the page hashes of such evictions in a bounded map; when the
same prefix is inserted again, the deepest page found in the list marks the longest prefix that
has now provably been used twice, and only that prefix is written to L2.

Page hashes are chained from the root (hash of parent hash + page tokens), so one 64-bit value
names both the content and the position of a page: a hit on page i proves pages 0..i recurred.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

ROOT_HASH = 0


def root_hash(extra_key: str | bytes | None = None) -> int:
    """Chain root; an extra key (LoRA id, cache salt) keeps separate namespaces apart."""
    if extra_key is None:
        return ROOT_HASH
    data = extra_key.encode() if isinstance(extra_key, str) else extra_key
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def chain_page_hashes(tokens: Any, page_size: int, parent: int = ROOT_HASH) -> list[int]:
    """64-bit hash of every full page of `tokens`, each folding in all pages before it."""
    import numpy as np

    ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
    out: list[int] = []
    h = parent
    for start in range(0, len(ids) - page_size + 1, page_size):
        d = hashlib.blake2b(h.to_bytes(8, "little"), digest_size=8)
        d.update(ids[start : start + page_size].tobytes())
        h = int.from_bytes(d.digest(), "little")
        out.append(h)
    return out


class GhostList:
    """Bounded, recency-ordered set of 64-bit page hashes; add and lookup are O(1).

    When full, the entry evicted longest ago is forgotten first; re-adding a hash refreshes it.
    """

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"ghost list capacity must be positive, got {capacity}")
        self.capacity = capacity
        self._entries: OrderedDict[int, None] = OrderedDict()
        self.hits = 0
        self.lookups = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, page_hash: int) -> bool:
        return page_hash in self._entries

    def add(self, page_hash: int) -> None:
        """Record one page evicted from L1 with no host copy."""
        entries = self._entries
        if page_hash in entries:
            entries.move_to_end(page_hash)
            return
        entries[page_hash] = None
        if len(entries) > self.capacity:
            entries.popitem(last=False)

    def add_many(self, page_hashes: Iterable[int]) -> None:
        for h in page_hashes:
            self.add(h)

    def discard(self, page_hash: int) -> None:
        self._entries.pop(page_hash, None)

    def proven_prefix(self, page_hashes: Sequence[int]) -> int:
        """Pages of the longest prefix seen before: scan from the deepest page back to the root.

        The first hit ends the scan: because hashes are chained, it vouches for every page
        before it. Returns 0 when no page of the sequence was evicted before.
        """
        self.lookups += 1
        entries = self._entries
        for i in range(len(page_hashes) - 1, -1, -1):
            if page_hashes[i] in entries:
                self.hits += 1
                return i + 1
        return 0
