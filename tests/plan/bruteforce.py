"""An independent prefix-cache simulator: a radix cache that evicts its least recently used leaf.

This is the definition the one-pass curve must match. It keeps a set of cached blocks with a
parent link each; a request's hit is the longest run of its blocks (root first) found cached;
then every block of the request gets the request's time (inserted if missing) and, while more
blocks are cached than fit, the leaf (a cached block without cached children) with the oldest
time goes, the deepest first on equal times. Written for clarity, not speed.
"""

from __future__ import annotations


def simulate(requests: list[tuple[list[int], list[int]]], capacity_blocks: int) -> int:
    """Hit tokens of the whole trace with room for `capacity_blocks` blocks."""
    time: dict[int, int] = {}  # cached block -> last request index
    depth: dict[int, int] = {}
    parent: dict[int, int | None] = {}
    children: dict[int, int] = {}  # cached block -> number of cached children
    hit_tokens = 0
    for now, (blocks, tokens) in enumerate(requests):
        for block, tok in zip(blocks, tokens, strict=True):
            if block not in time:
                break
            hit_tokens += tok
        for i, block in enumerate(blocks):
            if block not in time:
                up = blocks[i - 1] if i else None
                parent[block] = up
                depth[block] = i
                children[block] = 0
                if up is not None:
                    children[up] += 1
            time[block] = now
        while len(time) > capacity_blocks:
            leaves = [b for b in time if children[b] == 0]
            victim = min(leaves, key=lambda b: (time[b], -depth[b]))
            del time[victim]
            up = parent.pop(victim)
            if up is not None:
                children[up] -= 1
    return hit_tokens
