"""The HTML report of a diagnosis (``logforensics diff -o report.html``).

One self-contained file: CSS and plotly.js are inlined once, charts are plotly figures,
so the page opens offline, from a mail attachment or a CI artifact. Presentation only,
like the terminal view: every sentence comes from the rules, every figure from the
facts and the run summaries.

The template never sees the raw dicts. :func:`build_context` turns a
:class:`~logforensics.diagnose.engine.Diagnosis` into a :class:`ReportContext` of small frozen
dataclasses whose fields are already formatted strings (or ``None`` when the log did
not say), so missing data is decided here, once, and ``StrictUndefined`` catches any
typo in the templates. Log text is data: the environment autoescapes everything, and
only our own markup (CSS, plotly's output) is passed as :class:`markupsafe.Markup`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, time
from functools import lru_cache
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from ..diagnose.budget import Advice
from ..diagnose.engine import Diagnosis
from ..diagnose.facts import plain
from ..diagnose.rulespec import SEVERITIES
from ..diagnose.settings import SettingDiff
from ..events import PHASES
from ..model.run import RunSummary
from ..outputs import write_output
from ..units import gib
from ..version import __version__
from .serving_charts import throughput_chart as serving_throughput_chart

TEMPLATE_PACKAGE = "logforensics.reports"
TEMPLATE = "report.html.j2"
STYLESHEET = "report.css"

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
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}

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

#: The budget formula's inputs and outputs, in reading order: (key, label, how it is derived).
BUDGET_ROWS = (
    ("mem_fraction_static", "mem_fraction_static (f)", "server argument"),
    ("p_min", "P_min", "min over ranks of free GiB at 'Load weight begin'"),
    ("a_min", "A_min", "min over ranks of free GiB at 'Load weight end'"),
    ("reserved_headroom", "reserved headroom", "P_min × (1 − f): left for graphs, activations, buffers"),
    ("kv_budget", "KV budget", "A_min − P_min × (1 − f)"),
    ("kv_allocated", "KV allocated", "K + V as logged (max over ranks)"),
    ("cell_bytes", "bytes per token", "KV bytes / #tokens"),
    ("graphs_max", "CUDA graphs", "'Capture cuda graph end' mem usage (max over ranks)"),
    ("capture_free_min", "free at capture begin", "worst rank"),
    ("cuda_graph_max_bs", "cuda_graph_max_bs", "largest captured batch size"),
    ("total_capacity", "GPU capacity", "from the OOM message"),
)


# ---------------------------------------------------------------------------- context
@dataclass(frozen=True)
class RunView:
    """One run's header line."""

    label: str                  # "baseline" / "failing"
    file: str
    outcome: str
    reason: str
    ranks: str
    versions: str


@dataclass(frozen=True)
class EvidenceView:
    """One cited log line; ``where`` is ``file:line``, the form every finding cites."""

    where: str
    rank: str
    text: str


@dataclass(frozen=True)
class FindingView:
    """A finding; ``explanation`` holds the rule's non-blank lines, as the terminal prints them."""

    rule: str
    severity: str
    title: str
    explanation: tuple[str, ...]
    evidence: tuple[EvidenceView, ...]


@dataclass(frozen=True)
class PhaseCell:
    """One rank's phase in one run: ``state`` is a CSS class (done, stopped, crashed, missing, absent)."""

    state: str
    text: str
    hint: str


@dataclass(frozen=True)
class PhaseRow:
    rank: str
    run: str
    crashed: bool
    cells: tuple[PhaseCell, ...]


@dataclass(frozen=True)
class CrashMark:
    """Where a rank died: the sentence under the timeline."""

    run: str
    rank: str
    phase: str
    where: str
    exception: str


@dataclass(frozen=True)
class BudgetRow:
    label: str
    how: str
    baseline: str | None
    failing: str


@dataclass(frozen=True)
class AdviceView:
    kind: str
    settings: tuple[str, ...]   # as command-line flags
    reasoning: tuple[str, ...]


