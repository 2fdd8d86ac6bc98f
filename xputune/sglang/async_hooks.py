"""XPUTUNE_HICACHE_ASYNC: HiCache transfers are submitted by two lane threads (field report, 2.2).

HiCacheController.start_writing / start_loading hand their merged operation to
L2TransferEngine.submit_device_to_host / submit_host_to_device, which launch every copy on the
scheduler thread; a slow D2H launch stalls the whole scheduler loop. The hooks keep the
ordering points on the scheduler thread and move only the launching to xputune's
TransferSubmitter (one FIFO lane per direction):

  D2H: an event recorded on the scheduler's current stream marks "the KV to back up exists";
       the lane waits for it on the D2H stream, runs the pool's all-layer backup, and records
       the ack events.
  H2D: the producer's start event is recorded on the scheduler thread as before; the lane runs
       SGLang's own submit_host_to_device, which records each layer's load event.

Two shapes: 0.5.20's engine records and waits inline (its D2H body is replayed on the lane);
0.5.21+ wraps every submission in L2TransferEngine._submission (start-event wait, index
translation, the shared-layout lease, the ack events), which the D2H lane enters with the
scheduler's event as its start event, and counts the H2D layers as transfer_layer_id_max.

The acks SGLang queues get PendingEvent stand-ins: query() is False until the lane has
launched the job (an unrecorded device event would read as done), synchronize() waits for the
launch first, and a failed launch raises TransferError in the scheduler instead of vanishing.
A forward waiting for layer N of a load (LayerLoadingEvent.wait) first waits until the lane has
recorded that layer's event, so per-layer overlap is kept and no layer is read early.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from xputune.sglang import stats
from xputune.sglang.config import PluginConfig
from xputune.sglang.hooks import Hooks
from xputune.sglang.targets import (
    CONTROLLER,
    L2_ENGINE,
    L2_MODULE,
    LAYER_EVENT,
    POOL_BASE,
    Shape,
    Target,
    resolve,
)

NAME = "async"
SUBMITTER_ATTR = "_xputune_submitter"
GATE_ATTR = "_xputune_layer_gate"

_COMMON = (
    Target(CONTROLLER + ".start_writing", ("self",), reads=("submit_device_to_host",)),
    Target(CONTROLLER + ".start_loading", ("self",), reads=("submit_host_to_device",)),
    Target(L2_ENGINE + "._start_event", ("start_event",)),
    Target(L2_MODULE + ".make_timing_event_pair", ()),
    Target(L2_MODULE + ".TransferCompletion", kind="class"),
    Target(LAYER_EVENT + ".wait", ("self", "layer_index")),
    Target(LAYER_EVENT + ".complete", ("self", "layer_index")),
)
TARGETS_0520 = (
    *_COMMON,
    Target(
        L2_ENGINE + ".submit_device_to_host",
        ("self", "transfers"),
        reads=("backup_from_device_all_layer", "make_timing_event_pair", "_record_stream"),
    ),
    Target(
        L2_ENGINE + ".submit_host_to_device",
        ("self", "transfers", "layer_num", "start_event", "on_layer_done"),
        reads=("load_to_device_per_layer",),
    ),
    Target(L2_ENGINE + "._record_stream", ("transfers", "stream")),
)
TARGETS_0521 = (
    *_COMMON,
    Target(
        L2_ENGINE + ".submit_device_to_host",
        ("self", "transfers"),
        reads=("_submission", "backup_from_device_all_layer_physical"),
    ),
    Target(
        L2_ENGINE + ".submit_host_to_device",
        ("self", "transfers", "transfer_layer_id_max", "start_event", "on_layer_done"),
        reads=("_submission", "load_to_device_per_layer_physical"),
    ),
    Target(
        L2_ENGINE + "._submission", ("self", "transfers", "stream", "transfer_key", "start_event")
    ),
    Target(
        POOL_BASE + ".backup_from_device_all_layer_physical",
        ("self", "device_pool", "host_indices", "device_indices", "io_backend"),
    ),
)


class PendingEvent:
    """A device event that exists only once a lane thread has launched its job."""

    def __init__(self, future: Future[Any], pick: Callable[[Any], Any], submitter: Any) -> None:
        self._future = future
        self._pick = pick
        self._submitter = submitter

    @property
    def event(self) -> Any:
        """The real event; waits for the launch and raises TransferError if it failed."""
        if self._future.exception() is not None:
            self._submitter.check()
        return self._pick(self._future.result())

    def query(self) -> bool:
        if not self._future.done():
            return False
        return bool(self.event.query())

    def synchronize(self) -> None:
        self.event.synchronize()

    def wait(self, stream: Any = None) -> None:
        self.event.wait(stream)

    def elapsed_time(self, end_event: Any) -> float:
        end = end_event.event if isinstance(end_event, PendingEvent) else end_event
        return float(self.event.elapsed_time(end))


class LayerGate:
    """Per-layer "its load event has been recorded" flags for one load submission."""

    def __init__(self, num_layers: int) -> None:
        self._flags = [threading.Event() for _ in range(num_layers)]
        self._error: BaseException | None = None

    def set(self, layer: int) -> None:
        self._flags[layer].set()

    def fail(self, exc: BaseException) -> None:
        self._error = exc
        for flag in self._flags:
            flag.set()

    def done(self) -> bool:
        return all(flag.is_set() for flag in self._flags)

    def wait(self, layer: int) -> None:
        self._flags[layer].wait()
        if self._error is not None:
            from xputune.hicache.submitter import TransferError

            raise TransferError(f"h2d load failed before layer {layer}") from self._error

    def wait_all(self) -> None:
        for flag in self._flags:
            flag.wait()


def submitter_of(engine: Any) -> Any:
    """The engine's TransferSubmitter (two daemon lanes), started on first use."""
    sub = engine.__dict__.get(SUBMITTER_ATTR)
    if sub is None:
        from xputune.hicache.submitter import TransferSubmitter

        sub = TransferSubmitter(name="xputune-hicache")
        engine.__dict__[SUBMITTER_ATTR] = sub
    return sub


