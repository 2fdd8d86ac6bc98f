"""Token synthesis: one block id, always the same tokens; shared block prefixes are token
prefixes; every token inside the range; tails never shared."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.measure.tokens import TokenRange, block_tokens, prompt_tokens, tail_id

IDS = st.integers(min_value=0, max_value=2**64 - 1)
RANGES = st.tuples(st.integers(0, 1000), st.integers(2, 200_000)).map(
    lambda t: TokenRange(t[0], t[0] + t[1])
)


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(IDS, min_size=1, max_size=20), n=st.integers(1, 64), vocab=RANGES)
def test_a_block_id_always_gives_the_same_tokens(ids: list[int], n: int, vocab: TokenRange):
    grid = block_tokens(ids, n, vocab)
    assert grid.shape == (len(ids), n)
    for i, block in enumerate(ids):  # alone, or among others: the same row
        assert (block_tokens([block], n, vocab)[0] == grid[i]).all()
    assert (grid >= vocab.lo).all() and (grid < vocab.hi).all()


@settings(max_examples=100, deadline=None)
@given(ids=st.lists(IDS, min_size=1, max_size=10), n=st.integers(2, 32), vocab=RANGES)
def test_a_shorter_block_is_a_prefix_of_the_longer_one(ids, n, vocab) -> None:
    short = block_tokens(ids, n - 1, vocab)
    assert (block_tokens(ids, n, vocab)[:, : n - 1] == short).all()


@st.composite
def two_requests(draw):
    """Two prompts that share their first k block ids, then differ."""
    n = draw(st.integers(1, 16))
    shared = draw(st.lists(IDS, max_size=8, unique=True))
    rest = draw(st.lists(IDS, min_size=2, max_size=8, unique=True))
    rest = [r for r in rest if r not in shared]
    split = draw(st.integers(0, len(rest)))
    a = shared + rest[:split]
    b = shared + rest[split:]
    ta = [draw(st.integers(1, n)) if i == len(a) - 1 else n for i in range(len(a))]
    tb = [draw(st.integers(1, n)) if i == len(b) - 1 else n for i in range(len(b))]
    tails = draw(st.tuples(st.integers(0, 40), st.integers(0, 40)))
    return n, (a, ta, tails[0]), (b, tb, tails[1]), len(shared)


@settings(max_examples=200, deadline=None)
@given(case=two_requests(), vocab=RANGES)
def test_shared_blocks_are_a_shared_token_prefix(case, vocab: TokenRange) -> None:
    n, (a, ta, tail_a), (b, tb, tail_b), k = case
    pa = prompt_tokens(a, ta, n, tail_a, 1, vocab)
    pb = prompt_tokens(b, tb, n, tail_b, 2, vocab)
    assert len(pa) == sum(ta) + tail_a and len(pb) == sum(tb) + tail_b
    common = min(sum(ta[:k]), sum(tb[:k]))  # a partial last block shortens the shared part
    assert (pa[:common] == pb[:common]).all()
    again = prompt_tokens(a, ta, n, tail_a, 1, vocab)
    assert (again == pa).all()  # deterministic
    assert ((pa >= vocab.lo) & (pa < vocab.hi)).all()


def test_different_blocks_and_tails_do_not_share_tokens() -> None:
    """Distinct blocks (and every request's tail) get unrelated sequences: over 2000 random
    pairs of 16-token blocks from 30000 ids, no two agree on more than a few positions."""
    vocab = TokenRange(10, 30010)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 2**63, size=2000, dtype=np.uint64)
    grid = block_tokens(ids, 16, vocab)
    same = (grid[::2] == grid[1::2]).sum(axis=1)
    assert same.max() <= 2
    tails = [prompt_tokens([], [], 16, 16, line, vocab) for line in range(200)]
    assert len({tuple(t) for t in tails}) == 200
    assert len({tail_id(line) for line in range(10_000)}) == 10_000


def test_a_range_too_narrow_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError):
        TokenRange(5, 6)
    with pytest.raises(ValueError):
        block_tokens([1], 0, TokenRange(0, 10))
    with pytest.raises(ValueError):
        prompt_tokens([1], [5], 4, 0, 1, TokenRange(0, 10))  # 5 tokens in a 4-token block