@dataclass(frozen=True)
class StatRow:
    label: str
    baseline: str | None
    failing: str


@dataclass(frozen=True)
class ConfigRow:
    key: str
    baseline: str
    failing: str
    effect: str


@dataclass(frozen=True)
class TracebackView:
    """One distinct traceback and every rank that printed it."""

    run: str
    exception: str
    message: str
    ranks: str
    phase: str
    where: str
    occurrences: int
    text: str


@dataclass(frozen=True)
class ShapeView:
    count: int
    first_line: str
    example: str
    novel: bool


@dataclass(frozen=True)
class CoverageView:
    run: str
    lines_read: int
    lines_recognised: int
    recognised_pct: str
    events: int
    shapes: tuple[ShapeView, ...]


@dataclass(frozen=True)
class ReportContext:
    """Everything the template shows, in page order; ``None``/empty means 'the logs do not say'.

    Charts are plotly's own ``<div>`` + ``Plotly.newPlot`` markup; plotly.js is inlined once
    (``plotly_js``, empty when the page has no chart).
    """

    title: str                              # <title>: the failing log's name
    version: str                            # logforensics version, in the footer
    verdict: str                            # the engine's one-line verdict, first thing on the page
    worst: str                              # error / warning / info / ok: the verdict's colour
    runs: tuple[RunView, ...]               # baseline (when given), then failing
    has_baseline: bool                      # False: single-run diagnosis, no comparison columns
    counts: tuple[tuple[str, int], ...]     # findings per severity, worst first
    findings: tuple[FindingView, ...]       # in the engine's order (worst first)
    timeline_chart: Markup | None           # phases per rank, one panel per run
    timeline_unit: str                      # what the timeline's x axis counts
    phases: tuple[str, ...]                 # column order of the phase grid
    phase_rows: tuple[PhaseRow, ...]        # the grid: rank by rank, baseline row above failing row
    crashes: tuple[CrashMark, ...]          # which ranks died, where, with what
    memory_chart: Markup | None             # stacked GiB per rank, one panel per run
    budget_rows: tuple[BudgetRow, ...]      # the KV formula's inputs and outputs
    advice: AdviceView | None               # facts["budget"]["advice"], when there is any
    throughput_chart: Markup | None         # decode tok/s over time
    throughput_stats: tuple[StatRow, ...]   # medians of both runs
    server_args: tuple[ConfigRow, ...]      # changed server arguments, known effects first
    env: tuple[ConfigRow, ...]              # changed environment variables
    tracebacks: tuple[TracebackView, ...]   # failing run's first, once per distinct traceback
    coverage: tuple[CoverageView, ...]      # per run: recognised lines, top unknown shapes
    css: Markup                             # reports/report.css, inlined
    plotly_js: Markup                       # the plotly.js bundle, inlined once


# ---------------------------------------------------------------------------- entry points
def write_html(d: Diagnosis, path: str) -> None:
    """Write the report by the rules of ``outputs.open_output`` (atomic for a regular file,
    written through to a FIFO or device); raises ``OutputError`` with a one-line reason."""
    write_output(path, render_html(d))


def render_html(d: Diagnosis) -> str:
    return _env().get_template(TEMPLATE).render(ctx=build_context(d))


