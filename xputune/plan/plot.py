"""Hit-rate curves drawn as text (for the terminal) and as SVG (for reports), no plot library.

Capacity runs on a log axis: prefix curves span block-size to terabytes, and their plateaus
and late rises only show on a log scale. Functions return strings; callers print or save.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from xputune.errors import XputuneError


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[float, float]]  # (capacity tokens, hit rate 0..1), capacity > 0
    marker: str = "*"  # text glyph
    color: str = "#1f77b4"
    line: bool = True  # SVG: join points (a curve) or not (measured tiers)


@dataclass(frozen=True)
class Mark:
    label: str
    capacity: float
    hit_rate: float
    glyph: str = "K"
    color: str = "#d62728"


@dataclass(frozen=True)
class Chart:
    series: Sequence[Series]
    marks: Sequence[Mark] = field(default_factory=tuple)
    title: str = "prefix hit rate vs capacity"
    unit: str = "tokens"
    axis: str = "capacity"
    ticks: Sequence[float] = ()  # x values to label (default: the ends, or each decade)

    @property
    def x_label(self) -> str:
        return f"{self.axis} ({self.unit}, log scale)" if self.unit else f"{self.axis} (log scale)"


def _bounds(chart: Chart) -> tuple[float, float]:
    xs = [x for s in chart.series for x, _ in s.points if x > 0]
    xs += [m.capacity for m in chart.marks if m.capacity > 0]
    if not xs:
        return 1.0, 10.0
    lo, hi = min(xs), max(xs)
    return (lo, hi * 10) if lo == hi else (lo, hi)


def human(value: float) -> str:
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if value >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}"


def text_plot(chart: Chart, width: int = 64, height: int = 16) -> str:
    lo, hi = _bounds(chart)
    span = math.log(hi / lo)
    grid = [[" "] * width for _ in range(height)]

    def col(x: float) -> int:
        return min(width - 1, max(0, round(math.log(x / lo) / span * (width - 1))))

    def row(y: float) -> int:
        return min(height - 1, max(0, height - 1 - round(y * (height - 1))))

    for s in chart.series:
        for x, y in s.points:
            if x > 0:
                grid[row(y)][col(x)] = s.marker
    for m in chart.marks:
        if m.capacity > 0:
            grid[row(m.hit_rate)][col(m.capacity)] = m.glyph
    lines = [chart.title]
    for i, cells in enumerate(grid):
        y = 1 - i / (height - 1)
        label = f"{y:4.0%}" if i % 3 == 0 or i == height - 1 else "    "
        lines.append(f"{label} |{''.join(cells)}")
    lines.append("     +" + "-" * width)
    lines.append("      " + _tick_line(chart, lo, hi, col, width))
    lines.append(f"      {chart.x_label}")
    legend = [f"{s.marker} {s.label}" for s in chart.series]
    legend += [
        f"{m.glyph} {m.label}: {human(m.capacity)} {chart.unit}, {m.hit_rate:.1%}"
        for m in chart.marks
    ]
    lines.extend("      " + item for item in legend)
    return "\n".join(lines) + "\n"


def _tick_line(chart: Chart, lo: float, hi: float, col, width: int) -> str:
    """The x labels under a text plot: the chart's ticks where it names them, else both ends."""
    if not chart.ticks:
        left, right = human(lo), human(hi)
        return left + " " * max(1, width - len(left) - len(right)) + right
    cells = [" "] * (width + 8)
    for x in chart.ticks:
        label, at = human(x), col(x)
        start = max(0, min(at - len(label) // 2, len(cells) - len(label)))
        if all(c == " " for c in cells[max(0, start - 1) : start + len(label) + 1]):
            cells[start : start + len(label)] = label
    return "".join(cells).rstrip()


def svg_plot(chart: Chart, width: int = 720, height: int = 420) -> str:
    lo, hi = _bounds(chart)
    span = math.log(hi / lo)
    left, right, top, bottom = 64, 24, 40, 56
    pw, ph = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + math.log(x / lo) / span * pw

    def py(y: float) -> float:
        return top + (1 - y) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="15">'
        f"{escape(chart.title)}</text>",
    ]
    for i in range(0, 11, 2):
        y = py(i / 10)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{i * 10}%</text>')
    for tick in chart.ticks or _decades(lo, hi):
        x = px(tick)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#eee"/>')
        out.append(
            f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">{human(tick)}</text>'
        )
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    out.append(
        f'<text x="{left + pw / 2}" y="{height - 14}" text-anchor="middle">'
        f"{escape(chart.x_label)}</text>"
    )
    legend_y = top + 14
    for s in chart.series:
        pts = [(px(x), py(y)) for x, y in s.points if x > 0]
        if s.line and len(pts) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            out.append(
                f'<polyline points="{path}" fill="none" stroke="{s.color}" stroke-width="2"/>'
            )
        else:
            out.extend(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{s.color}"/>' for x, y in pts
            )
        out.append(
            f'<text x="{left + 10}" y="{legend_y}" fill="{s.color}">{escape(s.label)}</text>'
        )
        legend_y += 16
    for m in chart.marks:
        if m.capacity <= 0:
            continue
        x, y = px(m.capacity), py(m.hit_rate)
        out.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="none" stroke="{m.color}" '
            'stroke-width="2"/>'
        )
        out.append(
            f'<text x="{x + 8:.1f}" y="{y - 8:.1f}" fill="{m.color}">'
            f"{escape(m.label)} {human(m.capacity)}, {m.hit_rate:.1%}</text>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _decades(lo: float, hi: float) -> list[float]:
    decade = 10 ** math.floor(math.log10(lo))
    out = []
    while decade <= hi:
        if decade >= lo:
            out.append(decade)
        decade *= 10
    return out


PNG_NEEDS = "PNG plots need matplotlib: pip install 'xputune[plot]', or write .svg"


def plot_kind(name: str) -> str:
    """ "svg" or "png" from a file name; one line when it is neither, or PNG cannot be drawn
    here (asked before a trace is read, not after)."""
    import importlib.util

    suffix = name.rpartition(".")[2].lower() if "." in name else ""
    if suffix not in ("svg", "png"):
        raise XputuneError(f"--plot: use a .svg or .png file name, got {name}")
    if suffix == "png" and importlib.util.find_spec("matplotlib") is None:
        raise XputuneError(PNG_NEEDS)
    return suffix


def plot_bytes(chart: Chart, kind: str) -> bytes:
    """The chart as the file's bytes, in the kind plot_kind() said."""
    if kind == "svg":
        return svg_plot(chart).encode("utf-8")
    try:
        return png_plot(chart)
    except ImportError:
        raise XputuneError(PNG_NEEDS) from None


def png_plot(chart: Chart) -> bytes:
    """PNG through matplotlib (the optional `plot` extra); ImportError when it is missing."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 4.2), dpi=100)
    for s in chart.series:
        xs = [x for x, _ in s.points if x > 0]
        ys = [y for x, y in s.points if x > 0]
        if s.line:
            ax.plot(xs, ys, color=s.color, label=s.label)
        else:
            ax.scatter(xs, ys, color=s.color, label=s.label)
    for m in chart.marks:
        ax.scatter([m.capacity], [m.hit_rate], color=m.color, marker="o", facecolors="none")
        ax.annotate(
            f"{m.label}",
            (m.capacity, m.hit_rate),
            textcoords="offset points",
            xytext=(6, -12),
            color=m.color,
        )
    ax.set_xscale("log")
    if chart.ticks:
        ax.set_xticks(list(chart.ticks), [human(x) for x in chart.ticks])
    ax.set_ylim(0, 1)
    ax.set_xlabel(chart.x_label)
    ax.set_ylabel("prefix hit rate")
    ax.set_title(chart.title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def tiers_chart(data: dict[str, Any], curve) -> Chart:
    """The chart of `xputune tiers`: the trace's curve, its knee and pick, measured tiers."""
    series, marks = [], []
    if curve is not None:
        import numpy as np

        top = max(curve.saturation_tokens, curve.block_size) * 2
        xs = np.unique(np.geomspace(curve.block_size, top, 200).astype(np.int64))
        series.append(
            Series(
                "L1 prefix hit rate (trace)",
                list(zip(xs.tolist(), curve.hit_rates(xs).tolist(), strict=True)),
            )
        )
        if data.get("knee"):
            marks.append(Mark("knee", data["knee"]["capacity_tokens"], data["knee"]["hit_rate"]))
        if data.get("recommendation"):
            r = data["recommendation"]
            marks.append(Mark("recommended", r["capacity_tokens"], r["hit_rate"], "R", "#2ca02c"))
    m = data.get("measured")
    if m and (m["unit"] == "tokens" or "trace_at_rows" in m or curve is None):
        rows = m.get("trace_at_rows")
        pts = [
            ((rows[i]["capacity_tokens"] if rows else r["capacity"]), r["hit_rate"])
            for i, r in enumerate(m["rows"])
        ]
        series.append(Series("measured tiers", pts, "o", "#ff7f0e", line=False))
    unit = "tokens" if curve is not None or (m and m["unit"] == "tokens") else "GB"
    return Chart(series, marks, unit=unit)


def cluster_chart(cluster: dict[str, Any]) -> Chart:
    """The chart of `xputune tiers --instances`: the cluster's hit rate against N.

    Beside the total, what the instances' private caches reach alone (with a shared L3, the gap
    is what sharing adds) and the bound, one instance with N times the capacity."""
    rows = cluster["points"]

    def line(key: str) -> list[tuple[float, float]]:
        return [(float(r["instances"]), r[key]) for r in rows]

    shared = cluster["l3_tokens"] is not None
    series = [Series("total" + (" (with the shared L3)" if shared else ""), line("total_hit_rate"))]
    if shared:
        series.append(Series("private caches only (L1 + L2)", line("private_hit_rate"), "+",
                             "#ff7f0e"))  # fmt: skip
    series.append(Series("bound: one instance with N x the capacity", line("bound_hit_rate"),
                         "o", "#2ca02c"))  # fmt: skip
    return Chart(
        series,
        title=f"cluster prefix hit rate vs instances ({cluster['routing']})",
        unit="",
        axis="instances",
        ticks=tuple(float(r["instances"]) for r in rows),
    )
