"""Write-policy counting: a node's hit count means distinct requests, not insert calls.

The field report's fix (docs/field-report.md, 2.6).

SGLang 0.5.20's radix cache bumps a node's hit count inside insert(), and one request is
inserted twice (cache_unfinished_req, then cache_finished_req; 0.5.22 fixed this upstream).
One request then reaches the write_through_selective threshold of 2 alone, and the policy
silently becomes write_through. The gate below lets a request bump a node at most once while
it is live.

A request's record is dropped when it finishes, so memory is bounded by the live requests and
the nodes each one touched. A node split (the radix tree cutting a node in two when a new prefix
diverges inside it) must be reported so the new parent counts as already bumped by the same
requests.
"""

from __future__ import annotations

from collections.abc import Hashable

WRITE_THROUGH_THRESHOLD: dict[str, int | None] = {
    "write_back": None,  # nothing is written on insert; backup happens at eviction
    "write_through": 1,
    "write_through_selective": 2,
}


def write_through_threshold(policy: str) -> int | None:
    """Hit count at which an inserted node is backed up to host; None for write_back."""
    try:
        return WRITE_THROUGH_THRESHOLD[policy]
    except KeyError:
        known = ", ".join(WRITE_THROUGH_THRESHOLD)
        raise ValueError(f"unknown write policy {policy!r} (known: {known})") from None


DEFAULT_MAX_REQUESTS = 1 << 16  # far above any scheduler's running batch


class RequestHitGate:
    """Lets each live request count once per radix node.

    A request's record goes when it finishes. One that never reaches finish (a scheduler path
    that drops it without caching) would otherwise stay forever, so at most `max_requests`
    records are kept and the oldest is dropped first: the worst case is then one extra count
    for a very old request, never unbounded memory.
    """

    def __init__(
        self, policy: str = "write_through_selective", max_requests: int = DEFAULT_MAX_REQUESTS
    ) -> None:
        if max_requests < 1:
            raise ValueError("max_requests must be at least 1")
        self.threshold = write_through_threshold(policy)
        self.max_requests = max_requests
        self._by_request: dict[Hashable, set[Hashable]] = {}
        self._by_node: dict[Hashable, set[Hashable]] = {}
        self.suppressed = 0  # repeat inserts that did not count: the double counts avoided
        self.dropped = 0  # records dropped at the bound (requests that never finished)

    def admit(self, request_id: Hashable, node: Hashable) -> bool:
        """True the first time `request_id` passes through `node`: bump the hit count then."""
        if request_id not in self._by_request and len(self._by_request) >= self.max_requests:
            self.finish(next(iter(self._by_request)))
            self.dropped += 1
        nodes = self._by_request.setdefault(request_id, set())
        if node in nodes:
            self.suppressed += 1
            return False
        nodes.add(node)
        self._by_node.setdefault(node, set()).add(request_id)
        return True

    def should_write_through(self, hit_count: int) -> bool:
        """Whether a node with this (distinct-request) hit count is backed up on insert."""
        return self.threshold is not None and hit_count >= self.threshold

    def on_split(self, old_node: Hashable, new_node: Hashable) -> None:
        """`new_node` was cut from `old_node`: requests that counted one counted both."""
        requests = self._by_node.get(old_node)
        if not requests:
            return
        self._by_node.setdefault(new_node, set()).update(requests)
        for rid in requests:
            self._by_request[rid].add(new_node)

    def finish(self, request_id: Hashable) -> None:
        """The request is done: its next life (a new request id) counts again."""
        for node in self._by_request.pop(request_id, ()):
            holders = self._by_node.get(node)
            if holders is not None:
                holders.discard(request_id)
                if not holders:
                    del self._by_node[node]

    def forget_node(self, node: Hashable) -> None:
        """The node left the tree (evicted); drop it from every live request."""
        for rid in self._by_node.pop(node, ()):
            self._by_request[rid].discard(node)

    @property
    def live_requests(self) -> int:
        return len(self._by_request)
