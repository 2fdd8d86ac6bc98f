"""Token ids from block ids: one block id, always the same tokens.

A trace gives each request's prompt as prefix-chained block ids, not text. A replay must send
prompts whose shared prefixes are real token prefixes, or the server's radix cache finds none
of the reuse the trace holds. So each block id is turned into `n` token ids by a fixed hash of
(id, position): two requests that share their first k block ids share the tokens of those k
blocks exactly, whatever else they hold. A block carrying fewer tokens (a request's partial
last block) takes the first ones of the same sequence, so a prefix stays a prefix.

Tokens are drawn from [lo, hi): the caller keeps the range inside the model's vocabulary (an
id past it crashes an SGLang server on its first prefill, as measured on 0.5.20). Two
different blocks that follow a common prefix begin with the same token once in (hi - lo)
draws; the server then finds a common prefix one token longer than the trace says.

The input tokens a trace puts past a request's blocks (never cached by anyone) get a pseudo
block id of their own from the request's line number, so no two requests share them.

A salt (a replay's phase, measure/phases.py) maps every block id, tails included, through
its own bijection (x XOR a 64-bit key drawn from the salt): the same requests, with the same
prefixes shared, in tokens no other salt sends. Salt 0 is the identity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

_MASK = (1 << 64) - 1
_TAIL_SALT = 0x7A11_5EED_0DD5_EEDE  # pseudo block ids of tails never meet real ones by design


@dataclass(frozen=True)
class TokenRange:
    """Token ids [lo, hi) a replay may send."""

    lo: int
    hi: int

    def __post_init__(self) -> None:
        if self.lo < 0 or self.hi - self.lo < 2:
            raise ValueError(f"token range {self.lo}:{self.hi} needs 0 <= lo and hi - lo >= 2")

    @property
    def span(self) -> int:
        return self.hi - self.lo


def _splitmix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over uint64 arrays (wrapping arithmetic)."""
    import numpy as np

    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def block_tokens(ids: Sequence[int] | np.ndarray, n: int, vocab: TokenRange) -> np.ndarray:
    """The n tokens of each block id: an int64 array of shape (len(ids), n).

    Row i depends on ids[i] and n alone, and its first t entries are those of any n >= t.
    """
    import numpy as np

    if n < 1:
        raise ValueError(f"tokens per block must be >= 1, got {n}")
    keys = _splitmix(np.asarray(ids, dtype=np.uint64))
    with np.errstate(over="ignore"):
        grid = keys[:, None] + np.arange(n, dtype=np.uint64)[None, :]
    mixed = _splitmix(grid)
    return (mixed % np.uint64(vocab.span)).astype(np.int64) + vocab.lo


def tail_id(line: int) -> int:
    """The pseudo block id of the tokens past a request's blocks (unique per trace line)."""
    return (line * 0x100000001B3 + _TAIL_SALT) & _MASK


def salt_key(salt: int) -> int:
    """The 64-bit key block ids are XORed with under `salt` (0 for salt 0)."""
    if salt == 0:
        return 0
    import numpy as np

    return int(_splitmix(np.asarray([salt & _MASK], dtype=np.uint64))[0]) or 1


def prompt_tokens(
    ids: Sequence[int],
    tokens: Sequence[int],
    n: int,
    tail: int,
    line: int,
    vocab: TokenRange,
    salt: int = 0,
) -> np.ndarray:
    """A whole prompt: block i contributes the first tokens[i] (<= n) of its sequence, then
    `tail` tokens unique to trace line `line`; every block id under `salt` (salt_key)."""
    import numpy as np

    key = salt_key(salt)
    parts = []
    if len(ids):
        keyed = [(i & _MASK) ^ key for i in ids] if key else ids
        grid = block_tokens(keyed, n, vocab)
        counts = np.asarray(tokens, dtype=np.int64)
        if (counts < 1).any() or (counts > n).any():
            raise ValueError(f"each block carries 1..{n} tokens")
        if (counts == n).all():
            parts.append(grid.reshape(-1))
        else:
            keep = np.arange(n)[None, :] < counts[:, None]
            parts.append(grid[keep])
    if tail > 0:
        rows = -(-tail // n)
        seq = block_tokens([tail_id(line) ^ key], rows * n, vocab).reshape(-1)
        parts.append(seq[:tail])
    if not parts:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate(parts)
