"""model and tiers: the trace- and measurement-driven planning commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xputune.cli.options import (
    BLOCK_SIZE,
    CONFIG,
    DTYPE,
    FORMAT,
    L3_GBPS,
    MAX_COUNT,
    MAX_GBPS,
    MAX_MS,
    MIN_GAIN,
    MODEL,
    RECOMPUTE,
    TP_NO_HOST,
    TRACE,
    TRACE_FORMAT,
    TraceFormat,
)
from xputune.cli.output import (
    Format,
    console,
    emit_data,
    progress,
    text,
    text_lines,
)
from xputune.cli.spec import Command, Opt, Request
from xputune.errors import XputuneError
from xputune.plan.cluster import ROUTINGS
from xputune.plan.inputs import count

MODEL_OPTIONS = (MODEL, CONFIG, TP_NO_HOST, DTYPE, FORMAT)
MODEL_CMD = Command(
    ("model",),
    "xputune.cli.plan_cmds:model_cmd",
    (
        Opt("point", ("--point",), "A measured all-hit load: TOKENS:MS (repeat; at least two).",
            multiple=True, metavar="TOKENS:MS"),
        Opt("points_file", ("--points",), "CSV of tokens,ms load measurements.", kind="path",
            metavar="FILE"),
        Opt("fit_a", ("--fit-a",), "Fixed load cost a (ms), instead of points.", kind="float",
            min=0.0, max=MAX_MS, metavar="MS"),
        Opt("fit_b", ("--fit-b",), "Load cost per token b (us), instead of points.",
            kind="float", min=0.0, max=MAX_MS, metavar="US"),
        RECOMPUTE.but(help="Prefill cost per token (us) when recomputing."),
        Opt("recompute_point", ("--recompute-point",), "A measured recompute: TOKENS:MS "
            "(repeat).", multiple=True, metavar="TOKENS:MS"),
        Opt("floor_ms", ("--floor-ms",), "Fixed per-request time both paths pay (the "
            "deployment floor); the recompute line is floor + per-token cost.", kind="float",
            min=0.0, max=MAX_MS, default=0.0, metavar="MS"),
        Opt("bandwidth", ("--bandwidth-gbps",), "Measured H2D bandwidth in GB/s (1e9 bytes).",
            kind="float", min=0.0, max=MAX_GBPS, metavar="GB/S"),
        Opt("bytes_per_token", ("--bytes-per-token",), "KV bytes per token per rank (else "
            "from --model).", kind="float", min=0.0, max=MAX_COUNT, metavar="BYTES"),
        Opt("break_even_at", ("--break-even-at",), "Also report the recompute cost per token "
            "that would put break-even at this many tokens.", kind="float", min=0.0,
            max=MAX_COUNT, metavar="TOKENS"),
        Opt("seed", ("--seed",), "Use the field report's figures: T(n) = 779.1 ms + 13.539 "
            "us*n, 735 ms floor, 7.40 GB/s, GLM-5.", kind="flag", default=False),
        *MODEL_OPTIONS,
    ),
)  # fmt: skip
TIERS = Command(
    ("tiers",),
    "xputune.cli.plan_cmds:tiers_cmd",
    (
        TRACE,
        TRACE_FORMAT,
        BLOCK_SIZE,
        Opt("capacity", ("--capacity",), "A capacity to report, in tokens (repeat; 64K, 2M "
            "accepted). Default: a geometric grid up to saturation.", multiple=True,
            metavar="TOKENS"),
        Opt("l1", ("--l1",), "Device (L1) cache size in tokens: adds L1 + L2 hit rates for a "
            "write-through and an exclusive L2 at each capacity.", metavar="TOKENS"),
        Opt("l2", ("--l2",), "Host (L2) cache size in tokens, for the three-tier split with "
            "--l3.", metavar="TOKENS"),
        Opt("l3", ("--l3",), "L3 (the Mooncake pool, or a folder) size in tokens: adds the hit "
            "rate each of L1, L2 and L3 serves, and with --model how many L3 hits are long "
            "enough to beat recomputing (needs --l1 and --l2).", metavar="TOKENS"),
        L3_GBPS,
        RECOMPUTE,
        Opt("instances", ("--instances",), "Split the trace among N instances behind a router, "
            "for each N of this comma list (1,2,4,8): each instance with its own --l1 and --l2, "
            "one --l3 shared by all, or none; beside each, one instance with N times the "
            "capacity.", metavar="LIST"),
        Opt("routing", ("--routing",), "How the router assigns requests for --instances: "
            "round_robin and random exactly, cache_aware as sglang-router's policy at "
            "balanced load.", kind="choice", choices=ROUTINGS, default="round_robin"),
        Opt("sample_rate", ("--sample-rate",), "Sampled (SHARDS) mode at this rate, e.g. 0.1; "
            "default exact.", kind="float", min=0.0, max=1.0, metavar="RATE"),
        Opt("measured", ("--measured",), "CSV of measured tiers: capacity_tokens|capacity_gb, "
            "hit_rate[, ttft_ms]; checks the stop-at-plateau rule.", kind="path",
            metavar="FILE"),
        Opt("tolerance", ("--tolerance",), "Recommend the smallest capacity within this many "
            "percentage points of the best hit rate.", kind="float", min=0.0, max=100.0,
            default=1.0, metavar="POINTS"),
        MIN_GAIN,
        Opt("plot", ("--plot",), "Also draw the curve to FILE (.svg; .png needs matplotlib); "
            "with --instances, the hit rate against N.",
            kind="path", metavar="FILE"),
        *MODEL_OPTIONS,
    ),
)  # fmt: skip


def _geometry(model: str | None, config: str | None, tp: int | None, dtype: str):
    """The model's KV geometry (None without one); --tp is needed with a model here."""
    import sys

    from xputune.plan.models import load_model, resolve_model
    from xputune.userfiles import model_config

    named = model_config(model, Path(config) if config else None)
    if tp is None and (model or config):
        resolve_model(model, named)  # an unknown model is the first thing to say
        raise XputuneError(
            "give --tp N with --model/--config: this command reads no host, so the number "
            "of cards (the default elsewhere) is unknown"
        )
    geometry, warnings = load_model(model, named, tp or 1, dtype)
    for warning in warnings if geometry is not None else ():
        sys.stderr.write(f"warning: {warning}\n")
    return geometry


