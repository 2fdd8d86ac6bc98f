"""Phases in one replay: warm the tiers, stress them, let the server cool, measure again; and
whether the server came back to what it measured first (docs/measure.md, "Phases").

The spec (--phases) is a comma-separated list of NAME:AMOUNT[@LOAD]:

  warm:N      send N requests of the slice (fill the tiers before the first measurement)
  measure:N   send N requests of the slice and measure them; the first measure phase and the
              last are compared (at least two, of the same N)
  stress:N    send N requests, as a rule at a higher load: @Kx plays the trace's clock K times
              faster (open loop) or runs K times the concurrency (closed loop); @cK runs
              closed loop, K at once
  cool:T      send nothing for T (30s, 2m, 1.5m)

warm and stress take a load (@...), measure does not: both measurements run at the run's own
load (--speedup or --concurrency), so they differ only in what the server went through between
them.

Which requests. Every request phase sends the first N requests of the slice, in order, under a
salt of its own (tokens.salt_key, drawn once per run): every block id of phase k, tails
included, goes through a bijection of its own, so a phase sends the same requests with the
same prefixes shared among them, in tokens no other phase (and no other run) sends. So the
first and the last measurement send the same requests at the same load, and neither finds any
of its prefixes in any tier at its start, L3 included: request i of the one is paired with
request i of the other (noise.py's paired bootstrap). Replaying the same tokens twice would
make the second measurement hit what the first stored; a fresh slice of the trace would change
the workload (other lengths, other reuse) and allow no pairing; flushing the cache between
them (/flush_cache) would reset the very state under test (a host pool that leaks is made
whole by a flush), leave L3 as it was, and act on a server the user runs.

What the tiers hold at a measurement's start is what earlier phases sent: older than anything
the measurement sends, so under the LRU eviction of SGLang's tiers it is evicted first and
changes none of the measurement's hits (a full tier serves what an empty one does, which is
what the prediction for an empty cache says); it changes the work (a full tier evicts, and may
write back, as it admits). So the first measurement should start with tiers as full as the
last's: a warm phase of at least L1 + L2 tokens; a note says when it was not.

The verdict compares the last measurement with the first, request by request, each difference
with its 95% bootstrap interval: did not recover when a judged figure is worse beyond noise
and by more than the margin (--recovery-margin, 10% of its first value by default: the whole
interval lies past it), naming the figures; recovered otherwise (each is within noise, better,
or worse by less than the margin, said as such); not compared when a measurement did not run
whole (--duration, Ctrl-C) or no request completed in both. The margin is there because the
interval covers the requests' variation, not the host's: a load that drifts between the two
measurements shifts every request alike, and pairing reads that as real. Judged:
the hit rate in total, from L1, and from L1 or L2 (with an L3 tier), lower is worse; the mean
TTFT and the mean end-to-end latency, higher is worse; the decode rate (output tokens after
the first per second of decoding, over the requests), lower is worse. The shares of L2 and L3
alone are shown, not judged (a share that moves to a faster tier is no loss).

Bounds: --duration is a hard end for the whole run (every phase): a request phase gets what is
left of it as its own duration (replay.py's rule: nothing sent after it, what is in flight gets
--timeout more), a cool phase sleeps at most what is left, and a phase that starts with nothing
left does not run. Every request keeps its own --timeout. Ctrl-C ends the run at once with what
was measured.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from xputune.errors import XputuneError
from xputune.userfiles import printable

if TYPE_CHECKING:
    import numpy as np

    from xputune.measure.client import Endpoint
    from xputune.measure.predict import Prediction
    from xputune.measure.replay import Load, ReplayRun
    from xputune.measure.server import ServerInfo
    from xputune.measure.stats import Record
    from xputune.measure.tokens import TokenRange
    from xputune.measure.workload import Workload

NAMES = ("warm", "measure", "stress", "cool")
MAX_PHASES = 64
MAX_SECONDS = 1e7  # a cool phase, at most (as --duration)
MAX_SCALE = 1e6  # @Kx, at most
_TICK = 0.1  # seconds a cool phase sleeps at a time (so Ctrl-C is seen at once)
_PHASE = re.compile(
    r"(?P<name>[a-z]+):(?P<amount>[0-9]+(?:\.[0-9]+)?)(?P<unit>s|m)?"
    r"(?:@(?:(?P<scale>[0-9]+(?:\.[0-9]+)?)x|c(?P<conc>[0-9]+)))?"
)


@dataclass(frozen=True)
class Phase:
    """One phase of the spec."""

    name: str  # warm, measure, stress, cool
    requests: int | None = None  # a request phase: the first N requests of the slice
    seconds: float | None = None  # cool: idle this long
    scale: float | None = None  # @Kx: K times the run's speedup (open) or concurrency (closed)
    concurrency: int | None = None  # @cK: closed loop, K at once
    spec: str = ""

    @property
    def idle(self) -> bool:
        return self.seconds is not None

    def load(self, base: Load, duration: float | None) -> Load:
        """This phase's load: the run's, scaled as @ says, ending by `duration`."""
        if self.concurrency is not None:
            return replace(base, concurrency=self.concurrency, duration=duration)
        if self.scale is not None and base.concurrency:
            scaled = max(1, round(base.concurrency * self.scale))
            return replace(base, concurrency=scaled, duration=duration)
        if self.scale is not None:
            return replace(base, speedup=base.speedup * self.scale, duration=duration)
        return replace(base, duration=duration)

    def document(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "spec": self.spec,
            "kind": "idle" if self.idle else "requests",
            "requests": self.requests,
            "seconds": self.seconds,
            "scale": self.scale,
            "concurrency": self.concurrency,
        }


def _bad(word: str, why: str) -> XputuneError:
    return XputuneError(f"--phases: {printable(word)[:60]!r}: {why}")


def _phase(word: str) -> Phase:
    text = word.strip().lower()
    got = _PHASE.fullmatch(text)
    if got is None:
        raise _bad(word, "expected NAME:N (requests), NAME:N@Kx or NAME:N@cK (a load), or "
                   "cool:SECONDSs (30s, 2m)")  # fmt: skip
    name, unit = got["name"], got["unit"]
    if name not in NAMES:
        raise _bad(word, f"no phase {name!r}: phases are {', '.join(NAMES)}")
    loaded = got["scale"] is not None or got["conc"] is not None
    if name == "cool":
        if unit is None:
            raise _bad(word, "a cool phase is a time: cool:30s, cool:2m")
        if loaded:
            raise _bad(word, "a cool phase sends nothing: it takes no load")
        seconds = float(got["amount"]) * (60.0 if unit == "m" else 1.0)
        if not 0 < seconds <= MAX_SECONDS:
            raise _bad(word, f"a cool phase lasts more than 0 and at most {MAX_SECONDS:g} s")
        return Phase(name, seconds=seconds, spec=text)
    if unit is not None or "." in got["amount"]:
        raise _bad(word, f"a {name} phase is a number of requests (whole): {name}:100")
    count = int(got["amount"])
    if count < 1:
        raise _bad(word, "a phase sends at least one request")
    if name == "measure" and loaded:
        raise _bad(word, "a measure phase runs at the run's own load (--speedup, --concurrency): "
                   "both measurements alike; give the load to warm or stress")  # fmt: skip
    scale = None if got["scale"] is None else float(got["scale"])
    if scale is not None and not 0 < scale <= MAX_SCALE:
        raise _bad(word, f"@Kx needs 0 < K <= {MAX_SCALE:g}")
    conc = None if got["conc"] is None else int(got["conc"])
    if conc is not None and not 1 <= conc <= 100_000:
        raise _bad(word, "@cK needs 1 <= K <= 100000")
    return Phase(name, requests=count, scale=scale, concurrency=conc, spec=text)


def parse_phases(text: str) -> list[Phase]:
    """The phases of `text`, in order; XputuneError (one line) for a spec that cannot run."""
    words = [w for w in text.split(",") if w.strip()]
    if len(words) > MAX_PHASES:
        raise XputuneError(f"--phases: at most {MAX_PHASES} phases")
    phases = [_phase(w) for w in words]
    measures = [p for p in phases if p.name == "measure"]
    if len(measures) < 2:
        raise XputuneError(
            "--phases: give two measure phases or more (the first and the last are compared), "
            "e.g. warm:200,measure:100,stress:400@4x,cool:30s,measure:100"
        )
    if measures[0].requests != measures[-1].requests:
        raise XputuneError(
            f"--phases: the first and the last measure phase send the same requests, to be "
            f"compared request by request: give both the same count (not "
            f"{measures[0].requests} and {measures[-1].requests})"
        )
    return phases


def most_requests(phases: Sequence[Phase]) -> int:
    """The slice the phases need: the largest count of requests one phase sends."""
    return max(p.requests or 0 for p in phases)


# ------------------------------------------------------------------------------- the run


@dataclass
class PhaseRun:
    """One phase as it ran (or did not)."""

    phase: Phase
    number: int  # 1-based
    salt: int = 0
    workload: Workload | None = None
    load: Load | None = None
    run: ReplayRun | None = None
    prediction: Prediction | None = None
    tier_check: dict[str, Any] | None = None
    findings: int = 0
    status: str = "not run"  # "done", "duration", "interrupted", "not run"
    started_s: float | None = None  # since the run's start
    elapsed_s: float | None = None
    input_before: int = 0  # input tokens the phases before it sent

    @property
    def measured_whole(self) -> bool:
        """A measure phase that sent every one of its requests."""
        return self.run is not None and self.run.stop == "done" and self.run.unsent == 0


@dataclass
class PhasesRun:
    phases: list[PhaseRun]
    seconds: float
    stop: str  # "done", "duration", "interrupted"
    started: float  # time.time() at the start
    base_salt: int

    def measures(self) -> list[PhaseRun]:
        return [p for p in self.phases if p.phase.name == "measure"]

    @property
    def first(self) -> PhaseRun:
        return self.measures()[0]

    @property
    def last(self) -> PhaseRun:
        return self.measures()[-1]


class Progress:
    """What a phases run tells as it goes (the CLI prints it on a terminal); silent by
    default."""

    def phase(self, run: PhaseRun, total: int) -> Callable[[Record], None] | None: ...
    def done(self, run: PhaseRun) -> None: ...


def run_phases(
    phases: Sequence[Phase],
    workload: Workload,
    endpoint: Endpoint,
    vocab: TokenRange,
    base: Load,
    info: ServerInfo,
    progress: Progress | None = None,
    salt: int | None = None,
) -> PhasesRun:
    """Every phase in order, within --duration (base.duration) for all of them together;
    Ctrl-C ends the run with what was measured."""
    from xputune.measure import tiercounters, tierhealth
    from xputune.measure.predict import predict
    from xputune.measure.replay import replay
    from xputune.plan.hitrate import exact_curve

    progress = progress or Progress()
    base_salt = salt if salt is not None else secrets.randbits(62) | 1
    started = time.time()
    t0 = time.monotonic()
    end = None if base.duration is None else t0 + base.duration
    runs = [PhaseRun(p, k + 1, base_salt + k + 1) for k, p in enumerate(phases)]
    predictions: dict[int, Prediction] = {}
    stop, sent = "done", 0
    try:
        for pr in runs:
            left = None if end is None else end - time.monotonic()
            pr.input_before = sent
            if left is not None and left <= 0:
                stop = "duration"
                break
            pr.started_s = time.monotonic() - t0
            if pr.phase.idle:
                progress.phase(pr, 0)
                asked = pr.phase.seconds or 0.0
                wait = asked if left is None else min(asked, left)
                _sleep(wait)
                pr.elapsed_s = time.monotonic() - t0 - pr.started_s
                pr.status = "done" if wait == asked else "duration"
                progress.done(pr)
                continue
            count = pr.phase.requests or 0
            pr.workload = workload.head(count, pr.salt)
            pr.load = pr.phase.load(base, left)
            if count not in predictions:
                predictions[count] = predict(exact_curve(pr.workload.trace()), info)
            pr.prediction = predictions[count]
            measure = pr.phase.name == "measure"
            before = tiercounters.read(endpoint)[0] if measure else None
            on_done = progress.phase(pr, count)
            pr.run = replay(pr.workload, endpoint, vocab, pr.load, on_done)
            pr.elapsed_s = time.monotonic() - t0 - pr.started_s
            pr.status = pr.run.stop
            sent += sum(r.prompt_tokens for r in pr.run.records if r.ok)
            if measure:
                after, note = tiercounters.read(endpoint)
                counters = after.minus(before) if after is not None and before is not None \
                    else None  # fmt: skip
                found = tierhealth.assess(pr.run.records, pr.prediction, info, counters)
                pr.findings = len(found)
                pr.tier_check = tierhealth.check_document(found, counters, note)
            progress.done(pr)
            if pr.run.stop == "interrupted":
                stop = "interrupted"
                break
            if pr.run.stop == "duration":
                stop = "duration"
    except KeyboardInterrupt:
        stop = "interrupted"
        for pr in runs:
            if pr.status == "not run" and pr.started_s is not None:
                pr.status = "interrupted"
                pr.elapsed_s = time.monotonic() - t0 - pr.started_s
    return PhasesRun(runs, time.monotonic() - t0, stop, started, base_salt)


def _sleep(seconds: float) -> None:
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, _TICK))


# ------------------------------------------------------------------------ the comparison

#: (key, label, what a worse change is: -1 lower, +1 higher, 0 not judged)
FIGURES = (
    ("hit_rate_total", "hit rate", -1),
    ("hit_rate_l1", "hit rate from L1", -1),
    ("hit_rate_l1_l2", "hit rate from L1 or L2", -1),
    ("hit_rate_l2", "share served from L2", 0),
    ("hit_rate_l3", "share served from L3", 0),
    ("ttft_mean_ms", "mean TTFT", +1),
    ("e2e_mean_ms", "mean end-to-end latency", +1),
    ("decode_tokens_per_s", "decode rate", -1),
)
_UNITS = {"ttft_mean_ms": "ms", "e2e_mean_ms": "ms", "decode_tokens_per_s": "tokens/s"}
RECOVERED = "recovered"
NOT_RECOVERED = "did not recover"
NOT_COMPARED = "not compared"
_COLS = ("completed", "prompt", "device", "host", "storage", "timed", "ttft_ms", "e2e_ms",
         "decode_tokens", "decode_ms")  # fmt: skip


def _columns(records: Sequence[Record], n: int) -> np.ndarray:
    import numpy as np

    out = np.zeros((n, len(_COLS)))
    for r in records:
        if not r.ok or r.index >= n:
            continue
        timed = r.ttft is not None
        e2e = r.e2e * 1e3 if r.e2e is not None else 0.0
        decoding = timed and r.e2e is not None and r.output_tokens >= 2
        out[r.index] = (
            1.0, r.prompt_tokens, r.device, r.host, r.storage, float(timed),
            r.ttft * 1e3 if timed else 0.0, e2e,  # type: ignore[operator]
            r.output_tokens - 1 if decoding else 0.0,
            (r.e2e - r.ttft) * 1e3 if decoding else 0.0,  # type: ignore[operator]
        )  # fmt: skip
    return out


def _figures(cols: np.ndarray, draws: np.ndarray, storage: bool) -> dict[str, Any]:
    """Every figure (point, draws) from the sums of one phase's columns."""
    from xputune.measure.noise import ratio

    def col(name: str) -> tuple[float, np.ndarray]:
        i = _COLS.index(name)
        return float(cols[i]), draws[:, i]

    def add(*parts: tuple[float, np.ndarray]) -> tuple[float, np.ndarray]:
        return sum(p for p, _ in parts), sum(d for _, d in parts)  # type: ignore[return-value]

    prompt = col("prompt")
    out = {
        "hit_rate_total": ratio(add(col("device"), col("host"), col("storage")), prompt),
        "hit_rate_l1": ratio(col("device"), prompt),
        "hit_rate_l2": ratio(col("host"), prompt),
        "ttft_mean_ms": ratio(col("ttft_ms"), col("timed")),
        "e2e_mean_ms": ratio(col("e2e_ms"), col("completed")),
    }
    if storage:
        out["hit_rate_l1_l2"] = ratio(add(col("device"), col("host")), prompt)
        out["hit_rate_l3"] = ratio(col("storage"), prompt)
    tokens, ms = col("decode_tokens"), col("decode_ms")
    rate, rate_draws = ratio(tokens, ms)
    out["decode_tokens_per_s"] = (None if rate is None else rate * 1e3, rate_draws * 1e3)
    return out


