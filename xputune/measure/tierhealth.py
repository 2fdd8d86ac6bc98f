"""Does each cache tier serve what it should? The tier that fills but never serves, found.

What HiCache users fight is rarely the total hit rate: it is a tier that is written and never
read (the host tier backs up and never loads back; an L3 store is written and never queried
back), one that serves far below what its capacity should give, or one whose hits cost more
than computing the prompt again. A replay that reads only the total misses all of them. This
module sets, for L2 (host) and L3 (storage), three kinds of evidence side by side:

- what the tier should serve: the prediction at its capacity (predict.py);
- what it served: the requests' own cached_tokens_details, summed over the completed ones;
- what it was made to do, by the server's counters over the run (tiercounters.py): tokens
  written to it, read from it (L3 into L2), found in it.

and names, per tier, what is wrong with the evidence and the likely causes:

  dead    written (or predicted to serve) but served nothing;
  starved served, but far below the prediction: less than half of it, by more than the run's
          own bound (one token per request as a rate, plus 0.01 of the input), and not made
          up by a faster tier (the tier and those before it together fall short too: L1
          serving what the model gave L2 is no fault of L2);
  slow    its hits take longer than computing the same prompt: requests served mostly from
          the tier against the recompute line R(n) = c + d*n fitted to this run's requests
          that hit nothing (at least MIN_POINTS of each), by the median ratio and a
          bootstrap interval of it (BOOTSTRAP resamples, seeded: the same run gives the same
          interval); called slow only when the whole interval lies above 1.

A tier the server does not have (no HiCache, no storage backend) is not judged; without the
counters (a server started without --enable-metrics) the evidence is the requests alone, and
the finding says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xputune.measure.predict import PREFETCH_THRESHOLD

if TYPE_CHECKING:
    from xputune.measure.predict import Prediction
    from xputune.measure.server import ServerInfo
    from xputune.measure.stats import Record
    from xputune.measure.tiercounters import TierCounters

MIN_POINTS = 5  # requests on each side of the slow test, at least
BOOTSTRAP = 400
SEED = 20260
MOSTLY = 0.5  # a request "served from the tier" takes at least this share of its prompt there
NAMES = {"host": "L2 (host)", "storage": "L3 (storage)"}


@dataclass(frozen=True)
class Finding:
    """One tier's verdict: what is wrong, the evidence, the likely causes."""

    tier: str
    verdict: str  # "dead", "starved", "slow"
    summary: str
    evidence: tuple[str, ...]
    causes: tuple[str, ...] = field(default=())

    def document(self) -> dict[str, Any]:
        return {
            "tier": self.tier,
            "verdict": self.verdict,
            "summary": self.summary,
            "evidence": list(self.evidence),
            "likely_causes": list(self.causes),
        }


@dataclass(frozen=True)
class _Tier:
    name: str
    served: int
    inputs: int
    predicted: float | None
    written: int | None
    # This tier and the faster ones together (device + host; + storage): a tier that serves
    # less because a faster one served its hits is not starved.
    served_through: int = 0
    predicted_through: float | None = None
    longest_miss: int = 0  # tokens: the longest stretch of a prompt no tier served


def assess(
    records: Sequence[Record],
    prediction: Prediction,
    info: ServerInfo,
    counters: TierCounters | None,
) -> list[Finding]:
    """Every finding of this run, host before storage; [] when both tiers are healthy."""
    done = [r for r in records if r.ok]
    inputs = sum(r.prompt_tokens for r in done)
    if not done or not inputs:
        return []
    bound = len(done) / inputs + 0.01
    findings: list[Finding] = []
    tiers = []
    if info.hicache:
        tiers.append(
            _Tier(
                "host", sum(r.host for r in done), inputs, prediction.host,
                None if counters is None else counters.host_written,
                sum(r.device + r.host for r in done),
                None if prediction.host is None else prediction.device + prediction.host,
            )
        )  # fmt: skip
    if info.hicache and info.storage_backend:
        tiers.append(
            _Tier(
                "storage", sum(r.storage for r in done), inputs, prediction.storage_rate,
                None if counters is None else counters.storage_written,
                sum(r.cached for r in done), prediction.total,
                max(r.prompt_tokens - r.cached for r in done),
            )
        )  # fmt: skip
    for tier in tiers:
        found = _capacity_finding(tier, bound, info, counters)
        if found is not None:
            findings.append(found)
        slow = _slow_finding(tier.name, done)
        if slow is not None:
            findings.append(slow)
    return findings


