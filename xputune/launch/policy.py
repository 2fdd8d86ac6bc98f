"""What `xputune launch sglang` decides before it runs anything, for the CLI to call and print.

The policy: nothing acts on the live host with a recording's data (a launch from --root or
--example is a dry run or nothing, whatever --force says); --tp and SGLang's --tp-size in ARGS
must agree, and --tp defaults to that, else to the number of cards; the model is named by
--model/--config or SGLang's --model-path (a preset, a Hugging Face id, a folder holding
config.json); critical drift from the tuning profile refuses the launch unless --force.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xputune.host import HostView
from xputune.launch import prefault, preflight
from xputune.launch.l3check import l3_preflight
from xputune.launch.releases import Release
from xputune.launch.sglang import (
    LaunchError,
    LaunchSpec,
    build_spec,
    for_release,
    needs_plugin,
    user_value,
)
from xputune.plan.host_plan import PlanRequest
from xputune.topology.model import Topology

if TYPE_CHECKING:
    from xputune.plan.host_plan import HostPlan
    from xputune.plan.l3 import L3Plan


@dataclass
class Launch:
    """The command to run and the lines to tell the user first (stderr)."""

    spec: LaunchSpec
    notes: list[str] = field(default_factory=list)
    #: Why a real launch must not go ahead (a dry run only says it); empty when forced.
    refusals: list[str] = field(default_factory=list)
    #: The first refusal is critical drift from the profile (`xputune apply` fixes it).
    drifting: bool = False
    #: What SGLang's environment lacks (sglang, the plugin, its version, a storage backend),
    #: each with its fix: a real launch stops (exit 3), --force or not.
    blockers: list[str] = field(default_factory=list)


def refuse_recording(from_recording: bool, dry_run: bool, what: str = "SGLang") -> None:
    if from_recording and not dry_run:
        raise LaunchError(
            "the topology comes from --root/--example, not from this host: a launch would run "
            f"{what} here with another machine's bindings (--force does not change that); drop "
            "--root/--example, or add --dry-run"
        )


def reconcile_tp(tp: int | None, user_args: list[str]) -> int | None:
    """--tp and --tp-size in ARGS: one number, or None when neither says."""
    user_tp = user_value(user_args, "--tp-size")
    if user_tp is None:
        return tp
    if len(user_tp) != 1 or not user_tp[0].isdigit():
        raise LaunchError(f"--tp-size in ARGS must be one integer, got {' '.join(user_tp)}")
    if tp is not None and tp != int(user_tp[0]):
        raise LaunchError(f"--tp {tp} disagrees with --tp-size {user_tp[0]} in ARGS")
    return int(user_tp[0])


def model_from_args(
    model: str | None, config: str | None, user_args: list[str]
) -> tuple[str | None, str | None]:
    """--model/--config as given, else SGLang's --model-path when it names a known model."""
    from xputune.plan.models import preset_for
    from xputune.userfiles import config_path

    if model or config:
        return model, config
    paths = user_value(user_args, "--model-path")
    if paths:
        found = config_path(paths[0])
        if found is not None and found.is_file():
            return None, str(found)
        if preset_for(paths[0]):
            return paths[0], None
    raise LaunchError(
        "cannot tell the model's KV size: pass --model (a preset, a Hugging Face id or a "
        "config.json), or a --model-path that is one of these"
    )


def _drift_lines(drift: list) -> list[str]:  # list of tune Rows
    """One line per drifting knob: how many targets, the first one, and its fix."""
    by_knob: dict[str, list] = {}
    for row in drift:
        by_knob.setdefault(row.knob, []).append(row)
    out = []
    for knob, rows in by_knob.items():
        first = rows[0]
        more = f" and {len(rows) - 1} more" if len(rows) > 1 else ""
        out.append(
            f"{first.severity}: {knob}: {first.target}{more} is {first.actual}, expected "
            f"{first.expected} (fix: {first.fix})"
        )
    return out


@dataclass(frozen=True)
class LaunchRequest:
    """What a launch asks for: the plan's request, SGLang's own arguments and the plugin's
    features; cli/ builds it (nothing here knows how a flag is spelled)."""

    plan: PlanRequest
    user_args: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    profile: str | None = None
    force: bool = False  # launch despite the refusals (drift, L3 preflight)
    stats_dir: str | None = None
    python: str | None = None  # SGLang's interpreter (None: $XPUTUNE_SGLANG_PYTHON, else ours)
    master_in_set: bool = False  # the Mooncake master starts with the instances (launch cluster)


