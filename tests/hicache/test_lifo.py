"""LIFO slot allocator: reuse order, page integrity, misuse detection, decision digest."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.hicache.lifo import AllocatorError, LifoSlotAllocator


def test_fresh_pool_hands_out_ascending_contiguous_slots():
    alloc = LifoSlotAllocator(64, page_size=4)
    assert alloc.alloc(8).tolist() == list(range(8))
    assert alloc.alloc(4).tolist() == list(range(8, 12))
    assert alloc.available_size() == 64 - 12


def test_most_recently_freed_page_is_reused_first():
    alloc = LifoSlotAllocator(64, page_size=4)
    a, b, c = alloc.alloc(4), alloc.alloc(4), alloc.alloc(4)
    alloc.free(a)
    alloc.free(c)  # freed last
    assert alloc.alloc(4).tolist() == c.tolist()
    assert alloc.alloc(4).tolist() == a.tolist()
    assert not np.intersect1d(b, alloc.alloc(4)).size


def test_group_freed_together_comes_back_in_its_own_order():
    alloc = LifoSlotAllocator(64, page_size=4)
    first = alloc.alloc(16)
    alloc.free(first)
    assert alloc.alloc(16).tolist() == first.tolist()


def test_fifo_would_differ():
    """The reuse order is the point: a FIFO pool would hand out untouched pages first."""
    alloc = LifoSlotAllocator(32, page_size=1)
    x = alloc.alloc(4)
    alloc.free(x[2:3])
    assert alloc.alloc(1).tolist() == [2]


def test_exhaustion_returns_none_without_side_effects():
    alloc = LifoSlotAllocator(8, page_size=4)
    alloc.alloc(4)
    assert alloc.alloc(8) is None
    assert alloc.available_size() == 4


@pytest.mark.parametrize(
    "bad",
    [
        lambda a, s: (a.free(s), a.free(s)),  # double free
        lambda a, s: a.free(np.array([40, 41, 42, 43])),  # never allocated
        lambda a, s: a.free(s[:2]),  # half a page
        lambda a, s: a.free(np.array([1, 0, 2, 3])),  # page slots out of order
        lambda a, s: a.free(np.array([64, 65, 66, 67])),  # out of range
        lambda a, s: a.free(np.concatenate([s[:4], s[:4]])),  # same page twice in one call
    ],
)
def test_misuse_is_an_error(bad):
    alloc = LifoSlotAllocator(64, page_size=4)
    slots = alloc.alloc(8)
    with pytest.raises(AllocatorError):
        bad(alloc, slots)


def test_corrupted_free_list_is_caught_as_double_alloc():
    alloc = LifoSlotAllocator(16, page_size=4)
    alloc.alloc(4)
    alloc._stack[alloc._top - 1] = 0  # simulate a bug that left page 0 on the free stack
    with pytest.raises(AllocatorError, match="still allocated"):
        alloc.alloc(4)


def test_need_size_must_be_whole_pages():
    with pytest.raises(ValueError):
        LifoSlotAllocator(64, page_size=4).alloc(6)
    with pytest.raises(ValueError):
        LifoSlotAllocator(10, page_size=4)


def _run(ops, digest=True):
    alloc = LifoSlotAllocator(64, page_size=4, track_digest=digest)
    held = []
    for op in ops:
        if op > 0:
            got = alloc.alloc(4 * op)
            if got is not None:
                held.append(got)
        elif held:
            alloc.free(held.pop(op % len(held)))
    return alloc


def test_digest_is_deterministic_and_order_sensitive():
    ops = [2, 1, -1, 3, -2, 1]
    assert _run(ops).digest == _run(ops).digest
    assert _run(ops).digest != _run([2, 1, -1, 3, -1, 1]).digest
    assert _run(ops, digest=False).digest == 0


def test_observer_sees_every_decision():
    seen = []
    alloc = LifoSlotAllocator(16, page_size=4, observer=lambda n, d: seen.append((n, d)))
    alloc.free(alloc.alloc(8))
    assert [n for n, _ in seen] == [1, 2]
    assert seen[-1][1] == alloc.digest != 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=-6, max_value=4), max_size=60))
def test_matches_a_model_of_free_and_used_slots(ops):
    """No slot is ever handed out twice, and free + used always partition the pool."""
    alloc = LifoSlotAllocator(48, page_size=4)
    used: set[int] = set()
    held: list[np.ndarray] = []
    last_freed: np.ndarray | None = None
    for op in ops:
        if op > 0:
            got = alloc.alloc(4 * op)
            if got is None:
                assert alloc.available_size() < 4 * op
                continue
            assert not used & set(got.tolist())
            if last_freed is not None and op * 4 == len(last_freed):
                assert got.tolist() == last_freed.tolist()
            used |= set(got.tolist())
            held.append(got)
            last_freed = None
        elif held:
            slots = held.pop(op % len(held))
            alloc.free(slots)
            used -= set(slots.tolist())
            last_freed = slots
        assert alloc.available_size() == 48 - len(used)
