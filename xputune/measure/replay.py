"""Drive a server with a workload: open loop by the trace's clock, or closed loop.

Open loop: request i is sent at (its timestamp - the first one's) / speedup after the start,
whether or not earlier ones have finished, as real users arrive; up to `max_inflight` at once
(one thread and one kept-alive connection each). When all are busy a request waits, and the
wait is reported per request (dispatch lag), so an overloaded client never passes for a slow
server. Closed loop: `concurrency` workers each send their next request as soon as their last
one finished, in trace order.

Bounds: the workload's length (--requests), one deadline per request (`timeout`, from its
send to its last byte: client.py), and a wall-clock `duration` that is a hard end: nothing is
sent after it (a request whose worker picks it up late is counted unsent), and what is in
flight then gets at most `timeout` more. So a run ends by duration + timeout (+ SLACK), or by
its last send + timeout, whatever the server does: a stream that never ends or trickles ends
as its request's error ("no complete answer within N s"), a request not completed. Should a
worker still be busy past that end (a name lookup that hangs: the one wait with no deadline
of its own), the replay stops waiting and records the request as not completed, with why.
Ctrl-C stops sending at once, waits `grace` seconds for what is in flight, and returns what
was measured; requests still running are counted as abandoned, never as failures. Prompt
bodies are encoded on the worker's thread before its clock starts: the cost is reported as
dispatch lag, never as TTFT.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from xputune.measure.client import Client, Endpoint
from xputune.measure.stats import Record
from xputune.measure.tokens import TokenRange
from xputune.measure.workload import Request, Workload

_TICK = 0.1  # seconds: how long the main thread waits at a time (so Ctrl-C is seen at once)
#: seconds past duration + timeout before a worker that has not given its request back is
#: given up on (the client ends each request by its deadline; this covers thread scheduling)
SLACK = 2.0


@dataclass(frozen=True)
class Load:
    concurrency: int | None = None  # closed loop with this many workers; None: open loop
    speedup: float = 1.0  # open loop: the trace's clock runs this much faster
    max_inflight: int = 256  # open loop: requests (threads, connections) at once, at most
    duration: float | None = None  # stop sending after this many seconds: a hard end
    timeout: float = 600.0  # one request, seconds from its send to its last byte
    grace: float = 5.0  # after Ctrl-C, seconds to wait for what is in flight

    @property
    def mode(self) -> str:
        return "closed" if self.concurrency else "open"


@dataclass
class ReplayRun:
    records: list[Record]  # in trace order
    elapsed: float  # first send to last finish (or to the stop)
    stop: str  # "done", "duration" or "interrupted"
    unsent: int  # requests never sent
    abandoned: int  # in flight when the replay was interrupted, not waited for
    started: float = field(default=0.0)  # time.time() at the start


class _Pool:
    """Worker threads fed from one queue, spawned as needed up to a limit."""

    def __init__(self, work: Callable[[Client, Request, float | None], None], limit: int,
                 endpoint: Endpoint, timeout: float) -> None:  # fmt: skip
        self.work = work
        self.limit = limit
        self.endpoint = endpoint
        self.timeout = timeout
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        self.idle = 0
        self.lock = threading.Lock()

    def submit(self, request: Request, scheduled: float | None) -> None:
        with self.lock:
            spawn = self.idle == 0 and len(self.threads) < self.limit
            if spawn:
                self.idle += 1  # the new thread counts as idle until it takes a job
        if spawn:
            thread = threading.Thread(target=self._run, name="replay", daemon=True)
            self.threads.append(thread)
            thread.start()
        self.jobs.put((request, scheduled))

    def _run(self) -> None:
        client = Client(self.endpoint, self.timeout)
        try:
            while True:
                job = self.jobs.get()
                if job is None:
                    return
                with self.lock:
                    self.idle -= 1
                try:
                    self.work(client, *job)
                finally:
                    with self.lock:
                        self.idle += 1
        finally:
            client.close()

    def close(self) -> None:
        for _ in self.threads:
            self.jobs.put(None)


def replay(
    workload: Workload,
    endpoint: Endpoint,
    vocab: TokenRange,
    load: Load,
    on_done: Callable[[Record], None] | None = None,
) -> ReplayRun:
    """Send the workload's requests as `load` says; the measurements, in trace order."""
    requests = workload.requests
    closed_loop = load.mode == "closed"
    if not closed_loop and not workload.timed:
        raise ValueError("open loop needs a timestamp on every request")
    slots = threading.Semaphore(load.concurrency if closed_loop else load.max_inflight)
    records: dict[int, Record] = {}
    lock = threading.Lock()
    pending = [0]  # requests handed to the pool and not finished
    flying: dict[int, tuple[Request, float | None, float]] = {}  # handed over, not finished
    late = [0]  # handed over, picked up after the duration's end: never sent
    closed = [False]  # the replay returned: a worker's late result is dropped
    idle = threading.Event()
    idle.set()
    t0 = time.perf_counter()
    deadline = None if load.duration is None else t0 + load.duration

    def work(client: Client, request: Request, scheduled: float | None) -> None:
        try:
            body = workload.body(request, vocab)
            if deadline is not None and time.perf_counter() >= deadline:
                with lock:
                    late[0] += 1
                    flying.pop(request.index, None)
                return  # nothing is sent after the duration's end
            out = client.generate(body)
            record = Record(
                index=request.index,
                line=request.line,
                prompt_tokens=out.prompt_tokens or request.prompt_tokens,
                output_asked=request.output,
                scheduled=scheduled,
                sent=out.start - t0,
                ttft=out.ttft,
                e2e=out.e2e,
                output_tokens=out.output_tokens,
                device=out.device,
                host=out.host,
                storage=out.storage,
                overhead=out.overhead,
                error=out.error,
            )
            with lock:
                if closed[0]:
                    return
                records[request.index] = record
                flying.pop(request.index, None)
            if on_done is not None:
                on_done(record)
        finally:
            slots.release()
            with lock:
                pending[0] -= 1
                if pending[0] == 0:
                    idle.set()

    pool = _Pool(work, load.concurrency or load.max_inflight, endpoint, load.timeout)
    first_at = requests[0].at_ms if requests and not closed_loop else None
    stop, sent = "done", 0
    started = time.time()
    given_up: list[Record] = []
    try:
        for request in requests:
            scheduled = None
            if not closed_loop:
                scheduled = (request.at_ms - first_at) / 1000.0 / load.speedup  # type: ignore[operator]
                if not _sleep_until(t0 + scheduled, deadline):
                    stop = "duration"
                    break
            if not _acquire(slots, deadline):
                stop = "duration"
                break
            with lock:
                pending[0] += 1
                flying[request.index] = (request, scheduled, time.perf_counter() - t0)
                idle.clear()
            pool.submit(request, scheduled)
            sent += 1
        end = time.perf_counter() + load.timeout + SLACK  # what is in flight gets this long
        while not idle.wait(_TICK):
            if time.perf_counter() >= end:
                with lock:
                    closed[0] = True
                    given_up = [
                        _not_completed(req, when, at, load.timeout)
                        for req, when, at in flying.values()
                    ]
                break
    except KeyboardInterrupt:
        stop = "interrupted"
        idle.wait(load.grace)
    finally:
        pool.close()
    elapsed = time.perf_counter() - t0
    with lock:
        closed[0] = True
        every = {**records, **{r.index: r for r in given_up}}
        done = [every[i] for i in sorted(every)]
        abandoned = 0 if given_up else pending[0]
        unsent = len(requests) - sent + late[0]
    return ReplayRun(done, elapsed, stop, unsent, abandoned, started)


def _not_completed(request: Request, scheduled: float | None, sent: float,
                   timeout: float) -> Record:  # fmt: skip
    """The record of a request still in flight when the replay's end came."""
    return Record(
        index=request.index, line=request.line, prompt_tokens=request.prompt_tokens,
        output_asked=request.output, scheduled=scheduled, sent=sent, ttft=None, e2e=None,
        output_tokens=0, device=0, host=0, storage=0, overhead=0.0,
        error=f"not completed: still in flight {timeout:g} s (--timeout) after the last send "
        "or --duration's end",
    )  # fmt: skip


def _sleep_until(when: float, deadline: float | None) -> bool:
    """Wait until perf_counter reaches `when`; False when the deadline comes first."""
    while True:
        now = time.perf_counter()
        if deadline is not None and now >= deadline:
            return False
        if now >= when:
            return True
        left = when - now if deadline is None else min(when, deadline) - now
        time.sleep(min(left, _TICK))


def _acquire(slots: threading.Semaphore, deadline: float | None) -> bool:
    while True:
        if deadline is not None and time.perf_counter() >= deadline:
            return False
        if slots.acquire(timeout=_TICK):
            return True
