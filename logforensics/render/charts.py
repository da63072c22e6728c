"""The report's charts: phase timeline, GPU-memory budget and throughput, as plotly divs.

Why a module of their own: the figures are built from the run model alone, apart from the
page that places them (``html``); the phase spans are shared by the timeline and the
phase table. Serving-only charts are in ``serving_charts``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, time
from typing import Any

from markupsafe import Markup

from ..diagnose.engine import Diagnosis
from ..diagnose.facts import plain
from ..events import PHASES
from ..model.failures import native_exception_words
from ..model.records import NOT_SEEN, PhaseSpan
from ..model.run import RunSummary
from ..units import gib
from .figure import Figure

#: Colours shared by the CSS classes and the charts, so a phase looks the same everywhere.
PHASE_COLOURS = {
    "init_distributed": "#8da0cb",
    "load_weights": "#66c2a5",
    "kv_cache_alloc": "#e5c494",
    "cuda_graph_capture": "#fc8d62",
    "warmup": "#a6d854",
    "serving": "#4daf4a",
}
RUN_COLOURS = {"baseline": "#1f77b4", "failing": "#d62728"}

#: Stacked memory segments: (RankBudget field, legend name, colour, pattern).
MEMORY_SEGMENTS = (
    ("weights", "weights", "#7570b3", ""),
    ("kv_pool", "KV pool (K+V)", "#1b9e77", ""),
    ("other_pools", "other pools", "#66a61e", ""),
    ("graphs", "CUDA graphs", "#d95f02", ""),
    ("free_after_graphs", "free after graphs", "#cfd8dc", ""),
    ("capture_used", "CUDA graphs captured before the OOM (at least)", "#d95f02", "x"),
    ("free_unfinished", "free before graphs (capture never finished)", "#eceff1", "/"),
)


# ---------------------------------------------------------------------------- formatting
def _runs(d: Diagnosis) -> list[tuple[str, RunSummary]]:
    return ([("baseline", d.baseline)] if d.baseline is not None else []) + [("failing", d.failing)]


def _where(file: Any, line: Any) -> str:
    return f"{file or '?'}:{line if line is not None else '?'}"


# ---------------------------------------------------------------------------- phases
@dataclass(frozen=True)
class _Span:
    rank: str
    phase: str
    start: float
    end: float
    first_line: int | None
    last_line: int | None
    first_ts: str | None
    last_ts: str | None


def _seconds(ts: Any) -> float | None:
    """ISO date-time, or a time of day for logs that print only that; None when neither."""
    if not isinstance(ts, str) or not ts:
        return None
    try:
        return datetime.fromisoformat(ts).timestamp()
    except ValueError:
        pass
    try:
        t = time.fromisoformat(ts)
    except ValueError:
        return None
    return t.hour * 3600 + t.minute * 60 + t.second + t.microsecond / 1e6


def _run_unit(r: RunSummary) -> str:
    """Seconds when every phase line of the run has a timestamp, else log line numbers."""
    infos = [info for phases in r.phases.values() for info in phases.values()]
    if infos and all(_seconds(i.first_ts) is not None for i in infos):
        return "s"
    return "line"


def _pos(unit: str, ts: Any, line: Any) -> float | None:
    if unit == "s":
        return _seconds(ts)
    return float(line) if isinstance(line, (int, float)) else None


def phase_spans(r: RunSummary) -> tuple[str, dict[str, list[_Span]]]:
    """Each rank's phases as intervals: a phase lasts until the rank's next phase begins,
    and the last one until the rank's last line (its crash, for a rank that crashed; the
    end of the run, for a rank of a run that crashed or hung)."""
    unit = _run_unit(r)
    crashes = _rank_crashes(r)
    raw: dict[str, list[tuple[str, float, float, PhaseSpan]]] = {}
    for rank, phases in r.phases.items():
        items = []
        for phase in PHASES:
            info = phases.get(phase)
            if not info:
                continue
            start = _pos(unit, info.first_ts, info.first_line)
            end = _pos(unit, info.last_ts, info.last_line)
            if start is None:
                continue
            items.append((phase, start, end if end is not None else start, info))
        raw[rank] = items
    starts = [s for items in raw.values() for _, s, _, _ in items]
    t0 = min(starts) if starts and unit == "s" else 0.0
    # A run that died took every rank with it: a rank still in a phase stays in it until then.
    ends = [_last_pos(r, rank, crashes.get(rank), unit) for rank in raw]
    last_end = max((e for e in ends if e is not None), default=None)
    run_end = last_end if r.outcome in ("crashed", "hung") else None
    out: dict[str, list[_Span]] = {}
    for rank, items in raw.items():
        spans = []
        for i, (phase, start, end, info) in enumerate(items):
            if i + 1 < len(items):
                end = max(end, items[i + 1][1])
            else:
                end = max(end, _last_pos(r, rank, crashes.get(rank), unit) or end)
                if run_end is not None and rank not in crashes:
                    end = max(end, run_end)
                elif phase == "serving" and last_end is not None and rank not in crashes:
                    # a serving rank serves until the run's end: only the stats rank (TP0, or
                    # attention-TP rank 0 of each DP group) prints batch statistics
                    end = max(end, last_end)
            spans.append(_Span(rank, phase, start - t0, end - t0, info.first_line, info.last_line,
                               info.first_ts, info.last_ts))
        out[rank] = spans
    return unit, out


def _last_pos(r: RunSummary, rank: str, crash: dict[str, Any] | None, unit: str) -> float | None:
    """Where a rank was last heard of: its crash when it crashed, else its last line."""
    seen = r.last_seen.get(rank, NOT_SEEN)
    pos = _pos(unit, crash.get("ts"), crash.get("line")) if crash else None
    return pos if pos is not None else _pos(unit, seen.ts, seen.line)


def _rank_crashes(r: RunSummary) -> dict[str, dict[str, Any]]:
    """rank -> {phase, line, ts, exception} for every rank that raised a fatal error."""
    out: dict[str, dict[str, Any]] = {}
    crash = r.crash
    if not crash:
        return out
    for exc in r.exceptions:
        for occ in exc.occurrences or []:
            rank = occ.rank
            if rank and rank in (crash.ranks or []) and rank not in out:
                out[rank] = {"phase": exc.phase or crash.phase, "line": occ.line,
                             "ts": occ.ts,
                             "exception": exc.exception or "", "file": exc.file or r.file}
    for rank in crash.ranks or []:
        out.setdefault(rank, {"phase": crash.phase, "line": crash.line if rank == crash.first_rank else None,
                              "ts": crash.ts if rank == crash.first_rank else None,
                              "exception": crash.exception or (native_exception_words(crash.source) if crash.native else ""),
                              "file": crash.file or r.file})
    return out


def _ordered_ranks(runs: Sequence[tuple[str, RunSummary]]) -> list[str]:
    seen: dict[str, None] = {}
    for _, r in runs:
        for rank in list(r.ranks) + list(_rank_crashes(r)):
            seen.setdefault(rank, None)
    return list(seen)


def timeline_chart(runs: Sequence[tuple[str, RunSummary]], d: Diagnosis) -> tuple[Markup | None, str]:
    """Gantt-like bars per rank and phase, one panel per run, crashes marked with ✕."""
    panels = []
    for label, r in runs:
        unit, spans = phase_spans(r)
        if any(spans.values()) or _rank_crashes(r):
            panels.append((label, r, unit, spans))
    if not panels:
        return None, ""
    units = {p[2] for p in panels}
    same = len(units) == 1
    axis = {"s": "seconds since the run's first phase line", "line": "log line number"}
    fig = Figure.grid(rows=len(panels), cols=1, shared_x=same, vertical_spacing=0.12,
                      titles=[f"{label}: {os.path.basename(r.file or '')} ({r.outcome})"
                              + ("" if same else f"; x: {axis[unit]}") for label, r, unit, _ in panels])
    shown: set[str] = set()
    heights = []
    for row, (label, r, unit, spans) in enumerate(panels, start=1):
        crashes = _rank_crashes(r)
        ranks = [k for k in _ordered_ranks([(label, r)])]
        names = {k: (f"{_label(r, k)} ✕" if k in crashes else _label(r, k)) for k in ranks}
        heights.append(max(len(ranks), 1))
        for phase in PHASES:
            items = [s for k in ranks for s in spans.get(k, []) if s.phase == phase]
            if not items:
                continue
            fig.add({
                "type": "bar", "orientation": "h", "name": phase, "legendgroup": phase,
                "showlegend": phase not in shown,
                "y": [names[s.rank] for s in items], "base": [s.start for s in items],
                "x": [max(s.end - s.start, _min_width(spans, unit)) for s in items],
                "marker": {"color": PHASE_COLOURS[phase]},
                "hovertext": [_span_hover(s, unit) for s in items], "hoverinfo": "text"}, row=row)
            shown.add(phase)
        xs, ys, texts = [], [], []
        t0 = _t0(r, unit)
        for rank, c in crashes.items():
            pos = _crash_pos(r, rank, c, unit, spans)
            if pos is None:
                continue
            xs.append(pos - (t0 if unit == "s" else 0.0))
            ys.append(names.get(rank, rank))
            texts.append(f"{rank} crashed in {c['phase'] or '?'}: {c['exception'] or 'fatal error'}"
                         f"<br>{_where(c['file'], c['line'])}")
        if xs:
            fig.add({"type": "scatter", "x": xs, "y": ys, "mode": "markers", "name": "crash",
                     "legendgroup": "crash", "showlegend": "crash" not in shown, "hovertext": texts,
                     "hoverinfo": "text", "marker": {"symbol": "x", "size": 13, "color": "#b71c1c",
                                                     "line": {"width": 1, "color": "white"}}}, row=row)
            shown.add("crash")
        fig.axis("y", row, autorange="reversed", type="category")
        if same and row == len(panels):
            fig.axis("x", row, title=axis[unit])
    total = sum(heights)
    fig.layout.update(barmode="overlay", height=min(140 + 30 * total + 60 * len(panels), 1400),
                      margin={"l": 70, "r": 20, "t": 40, "b": 50},
                      legend={"title": {"text": "phase"}, "tracegroupgap": 2}, bargap=0.25)
    return fig.div("timeline-chart"), (axis[units.pop()] if same else "given in each panel's title")


def _label(r: RunSummary, rank: str) -> str:
    """A rank as the charts show it: with its node in a run of several nodes, so that each
    node's ranks stand together (the ranks of a run are in node order)."""
    node = r.rank_nodes.get(rank) if len(r.nodes) > 1 else None
    return f"{node} · {rank}" if node and not rank.startswith(node + ":") else rank


