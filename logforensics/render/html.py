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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from ..diagnose.budget import Advice
from ..diagnose.compiled import bytecode_cache
from ..diagnose.conclusion import Conclusion
from ..diagnose.engine import Diagnosis
from ..diagnose.facts import plain
from ..diagnose.rulespec import SEVERITIES
from ..diagnose.settings import SettingDiff
from ..events import PHASES
from ..model.failures import native_exception_words
from ..model.records import NO_QUANTILES, Quantiles
from ..model.run import RunSummary
from ..outputs import write_output
from ..units import fmt, gib
from ..version import __version__
from .beside import Line, beside_lines
from .charts import (
    _ordered_ranks,
    _rank_crashes,
    _runs,
    _Span,
    _where,
    memory_chart,
    phase_spans,
    throughput_chart,
    timeline_chart,
)
from .figure import plotly_js
from .hangview import HangView, hang_view
from .pool_charts import PoolRunView, hang_chart, pool_chart, pool_views
from .serving_charts import throughput_chart as serving_throughput_chart

TEMPLATE_PACKAGE = "logforensics.reports"
TEMPLATE = "report.html.j2"
STYLESHEET = "report.css"

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
    confidence: str = "low"
    id: str = ""                            # the finding's stable id (engine.finding_id)


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
    conclusion: Conclusion                  # the verdict's contract: explanation, confidence, checks
    runs: tuple[RunView, ...]               # baseline (when given), then failing
    has_baseline: bool                      # False: single-run diagnosis, no comparison columns
    counts: tuple[tuple[str, int], ...]     # findings per severity, worst first
    findings: tuple[FindingView, ...]       # in the engine's order (worst first)
    timeline_chart: Markup | None           # phases per rank, one panel per run
    timeline_unit: str                      # what the timeline's x axis counts
    phases: tuple[str, ...]                 # column order of the phase grid
    phase_rows: tuple[PhaseRow, ...]        # the grid: rank by rank, baseline row above failing row
    crashes: tuple[CrashMark, ...]          # which ranks died, where, with what
    hangs: tuple[tuple[str, HangView, Markup | None], ...]  # per run that hung: per-rank progress (table,
                                            # picture), the rank that differs
    memory_chart: Markup | None             # stacked GiB per rank, one panel per run
    pool_chart: Markup | None               # each pool's use over the log, one panel per run
    pools: tuple[PoolRunView, ...]          # per run: each pool's size, peak, last use, retractions, with lines
    budget_rows: tuple[BudgetRow, ...]      # the KV formula's inputs and outputs
    advice: AdviceView | None               # facts["budget"]["advice"], when there is any
    throughput_chart: Markup | None         # decode tok/s over time
    throughput_stats: tuple[StatRow, ...]   # medians of both runs
    server_args: tuple[ConfigRow, ...]      # changed server arguments, known effects first
    env: tuple[ConfigRow, ...]              # changed environment variables
    beside: tuple[tuple[str, tuple[Line, ...]], ...]  # per run: what the files beside its logs say
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
                       undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                       bytecode_cache=bytecode_cache())


@lru_cache(maxsize=1)
def _stylesheet() -> str:
    return resources.files(TEMPLATE_PACKAGE).joinpath(STYLESHEET).read_text(encoding="utf-8")


def build_context(d: Diagnosis) -> ReportContext:
    runs = _runs(d)
    timeline, unit = timeline_chart(runs, d)
    memory = memory_chart(d)
    pools = pool_chart(runs)
    hangs = tuple((label, hang_view(r.hang, r.file), hang_chart(label, r.hang, r.file))
                  for label, r in runs if r.hang)
    tput = serving_throughput_chart(runs) or throughput_chart(runs)
    charts = [c for c in (timeline, memory, pools, tput, *(h[2] for h in hangs)) if c is not None]
    worst = d.worst() or "ok"
    return ReportContext(
        title=f"logforensics: {os.path.basename(d.failing.file or 'failing run')}",
        version=__version__,
        verdict=d.verdict,
        worst=worst,
        conclusion=d.conclusion,
        runs=tuple(_run_view(label, r) for label, r in runs),
        has_baseline=d.baseline is not None,
        counts=tuple((s, n) for s in SEVERITIES if (n := sum(f.severity == s for f in d.findings))),
        findings=tuple(_finding_view(f) for f in d.findings),
        timeline_chart=timeline,
        timeline_unit=unit,
        phases=PHASES,
        phase_rows=phase_rows(runs, d),
        crashes=tuple(m for label, r in runs for m in _crash_marks(label, r)),
        hangs=hangs,
        memory_chart=memory,
        pool_chart=pools,
        pools=pool_views(runs),
        budget_rows=budget_rows(d),
        advice=_advice(d.facts.budget.advice),
        throughput_chart=tput,
        throughput_stats=throughput_stats(d),
        server_args=_config_rows(d.facts.config.server_args),
        env=_config_rows(d.facts.config.env),
        beside=tuple((label, tuple(beside_lines(r.artefacts))) for label, r in runs if r.artefacts),
        tracebacks=tuple(t for label, r in reversed(runs) for t in _tracebacks(label, r)),
        coverage=tuple(_coverage(label, r, d) for label, r in runs),
        css=Markup(_stylesheet()),
        plotly_js=Markup(plotly_js()) if charts else Markup(""),
    )


