"""The tier-by-tier experiment of the field report, in one run.

For each L2 size, smallest first: start a server through the launcher, replay the workload on its
cold cache, stop it. Stop early at the plateau: when a size adds less than `min_gain` of hit rate
over the one before it, larger sizes are not tried (the field report's rule, docs/field-report.md,
3; `tiers` shows on the whole curve where that rule stops too early, the sweep reports the same
verdict on what it measured). With a baseline, one more server runs with HiCache off first, and
every size is judged by net benefit against it: TTFT saved per request = compute saved by the extra
hits - the cost of moving their KV. The compute saved is priced by the recompute line R(n) = c + d*n
fitted to the baseline's requests (TTFT against tokens computed); the moving cost is what that
leaves of the measured saving.

The load line T(n) = a + b*n of the field report (what `xputune model` fits from typed-in points) is
fitted here from the all-hit requests of every HiCache size: requests whose whole prompt but
its last page came from cache, some of it from L2 or L3, with n = the tokens loaded from there.

With an L3 tier, every size starts with an empty store, or the sweep says why not
(measure/l3store.py): a file store gets a new folder per size; a store the sweep cannot
give a size of its own (a Mooncake pool) is emptied before each size only with --clear-l3,
used as it is only with --keep-l3, and refused otherwise.

Sizes are `--hicache-size` steps in GB (the plan's ladder: `xputune plan` on a card host, the
CPU launcher's powers of two with --device cpu) or host/device ratios (`x2`: --hicache-ratio 2,
what a test server with a pool of a few thousand tokens needs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xputune import trail
from xputune.errors import XputuneError
from xputune.measure import l3store
from xputune.measure.client import Endpoint
from xputune.measure.ports import server_port
from xputune.measure.serverproc import (
    LaunchFailed,
    Server,
    baseline_command,
    dry_run,
    sized_command,
)
from xputune.userfiles import printable

if TYPE_CHECKING:
    from xputune.measure.predict import Prediction
    from xputune.measure.replay import Load, ReplayRun
    from xputune.measure.router import Target
    from xputune.measure.server import ServerInfo
    from xputune.measure.serverproc import Command
    from xputune.measure.stats import Record
    from xputune.measure.tiercounters import TierCounters
    from xputune.measure.tokens import TokenRange
    from xputune.measure.workload import TraceSlice, Workload
    from xputune.plan.hitrate import HitCurve


@dataclass(frozen=True)
class Size:
    """One L2 size: --hicache-size GB ("gb") or --hicache-ratio ("ratio")."""

    kind: str
    value: float

    @property
    def label(self) -> str:
        return f"{self.value:g}GB" if self.kind == "gb" else f"x{self.value:g}"

    def args(self) -> list[str]:
        if self.kind == "gb":
            return ["--hicache-size", str(int(self.value))]
        return ["--hicache-size", "0", "--hicache-ratio", f"{self.value:g}"]


def _size(word: str) -> Size:
    text = word.strip().lower()
    try:
        if text.endswith("gb") or text.isdigit():
            value = int(text[:-2].strip() if text.endswith("gb") else text)
            if value < 1:
                raise ValueError
            return Size("gb", float(value))
        if text.startswith("x") or text.endswith("x"):
            value = float(text.strip("x").strip())
            if not 0 < value <= 1e6:
                raise ValueError
            return Size("ratio", value)
    except ValueError:
        pass
    raise XputuneError(
        f"--sizes: {printable(word)!r} is not a size: give whole GB per rank (8GB, 16) or a "
        "host/device pool ratio (x2, x4.5)"
    )


def parse_sizes(text: str) -> list[Size]:
    """Comma-separated sizes of one kind, smallest first, each once."""
    sizes = [_size(w) for w in text.split(",") if w.strip()]
    if not sizes:
        raise XputuneError("--sizes: give at least one size")
    if len({s.kind for s in sizes}) > 1:
        raise XputuneError("--sizes: give all sizes in GB or all as ratios, not both")
    if len({s.value for s in sizes}) != len(sizes):
        raise XputuneError("--sizes: a size is given twice")
    return sorted(sizes, key=lambda s: s.value)


# ------------------------------------------------------------------------- the plan's ladder

# Every sweep server publishes its counters: the tier check reads them (SGLang's flag, off by
# default, in every release of the range).
METRICS = ["--enable-metrics"]
_VALUED = ("--model", "--config", "--tp", "--strategy", "--cards", "--dtype", "--root", "--example")


def _options(words: list[str]) -> dict[str, str]:
    """The launcher options among `words` that take a value (--opt v or --opt=v)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(words):
        name, eq, value = words[i].partition("=")
        if name in _VALUED:
            if eq:
                out[name] = value
            elif i + 1 < len(words):
                out[name] = words[i + 1]
                i += 1
        i += 1
    return out