# --------------------------------------------------------------------------------- model


def model_cmd(req: Request) -> None:
    """Is a prefix hit worth loading from L2? Fit the load time, find the break-even length.

    Fits T(n) = a + b*n to measured all-hit loads (least squares, with residuals), compares it
    with recomputing (R(n) = floor + d*n, or a line fitted to measured recomputes) and prints
    the prefix length above which a hit saves time. The slope b times the measured bandwidth
    is the bytes moved per token: it should match the model's KV geometry, or the fit is
    measuring something else.

    Example:

        xputune model --seed --recompute-us-per-token 28
    """
    bandwidth, fit_a, fit_b, floor_ms, model, tp = (
        req.bandwidth,
        req.fit_a,
        req.fit_b,
        req.floor_ms,
        req.model,
        req.tp,
    )  # this runner rewrites them
    from xputune.plan.modelreport import SEED, model_report

    if req.seed:
        fits = not req.point and not req.points_file
        fit_a = SEED["fit_a"] if fit_a is None and fits else fit_a
        fit_b = SEED["fit_b"] if fit_b is None and fits else fit_b
        floor_ms = floor_ms or SEED["floor_ms"]
        bandwidth = bandwidth or SEED["bandwidth"]
        model = model or (None if req.config else SEED["model"])
        tp = tp or SEED["tp"]
    from xputune.userfiles import read_lines

    points = (
        (read_lines(Path(req.points_file), "points file"), req.points_file)
        if req.points_file
        else None
    )
    data = model_report(
        point=req.point, points_table=points, fit_a=fit_a, fit_b=fit_b,
        recompute_us=req.recompute_us, recompute_point=req.recompute_point, floor_ms=floor_ms,
        bandwidth=bandwidth, bytes_per_token=req.bytes_per_token, break_even_at=req.break_even_at,
        geometry=_geometry(model, req.config, tp, req.dtype),
    )  # fmt: skip
    if req.fmt is not Format.table:
        emit_data(data, req.fmt)
        return
    _render_model(data)


