"""The last `xputune verify`: kept in the state directory for `xputune status` and `metrics`.

verify (and `launch sglang --verify`) writes its whole document (schema "verify") to
<state dir>/verify.json (/var/lib/xputune, or <root>/var/lib/xputune under --root) after
each reading, atomically (host/replace.py, through the state directory's descriptor).
Reading it is discovery: a missing file is "never verified", an odd one a warning and nothing
shown. It lives here beside watch.json, so that tune/status.py (below placement/, which
writes it) and fleet/metrics.py can read it; the reader checks the keys they use, strictly.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from xputune.errors import HostError, XputuneError
from xputune.host import HostView
from xputune.host.view import DirView, write_replace_at
from xputune.tune.state import STATE_DIR, open_state_fd, readable_state_dir, state_dir

SCHEMA_VERSION = 1
STATE_FILE = "verify.json"
STATE_PATH = f"{STATE_DIR}/{STATE_FILE}"
#: More than any real server's document (a rank is ~2 kB).
MAX_BYTES = 4 << 20
VERDICTS = ("ok", "drift", "unknown")


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} is {value!r}, not an integer")
    return value


def _num(value: Any, what: str, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{what} is {value!r}, not a number")
    return float(value)


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{what} is not a list")
    return value


def _rank(raw: Any, i: int) -> None:
    rank = _dict(raw, f"ranks[{i}]")
    if not isinstance(rank.get("rank"), str):
        raise ValueError(f"ranks[{i}].rank is not text")
    _int(rank.get("tp"), f"ranks[{i}].tp")
    _int(rank.get("pid"), f"ranks[{i}].pid")
    if rank.get("verdict") not in VERDICTS:
        raise ValueError(f"ranks[{i}].verdict is {rank.get('verdict')!r}")
    for node in _list(_dict(rank.get("plan"), f"ranks[{i}].plan").get("nodes"), "plan.nodes"):
        _int(node, f"ranks[{i}].plan.nodes")
    pool = rank.get("pool")
    if pool is None:
        return
    pool = _dict(pool, f"ranks[{i}].pool")
    _int(pool.get("size_bytes"), f"ranks[{i}].pool.size_bytes")
    _num(pool.get("huge_share"), f"ranks[{i}].pool.huge_share", optional=True)
    for j, node in enumerate(_list(pool.get("nodes") or [], f"ranks[{i}].pool.nodes")):
        node = _dict(node, f"ranks[{i}].pool.nodes[{j}]")
        _int(node.get("node"), f"ranks[{i}].pool.nodes[{j}].node")
        _int(node.get("bytes"), f"ranks[{i}].pool.nodes[{j}].bytes")
        _num(node.get("share"), f"ranks[{i}].pool.nodes[{j}].share")


def check(raw: Any) -> dict[str, Any]:
    """The document if it has the layout verify writes; ValueError naming what is not."""
    doc = _dict(raw, "the document")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"schema_version {doc.get('schema_version')!r}")
    if not isinstance(doc.get("time"), str):
        raise ValueError("time is not text")
    _num(doc.get("time_unix"), "time_unix")
    _int(_dict(doc.get("server"), "server").get("pid"), "server.pid")
    if doc.get("verdict") not in VERDICTS:
        raise ValueError(f"verdict is {doc.get('verdict')!r}")
    for key in ("drifting", "unknown"):
        if not all(isinstance(x, str) for x in _list(doc.get(key), key)):
            raise ValueError(f"{key} holds something other than rank names")
    for i, rank in enumerate(_list(doc.get("ranks"), "ranks")):
        _rank(rank, i)
    return doc


def _load(view: HostView) -> bytes | None:
    """The file's bytes: under a folder or the live host through the checked state directory,
    no link followed anywhere; from a recording as recorded."""
    if not isinstance(view, DirView):
        text = view.read_optional(STATE_PATH)
        return None if text is None else text.encode()
    if readable_state_dir(view) is None:
        return None
    return view.read_strict(STATE_PATH, MAX_BYTES)


def read(view: HostView) -> tuple[dict[str, Any] | None, str | None]:
    """The last verification here, or None; a warning when one is there but unusable."""
    try:
        data = _load(view)
    except XputuneError as exc:
        return None, f"last verification not read: {exc}"
    if data is None:
        return None, None
    try:
        return check(json.loads(data)), None
    except (ValueError, TypeError, RecursionError) as exc:
        return None, f"last verification {STATE_PATH} is not usable ({exc}); not shown"


def save(view: HostView, doc: dict[str, Any]) -> str:
    """Keep `doc` as the last verification; its path. Strict: HostError or
    PermissionRequired (one line) when the state directory cannot be written."""
    check(doc)
    folder = state_dir(view)
    fd = open_state_fd(folder)
    try:
        data = (json.dumps(doc, indent=1) + "\n").encode()
        try:
            write_replace_at(fd, STATE_FILE, data, 0o600)
        except OSError as exc:
            raise HostError(f"cannot write {folder}/{STATE_FILE}: {exc.strerror}") from exc
    finally:
        os.close(fd)
    return f"{folder}/{STATE_FILE}"


__all__ = ["SCHEMA_VERSION", "STATE_FILE", "STATE_PATH", "check", "read", "save"]