@lru_cache(maxsize=1)
def _env() -> Environment:
    return Environment(loader=PackageLoader(TEMPLATE_PACKAGE, "."), autoescape=True,
                       undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


@lru_cache(maxsize=1)
def _stylesheet() -> str:
    return resources.files(TEMPLATE_PACKAGE).joinpath(STYLESHEET).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    # Never in today's bundle, but a literal "</script" would end our <script> element early.
    return get_plotlyjs().replace("</script", "<\\/script")


def build_context(d: Diagnosis) -> ReportContext:
    runs = _runs(d)
    timeline, unit = timeline_chart(runs, d)
    memory = memory_chart(d)
    tput = serving_throughput_chart(runs, _div) or throughput_chart(runs)
    charts = [c for c in (timeline, memory, tput) if c is not None]
    worst = d.worst() or "ok"
    return ReportContext(
        title=f"logforensics: {os.path.basename(d.failing.file or 'failing run')}",
        version=__version__,
        verdict=d.verdict,
        worst=worst,
        runs=tuple(_run_view(label, r) for label, r in runs),
        has_baseline=d.baseline is not None,
        counts=tuple((s, n) for s in SEVERITIES if (n := sum(f.severity == s for f in d.findings))),
        findings=tuple(_finding_view(f) for f in d.findings),
        timeline_chart=timeline,
        timeline_unit=unit,
        phases=PHASES,
        phase_rows=phase_rows(runs, d),
        crashes=tuple(m for label, r in runs for m in _crash_marks(label, r)),
        memory_chart=memory,
        budget_rows=budget_rows(d),
        advice=_advice(d.facts.budget.advice),
        throughput_chart=tput,
        throughput_stats=throughput_stats(d),
        server_args=_config_rows(d.facts.config.server_args),
        env=_config_rows(d.facts.config.env),
        tracebacks=tuple(t for label, r in reversed(runs) for t in _tracebacks(label, r)),
        coverage=tuple(_coverage(label, r, d) for label, r in runs),
        css=Markup(_stylesheet()),
        plotly_js=Markup(_plotly_js()) if charts else Markup(""),
    )


# ---------------------------------------------------------------------------- formatting
def _runs(d: Diagnosis) -> list[tuple[str, RunSummary]]:
    return ([("baseline", d.baseline)] if d.baseline is not None else []) + [("failing", d.failing)]


def fmt(value: Any, nd: int = 2) -> str:
    """A figure as people read it: no float noise, '—' for unknown."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        text = f"{value:.{nd}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    return str(value)


def _arg(value: Any) -> str:
    """A server_args / env value; '(not set)' keeps an absent key distinct from an empty string."""
    if value is None:
        return "(not set)"
    if isinstance(value, str):
        return repr(value) if value == "" or value != value.strip() else value
    return fmt(value, 4) if isinstance(value, float) else str(value)


def _where(file: Any, line: Any) -> str:
    return f"{file or '?'}:{line if line is not None else '?'}"


def _run_view(label: str, r: RunSummary) -> RunView:
    versions = ", ".join(f"{k} {v}" for k, v in r.versions.items() if v)
    return RunView(label, r.file or "(stdin)", r.outcome, r.outcome_reason,
                   f"{len(r.ranks)} rank{'s' if len(r.ranks) != 1 else ''}: {' '.join(r.ranks)}" if r.ranks else "no rank seen",
                   versions)


def _finding_view(f: Any) -> FindingView:
    evidence = tuple(EvidenceView(_where(e.get("file"), e.get("line")), e.get("rank") or "", e.get("text") or "")
                     for e in f.evidence)
    severity = f.severity if f.severity in SEVERITIES else "info"
    lines = tuple(line.strip() for line in f.explanation.splitlines() if line.strip())
    return FindingView(f.rule, severity, f.title, lines, evidence)


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
    if infos and all(_seconds(i.get("first_ts")) is not None for i in infos):
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
    raw: dict[str, list[tuple[str, float, float, dict[str, Any]]]] = {}
    for rank, phases in r.phases.items():
        items = []
        for phase in PHASES:
            info = phases.get(phase)
            if not info:
                continue
            start = _pos(unit, info.get("first_ts"), info.get("first_line"))
            end = _pos(unit, info.get("last_ts"), info.get("last_line"))
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
            spans.append(_Span(rank, phase, start - t0, end - t0, info.get("first_line"), info.get("last_line"),
                               info.get("first_ts"), info.get("last_ts")))
        out[rank] = spans
    return unit, out


def _last_pos(r: RunSummary, rank: str, crash: dict[str, Any] | None, unit: str) -> float | None:
    """Where a rank was last heard of: its crash when it crashed, else its last line."""
    seen = r.last_seen.get(rank, {})
    pos = _pos(unit, crash.get("ts"), crash.get("line")) if crash else None
    return pos if pos is not None else _pos(unit, seen.get("ts"), seen.get("line"))


def _rank_crashes(r: RunSummary) -> dict[str, dict[str, Any]]:
    """rank -> {phase, line, ts, exception} for every rank that raised a fatal error."""
    out: dict[str, dict[str, Any]] = {}
    crash = r.crash
    if not crash:
        return out
    for exc in r.exceptions:
        for occ in exc.get("occurrences") or []:
            rank = occ.get("rank")
            if rank and rank in (crash.get("ranks") or []) and rank not in out:
                out[rank] = {"phase": exc.get("phase") or crash.get("phase"), "line": occ.get("line"),
                             "ts": occ.get("ts"),
                             "exception": exc.get("exception") or "", "file": exc.get("file") or r.file}
    for rank in crash.get("ranks") or []:
        out.setdefault(rank, {"phase": crash.get("phase"), "line": crash.get("line") if rank == crash.get("first_rank") else None,
                              "ts": crash.get("ts") if rank == crash.get("first_rank") else None,
                              "exception": crash.get("exception") or ("native abort" if crash.get("native") else ""),
                              "file": crash.get("file") or r.file})
    return out


def _crash_marks(label: str, r: RunSummary) -> list[CrashMark]:
    marks = []
    for rank, c in _rank_crashes(r).items():
        where = _where(c["file"], c["line"]) if c["line"] is not None else "(line not known)"
        marks.append(CrashMark(label, rank, c["phase"] or "unknown phase", where, c["exception"] or "fatal error"))
    if r.crash and not marks:
        marks.append(CrashMark(label, "unknown rank", r.crash.get("phase") or "unknown phase",
                               _where(r.crash.get("file") or r.file, r.crash.get("line")),
                               r.crash.get("exception") or ("native abort" if r.crash.get("native") else "fatal error")))
    return marks


def _duration(span: _Span, unit: str) -> str:
    if unit == "s":
        return f"{span.end - span.start:.0f} s" if span.end - span.start >= 1 else "<1 s"
    return f"lines {span.first_line}–{span.last_line}" if span.first_line != span.last_line else f"line {span.first_line}"


def _ordered_ranks(runs: Sequence[tuple[str, RunSummary]]) -> list[str]:
    seen: dict[str, None] = {}
    for _, r in runs:
        for rank in list(r.ranks) + list(_rank_crashes(r)):
            seen.setdefault(rank, None)
    return list(seen)


def phase_rows(runs: Sequence[tuple[str, RunSummary]], d: Diagnosis) -> tuple[PhaseRow, ...]:
    """Both runs rank by rank, phase columns aligned, so the first gap stands out."""
    # By the failing log's label: a baseline '-' is the failing run's TP0.
    aligned = {a.failing_rank or a.rank: a for a in d.facts.alignment.ranks.values()}
    per_run = {label: (r, *phase_spans(r), _rank_crashes(r)) for label, r in runs}
    rows = []
    for rank in _ordered_ranks(runs):
        for label, _ in runs:
            r, unit, spans, crashes = per_run[label]
            if rank not in r.ranks and rank not in crashes:
                continue
            by_phase = {s.phase: s for s in spans.get(rank, [])}
            reached = r.phase_reached.get(rank)
            crash_phase = crashes.get(rank, {}).get("phase")
            furthest = max((PHASES.index(p) for p in (reached, crash_phase) if p in PHASES), default=-1)
            missing = set(aligned[rank].missing_phases) if label == "failing" and rank in aligned else set()
            missing = {p for p in missing if PHASES.index(p) > furthest}  # a gap before the crash is just unlogged
            cells = []
            for phase in PHASES:
                span = by_phase.get(phase)
                if crash_phase == phase:
                    cells.append(PhaseCell("crashed", "✕ crashed", crashes[rank]["exception"] or "fatal error"))
                elif span is not None and phase == reached and r.outcome != "ready":
                    cells.append(PhaseCell("stopped", f"{_duration(span, unit)}, last", "the rank's last phase"))
                elif span is not None:
                    cells.append(PhaseCell("done", _duration(span, unit), f"lines {span.first_line}–{span.last_line}"))
                elif phase in missing:
                    cells.append(PhaseCell("missing", "not reached", "the baseline reached this phase on this rank"))
                else:
                    cells.append(PhaseCell("absent", "·", "no line of this phase"))
            rows.append(PhaseRow(rank, label, rank in crashes, tuple(cells)))
    return tuple(rows)


def timeline_chart(runs: Sequence[tuple[str, RunSummary]], d: Diagnosis) -> tuple[Markup | None, str]:
    """Gantt-like bars per rank and phase, one panel per run, crashes marked with ✕."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

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
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=same, vertical_spacing=0.12,
                        subplot_titles=[f"{label}: {os.path.basename(r.file or '')} ({r.outcome})"
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
            fig.add_trace(go.Bar(
                orientation="h", name=phase, legendgroup=phase, showlegend=phase not in shown,
                y=[names[s.rank] for s in items], base=[s.start for s in items],
                x=[max(s.end - s.start, _min_width(spans, unit)) for s in items],
                marker_color=PHASE_COLOURS[phase],
                hovertext=[_span_hover(s, unit) for s in items], hoverinfo="text"), row=row, col=1)
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
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name="crash", legendgroup="crash",
                                     showlegend="crash" not in shown, hovertext=texts, hoverinfo="text",
                                     marker={"symbol": "x", "size": 13, "color": "#b71c1c",
                                             "line": {"width": 1, "color": "white"}}), row=row, col=1)
            shown.add("crash")
        fig.update_yaxes(autorange="reversed", type="category", row=row, col=1)
        fig.update_xaxes(title_text=axis[unit] if same and row == len(panels) else None, row=row, col=1)
    total = sum(heights)
    fig.update_layout(barmode="overlay", height=min(140 + 30 * total + 60 * len(panels), 1400),
                      margin={"l": 70, "r": 20, "t": 40, "b": 50}, template="plotly_white",
                      legend={"title": {"text": "phase"}, "tracegroupgap": 2}, bargap=0.25)
    return _div(fig, "timeline-chart"), (axis[units.pop()] if same else "given in each panel's title")


