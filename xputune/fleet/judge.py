"""What metrics and labels need from a host: its topology, `check`'s rows, its name.

`check` itself lives in tune/ (engine.select / context / check); this only calls it and keeps
the rows in the shape of `check --format json`, so a live judgement and a check file read the
same downstream.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from xputune.host import HostView
from xputune.topology.model import Topology

_SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tgz", ".tbz2", ".txz", ".tar")


@dataclass(frozen=True)
class Judgement:
    """A check of a host against a profile: rows as `check --format json` writes them."""

    profile: str
    how: str  # given, recommended, fallback
    rows: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    @property
    def holds(self) -> bool:
        return all(r["verdict"] == "ok" for r in self.rows)

    def by_knob(self) -> dict[str, dict[str, int]]:
        """knob -> verdict -> number of places (a knob lives in one place per PCIe port)."""
        out: dict[str, dict[str, int]] = {}
        for row in self.rows:
            verdicts = out.setdefault(row["knob"], {})
            verdicts[row["verdict"]] = verdicts.get(row["verdict"], 0) + 1
        return out


def judge(view: HostView, topology: Topology, profile: str | None = None) -> Judgement:
    """check's rows for this host against `profile` (default: the recommended one)."""
    from xputune.tune import engine

    selection = engine.select(topology, profile)
    rows = engine.check(engine.context(view, topology, selection), selection)
    return Judgement(selection.profile.name, selection.how, tuple(r.as_dict() for r in rows))


def host_name(view: HostView) -> str:
    """The host's name: its hostname where the tree has one, else the recording's name."""
    name = (view.read_optional("/proc/sys/kernel/hostname") or "").strip()
    if name and view.live:
        return name
    if name and name not in ("localhost", "(none)", "scrubbed"):
        return name
    if view.live:
        return os.uname().nodename
    base = os.path.basename(view.label.rstrip("/")) or view.label
    for suffix in _SUFFIXES:
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base