def default_ladder(launch_opts: list[str], sglang_args: list[str]) -> list[Size]:
    """The plan's L2 ladder for this host and launch, in GB per rank.

    With --device cpu, the CPU launcher's steps (powers of two up to what this host's memory
    leaves, launch/cpu.py); on a card host, the capacity tiers of `xputune plan`, asked on its
    command line with the launch's model, TP and strategy.
    """
    from xputune.launch.cpu import cpu_tier, is_cpu_device
    from xputune.launch.sglang import user_value

    opts = _options(launch_opts)
    tp_args = user_value(sglang_args, "--tp-size")
    tp = tp_args[0] if tp_args else opts.get("--tp")
    if is_cpu_device(user_value(sglang_args, "--device")):
        from xputune.host import open_host
        from xputune.topology.discover import discover

        topo = discover(open_host(opts.get("--root"), opts.get("--example")))
        host_bytes = sum(n.memory_total_bytes or 0 for n in topo.numa_nodes)
        size = int(tp) if tp and tp.isdigit() else 1
        shared = opts.get("--strategy") == "shared"
        steps = cpu_tier(host_bytes, size, 1, shared, shared, None).steps
        return [Size("gb", float(s)) for s in steps]
    argv = [sys.executable, "-m", "xputune", "plan", "--format", "json"]
    model = opts.get("--model") or opts.get("--config")
    if not model:
        paths = user_value(sglang_args, "--model-path")
        model = paths[0] if paths else None
    if model:
        argv += ["--config" if "--config" in opts else "--model", model]
    for name in ("--tp", "--strategy", "--cards", "--dtype", "--root", "--example"):
        value = tp if name == "--tp" else opts.get(name)
        if value:
            argv += [name, value]
    try:
        done = trail.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise XputuneError(
            f"no ladder: cannot run `xputune plan` ({printable(str(exc))[:200]}): give --sizes"
        ) from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise XputuneError(f"no ladder from `xputune plan` ({printable(why)[:200]}): give --sizes")
    try:
        tiers = json.loads(done.stdout)["capacity"]["tiers"]
        return [Size("gb", float(t["hicache_size_gb"])) for t in tiers]
    except (ValueError, KeyError, TypeError):
        raise XputuneError("`xputune plan` printed no capacity ladder: give --sizes") from None


# --------------------------------------------------------------------------------- the run


#: How a sweep of clusters' labels name the router's policies.
SHORT_POLICY = {"round_robin": "rr", "random": "rand", "cache_aware": "ca"}


@dataclass(frozen=True)
class ClusterRun:
    """What a run of `sweep --instances` launched: N instances behind a router of one policy,
    sharing the L3 of the launch options or without it."""

    instances: int
    routing: str
    l3: bool
    workers: tuple[str, ...] = ()  # the router's workers, as it listed them
    #: {"measured": [...], "predicted": [...]}: requests per worker, most first (router.py)
    requests: dict[str, list[int] | None] | None = None

    @property
    def label(self) -> str:
        """Short enough for a table at 80 columns: "2 rr +L3" (the legend: SHORT_POLICY)."""
        return f"{self.instances} {SHORT_POLICY[self.routing]}" + (" +L3" if self.l3 else "")

    def document(self) -> dict[str, Any]:
        return {"instances": self.instances, "routing": self.routing, "l3": self.l3,
                "workers": list(self.workers), "requests_per_worker": self.requests}  # fmt: skip


@dataclass
class Step:
    label: str
    size: Size | None  # None: the baseline, HiCache off
    log: str
    info: ServerInfo | None = None
    prediction: Prediction | None = None
    run: ReplayRun | None = None
    start_s: float | None = None
    replay_s: float | None = None
    stop_s: float | None = None
    tier_check: dict[str, Any] | None = None  # tierhealth.check_document of its run
    findings: int = 0  # how many tiers the check named
    l3: l3store.StepStore | None = None  # its L3 store (a HiCache size of a sweep with L3)
    cluster: ClusterRun | None = None  # a run of `sweep --instances` (measure/clustersweep.py)

    @property
    def hicache(self) -> bool:
        return self.size is not None or self.cluster is not None

    @property
    def records(self) -> list[Record]:
        return self.run.records if self.run is not None else []

    def hit_rate(self) -> float | None:
        from xputune.measure.stats import hit_rates

        return hit_rates(self.records)["total"] if self.run is not None else None

    def ttft_mean_ms(self) -> float | None:
        ttfts = [r.ttft for r in self.records if r.ok and r.ttft is not None]
        return sum(ttfts) / len(ttfts) * 1e3 if ttfts else None