def _render_model(data: dict[str, Any]) -> None:
    c = console()
    fit = data["load_fit"]
    c.print(
        f"load  T(n) = {fit['a_ms']:.1f} ms + {fit['b_us_per_token']:.3f} us * n"
        f"   (L2-path fixed part {fit['l2_fixed_ms']:.1f} ms)"
    )
    for p in fit.get("points", []):
        c.print(
            f"      {p['tokens']:>10.0f} tokens  {p['ms']:>9.1f} ms  "
            f"residual {p['residual_ms']:+.2f} ms"
        )
    if "rms_residual_ms" in fit:
        r2 = fit["r_squared"]
        c.print(
            f"      rms residual {fit['rms_residual_ms']:.2f} ms"
            + (f", R^2 {r2:.4f}" if r2 is not None else "")
        )
    if "recompute_fit" in data:
        rf = data["recompute_fit"]
        c.print(f"recompute R(n) = {rf['a_ms']:.1f} ms + {rf['b_us_per_token']:.3f} us * n")
        be = data["break_even"]
        if be["always_pays"]:
            c.print("break-even: every hit pays (loading is cheaper at any length)")
        elif be["never_pays"]:
            c.print("break-even: never (recomputing a token is not slower than loading it)")
        else:
            c.print(f"break-even: {be['tokens']:.0f} tokens: only hits longer than this pay off")
    else:
        c.print("break-even: give --recompute-us-per-token or --recompute-point")
    if "recompute_us_per_token_for_break_even" in data:
        need = data["recompute_us_per_token_for_break_even"]
        c.print(
            f"for break-even at {need['at_tokens']:.0f} tokens, recompute must cost "
            f"{need['us_per_token']:.2f} us/token (floor {need['floor_ms']:.0f} ms)"
        )
    t = data.get("transfer", {})
    if "implied_bytes_per_token" in t:
        c.print(
            f"bytes/token implied by b at {t['bandwidth_gb_s']} GB/s: "
            f"{t['implied_bytes_per_token']:,.0f}"
        )
    if "bytes_per_token_per_rank" in t:
        label = f"{t.get('model', 'given')}" + (f" TP{t['tp']} {t['dtype']}" if "tp" in t else "")
        c.print(text(f"bytes/token of {label} (per rank): {t['bytes_per_token_per_rank']:,.0f}"))
        if "implied_bandwidth_gb_s" in t:
            c.print(f"bandwidth implied by b and the model: {t['implied_bandwidth_gb_s']:.2f} GB/s")
        if "implied_over_model" in t:
            c.print(f"implied / model bytes: {t['implied_over_model']:.3f}")


# --------------------------------------------------------------------------------- tiers


