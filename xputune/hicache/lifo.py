"""LIFO free list for host KV slots: the most recently freed page is the next one handed out.

SGLang's host pool keeps free slots FIFO (alloc from the head, freed slots appended at the tail),
so writes wander over the whole pool. Reusing the most recently freed page instead keeps writes
on a few hot, already-faulted and TLB-resident pages: a pure locality win that changes neither
hit rate nor eviction (docs/field-report.md, 2.4).

Slots are token indices as in SGLang (alloc(need) returns `need` int64 slot ids); they move in
whole pages, and a page keeps its slots in order, so a multi-page allocation of neighbouring
pages still merges into long contiguous runs for the copy kernels. Every decision can be folded
into a 64-bit digest, which a TP-shared buffer compares across ranks to catch divergence.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np


class AllocatorError(RuntimeError):
    """A slot was freed twice, freed without being allocated, or handed out twice."""


class LifoSlotAllocator:
    """Page-granular LIFO allocator over `size` token slots.

    The stack holds free page ids with the top at the end: free() pushes, alloc() pops, and a
    group freed together comes back in its own order. A page state array makes double frees and
    double allocations errors, never silent corruption. Not thread-safe: the caller serialises
    (SGLang's host pool wraps alloc/free in its own lock). Slots come back as int64 numpy
    arrays; a plugin hands them to torch with torch.from_numpy without a copy.
    """

    def __init__(
        self,
        size: int,
        page_size: int = 1,
        *,
        track_digest: bool = False,
        observer: Callable[[int, int], None] | None = None,
    ) -> None:
        if page_size <= 0 or size <= 0 or size % page_size:
            raise ValueError(f"size {size} must be a positive multiple of page_size {page_size}")
        self.size = size
        self.page_size = page_size
        self.num_pages = size // page_size
        # Reversed so that the first allocations come out in ascending order 0, 1, 2, ...
        self._stack = np.arange(self.num_pages - 1, -1, -1, dtype=np.int64)
        self._top = self.num_pages
        self._in_use = np.zeros(self.num_pages, dtype=bool)
        self._offsets = np.arange(page_size, dtype=np.int64)
        self.track_digest = track_digest or observer is not None
        self.observer = observer  # called with (decisions, digest) after every decision
        self.decisions = 0
        self.digest = 0

    # -- queries --------------------------------------------------------------------------
    def available_size(self) -> int:
        """Free slots (tokens), as SGLang's host pool reports it."""
        return self._top * self.page_size

    def is_allocated(self, slot: int) -> bool:
        return bool(self._in_use[slot // self.page_size])

    # -- decisions ------------------------------------------------------------------------
    def alloc(self, need_size: int) -> np.ndarray | None:
        """`need_size` slots (a multiple of page_size) from the most recently freed pages.

        None when not enough is free, as SGLang expects (the caller then evicts and retries).
        """
        if need_size % self.page_size:
            raise ValueError(f"need_size {need_size} is not a multiple of page {self.page_size}")
        n = need_size // self.page_size
        if n > self._top:
            return None
        # The stack stores each freed group reversed, so reading the top n backwards gives the
        # pages in the order they were freed (and 0, 1, 2, ... on a fresh pool).
        pages = self._stack[self._top - n : self._top][::-1].copy()
        if self._in_use[pages].any():
            bad = pages[self._in_use[pages]]
            raise AllocatorError(f"pages {bad[:8].tolist()} handed out while still allocated")
        self._top -= n
        self._in_use[pages] = True
        slots = self._slots(pages)
        self._record(b"A", slots)
        return slots

    def free(self, slots: Any) -> int:
        """Return slots (whole pages, any order of pages); the last page freed is reused first."""
        idx = np.asarray(slots, dtype=np.int64).reshape(-1)
        if idx.size == 0:
            return 0
        pages = self._pages_of(idx)
        if len(np.unique(pages)) != len(pages):
            raise AllocatorError("the same page appears twice in one free()")
        if not self._in_use[pages].all():
            bad = pages[~self._in_use[pages]]
            raise AllocatorError(
                f"double free (or free of never-allocated) pages {bad[:8].tolist()}"
            )
        self._in_use[pages] = False
        self._stack[self._top : self._top + len(pages)] = pages[::-1]
        self._top += len(pages)
        self._record(b"F", idx)
        return int(idx.size)

    def clear(self) -> None:
        """Everything free again, in the initial order (SGLang's pool.clear())."""
        self._stack[:] = np.arange(self.num_pages - 1, -1, -1, dtype=np.int64)
        self._top = self.num_pages
        self._in_use[:] = False
        self._record(b"C", np.empty(0, dtype=np.int64))

    # -- helpers --------------------------------------------------------------------------
    def _slots(self, pages: np.ndarray) -> np.ndarray:
        if self.page_size == 1:
            return pages
        return (pages[:, None] * self.page_size + self._offsets).reshape(-1)

    def _pages_of(self, idx: np.ndarray) -> np.ndarray:
        if idx.min() < 0 or idx.max() >= self.size:
            raise AllocatorError(f"slot out of range 0..{self.size - 1}")
        if self.page_size == 1:
            return idx
        if idx.size % self.page_size:
            raise AllocatorError(f"free() of {idx.size} slots is not whole pages")
        rows = idx.reshape(-1, self.page_size)
        if (rows[:, 0] % self.page_size).any() or (rows - rows[:, :1] != self._offsets).any():
            raise AllocatorError("free() slots are not whole pages in slot order")
        return rows[:, 0] // self.page_size

    def _record(self, op: bytes, slots: np.ndarray) -> None:
        self.decisions += 1
        if self.track_digest:
            h = hashlib.blake2b(self.digest.to_bytes(8, "little") + op, digest_size=8)
            h.update(slots.tobytes())
            self.digest = int.from_bytes(h.digest(), "little")
        if self.observer is not None:
            self.observer(self.decisions, self.digest)
