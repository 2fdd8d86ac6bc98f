"""replay and sweep: measure a running server with a trace, and the L2 ladder tier by tier."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xputune.cli import exits
from xputune.cli.options import (
    BLOCK_SIZE,
    FORMAT,
    MAX_BLOCK,
    MIN_GAIN,
    PYTHON,
    TRACE,
    TRACE_FORMAT,
    TraceFormat,
)
from xputune.cli.output import Format, console, emit_data
from xputune.cli.spec import Command, Opt, Request
from xputune.errors import XputuneError
from xputune.plan.cluster import ROUTINGS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from xputune.measure.replay import Load
    from xputune.measure.workload import TraceSlice

#: --requests, --skip, --concurrency, --max-inflight, --max-output, --host-tokens: at most
MAX_REQUESTS = 10_000_000
MAX_SECONDS = 1e7  # --duration, --timeout, --start-timeout, --stop-grace: about 16 weeks


# ------------------------------------------------------------------ options both commands take

TRACE_OPTIONS = (
    TRACE_FORMAT,
    BLOCK_SIZE,
    Opt("block_tokens", ("--block-tokens",), "Send each trace block as this many tokens "
        "(default: the block size), to fit a trace to a small server's pool; the prediction "
        "uses the same scaled blocks.", kind="int", min=1, max=MAX_BLOCK),
    Opt("skip", ("--skip",), "Pass over this many requests first.", kind="int", min=0,
        max=MAX_REQUESTS, default=0),
    Opt("requests", ("--requests", "-n"), "Send at most this many requests.", kind="int",
        min=1, max=MAX_REQUESTS),
    Opt("duration", ("--duration",), "A hard end: nothing is sent after this many seconds, "
        "and what is in flight gets at most --timeout more, then counts as not completed.",
        kind="float", min=0.0, max=MAX_SECONDS, metavar="SECONDS"),
    Opt("concurrency", ("--concurrency", "-c"), "Closed loop: this many requests at once, "
        "each sent when one finishes. Default: open loop at the trace's timestamps.",
        kind="int", min=1, max=MAX_REQUESTS),
    Opt("speedup", ("--speedup",), "Open loop: play the trace's clock this many times "
        "faster.", kind="float", min=1e-6, max=1e9, default=1.0),
    Opt("max_inflight", ("--max-inflight",), "Open loop: requests (threads, connections) at "
        "once, at most; a request that waits for one is reported as dispatch lag.",
        kind="int", min=1, max=100_000, default=256),
    Opt("max_output", ("--max-output",), "Cap on each request's output tokens (the trace's "
        "output_length; 1 where it has none).", kind="int", min=1, max=MAX_REQUESTS,
        default=512),
    Opt("token_range", ("--token-range",), "Token ids prompts are drawn from, LO:HI, inside "
        "the model's vocabulary. Default: 10 up to the vocab_size of the server's model "
        "(capped at 32000).", metavar="LO:HI"),
    Opt("host_tokens", ("--host-tokens",), "L2 (host pool) size in tokens, when the server's "
        "cannot be worked out here (--hicache-size without a readable config.json).",
        kind="int", min=0, max=1 << 50),
    Opt("timeout", ("--timeout",), "Seconds one request may take in all, from its send to "
        "its last byte (a stream that never ends or trickles fails at it).", kind="float",
        min=0.001, max=MAX_SECONDS, default=600.0, metavar="SECONDS"),
    Opt("min_completion", ("--min-completion",), "Percent of the requests sent that must "
        "complete for the run to count (exit 10 below it, or when none completes).",
        kind="float", min=0.0, max=100.0, default=100.0, metavar="PERCENT"),
)  # fmt: skip
REPLAY = Command(
    ("replay",),
    "xputune.cli.measure_cmds:replay_cmd",
    (
        TRACE.but(required=True),
        Opt("url", ("--url",), "The running SGLang server (SGLang's default port is 30000).",
            kind="name", default="http://127.0.0.1:30000", metavar="URL"),
        *TRACE_OPTIONS,
        Opt("phases", ("--phases",), "Phases in one run, comma-separated: warm:N, measure:N, "
            "stress:N (each the first N requests of the slice, in tokens of its own; warm "
            "and stress take a load: @Kx for K times the speedup or concurrency, @cK for K "
            "at once), cool:T (idle: 30s, 2m). The last measure phase is compared with the "
            "first, request by request: recovered, or not (exit 1), naming the figure. "
            "--duration bounds them all.", metavar="SPEC"),
        Opt("recovery_margin", ("--recovery-margin",), "With --phases: a figure of the last "
            "measurement counts as worse only when worse beyond noise and by more than this "
            "percent of its first value.", kind="float", min=0.0, max=1000.0, default=10.0,
            metavar="PERCENT"),
        Opt("per_request", ("--per-request",), "Add every request's numbers to the JSON.",
            kind="flag", default=False),
        Opt("routing", ("--routing",), "When --url is sglang-router in front of N servers: the "
            "policy it routes by, for the prediction (it does not say; its own default is "
            "cache_aware).", kind="choice", choices=ROUTINGS, default="cache_aware"),
        FORMAT,
    ),
    exits=(exits.DIFFERENCE, exits.MEASUREMENT),
)  # fmt: skip
SWEEP = Command(
    ("sweep",),
    "xputune.cli.measure_cmds:sweep_cmd",
    (
        TRACE.but(required=True),
        Opt("sizes", ("--sizes",), "L2 sizes to try, comma-separated: whole GB per rank "
            "(8GB,16GB) or host/device pool ratios (x2,x4). Default: the plan's ladder for "
            "this host.", metavar="LIST"),
        Opt("baseline", ("--baseline",), "Also run with HiCache off first: net benefit is "
            "against it.", kind="flag", default=False),
        MIN_GAIN,
        Opt("launch_opt", ("--launch-opt",), "Options for `xputune launch sglang` (repeat, or "
            "quote several: --launch-opt '--write-policy write_through').", multiple=True,
            metavar="OPTS"),
        Opt("start_timeout", ("--start-timeout",), "Seconds a server may take to answer "
            "/server_info in full (one that trickles is not ready).", kind="float", min=1.0,
            max=MAX_SECONDS, default=900.0, metavar="SECONDS"),
        Opt("stop_grace", ("--stop-grace",), "Seconds between SIGTERM and SIGKILL when a "
            "server is stopped.", kind="float", min=0.0, max=MAX_SECONDS, default=20.0,
            metavar="SECONDS"),
        Opt("clear_l3", ("--clear-l3",), "With an L3 store the sweep cannot give each size "
            "of its own (Mooncake): empty it through each size's server before its replay "
            "(POST /hicache/storage-backend/clear). A shared pool is emptied for every "
            "instance using it. A file store needs none: each size gets a new folder.",
            kind="flag", default=False),
        Opt("keep_l3", ("--keep-l3",), "Use the L3 store as it is for every size: later "
            "sizes may count what earlier ones stored as their own L3 hits (said in the "
            "result).", kind="flag", default=False),
        Opt("instances", ("--instances",), "Sweep clusters instead of L2 sizes: for each N "
            "of this comma list (1,2,4), `xputune launch cluster` runs N instances behind "
            "sglang-router, replayed through it beside plan/cluster.py's prediction for N; "
            "every instance at one L2 size (--sizes with one size, or the launcher's).",
            metavar="LIST"),
        Opt("routing", ("--routing",), "The router's policies to sweep with --instances, "
            "comma-separated: round_robin, random, cache_aware (sglang-router's cache_aware "
            "matches request text, and a replay sends token ids).", default="round_robin",
            metavar="LIST"),
        Opt("compare_l3", ("--compare-l3",), "With --instances and an L3 in --launch-opt: "
            "also run each N and policy without it, so each pair shows what the shared L3 "
            "adds.", kind="flag", default=False),
        PYTHON,
        *TRACE_OPTIONS,
        FORMAT,
    ),
    passthrough="sglang_args",
    passthrough_metavar="SGLANG_ARGS",
    exits=(exits.DIFFERENCE, exits.MEASUREMENT),
)  # fmt: skip


def _token_range(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    from xputune.userfiles import printable

    lo, sep, hi = (part.strip() for part in text.partition(":"))
    if not sep or not all(p.isascii() and p.isdigit() and len(p) <= 12 for p in (lo, hi)):
        shown = printable(text[:40]) + ("..." if len(text) > 40 else "")
        raise XputuneError(f"--token-range: expected LO:HI (two whole numbers), got {shown!r}")
    low, high = int(lo), int(hi)
    if high - low < 2 or high > 1 << 31:
        raise XputuneError(f"--token-range {low}:{high}: need LO + 2 <= HI <= 2^31")
    return low, high


def _read_trace(path: str, fmt: TraceFormat, block_size: int | None, skip: int,
                limit: int | None) -> TraceSlice:  # fmt: skip
    """The slice of the trace the run sends: every form `tiers` reads (userfiles.open_trace)."""
    from xputune.measure.workload import read_slice
    from xputune.userfiles import open_trace, printable

    if not path:
        raise XputuneError("--trace: empty value (an unset variable?); give one")
    with open_trace(Path(path)) as stream:  # a corrupt compressed stream: one line
        got = read_slice(
            stream, fmt=fmt.value, block_size=block_size, source=path, skip=skip, limit=limit
        )
    if not got.requests:
        raise XputuneError(
            f"{printable(path)}: no requests to replay"
            + (f" after the first {skip}" if skip else "")
        )
    return got


def _load(concurrency: int | None, speedup: float, max_inflight: int, duration: float | None,
          timeout: float) -> Load:  # fmt: skip
    from xputune.measure.replay import Load

    return Load(concurrency, speedup, max_inflight, duration, timeout)


@contextmanager
def _counting(total: int, label: str, enabled: bool) -> Iterator[Callable[[Any], None] | None]:
    """A bar of requests done on stderr while a replay runs (a terminal only)."""
    import sys

    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    with Progress(*columns, TimeElapsedColumn(), console=console(stderr=True),
                  transient=True) as bar:  # fmt: skip
        task = bar.add_task(label, total=total)
        yield lambda _record: bar.advance(task, 1)


# --------------------------------------------------------------------------------- replay


def replay_cmd(req: Request) -> int:
    """Measure a running server with a trace: hits per tier, TTFT, beside the prediction.

    Sends the trace's requests to SGLang's /generate, streamed, each prompt made of token ids
    drawn from its block ids (one block id, always the same tokens, so shared prefixes are
    real prefixes), in open loop by the trace's timestamps (--speedup) or closed loop
    (--concurrency). Per request: TTFT, end-to-end latency and the cached tokens by tier
    (device, host, storage). Beside the measurement, what `xputune tiers` predicts for the
    same requests at the server's own L1 and L2 sizes (read from /server_info), tier by tier,
    and the reasons the two can differ. Prompts stay within the server's own limit (SGLang
    refuses len >= max_req_input_len). Failed requests are counted by reason; below
    --min-completion percent completed (default: all) the run is not valid and ends with
    status 10. Ctrl-C stops and reports what was measured.

    Tier check: L2 (host) and L3 (storage) are each set against what they should serve (the
    prediction at their capacity), what they served (the requests) and what the server
    counted them written and read over the run (its /metrics, when it runs with
    --enable-metrics); a tier written but serving nothing where hits were due (dead), serving
    below half its prediction beyond the run's bound (starved), or whose hits are slower than
    recomputing the prompt (slow) is named with its evidence and likely causes, and the run
    ends with status 1.

    Phases (--phases): warm the tiers, stress them at a higher load, let the server cool,
    measure again, in one run. Each request phase sends the first N requests of the slice in
    tokens no other phase sends, so the first and the last measure phase are the same
    requests at the same load, both new to every tier: each phase's hit rates, TTFT and
    throughput are reported with their intervals, and the last measurement is compared with
    the first request by request. "did not recover": a figure worse beyond noise and by more
    than --recovery-margin percent of its first value, named, and the run ends with status
    1; "recovered" otherwise. A measurement that did not run whole is not compared (10).

    Examples:

        xputune replay --trace conv.jsonl --url http://127.0.0.1:30000 -n 500 -c 4
        xputune replay --trace conv.jsonl -c 2 \\
            --phases warm:400,measure:200,stress:800@c16,cool:30s,measure:200
    """
    from xputune.measure import router, tierhealth
    from xputune.measure.client import Endpoint
    from xputune.measure.predict import differences, predict, predict_cluster
    from xputune.measure.replay import replay
    from xputune.measure.report import replay_document
    from xputune.measure.router import read_counters, read_target
    from xputune.measure.server import token_range as vocab_of
    from xputune.measure.workload import build_workload
    from xputune.plan.hitrate import exact_curve

    endpoint = Endpoint.parse(req.url)
    given_range = _token_range(req.token_range)
    load = _load(req.concurrency, req.speedup, req.max_inflight, req.duration, req.timeout)
    plan = _phases(req.phases, req.requests)
    target = read_target(endpoint, req.host_tokens)
    info = target.info
    if target.workers and plan is not None:
        raise XputuneError("--phases drives one server: give a worker's --url, not the router's")
    vocab = vocab_of(info, given_range)
    limit = req.requests
    if plan is not None and req.requests is None:
        from xputune.measure.phases import most_requests

        limit = most_requests(plan)
    sliced = _read_trace(req.trace, req.trace_format, req.block_size, req.skip, limit)
    workload = build_workload(
        sliced,
        block_tokens=req.block_tokens,
        max_req_input_len=info.max_req_input_len,
        max_output=req.max_output,
    )
    if not workload.requests:
        raise XputuneError(f"{req.trace}: the slice holds no request with input tokens")
    if load.mode == "open" and not workload.timed:
        raise XputuneError(
            f"{req.trace}: some requests have no timestamp: give --concurrency N (closed loop)"
        )
    table = req.fmt is Format.table
    if plan is not None:
        return _replay_phases(
            plan, trace=req.trace, workload=workload, endpoint=endpoint, vocab=vocab, load=load,
            info=info, max_output=req.max_output, per_request=req.per_request,
            min_completion=req.min_completion / 100, margin=req.recovery_margin / 100, fmt=req.fmt,
        )  # fmt: skip
    requests = workload.trace()  # what the prediction is made from
    if target.workers:
        prediction = predict_cluster(requests, info, target.instances, req.routing)
    else:
        prediction = predict(exact_curve(requests), info)
    before, _ = read_counters(target)
    with _counting(len(workload.requests), "replaying", table) as advance:
        run = replay(workload, endpoint, vocab, load, advance)
    after, counters_note = read_counters(target)
    counters = router.moved(before, after)
    concurrent = load.mode == "open" or (load.concurrency or 1) > 1
    notes = differences(workload, info, run.records, concurrent=concurrent, vocab=vocab)
    if target.workers:
        notes += router.differences(req.routing)
    findings = tierhealth.assess(run.records, prediction, info, counters)
    data = replay_document(
        trace_file=req.trace, workload=workload, info=info, load=load, vocab=vocab,
        max_output=req.max_output, run=run, prediction=prediction, notes=notes,
        tier_check=tierhealth.check_document(findings, counters, counters_note),
        per_request=req.per_request, min_completion=req.min_completion / 100,
    )  # fmt: skip
    data["cluster"] = None if not target.workers else {
        "instances": target.instances, "routing": req.routing,
        "workers": [w.url for w in target.workers],
        "requests_per_worker": router.requests_per_worker(
            requests, target.instances, req.routing, before, after
        ),
    }  # fmt: skip
    if req.fmt is not Format.table:
        emit_data(data, req.fmt)
    else:
        _render_replay(data)
    if run.stop == "interrupted":
        return exits.INTERRUPTED
    if not data["valid"]:
        return exits.MEASUREMENT
    return exits.DIFFERENCE if findings else exits.OK


def _phases(text: str | None, requests: int | None) -> list[Any] | None:
    """The phases of --phases (None without it), checked against -n."""
    if text is None:
        return None
    from xputune.measure.phases import most_requests, parse_phases

    plan = parse_phases(text)
    if requests is not None and requests < most_requests(plan):
        raise XputuneError(
            f"--phases: a phase sends {most_requests(plan):,} requests, the slice holds "
            f"{requests:,} (-n): give -n {most_requests(plan)} or more, or leave it out"
        )
    return plan


def _replay_phases(plan: list[Any], *, trace: str, workload: Any, endpoint: Any, vocab: Any,
                   load: Any, info: Any, max_output: int, per_request: bool,
                   min_completion: float, margin: float, fmt: Format) -> int:  # fmt: skip
    """replay --phases: run them, render, and the exit status."""
    from xputune.measure.phases import NOT_RECOVERED, most_requests, run_phases
    from xputune.measure.predict import differences
    from xputune.measure.report import phases_document

    need = most_requests(plan)
    if len(workload.requests) < need:
        raise XputuneError(
            f"--phases: a phase sends {need:,} requests, the slice holds "
            f"{len(workload.requests):,} with input tokens: lower the phase, or --skip"
        )
    progress = _PhasesProgress(fmt is Format.table)
    try:
        result = run_phases(plan, workload, endpoint, vocab, load, info, progress)
    finally:
        progress.close()
    shown = result.last if result.last.run is not None else result.first
    notes = []
    if shown.run is not None and shown.workload is not None:
        concurrent = load.mode == "open" or (load.concurrency or 1) > 1
        notes = differences(shown.workload, info, shown.run.records, concurrent=concurrent,
                            vocab=vocab)  # fmt: skip
    data = phases_document(
        result, trace_file=trace, workload=workload, info=info, load=load, vocab=vocab,
        max_output=max_output, notes=notes, per_request=per_request,
        min_completion=min_completion, margin=margin,
    )  # fmt: skip
    if fmt is not Format.table:
        emit_data(data, fmt)
    else:
        _render_phases(data)
    if result.stop == "interrupted":
        return exits.INTERRUPTED
    if not data["valid"]:
        return exits.MEASUREMENT
    findings = any(p["tier_check"] and p["tier_check"]["findings"] for p in data["phases"])
    if data["recovery"]["verdict"] == NOT_RECOVERED or findings:
        return exits.DIFFERENCE
    return exits.OK


class _PhasesProgress:
    """A line and a replay bar per phase on stderr, on a terminal only."""

    def __init__(self, enabled: bool) -> None:
        import sys

        self.on = enabled and sys.stderr.isatty()
        self.err = console(stderr=True)
        self._bar: Any = None
        self.total = 0

    def phase(self, run: Any, total: int) -> Callable[[Any], None] | None:
        if not self.on:
            return None
        what = f"idle {run.phase.seconds:g} s" if run.phase.idle else f"{total:,} requests"
        self.err.print(f"[phase {run.number}] {run.phase.spec}: {what}", highlight=False)
        if run.phase.idle:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        bar = Progress(TextColumn("      replaying"), BarColumn(), MofNCompleteColumn(),
                       console=self.err, transient=True)  # fmt: skip
        task = bar.add_task("", total=total)
        bar.start()
        self._bar = bar
        return lambda _record: bar.advance(task, 1)

    def done(self, run: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2%}"


def _pts(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.2f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _tokens(x: int | None) -> str:
    return "-" if x is None else f"{x:,}"


def _trace_line(t: dict[str, Any]) -> str:
    scaled = (
        f", {t['block_size']}-token blocks sent as {t['block_tokens']}"
        if t["block_tokens"] != t["block_size"]
        else f", {t['block_size']}-token blocks"
    )
    cut = (
        f"; {t['truncated_prompts']} prompt(s) cut to the server's limit of "
        f"{_tokens(t['longest_prompt'])} tokens"
        if t["truncated_prompts"]
        else ""
    )
    if t["server_capped_outputs"]:
        cut += f"; {t['server_capped_outputs']} output(s) cut to what the server generates"
    return (
        f"trace {t['file']}: {t['requests']:,} requests (lines {t['first_line']}-"
        f"{t['last_line']}), {t['input_tokens']:,} input tokens{scaled}{cut}"
    )


def _server_line(s: dict[str, Any]) -> str:
    l2 = "off"
    if s["hierarchical_cache"]:
        how = (
            f"ratio {s['hicache_ratio']:g}" if s["host_tokens_from"] == "ratio"
            else f"{s['hicache_size_gb']:g} GB" if s["host_tokens_from"] == "size"
            else s["host_tokens_from"]
        )  # fmt: skip
        l2 = f"{_tokens(s['host_tokens'])} tokens ({how}), {s['write_policy']}"
        if s["storage_backend"]:
            l2 += f", L3 {s['storage_backend']}"
    return (
        f"server {s['url']}: sglang {s['version']}, L1 {s['device_tokens']:,} tokens, "
        f"L2 {l2}, page {s['page_size']}"
    )


def _load_line(ld: dict[str, Any]) -> str:
    if ld["mode"] == "closed":
        return f"closed loop, {ld['concurrency']} at once"
    return (
        f"open loop at {ld['speedup']:g}x the trace's clock (at most {ld['max_inflight']} at once)"
    )


def _comparison_table(rows: list[dict[str, Any]], title: str):
    from xputune.cli.output import new_table

    table = new_table(
        title, ["tier", "capacity (tokens)", "predicted", "measured", "measured - predicted"]
    )
    names = {"device": "device (L1)", "host": "host (L2)", "storage": "storage (L3)"}
    for row in rows:
        table.add_row(
            names.get(row["tier"], row["tier"]),
            _tokens(row["capacity_tokens"]) if row["tier"] != "storage" else "unbounded",
            _pct(row["predicted"]),
            _pct(row["measured"]),
            _pts(row["difference"]) + (" pts" if row["difference"] is not None else ""),
        )
    return table


def _render_replay(data: dict[str, Any]) -> None:
    from xputune.cli.output import bullets, print_fitted, text, text_lines

    c = console()
    m = data["measured"]
    run = data["run"]
    c.print(text(_trace_line(data["trace"])), soft_wrap=True)  # a path: never folded
    c.print(text(_server_line(data["server"])))
    if data.get("cluster"):
        cl = data["cluster"]
        c.print(
            text(
                f"behind a router: {cl['instances']} instances ({', '.join(cl['workers'])}); "
                f"the server line is the one with the smallest limits; predicted as "
                f"{cl['routing']} routing (plan/cluster.py), counters added up"
            )
        )
        c.print(text(f"requests per worker: {_spread(cl['requests_per_worker'])}"))
    req = m["requests"]
    stop = {"done": "", "duration": " (stopped by --duration)", "interrupted": " (interrupted)"}
    c.print(
        text(
            f"load: {_load_line(data['load'])}; {req['completed']:,} of {req['sent']:,} "
            f"requests completed in {m['elapsed_s']:.1f} s{stop[run['stop']]}"
            + (f", {run['unsent']:,} not sent" if run["unsent"] else "")
            + (f", {run['abandoned']:,} abandoned in flight" if run["abandoned"] else "")
        )
    )
    t, e, th = m["ttft_ms"], m["e2e_ms"], m["throughput"]
    over = _over(req)
    iv = m["intervals"]
    lines = [
        f"TTFT ms{over}  p50 {_ms(t['p50'])}  p90 {_ms(t['p90'])}  p99 {_ms(t['p99'])}  "
        f"mean {_ms(t['mean'])} {_ci(iv['ttft_mean_ms'], _ms)}",
        f"hit rate{over} {_pct(iv['hit_rate']['total']['value'])} "
        f"{_ci(iv['hit_rate']['total'], _pct)} ({data['noise']['confidence']:.0%} bootstrap "
        "interval)",
        f"e2e ms{over}   p50 {_ms(e['p50'])}  p90 {_ms(e['p90'])}  p99 {_ms(e['p99'])}",
        f"throughput {th['requests_per_s'] or 0:.2f} req/s, "
        f"{th['input_tokens_per_s'] or 0:,.0f} input tok/s, "
        f"{th['output_tokens_per_s'] or 0:,.0f} output tok/s",
        f"client CPU per request in the TTFT window: p50 {_ms(m['client_overhead_us']['p50'])} "
        f"us, p99 {_ms(m['client_overhead_us']['p99'])} us",
    ]
    if m.get("dispatch_lag_ms"):
        lag = m["dispatch_lag_ms"]
        lines.append(f"dispatch lag ms  p50 {_ms(lag['p50'])}  p99 {_ms(lag['p99'])}")
    title = f"hit rate by tier: prediction (tiers) and measurement{over}"
    print_fitted(c, _comparison_table(data["comparison"], title), text_lines(lines))
    _render_failures(c, m["errors"])
    _render_tier_check(c, data["tier_check"])
    if data["notes"]:
        c.print("why the measurement can differ from the prediction:")
        c.print(bullets(data["notes"]))
    _render_validity(c, data)


def _phase_load_cell(ld: dict[str, Any] | None) -> str:
    if ld is None:
        return "-"
    if ld["mode"] == "closed":
        return f"{ld['concurrency']} at once"
    return f"{ld['speedup']:g}x clock"


def _render_phases(data: dict[str, Any]) -> None:
    """replay --phases: every phase, the last measurement against the first, and the last
    measurement beside the prediction."""
    from xputune.cli.output import bullets, new_table, print_fitted, text

    c = console()
    run = data["run"]
    c.print(text(_trace_line(data["trace"])), soft_wrap=True)  # a path: never folded
    c.print(text(_server_line(data["server"])))
    stop = {"done": "", "duration": " (stopped by --duration)", "interrupted": " (interrupted)"}
    c.print(
        text(
            f"load: {_load_line(data['load'])} (the measure phases'); "
            f"{len(data['phases'])} phases in {run['seconds']:.1f} s{stop[run['stop']]}"
        )
    )
    storage = data["server"]["storage_backend"] is not None
    heads = ["#", "phase", "load", "requests", "s", "hit rate", "L1", "L2"]
    heads += ["L3"] if storage else []
    table = new_table("phases: measured (measure phases with their 95% bootstrap intervals)",
                      [*heads, "TTFT mean ms", "req/s"])  # fmt: skip
    for p in data["phases"]:
        m = p["measured"]
        took = "-" if p["elapsed_s"] is None else f"{p['elapsed_s']:.1f}"
        if m is None:
            idle = p["kind"] == "idle" and p["status"] != "not run"
            cells = ["idle" if idle else p["status"]] + ["-"] * (len(heads) - 5)
            table.add_row(str(p["number"]), p["spec"], "-", *cells[:1], took, *cells[1:],
                          "-", "-")  # fmt: skip
            continue
        req, rates, iv = m["requests"], m["hit_rate"], m["intervals"]
        measured = p["name"] == "measure"
        total = _pct(rates["total"]) + (f" {_ci(iv['hit_rate']['total'], _pct)}" if measured
                                        else "")  # fmt: skip
        ttft = _ms(m["ttft_ms"]["mean"]) + (f" {_ci(iv['ttft_mean_ms'], _ms)}" if measured
                                            else "")  # fmt: skip
        tiers = [_pct(rates[t]) for t in ("device", "host")] + (
            [_pct(rates["storage"])] if storage else []
        )
        table.add_row(
            str(p["number"]), p["spec"], _phase_load_cell(p["load"]),
            f"{req['completed']:,}/{req['sent']:,}", took, total, *tiers, ttft,
            f"{m['throughput']['requests_per_s'] or 0:.2f}",
        )  # fmt: skip
    print_fitted(c, table)
    rec = data["recovery"]
    noise = f"{data['noise']['confidence']:.0%} bootstrap intervals, paired"
    c.print(text(f"recovery: measure phase {rec['last_phase']} against phase "
                 f"{rec['first_phase']}, the same {rec['requests']:,} requests ({noise}"
                 + (f", over the {rec['compared']:,} completed in both" if rec["compared"]
                    and rec["compared"] < rec["requests"] else "") + "):"))  # fmt: skip
    for f in rec["figures"]:
        scale, unit = (100.0, "pts") if f["unit"] == "points" else (1.0, f["unit"])
        said = _diff(f["change"], scale, unit)
        mark = ""
        if f["verdict"] in ("worse", "worse within the margin", "better"):
            mark = f": {f['verdict']}"
            if f["margin"] is not None and f["verdict"] != "better":
                mark += f" (margin {f['margin'] * scale:.3g} {unit})"
        judged = "" if f["judged"] else " (shown, not judged)"
        c.print(text(f"  {f['label']}: {said}{mark}{judged}"))
    margin = f"{rec['margin']:.0%} of the first value"
    if rec["verdict"] == "recovered":
        c.print(text(f"recovered: no figure is worse beyond noise and the margin ({margin})",
                     "green"))  # fmt: skip
    elif rec["verdict"] == "did not recover":
        c.print(text(f"did not recover: {', '.join(rec['worse'])} worse beyond noise and the "
                     f"margin ({margin}; exit {exits.DIFFERENCE})", "bold red"))  # fmt: skip
    else:
        c.print(text(f"not compared: {rec['reason']}", "yellow"))
    over = _over(data["measured"]["requests"])
    title = (f"hit rate by tier, phase {run['shown_phase']}: prediction (tiers) and "
             f"measurement{over}")  # fmt: skip
    print_fitted(c, _comparison_table(data["comparison"], title))
    for p in data["phases"]:
        where = f"phase {p['number']} ({p['spec']}): "
        if p["measured"] and p["name"] == "measure":
            _render_failures(c, p["measured"]["errors"], where)
        if p["tier_check"]:
            _render_tier_check(c, p["tier_check"], where)
    if data["notes"]:
        c.print("notes:")
        c.print(bullets(data["notes"]))
    _render_validity(c, data)


def _render_tier_check(c: Any, check: dict[str, Any], where: str = "") -> None:
    """Each tier that fills but does not serve, with its evidence and likely causes."""
    from xputune.cli.output import bullets, text

    for found in check["findings"]:
        c.print(text(f"{where}tier check: {found['summary']}"))
        c.print(bullets(found["evidence"]))
        c.print("  likely causes:")
        c.print(bullets(found["likely_causes"]))
    if check["counters"] is None and check["counters_note"]:
        c.print(text(f"{where}tier check without the server's counters: "
                     f"{check['counters_note']}"))  # fmt: skip


def _over(req: dict[str, Any]) -> str:
    """' over N of M requests' when not every request sent completed ('' when all did)."""
    if req["completed"] == req["sent"]:
        return ""
    return f" over {req['completed']:,} of {req['sent']:,} requests"


def _ci(iv: dict[str, Any] | None, show: Callable[[Any], str]) -> str:
    """A bootstrap interval as [low, high] ('' when there is none)."""
    if not iv or iv["low"] is None:
        return ""
    return f"[{show(iv['low'])}, {show(iv['high'])}]"


def _noise_words(noise: dict[str, Any]) -> str:
    return f"{noise['confidence']:.0%} bootstrap intervals over {noise['requests']:,} requests"


def _signed(values: list[float | None], scale: float = 1.0) -> Callable[[Any], str]:
    """A signed number format for a figure [low, high]: enough decimals (1 to 4) to show the
    interval's width (or, without one, the figure) to one significant digit."""
    import math

    value, low, high = values
    width = abs(high - low) * scale if low is not None and high is not None else 0.0
    size = width or abs(value or 0.0) * scale or 1.0
    places = min(4, max(1, 1 - math.floor(math.log10(size))))
    return lambda x: "-" if x is None else f"{x * scale:+,.{places}f}"