def _label(r: RunSummary, rank: str) -> str:
    """A rank as the charts show it: with its node in a run of several nodes, so that each
    node's ranks stand together (the ranks of a run are in node order)."""
    node = r.rank_nodes.get(rank) if len(r.nodes) > 1 else None
    return f"{node} · {rank}" if node and not rank.startswith(node + ":") else rank


def _t0(r: RunSummary, unit: str) -> float:
    if unit != "s":
        return 0.0
    starts = [_seconds(i.get("first_ts")) for p in r.phases.values() for i in p.values()]
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
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

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
    fig = make_subplots(rows=1, cols=len(panels), shared_yaxes=True, horizontal_spacing=0.03,
                        column_widths=[len(bars) for _, bars in panels], subplot_titles=[p[0] for p in panels])
    shown: set[str] = set()
    for col, (label, bars) in enumerate(panels, start=1):
        x = [name for name, _ in bars]
        for key, name, colour, pattern in MEMORY_SEGMENTS:
            ys = [_segment(rb, key) for _, rb in bars]
            if all(v is None for v in ys):
                continue
            fig.add_trace(go.Bar(x=x, y=ys, name=name, legendgroup=name, showlegend=name not in shown,
                                 marker={"color": colour, "pattern": {"shape": pattern},
                                         "line": {"width": 0.5, "color": "#90a4ae"}},
                                 customdata=[gib(v, missing="") for v in ys],
                                 hovertemplate=f"{label} %{{x}}<br>{name}: %{{customdata}}<extra></extra>"),
                          row=1, col=col)
            shown.add(name)
        p = [rb.get("free_before_load") for _, rb in bars]
        if any(v is not None for v in p):
            name = "free before load (P)"
            fig.add_trace(go.Scatter(x=x, y=p, mode="markers", name=name, legendgroup=name,
                                     showlegend=name not in shown,
                                     marker={"symbol": "line-ew-open", "size": 24, "color": "#263238",
                                             "line": {"width": 3, "color": "#263238"}},
                                     customdata=[gib(v, missing="") for v in p],
                                     hovertemplate=f"{label} %{{x}}<br>free before load: %{{customdata}}<extra></extra>"),
                          row=1, col=col)
            shown.add(name)
        # Rank order as logged (a category axis would otherwise keep first-seen order only by luck).
        fig.update_xaxes(type="category", categoryorder="array", categoryarray=x, tickangle=0, row=1, col=col)
    fig.update_yaxes(title_text="GiB (SGLang's GB is GiB)", row=1, col=1)
    fig.update_layout(barmode="stack", template="plotly_white", height=500, bargap=0.15,
                      margin={"l": 60, "r": 20, "t": 55, "b": 20},
                      legend={"orientation": "h", "yanchor": "top", "y": -0.1, "x": 0, "traceorder": "reversed"})
    return _div(fig, "memory-chart")


