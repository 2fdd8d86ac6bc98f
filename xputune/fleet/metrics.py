"""Prometheus text exposition (format 0.0.4) of a host's layout, links, ordering and drift.

For node_exporter's textfile collector: `xputune metrics --textfile DIR` writes xputune.prom.
Conventions (prometheus.io/docs/practices/naming): every name starts with xputune_, values are
in base units (link speed in transfers per second, memory in bytes), a boolean is a 0/1 gauge,
an `_info` metric carries its facts as labels with the value 1, and times are Unix seconds
(`_timestamp_seconds`). What is read from the host is a gauge: a state read now. An unknown value
(config space unreadable, a NUMA node the kernel does not report) has no sample rather than a
made-up one.

Where `xputune watch` runs, its state file (fleet/watchstate.py) adds what it saw and did:
counters (`_total`: events by kind, drift found and re-applies per knob; they carry over agent
restarts), the last re-apply's time and result, and the places backing off now. Where
`xputune verify` ran, the last verification (tune/verifystate.py) adds a series per rank of
the server: its host KV pool's bytes per NUMA node (xputune_kv_pool_bytes{rank,node}), its
share on the planned node and on huge pages, and a 0/1 drift gauge.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from xputune.fleet.judge import Judgement
from xputune.fleet.watchstate import WatchState
from xputune.topology.model import Link, Topology

GT = 1e9  # sysfs link speeds are in GT/s; Prometheus wants transfers per second
VERDICTS = ("ok", "drift", "unknown", "unsupported")

Sample = tuple[dict[str, str], float]


class Family:
    """One metric: name, help, type and its samples."""

    def __init__(self, name: str, help_text: str, kind: str = "gauge") -> None:
        self.name = name
        self.help = help_text
        self.kind = kind
        self.samples: list[Sample] = []

    def add(self, value: float | bool | None, **labels: str | None) -> None:
        if value is None:
            return
        self.samples.append(({k: v for k, v in labels.items() if v is not None}, float(value)))

    def render(self) -> str:
        lines = [f"# HELP {self.name} {_help(self.help)}", f"# TYPE {self.name} {self.kind}"]
        for labels, value in self.samples:
            inner = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            lines.append(f"{self.name}{{{inner}}} {_value(value)}" if inner else
                         f"{self.name} {_value(value)}")  # fmt: skip
        return "\n".join(lines) + "\n"


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _label(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _value(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def _bit(value: bool | None) -> int | None:
    return None if value is None else int(value)


def _link(fams: list[Family], link: Link, **labels: str | None) -> None:
    """Samples of one link into the five families _link_families made, in their order."""
    speed, max_speed, width, max_width, degraded = fams
    speed.add(None if link.current_speed is None else link.current_speed * GT, **labels)
    max_speed.add(None if link.max_speed is None else link.max_speed * GT, **labels)
    width.add(link.current_width, **labels)
    max_width.add(link.max_width, **labels)
    known = None not in (link.current_speed, link.max_speed) or None not in (
        link.current_width, link.max_width)  # fmt: skip
    degraded.add(int(link.degraded) if known else None, **labels)


def _link_families(what: str, prefix: str) -> list[Family]:
    return [
        Family(f"{prefix}_current_link_transfers_per_second",
               f"PCIe link speed the {what} runs at now, in transfers per second."),
        Family(f"{prefix}_max_link_transfers_per_second",
               f"Fastest PCIe link speed the {what} can do, in transfers per second."),
        Family(f"{prefix}_current_link_width", f"PCIe lanes the {what}'s link runs with now."),
        Family(f"{prefix}_max_link_width", f"PCIe lanes the {what}'s link can use."),
        Family(f"{prefix}_link_degraded",
               f"1 when the {what}'s link runs slower or narrower than it can, else 0."),
    ]  # fmt: skip


def families(topo: Topology, host: str, judgement: Judgement | None = None) -> list[Family]:
    """Every metric of this host, in a stable order."""
    out: list[Family] = []
    host_info = Family("xputune_host_info", "The host: name, CPU, where the picture came from.")
    host_info.add(1, host=host, cpu_vendor=topo.cpu.vendor, cpu_model=topo.cpu.model_name,
                  source=topo.source)  # fmt: skip
    out.append(host_info)
    cards = Family("xputune_cards", "Accelerator cards on the host.")
    cards.add(len(topo.cards))
    out.append(cards)

    card_info = Family("xputune_card_info", "An accelerator card: model, vendor, bus id.")
    numa = Family("xputune_card_numa_node", "The NUMA node a card is attached to.")
    group = Family("xputune_card_uplink_group",
                   "The uplink group of a card (the PCIe switch upstream port it shares); cards "
                   "with the same value share one link to the CPU.")  # fmt: skip
    link_fams = _link_families("card", "xputune_card_pcie")
    ido = Family(
        "xputune_pcie_ido_enabled",
        "1 when PCIe ID-based ordering is enabled on a port on a card's path "
        "(direction: request or completion), 0 when off; absent when unreadable.",
    )
    readable = Family("xputune_pcie_ordering_readable",
                      "1 when the ordering bits of a port on a card's path could be read "
                      "(reading config space beyond 64 bytes needs root).")  # fmt: skip
    uplink_index = {u.bdf: i for i, u in enumerate(topo.uplinks)}
    for card in topo.cards:
        fn = topo.pci[card.bdf]
        card_info.add(1, card=card.name, bdf=card.bdf, vendor=card.vendor, model=card.model,
                      device_id=fn.device_hex)  # fmt: skip
        numa.add(card.numa_node, card=card.name)
        if card.uplink is not None:
            group.add(uplink_index.get(card.uplink), card=card.name, uplink=card.uplink)
        _link(link_fams, fn.link, card=card.name, bdf=card.bdf)
        for port in topo.ports_on_path(card):
            where = {"card": card.name, "bdf": port.bdf, "port": port.kind}
            o = port.ordering
            readable.add(int(o.ido_request is not None), **where)
            ido.add(_bit(o.ido_request), **where, direction="request")
            ido.add(_bit(o.ido_completion), **where, direction="completion")
    out += [card_info, numa, group, *link_fams, ido, readable]

    node_cards = Family("xputune_numa_node_cards", "Accelerator cards attached to a NUMA node.")
    node_mem = Family("xputune_numa_node_memory_bytes", "Memory of a NUMA node, in bytes.")
    for node in topo.numa_nodes:
        count = sum(c.numa_node == node.id for c in topo.cards)
        node_cards.add(count, node=str(node.id))
        node_mem.add(node.memory_total_bytes, node=str(node.id))
    out += [node_cards, node_mem]

    uplink_cards = Family(
        "xputune_uplink_cards", "Cards behind one PCIe switch upstream port (sharing its link)."
    )
    uplink_fams = _link_families("uplink", "xputune_uplink_pcie")
    for i, uplink in enumerate(topo.uplinks):
        uplink_cards.add(len(uplink.cards), uplink=uplink.bdf, group=str(i))
        _link(uplink_fams, uplink.link, uplink=uplink.bdf)
    out += [uplink_cards, *uplink_fams]

    if judgement is not None:
        out += _drift(judgement)
    return [f for f in out if f.samples]


def _drift(judgement: Judgement) -> Iterable[Family]:
    profile = Family(
        "xputune_profile_info", "The profile the host is checked against and how it was chosen."
    )
    profile.add(1, profile=judgement.profile, choice=judgement.how)
    holds = Family("xputune_profile_holds", "1 when every setting of the profile holds, else 0.")
    holds.add(int(judgement.holds), profile=judgement.profile)
    drift = Family(
        "xputune_knob_drift",
        "Places (a sysfs file, a PCIe port) where a setting differs from the profile.",
    )
    places = Family(
        "xputune_knob_places",
        "Places a setting was checked, by verdict (ok, drift, unknown, unsupported).",
    )
    knob_holds = Family("xputune_knob_holds", "1 when a setting holds in every place, else 0.")
    for knob, verdicts in judgement.by_knob().items():
        drift.add(verdicts.get("drift", 0), knob=knob)
        knob_holds.add(int(set(verdicts) == {"ok"}), knob=knob)
        for verdict in (*VERDICTS, *sorted(set(verdicts) - set(VERDICTS))):
            places.add(verdicts.get(verdict, 0), knob=knob, verdict=verdict)
    return [profile, holds, drift, knob_holds, places]


def watch_families(state: WatchState, now: float) -> list[Family]:
    """The watch agent's metrics; a counter family is named with its `_total` suffix, as
    prometheus_client writes them."""
    start = Family("xputune_watch_start_time_seconds", "When the watch agent started.")
    start.add(state.started)
    last_pass = Family(
        "xputune_watch_last_pass_timestamp_seconds",
        "When the watch agent last re-verified the host (alert when stale).",
    )
    last_pass.add(state.updated)
    passes = Family(
        "xputune_watch_passes_total", "Passes (re-verifications) of the watch.", "counter"
    )
    passes.add(state.passes)
    events = Family(
        "xputune_watch_events_total",
        "What woke the watch, by kind: start, poll, interval, or a udev action "
        "(add, bind, change) on a card or a port on its path.",
        "counter",
    )
    for kind, count in sorted(state.events.items()):
        events.add(count, kind=kind)
    errors = Family(
        "xputune_watch_errors_total", "Passes that failed (logged; retried).", "counter"
    )
    errors.add(state.errors)
    paused = Family(
        "xputune_watch_paused",
        "1 while a rollback pauses the watch (drift reported, not re-applied).",
    )
    paused.add(int(state.paused))
    drift = Family(
        "xputune_drift_detected_total",
        "Times a place of a knob was found drifting from the profile.",
        "counter",
    )
    reapply = Family(
        "xputune_reapply_total",
        "Places of a knob the watch re-applied (journaled, verified).",
        "counter",
    )
    failed = Family(
        "xputune_reapply_failures_total",
        "Places of a knob whose re-apply failed (rolled back).",
        "counter",
    )
    active = Family(
        "xputune_backoff_active",
        "Places of a knob the watch leaves alone now: re-applied too often within "
        "its window, backing off.",
    )
    until = Family("xputune_backoff_until_timestamp_seconds", "When the backoff of a place ends.")
    knobs = sorted({*state.knobs, *state.drift, *state.reapplies, *state.failures})
    for knob in knobs:
        drift.add(state.drift.get(knob, 0), knob=knob)
        reapply.add(state.reapplies.get(knob, 0), knob=knob)
        failed.add(state.failures.get(knob, 0), knob=knob)
        active.add(sum(b.knob == knob and b.until > now for b in state.backoff), knob=knob)
    for b in state.backoff:
        if b.until > now:
            until.add(b.until, knob=b.knob, place=b.place)
    out = [start, last_pass, passes, events, errors, paused, drift, reapply, failed, active, until]
    if state.last_apply is not None:
        last = state.last_apply
        when = Family(
            "xputune_last_apply_timestamp_seconds",
            "When the watch last re-applied drifted settings (or tried to).",
        )
        when.add(last.time)
        ok = Family(
            "xputune_last_apply_success",
            "1 when the last re-apply succeeded, 0 when it failed and was rolled back.",
        )
        ok.add(int(last.success))
        changed = Family("xputune_last_apply_changes", "Places the last re-apply changed.")
        changed.add(last.changes)
        out += [when, ok, changed]
    return [f for f in out if f.samples]


def _str(value: Any) -> str | None:
    """A label's value from the state file: text, or no label."""
    return value if isinstance(value, str) else None