def _t0(r: RunSummary, unit: str) -> float:
    if unit != "s":
        return 0.0
    starts = [_seconds(i.first_ts) for p in r.phases.values() for i in p.values()]
    vals = [s for s in starts if s is not None]
    return min(vals) if vals else 0.0


def _crash_pos(r: RunSummary, rank: str, c: dict[str, Any], unit: str, spans: dict[str, list[_Span]]) -> float | None:
    pos = _last_pos(r, rank, c, unit)
    if pos is None and spans.get(rank):
        return spans[rank][-1].end + _t0(r, unit)
    return pos


def _min_width(spans: dict[str, list[_Span]], unit: str) -> float:
    """Instant phases (one line) still get a visible sliver: 0.6% of the run's extent."""
    ends = [s.end for items in spans.values() for s in items]
    return max(ends, default=1.0) * 0.006 or (0.5 if unit == "s" else 1.0)


def _span_hover(s: _Span, unit: str) -> str:
    text = f"{s.rank} · {s.phase}<br>lines {s.first_line}–{s.last_line}"
    if unit == "s":
        text += f"<br>{s.first_ts} → {s.last_ts} ({s.end - s.start:.1f} s)"
    return text


# ---------------------------------------------------------------------------- memory
def memory_chart(d: Diagnosis) -> Markup | None:
    """Stacked bars per rank (GiB), one panel per run in rank order, P's reading as a tick over each bar."""
    panels: list[tuple[str, list[tuple[str, dict[str, Any]]]]] = []
    for label, r in _runs(d):
        run_budget = d.facts.budget.failing if label == "failing" else d.facts.budget.baseline
        ranks = {rb.rank: plain(rb) for rb in (run_budget.ranks if run_budget else ())}
        cap = d.facts.capture if label == "failing" else None
        if cap is not None and cap.rank in ranks and cap.used_gib is not None:
            # the capture that failed used this much of the free memory before it ran out
            ranks[cap.rank]["capture_used"] = cap.used_gib
        crashed = _rank_crashes(r)
        bars = [(f"{_label(r, rank)} ✕" if rank in crashed else _label(r, rank), rb) for rank, rb in ranks.items()
                if any(rb.get(k) is not None for k, *_ in MEMORY_SEGMENTS[:-1])]
        if bars:
            panels.append((label, bars))
    if not panels:
        return None
    fig = Figure.grid(rows=1, cols=len(panels), shared_y=True, horizontal_spacing=0.03,
                      column_widths=[len(bars) for _, bars in panels], titles=[p[0] for p in panels])
    shown: set[str] = set()
    for col, (label, bars) in enumerate(panels, start=1):
        x = [name for name, _ in bars]
        for key, name, colour, pattern in MEMORY_SEGMENTS:
            ys = [_segment(rb, key) for _, rb in bars]
            if all(v is None for v in ys):
                continue
            fig.add({"type": "bar", "x": x, "y": ys, "name": name, "legendgroup": name,
                     "showlegend": name not in shown,
                     "marker": {"color": colour, "pattern": {"shape": pattern},
                                "line": {"width": 0.5, "color": "#90a4ae"}},
                     "customdata": [gib(v, missing="") for v in ys],
                     "hovertemplate": f"{label} %{{x}}<br>{name}: %{{customdata}}<extra></extra>"}, col=col)
            shown.add(name)
        p = [rb.get("free_before_load") for _, rb in bars]
        if any(v is not None for v in p):
            name = "free before load (P)"
            fig.add({"type": "scatter", "x": x, "y": p, "mode": "markers", "name": name, "legendgroup": name,
                     "showlegend": name not in shown,
                     "marker": {"symbol": "line-ew-open", "size": 24, "color": "#263238",
                                "line": {"width": 3, "color": "#263238"}},
                     "customdata": [gib(v, missing="") for v in p],
                     "hovertemplate": f"{label} %{{x}}<br>free before load: %{{customdata}}<extra></extra>"},
                    col=col)
            shown.add(name)
        # Rank order as logged (a category axis would otherwise keep first-seen order only by luck).
        fig.axis("x", col=col, type="category", categoryorder="array", categoryarray=x, tickangle=0)
    fig.axis("y", title="GiB (SGLang's GB is GiB)")
    fig.layout.update(barmode="stack", height=500, bargap=0.15, margin={"l": 60, "r": 20, "t": 55, "b": 20},
                      legend={"orientation": "h", "yanchor": "top", "y": -0.1, "x": 0, "traceorder": "reversed"})
    return fig.div("memory-chart")


