"""What a replay drives at --url: one SGLang server, or sglang-router in front of N of them.

The router forwards /generate to its workers but answers no /server_info of its own (0.3.2:
404); it lists its workers at /workers (`{"workers": [{"url": ..., "is_healthy": ...}]}`). A
replay of a router therefore reads each worker's /server_info (the limits a request must fit
are the smallest worker's), sends every request through the router, reads the tier counters of
every worker and adds them up, and predicts with plan/cluster.py for N workers and the routing
policy given (the router does not say which it runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from xputune.measure.client import Endpoint, ServerError, get_json

if TYPE_CHECKING:
    from xputune.measure.server import ServerInfo
    from xputune.measure.tiercounters import TierCounters
    from xputune.plan.traces import Trace

#: Most workers one replay reads (a router fronts tens; a longer list is not a router's).
MAX_WORKERS = 1024
WORKERS_TIMEOUT = 10.0


@dataclass(frozen=True)
class Target:
    """Where requests go, and the server(s) behind it."""

    endpoint: Endpoint
    info: ServerInfo  # the one server's, or the worker with the smallest limits
    workers: tuple[Endpoint, ...] = ()  # behind a router; () for one server

    @property
    def instances(self) -> int:
        return len(self.workers) or 1


def workers(endpoint: Endpoint) -> tuple[Endpoint, ...] | None:
    """The workers a router at `endpoint` lists; None when it is not a router."""
    try:
        doc = get_json(endpoint, "/workers", WORKERS_TIMEOUT)
    except ServerError:
        return None
    listed = doc.get("workers") if isinstance(doc, dict) else None
    if not isinstance(listed, list) or not listed:
        return None
    if len(listed) > MAX_WORKERS:
        raise ServerError(f"{endpoint.url}/workers lists {len(listed):,} workers; at most "
                          f"{MAX_WORKERS:,} are read")  # fmt: skip
    found = []
    for worker in listed:
        url = worker.get("url") if isinstance(worker, dict) else None
        if not isinstance(url, str):
            raise ServerError(f"{endpoint.url}/workers: a worker without a url")
        found.append(Endpoint.parse(url))
    return tuple(found)


def all_healthy(endpoint: Endpoint, count: int, timeout: float) -> bool:
    """Whether the router at `endpoint` lists `count` workers, every one healthy (the router
    answers before its workers do; a replay started then would find some missing)."""
    doc = get_json(endpoint, "/workers", timeout)
    listed = doc.get("workers") if isinstance(doc, dict) else None
    return (
        isinstance(listed, list)
        and len(listed) == count
        and all(isinstance(w, dict) and w.get("is_healthy") is True for w in listed)
    )


def read_target(endpoint: Endpoint, host_tokens: int | None = None) -> Target:
    """The server at `endpoint`, or the workers behind the router there (ServerError, one
    line, when it is neither)."""
    from xputune.measure.server import read_server

    try:
        return Target(endpoint, read_server(endpoint, host_tokens))
    except ServerError as exc:
        behind = workers(endpoint)
        if behind is None:
            raise exc from None
    infos = [read_server(w, host_tokens) for w in behind]
    smallest = min(infos, key=lambda i: (i.max_req_input_len or float("inf"), i.device_tokens))
    return Target(endpoint, smallest, behind)


def read_counters(target: Target) -> tuple[list[TierCounters] | None, str | None]:
    """The tier counters of the server, or of each worker in the router's order (None, why,
    when one of them publishes none)."""
    from xputune.measure import tiercounters

    each = []
    for server in target.workers or (target.endpoint,):
        counters, note = tiercounters.read(server)
        if counters is None:
            return None, (f"{server.url}: {note}" if target.workers else note)
        each.append(counters)
    return each, None


def moved(
    before: list[TierCounters] | None, after: list[TierCounters] | None
) -> TierCounters | None:
    """What the counters of every server moved between two readings, added up (None when
    either reading is missing)."""
    if before is None or after is None or len(before) != len(after):
        return None
    total = None
    for a, b in zip(after, before, strict=True):
        total = a.minus(b) if total is None else total.plus(a.minus(b))
    return total


def requests_per_worker(
    trace: Trace,
    instances: int,
    routing: str,
    before: list[TierCounters] | None,
    after: list[TierCounters] | None,
) -> dict[str, list[int] | None]:
    """How the requests were spread over the workers, most first: what each worker counted
    finished between two readings (None when a worker publishes no counters), and what the
    routing model predicts (plan/cluster.spread). Which worker is which is the router's."""
    from xputune.plan.cluster import spread

    measured = None
    if before is not None and after is not None and len(before) == len(after):
        done = (a.minus(b).requests for a, b in zip(after, before, strict=True))
        measured = sorted(done, reverse=True)
    return {"measured": measured, "predicted": spread(trace, instances, routing)}


def differences(routing: str) -> list[str]:
    """Why a cluster's measurement can differ from plan/cluster.py's prediction beyond what
    makes one server's differ (predict.differences)."""
    notes = [
        "the router, not the prediction, decides where each request goes: the prediction "
        f"assumes {routing} routing exactly, and a shared L3 that holds a block the moment "
        "any instance wrote it"
    ]
    if routing == "cache_aware":
        notes.append(
            "sglang-router's cache_aware matches each request's text against its per-worker "
            "trees, and a replay sends token ids only: measured with sglang-router 0.3.2, "
            "every such request went to one worker, where the prediction (by blocks) spreads "
            "them; its load balancing (64 requests apart and 1.5x) is not modelled either"
        )
    return notes
