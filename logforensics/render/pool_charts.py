"""The report's pictures of a run's state: each pool's use over the log, and a hang's
per-rank progress, each with the lines it rests on as text beside it.

Why pictures of their own: the pool that fills first bounds admission while another
still has room, and the rank that differs in a hang is the one whose sequence numbers
stop short; both are seen at a glance, not in a table. Every point comes from the run
summary (``pools.series``, ``pools.retractions``, ``hang.progress``) and the lines it
cites are listed as text under the picture, so a reader checks them in the log. Drawn
as plotly.js JSON like the other charts (``figure.Figure``): the page stays one offline file.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from ..diagnose.pools import NO_POOL, POOL_NAMES
from ..model.records import Cite, Pool, PoolPoint
from ..model.summary import Hang, RunSummary
from .figure import Figure
from .hangview import where as hang_where

#: A colour per pool, so a pool looks the same in every panel and its marks match its line.
POOL_COLOURS = {"full": "#1b9e77", "swa": "#d95f02", "mamba": "#7570b3", "hisparse_gpu": "#e7298a",
                "hisparse_cpu": "#66a61e", "c4": "#e6ab02", "c128": "#a6761d", "kv": "#666666"}
_OTHER_COLOUR = "#1f78b4"
INITIATOR_COLOUR = "#d62728"
RANK_COLOUR = "#1f77b4"
#: Ticks of the pool chart's line axis that also show the stamp of the point there.
_TICKS = 6


def _name(pool: str) -> str:
    return html.escape(POOL_NAMES.get(pool, pool), quote=False)


def _text(value: Any) -> str:
    """Log text for plotly's labels, which read a few tags and ``%{..}`` templates: as text."""
    return html.escape(str(value), quote=False).replace("%{", "%\u200b{")


def _at(ev: Cite | None, file: str | None) -> str:
    """``file:line (rank)`` of an evidence record, the file's name only."""
    if ev is None or ev.line is None:
        return ""
    return hang_where(ev, file) + (f" ({ev.rank})" if ev.rank else "")


def _pct(usage: Any) -> str:
    """A usage (0-1 of the pool's size) as percent; below 10 % with one decimal, so 0.4 % is not 0 %."""
    if not isinstance(usage, (int, float)):
        return "—"
    return f"{usage * 100:.1f} %" if 0 < usage < 0.1 else f"{usage * 100:.0f} %"


def _size(rec: Pool) -> str:
    if rec.size is None:
        return "not printed"
    text = f"{rec.size:,} {rec.unit or 'tokens'}"
    if rec.gib is not None:
        text += f", {rec.gib:.2f} GiB"
    return text


# ---------------------------------------------------------------------------- pools
@dataclass(frozen=True)
class PoolRow:
    """One pool of one run, each figure with the line it was read from."""

    pool: str
    name: str
    size: str               # "375,360 tokens, 8.03 GiB" or "not printed"
    size_at: str            # "file:line (rank)"
    peak: str               # "40 %" of the pool's size
    peak_at: str
    last: str
    last_at: str
    retractions: tuple[str, ...]    # "file:line (rank) at 97 %", the kept ones bound to this pool
    bound: int              # retractions bound to this pool in all (more than are kept on long logs)
    state: str = ""         # the invariant checker's "available, evictable of total", when printed
    state_at: str = ""


@dataclass(frozen=True)
class PoolRunView:
    run: str
    rows: tuple[PoolRow, ...]
    points: int             # points drawn over all pools (bounded: model.pools.SERIES_POINTS per pool)
    lines_per_point: int    # the widest bucket of log lines behind one point


def pool_views(runs: Sequence[tuple[str, RunSummary]]) -> tuple[PoolRunView, ...]:
    """Per run with pools: each pool's size, peak, last use and retractions, with their lines."""
    out = []
    for label, r in runs:
        p = r.pools
        if p is None or not p.pools:
            continue
        series = p.series or {}
        rows = []
        for pool, rec in p.pools.items():
            kept = tuple(f"{_at(b.at, r.file)} at {_pct(b.usage)}" for b in p.retractions if b.pool == pool)
            st = rec.state
            state = (f"{st.available:,} available, {st.evictable:,} evictable"
                     f"{'' if st.total is None else f' of {st.total:,}'} {rec.unit or 'tokens'}" if st else "")
            size_at = rec.size_at or (st.at if st and rec.size == st.total else None)
            rows.append(PoolRow(pool, _name(pool), _size(rec), _at(size_at, r.file),
                                _pct(rec.peak_usage), _at(rec.peak_at, r.file),
                                _pct(rec.last_usage), _at(rec.last_at, r.file),
                                kept, int(p.bound_by.get(pool, 0)), state, _at(st.at if st else None, r.file)))
        out.append(PoolRunView(label, tuple(rows), sum(len(s.points) for s in series.values()),
                               max((int(s.lines_per_point or 1) for s in series.values()), default=1)))
    return tuple(out)