def _rank_labels(rank: dict[str, Any]) -> dict[str, str | None]:
    """rank (the TP rank), and dp / pp where the server has them."""
    labels: dict[str, str | None] = {"rank": str(rank["tp"])}
    for key in ("dp", "pp"):
        if isinstance(rank.get(key), int):
            labels[key] = str(rank[key])
    return labels


def verify_families(doc: dict[str, Any]) -> list[Family]:
    """The last `xputune verify` (tune/verifystate.py): per rank, where its host KV pool's
    bytes are, its share on huge pages, its drift. A value verify could not read has no
    sample; the timestamp says how old the reading is."""
    when = Family(
        "xputune_verify_timestamp_seconds",
        "When xputune verify last read the server's ranks (alert when stale).",
    )
    when.add(doc["time_unix"])
    drifting = Family(
        "xputune_verify_drifting_ranks", "Ranks whose host KV pool or CPUs differ from the plan."
    )
    drifting.add(len(doc["drifting"]))
    info = Family(
        "xputune_kv_pool_info",
        "A rank's host KV pool: its process, mapping kind and NUMA policy, its plan.",
    )
    size = Family("xputune_kv_pool_size_bytes", "Size of the mapping holding a rank's pool.")
    pool_bytes = Family(
        "xputune_kv_pool_bytes", "Resident bytes of a rank's host KV pool on a NUMA node."
    )
    planned = Family(
        "xputune_kv_pool_planned_node",
        "The NUMA node a rank's pool was planned on (bound or local plans).",
    )
    on_node = Family(
        "xputune_kv_pool_on_planned_node_ratio",
        "Share of a rank's resident pool on its planned node (0 to 1).",
    )
    huge = Family(
        "xputune_kv_pool_huge_page_ratio", "Share of a rank's resident pool on huge pages (0 to 1)."
    )
    drift = Family(
        "xputune_kv_pool_drift",
        "1 when a rank's pool or CPUs differ from the plan, 0 when they match; "
        "absent when verify could not tell.",
    )
    for rank in doc["ranks"]:
        labels = _rank_labels(rank)
        pool, plan = rank.get("pool"), rank.get("plan") or {}
        nodes = plan.get("nodes") or []
        bound = plan.get("mode") in ("bind", "local") and nodes
        if pool is not None:
            info.add(
                1,
                **labels,
                pid=str(rank["pid"]),
                kind=_str(pool.get("kind")),
                policy=_str(pool.get("policy")),
                plan=_str(plan.get("mode")),
            )
            size.add(pool["size_bytes"], **labels)
            shares = {n["node"]: n for n in pool.get("nodes") or []}
            for node, entry in sorted(shares.items()):
                pool_bytes.add(entry["bytes"], **labels, node=str(node))
            if bound and shares:
                on_node.add(shares[nodes[0]]["share"] if nodes[0] in shares else 0, **labels)
            huge.add(pool.get("huge_share"), **labels)
        if bound:
            planned.add(nodes[0], **labels)
        drift.add(
            None if rank["verdict"] == "unknown" else int(rank["verdict"] == "drift"), **labels
        )
    out = [when, drifting, info, size, pool_bytes, planned, on_node, huge, drift]
    return [f for f in out if f.samples]


def exposition(
    topo: Topology,
    host: str,
    judgement: Judgement | None = None,
    watch: WatchState | None = None,
    now: float | None = None,
    verification: dict[str, Any] | None = None,
) -> str:
    """The text a scrape (or the textfile collector) reads; with the watch's state when one
    runs (`now` decides which backoffs are still active), and the last verification."""
    fams = families(topo, host, judgement)
    if watch is not None:
        import time

        fams += watch_families(watch, time.time() if now is None else now)
    if verification is not None:
        fams += verify_families(verification)
    return "".join(f.render() for f in fams)
