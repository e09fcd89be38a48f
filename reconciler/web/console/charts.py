"""Line charts as SVG, with axes and units (pure): the console's pictures of usage and cost.

`line_chart` draws one or more series of `(t, value)` points (t in unix seconds) over the
time they span, the y axis from 0 to a round maximum (or a fixed one, 100 for percents),
labelled with the unit; the x axis is labelled in time before the last point ("-5 min").
Every text is escaped: the caller puts the SVG into a page as it is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 560, 180
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 24, 28
COLOURS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2")


@dataclass(frozen=True, slots=True)
class Series:
    label: str
    points: Sequence[tuple[float, float]]


def round_up(value: float) -> float:
    """The next 1, 2 or 5 times 10^k at or above `value` (1 for nothing)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)


def round_up_bytes(value: float) -> float:
    """The next power of two at or above `value` (1 KiB at least): 3 GiB is drawn to 4 GiB."""
    return float(2 ** max(10, math.ceil(math.log2(value)))) if value > 0 else 1024.0


def format_value(value: float, unit: str) -> str:
    if unit == "bytes":
        for name, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if value >= size:
                return f"{value / size:.3g} {name}"
        return f"{value:.0f} B"
    if unit == "$/h":
        return f"${value:.2f}/h"
    return f"{value:.3g}{unit}" if unit == "%" else f"{value:.3g} {unit}"


def format_span(seconds: float) -> str:
    if seconds >= 86400:
        return f"-{seconds / 86400:.3g} d"
    if seconds >= 3600:
        return f"-{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"-{seconds / 60:.3g} min"
    return f"-{seconds:.0f} s"


def line_chart(
    title: str, unit: str, series: Sequence[Series], *, y_max: float | None = None
) -> str:
    points = [p for s in series for p in s.points]
    head = (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
        f'<text x="{LEFT}" y="14" class="title">{escape(title)}</text>'
    )
    if not points:
        empty = f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" class="empty">no samples yet</text>'
        return head + empty + "</svg>"
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    highest = max(p[1] for p in points)
    top = (
        y_max
        if y_max is not None
        else round_up_bytes(highest)
        if unit == "bytes"
        else round_up(highest)
    )
    span = max(t1 - t0, 1.0)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + (t - t0) / span * plot_w

    def y(v: float) -> float:
        return TOP + plot_h - min(max(v, 0.0), top) / top * plot_h

    parts = [head, _axes(top, unit, span, plot_w, plot_h)]
    for index, line in enumerate(series):
        colour = COLOURS[index % len(COLOURS)]
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in sorted(line.points))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        parts.append(
            f'<text x="{WIDTH - RIGHT}" y="{14 + 12 * index}" class="legend" '
            f'fill="{colour}" text-anchor="end">{escape(line.label)}</text>'
        )
    return "".join(parts) + "</svg>"


def _axes(top: float, unit: str, span: float, plot_w: float, plot_h: float) -> str:
    bottom = TOP + plot_h
    parts = [
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" class="axis"/>',
        f'<line x1="{LEFT}" y1="{bottom}" x2="{LEFT + plot_w}" y2="{bottom}" class="axis"/>',
    ]
    for fraction in (0.0, 0.5, 1.0):
        level = bottom - fraction * plot_h
        label = escape(format_value(top * fraction, unit))
        parts.append(f'<text x="{LEFT - 4}" y="{level + 4:.1f}" text-anchor="end">{label}</text>')
        parts.append(
            f'<line x1="{LEFT}" y1="{level:.1f}" x2="{LEFT + plot_w}" '
            f'y2="{level:.1f}" class="grid"/>'
        )
    parts.append(f'<text x="{LEFT}" y="{HEIGHT - 8}">{escape(format_span(span))}</text>')
    parts.append(f'<text x="{LEFT + plot_w}" y="{HEIGHT - 8}" text-anchor="end">now</text>')
    return "".join(parts)