def _diff(d: dict[str, Any] | None, scale: float = 1.0, unit: str = "", plain: bool = False) -> str:
    """A difference with its interval, or 'no difference beyond noise' and the interval
    (`plain`: the figure and interval only, where the line already says it is noise)."""
    from xputune.measure.noise import NO_DIFFERENCE

    if not d or d["value"] is None:
        return "-"
    show = _signed([d["value"], d["low"], d["high"]], scale)
    shown = " ".join(x for x in (show(d["value"]), _ci(d, show), unit) if x)
    return shown if d["beyond_noise"] or plain else f"{NO_DIFFERENCE} ({shown})"


def _render_failures(c: Any, errors: list[dict[str, Any]], where: str = "") -> None:
    from xputune.cli.output import text

    for err in errors:
        example = "" if err["example"] == err["error"] else f"; e.g. {err['example']}"
        c.print(text(f"{where}failed {err['count']:,}x (first at line {err['first_line']}): "
                     f"{err['error']}{example}", "yellow"))  # fmt: skip


def _render_validity(c: Any, data: dict[str, Any]) -> None:
    from xputune.cli.output import text

    for why in data["invalid_reasons"]:
        c.print(text(f"not a valid measurement (exit {exits.MEASUREMENT}): {why}", "bold red"))


