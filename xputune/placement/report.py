"""The `xputune verify` document (schema "verify", xputune/data/schemas/verify.json), which is
also what the state directory keeps as the last verification (tune/verifystate.py) for
`status` and `metrics`."""

from __future__ import annotations

import time
from typing import Any

from xputune.host.values import format_cpulist
from xputune.placement.judge import Verdict
from xputune.placement.read import Reading

SCHEMA_VERSION = 1


def _cpus(cpus: tuple[int, ...] | None) -> str | None:
    return None if cpus is None else format_cpulist(cpus)


def _pool(v: Verdict) -> dict[str, Any] | None:
    pool = v.facts.pool
    if pool is None:
        return None
    smaps = pool.smaps
    nodes = None
    if v.bytes_per_node is not None and v.resident:
        nodes = [
            {"node": n, "bytes": b, "share": round(b / v.resident, 4)}
            for n, b in sorted(v.bytes_per_node.items())
            if b
        ]
    return {
        "start": f"{smaps.start:#x}",
        "end": f"{smaps.end:#x}",
        "size_bytes": smaps.size,
        "kind": pool.kind,
        "name": smaps.name,
        "picked_by": pool.how,
        "policy": str(pool.numa.policy) if pool.numa is not None else None,
        "resident_bytes": v.resident,
        "nodes": nodes,
        "huge_bytes": smaps.huge,
        "huge_share": None if v.huge_share is None else round(v.huge_share, 4),
        "kernel_page_bytes": smaps.sizes.get("KernelPageSize"),
        "thp_eligible": smaps.thp_eligible,
        "vm_flags": list(smaps.vm_flags),
    }


def rank_document(v: Verdict) -> dict[str, Any]:
    f, plan = v.facts, v.intent
    return {
        "rank": f.rank.label,
        "tp": f.rank.tp,
        "dp": f.rank.dp,
        "pp": f.rank.pp,
        "pid": f.pid,
        "title": f.title,
        "verdict": v.verdict,
        "plan": {
            "mode": plan.mode,
            "nodes": list(plan.nodes),
            "huge_pages": plan.huge,
            "huge_pages_via": plan.huge_via or None,
            "cpus_bound": plan.cpus_bound,
            "cpu_node": plan.cpu_node,
            "source": plan.source,
        },
        "cpus": {
            "allowed": _cpus(f.cpus),
            "on_node": v.cpus_on_node,
            "node_cpus": _cpus(v.node_cpus) if v.node_cpus else None,
        },
        "mems_allowed": _cpus(f.mems),
        "pool": _pool(v),
        "findings": [{"kind": x.kind, "text": x.text, "fix": x.fix} for x in v.findings],
        "notes": list(v.notes),
    }


def verdict(reading: Reading) -> str:
    if reading.drifting:
        return "drift"
    return "unknown" if reading.unknown else "ok"


def document(reading: Reading, url: str | None = None, now: float | None = None) -> dict[str, Any]:
    """The --format json document; `now` (Unix seconds) is when the ranks were read."""
    when = time.time() if now is None else now
    return {
        "schema_version": SCHEMA_VERSION,
        "host": reading.host,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when)),
        "time_unix": round(when, 3),
        "server": {"pid": reading.top, "found_by": reading.found_by, "url": url},
        "pool_expected_bytes": reading.expected,
        "pool_expected_from": reading.expected_from,
        "verdict": verdict(reading),
        "drift": bool(reading.drifting),
        "drifting": [r.facts.rank.label for r in reading.drifting],
        "unknown": [r.facts.rank.label for r in reading.unknown],
        "ranks": [rank_document(r) for r in reading.ranks],
        "warnings": list(reading.warnings),
    }


def summary(doc: dict[str, Any]) -> str:
    """One line: how many ranks, which drift and why, which are unknown."""
    ranks = doc["ranks"]
    head = f"{len(ranks)} rank{'s' * (len(ranks) != 1)} of pid {doc['server']['pid']}"
    if doc["drifting"]:
        kinds = {r["rank"]: sorted({x["kind"] for x in r["findings"]}) for r in ranks}
        named = ", ".join(f"{n} ({', '.join(kinds[n])})" for n in doc["drifting"])
        line = f"{head}: drift in {named}"
    else:
        line = f"{head}: every rank's pool where it was planned" if not doc["unknown"] else head
    if doc["unknown"]:
        line += f"; unknown: {', '.join(doc['unknown'])}"
    return line


__all__ = ["SCHEMA_VERSION", "document", "rank_document", "summary", "verdict"]
