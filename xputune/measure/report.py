"""The documents `xputune replay` and `xputune sweep` print (schemas replay.json, sweep.json).

Measurement and prediction sit side by side, tier by tier, with the reasons they can differ;
times are milliseconds (client overhead microseconds), rates fractions of input tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xputune.measure import stats
from xputune.measure.predict import Prediction, comparison

if TYPE_CHECKING:
    from xputune.measure.replay import Load, ReplayRun
    from xputune.measure.server import ServerInfo
    from xputune.measure.tokens import TokenRange
    from xputune.measure.workload import Workload


def trace_part(trace_file: str, workload: Workload) -> dict[str, Any]:
    reqs = workload.requests
    return {
        "file": trace_file,
        "format": workload.format,
        "block_size": workload.trace_block,
        "block_tokens": workload.block_tokens,
        "requests": len(reqs),
        "skipped": workload.skipped,
        "first_line": reqs[0].line if reqs else None,
        "last_line": reqs[-1].line if reqs else None,
        "input_tokens": workload.input_tokens,
        "output_tokens": workload.output_tokens,
        "truncated_prompts": workload.truncated,
        "longest_prompt": workload.longest_prompt,
        "capped_outputs": workload.outputs_capped,
        "server_capped_outputs": workload.outputs_limited,
        "missing_outputs": workload.outputs_missing,
        "empty_requests": workload.empty,
    }


def load_part(load: Load, vocab: TokenRange, max_output: int) -> dict[str, Any]:
    return {
        "mode": load.mode,
        "concurrency": load.concurrency,
        "speedup": None if load.concurrency else load.speedup,
        "max_inflight": None if load.concurrency else load.max_inflight,
        "duration_s": load.duration,
        "timeout_s": load.timeout,
        "max_output": max_output,
        "token_range": [vocab.lo, vocab.hi],
    }


def prediction_part(prediction: Prediction, block_tokens: int) -> dict[str, Any]:
    return {
        "device_tokens": prediction.device_tokens,
        "host_tokens": prediction.host_tokens,
        "storage": "unbounded" if prediction.storage else None,
        "block_tokens": block_tokens,
        "hit_rate": prediction.rates(),
        "max_hit_rate": round(prediction.max_hit_rate, 6),
    }


def run_part(run: ReplayRun) -> dict[str, Any]:
    return {
        "stop": run.stop,
        "started": _started(run.started),
        "unsent": run.unsent,
        "abandoned": run.abandoned,
    }


def honesty_notes(records: list[Any], requests: int) -> list[str]:
    """What the figures are averaged over when not every request completed, and outputs the
    server cut short."""
    done = [r for r in records if r.ok]
    notes = []
    if len(done) < len(records):
        notes.append(
            f"{len(records) - len(done):,} of {len(records):,} requests failed: the measured "
            f"hit rates and latencies are over the {len(done):,} that completed, the prediction "
            f"over all {requests:,} requests of the slice"
        )
    short = sum(1 for r in done if r.output_tokens < r.output_asked)
    if short:
        notes.append(
            f"{short:,} completed request(s) returned fewer output tokens than asked (the "
            "server clipped max_new_tokens)"
        )
    return notes


def validity_part(reasons: list[str], min_completion: float) -> dict[str, Any]:
    return {"valid": not reasons, "invalid_reasons": reasons, "min_completion": min_completion}


def replay_document(
    *,
    trace_file: str,
    workload: Workload,
    info: ServerInfo,
    load: Load,
    vocab: TokenRange,
    max_output: int,
    run: ReplayRun,
    prediction: Prediction,
    notes: list[str],
    tier_check: dict[str, Any],
    per_request: bool = False,
    min_completion: float = 1.0,
) -> dict[str, Any]:
    """`xputune replay --format json`: valid (false with its reasons when fewer than
    `min_completion` of the requests sent completed); tier_check from tierhealth."""
    from xputune.measure.noise import method

    n = len(workload.requests)
    measured = stats.measured(run.records, run.elapsed, n)
    doc: dict[str, Any] = {
        "schema_version": 1,
        **validity_part(stats.validity(run.records, min_completion), min_completion),
        "noise": method(n),
        "trace": trace_part(trace_file, workload),
        "server": info.document(),
        "load": load_part(load, vocab, max_output),
        "run": run_part(run),
        "measured": measured,
        "predicted": prediction_part(prediction, workload.block_tokens),
        "comparison": comparison(prediction, measured["hit_rate"]),
        "tier_check": tier_check,
        "phases": None,
        "recovery": None,
        "notes": [*info.notes, *honesty_notes(run.records, n), *notes],
    }
    if per_request:
        doc["per_request"] = [r.document() for r in run.records]
    return doc


def _phase_load(load: Load) -> dict[str, Any]:
    return {
        "mode": load.mode,
        "concurrency": load.concurrency,
        "speedup": None if load.concurrency else load.speedup,
        "max_inflight": None if load.concurrency else load.max_inflight,
        "duration_s": None if load.duration is None else round(load.duration, 3),
    }


def phase_part(pr: Any, per_request: bool, min_completion: float) -> dict[str, Any]:
    """One phase of a replay with --phases (measure/phases.py)."""
    n = pr.phase.requests
    out: dict[str, Any] = {
        "number": pr.number,
        **pr.phase.document(),
        "salt": pr.salt,
        "status": pr.status,
        "started_s": None if pr.started_s is None else round(pr.started_s, 3),
        "elapsed_s": None if pr.elapsed_s is None else round(pr.elapsed_s, 3),
        "input_tokens_before": pr.input_before,
        "load": None if pr.load is None else _phase_load(pr.load),
        "run": None if pr.run is None else run_part(pr.run),
        "measured": None,
        "predicted_hit_rate": None if pr.prediction is None else pr.prediction.rates(),
        "valid": None,
        "invalid_reasons": [],
        "tier_check": pr.tier_check,
    }
    if pr.run is not None:
        out["measured"] = stats.measured(pr.run.records, pr.run.elapsed, n)
        if pr.phase.name == "measure":
            reasons = stats.validity(pr.run.records, min_completion)
            out["valid"], out["invalid_reasons"] = not reasons, reasons
        if per_request:
            out["per_request"] = [r.document() for r in pr.run.records]
    return out


def phases_document(
    result: Any,
    *,
    trace_file: str,
    workload: Workload,
    info: ServerInfo,
    load: Load,
    vocab: TokenRange,
    max_output: int,
    notes: list[str],
    per_request: bool = False,
    min_completion: float = 1.0,
    margin: float = 0.10,
) -> dict[str, Any]:
    """`xputune replay --phases ... --format json`: the replay document of the last measure
    phase that ran (measured, predicted, comparison, tier_check), every phase in `phases`, the
    last measurement against the first in `recovery`; `run` is the whole run's; valid when
    both measurements completed as --min-completion asks and could be compared."""
    from xputune.measure import phases as ph
    from xputune.measure.replay import ReplayRun
    from xputune.measure.tierhealth import check_document

    first, last = result.first, result.last
    shown = last if last.run is not None else first
    run = shown.run or ReplayRun([], 0.0, result.stop, shown.phase.requests, 0, result.started)
    prediction = shown.prediction
    if prediction is None:
        from xputune.measure.predict import predict
        from xputune.plan.hitrate import exact_curve

        prediction = predict(exact_curve(workload.head(shown.phase.requests, 0).trace()), info)
    doc = replay_document(
        trace_file=trace_file, workload=shown.workload or workload.head(shown.phase.requests, 0),
        info=info, load=load, vocab=vocab, max_output=max_output, run=run,
        prediction=prediction, notes=[],
        tier_check=shown.tier_check or check_document([], None, "the phase did not run"),
        per_request=per_request, min_completion=min_completion,
    )  # fmt: skip
    doc["trace"] = trace_part(trace_file, workload)
    parts = [phase_part(pr, per_request, min_completion) for pr in result.phases]
    recovery = ph.recovery(result, info.storage_backend is not None and info.hicache, margin)
    reasons = [
        f"phase {p['number']} ({p['spec']}): {why}" for p in parts for why in p["invalid_reasons"]
    ]
    if recovery["verdict"] == ph.NOT_COMPARED:
        reasons.append(f"the measurements were not compared: {recovery['reason']}")
    doc.update(validity_part(reasons, min_completion))
    doc["run"] = {
        "stop": result.stop,
        "started": _started(result.started),
        "unsent": sum(
            (pr.run.unsent if pr.run is not None else (pr.phase.requests or 0))
            for pr in result.phases
        ),
        "abandoned": sum(pr.run.abandoned for pr in result.phases if pr.run is not None),
        "seconds": round(result.seconds, 3),
        "shown_phase": shown.number,
    }
    doc["phases"] = parts
    doc["recovery"] = recovery
    doc["notes"] = [
        *info.notes, *honesty_notes(run.records, shown.phase.requests), *ph.notes(result, info),
        *notes,
    ]  # fmt: skip
    return doc


def _started(when: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(when, datetime.UTC).isoformat(timespec="seconds")


def _step_part(step: Any, base: Any, recompute: Any, paired: Any, n: int | None,
               min_completion: float, l3: Any = None) -> dict[str, Any]:  # fmt: skip
    from xputune.measure.analysis import net_benefit

    out: dict[str, Any] = {
        "label": step.label,
        "hicache": step.hicache,
        "size": None
        if step.size is None
        else {"kind": step.size.kind, "value": step.size.value, "args": step.size.args()},
        "log": step.log,
        "timing_s": {
            "start": None if step.start_s is None else round(step.start_s, 2),
            "replay": None if step.replay_s is None else round(step.replay_s, 2),
            "stop": None if step.stop_s is None else round(step.stop_s, 2),
        },
        "server": None if step.info is None else step.info.document(),
        "run": None if step.run is None else run_part(step.run),
        "valid": None,
        "invalid_reasons": [],
        "measured": None,
        "predicted": None,
        "comparison": None,
        "net_benefit": None,
        "tier_check": step.tier_check,
        "l3": None if step.l3 is None or l3 is None else step.l3.document(l3),
        "cluster": None if step.cluster is None else step.cluster.document(),
    }
    if step.run is not None:
        measured = stats.measured(step.run.records, step.run.elapsed, n)
        reasons = stats.validity(step.run.records, min_completion)
        out["valid"], out["invalid_reasons"] = not reasons, reasons
        out["measured"] = measured
        if step.prediction is not None:
            out["predicted"] = {
                "device_tokens": step.prediction.device_tokens,
                "host_tokens": step.prediction.host_tokens,
                "storage": "unbounded" if step.prediction.storage else None,
                "hit_rate": step.prediction.rates(),
            }
            out["comparison"] = comparison(step.prediction, measured["hit_rate"])
        if base is not None and base is not step and step.hicache:
            out["net_benefit"] = net_benefit(step, base, recompute, paired)
    return out


def l3_notes(result: Any) -> list[str]:
    """What the sweep's L3 store held at each size's start, when that is not 'nothing'."""
    from xputune.measure import l3store

    policy = result.l3
    notes = []
    if policy is not None and policy.between_sizes == l3store.KEPT:
        where = f" ({policy.folder})" if policy.folder else ""
        notes.append(
            f"L3 ({policy.backend}{where}) was kept as it was between sizes (--keep-l3): a "
            "later size can count what an earlier one stored there as its own L3 hits, so the "
            "differences between sizes include it, and the prediction (an L3 empty at the "
            "start) can fall short of what L3 served"
        )
    for s in result.steps:
        if s.l3 is not None and s.l3.note:
            notes.append(f"{s.label}: L3 folder {s.l3.folder}: {s.l3.note}")
    return notes


def sweep_document(
    result: Any, *, trace_file: str, load: Load, max_output: int, min_gain: float,
    sizes: list[str], baseline: bool, min_completion: float = 1.0,
) -> dict[str, Any]:  # fmt: skip
    """`xputune sweep --format json`: every step, the verdicts, the fits; valid (false with
    its reasons when a step's requests completed below `min_completion`)."""
    from xputune.measure.analysis import Paired, differences, fits, knee_and_plateau, recompute_fit
    from xputune.measure.noise import method
    from xputune.measure.predict import differences as why_they_differ

    steps = result.steps
    base = next((s for s in steps if not s.hicache and s.run is not None), None)
    recompute = recompute_fit(steps)
    n = None if result.workload is None else len(result.workload.requests)
    paired = Paired(steps, n)
    parts = [_step_part(s, base, recompute, paired, n, min_completion, result.l3) for s in steps]
    reasons = [f"{p['label']}: {why}" for p in parts for why in p["invalid_reasons"]]
    if not any(s.run is not None for s in steps):
        reasons.append("no size was measured")
    doc: dict[str, Any] = {
        "schema_version": 1,
        **validity_part(reasons, min_completion),
        "noise": method(paired.n),
        "trace": None if result.workload is None else trace_part(trace_file, result.workload),
        "load": None if result.vocab is None else load_part(load, result.vocab, max_output),
        "sizes": sizes,
        "baseline": baseline,
        "min_gain": min_gain,
        "logs": result.logs,
        "seconds": round(result.seconds, 2),
        "interrupted": result.interrupted,
        "error": result.error,
        "stopped_early_after": result.stopped_early,
        "not_run": result.skipped_sizes,
        "max_hit_rate": None if result.curve is None else round(result.curve.max_hit_rate, 6),
        "l3": None if result.l3 is None else result.l3.document(),
        "cluster": result.cluster,
        "steps": parts,
        "differences": differences(steps, paired),
    }
    # the knee and the plateau rule read hit rate against L2 size; a sweep of clusters keeps
    # one size and varies N, the policy and L3
    doc.update({"knee": None, "knee_verdict": None, "plateau_rule": None}
               if result.cluster else knee_and_plateau(steps, min_gain, paired))  # fmt: skip
    doc.update(fits(steps))
    last = next((s for s in reversed(steps) if s.run is not None and s.info is not None), None)
    notes: list[str] = l3_notes(result)
    for s in steps:
        if s.run is not None and n is not None:
            notes += [f"{s.label}: {note}" for note in honesty_notes(s.run.records, n)]
    if last is not None and result.workload is not None and result.vocab is not None:
        notes += why_they_differ(
            result.workload, last.info, last.run.records,
            concurrent=load.mode == "open" or (load.concurrency or 1) > 1, vocab=result.vocab,
        )  # fmt: skip
    if result.cluster:
        from xputune.measure.router import differences as cluster_differences

        for routing in dict.fromkeys(s.cluster.routing for s in steps if s.cluster):
            notes += [n for n in cluster_differences(routing) if n not in notes]
    doc["notes"] = notes
    return doc
