"""The serving summary's analysis of its series: change points, levels, storms, a full KV pool.

Why apart from the observer (``serving.py``): observing is the hot path and must merge
exactly across parts of a log; this is read once per summary, over the few thousand
windows a series has, and needs nothing but the points. Binary segmentation on a
two-sample t statistic finds where a figure moved to a new level; neighbouring levels
that differ too little are merged, so that a ramp is one change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from operator import add, mul, sub, truediv
from typing import Any

from .clock import iso, seconds

#: A change must move a figure by this fraction of the larger level...
_MIN_REL_CHANGE = 0.4
#: ...with this two-sample t statistic, over segments of at least this many windows.
_MIN_T = 4.0
_MIN_SEGMENT = 3
_MAX_CHANGES = 6
#: Retractions within this many seconds of each other form one storm...
STORM_WINDOW_S = 60.0
#: ...when there are at least this many.
STORM_MIN = 5
#: A KV pool this full (token usage, 0-1), with requests queued, in at least this many windows, is under pressure.
KV_FULL = 0.95
KV_PRESSURE_MIN_WINDOWS = 2
#: Runs of KV pressure kept (the latest): what ``watch`` follows.
_KEEP_RUNS = 8
#: Points a returned series has at most (the chart's resolution).
_MAX_POINTS = 720

#: A series: (second, value, first line) per window.
Points = list[tuple[float, float, int]]


@dataclass(frozen=True)
class Change:
    """A figure moved to a new level: ``before`` and ``after`` are the levels' means."""

    metric: str
    at: str
    line: int
    before: float
    after: float
    ratio: float | None
    recovered: bool
    context: list[dict[str, Any]] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "at": self.at, "line": self.line, "before": round(self.before, 3),
                "after": round(self.after, 3), "ratio": None if self.ratio is None else round(self.ratio, 3),
                "recovered": self.recovered, "context": self.context, "evidence": self.evidence}


def changes(figure: str, pts: Points, texts: Mapping[int, tuple[str, str]], dated: bool,
            file: str | None) -> list[Change]:
    """The points where ``figure`` moved to a new level, each citing the record that opens it
    (``texts``: first line of a window -> (rank, that record's text))."""
    values = [v for _, v, _ in pts]
    cuts = _merge_small(values, sorted(_segment(values, 0, len(values), figure)))
    bounds = [0] + cuts + [len(values)]
    means = [_mean(values[a:b]) for a, b in zip(bounds, bounds[1:])]
    out = []
    for i, cut in enumerate(cuts):
        before, after = means[i], means[i + 1]
        later = means[i + 1:]
        if after < before:
            recovered = any(m >= before * (1 - _MIN_REL_CHANGE / 2) for m in later[1:])
        else:
            recovered = any(m <= before * (1 + _MIN_REL_CHANGE / 2) for m in later[1:])
        t, _, line = pts[cut]
        rank, text = texts.get(line, (None, None))
        out.append(Change(figure, iso(t, dated), line, before, after,
                          (after / before) if before else None, recovered,
                          evidence={"file": file, "line": line, "rank": None if rank == "-" else rank,
                                    "text": text}))
    return out