def tiers_cmd(req: Request) -> None:
    """How much cache capacity is worth having? The prefix hit-rate curve of a trace.

    Computes the exact token-weighted prefix-cache LRU hit rate at every capacity in one pass
    (capacity counts cache slots: a 512-token block takes 512 tokens even when partial), then
    reads off the knee, the smallest capacity within --tolerance of the best rate, and where
    the stop-at-plateau rule would have stopped. With --measured it checks the rule against a
    table of measured tiers; with --model it shows GB per rank.

    With --l1, --l2 and --l3 it splits the hits of an L1 + L2 + L3 hierarchy by tier (each
    tier holding what the ones above hold, as HiCache's write-through does), and with --model
    judges the L3 hits: an L3 fetch of n tokens beats recomputing them only above a break-even
    length (from --l3-gbps, default 10 GB/s per rank, and --recompute-us-per-token, default
    the field report's GLM-5 figure), so it counts the L3 hits that are that long.

    Examples:

        xputune tiers --trace mooncake_trace.jsonl --l1 200K --model glm-5 \\
            --plot c.svg
        xputune tiers --trace t.jsonl --l1 200K --l2 2M --l3 40M --model glm-5 \\
            --tp 8
    """
    if req.trace is None and req.measured is None:
        raise XputuneError("give --trace FILE, --measured FILE, or both")
    if req.plot is not None:
        from xputune.plan.plot import plot_kind
        from xputune.userfiles import check_writable

        plot_as = plot_kind(Path(req.plot).name)
        check_writable(Path(req.plot), "--plot")
    geometry = _geometry(req.model, req.config, req.tp, req.dtype)
    caps = [count(c, "--capacity") for c in req.capacity or []]
    l1_tokens = count(req.l1, "--l1") if req.l1 else None
    instances = _instances(req.instances, l1_tokens, req.l2, req.trace, req.sample_rate)
    tiers3 = (
        None
        if instances
        else _three_tier_sizes(l1_tokens, req.l2, req.l3, req.trace, req.sample_rate)
    )
    if tiers3 and geometry is None and (req.l3_gbps is not None or req.recompute_us is not None):
        raise XputuneError("--l3-gbps and --recompute-us-per-token need --model")
    from xputune.plan.tiersreport import three_tier_report, tiers_document
    from xputune.plan.traces import parse_measured_table

    curve, requests, table, three = None, 0, None, None
    if req.trace is not None:
        kept: list[Any] | None = [] if (tiers3 and geometry is not None) or instances else None
        curve, requests = _curve(
            Path(req.trace),
            req.trace_format,
            req.block_size,
            req.sample_rate,
            show_progress=req.fmt is Format.table,
            keep=kept,
        )
        if tiers3:
            three = three_tier_report(
                curve, *tiers3, geometry, kept or (), req.l3_gbps, req.recompute_us
            )
    if req.measured is not None:
        from xputune.userfiles import read_lines

        table = parse_measured_table(read_lines(Path(req.measured), "measured table"), req.measured)
    data = tiers_document(
        trace_file=req.trace,
        curve=curve,
        requests=requests,
        measured=table,
        capacities=caps,
        tolerance=req.tolerance / 100,
        min_gain=req.min_gain / 100,
        l1_tokens=l1_tokens,
        geometry=geometry,
        three_tiers=three,
    )
    if instances:
        from xputune.plan.cluster import cluster_report
        from xputune.plan.hitrate import trace_from_batches

        l3_tokens = count(req.l3, "--l3") if req.l3 else None
        data["cluster"] = cluster_report(
            trace_from_batches(kept or []), instances, req.routing, l1_tokens,
            count(req.l2, "--l2"), l3_tokens,
        )  # fmt: skip
    from xputune.plan.plot import cluster_chart, tiers_chart

    chart = cluster_chart(data["cluster"]) if instances else tiers_chart(data, curve)
    if req.plot is not None:
        from xputune.plan.plot import plot_bytes
        from xputune.userfiles import write_output

        write_output(Path(req.plot), plot_bytes(chart, plot_as), "plot")
        data["plot"] = req.plot
    if req.fmt is not Format.table:
        emit_data(data, req.fmt)
        return
    _render_tiers(data, chart)


def _instances(
    text: str | None, l1_tokens: int | None, l2: str | None, trace: str | None,
    sample_rate: float | None,
) -> list[int]:  # fmt: skip
    """The instance counts of --instances (none: []); one line for what it needs."""
    if text is None:
        return []
    from xputune.plan.cluster import parse_counts

    counts = parse_counts(text)
    if l1_tokens is None or l2 is None:
        raise XputuneError("--instances needs --l1 and --l2 (each instance's own tiers)")
    if trace is None:
        raise XputuneError("--instances splits a trace: give --trace FILE")
    if sample_rate is not None and sample_rate < 1.0:
        raise XputuneError("--instances needs the exact curve: leave --sample-rate out")
    return counts


def _three_tier_sizes(
    l1_tokens: int | None, l2: str | None, l3: str | None, trace: str | None,
    sample_rate: float | None,
) -> tuple[int, int, int] | None:  # fmt: skip
    """(L1, L2, L3) in tokens when --l3 asks for the three-tier split; one line when not all
    three are there."""
    if l3 is None:
        if l2 is not None:
            raise XputuneError("--l2 is for the three-tier split: give --l3 TOKENS too")
        return None
    if l1_tokens is None or l2 is None:
        raise XputuneError("--l3 needs --l1 and --l2 (the tiers above it)")
    if trace is None:
        raise XputuneError("--l3 splits a trace's hits: give --trace FILE")
    if sample_rate is not None and sample_rate < 1.0:
        raise XputuneError("--l3 needs the exact curve: leave --sample-rate out")
    return l1_tokens, count(l2, "--l2"), count(l3, "--l3")