def _sglang(
    req: LaunchRequest, pending: preflight.Pending | None
) -> tuple[preflight.Installed, Release, list[str]]:
    """What SGLang's interpreter has, the release to write flags for, and the lines saying so."""
    found = (pending or preflight.start(req.python)).result()
    release, lines = preflight.release_of(found)
    said = preflight.describe(found)
    return found, release, ([said] if said else []) + lines


def _blockers(
    found: preflight.Installed, release: Release, spec: LaunchSpec, l3: L3Plan | None, cpu: bool
) -> list[str]:
    out = preflight.problems(found, plugin_needed=needs_plugin(spec.env), plain_ok=not cpu)
    if l3 is not None and l3.request.backend not in release.storage_backends:
        out.append(
            f"sglang {release.version} has no storage backend {l3.request.backend} (it lists "
            f"{', '.join(release.storage_backends)})"
        )
    return out


def prepare(
    view: HostView, topo: Topology, req: LaunchRequest, sglang: preflight.Pending | None = None
) -> Launch:
    """The launch of SGLang on a card host. Launch.refusal is set when a real launch must not
    go ahead (critical drift without allow_drift, an L3 tier that cannot work here), and
    Launch.blockers when SGLang's environment lacks what it needs. `sglang`: the preflight of
    SGLang's interpreter, already started (else it starts here)."""
    from xputune.plan.host_plan import plan_for_host
    from xputune.tune import engine

    plan, tp_notes = plan_for_host(topo, req.plan)
    selection = engine.select(topo, req.profile)
    rows = engine.check(engine.context(view, topo, selection), selection)
    drift = [r for r in rows if not r.holds]
    critical = [r for r in drift if r.severity == "critical"]
    notes = _drift_lines(drift)
    refusals = []
    if critical:
        refusals.append(
            f"{len(critical)} critical setting(s) drift from profile {selection.profile.name}"
        )
    user_args = list(req.user_args)
    found, release, release_lines = _sglang(req, sglang)
    spec = build_spec(plan, user_args, list(req.features), found.python, release)
    if req.stats_dir:
        spec.env["XPUTUNE_HICACHE_STATS"] = os.path.abspath(req.stats_dir)
    notes += release_lines + list(spec.notes)
    notes += [f"conflict: {c}" for c in spec.conflicts]
    notes += [f"warning: {w}" for w in (*tp_notes, *plan.bindings.warnings)]
    steps = [t.hicache_size_gb for t in plan.capacity.tiers]
    step = steps.index(plan.tier.hicache_size_gb) + 1 if plan.tier.hicache_size_gb in steps else 0
    yours = user_value(user_args, "--hicache-size")
    cap = plan.capacity
    why = f": node {cap.limit.node}'s budget" if cap.limited_by_budget and cap.limit else ""
    notes.append(
        f"tier: {plan.tier.hicache_size_gb} GB per rank (step {step or '-'} of {len(steps)}, "
        f"max {cap.per_rank_max_gb:.0f} GB{why}), {plan.tier.effective_tokens:,} tokens "
        f"in L2; strategy {plan.bindings.strategy}"
        + (f"; your --hicache-size {' '.join(yours)} is used instead" if yours else "")
    )
    if plan.l3 is not None:
        l3_notes, l3_refusals = l3_preflight(
            plan.l3, user_args, view.live, found.python, found.mooncake, req.master_in_set
        )
        notes += l3_notes
        refusals += l3_refusals
    blockers = _blockers(found, release, spec, plan.l3, cpu=False)
    if req.force:
        return Launch(spec, notes, blockers=blockers)
    return Launch(spec, notes, refusals, bool(critical), blockers)


