"""What the lane asks each server, and the numbers it brings back.

Prompts are token ids (no tokenizer round trip): X, Y, A..E and the suffix S are distinct
random sequences of 300 tokens (S: 100), longer than --chunked-prefill-size 128, so every
prompt is prefilled in chunks. The device pool holds 1024 tokens: four fresh 300-token
prompts (B..E) evict whatever came before them from device memory.

  off         count-once off, ghost off: X once; Y twice; B..E; X+S
  count_once  count-once on, ghost off: X once; Y twice; B..E; X+S
  on          count-once and ghost on: X once; A twice; B..E; A again; X+S
  tp_shared   MLA at --tp-size 2, --strategy shared (one host buffer for both ranks),
              write_through: A; B..E; A again
  moved       a release the plugin was not written for: the newest environment posing as
              sglang 0.5.99 whose LayerLoadingEvent.wait renamed its parameter (the async
              lanes' target), under the Rust tree core (the user's choice), with every feature
              asked for, write_through: A; B..E; A again
Since 0.5.22 counts once by itself, "off" is the ghost list's baseline there; on 0.5.20 it is
"count_once".
Backups are the plugin's backup_tokens counter (tokens the cache decided to write to host),
read before and after each step.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from tests.server.server import Result, Server
from xputune.sglang.targets import TREE_CORE_ENV

LENGTH = 300
BASE = "lifo,async,kernels,host-buffer"  # kernels serve the copies, host-buffer the host pool


def prompts(seed: int = 7) -> dict[str, list[int]]:
    rng = random.Random(seed)
    out = {name: [rng.randrange(3, 500) for _ in range(LENGTH)] for name in "XYABCDE"}
    out["S"] = [rng.randrange(3, 500) for _ in range(100)]
    return out


_last: dict[str, dict[str, int]] = {}  # server workdir -> counters after its last step


def _step(server: Server, ids: list[int]) -> tuple[Result, int, dict[str, int]]:
    """One request; the backup tokens it caused; the counters after it."""
    before = _last.get(str(server.workdir)) or server.stats()
    result = server.generate(ids)
    after = server.stats()
    _last[str(server.workdir)] = after
    return result, after.get("backup_tokens", 0) - before.get("backup_tokens", 0), after


def _evict(server: Server, p: dict[str, list[int]]) -> None:
    for name in "BCDE":
        server.generate(p[name])
    _last.pop(str(server.workdir), None)


# The fake release of the "moved" scenario (tests/server/standin_site/sitecustomize.py).
FAKE_RELEASE = "0.5.99"


def run(kind: str, model: Path, workdir: Path, release: str) -> dict[str, Any]:
    fn = {
        "off": _off, "count_once": _count_once, "on": _on, "tp_shared": _tp_shared,
        "moved": _moved,
    }[kind]  # fmt: skip
    t0 = time.monotonic()
    out = fn(model, workdir, release)
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def _off(model: Path, workdir: Path, release: str) -> dict[str, Any]:
    return _selective(Server(model, workdir, features=BASE, release=release))


def _count_once(model: Path, workdir: Path, release: str) -> dict[str, Any]:
    return _selective(Server(model, workdir, features=BASE + ",count-once", release=release))


def _selective(server: Server) -> dict[str, Any]:
    """X once; Y twice; B..E; X+S: what one and two requests write, and X after eviction."""
    p = prompts()
    with server:
        _, one, _ = _step(server, p["X"])
        _, first, _ = _step(server, p["Y"])
        _, second, _ = _step(server, p["Y"])
        _evict(server, p)
        revisit, again, stats = _step(server, p["X"] + p["S"])
        return {
            "start_seconds": round(server.start_seconds, 1),
            "one_request_backup": one,
            "two_requests_backup": first + second,
            "reseen_after_eviction_backup": again,
            "reseen_cached": revisit.cached,
            "stats": stats,
            "log": server.log(),
            "standin_calls": server.standin_calls(),
        }


def _on(model: Path, workdir: Path, release: str) -> dict[str, Any]:
    p = prompts()
    with Server(model, workdir, features=BASE + ",count-once,ghost", release=release) as server:
        _, one, _ = _step(server, p["X"])
        a_first, a1, _ = _step(server, p["A"])
        _, a2, _ = _step(server, p["A"])
        _evict(server, p)
        a_again, _, before = _step(server, p["A"])
        revisit, again, stats = _step(server, p["X"] + p["S"])
        return {
            "start_seconds": round(server.start_seconds, 1),
            "one_request_backup": one,
            "two_requests_backup": a1 + a2,
            "a_first": a_first,
            "a_again": a_again,
            "reseen_after_eviction_backup": again,
            "reseen_cached": revisit.cached,
            "ghost_proven_backups": stats.get("ghost_proven_backups", 0)
            - before.get("ghost_proven_backups", 0),
            "ghost_backed_tokens": stats.get("ghost_backed_tokens", 0)
            - before.get("ghost_backed_tokens", 0),
            "stats": stats,
            "log": server.log(),
            "standin_calls": server.standin_calls(),
        }


def _tp_shared(model: Path, workdir: Path, release: str) -> dict[str, Any]:
    return _round_trip(
        Server(
            model, workdir, features="lifo,kernels,count-once,host-buffer",
            write_policy="write_through", extra_args=["--tp-size", "2"],
            launcher_args=["--strategy", "shared"], release=release,
        )
    )  # fmt: skip


def _moved(model: Path, workdir: Path, release: str) -> dict[str, Any]:
    env = {"XPUTUNE_TEST_FAKE_RELEASE": FAKE_RELEASE, TREE_CORE_ENV: "rust"}
    return _round_trip(
        Server(
            model, workdir, features=BASE + ",count-once,ghost", write_policy="write_through",
            extra_env=env, release=release,
        )
    )  # fmt: skip


def _round_trip(server: Server) -> dict[str, Any]:
    """A; B..E; A again: the second A from host memory."""
    p = prompts()
    with server:
        first = server.generate(p["A"])
        _evict(server, p)
        again = server.generate(p["A"])
        stats = server.stats()
        return {
            "start_seconds": round(server.start_seconds, 1),
            "a_first": first,
            "a_again": again,
            "stats": stats,
            "ranks": server.stats_files(),
            "log": server.log(),
        }