def _curve(
    path: Path,
    trace_format: TraceFormat,
    block_size: int | None,
    sample_rate: float | None,
    show_progress: bool,
    keep: list[Any] | None = None,
):
    """(curve, requests) of the trace; `keep` collects its batches too (for a second look)."""
    from xputune.plan.hitrate import curve_from_batches, sampled_curve_stream
    from xputune.plan.traces import TraceReader
    from xputune.userfiles import open_trace

    if sample_rate is not None and sample_rate <= 0:
        raise XputuneError("--sample-rate must be > 0")
    sampled = sample_rate is not None and sample_rate < 1.0
    try:
        size = path.stat().st_size
    except OSError:
        size = None  # open_trace says why in one line
    with progress(size, f"reading {path.name}", enabled=show_progress) as advance:
        stream = open_trace(path, advance)  # a corrupt compressed stream: one line
        reader = TraceReader(stream, trace_format.value, block_size, source=str(path))
        with stream:
            if sampled:
                curve = sampled_curve_stream(reader, sample_rate)
            else:
                batches = reader if keep is None else _tee(reader, keep)
                curve = curve_from_batches(batches, reader.block)
    if curve.accesses == 0:
        raise XputuneError(f"{path}: the trace has no blocks")
    return curve, reader.requests


def _tee(batches: Any, keep: list[Any]) -> Any:
    for batch in batches:
        keep.append(batch)
        yield batch


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2%}"


def _render_tiers(data: dict[str, Any], chart) -> None:
    from rich.table import Table

    from xputune.plan.plot import human, text_plot

    c = console()
    t = data.get("trace")
    if t:
        mode = "exact" if t["mode"] == "exact" else f"sampled at {t['sample_rate']:g}"
        c.print(text(f"trace {t['file']}:"), soft_wrap=True)  # typed back: never folded
        c.print(
            f"  {t['requests']:,} requests, {t['accesses']:,} block accesses, "
            f"{t['distinct_blocks']:,} distinct blocks of {t['block_size']} tokens ({mode})"
        )
        if t["chain_violations"]:
            c.print(
                f"[yellow]warning: {t['chain_violations']:,} block ids reappear after a "
                "different parent: ids are not prefix-chained[/yellow]"
            )
        gb = "gb_per_rank" in (data["curve"][0] if data["curve"] else {})
        table = Table(title="L1 prefix hit rate")
        table.add_column("capacity (tokens)", justify="right")
        if gb:
            table.add_column("GB/rank", justify="right")
        table.add_column("hit rate", justify="right")
        tiers = {r["l2_capacity_tokens"]: r for r in data.get("tiers", [])}
        if tiers:
            table.add_column("L1+L2 write-through", justify="right")
            table.add_column("L1+L2 exclusive", justify="right")
        for row in data["curve"]:
            cells = [f"{row['capacity_tokens']:,}"]
            if gb:
                cells.append(f"{row['gb_per_rank']:.2f}")
            cells.append(_pct(row["hit_rate"]))
            if tiers:
                tr = tiers[row["capacity_tokens"]]
                cells += [_pct(tr["write_through_hit_rate"]), _pct(tr["exclusive_hit_rate"])]
            table.add_row(*cells)
        c.print(table)
        if tiers:
            c.print(
                f"L1 = {data['l1_tokens']:,} tokens alone: "
                f"{_pct(next(iter(tiers.values()))['l1_hit_rate'])}"
            )
        c.print(
            f"best possible {_pct(data['max_hit_rate'])}, reached at "
            f"{human(data['saturation_tokens'])} tokens"
        )
        if data.get("knee"):
            c.print(
                f"knee: {human(data['knee']['capacity_tokens'])} tokens, "
                f"{_pct(data['knee']['hit_rate'])}"
            )
        if data.get("recommendation"):
            r = data["recommendation"]
            c.print(
                f"recommended: {human(r['capacity_tokens'])} tokens, {_pct(r['hit_rate'])} "
                f"({r['rule']})"
            )
        if data.get("three_tiers"):
            _render_three_tiers(c, data["three_tiers"])
        p = data.get("plateau_rule")
        if p and p["disagrees"]:
            c.print(
                f"[yellow]stop-at-plateau would stop at {human(p['stops_at_tokens'])} "
                f"tokens and miss {p['missed_hit_rate']:.2%} of hit rate; the curve rises "
                f"again at {', '.join(human(x) for x in p['later_rises_tokens']) or '-'}"
                "[/yellow]"
            )
    m = data.get("measured")
    if m:
        p = m["plateau_rule"]
        c.print(
            f"measured tiers ({m['unit']}): stop-at-plateau stops at {p['stops_at']:g}; "
            f"the full table prefers {p['full_table_prefers']:g} ({p['chosen_by']})"
        )
        if p["disagrees"]:
            c.print(
                f"[yellow]they disagree: later tiers {p['later_rises']} add "
                f"{p['missed_hit_rate']:.2%} of hit rate after the plateau[/yellow]"
            )
    if data.get("cluster"):
        _render_cluster(c, data["cluster"])
    if chart.series:
        c.print(text_lines(text_plot(chart).split("\n")))
    if data.get("plot"):
        c.print(text(f"plot written to {data['plot']}"))