def context(change: Change, changes: Sequence[Change], retractions: Sequence[Mapping[str, Any]],
            graph_off: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """What the log shows just before a change: other figures that moved at or before it,
    the first retraction, the first window at a full KV pool, CUDA graphs switched off."""
    out: list[dict[str, Any]] = []
    at = seconds(change.at) or 0.0
    for other in changes:
        if other is change or other.metric == change.metric:
            continue
        t = seconds(other.at) or 0.0
        if at - 120.0 <= t <= at + 2.0 and other.line <= change.line:
            out.append({"what": "change", "metric": other.metric, "at": other.at, "line": other.line,
                        "before": round(other.before, 3), "after": round(other.after, 3)})
    first = next((r for r in retractions
                  if (seconds(r.get("ts")) or -1e18) <= at + 1.0), None)
    if first is not None and at - (seconds(first.get("ts")) or at) <= 600.0:
        out.append({"what": "retraction", **{k: first[k] for k in ("line", "ts", "rank", "text")}})
    if graph_off and (seconds(graph_off.get("ts")) or 1e18) <= at + 1.0:
        out.append({"what": "cuda_graph_off", **{k: graph_off[k] for k in ("line", "ts", "rank", "text")}})
    return out


def storms(cells: Sequence[tuple[float, int, float]], dated: bool) -> list[dict[str, Any]]:
    """Runs of retractions, each within STORM_WINDOW_S of the previous, of STORM_MIN or more
    (``cells``: sorted (second, first line, retractions) per window)."""
    found: list[dict[str, Any]] = []
    run: list[tuple[float, int, float]] = []
    for t, line, n in list(cells) + [(math.inf, 0, 0.0)]:
        if run and t - run[-1][0] > STORM_WINDOW_S:
            count = int(sum(x[2] for x in run))
            if count >= STORM_MIN:
                found.append({"start": iso(run[0][0], dated), "end": iso(run[-1][0], dated),
                              "first_line": int(min(x[1] for x in run)), "records": count,
                              "duration_s": run[-1][0] - run[0][0]})
            run = []
        if t != math.inf:
            run.append((t, int(line), n))
    return found


def kv_full(usage: Points, queue: Points, dated: bool,
            texts: Mapping[int, tuple[str, str]]) -> dict[str, Any] | None:
    """KV pressure: the windows with token usage >= KV_FULL in which requests waited (#queue-req
    above 0), from the first; at least KV_PRESSURE_MIN_WINDOWS of them. A full pool with an
    empty queue is not pressure: every request that came is running, none waits for room."""
    qs = {t: v for t, v, _ in queue}
    full = [(t, v, line) for t, v, line in usage if v >= KV_FULL and (qs.get(t) or 0) > 0]
    if len(full) < KV_PRESSURE_MIN_WINDOWS:
        return None
    start = full[0]
    q0 = qs[start[0]]
    q1 = max(qs[t] for t, _, _ in full)
    return {"at": iso(start[0], dated), "line": start[2], "text": texts.get(start[2], (None, None))[1],
            "token_usage": round(start[1], 3),
            "windows": len(full), "queue_start": q0, "queue_max": q1,
            "queue_grew": q1 > q0, "runs": _pressure_runs(usage, qs, dated, texts)}


def _pressure_runs(usage: Points, qs: Mapping[float, float], dated: bool,
                   texts: Mapping[int, tuple[str, str]]) -> list[dict[str, Any]]:
    """The last _KEEP_RUNS runs of consecutive windows under KV pressure, each with its first
    window (``line``, ``rank``, ``at``) and the window that eased it (``eased``: the first after
    it with token usage under KV_FULL or no request queued; None while the pressure holds):
    what ``watch`` reports as the pressure beginning and ending."""
    def rank(line: int) -> str | None:
        r = texts.get(line, (None, None))[0]
        return None if r in (None, "-") else r

    runs: list[dict[str, Any]] = []
    held = False
    for t, v, line in usage:
        now = v >= KV_FULL and (qs.get(t) or 0) > 0
        if now and not held:
            runs.append({"line": line, "rank": rank(line), "at": iso(t, dated), "token_usage": round(v, 3),
                         "queue_req": qs.get(t) or 0, "eased": None})
        elif held and not now:
            runs[-1]["eased"] = {"line": line, "rank": rank(line), "at": iso(t, dated),
                                 "token_usage": round(v, 3), "queue_req": qs.get(t) or 0}
        held = now
    return runs[-_KEEP_RUNS:]


def gap(pts: Points, width: int) -> float:
    """Seconds without decode records after which a chart breaks its line (an idle server
    prints no decode batches): five typical intervals, at least 30 s."""
    if len(pts) < 3:
        return float(max(30, 5 * width))
    steps = sorted(b[0] - a[0] for a, b in zip(pts, pts[1:]))
    return float(max(30.0, 5 * steps[len(steps) // 2]))


def levels(pts: Points) -> dict[str, Any]:
    """A series' extent: windows, min, max, mean."""
    vals = [v for _, v, _ in pts]
    return {"windows": len(vals), "min": round(min(vals), 4), "max": round(max(vals), 4),
            "mean": round(_mean(vals), 4)}


def downsample(points: list[Any]) -> list[Any]:
    """At most _MAX_POINTS points, every n-th kept (the chart's resolution)."""
    if len(points) <= _MAX_POINTS:
        return points
    step = math.ceil(len(points) / _MAX_POINTS)
    return points[::step]


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _segment(values: Sequence[float], a: int, b: int, figure: str, depth: int = 0) -> list[int]:
    """Binary segmentation: the split of values[a:b] with the largest two-sample t statistic,
    kept when the levels differ enough, then the same on both sides."""
    n = b - a
    if n < 2 * _MIN_SEGMENT or depth > 4:
        return []
    best, best_t = _best_split(values, a, b)
    if best is None or best_t < _MIN_T:
        return []
    cut = a + best
    found = [cut] + _segment(values, a, cut, figure, depth + 1) + _segment(values, cut, b, figure, depth + 1)
    return sorted(found)[:_MAX_CHANGES]


def _best_split(values: Sequence[float], a: int, b: int) -> tuple[int | None, float]:
    """The split of values[a:b] with the largest t statistic among those that move the level
    enough (the first of equal ones). Every split's arithmetic is that of one float at a time,
    run a column at a time (``map`` over the splits), which is several times faster than a
    loop over them; the prefix sums are sequential (``accumulate``)."""
    n = b - a
    xs = values[a:b]
    prefix = list(accumulate(xs, initial=0.0))
    sq = list(accumulate(map(mul, xs, xs), initial=0.0))
    lo, hi = _MIN_SEGMENT, n - _MIN_SEGMENT + 1
    if hi <= lo:
        return None, 0.0
    n1, n2 = range(lo, hi), range(n - lo, n - hi, -1)
    p1, s1 = prefix[lo:hi], sq[lo:hi]
    m1 = list(map(truediv, p1, n1))
    m2 = list(map(truediv, map(sub, repeat(prefix[n]), p1), n2))
    v1 = map(max, map(sub, map(truediv, s1, n1), map(mul, m1, m1)), repeat(0.0))
    v2 = map(max, map(sub, map(truediv, map(sub, repeat(sq[n]), s1), n2), map(mul, m2, m2)), repeat(0.0))
    top = list(map(max, map(abs, m1), map(abs, m2)))
    floor = list(map(add, map(pow, map(mul, top, repeat(0.02)), repeat(2)), repeat(1e-12)))  # noise of 2% of the level
    se = map(math.sqrt, map(add, map(truediv, map(max, v1, floor), n1), map(truediv, map(max, v2, floor), n2)))
    diff = list(map(abs, map(sub, m1, m2)))
    t = list(map(truediv, diff, se))
    # a split counts where it moves the level enough; the first of the largest t (above 0)
    scores = [x if top_ and d / top_ >= _MIN_REL_CHANGE and x > 0.0 else -1.0 for x, top_, d in zip(t, top, diff)]
    best_t = max(scores)
    if best_t <= 0.0:
        return None, 0.0
    return lo + scores.index(best_t), best_t


def _merge_small(values: Sequence[float], cuts: list[int]) -> list[int]:
    """Drop the cuts between neighbouring segments whose levels differ by less than
    _MIN_REL_CHANGE (a ramp cut into steps is one change, from its start to its end)."""
    cuts = list(cuts)
    while cuts:
        bounds = [0] + cuts + [len(values)]
        means = [_mean(values[a:b]) for a, b in zip(bounds, bounds[1:])]
        rel = [abs(b - a) / max(abs(a), abs(b)) if max(abs(a), abs(b)) else 0.0 for a, b in zip(means, means[1:])]
        worst = min(range(len(rel)), key=rel.__getitem__)
        if rel[worst] >= _MIN_REL_CHANGE:
            break
        del cuts[worst]
    return cuts
