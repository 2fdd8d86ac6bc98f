"""Ghost list: chained page hashes, proven-reuse prefix, bounded recency."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.hicache.ghost import GhostList, chain_page_hashes, root_hash


def test_hash_encodes_content_and_position():
    a = chain_page_hashes([1, 2, 3, 4, 1, 2, 3, 4], page_size=4)
    assert len(a) == 2
    assert a[0] != a[1]  # same tokens, different depth
    assert chain_page_hashes([1, 2, 3, 4], 4) == a[:1]
    assert chain_page_hashes([9, 9, 9, 9, 1, 2, 3, 4], 4)[1] != a[1]  # other parent


def test_partial_trailing_page_is_not_hashed():
    assert len(chain_page_hashes(list(range(10)), 4)) == 2


def test_extra_key_separates_namespaces():
    tokens = list(range(8))
    assert chain_page_hashes(tokens, 4, root_hash("lora-a")) != chain_page_hashes(tokens, 4)
    assert root_hash(None) == 0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 2**31 - 1), min_size=4, max_size=64))
def test_prefix_hashes_are_a_prefix(tokens):
    full = chain_page_hashes(tokens, 4)
    cut = len(tokens) // 2
    assert chain_page_hashes(tokens[:cut], 4) == full[: cut // 4]


def test_proven_prefix_is_deepest_evicted_page():
    ghost = GhostList(100)
    old = chain_page_hashes(list(range(32)), 4)  # 8 pages, evicted without host copy
    ghost.add_many(old[:5])
    new = chain_page_hashes(list(range(24)) + [7] * 16, 4)  # shares 6 pages, then diverges
    assert ghost.proven_prefix(new) == 5
    assert ghost.proven_prefix(chain_page_hashes([5] * 16, 4)) == 0
    assert (ghost.hits, ghost.lookups) == (1, 2)


def test_capacity_forgets_oldest_and_readd_refreshes():
    ghost = GhostList(3)
    for h in (1, 2, 3):
        ghost.add(h)
    ghost.add(1)  # refresh: 2 is now the oldest
    ghost.add(4)
    assert 2 not in ghost
    assert all(h in ghost for h in (1, 3, 4))
    assert len(ghost) == 3
    ghost.discard(3)
    assert 3 not in ghost


def test_capacity_must_be_positive():
    with pytest.raises(ValueError):
        GhostList(0)