def _segment(rb: dict[str, Any], key: str) -> float | None:
    if key == "free_unfinished":
        if rb.get("graphs") is not None or rb.get("free_after_graphs") is not None:
            return None
        free = rb.get("free_after_pools")
        used = rb.get("capture_used")
        return max(free - used, 0.0) if free is not None and used is not None else free
    return rb.get(key)


# ---------------------------------------------------------------------------- throughput
def _series(points: Iterable[Any]) -> tuple[str, list[float], list[float]]:
    """Decode throughput points as (unit, x, tok/s); x relative to the first point when timed."""
    pts = [p for p in points if isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[1], (int, float))]
    if not pts:
        return "", [], []
    ys = [float(p[1]) for p in pts]
    secs = [_seconds(p[0]) for p in pts]
    if all(s is not None for s in secs):
        t0 = secs[0]
        return "s", [s - t0 for s in secs], ys  # type: ignore[operator]
    if all(isinstance(p[0], (int, float)) for p in pts):
        return "line", [float(p[0]) for p in pts], ys
    return "sample", [float(i) for i in range(len(pts))], ys


def throughput_chart(runs: Sequence[tuple[str, RunSummary]]) -> Markup | None:
    series = [(label, *_series(r.throughput.decode_series)) for label, r in runs]
    series = [s for s in series if s[2]]
    if not series:
        return None
    axis = {"s": "seconds since the run's first decode batch", "line": "log line number", "sample": "sample"}
    same = len({s[1] for s in series}) == 1
    fig = Figure.grid(rows=1 if same else len(series), cols=1, vertical_spacing=0.2)
    for i, (label, unit, xs, ys) in enumerate(series):
        row = 1 if same else i + 1
        fig.add({"type": "scatter", "x": xs, "y": ys, "mode": "lines+markers", "name": label, "showlegend": True,
                 "line": {"color": RUN_COLOURS.get(label)}, "marker": {"size": 4},
                 "hovertemplate": f"{label}: %{{y:.1f}} tok/s<extra>%{{x}}</extra>"}, row=row)
        fig.axis("x", row, title=axis[unit])
        fig.axis("y", row, title="decode tok/s", rangemode="tozero")
    fig.layout.update(height=320 if same else 300 * len(series),
                      margin={"l": 60, "r": 20, "t": 20, "b": 50}, legend={"orientation": "h", "y": 1.1})
    return fig.div("throughput-chart")