@dataclass
class SweepResult:
    steps: list[Step]
    workload: Workload | None
    vocab: TokenRange | None
    curve: HitCurve | None
    logs: str
    stopped_early: str | None = None  # the size after which the plateau rule stopped
    interrupted: bool = False
    error: str | None = None  # why the sweep ended before its last size, after some ran
    seconds: float = 0.0
    skipped_sizes: list[str] = field(default_factory=list)
    l3: l3store.Policy | None = None  # what the sweep does with L3 between sizes
    cluster: bool = False  # a sweep of clusters (--instances): its steps are ClusterRuns


class Progress:
    """What a sweep tells as it goes (the CLI prints it on a terminal); silent by default."""

    def step(self, index: int, total: int, label: str) -> None: ...
    def ready(self, step: Step) -> None: ...
    def replaying(self, requests: int) -> Callable[[Record], None] | None: ...
    def done(self, step: Step) -> None: ...


def check_args(sglang_args: list[str], launch_opts: list[str] = ()) -> None:
    """Refuse ARGS that would fight the sweep over what it sets per step, and launcher options
    that describe another machine (the sweep starts its servers here)."""
    from xputune.launch.sglang import user_value

    for flag in ("--hicache-size", "--hicache-ratio"):
        if user_value(sglang_args, flag) is not None:
            raise XputuneError(f"sweep sets {flag} at every step: remove it from the SGLang ARGS")
    for name in ("--root", "--example"):
        if name in _options(list(launch_opts)):
            raise XputuneError(
                f"--launch-opt {name}: the sweep starts its servers on this host, and a "
                "recording's bindings describe another machine"
            )


def run_sweep(
    *,
    trace: TraceSlice,
    sizes: list[Size],
    baseline: bool,
    min_gain: float,
    launch_opts: list[str],
    sglang_args: list[str],
    load: Load,
    block_tokens: int | None,
    max_output: int,
    token_range: tuple[int, int] | None,
    host_tokens: int | None = None,
    start_timeout: float = 600.0,
    stop_grace: float = 20.0,
    progress: Progress | None = None,
    clear_l3: bool = False,
    keep_l3: bool = False,
) -> SweepResult:
    """Baseline (if asked), then each size until the plateau; every server stopped.

    The launcher runs once, as a dry run, before anything starts (its checks and the preflight
    of SGLang's interpreter take seconds, not minutes): each step runs its command with the
    step's size and port. With an L3 tier, what each size's store holds at its start follows
    l3store.policy (`clear_l3`, `keep_l3`), decided before anything starts."""
    from xputune.launch.sglang import user_value

    check_args(sglang_args, launch_opts)
    progress = progress or Progress()
    host = (user_value(sglang_args, "--host") or ["127.0.0.1"])[0]
    given_port = user_value(sglang_args, "--port")
    extra = [] if user_value(sglang_args, "--host") else ["--host", host]
    # The tier check reads what each tier was written and served from the server's counters.
    extra += [] if user_value(sglang_args, "--enable-metrics") is not None else METRICS
    command = dry_run(launch_opts, [*sglang_args, *extra])
    logs, l3 = logs_and_policy(command, clear=clear_l3, keep=keep_l3)
    plan: list[Size | None] = ([None] if baseline else []) + list(sizes)
    result = SweepResult([], None, None, None, logs, l3=l3)

    def each_size() -> None:
        for i, size in enumerate(plan):
            label = "baseline" if size is None else size.label
            port = int(given_port[-1]) if given_port else server_port(host)
            args = ["--port", str(port)]
            step = Step(label, size, os.path.join(logs, f"{i + 1}-{label}.log"))
            result.steps.append(step)
            progress.step(i + 1, len(plan), label)
            if size is None:
                argv, env = baseline_command(command, args)
            else:
                argv, env = sized_command(command, [*size.args(), *args])
            endpoint = Endpoint("http", host, port)
            if not _run_step(step, Server(argv, endpoint, Path(step.log), env), result, trace,
                             progress, load=load, block_tokens=block_tokens,
                             max_output=max_output, token_range=token_range,
                             host_tokens=host_tokens, start_timeout=start_timeout,
                             stop_grace=stop_grace, number=i + 1):  # fmt: skip
                result.interrupted = True
                return
            progress.done(step)
            if _plateau(result.steps, min_gain):
                result.stopped_early = label
                result.skipped_sizes = [s.label for s in plan[i + 1 :] if s is not None]
                return

    return run_steps(result, each_size)


def logs_and_policy(
    command: Command, *, clear: bool, keep: bool, master_in_set: bool = False
) -> tuple[str, l3store.Policy | None]:
    """The sweep's private log folder and its L3 policy (l3store.policy); a refused policy
    leaves no folder behind (nothing was started, nothing written)."""
    logs = tempfile.mkdtemp(prefix="xputune-sweep-")
    try:
        policy = l3store.policy(
            command, clear=clear, keep=keep, own=logs, master_in_set=master_in_set
        )
    except XputuneError:
        os.rmdir(logs)
        raise
    return logs, policy