def _segment(rb: dict[str, Any], key: str) -> float | None:
    if key == "free_unfinished":
        if rb.get("graphs") is not None or rb.get("free_after_graphs") is not None:
            return None
        free = rb.get("free_after_pools")
        used = rb.get("capture_used")
        return max(free - used, 0.0) if free is not None and used is not None else free
    return rb.get(key)


#: Budget rows that are not GiB figures (every other row goes through the GiB/MiB formatter).
_NOT_GIB = frozenset({"mem_fraction_static", "cell_bytes", "cuda_graph_max_bs"})


def budget_rows(d: Diagnosis) -> tuple[BudgetRow, ...]:
    base = plain(d.facts.budget.baseline) if d.facts.budget.baseline else None
    fail = plain(d.facts.budget.failing)
    rows = []
    for key, label, how in BUDGET_ROWS:
        b = base.get(key) if base else None
        f = fail.get(key)
        if b is None and f is None:
            continue
        if key in _NOT_GIB:
            nd = 0 if key == "cell_bytes" else 3
            rows.append(BudgetRow(label, how, fmt(b, nd) if base is not None else None, fmt(f, nd)))
        else:
            rows.append(BudgetRow(label, how, gib(b, missing="—") if base is not None else None, gib(f, missing="—")))
    return tuple(rows)