#: a judged figure is worse only past this share of its first value (--recovery-margin)
MARGIN = 0.10
WORSE = "worse"
SLIGHTLY_WORSE = "worse within the margin"
BETTER = "better"


def recovery(result: PhasesRun, storage: bool, margin: float = MARGIN) -> dict[str, Any]:
    """The last measurement against the first, paired request by request: each figure's
    change with its interval, and the verdict. A judged figure is worse when the whole
    interval of its change lies on the worse side of `margin` x its first value: beyond
    noise, and by more than the margin (a drift of the host's load moves every request alike,
    which pairing reads as real: the margin keeps that from passing for a server that did
    not recover)."""
    import numpy as np

    from xputune.measure.noise import NO_DIFFERENCE, Bootstrap, interval

    first, last = result.first, result.last
    n = first.phase.requests or 0
    out: dict[str, Any] = {
        "first_phase": first.number,
        "last_phase": last.number,
        "requests": n,
        "compared": 0,
        "margin": margin,
        "figures": [],
        "verdict": NOT_COMPARED,
        "worse": [],
        "better": [],
        "reason": None,
    }
    missing = [p for p in (first, last) if not p.measured_whole]
    if missing:
        p = missing[0]
        why = "did not run" if p.run is None else (
            f"sent {len(p.run.records):,} of {n:,} requests ({p.status})"
        )  # fmt: skip
        out["reason"] = f"measure phase {p.number} {why}: the two measurements are not the same"
        return out
    assert first.run is not None and last.run is not None
    a, b = _columns(first.run.records, n), _columns(last.run.records, n)
    both = (a[:, 0] > 0) & (b[:, 0] > 0)
    timed = both & (a[:, 5] > 0) & (b[:, 5] > 0)
    for cols in (a, b):
        cols[~both] = 0.0
        cols[~timed, 5:7] = 0.0
    out["compared"] = int(both.sum())
    if not out["compared"]:
        out["reason"] = "no request completed in both measurements"
        return out
    point, draws = Bootstrap(n).sums(np.hstack([a, b]))
    k = len(_COLS)
    fa = _figures(point[:k], draws[:, :k], storage)
    fb = _figures(point[k:], draws[:, k:], storage)
    for key, label, sign in FIGURES:
        if key not in fa:
            continue
        (pa, da), (pb, db) = fa[key], fb[key]
        change = interval(None if pa is None or pb is None else pb - pa, db - da)
        hits = key.startswith("hit_rate")
        allowed = None if pa is None else abs(pa) * margin
        verdict = NO_DIFFERENCE
        if change.beyond_noise and sign:
            assert change.low is not None and change.high is not None
            # the change's interval as "how much worse" (positive: worse)
            worst, least = (change.high, change.low) if sign > 0 else (-change.low, -change.high)
            if least > 0:
                verdict = WORSE if allowed is not None and least > allowed else SLIGHTLY_WORSE
            elif worst < 0:
                verdict = BETTER
        elif change.beyond_noise:
            verdict = "differs beyond noise"
        out["figures"].append({
            "figure": key,
            "label": label,
            "unit": _UNITS.get(key, "points"),
            "judged": bool(sign),
            "first": None if pa is None else round(pa, 6),
            "last": None if pb is None else round(pb, 6),
            "change": change.difference(6 if hits else 3),
            "margin": None if allowed is None or not sign else round(allowed, 6 if hits else 3),
            "verdict": verdict,
            "worse": verdict == WORSE,
            "better": verdict == BETTER,
        })  # fmt: skip
        if verdict == WORSE:
            out["worse"].append(label)
        if verdict == BETTER:
            out["better"].append(label)
    out["verdict"] = NOT_RECOVERED if out["worse"] else RECOVERED
    return out