def _render_cluster(c: Any, cluster: dict[str, Any]) -> None:
    """A row per instance count: each tier's share, what private caches reach, the bound."""
    from xputune.cli.output import ID, new_table, print_fitted
    from xputune.plan.plot import human

    l3 = cluster["l3_tokens"]
    title = (
        f"{cluster['routing']} over N instances, each L1 {human(cluster['l1_tokens'])} + L2 "
        f"{human(cluster['l2_tokens'])} tokens, "
        + (f"one shared L3 of {human(l3)}" if l3 else "no L3")
    )
    shared = ["L3 (shared)", "private only"] if l3 else []
    table = new_table(title, ["N", "L1", "L2", *shared, "total", "bound (1 x N)", ("requests", ID)])
    for row in cluster["points"]:
        lo, hi = row["requests_min"], row["requests_max"]
        cells = [str(row["instances"]), _pct(row["device_hit_rate"]), _pct(row["host_hit_rate"])]
        if l3:
            cells += [_pct(row["storage_hit_rate"]), _pct(row["private_hit_rate"])]
        cells += [
            _pct(row["total_hit_rate"]), _pct(row["bound_hit_rate"]),
            f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}",
        ]  # fmt: skip
        table.add_row(*cells)
    print_fitted(c, table)
    note = "bound: one instance with N x L1 and N x L2" + (" and the same L3" if l3 else "")
    if cluster["cache_threshold"] is not None:
        note += (
            f"; cache_aware modelled at balanced load (threshold {cluster['cache_threshold']:g}"
            ", load balancing not modelled: plan/cluster.py)"
        )
    c.print(text(note))


def _render_three_tiers(c: Any, t: dict[str, Any]) -> None:
    from xputune.plan.plot import human

    c.print(
        f"L1 {human(t['l1_tokens'])} + L2 {human(t['l2_tokens'])} + L3 "
        f"{human(t['l3_tokens'])} tokens: {_pct(t['total_hit_rate'])} of input tokens hit "
        f"(device {_pct(t['device_hit_rate'])}, host {_pct(t['host_hit_rate'])}, storage "
        f"{_pct(t['storage_hit_rate'])})"
    )
    be, runs = t["break_even"], t["storage_runs"]
    if be is None:
        return
    if be["never_pays"]:
        c.print(
            text(
                f"an L3 hit never beats recomputing at {be['l3_gb_s_per_rank']:g} GB/s per "
                f"rank ({be['l3_source']}) and {be['recompute_us_per_token']:g} us/token: "
                "L3 does not pay here"
            )
        )
        return
    c.print(
        text(
            f"an L3 hit pays above {be['tokens']:,} tokens ({be['l3_gb_s_per_rank']:g} GB/s "
            f"per rank, {be['l3_source']}; recompute {be['recompute_us_per_token']:g} "
            "us/token)"
        )
    )
    if runs and runs["tokens"]:
        c.print(
            f"of this trace's L3 hits, {_pct(runs['paying_share'])} of the tokens "
            f"({runs['paying_requests']:,} of {runs['requests']:,} requests) come in runs "
            "that long: they pay; the rest cost more than recomputing them"
        )
