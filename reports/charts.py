"""SVG geometry for the capsule pages, computed here so templates only emit elements: the ulp
error histogram and the error/bound distribution. Every number is laid out in Python; the
template writes each shape's attributes through jinja2's escaping."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from reports.model import StatsView


@dataclass
class Shape:
    kind: str                   # rect | line | text | polygon (the template's whitelist)
    cls: str
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0              # rect width; line x2
    h: float = 0.0              # rect height; line y2
    text: str = ""              # text content
    anchor: str = "middle"      # text-anchor
    points: str = ""            # polygon points
    title: str = ""             # hover text (<title>), readable without it


@dataclass
class Chart:
    width: int
    height: int
    label: str                  # aria-label and caption
    shapes: list[Shape] = field(default_factory=list)


def _r(v: float) -> float:
    return round(v, 1)


def histogram(stats: StatsView) -> Chart:
    """Bars of the ulp-error buckets; heights on a log scale (log10(1 + count)) because one
    bucket (exact results) usually holds almost everything. Counts are printed on the bars."""
    left, top, bar_w, gap, plot_h = 16, 40, 54, 10, 120
    buckets = stats.histogram or [("none", 0)]
    width = left + len(buckets) * (bar_w + gap) + 10
    height = top + plot_h + 44
    chart = Chart(width, height, f"{stats.direction}: error in ulps of the rounded reference, "
                                 f"{stats.elements} elements; bar heights on a log scale")
    base = top + plot_h
    chart.shapes.append(Shape("text", "lane", left, 16, text=stats.direction, anchor="start"))
    chart.shapes.append(Shape("line", "axis", left - 4, base, width - 6, base))
    peak = math.log10(1 + max(c for _, c in buckets)) or 1.0
    for i, (label, count) in enumerate(buckets):
        x = left + i * (bar_w + gap)
        h = plot_h * math.log10(1 + count) / peak
        cls = "bar-exact" if label == "0" else "bar"
        tip = f"{count} elements with error {label} ulps"
        chart.shapes.append(Shape("rect", cls, x, _r(base - h), bar_w, _r(h), title=tip))
        chart.shapes.append(Shape("text", "count", _r(x + bar_w / 2), _r(base - h - 4),
                                  text=str(count)))
        chart.shapes.append(Shape("text", "tick", _r(x + bar_w / 2), base + 16, text=label))
    chart.shapes.append(Shape("text", "note", _r(left + (width - left) / 2), base + 36,
                              text="error in ulps"))
    return chart


def _label(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


@dataclass
class _Lane:
    direction: str
    percentiles: list
    worst_ratio: object


def distribution(stats: list[StatsView], failure_worst=None) -> Chart:
    """One lane per direction on an error/bound axis: a band from the median to the 99th
    percentile, a tick at the 90th, a diamond at the worst, and the bound (ratio 1) as a line;
    a last lane holds the worst counterexample when there is one. Ratios past the axis (or
    inf/nan) sit at its right end, marked off scale."""
    stats = list(stats) + ([_Lane("failures", [], failure_worst)]
                           if failure_worst is not None else [])
    left, right, top, lane, width = 70, 30, 26, 44, 620
    plot_w = width - left - right
    height = top + lane * max(len(stats), 1) + 34
    worst = [_num(s.worst_ratio) for s in stats]
    span = max([1.25] + [min(w * 1.1, 4.0) for w in worst if w is not None])
    chart = Chart(width, height, "error / bound per element: median to 99th percentile, "
                                 "90th percentile, worst; the bound is 1")

    def x_of(v) -> tuple[float, bool]:
        n = _num(v)
        if n is None or n > span:
            return left + plot_w, True
        return left + plot_w * max(n, 0.0) / span, False
    bottom = top + lane * max(len(stats), 1)
    x1 = x_of(1.0)[0]
    chart.shapes.append(Shape("rect", "over", _r(x1), top - 6, _r(left + plot_w - x1),
                              bottom - top + 6, title="beyond the bound: a failure"))
    for t in [0.0, 0.25, 0.5, 0.75, 1.0] + [v for v in (2.0, 3.0, 4.0) if v <= span]:
        x = _r(x_of(t)[0])
        chart.shapes.append(Shape("line", "grid" if t != 1.0 else "bound", x, top - 6, x, bottom))
        chart.shapes.append(Shape("text", "tick", x, bottom + 16, text=f"{t:g}"))
    chart.shapes.append(Shape("text", "note", _r(x1), top - 10, text="bound"))
    for i, s in enumerate(stats):
        y = top + lane * i + lane / 2
        chart.shapes.append(Shape("text", "lane", left - 10, _r(y + 4), text=s.direction,
                                  anchor="end"))
        chart.shapes.append(Shape("line", "axis", left, _r(y), left + plot_w, _r(y)))
        pct = dict(s.percentiles)
        if pct.get("p50") is not None and pct.get("p99") is not None:
            a, b = x_of(pct["p50"])[0], x_of(pct["p99"])[0]
            chart.shapes.append(Shape("rect", "band", _r(a), _r(y - 7), _r(max(b - a, 2.0)), 14,
                                      title=f"median {pct['p50']} to 99th percentile "
                                            f"{pct['p99']}"))
        if pct.get("p90") is not None:
            x = _r(x_of(pct["p90"])[0])
            chart.shapes.append(Shape("line", "p90", x, _r(y - 10), x, _r(y + 10),
                                      title=f"90th percentile {pct['p90']}"))
        if s.worst_ratio is None:       # nothing was compared in this direction
            continue
        x, off = x_of(s.worst_ratio)
        n = _num(s.worst_ratio)
        cls = "worst-bad" if n is None or n > 1 else "worst-ok"
        d = 7
        chart.shapes.append(Shape("polygon", cls, points=f"{_r(x)},{_r(y - d)} {_r(x + d)},{_r(y)} "
                                                         f"{_r(x)},{_r(y + d)} {_r(x - d)},{_r(y)}",
                                  title=f"worst {s.worst_ratio}"))
        if off:
            chart.shapes.append(Shape("text", "offscale", _r(x - 10), _r(y + 4),
                                      text=f"worst {_label(s.worst_ratio)}, off scale",
                                      anchor="end"))
    return chart