def _advice(a: Advice) -> AdviceView | None:
    if not (a.kind or a.reasoning):
        return None
    flags = tuple(f"--{k.replace('_', '-')} {fmt(v)}" for k, v in a.settings.items())
    return AdviceView(str(a.kind or "").replace("_", " "), flags, tuple(str(x) for x in a.reasoning))


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
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    series = [(label, *_series(r.throughput.get("decode_series") or [])) for label, r in runs]
    series = [s for s in series if s[2]]
    if not series:
        return None
    axis = {"s": "seconds since the run's first decode batch", "line": "log line number", "sample": "sample"}
    same = len({s[1] for s in series}) == 1
    fig = make_subplots(rows=1 if same else len(series), cols=1, vertical_spacing=0.2)
    for i, (label, unit, xs, ys) in enumerate(series):
        row = 1 if same else i + 1
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=label, showlegend=True,
                                 line={"color": RUN_COLOURS.get(label)}, marker={"size": 4},
                                 hovertemplate=f"{label}: %{{y:.1f}} tok/s<extra>%{{x}}</extra>"), row=row, col=1)
        fig.update_xaxes(title_text=axis[unit], row=row, col=1)
        fig.update_yaxes(title_text="decode tok/s", rangemode="tozero", row=row, col=1)
    fig.update_layout(template="plotly_white", height=320 if same else 300 * len(series),
                      margin={"l": 60, "r": 20, "t": 20, "b": 50}, legend={"orientation": "h", "y": 1.1})
    return _div(fig, "throughput-chart")