def _pct(x: float) -> str:
    return f"{x:.2%}"


def _counters_said(tier: _Tier, counters: TierCounters | None) -> list[str]:
    if counters is None:
        return ["the server's counters were not read (start it with --enable-metrics to see "
                "what each tier was written and read)"]  # fmt: skip
    said = [f"the server counted {tier.written:,} tokens written to {NAMES[tier.name]}"]
    if tier.name == "storage":
        said.append(
            f"and {counters.storage_found:,} tokens found in it by its queries, "
            f"{counters.storage_read:,} read from it into L2"
        )
    served = counters.served_by(tier.name)
    said.append(f"and {served:,} prompt tokens served from it (sglang:cached_tokens_total)")
    return [" ".join(said)]


def _capacity_finding(
    tier: _Tier, bound: float, info: ServerInfo, counters: TierCounters | None
) -> Finding | None:
    measured = tier.served / tier.inputs
    predicted = tier.predicted
    name = NAMES[tier.name]
    written = tier.written or 0
    expected = predicted is not None and predicted > bound
    # Written and unread is a dead tier only where reads were due: write_through writes
    # everything, and a workload that never returns to a prefix has nothing to read back.
    if tier.served == 0 and (expected or (predicted is None and written > 0)):
        evidence = [f"requests: 0 of {tier.inputs:,} prompt tokens came from {name}"]
        if predicted is not None:
            evidence.append(f"prediction at its capacity: {_pct(predicted)} of the input")
        evidence += _counters_said(tier, counters)
        wrote = f"written {written:,} tokens, " if written else ""
        return Finding(
            tier.name, "dead", f"{name}: {wrote}served none", tuple(evidence),
            _dead_causes(tier, info, counters),
        )  # fmt: skip
    starved = predicted is not None and measured < min(predicted / 2, predicted - bound)
    through = tier.served_through / tier.inputs
    short = tier.predicted_through is not None and through < tier.predicted_through - bound
    if not (expected and starved and short):
        return None
    assert predicted is not None
    evidence = [
        f"requests: {_pct(measured)} of the input came from {name}, {_pct(through)} from it "
        "and the faster tiers together",
        f"prediction at its capacity: {_pct(predicted)}, {_pct(tier.predicted_through or 0)} "
        f"with the faster tiers; the run's own bound on the gap: {_pct(bound)}",
        *_counters_said(tier, counters),
    ]
    return Finding(
        tier.name, "starved",
        f"{name}: serves {_pct(measured)}, below half the {_pct(predicted)} predicted",
        tuple(evidence), _starved_causes(tier, info),
    )  # fmt: skip


def _dead_causes(tier: _Tier, info: ServerInfo, counters: TierCounters | None) -> tuple[str, ...]:
    if tier.name == "host":
        if counters is not None and not tier.written:
            causes = ["nothing reached L2: write_through_selective writes a prefix only at its "
                      "second distinct request, write_back only when L1 evicts it; check "
                      "--hicache-write-policy against how often prefixes recur"]  # fmt: skip
        else:
            causes = []
        causes += [
            "L2 is written but never loaded back: host hits shorter than SGLang's load-back "
            "threshold are recomputed, and a prefix that returns after L2 evicted it misses",
            "the load-back path fails on this device (look for HiCache load errors in the "
            "server's log): SGLang's own reports of a host tier that never serves "
            "(cache_source=host never appears) share this sign",
        ]
        return tuple(causes)
    threshold = (
        f"SGLang queries L3 only for a miss of at least prefetch_threshold pages "
        f"({PREFETCH_THRESHOLD} by default, {PREFETCH_THRESHOLD * info.page_size:,} tokens "
        "here; the storage extra config sets it): "
        f"this run's longest miss was {tier.longest_miss:,} tokens"
    )
    timeout = (
        "the prefetch gives up before the store answers (--hicache-storage-prefetch-policy "
        "timeout: 1 s + 0.25 s per 1K tokens), so the hit is recomputed"
    )
    keys = (
        "the store does not return what it was given: it drops writes or answers its "
        "existence queries 'no' (a backend fault), or writer and reader keys differ (model "
        "name, TP size, page size or layout differ between the instances)"
    )
    causes = [threshold, timeout, keys]
    if tier.longest_miss >= 256 * info.page_size:
        causes = [timeout, keys]  # the default threshold cannot have kept this run out
    if counters is not None and counters.storage_written and not counters.storage_found:
        causes.remove(keys)
        causes.insert(0, f"its queries found none of the {counters.storage_written:,} tokens "
                         "written: " + keys)  # fmt: skip
    elif counters is not None and counters.storage_found and not counters.storage_read:
        causes.insert(0, "found in L3 but never read into L2: the host had no room for the "
                         "prefetch, or it finished after the request was admitted")  # fmt: skip
    return tuple(causes)


