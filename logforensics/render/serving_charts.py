"""The report's serving charts: decode throughput of both runs over time.

Why a chart of its own: an idle server prints no decode batches, so joining the points
across a pause draws a diagonal "drop" that never happened; the line is broken wherever
two records are further apart than the run's idle gap (``serving.idle_gap_s``). The
points at which a figure moved to a new level (``serving.changes``) are marked with the
line number the finding cites.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from markupsafe import Markup

from ..model.summary import RunSummary
from .charts import RUN_COLOURS
from .figure import Figure


def _sec(ts: Any) -> float | None:
    if not isinstance(ts, str):
        return None
    try:
        if len(ts) >= 19 and ts[4] == "-":
            return datetime.fromisoformat(ts[:19]).timestamp()
        if len(ts) >= 8 and ts[2] == ":":
            h, m, s = ts.split(":")[:3]
            return int(h) * 3600 + int(m) * 60 + float(s)
    except ValueError:
        return None
    return None


def broken_line(points: Sequence[Sequence[Any]], gap_s: float) -> tuple[list[float | None], list[float | None],
                                                                        list[int | None]]:
    """x (seconds since the first point), y and line of ``[ts, value, line]`` points, with a
    None between two points further apart than ``gap_s`` so that the line breaks there."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    lines: list[int | None] = []
    t0 = None
    prev = None
    for ts, value, line in points:
        t = _sec(ts)
        if t is None:
            continue
        if t0 is None:
            t0 = t
        if prev is not None and t - prev > gap_s:
            xs.append(None)
            ys.append(None)
            lines.append(None)
        xs.append(t - t0)
        ys.append(float(value))
        lines.append(line)
        prev = t
    return xs, ys, lines


def throughput_chart(runs: Sequence[tuple[str, RunSummary]]) -> Markup | None:
    """Decode tok/s of every run on one time axis (seconds since each run's first decode
    window), lines broken at idle gaps, change points marked; None when no run is timed."""
    fig = Figure()
    drawn = 0
    for label, r in runs:
        s = r.serving
        pts = (s.series.get("gen_tok_s") or []) if s else []
        if not s or not pts:
            continue
        gap = float(s.idle_gap_s or 30.0)
        xs, ys, lines = broken_line(pts, gap)
        colour = RUN_COLOURS.get(label)
        fig.add({"type": "scatter", "x": xs, "y": ys, "mode": "lines",
                 "name": f"{label} (window {s.window_s} s)",
                 "line": {"color": colour, "width": 1.5}, "connectgaps": False, "customdata": lines,
                 "hovertemplate": f"{label}: %{{y:.1f}} tok/s at +%{{x:.0f}} s, line %{{customdata}}<extra></extra>"})
        drawn += 1
        t0 = _sec(pts[0][0])
        for c in s.changes:
            if c.metric != "gen_tok_s" or t0 is None or _sec(c.at) is None:
                continue
            x = (_sec(c.at) or 0.0) - t0
            fig.vline(x, line={"color": colour, "dash": "dot", "width": 1.5})
            fig.annotate(x=x, y=max(c.before, c.after), yshift=12, showarrow=False,
                         font={"color": colour, "size": 11},
                         text=f"{label} line {c.line}: {c.before:.0f} → {c.after:.0f} tok/s")
    if not drawn:
        return None
    fig.axis("x", title="seconds since the run's first decode batch (lines break where the server was idle)")
    fig.axis("y", title="decode tok/s (sum over stats ranks)", rangemode="tozero")
    fig.layout.update(height=340, margin={"l": 60, "r": 20, "t": 30, "b": 50}, legend={"orientation": "h", "y": 1.12})
    return fig.div("throughput-chart")