def _submit_d2h(original: Any, engine: Any, transfers: Any) -> Any:
    l2 = resolve(L2_MODULE)
    dm = l2.device_module
    ready = dm.Event()
    ready.record()  # on the scheduler's stream: everything the copies read is queued before it
    ack_start, ack_finish, timing = l2.make_timing_event_pair()
    stream = engine.device_to_host_stream
    io_backend = engine.io_backend

    def job() -> None:
        with dm.stream(stream):
            ready.wait(stream)
            ack_start.record()
            for t in transfers:
                t.host_pool.backup_from_device_all_layer(
                    t.device_pool, t.host_indices, t.device_indices, io_backend
                )
            ack_finish.record()
            engine._record_stream(transfers, stream)

    sub = submitter_of(engine)
    fut = sub.submit_d2h(job)
    stats.add("async_d2h_jobs")
    return l2.TransferCompletion(
        PendingEvent(fut, lambda _: ack_start, sub),
        PendingEvent(fut, lambda _: ack_finish, sub),
        timing,
    )


def _submit_d2h_in_submission(original: Any, engine: Any, transfers: Any) -> Any:
    """0.5.21+: the lane enters the engine's own _submission with the scheduler's event."""
    l2 = resolve(L2_MODULE)
    ready = l2.device_module.Event()
    ready.record()  # on the scheduler's stream: everything the copies read is queued before it
    stream = engine.device_to_host_stream
    io_backend = engine.io_backend

    def job() -> Any:
        with engine._submission(transfers, stream, "device_to_host", ready) as (
            prepared,
            completion,
        ):
            for t in prepared:
                t.host_pool.backup_from_device_all_layer_physical(
                    t.device_pool, t.host_indices, t.device_indices, io_backend
                )
        return completion

    sub = submitter_of(engine)
    fut = sub.submit_d2h(job)
    stats.add("async_d2h_jobs")
    return _pending_completion(l2, fut, sub)


def _pending_completion(l2: Any, fut: Future[Any], sub: Any) -> Any:
    """The TransferCompletion SGLang acks on, for a job whose completion the lane returns."""
    timing = l2.make_timing_event_pair()[2]
    return l2.TransferCompletion(
        PendingEvent(fut, lambda c: c.start_event, sub),
        PendingEvent(fut, lambda c: c.finish_event, sub),
        timing,
    )


def _submit_h2d(
    original: Any,
    engine: Any,
    transfers: Any,
    *,
    start_event: Any = None,
    on_layer_done: Any = None,
    **count: int,
) -> Any:
    """Both shapes: the layer count is `layer_num` (0.5.20) or `transfer_layer_id_max`."""
    if len(count) != 1:
        raise TypeError(f"submit_host_to_device: expected one layer count, got {sorted(count)}")
    ((count_name, layer_num),) = count.items()
    l2 = resolve(L2_MODULE)
    start = engine._start_event(start_event)  # recorded here, on the scheduler thread
    owner = getattr(on_layer_done, "__self__", None)  # the producer's LayerLoadingEvent
    gate = LayerGate(layer_num)
    if owner is not None:
        previous = owner.__dict__.get(GATE_ATTR)
        if previous is not None and not previous.done():
            previous.wait_all()  # the producer slot is reused: its last load must be launched
        owner.__dict__[GATE_ATTR] = gate

    def layer_done(layer: int) -> None:
        if on_layer_done is not None:
            on_layer_done(layer)
        gate.set(layer)

    def job() -> Any:
        try:
            return original(
                engine, transfers, start_event=start, on_layer_done=layer_done,
                **{count_name: layer_num},
            )  # fmt: skip
        except BaseException as exc:
            gate.fail(exc)
            raise

    sub = submitter_of(engine)
    fut = sub.submit_h2d(job)
    stats.add("async_h2d_jobs")
    return _pending_completion(l2, fut, sub)


def _layer_wait(original: Any, event: Any, layer_index: int) -> Any:
    gate = event.__dict__.get(GATE_ATTR)
    if gate is not None:
        gate.wait(layer_index)
    return original(event, layer_index)


def _install(submit_d2h: Any) -> Any:
    def install(hooks: Hooks, cfg: PluginConfig) -> None:
        hooks.around(L2_ENGINE + ".submit_device_to_host", submit_d2h)
        hooks.around(L2_ENGINE + ".submit_host_to_device", _submit_h2d)
        hooks.around(LAYER_EVENT + ".wait", _layer_wait)

    return install


SHAPES = (
    Shape("0.5.21", TARGETS_0521, _install(_submit_d2h_in_submission)),
    Shape("0.5.20", TARGETS_0520, _install(_submit_d2h)),
)
