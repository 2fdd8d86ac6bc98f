"""kernels (plan, build, selftest) and bench copy: the KV copy kernels from the command line
(bench host: cli/bench_host_cmds.py)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from xputune.cli import exits
from xputune.cli.options import (
    FORMAT,
    MAX_BLOCK,
    MAX_ITEM,
    MAX_LAYERS,
    MAX_RUNS,
    MAX_SEED,
    MAX_TOKENS,
)
from xputune.cli.output import Format, console, emit_data
from xputune.cli.spec import Command, Opt, Request


class HostLayout(StrEnum):
    layer_first = "layer_first"
    page_first = "page_first"
    page_first_direct = "page_first_direct"


class Pattern(StrEnum):
    contiguous = "contiguous"
    pages = "pages"
    random = "random"


class Direction(StrEnum):
    h2d = "h2d"
    d2h = "d2h"


class BenchDevice(StrEnum):
    host = "host"
    torch = "torch"


def _choice(dest: str, names: tuple[str, ...], help: str, enum: type[StrEnum], **kw: Any):
    return Opt(dest, names, help, kind="choice", choices=tuple(e.value for e in enum), cast=enum,
               **kw)  # fmt: skip


LAYOUT = _choice("layout", ("--layout", "-l"), "Host layout (repeat for several; default: all "
                 "three).", HostLayout, multiple=True)  # fmt: skip
TOKENS = Opt("tokens", ("--tokens",), "Tokens moved per layer.", kind="int", min=0,
             max=MAX_TOKENS, default=32768)  # fmt: skip
PAGE = Opt("page_size", ("--page-size",), "Tokens per page.", kind="int", min=1, max=MAX_BLOCK,
           default=64)  # fmt: skip
ITEM = Opt("item_size", ("--item-size",), "Bytes of one token of one layer (MLA: 1152).",
           kind="int", min=1, max=MAX_ITEM, default=1152)  # fmt: skip
PATTERN = _choice("pattern", ("--pattern",), "Host slots: contiguous, pages (whole pages in "
                  "random order, as a paged allocator gives them) or random (every slot "
                  "anywhere).", Pattern, default=Pattern.contiguous)  # fmt: skip

KERNELS_PLAN = Command(
    ("kernels", "plan"),
    "xputune.cli.kernels_cmds:plan_cmd",
    (
        LAYOUT, TOKENS, PAGE,
        Opt("layers", ("--layers",), "Model layers moved.", kind="int", min=1, max=MAX_LAYERS,
            default=78),
        ITEM, PATTERN,
        _choice("direction", ("--direction",), "d2h (write-back) or h2d (load).", Direction,
                default=Direction.d2h),
        FORMAT,
    ),
)  # fmt: skip
KERNELS_BUILD = Command(
    ("kernels", "build"),
    "xputune.cli.kernels_cmds:build_cmd",
    (Opt("force", ("--force",), "Rebuild even if cached.", kind="flag", default=False), FORMAT),
    exits=(exits.DIFFERENCE,),
)
KERNELS_SELFTEST = Command(
    ("kernels", "selftest"),
    "xputune.cli.kernels_cmds:selftest_cmd",
    (
        Opt("rounds", ("--rounds",), "Random cases per operator and direction.", kind="int",
            min=1, max=MAX_RUNS, default=3),
        Opt("seed", ("--seed",), "Seed of the random cases.", kind="int", min=0, max=MAX_SEED,
            default=0),
        FORMAT,
    ),
    exits=(exits.DIFFERENCE,),
)  # fmt: skip
BENCH_COPY = Command(
    ("bench", "copy"),
    "xputune.cli.kernels_cmds:bench_copy_cmd",
    (
        LAYOUT,
        _choice("direction", ("--direction", "-d"), "h2d and/or d2h (default: both).",
                Direction, multiple=True),
        TOKENS,
        Opt("layers", ("--layers",), "Layers moved per run.", kind="int", min=1,
            max=MAX_LAYERS, default=1),
        Opt("pool_layers", ("--pool-layers",), "Layers the host pool holds (strides).",
            kind="int", min=1, max=MAX_LAYERS, default=4),
        ITEM, PAGE, PATTERN,
        Opt("repeats", ("--repeats",), "Timed runs per case.", kind="int", min=1,
            max=MAX_RUNS, default=9),
        _choice("device", ("--device",), "host: both sides in host memory, host backend, "
                "baseline one memcpy. torch: the torch device (CUDA or Kunlunxin) against "
                "pinned host memory, baseline one copy_.", BenchDevice,
                default=BenchDevice.host),
        Opt("threads", ("--threads",), "Host backend threads (0 = automatic).", kind="int",
            min=0, max=MAX_RUNS, default=0),
        FORMAT,
    ),
)  # fmt: skip


def plan_cmd(req: Request) -> None:
    """Count the copy segments (DMA submissions) a transfer costs in each host layout.

    The device side is SGLang's pool of per-layer buffers; the host side is the layout. A
    segment is a maximal run where both index sequences step by one, split where the layout is
    not contiguous; page_first_direct never merges across pages.

    Example (the field report's case: 32K tokens, page 64, 78 layers, MLA):

        xputune kernels plan --tokens 32768 --page-size 64 --layers 78 \\
            --item-size 1152

    prints 78 segments for layer_first and 39,936 for page_first_direct.
    """
    from xputune.kernels.planner import HOST_LAYOUTS, host_transfer_plan

    chosen = [x.value for x in req.layout] if req.layout else list(HOST_LAYOUTS)
    rows: list[dict[str, Any]] = []
    for name in chosen:
        segs = host_transfer_plan(
            name, req.tokens, page_size=req.page_size, layers=req.layers, item_size=req.item_size,
            pattern=req.pattern.value, direction=req.direction.value,
        )  # fmt: skip
        rows.append({"layout": name, **segs.summary()})
    base = host_transfer_plan(
        "layer_first",
        req.tokens,
        page_size=req.page_size,
        layers=req.layers,
        item_size=req.item_size,
        pattern=req.pattern.value,
        direction=req.direction.value,
    ).count
    for r in rows:
        r["vs_layer_first"] = round(r["segments"] / base, 1) if base else None
    if req.fmt is not Format.table:
        emit_data(
            {
                "schema_version": 1,
                "tokens": req.tokens,
                "page_size": req.page_size,
                "layers": req.layers,
                "item_size": req.item_size,
                "pattern": req.pattern.value,
                "direction": req.direction.value,
                "layouts": rows,
            },
            req.fmt,
        )
        return
    from rich.table import Table

    table = Table(
        title=f"{req.tokens} tokens x {req.layers} layers, page {req.page_size}, "
        f"{req.item_size} B/token/layer, {req.direction.value}, host slots {req.pattern.value}"
    )
    table.add_column("layout", no_wrap=True)
    for col in ("segments", "mean segment", "largest segment", "vs layer_first"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r["layout"], f"{r['segments']:,}", _size(r["mean_segment_bytes"]),
            _size(r["max_segment_bytes"]),
            "-" if r["vs_layer_first"] is None else f"{r['vs_layer_first']:,g}x",
        )  # fmt: skip
    console().print(table)


def build_cmd(req: Request) -> int:
    """Build the copy backends into the per-user cache (XPUTUNE_CACHE_DIR, else
    ~/.cache/xputune/kernels, /var/cache/xputune/kernels for root).

    An installed xputune comes with host, stackdist (tiers) and the XPU backend against its
    test runtime built with the wheel: they are listed as installed, and --force leaves them
    be. A checkout builds them here (a C and a C++ compiler). CUDA is built when nvcc is found
    (no GPU needed to build); XPU for real when Kunlunxin's XRE headers and libxpurt.so are
    found (set XRE_HOME). Operators also build what they need at first use.

    Example:

        xputune kernels build --force
    """
    from xputune.kernels.build import build_all

    outcomes = build_all(force=req.force)
    rows = [{"backend": o.title, "status": o.status, "detail": o.detail} for o in outcomes]
    failed = any(o.status == "failed" for o in outcomes)
    if req.fmt is not Format.table:
        emit_data({"schema_version": 1, "backends": rows}, req.fmt)
    else:
        from rich.table import Table

        from xputune.cli.output import add_row

        table = Table(title="native libraries (copy backends, stackdist)")
        for col in ("backend", "status", "detail"):
            table.add_column(col)
        for r in rows:  # a detail is a path or a compiler's message: data
            add_row(table, r["backend"], r["status"], r["detail"])
        console().print(table)
    return exits.DIFFERENCE if failed else exits.OK


def selftest_cmd(req: Request) -> int:
    """Check every copy operator against a numpy reference on this machine's devices.

    Runs each operator in both directions on random geometries and indices: on
    host numpy arrays, on the XPU backend over its test runtime, on torch CPU tensors when
    torch is installed, and on the torch device (CUDA or Kunlunxin) when one is visible.
    Exits 1 if any output byte differs.

    Example:

        xputune kernels selftest --rounds 10
    """
    from xputune.kernels import selftest

    outcomes = selftest.run(rounds=req.rounds, seed=req.seed)
    ok = all(o.ok for o in outcomes)
    if req.fmt is not Format.table:
        emit_data(
            {"schema_version": 1, "ok": ok, "results": [vars(o) for o in outcomes]},
            req.fmt,
        )
    else:
        from rich.table import Table
        from rich.text import Text

        from xputune.cli.output import add_row

        table = Table(title="copy operators vs numpy reference")
        for col in ("placement", "operator", "dir", "result", "last case"):
            table.add_column(col)
        for o in outcomes:
            result = Text("ok", "green") if o.ok else Text("FAILED", "red")
            if o.detail.startswith("skipped"):
                result = Text("skipped", "yellow")
            add_row(table, o.placement, o.operator, o.direction, result, o.detail)
        console().print(table)
    return exits.OK if ok else exits.DIFFERENCE


def bench_copy_cmd(req: Request) -> None:
    """Copy bandwidth per host layout and direction next to one plain copy of the same bytes.

    Each case runs the operator SGLang would call (layer_first: transfer_kv_per_layer_mla /
    transfer_kv_all_layer_mla; page_first_direct: the direct_pf_lf / direct_lf_pf pair;
    page_first: its planned segments, as upstream has no direct operator for it), alternating with
    one memcpy (or device copy) of the same total bytes. GB/s figures are the best of
    --repeats; the ratio is the median of back-to-back pairs, robust to a busy machine.

    Example (the targets, one thread: layer_first, one layer of 32K MLA tokens, >= 0.97 of
    memcpy; page_first >= 0.9):

        xputune bench copy --tokens 32768 --layers 1 --item-size 1152 --threads 1
    """
    from xputune.kernels import bench
    from xputune.kernels.planner import HOST_LAYOUTS

    layouts = tuple(x.value for x in req.layout) if req.layout else HOST_LAYOUTS
    directions = tuple(x.value for x in req.direction) if req.direction else ("h2d", "d2h")
    total = len(layouts) * len(directions) * req.repeats
    bench.check_args(req.layers, req.pool_layers)
    from rich.progress import Progress

    err = _stderr_console()
    with Progress(console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("copy benchmark", total=total)
        backend, rows = bench.run(
            tokens=req.tokens,
            layers=req.layers,
            pool_layers=req.pool_layers,
            item_size=req.item_size,
            page_size=req.page_size,
            pattern=req.pattern.value,
            repeats=req.repeats,
            layouts=layouts,
            directions=directions,
            device=req.device.value,
            threads=req.threads,
            progress=lambda: progress.advance(task),
        )
    if req.fmt is not Format.table:
        emit_data(
            {
                "schema_version": 1,
                "backend": backend,
                "tokens": req.tokens,
                "layers": req.layers,
                "pool_layers": req.pool_layers,
                "item_size": req.item_size,
                "page_size": req.page_size,
                "pattern": req.pattern.value,
                "repeats": req.repeats,
                "results": bench.rows_as_dicts(rows),
            },
            req.fmt,
        )
        return
    from rich.table import Table

    base_name = "memcpy" if backend == "host" else "plain copy"
    table = Table(
        title=f"{backend} backend: {req.tokens} tokens x {req.layers} layer(s), "
        f"{req.item_size} B/token, page {req.page_size}, host slots {req.pattern.value} "
        f"(best of {req.repeats})",
        caption="GB/s: best run; ratio: median of back-to-back pairs (baseline time / case "
        "time). operator: transfer_kv_<name>; page_first has no direct operator upstream, so "
        "its planned segments are copied",
    )
    table.add_column("layout", no_wrap=True)
    table.add_column("dir", no_wrap=True)
    for col in ("segments", "GB/s", f"{base_name} GB/s", "ratio"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("operator")
    for r in rows:
        color = "green" if r.ratio >= 0.9 else ("yellow" if r.ratio >= 0.5 else "red")
        table.add_row(
            r.layout, r.direction, f"{r.segments:,}", f"{r.gbps:.2f}", f"{r.baseline_gbps:.2f}",
            f"[{color}]{r.ratio:.2f}[/]", r.operator,
        )  # fmt: skip
    console().print(table)


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def _size(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:,.0f} {unit}" if unit == "B" else f"{nbytes:,.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes}"