def _ticks(points: Sequence[PoolPoint]) -> tuple[list[int], list[str]]:
    """A few of the points' lines as ticks, each with its stamp's time: the axis reads as time."""
    pts = sorted({p.line: p for p in points}.values(), key=lambda p: p.line)
    if not pts:
        return [], []
    step = max(1, (len(pts) - 1) // (_TICKS - 1)) if len(pts) > 1 else 1
    chosen = pts[::step][:_TICKS]
    if chosen[-1] is not pts[-1] and len(chosen) == _TICKS:
        chosen[-1] = pts[-1]
    elif chosen[-1] is not pts[-1]:
        chosen.append(pts[-1])
    text = [f"line {p.line}" + (f"<br>{str(p.ts).replace('T', ' ')[-8:]}" if p.ts else "")
            for p in chosen]
    return [p.line for p in chosen], text


def pool_chart(runs: Sequence[tuple[str, RunSummary]]) -> Markup | None:
    """Each pool's usage over the log (% of its size), one panel per run that printed any:
    a line per pool (the highest usage of each bucket of lines), its peak and last use
    marked, and each kept retraction marked on the pool that bound it. None when no run's
    batch lines print a pool's use."""
    panels = [(label, r.pools, r.file) for label, r in runs if r.pools is not None and r.pools.series]
    if not panels:
        return None
    fig = Figure.grid(rows=len(panels), cols=1, vertical_spacing=0.18,
                      titles=[_text(f"{label}: {os.path.basename(path or label)}")
                                        for label, _, path in panels])
    shown: set[str] = set()
    for row, (_, p, path) in enumerate(panels, start=1):
        file = os.path.basename(path or "")
        every: list[PoolPoint] = []
        for pool, s in (p.series or {}).items():
            pts = s.points
            if not pts:
                continue
            every += pts
            colour = POOL_COLOURS.get(pool, _OTHER_COLOUR)
            rec = p.pools.get(pool, NO_POOL)
            name = f"{_name(pool)} pool (size {_size(rec)})"
            fig.add(dict(
                type="scatter", x=[q.line for q in pts], y=[q.usage * 100 for q in pts], mode="lines+markers",
                name=name, legendgroup=pool, showlegend=name not in shown, meta=f"series:{pool}",
                line={"color": colour, "width": 1.5}, marker={"size": 4, "color": colour},
                customdata=[[_text(f"{file}:{q.line}"), _text(q.rank or "-"), q.ts or "",
                             "" if q.used is None else f", {q.used:,} {rec.unit or 'tokens'} used"]
                            for q in pts],
                hovertemplate=f"{_name(pool)}: %{{y:.0f}} %%{{customdata[3]}}<br>%{{customdata[0]}} "
                              "%{customdata[1]} %{customdata[2]}<extra></extra>"), row=row, col=1)
            shown.add(name)
            for key, what, symbol, at, usage in (("peak", "peak", "star", rec.peak_at, rec.peak_usage),
                                                 ("last", "last use", "diamond", rec.last_at, rec.last_usage)):
                if at is None or at.line is None or usage is None:
                    continue
                fig.add(dict(
                    type="scatter", x=[at.line], y=[usage * 100], mode="markers", name=f"{_name(pool)} {what}",
                    legendgroup=pool, showlegend=False, meta=f"{key}:{pool}",
                    marker={"symbol": symbol, "size": 11, "color": colour, "line": {"width": 1, "color": "#263238"}},
                    hovertemplate=f"{_name(pool)} {what}: {_pct(usage)}<br>{_text(_at(at, path))}<extra></extra>"),
                    row=row, col=1)
        marks = [(b.pool, b.at, b.usage) for b in p.retractions if b.pool and b.at and b.at.line]
        for pool in dict.fromkeys(m[0] for m in marks):
            mine = [(at, usage) for name, at, usage in marks if name == pool]
            name = f"retraction bound by the {_name(pool)} pool"
            fig.add(dict(
                type="scatter", x=[at.line for at, _ in mine], y=[(usage or 0) * 100 for _, usage in mine], mode="markers",
                name=name, legendgroup=f"retract-{pool}", showlegend=name not in shown, meta=f"retraction:{pool}",
                marker={"symbol": "x-thin", "size": 14, "color": POOL_COLOURS.get(pool, _OTHER_COLOUR),
                        "line": {"width": 3, "color": POOL_COLOURS.get(pool, _OTHER_COLOUR)}},
                customdata=[_text(_at(at, path)) for at, _ in mine],
                hovertemplate=f"retraction at %{{customdata}}: {_name(pool)} pool at %{{y:.0f}} %<extra></extra>"),
                row=row, col=1)
            shown.add(name)
        every += [PoolPoint(at.line, 0.0) for _, at, _ in marks if at.line is not None]
        axis = "x" if row == 1 else f"x{row}"
        fig.layout.setdefault("shapes", []).append(  # the pool's size: 100 %
            {"type": "line", "xref": f"{axis} domain", "x0": 0, "x1": 1, "yref": axis.replace("x", "y"), "y0": 100,
             "y1": 100, "line": {"color": "#90a4ae", "dash": "dash", "width": 1}})
        tickvals, ticktext = _ticks(every)
        fig.axis("x", row, 1, title="log line (and its time): the log's order", tickvals=tickvals,
                 ticktext=ticktext)
        top = max([q.usage for s in (p.series or {}).values() for q in s.points], default=1.0)
        fig.axis("y", row, 1, title="% of the pool's size", range=[0, max(105.0, top * 100 + 5)])
    fig.layout.update(height=330 * len(panels) + 90,
                      margin={"l": 60, "r": 20, "t": 40, "b": 110},
                      legend={"orientation": "h", "yanchor": "top", "y": -80 / (330 * len(panels)), "x": 0})
    return fig.div("pool-chart")


# ---------------------------------------------------------------------------- hang
def _num(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _pad(seqs: Sequence[int]) -> int:
    return max(1, (max(seqs) - min(seqs)) // 8)


def hang_chart(label: str, h: Hang, file: str | None) -> Markup | None:
    """One row per rank: its last completed and last enqueued sequence numbers joined by the
    work in flight, its last phase written beside them; the rank that differs drawn in red
    and named on its row, the collective the ranks are stuck on a dashed line. With no
    sequence number in the log, each rank's last phase alone. None without progress."""
    progress = [p for p in h.progress if p.rank]
    if not progress:
        return None
    init = h.initiator.rank if h.initiator else None
    ranks = [p.rank for p in progress]
    ticks = [f"<b>{_text(rank)} (initiator)</b>" if rank == init else _text(rank) for rank in ranks]
    seqs = [v for p in progress for v in (_num(p.last_completed), _num(p.last_enqueued)) if v is not None]
    fig = Figure()
    for rank, tick, p in zip(ranks, ticks, progress):
        colour = INITIATOR_COLOUR if rank == init else RANK_COLOUR
        ev = _text(", ".join(hang_where(e, file) for e in p.evidence if e.line is not None))
        done, enq = _num(p.last_completed), _num(p.last_enqueued)
        phase = _text(p.last_phase or "")
        name = f"{rank} (initiator)" if rank == init else rank
        shown_rank = _text(rank)
        if seqs:
            xs = [x for x in (done, enq) if x is not None]
            if not xs:
                xs = [min(seqs)]
            fig.add(dict(
                type="scatter", x=xs, y=[tick] * len(xs), mode="lines+markers", name=name, showlegend=False, meta=f"rank:{rank}",
                line={"color": colour, "width": 6}, marker={"size": 12, "color": colour,
                                                           "symbol": ["circle", "circle-open"][:len(xs)]},
                hovertemplate=f"{shown_rank}: last completed {done if done is not None else '?'}, last enqueued "
                              f"{enq if enq is not None else '?'}<br>{ev}<extra></extra>"))
            fig.annotate(x=min(seqs) - _pad(seqs), y=tick, text=f"{phase} ({ev})" if ev else phase,
                         showarrow=False, xanchor="left", yshift=16, font={"color": colour, "size": 11})
        else:
            fig.add(dict(type="scatter", x=[0], y=[tick], mode="markers", name=name, showlegend=False, meta=f"rank:{rank}",
                                     marker={"size": 12, "color": colour},
                                     hovertemplate=f"{shown_rank}: {phase}<br>{ev}<extra></extra>"))
            fig.annotate(x=0, y=tick, text=f"{phase} ({ev})" if ev else phase, showarrow=False,
                         xanchor="left", xshift=12, font={"color": colour, "size": 11})
    for s in h.stuck_on:
        seq = _num(s.seq)
        if s.what == "collective" and seq is not None and seqs:
            fig.vline(seq, line={"color": "#616161", "dash": "dash", "width": 1.5})
            fig.annotate(x=s.seq, y=1, yref="paper", yanchor="bottom", showarrow=False,
                         text=f"stuck on {_text(s.op or 'collective')} seq {s.seq}"
                              + (f" (PG {s.pg})" if s.pg is not None else ""),
                         font={"color": "#424242", "size": 11})
    if seqs:
        fig.axis("x", title="collective sequence number (● last completed, ○ last enqueued)",
                 range=[min(seqs) - _pad(seqs), max(seqs) + _pad(seqs)], tickformat="d",
                 tick0=min(seqs), dtick=max(1, -(-(max(seqs) - min(seqs)) // 8)))
    else:
        fig.axis("x", visible=False, range=[-0.1, 1])
        fig.layout.update(title={"text": "the log shows no collective sequence number: each rank's last phase",
                                 "font": {"size": 12}, "x": 0})
    fig.axis("y", type="category", categoryorder="array", categoryarray=list(reversed(ticks)))
    fig.layout.update(height=100 + 60 * len(ranks), showlegend=False,
                      margin={"l": 140, "r": 20, "t": 50, "b": 50 if seqs else 10})
    return fig.div(f"hang-chart-{label}")