def prepare_cpu(
    topo: Topology, req: LaunchRequest, sglang: preflight.Pending | None = None
) -> Launch:
    """The `--device cpu` launch: tier from this host's memory, CPU engine, plugin features.

    TP defaults to 1 here (SGLang's own default): the cards, if any, stay unused.
    """
    from xputune.launch.cpu import build_cpu_spec, cpu_room, cpu_tier
    from xputune.plan.capacity import GB
    from xputune.plan.host_plan import RefusedTpError
    from xputune.plan.l3 import plan_prefill, unbound_ranks
    from xputune.plan.models import REFUSES, model_geometry

    preq = req.plan
    size = preq.tp or 1
    geometry, tp_notes = model_geometry(preq.model, size, preq.dtype)
    refused = [w for w in tp_notes if w.endswith(REFUSES)]
    if refused and not preq.allow_refused_tp:
        raise RefusedTpError(refused[0])
    host_bytes = sum(n.memory_total_bytes or 0 for n in topo.numa_nodes)
    shared = preq.strategy == "shared"
    chosen = cpu_tier(
        host_bytes, size, geometry.bytes_per_token, geometry.replicated, shared, preq.tier
    )
    l3 = None
    if preq.l3 is not None:
        l3 = plan_prefill(topo, unbound_ranks(size), geometry, chosen.hicache_size_gb * GB, preq.l3)
    cpus = sorted(c for n in topo.numa_nodes for c in n.cpus)
    user_args = list(req.user_args)
    found, release, release_lines = _sglang(req, sglang)
    spec, cpu_notes = build_cpu_spec(
        user_args=user_args, features=list(req.features), tp=size, tier=chosen,
        write_policy=preq.write_policy, numa_nodes=sum(1 for n in topo.numa_nodes if n.cpus),
        cpus=cpus, shared=shared, stats_dir=req.stats_dir, python=found.python, l3=l3,
        release=release,
    )  # fmt: skip
    notes = release_lines + list(spec.notes)
    if topo.cards:
        notes.append(f"note: --device cpu: this host's {len(topo.cards)} card(s) stay unused")
    notes += [f"note: {n}" for n in cpu_notes]
    notes += [f"conflict: {c}" for c in spec.conflicts]
    yours = user_value(user_args, "--hicache-size")
    steps = chosen.steps
    step = steps.index(chosen.hicache_size_gb) + 1
    notes.append(
        f"tier: {chosen.hicache_size_gb} GB per rank (step {step} of {len(steps)}, "
        f"max {chosen.per_rank_max_gb:.0f} GB from this host's "
        f"{host_bytes / 2**30:.1f} GiB), {chosen.tokens_per_rank:,} tokens per rank in L2; "
        "device cpu (no card bindings, drift check skipped)"
        + (f"; your --hicache-size {' '.join(yours)} is used instead" if yours else "")
    )
    refusals: list[str] = []
    if l3 is not None:
        l3_notes, refusals = l3_preflight(
            l3, user_args, True, found.python, found.mooncake, req.master_in_set
        )
        notes += l3_notes
        # half the room is SGLang's own (device) pool, as cpu_tier plans it
        room = cpu_room(host_bytes, size) / 2 - chosen.hicache_size_gb * GB * size
        if l3.segment_bytes > room:
            refusals.append(
                f"the {l3.segment_bytes / GB:,g} GB segment does not fit beside the L2 tier "
                f"in this host's memory ({max(0.0, room) / GB:,.1f} GB left): lower "
                "--l3-segment-gb or --tier"
            )
    blockers = _blockers(found, release, spec, l3, cpu=True)
    return Launch(spec, notes, [] if req.force else refusals, blockers=blockers)


def plan_document_for(plan: HostPlan, warnings: list[str], sglang: preflight.Pending) -> dict:
    """`plan --format json`'s document, its flags as the release SGLang's interpreter has takes
    them: `sglang_args` and `disaggregation_args` in that release's spellings, and `sglang`
    saying which release, whether it was found or assumed, and what it makes of the flags."""
    from xputune.plan.host_plan import plan_document

    found = sglang.result()
    release, lines = preflight.release_of(found)
    said = preflight.describe(found)
    lines = ([said] if said else []) + lines
    args, notes = for_release(list(plan.sglang_args), [], release)
    pd_args, pd_notes = for_release(
        list(plan.pd_args), ["--disaggregation-mode", "prefill"], release
    )
    doc = plan_document(plan, warnings)
    doc["sglang_args"] = args
    doc["disaggregation_args"] = pd_args
    placement = prefault.plan_lines(release, bool(plan.bindings.numa_args), os.environ)
    doc["sglang"] = {
        "release": release.version,
        "tested": release.tested,
        "installed": found.sglang,
        "python": found.python,
        "notes": [*lines, *notes, *(n for n in pd_notes if n not in notes), *placement],
    }
    return doc
