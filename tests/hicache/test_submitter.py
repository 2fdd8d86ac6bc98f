"""Transfer submitter: enqueue-only caller, per-lane order, errors that surface."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest

from xputune.hicache.submitter import D2H, H2D, TransferError, TransferSubmitter

WAIT = 5.0  # generous upper bound for a blocked wait, never a timing assertion


def test_jobs_run_in_enqueue_order_per_lane_and_return_results():
    done: list[tuple[str, int]] = []
    with TransferSubmitter() as sub:
        futs = [sub.submit_d2h(lambda i=i: done.append(("d", i)) or i) for i in range(50)]
        futs += [sub.submit_h2d(lambda i=i: done.append(("h", i)) or -i) for i in range(50)]
        sub.flush(WAIT)
        assert [f.result() for f in futs[:3]] == [0, 1, 2]
    assert [i for lane, i in done if lane == "d"] == list(range(50))
    assert [i for lane, i in done if lane == "h"] == list(range(50))


def test_submit_only_enqueues_and_lanes_are_independent():
    gate = threading.Event()
    with TransferSubmitter() as sub:
        blocked = sub.submit_d2h(gate.wait, WAIT)  # a write-back stuck on its copy
        assert not blocked.done()
        load = sub.submit_h2d(lambda: "loaded")  # a load must not wait behind it
        assert load.result(WAIT) == "loaded"
        assert sub.pending(D2H) == 1 and sub.pending(H2D) == 0
        gate.set()
        assert blocked.result(WAIT) is True


def test_jobs_run_on_their_lane_thread():
    with TransferSubmitter(name="kv") as sub:
        assert sub.submit_d2h(lambda: threading.current_thread().name).result(WAIT) == "kv-d2h"
        assert sub.submit_h2d(lambda: threading.current_thread().daemon).result(WAIT)


def test_failure_is_on_the_future_and_raised_by_next_submit():
    sub = TransferSubmitter()
    bad = sub.submit_d2h(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        bad.result(WAIT)
    with pytest.raises(TransferError, match="d2h") as info:
        sub.submit_h2d(lambda: None)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    with pytest.raises(TransferError):
        sub.flush(WAIT)
    with pytest.raises(TransferError):
        sub.close()
    assert sub.pending(D2H) == 0


def test_failure_nobody_waited_for_is_raised_on_close():
    sub = TransferSubmitter()
    sub.submit_h2d(lambda: [][1])
    with pytest.raises(TransferError) as info:
        sub.close()
    assert isinstance(info.value.__cause__, IndexError)


def test_clear_error_lets_a_caller_that_handled_it_go_on():
    sub = TransferSubmitter()
    with pytest.raises(ZeroDivisionError):
        sub.submit_d2h(lambda: 1 / 0).result(WAIT)
    sub.clear_error()
    assert sub.submit_d2h(lambda: 7).result(WAIT) == 7
    sub.close()


def test_thread_init_context_wraps_every_job_of_its_lane():
    state = threading.local()
    entered = []

    @contextmanager
    def stream(lane):
        state.stream = f"stream-{lane}"
        entered.append(lane)
        yield

    with TransferSubmitter(thread_init=stream) as sub:
        assert sub.submit_d2h(lambda: state.stream).result(WAIT) == "stream-d2h"
        assert sub.submit_h2d(lambda: state.stream).result(WAIT) == "stream-h2d"
    assert sorted(entered) == ["d2h", "h2d"]


def test_lane_that_cannot_start_fails_jobs_instead_of_hanging():
    def broken(lane):
        raise RuntimeError(f"no stream for {lane}")

    sub = TransferSubmitter(thread_init=broken)
    with pytest.raises(TransferError, match="no stream"):
        sub.flush(WAIT)
    with pytest.raises(TransferError):
        sub.close()


def test_closed_submitter_refuses_work():
    sub = TransferSubmitter()
    sub.close()
    with pytest.raises(RuntimeError, match="closed"):
        sub.submit_d2h(lambda: None)