# ------------------------------------------------------------------------------- notes


def notes(result: PhasesRun, info: ServerInfo) -> list[str]:
    """What a reader of the phases must know: a first measurement on tiers less full than the
    last's, requests that failed outside the measurements, phases --duration left out."""
    from xputune.measure.stats import failures

    out: list[str] = []
    first, last = result.first, result.last
    room = info.device_tokens + (info.host_tokens or 0)
    if info.host_tokens is not None and first.input_before < room <= last.input_before:
        out.append(
            f"the first measurement started after {first.input_before:,} input tokens, fewer "
            f"than L1 and L2 hold ({room:,}); the last after {last.input_before:,}: its tiers "
            "were full, the first's were not, so the last had to evict as it admitted and the "
            "first did not; warm with more requests to start both alike"
        )
    for pr in result.phases:
        if pr.phase.name != "measure" and pr.run is not None:
            bad = [r for r in pr.run.records if not r.ok]
            if bad:
                top = failures(pr.run.records)[0]
                out.append(
                    f"phase {pr.number} ({pr.phase.spec}): {len(bad):,} of "
                    f"{len(pr.run.records):,} requests failed, most often ({top['count']:,}x): "
                    f"{top['error']}; not a measurement, so the run stays valid"
                )
        if pr.status == "not run" and result.stop == "duration":
            out.append(f"phase {pr.number} ({pr.phase.spec}) did not run: --duration ended the "
                       "run before it")  # fmt: skip
    return out
