"""Running engine-level applies and rollbacks on a tree, the way the CLI does."""

from __future__ import annotations

import os
from typing import Any

from xputune.host import pciconfig
from xputune.host.view import DirView
from xputune.tune import engine

SEED_CARD = "0000:24:00.0"  # xpu1 of the seed box, behind switch downstream port 0000:22:01.0


def apply(view: DirView, profile: str | None = "hygon-p800", topology=None, **kwargs: Any):
    """engine.apply as the CLI calls it; pass `topology` to skip re-probing in loops."""
    options = {k: kwargs.pop(k) for k in ("only", "skip", "overrides") if k in kwargs}
    topology = topology or engine.discover(view)
    selection = engine.select(
        topology, profile, options.get("overrides"), options.get("only"), options.get("skip")
    )
    ctx = engine.context(view, topology, selection)
    command = ["apply", *selection.persist_args()]  # what the CLI journals
    return engine.apply(ctx, selection, command, **kwargs)


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


def config_path(root: str, bdf: str) -> str:
    return os.path.join(os.path.realpath(os.path.join(root, "sys/bus/pci/devices", bdf)), "config")


def ido_bits(root: str, bdf: str) -> int:
    """The ID-based ordering bits of a function's Device Control 2, read from the tree."""
    path = config_path(root, bdf)
    with open(path, "rb") as fh:
        data = fh.read()
    cap = pciconfig.decode(data, path).pcie
    assert cap is not None
    off = cap.offset + pciconfig.PCIE_DEVCTL2
    return int.from_bytes(data[off : off + 2], "little") & pciconfig.DEVCTL2_IDO


def clear_ido(root: str, bdf: str) -> None:
    """What a reset does to a function: its ID-based ordering bits read 0 again."""
    path = config_path(root, bdf)
    with open(path, "r+b") as fh:
        data = bytearray(fh.read())
        cap = pciconfig.decode(bytes(data), path).pcie
        assert cap is not None
        off = cap.offset + pciconfig.PCIE_DEVCTL2
        word = int.from_bytes(data[off : off + 2], "little") & ~pciconfig.DEVCTL2_IDO
        fh.seek(off)
        fh.write(word.to_bytes(2, "little"))