def run_steps(result: SweepResult, steps: Callable[[], None]) -> SweepResult:
    """Run a sweep's steps: Ctrl-C ends it with what was measured; an error after a step was
    measured is kept in the result (the document reports it), before any is raised."""
    t0 = time.monotonic()
    try:
        steps()
    except KeyboardInterrupt:
        result.interrupted = True
    except XputuneError as exc:
        if not any(s.run is not None for s in result.steps):
            raise
        result.error = str(exc)
    result.seconds = time.monotonic() - t0
    return result


def first_workload(result: SweepResult, trace: TraceSlice, info: ServerInfo, *,
                   token_range: tuple[int, int] | None, block_tokens: int | None,
                   max_output: int) -> Workload:  # fmt: skip
    """The workload every step replays, built at the first server's limits (then kept)."""
    from xputune.measure.server import token_range as vocab_of
    from xputune.measure.workload import build_workload

    if result.workload is None:
        result.vocab = vocab_of(info, token_range)
        result.workload = build_workload(
            trace, block_tokens=block_tokens, max_req_input_len=info.max_req_input_len,
            max_output=max_output,
        )  # fmt: skip
        if not result.workload.requests:
            raise XputuneError("the trace slice holds no request with input tokens")
    return result.workload


def measure_step(step: Step, result: SweepResult, target: Target, load: Load,
                 progress: Progress) -> tuple[list[TierCounters] | None,
                                              list[TierCounters] | None]:  # fmt: skip
    """Replay the workload at `target` (a server, or a router's workers) and check the tiers
    against the step's prediction from the counters the run moved; (counters before, after),
    per server."""
    from xputune.measure import router, tierhealth
    from xputune.measure.replay import replay

    assert result.workload is not None and result.vocab is not None
    assert step.prediction is not None and step.info is not None
    before, _ = router.read_counters(target)
    t = time.monotonic()
    step.run = replay(
        result.workload, target.endpoint, result.vocab, load,
        progress.replaying(len(result.workload.requests)),
    )  # fmt: skip
    step.replay_s = time.monotonic() - t
    after, note = router.read_counters(target)
    counters = router.moved(before, after)
    findings = tierhealth.assess(step.run.records, step.prediction, step.info, counters)
    step.findings = len(findings)
    step.tier_check = tierhealth.check_document(findings, counters, note)
    return before, after


def _run_step(step: Step, server: Server, result: SweepResult, trace: TraceSlice,
              progress: Progress, *, load: Load, block_tokens: int | None, max_output: int,
              token_range: tuple[int, int] | None, host_tokens: int | None,
              start_timeout: float, stop_grace: float, number: int = 1) -> bool:  # fmt: skip
    """Start, replay, stop; False when the replay was interrupted. A HiCache size of a sweep
    with L3 gets its store first (l3store.prepare), emptied once the server is ready where
    the policy says so, and its folder counted and removed once the server stopped."""
    from xputune.measure.predict import predict
    from xputune.measure.router import Target
    from xputune.measure.server import read_server
    from xputune.plan.hitrate import exact_curve

    policy = result.l3
    try:
        if policy is not None and step.hicache:
            step.l3, env = l3store.prepare(policy, number, step.label)
            server.env = {**server.env, **env}
        step.start_s = server.start(start_timeout)
        step.info = read_server(server.endpoint, host_tokens)
        if step.hicache and not step.info.hicache:
            raise LaunchFailed(f"the server of step {step.label} runs without HiCache")
        if step.l3 is not None and policy is not None and policy.between_sizes == l3store.CLEARED:
            l3store.clear(server.endpoint, step.l3)
        if result.curve is None:
            workload = first_workload(result, trace, step.info, token_range=token_range,
                                      block_tokens=block_tokens, max_output=max_output)  # fmt: skip
            result.curve = exact_curve(workload.trace())
        step.prediction = predict(result.curve, step.info)
        progress.ready(step)
        measure_step(step, result, Target(server.endpoint, step.info), load, progress)
    finally:
        step.stop_s = server.stop(stop_grace)
        if step.l3 is not None:
            l3store.finish(step.l3)  # its server is gone: nothing writes there any more
    return step.run.stop != "interrupted"


def _plateau(steps: list[Step], min_gain: float) -> bool:
    """The plateau rule: the last HiCache size added less than min_gain over the one before."""
    rates = [s.hit_rate() for s in steps if s.hicache]
    if len(rates) < 2 or rates[-1] is None or rates[-2] is None:
        return False
    return rates[-1] - rates[-2] < min_gain