def _arg(value: Any) -> str:
    """A server_args / env value; '(not set)' keeps an absent key distinct from an empty string."""
    if value is None:
        return "(not set)"
    if isinstance(value, str):
        return repr(value) if value == "" or value != value.strip() else value
    return fmt(value, 4, missing="—") if isinstance(value, float) else str(value)


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
    return FindingView(f.rule, severity, f.title, lines, evidence, f.confidence, f.id)


def _crash_marks(label: str, r: RunSummary) -> list[CrashMark]:
    marks = []
    for rank, c in _rank_crashes(r).items():
        where = _where(c["file"], c["line"]) if c["line"] is not None else "(line not known)"
        marks.append(CrashMark(label, rank, c["phase"] or "unknown phase", where, c["exception"] or "fatal error"))
    if r.crash and not marks:
        marks.append(CrashMark(label, "unknown rank", r.crash.phase or "unknown phase",
                               _where(r.crash.file or r.file, r.crash.line),
                               r.crash.exception or (native_exception_words(r.crash.source) if r.crash.native else "fatal error")))
    return marks


def _duration(span: _Span, unit: str) -> str:
    if unit == "s":
        return f"{span.end - span.start:.0f} s" if span.end - span.start >= 1 else "<1 s"
    return f"lines {span.first_line}–{span.last_line}" if span.first_line != span.last_line else f"line {span.first_line}"


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
        rows.append(BudgetRow(label, how, _budget_cell(key, b) if base is not None else None, _budget_cell(key, f)))
    return tuple(rows)


def _budget_cell(key: str, value: Any) -> str:
    if key in _NOT_GIB:
        return fmt(value, 0 if key == "cell_bytes" else 3, missing="—")
    return gib(value, missing="—")


def _advice(a: Advice) -> AdviceView | None:
    if not (a.kind or a.reasoning):
        return None
    flags = tuple(f"--{k.replace('_', '-')} {fmt(v, missing='—')}" for k, v in a.settings.items())
    return AdviceView(str(a.kind or "").replace("_", " "), flags, tuple(str(x) for x in a.reasoning))


def throughput_stats(d: Diagnosis) -> tuple[StatRow, ...]:
    rows = []
    base = d.baseline.throughput if d.baseline else None
    fail = d.failing.throughput
    for key, label in (("decode_gen_tok_s", "decode tok/s (median)"), ("prefill_input_tok_s", "prefill tok/s (median)"),
                       ("running_req", "running requests (median)"), ("accept_len", "accept length (median)")):
        b = getattr(base, key) if base is not None else NO_QUANTILES
        f = getattr(fail, key)
        if not b.count and not f.count:
            continue
        def one(s: Quantiles) -> str:
            return f"{fmt(s.median, 1, missing='—')} (n={s.count})" if s.count else "—"
        rows.append(StatRow(label, one(b) if base is not None else None, one(f)))
    t = d.facts.throughput
    if t.drop_pct is not None:
        note = "" if t.comparable_load else " (load differs: not comparable)"
        rows.append(StatRow("failing vs baseline", None, f"{fmt(-t.drop_pct, 1, missing='—')} %{note}"))
    return tuple(rows)


# ---------------------------------------------------------------------------- config, tracebacks, coverage
def _config_rows(items: Mapping[str, SettingDiff]) -> tuple[ConfigRow, ...]:
    """Settings that changed, those with a known effect first."""
    rows = [ConfigRow(k, _arg(v.baseline), _arg(v.failing), v.effect or "") for k, v in items.items()]
    return tuple(sorted(rows, key=lambda c: (not c.effect, c.key)))


def _tracebacks(label: str, r: RunSummary) -> list[TracebackView]:
    out = []
    for exc in r.exceptions:
        ranks = [k for k in exc.ranks or [] if k]
        out.append(TracebackView(
            label, exc.exception or "(exception type not printed)",
            _head(exc.message),
            ", ".join(ranks) if ranks else "rank not printed",
            exc.phase or "unknown phase",
            _where(exc.file or r.file, exc.first_line),
            len(exc.occurrences or []) or 1,
            exc.text or ""))
    if not out and r.crash:  # a native abort or torn traceback: no exception record, show what was printed
        c = r.crash
        out.append(TracebackView(label, c.exception or (native_exception_words(c.source) if c.native else "fatal error"),
                                 _head(c.message),
                                 ", ".join(c.ranks or []) or "rank not printed", c.phase or "unknown phase",
                                 _where(c.file or r.file, c.line), c.count or 1, c.text or ""))
    return out


def _head(message: str | None, limit: int = 300) -> str:
    first = (message or "").split("\n")[0]
    return first if len(first) <= limit else first[:limit].rstrip() + "…"


def _coverage(label: str, r: RunSummary, d: Diagnosis) -> CoverageView:
    cov = r.coverage
    novel = {n.shape for n in d.facts.novel} if label == "failing" else set()
    shapes = tuple(ShapeView(int(s.count or 0), str(s.first_line or "?"), s.example or s.shape or "", s.shape in novel)
                   for s in cov.top_unrecognised)
    return CoverageView(label, int(cov.lines_read or 0), int(cov.lines_recognised or 0),
                        fmt(cov.recognised_pct, 1, missing="—"), int(cov.events or 0), shapes)