def _starved_causes(tier: _Tier, info: ServerInfo) -> tuple[str, ...]:
    causes = []
    if tier.name == "host" and info.write_policy == "write_through_selective":
        causes.append("write_through_selective keeps first-time prefixes out of L2: a prefix "
                      "evicted from L1 before its second request is lost (the ghost list "
                      "feature writes back what returns)")  # fmt: skip
    causes += [
        "less room than its size: the radix tree also keeps output tokens, and running "
        "requests hold L1 (see the differences listed with the comparison)",
        f"the capacity {NAMES[tier.name]} was predicted at is not the server's "
        "(--hicache-size / --hicache-ratio as the server resolved them)",
    ]
    return tuple(causes)


def _slow_finding(tier: str, done: Sequence[Record]) -> Finding | None:
    """Hits of `tier` slower than recomputing the same prompt, beyond the bootstrap's doubt."""
    import numpy as np

    from xputune.plan.netbenefit import fit_line

    misses = [
        (float(r.prompt_tokens), r.ttft * 1e3)
        for r in done
        if r.ttft is not None and r.cached == 0 and r.prompt_tokens > 0
    ]
    served = [
        r for r in done if r.ttft is not None and getattr(r, tier) >= MOSTLY * r.prompt_tokens > 0
    ]
    if len(misses) < MIN_POINTS or len(served) < MIN_POINTS:
        return None
    line = fit_line(misses)
    expected = np.array([max(1e-3, line.at(r.prompt_tokens)) for r in served])
    took = np.array([r.ttft * 1e3 for r in served])
    ratios = took / expected
    rng = np.random.default_rng(SEED)
    draws = rng.integers(0, len(ratios), size=(BOOTSTRAP, len(ratios)))
    medians = np.median(ratios[draws], axis=1)
    low, high = (float(x) for x in np.percentile(medians, [2.5, 97.5]))
    median = float(np.median(ratios))
    if low <= 1.0:
        return None
    name = NAMES[tier]
    return Finding(
        tier, "slow",
        f"{name}: its hits take x{median:.2f} the time of computing the same prompt "
        f"(95% interval x{low:.2f} to x{high:.2f})",
        (
            f"{len(served)} requests served at least {MOSTLY:.0%} from {name}: median TTFT "
            f"{float(np.median(took)):.1f} ms",
            f"recompute line from {len(misses)} requests that hit nothing: R(n) = "
            f"{line.intercept_ms:.1f} ms + {line.slope_ms_per_token * 1e3:.3f} us x n; the "
            f"same prompts would take {float(np.median(expected)):.1f} ms (median)",
        ),
        (
            f"moving KV from {name} costs more than the compute it saves: the transfer path "
            "(bandwidth, layout: page_first_direct issues a copy per page and layer), or "
            "registered memory too large for the IOMMU (the field report: smaller is faster)",
            "prefetch waits (policy wait_complete) or queueing behind other transfers",
        ),
    )  # fmt: skip


def check_document(
    findings: Sequence[Finding], counters: TierCounters | None, counters_note: str | None
) -> dict[str, Any]:
    """The replay document's tier_check part (schema replay.json)."""
    return {
        "counters": None if counters is None else counters.document(),
        "counters_note": counters_note,
        "findings": [f.document() for f in findings],
    }
