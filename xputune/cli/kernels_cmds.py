"""kernels (plan, build, selftest) and bench (copy): the KV copy kernels from the command line.

`bench_app` is the `bench` command group. Other command families add their own benchmarks to
it instead of creating a second group, e.g. in cli/bench_host.py:

    from xputune.cli.kernels_cmds import bench_app

    @bench_app.command("host")
    def bench_host(...): ...

register() adds both groups to the application; commands added to bench_app before the CLI
runs appear under `xputune bench`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from xputune.cli.checks import (
    MAX_BLOCK,
    MAX_ITEM,
    MAX_LAYERS,
    MAX_RUNS,
    MAX_SEED,
    MAX_TOKENS,
)
from xputune.cli.common import Format, FormatOpt, console, emit_data

kernels_app = typer.Typer(
    name="kernels",
    help="Plan, build and check the KV copy kernels (SGLang kvcacheio operators, any vendor).\n\n"
    "The number of DMA submissions decides whether a layer's transfer reaches sequential "
    "bandwidth; these commands show that count per layout, build the host/CUDA/XPU backends, "
    "and check every operator against a numpy reference.",
    no_args_is_help=True,
)
bench_app = typer.Typer(
    name="bench",
    help="Measure transfer paths, each figure side by side with a plain copy of the same bytes.",
    no_args_is_help=True,
)


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


LayoutOpt = Annotated[
    list[HostLayout] | None,
    typer.Option("--layout", "-l", help="Host layout (repeat for several; default: all three)."),
]
TokensOpt = Annotated[
    int, typer.Option("--tokens", min=0, max=MAX_TOKENS, help="Tokens moved per layer.")
]
PageOpt = Annotated[int, typer.Option("--page-size", min=1, max=MAX_BLOCK, help="Tokens per page.")]
ItemOpt = Annotated[
    int,
    typer.Option(
        "--item-size", min=1, max=MAX_ITEM, help="Bytes of one token of one layer (MLA: 1152)."
    ),
]
PatternOpt = Annotated[
    Pattern,
    typer.Option(
        "--pattern",
        help="Host slots: contiguous, pages (whole pages in random order, as a paged allocator "
        "gives them) or random (every slot anywhere).",
    ),
]


def register(app: typer.Typer) -> None:
    app.add_typer(kernels_app, name="kernels")
    app.add_typer(bench_app, name="bench")


@kernels_app.command("plan")
def plan_cmd(
    layout: LayoutOpt = None,
    tokens: TokensOpt = 32768,
    page_size: PageOpt = 64,
    layers: Annotated[
        int, typer.Option("--layers", min=1, max=MAX_LAYERS, help="Model layers moved.")
    ] = 78,
    item_size: ItemOpt = 1152,
    pattern: PatternOpt = Pattern.contiguous,
    direction: Annotated[
        Direction, typer.Option("--direction", help="d2h (write-back) or h2d (load).")
    ] = Direction.d2h,
    fmt: FormatOpt = Format.table,
) -> None:
    """Count the copy segments (DMA submissions) a transfer costs in each host layout.

    The device side is SGLang's pool of per-layer buffers; the host side is the layout. A
    segment is a maximal run where both index sequences step by one, split where the layout is
    not contiguous; page_first_direct never merges across pages.

    Example (the field report's case: 32K tokens, page 64, 78 layers, MLA):

        xputune kernels plan --tokens 32768 --page-size 64 --layers 78 --item-size 1152

    prints 78 segments for layer_first and 39,936 for page_first_direct.
    """
    from xputune.kernels.planner import HOST_LAYOUTS, host_transfer_plan

    chosen = [x.value for x in layout] if layout else list(HOST_LAYOUTS)
    rows: list[dict[str, Any]] = []
    for name in chosen:
        segs = host_transfer_plan(
            name, tokens, page_size=page_size, layers=layers, item_size=item_size,
            pattern=pattern.value, direction=direction.value,
        )  # fmt: skip
        rows.append({"layout": name, **segs.summary()})
    base = host_transfer_plan(
        "layer_first", tokens, page_size=page_size, layers=layers, item_size=item_size,
        pattern=pattern.value, direction=direction.value,
    ).count  # fmt: skip
    for r in rows:
        r["vs_layer_first"] = round(r["segments"] / base, 1) if base else None
    if fmt is not Format.table:
        emit_data(
            {
                "schema_version": 1,
                "tokens": tokens,
                "page_size": page_size,
                "layers": layers,
                "item_size": item_size,
                "pattern": pattern.value,
                "direction": direction.value,
                "layouts": rows,
            },
            fmt,
        )
        return
    from rich.table import Table

    table = Table(
        title=f"{tokens} tokens x {layers} layers, page {page_size}, {item_size} B/token/layer, "
        f"{direction.value}, host slots {pattern.value}"
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


@kernels_app.command("build")
def build_cmd(
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if cached.")] = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Build the copy backends into the per-user cache (~/.cache/xputune/kernels).

    An installed xputune comes with host, stackdist (tiers) and the XPU backend against its
    test runtime built with the wheel: they are listed as installed, and --force leaves them
    be. A checkout builds them here (a C and a C++ compiler). CUDA is built when nvcc is found
    (no GPU needed to build); XPU for real when Kunlunxin's XRE headers and libxpurt.so are
    found (set XRE_HOME). Operators also build what they need at first use.

    Example: xputune kernels build --force
    """
    from xputune.kernels.build import build_all

    outcomes = build_all(force=force)
    rows = [{"backend": o.title, "status": o.status, "detail": o.detail} for o in outcomes]
    failed = any(o.status == "failed" for o in outcomes)
    if fmt is not Format.table:
        emit_data({"schema_version": 1, "backends": rows}, fmt)
    else:
        from rich.table import Table

        from xputune.cli.output import add_row

        table = Table(title="native libraries (copy backends, stackdist)")
        for col in ("backend", "status", "detail"):
            table.add_column(col)
        for r in rows:  # a detail is a path or a compiler's message: data
            add_row(table, r["backend"], r["status"], r["detail"])
        console().print(table)
    if failed:
        raise typer.Exit(1)


@kernels_app.command("selftest")
def selftest_cmd(
    rounds: Annotated[
        int,
        typer.Option(
            "--rounds", min=1, max=MAX_RUNS, help="Random cases per operator and direction."
        ),
    ] = 3,
    seed: Annotated[
        int, typer.Option("--seed", min=0, max=MAX_SEED, help="Seed of the random cases.")
    ] = 0,
    fmt: FormatOpt = Format.table,
) -> None:
    """Check every copy operator against a numpy reference on this machine's devices.

    Runs each of the six operators in both directions on random geometries and indices: on
    host numpy arrays, on the XPU backend over its test runtime, on torch CPU tensors when
    torch is installed, and on the torch device (CUDA or Kunlunxin) when one is visible.
    Exits 1 if any output byte differs.

    Example: xputune kernels selftest --rounds 10
    """
    from xputune.kernels import selftest

    outcomes = selftest.run(rounds=rounds, seed=seed)
    ok = all(o.ok for o in outcomes)
    if fmt is not Format.table:
        emit_data(
            {"schema_version": 1, "ok": ok, "results": [vars(o) for o in outcomes]},
            fmt,
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
    if not ok:
        raise typer.Exit(1)


@bench_app.command("copy")
def bench_copy_cmd(
    layout: LayoutOpt = None,
    direction: Annotated[
        list[Direction] | None,
        typer.Option("--direction", "-d", help="h2d and/or d2h (default: both)."),
    ] = None,
    tokens: TokensOpt = 32768,
    layers: Annotated[
        int, typer.Option("--layers", min=1, max=MAX_LAYERS, help="Layers moved per run.")
    ] = 1,
    pool_layers: Annotated[
        int,
        typer.Option(
            "--pool-layers", min=1, max=MAX_LAYERS, help="Layers the host pool holds (strides)."
        ),
    ] = 4,
    item_size: ItemOpt = 1152,
    page_size: PageOpt = 64,
    pattern: PatternOpt = Pattern.contiguous,
    repeats: Annotated[
        int, typer.Option("--repeats", min=1, max=MAX_RUNS, help="Timed runs per case.")
    ] = 9,
    device: Annotated[
        BenchDevice,
        typer.Option(
            "--device",
            help="host: both sides in host memory, host backend, baseline one memcpy. torch: the "
            "torch device (CUDA or Kunlunxin) against pinned host memory, baseline one copy_.",
        ),
    ] = BenchDevice.host,
    threads: Annotated[
        int,
        typer.Option(
            "--threads", min=0, max=MAX_RUNS, help="Host backend threads (0 = automatic)."
        ),
    ] = 0,
    fmt: FormatOpt = Format.table,
) -> None:
    """Copy bandwidth per host layout and direction next to one plain copy of the same bytes.

    Each case runs the operator SGLang would call (layer_first: transfer_kv_per_layer_mla /
    transfer_kv_all_layer_mla; page_first_direct: the direct_pf_lf / direct_lf_pf pair;
    page_first: its planned segments, as upstream has no direct operator for it), alternating with
    one memcpy (or device copy) of the same total bytes. GB/s figures are the best of
    --repeats; the ratio is the median of back-to-back pairs, robust to a busy machine.

    Example (the targets, one thread: layer_first, one layer of 32K MLA tokens, >= 0.97 of
    memcpy; page_first >= 0.7):

        xputune bench copy --tokens 32768 --layers 1 --item-size 1152 --threads 1
    """
    from xputune.kernels import bench
    from xputune.kernels.planner import HOST_LAYOUTS

    layouts = tuple(x.value for x in layout) if layout else HOST_LAYOUTS
    directions = tuple(x.value for x in direction) if direction else ("h2d", "d2h")
    total = len(layouts) * len(directions) * repeats
    bench.check_args(layers, pool_layers)
    from rich.progress import Progress

    err = _stderr_console()
    with Progress(console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("copy benchmark", total=total)
        backend, rows = bench.run(
            tokens=tokens, layers=layers, pool_layers=pool_layers, item_size=item_size,
            page_size=page_size, pattern=pattern.value, repeats=repeats, layouts=layouts,
            directions=directions, device=device.value, threads=threads,
            progress=lambda: progress.advance(task),
        )  # fmt: skip
    if fmt is not Format.table:
        emit_data(
            {
                "schema_version": 1,
                "backend": backend,
                "tokens": tokens,
                "layers": layers,
                "pool_layers": pool_layers,
                "item_size": item_size,
                "page_size": page_size,
                "pattern": pattern.value,
                "repeats": repeats,
                "results": bench.rows_as_dicts(rows),
            },
            fmt,
        )
        return
    from rich.table import Table

    base_name = "memcpy" if backend == "host" else "plain copy"
    table = Table(
        title=f"{backend} backend: {tokens} tokens x {layers} layer(s), {item_size} B/token, "
        f"page {page_size}, host slots {pattern.value} (best of {repeats})",
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