def throughput_stats(d: Diagnosis) -> tuple[StatRow, ...]:
    rows = []
    base = d.baseline.throughput if d.baseline else None
    fail = d.failing.throughput
    for key, label in (("decode_gen_tok_s", "decode tok/s (median)"), ("prefill_input_tok_s", "prefill tok/s (median)"),
                       ("running_req", "running requests (median)"), ("accept_len", "accept length (median)")):
        b = (base or {}).get(key) or {}
        f = fail.get(key) or {}
        if not b.get("count") and not f.get("count"):
            continue
        def one(s: dict[str, Any]) -> str:
            return f"{fmt(s.get('median'), 1)} (n={s.get('count')})" if s.get("count") else "—"
        rows.append(StatRow(label, one(b) if base is not None else None, one(f)))
    t = d.facts.throughput
    if t.drop_pct is not None:
        note = "" if t.comparable_load else " (load differs: not comparable)"
        rows.append(StatRow("failing vs baseline", None, f"{fmt(-t.drop_pct, 1)} %{note}"))
    return tuple(rows)


# ---------------------------------------------------------------------------- config, tracebacks, coverage
def _config_rows(items: Mapping[str, SettingDiff]) -> tuple[ConfigRow, ...]:
    """Settings that changed, those with a known effect first."""
    rows = [ConfigRow(k, _arg(v.baseline), _arg(v.failing), v.effect or "") for k, v in items.items()]
    return tuple(sorted(rows, key=lambda c: (not c.effect, c.key)))


def _tracebacks(label: str, r: RunSummary) -> list[TracebackView]:
    out = []
    for exc in r.exceptions:
        ranks = [k for k in exc.get("ranks") or [] if k]
        out.append(TracebackView(
            label, exc.get("exception") or "(exception type not printed)",
            _head(exc.get("message")),
            ", ".join(ranks) if ranks else "rank not printed",
            exc.get("phase") or "unknown phase",
            _where(exc.get("file") or r.file, exc.get("first_line")),
            len(exc.get("occurrences") or []) or 1,
            exc.get("text") or ""))
    if not out and r.crash:  # a native abort or torn traceback: no exception record, show what was printed
        c = r.crash
        out.append(TracebackView(label, c.get("exception") or ("native abort" if c.get("native") else "fatal error"),
                                 _head(c.get("message")),
                                 ", ".join(c.get("ranks") or []) or "rank not printed", c.get("phase") or "unknown phase",
                                 _where(c.get("file") or r.file, c.get("line")), c.get("count") or 1, c.get("text") or ""))
    return out


def _head(message: str | None, limit: int = 300) -> str:
    first = (message or "").split("\n")[0]
    return first if len(first) <= limit else first[:limit].rstrip() + "…"


def _coverage(label: str, r: RunSummary, d: Diagnosis) -> CoverageView:
    cov = r.coverage or {}
    novel = {n.shape for n in d.facts.novel} if label == "failing" else set()
    shapes = tuple(ShapeView(int(s.get("count") or 0), str(s.get("first_line") or "?"), s.get("example") or s.get("shape") or "",
                             s.get("shape") in novel)
                   for s in cov.get("top_unrecognised") or [])
    return CoverageView(label, int(cov.get("lines_read") or 0), int(cov.get("lines_recognised") or 0),
                        fmt(cov.get("recognised_pct"), 1), int(cov.get("events") or 0), shapes)


# ---------------------------------------------------------------------------- plotly
def _div(fig: Any, div_id: str) -> Markup:
    """The chart's div and its Plotly.newPlot call; plotly.js itself is inlined once per page.

    plotly escapes '<', '>' and '/' in the figure JSON, so log text in hover labels stays data.
    """
    import plotly.io as pio

    return Markup(pio.to_html(fig, include_plotlyjs=False, full_html=False, config=PLOTLY_CONFIG,
                              div_id=div_id, default_width="100%"))