# ---------------------------------------------------------------------------------- sweep


class _SweepProgress:
    """Step lines and a replay bar on stderr, on a terminal only."""

    def __init__(self, enabled: bool) -> None:
        import sys

        self.on = enabled and sys.stderr.isatty()
        self.err = console(stderr=True)
        self._bar = None

    def step(self, index: int, total: int, label: str) -> None:
        if self.on:
            self.err.print(f"[{index}/{total}] {label}: starting the server", highlight=False)

    def ready(self, step: Any) -> None:
        if self.on:
            s = step.info
            self.err.print(
                f"      ready in {step.start_s:.1f} s: L1 {s.device_tokens:,} tokens, "
                f"L2 {_tokens(s.host_tokens)} tokens",
                highlight=False,
            )

    def replaying(self, requests: int) -> Callable[[Any], None] | None:
        if not self.on:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        bar = Progress(TextColumn("      replaying"), BarColumn(), MofNCompleteColumn(),
                       console=self.err, transient=True)  # fmt: skip
        task = bar.add_task("", total=requests)
        bar.start()
        self._bar = bar
        return lambda _record: bar.advance(task, 1)

    def done(self, step: Any) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        if self.on:
            rate = step.hit_rate()
            self.err.print(
                f"      hit rate {_pct(rate)}, mean TTFT {_ms(step.ttft_mean_ms())} ms; replay "
                f"{step.replay_s:.1f} s, stop {step.stop_s:.1f} s",
                highlight=False,
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def sweep_cmd(req: Request) -> int:
    """The tier-by-tier experiment: launch, replay and stop a server per L2 size.

    For each L2 size, smallest first (the plan's ladder, or --sizes), starts SGLang as
    `xputune launch sglang` would with your ARGS (after `--`): the launcher runs once, as a
    dry run with all its checks (and its preflight of SGLang's Python, --python), and each
    size runs its command with that size. It replays the trace on the server's cold cache,
    stops it; stops early at the plateau (a size adding less than --min-gain points of hit
    rate). With --baseline a server with HiCache off runs first, and each size is judged by
    net benefit against it: TTFT saved = compute saved by the extra hits - cost of moving
    their KV. Reports measured hit rate per tier beside the prediction, TTFT per size, the
    knee, and the load line T(n) = a + b*n fitted to the all-hit requests (what `xputune
    model` fits from typed-in points). Every difference carries its 95% bootstrap interval
    over the requests; one within noise is said to be "no difference beyond noise". A size
    whose requests complete below --min-completion ends the sweep with status 10. Server
    logs stay in a private temporary folder.

    With an L3 tier (--launch-opt '--l3 file --l3-dir DIR', or '--l3 mooncake ...'), every
    size starts with an empty L3 store, so that no size counts what an earlier one stored as
    its own hits: a file store gets a new folder per size inside DIR (removed after its
    server stopped; nothing else in DIR is touched); a store the sweep cannot give each size
    of its own (a Mooncake pool) is refused unless --clear-l3 (emptied through each size's
    server before its replay, for every instance using it) or --keep-l3 (used as it is,
    said in the result). L3's hit rate per size is shown beside its prediction, and the
    tier check covers it.

    Clusters (--instances 1,2,4): instead of sizes, for each N, each --routing policy and,
    with --compare-l3, with and without the L3 of --launch-opt, `xputune launch cluster`
    runs N instances behind sglang-router (one L2 size for all); the trace is replayed
    through the router on cold caches, each tier's hit rate over all the instances (their
    counters added up) beside plan/cluster.py's prediction for N and the policy, and the set
    stopped. Each run's L3 starts empty: a file store in a new folder per run, a Mooncake
    master the cluster starts itself is new every run (one named with --l3-master needs
    --clear-l3 or --keep-l3, as above). Consecutive runs are compared paired, as sizes are.

    Examples:

        xputune sweep --trace conv.jsonl --sizes x2,x4,x8 --baseline -c 1 \\
            -- --model-path /models/m --device cpu --max-total-tokens 4096
        xputune sweep --trace conv.jsonl --sizes x2 --instances 1,2 \\
            --routing round_robin,cache_aware --compare-l3 \\
            --launch-opt '--l3 file --l3-dir /data/l3' -c 1 \\
            -- --model-path /models/m --device cpu --max-total-tokens 4096
    """
    import shlex

    from xputune.measure.clustersweep import (
        check_cluster_args,
        parse_instances,
        parse_routings,
        run_cluster_sweep,
    )
    from xputune.measure.sweep import check_args, default_ladder, parse_sizes, run_sweep

    try:
        launch_opts = [w for opt in req.launch_opt or [] for w in shlex.split(opt)]
    except ValueError as exc:
        raise XputuneError(f"--launch-opt: {exc}") from None
    launch_opts += ["--python", req.python] if req.python is not None else []
    given_range = _token_range(req.token_range)
    check_args(req.sglang_args, launch_opts)
    if req.instances is not None:  # what a sweep of clusters is asked, said before any work
        counts, routings = parse_instances(req.instances), parse_routings(req.routing)
        ladder = _cluster_size(req)
        check_cluster_args(launch_opts, req.sglang_args)
    elif req.compare_l3:
        raise XputuneError("--compare-l3 compares clusters: give --instances")
    load = _load(req.concurrency, req.speedup, req.max_inflight, req.duration, req.timeout)
    sliced = _read_trace(req.trace, req.trace_format, req.block_size, req.skip, req.requests)
    if load.mode == "open" and any(r.at_ms is None for r in sliced.requests):
        raise XputuneError(
            f"{req.trace}: some requests have no timestamp: give --concurrency N (closed loop)"
        )
    progress = _SweepProgress(req.fmt is Format.table)
    if req.instances is not None:
        try:
            result = run_cluster_sweep(
                trace=sliced, instances=counts, routings=routings, compare_l3=req.compare_l3,
                size=ladder[0] if ladder else None, launch_opts=launch_opts,
                sglang_args=req.sglang_args, load=load, block_tokens=req.block_tokens,
                max_output=req.max_output, token_range=given_range, host_tokens=req.host_tokens,
                start_timeout=req.start_timeout, stop_grace=req.stop_grace, progress=progress,
                clear_l3=req.clear_l3, keep_l3=req.keep_l3,
            )  # fmt: skip
        finally:
            progress.close()
    else:
        ladder = (
            parse_sizes(req.sizes)
            if req.sizes is not None
            else default_ladder(launch_opts, req.sglang_args)
        )
        try:
            result = run_sweep(
                trace=sliced, sizes=ladder, baseline=req.baseline, min_gain=req.min_gain / 100,
                launch_opts=launch_opts, sglang_args=req.sglang_args, load=load,
                block_tokens=req.block_tokens, max_output=req.max_output,
                token_range=given_range, host_tokens=req.host_tokens,
                start_timeout=req.start_timeout, stop_grace=req.stop_grace, progress=progress,
                clear_l3=req.clear_l3, keep_l3=req.keep_l3,
            )  # fmt: skip
        finally:
            progress.close()
    from xputune.measure.report import sweep_document

    data = sweep_document(
        result,
        trace_file=req.trace,
        load=load,
        max_output=req.max_output,
        min_gain=req.min_gain / 100,
        sizes=[s.label for s in ladder],
        baseline=req.baseline,
        min_completion=req.min_completion / 100,
    )
    if req.fmt is not Format.table:
        emit_data(data, req.fmt)
    else:
        _render_sweep(data)
    if result.interrupted:
        return exits.INTERRUPTED
    if result.error:
        raise XputuneError(result.error)
    if not data["valid"]:
        return exits.MEASUREMENT
    return exits.DIFFERENCE if any(s.findings for s in result.steps) else exits.OK


def _cluster_size(req: Request) -> list[Any]:
    """The one L2 size every instance of a sweep of clusters gets ([]: the launcher's)."""
    from xputune.measure.sweep import parse_sizes

    if req.baseline:
        raise XputuneError("--baseline is a sweep of sizes: leave it out with --instances")
    ladder = parse_sizes(req.sizes) if req.sizes is not None else []
    if len(ladder) > 1:
        raise XputuneError("--instances keeps one L2 size for every run: give --sizes one size")
    return ladder


def _render_sweep(data: dict[str, Any]) -> None:
    from xputune.cli.output import bullets, new_table, print_fitted, text

    c = console()
    if data["trace"]:
        c.print(text(_trace_line(data["trace"])), soft_wrap=True)  # a path: never folded
    if data["load"]:
        c.print(text(f"load: {_load_line(data['load'])}"))
        c.print(text(f"server logs in {data['logs']}"), soft_wrap=True)
    l3 = data.get("l3")
    per, what = ("run", "N policy") if data.get("cluster") else ("L2 size", "size")
    hits = new_table(
        f"hit rate by tier per {per}: measured (predicted)",
        [what, "L1 tokens", "L2 tokens", "device", "host", *(["storage"] if l3 else []),
         "total"],
    )  # fmt: skip
    cluster = bool(data.get("cluster"))  # no baseline: nothing saved against one
    times = new_table(
        "latency and time per run" if cluster else
        "latency, net benefit against the baseline, and time per step",
        [what, "TTFT p50 ms", "TTFT p99 ms", "TTFT mean ms",
         *([] if cluster else ["TTFT saved ms"]), "start s", "replay s", "stop s"],
    )  # fmt: skip
    for s in data["steps"]:
        m, p, nb, srv = s["measured"], s["predicted"], s["net_benefit"], s["server"]
        rates = m["hit_rate"] if m else {}
        pred = p["hit_rate"] if p else {}

        def cell(tier: str, rates: dict = rates, pred: dict = pred) -> str:
            got = _pct(rates.get(tier))
            return f"{got} ({_pct(pred.get(tier))})" if pred else got

        hits.add_row(
            s["label"] + (_over(m["requests"]) if m else ""),
            _tokens(srv["device_tokens"]) if srv else "-",
            _tokens(srv["host_tokens"]) if srv else "-",
            cell("device"),
            cell("host"),
            *([cell("storage")] if l3 else []),
            cell("total"),
        )
        tm, ttft = s["timing_s"], (m["ttft_ms"] if m else {})
        times.add_row(
            s["label"],
            _ms(ttft.get("p50")),
            _ms(ttft.get("p99")),
            _ms(ttft.get("mean")),
            *([] if cluster else [_saved_cell(nb)]),
            *("-" if tm[k] is None else f"{tm[k]:.1f}" for k in ("start", "replay", "stop")),
        )
    print_fitted(c, hits, times)
    if data.get("cluster"):
        c.print(text("N policy: the instances and the router's policy (rr round_robin, ca "
                     "cache_aware, rand random); +L3: sharing the L3 of --launch-opt"))  # fmt: skip
        for s in data["steps"]:
            if s["cluster"] and s["cluster"]["requests_per_worker"]:
                spread = _spread(s["cluster"]["requests_per_worker"])
                c.print(text(f"{s['label']}: requests per worker {spread}"))
    if l3:
        unit = "run" if data.get("cluster") else "size"
        c.print(text(_l3_line(l3, data["steps"], unit)), soft_wrap=True)  # a path: not folded
    rule = data.get("plateau_rule")
    if data["differences"]:
        runs = "runs" if data.get("cluster") else "sizes"
        c.print(text(f"differences between {runs} ({_noise_words(data['noise'])}, paired):"))
        for d in data["differences"]:
            alike = d["verdict"].startswith("TTFT differs")
            c.print(text(f"  {d['from']} -> {d['to']}: hit rate "
                         f"{_diff(d['hit_rate'], 100, 'pts')}; mean TTFT "
                         f"{_diff(d['ttft_mean_ms'], 1, 'ms')}"
                         + (f", {_NOT_CACHE}" if alike else "")))  # fmt: skip
    if data["stopped_early_after"]:
        c.print(
            text(
                f"plateau: {data['stopped_early_after']} added less than {data['min_gain']:.2%} "
                f"of hit rate over the size before it, so the sweep stopped there (not run: "
                f"{', '.join(data['not_run']) or '-'})"
            )
        )
    if rule:
        tied = rule["within_noise_of_best"]
        prefer = (
            f"the measurements prefer {rule['measurements_prefer']} ({rule['chosen_by']}, "
            "beyond noise against every other size)"
            if rule["measurements_prefer"]
            else f"the measurements: no difference beyond noise among {', '.join(tied)} "
            f"({rule['chosen_by']})"
        )  # fmt: skip
        c.print(text(f"stop-at-plateau keeps {rule['stops_at']}; {prefer}"))
    if data.get("knee"):
        k = data["knee"]
        c.print(
            text(
                f"knee: {k['size']} ({_tokens(k['host_tokens'])} L2 tokens), {_pct(k['hit_rate'])}"
                f"; the knee of {k['share']:.0%} of the draws"
                + (
                    ""
                    if k["low"] == k["high"]
                    else f", {k['low']} to {k['high']} at {data['noise']['confidence']:.0%}"
                )
            )
        )
    elif data.get("knee_verdict"):
        c.print(text(f"knee: {data['knee_verdict']}"))
    for name, label in (("load_fit", "load T(n)"), ("recompute_fit", "recompute R(n)")):
        f = data[name]
        if f["fitted"]:
            r2 = f" R^2 {f['r_squared']:.3f}" if f["r_squared"] is not None else ""
            c.print(
                text(
                    f"{label} = {f['a_ms']:.2f} ms + {f['b_us_per_token']:.2f} us * n from "
                    f"{f['points']} {f['source']} (n {f['tokens_min']:g}-{f['tokens_max']:g}, "
                    f"rms {f['rms_residual_ms']:.2f} ms{r2})"
                )
            )
        else:
            c.print(text(f"{label}: not fitted ({f['reason']})"))
    be = data.get("break_even")
    if be:
        if be["always_pays"]:
            line = "break-even: every L2 hit pays"
        elif be["never_pays"]:
            line = "break-even: never (loading a token is not cheaper than computing it)"
        else:
            line = f"break-even: hits longer than {be['tokens']:,.0f} tokens pay"
        if not be["reliable"]:
            line += (
                " (not to be trusted: a line above has a slope <= 0 or R^2 < 0.5; the "
                "times are noise at these lengths)"
            )
        c.print(text(line))
    for s in data["steps"]:
        if s["net_benefit"]:
            c.print(text(_net_benefit_line(s["label"], s["net_benefit"])))
    c.print(text(f"sweep took {data['seconds']:.1f} s"))
    if data["notes"]:
        c.print("why the measurement can differ from the prediction:")
        c.print(bullets(data["notes"]))
    for s in data["steps"]:
        if s["measured"]:
            _render_failures(c, s["measured"]["errors"], s["label"] + ": ")
        if s["tier_check"]:
            _render_tier_check(c, s["tier_check"], s["label"] + ": ")
    _render_validity(c, data)


def _spread(counts: dict[str, Any]) -> str:
    """Requests per worker, measured (predicted), most first: "150, 50 (100, 100)"."""
    shown = ", ".join(f"{n:,}" for n in counts["measured"]) if counts["measured"] else "-"
    return f"{shown} ({', '.join(f'{n:,}' for n in counts['predicted'])} predicted)"


def _l3_line(l3: dict[str, Any], steps: list[dict[str, Any]], unit: str = "size") -> str:
    """What each size's (or cluster run's) L3 store held at its start."""
    name = f"L3 ({l3['backend']})"
    if l3["between_sizes"] == "own_folder":
        pages = [f"{s['label']} {_tokens(s['l3']['pages_written'])}" for s in steps
                 if s["l3"] and s["l3"]["pages_written"] is not None]  # fmt: skip
        wrote = f"; pages written: {', '.join(pages)}" if pages else ""
        servers = "servers" if unit == "run" else "server"
        return (f"{name}: each {unit} started with a new empty folder of its own in "
                f"{l3['folder']}, removed after its {servers} stopped{wrote}")  # fmt: skip
    if l3["between_sizes"] == "own_master":
        return f"{name}: each {unit} started a new master of its own, so an empty store"
    if l3["between_sizes"] == "cleared":
        return (f"{name}: emptied through each {unit}'s server before its replay "
                "(--clear-l3), for every instance using the store")  # fmt: skip
    where = f" ({l3['folder']})" if l3["folder"] else ""
    return (f"{name}{where}: kept as it was between {unit}s (--keep-l3): later {unit}s may "
            f"count what earlier ones stored as their own L3 hits")  # fmt: skip


_NOT_CACHE = "not a cache effect (the host's load moved, or the servers differ otherwise)"


def _saved_cell(nb: dict[str, Any] | None) -> str:
    """TTFT saved against the baseline, in a table cell: the figure, or 'noise'."""
    if not nb:
        return "-"
    iv = nb["intervals"]["ttft_saved_ms"]
    shown = _signed([iv["value"], iv["low"], iv["high"]])(nb["ttft_saved_ms"])
    return shown + ("" if iv["beyond_noise"] else " (noise)")


def _net_benefit_line(label: str, nb: dict[str, Any]) -> str:
    """Net benefit against the baseline, each part with its interval; within noise, said so."""
    from xputune.measure.noise import NO_DIFFERENCE

    iv = nb["intervals"]
    saved = _diff(iv["ttft_saved_ms"], 1, "ms")
    hits = _diff(iv["extra_hit_tokens"], 1, "tokens")
    head = f"net benefit {label}: "
    if nb["verdict"] == NO_DIFFERENCE:
        saved = _diff(iv["ttft_saved_ms"], 1, "ms", plain=True)
        hits = _diff(iv["extra_hit_tokens"], 1, "tokens", plain=True)
        return f"{head}{NO_DIFFERENCE} (TTFT saved {saved}; extra hits {hits} per request)"
    if not iv["extra_hit_tokens"]["beyond_noise"]:
        return f"{head}TTFT saved {saved} per request with extra hits {hits}: {_NOT_CACHE}"
    parts = ""
    if iv["compute_saved_ms"] is not None:
        parts = f" = compute saved {_diff(iv['compute_saved_ms'], 1, 'ms')} - cost of moving " \
            f"KV {_diff(iv['moving_cost_ms'], 1, 'ms')}"  # fmt: skip
    if not iv["ttft_saved_ms"]["beyond_noise"]:
        return f"{head}TTFT saved {saved} per request despite extra hits {hits} per " \
            f"request{parts}"  # fmt: skip
    return f"{head}TTFT saved {saved} per request{parts} (extra hits {hits} per request " \
        "over the baseline)"  # fmt: skip
