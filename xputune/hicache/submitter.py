"""Asynchronous transfer submission: the scheduler only enqueues, two lanes do the submitting.

In the first Kunlunxin build one D2H submission took about 1.3 s on the scheduler thread, which
could not run the next batch until it returned (docs/field-report.md, 2.2). Here D2H and H2D each
get a daemon thread consuming its own queue, so a write-back never waits behind a load and neither
blocks the scheduler. Within a lane, jobs run and complete in the order they were enqueued, which is
what per-layer load events and "write before free" rely on.

A failed job must not vanish in a background thread: its future carries the exception, and the
first failure is also kept and raised (as TransferError) by the caller's next submit, flush() or
check(), since a lost KV write means the host pool no longer matches the radix tree.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from typing import Any

log = logging.getLogger(__name__)

D2H = "d2h"
H2D = "h2d"
_STOP = object()


class TransferError(RuntimeError):
    """A transfer job failed on a submitter thread; the original error is the __cause__."""


class _Lane:
    def __init__(self, name: str) -> None:
        self.name = name
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.submitted = 0
        self.completed = 0
        self.thread: threading.Thread | None = None


class TransferSubmitter:
    """Two FIFO lanes (d2h, h2d), each drained by one daemon thread.

    `thread_init(lane)` returns a context manager entered once on that lane's thread before
    any job runs, e.g. `lambda lane: torch.cuda.stream(streams[lane])` so every copy a lane
    launches goes to its dedicated stream.
    """

    def __init__(
        self,
        thread_init: Callable[[str], AbstractContextManager[Any]] | None = None,
        name: str = "hicache",
    ) -> None:
        self._thread_init = thread_init
        self._lanes = {D2H: _Lane(D2H), H2D: _Lane(H2D)}
        self._error: BaseException | None = None
        self._error_lane = ""
        self._lock = threading.Lock()
        self._closed = False
        for lane in self._lanes.values():
            lane.thread = threading.Thread(
                target=self._run, args=(lane,), name=f"{name}-{lane.name}", daemon=True
            )
            lane.thread.start()

    # -- caller side ----------------------------------------------------------------------
    def submit_d2h(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        """Queue a device-to-host job (a write-back); returns at once."""
        return self._submit(D2H, fn, args, kwargs)

    def submit_h2d(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        """Queue a host-to-device job (a load); returns at once."""
        return self._submit(H2D, fn, args, kwargs)

    def _submit(self, lane_name: str, fn: Callable[..., Any], args: Any, kwargs: Any) -> Future:
        if self._closed:
            raise RuntimeError("transfer submitter is closed")
        self.check()
        fut: Future[Any] = Future()
        lane = self._lanes[lane_name]
        lane.submitted += 1
        lane.queue.put((fut, fn, args, kwargs))
        return fut

    def check(self) -> None:
        """Raise TransferError if any job has failed so far."""
        err = self._error
        if err is not None:
            raise TransferError(f"{self._error_lane} transfer failed: {err!r}") from err

    def clear_error(self) -> None:
        """For callers that handled a failure themselves (e.g. dropped the affected nodes)."""
        with self._lock:
            self._error = None
            self._error_lane = ""

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every job queued so far on both lanes has finished; then check()."""
        markers = [self._submit_marker(lane) for lane in self._lanes.values()]
        for fut in markers:
            fut.exception(timeout=timeout)  # TimeoutError if the lane is still busy
        self.check()

    def _submit_marker(self, lane: _Lane) -> Future[Any]:
        fut: Future[Any] = Future()
        lane.queue.put((fut, _noop, (), {}))
        return fut

    def pending(self, lane_name: str) -> int:
        """Jobs queued or running on a lane."""
        lane = self._lanes[lane_name]
        return lane.submitted - lane.completed

    def close(self, wait: bool = True, timeout: float | None = None) -> None:
        """Finish queued jobs, stop both threads; raises a failure no one has seen yet."""
        if not self._closed:
            self._closed = True
            for lane in self._lanes.values():
                lane.queue.put(_STOP)
            if wait:
                for lane in self._lanes.values():
                    assert lane.thread is not None
                    lane.thread.join(timeout)
        self.check()

    def __enter__(self) -> TransferSubmitter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:  # do not mask the caller's own exception
            try:
                self.close()
            except TransferError:
                log.exception("transfer failure while unwinding another error")

    # -- lane threads ---------------------------------------------------------------------
    def _fail(self, lane: _Lane, exc: BaseException) -> None:
        log.error("%s transfer job failed: %r", lane.name, exc)
        with self._lock:
            if self._error is None:
                self._error = exc
                self._error_lane = lane.name

    def _run(self, lane: _Lane) -> None:
        try:
            ctx = self._thread_init(lane.name) if self._thread_init else nullcontext()
            with ctx:
                self._drain(lane)
        except BaseException as exc:  # the lane cannot run: fail every job instead of hanging
            self._fail(lane, exc)
            self._reject_all(lane, exc)

    def _drain(self, lane: _Lane) -> None:
        while True:
            item = lane.queue.get()
            if item is _STOP:
                return
            fut, fn, args, kwargs = item
            is_job = fn is not _noop
            if fut.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    self._fail(lane, exc)  # before the future: a waiter sees both at once
                    fut.set_exception(exc)
                else:
                    fut.set_result(result)
            if is_job:
                lane.completed += 1

    def _reject_all(self, lane: _Lane, exc: BaseException) -> None:
        while True:
            item = lane.queue.get()
            if item is _STOP:
                return
            fut = item[0]
            if fut.set_running_or_notify_cancel():
                fut.set_exception(exc)
            if item[1] is not _noop:
                lane.completed += 1


def _noop() -> None:
    return None
