"""Running engine-level applies and rollbacks on a tree, the way the CLI does."""

from __future__ import annotations

from typing import Any

from xputune.host.view import DirView
from xputune.tune import engine


def apply(view: DirView, profile: str | None = "hygon-p800", topology=None, **kwargs: Any):
    """engine.apply as the CLI calls it; pass `topology` to skip re-probing in loops."""
    options = {k: kwargs.pop(k) for k in ("only", "skip", "overrides") if k in kwargs}
    topology = topology or engine.discover(view)
    selection = engine.select(
        topology, profile, options.get("overrides"), options.get("only"), options.get("skip")
    )
    ctx = engine.context(view, topology, selection)
    return engine.apply(ctx, selection, ["apply", "test"], **kwargs)


def check(view: DirView, profile: str | None = "hygon-p800"):
    topology = engine.discover(view)
    selection = engine.select(topology, profile)
    return engine.check(engine.context(view, topology, selection), selection)


def bit_diff(before: dict[str, bytes], after: dict[str, bytes]) -> dict[str, list[tuple[int, int]]]:
    """file -> [(byte offset, xor)] for every byte that differs."""
    assert before.keys() == after.keys(), before.keys() ^ after.keys()
    out = {}
    for path in before:
        a, b = before[path], after[path]
        assert len(a) == len(b), path
        diffs = [(i, a[i] ^ b[i]) for i in range(len(a)) if a[i] != b[i]]
        if diffs:
            out[path] = diffs
    return out
