"""The watch agent's state file: what it saw and did, for `xputune metrics` and `status`.

`xputune watch` (fleet/watch.py) rewrites <state dir>/watch.json (the folder of the
journal: /var/lib/xputune, or <root>/var/lib/xputune under --root) after every pass,
atomically: start time, passes, events by kind, drift found, re-applies and failures per
knob, the last re-apply (time, result), the places backing off and until when, whether a
rollback paused it, and the profile it held and where it took it from. Counters carry over
when the agent restarts, so Prometheus sees them rise, not reset. Reading it is discovery: a
missing file is no watch, an odd one is a warning and no watch metrics.

It lives here, beside the journal it sits next to, so that tune/status.py (below fleet/) can
read it; fleet/watchstate.py re-exports it for the watch and the metrics.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from xputune.errors import HostError
from xputune.host import HostView

SCHEMA_VERSION = 1
STATE_FILE = "watch.json"
#: The watch agent's own lock in the state directory (one watch per host).
WATCH_LOCK = "watch.lock"
#: Where the file is, as a host path (the state directory of tune/state.py).
STATE_PATH = f"/var/lib/xputune/{STATE_FILE}"
COUNTERS = ("events", "drift", "reapplies", "failures")


@dataclass
class LastApply:
    """The last re-apply the watch attempted."""

    time: float
    success: bool
    changes: int = 0
    error: str | None = None


@dataclass
class Backoff:
    """A place (knob, where) the watch has stopped re-applying until `until`."""

    knob: str
    place: str
    until: float
    delay: float


@dataclass
class WatchState:
    started: float = 0.0
    pid: int = 0
    updated: float = 0.0
    passes: int = 0
    errors: int = 0
    paused: bool = False
    #: The profile the last pass held ("" before the first) and where the watch took it from:
    #: "flags" (given to the watch), "journal" (what the last apply set) or "none" (no journal
    #: and no flags: drift is reported, nothing is changed).
    profile: str = ""
    source: str = ""
    #: Knobs the watch manages (each gets a backoff sample, 0 when nothing backs off).
    knobs: list[str] = field(default_factory=list)
    events: dict[str, int] = field(default_factory=dict)  # by kind: start, poll, bind, ...
    drift: dict[str, int] = field(default_factory=dict)  # places found drifting, by knob
    reapplies: dict[str, int] = field(default_factory=dict)  # places re-applied, by knob
    failures: dict[str, int] = field(default_factory=dict)  # places whose re-apply failed
    last_apply: LastApply | None = None
    backoff: list[Backoff] = field(default_factory=list)

    @staticmethod
    def bump(counter: dict[str, int], key: str, by: int = 1) -> None:
        counter[key] = counter.get(key, 0) + by

    def to_json(self) -> str:
        return json.dumps({"schema_version": SCHEMA_VERSION, **asdict(self)}, indent=1) + "\n"

    @classmethod
    def from_dict(cls, raw: Any) -> WatchState:
        """Strict: ValueError (with what is wrong) on anything but the layout we write."""
        if not isinstance(raw, dict):
            raise ValueError(f"a JSON {type(raw).__name__}, not an object")
        if raw.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"schema_version {raw.get('schema_version')!r}")
        out = cls(
            started=_num(raw, "started"),
            pid=int(_num(raw, "pid")),
            updated=_num(raw, "updated"),
            passes=int(_num(raw, "passes")),
            errors=int(_num(raw, "errors")),
            paused=bool(raw.get("paused", False)),
            profile=str(raw.get("profile", "")),
            source=str(raw.get("source", "")),
            knobs=[str(k) for k in _list(raw, "knobs")],
        )
        for name in COUNTERS:
            table = raw.get(name, {})
            if not isinstance(table, dict):
                raise ValueError(f"{name} is not an object")
            setattr(out, name, {str(k): int(_num(table, k)) for k in table})
        last = raw.get("last_apply")
        if last is not None:
            if not isinstance(last, dict):
                raise ValueError("last_apply is not an object")
            error = last.get("error")
            out.last_apply = LastApply(
                _num(last, "time"),
                bool(last.get("success")),
                int(_num(last, "changes")),
                None if error is None else str(error),
            )
        for entry in _list(raw, "backoff"):
            if not isinstance(entry, dict):
                raise ValueError("a backoff entry is not an object")
            out.backoff.append(
                Backoff(
                    str(entry.get("knob")),
                    str(entry.get("place")),
                    _num(entry, "until"),
                    _num(entry, "delay"),
                )
            )
        return out


def _num(table: dict[str, Any], key: str) -> float:
    value = table.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key} is {value!r}, not a number")
    return float(value)


def _list(table: dict[str, Any], key: str) -> list[Any]:
    value = table.get(key, [])
    if not isinstance(value, list):
        raise ValueError(f"{key} is not a list")
    return value


def read(view: HostView) -> tuple[WatchState | None, str | None]:
    """The watch state of this host, or None; a warning when a file is there but unusable."""
    try:
        text = view.read_optional(STATE_PATH)
    except HostError as exc:
        return None, f"watch state not read: {exc}"
    if text is None:
        return None, None
    try:
        return WatchState.from_dict(json.loads(text)), None
    except (ValueError, TypeError, RecursionError) as exc:
        return None, f"watch state {STATE_PATH} is not usable ({exc}); no watch metrics"
