"""Serving health from the batch lines: stalls, a prefill/decode seesaw, DP-rank imbalance,
idle time; what a terminal monitor reads from /metrics, read from the log with its lines.

Why apart from the observer (``serving.py``): like the change points (``changepoints.py``)
this is read once per summary over the few thousand windows of the series and needs only
their points: (second of the window's first record, value, first line). Windows are
aligned by their key, ``int(second // width)``. A window without batches is idle: it has
no point in any series, so it is never a low value; a decode window more than ``gap``
seconds after the decode record before it (idle time, or prefill batches alone) is left out
too, as its "gen throughput" divides the tokens since that record by seconds in which
nothing decoded. A change of level across idle time is a new load, not a collapse
(``mark_idle``).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from .clock import iso

#: A decode window stalls below this share of the running median of decode throughput...
STALL_RATIO = 0.25
#: ...while a prefill batch ran in it and #running-req held at least this share of its median.
STALL_LOAD_RATIO = 0.5
#: The running median is over this many decode windows before the one judged, and needs at least
#: STALL_HISTORY of them.
MEDIAN_WINDOWS = 30
STALL_HISTORY = 5
#: Seesaw: a window in which prefill starves decode (a prefill batch, decode below this share of
#: its running median, or none) alternates with one in which decode starves prefill (decode at or
#: above it, requests queued, no prefill batch) this many times or more in a row.
SEESAW_RATIO = 0.5
SEESAW_MIN_SWITCHES = 4
#: DP imbalance: a figure is a signal when one group's median share of the groups' mean, over
#: the windows in which every group printed it and the mean is above 0, is at least this...
IMBALANCE_RATIO = 1.5
#: ...over at least this many windows; the imbalance needs IMBALANCE_SIGNALS signals naming the
#: same group as the heaviest.
IMBALANCE_MIN_WINDOWS = 5
IMBALANCE_SIGNALS = 2
IMBALANCE_FIGURES = ("running_req", "token_usage", "queue_req")
#: Episodes kept per finding (the rest counted).
_KEEP = 8

#: A series: (second, value, first line) per window.
Points = Sequence[tuple[float, float, int]]
Texts = Mapping[int, tuple[str, str]]


def thresholds() -> dict[str, Any]:
    """The thresholds, as the summary states them beside the findings."""
    return {"stall_ratio": STALL_RATIO, "stall_load_ratio": STALL_LOAD_RATIO, "median_windows": MEDIAN_WINDOWS,
            "seesaw_ratio": SEESAW_RATIO, "seesaw_min_switches": SEESAW_MIN_SWITCHES,
            "imbalance_ratio": IMBALANCE_RATIO, "imbalance_min_windows": IMBALANCE_MIN_WINDOWS,
            "imbalance_signals": IMBALANCE_SIGNALS}


def health(width: int, gap: float, dated: bool, file: str | None, series: Mapping[str, Points], prefill: Points,
           prefill_running: Points, groups: Mapping[str, Mapping[str, Points]], texts: Texts,
           changes: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary's ``serving.health``: idle stretches, stalls, a seesaw, DP imbalance; and
    each of ``changes`` (the summary's change points) that idle time opens is marked (``mark_idle``).

    ``series``: the combined series by figure; ``prefill``: the windows with a prefill batch
    (any figure), ``prefill_running``: the #running-req its batches printed; ``groups``: figure -> rank -> that rank's series, one rank per attention-DP group."""
    decode = series.get("gen_tok_s") or []
    running = series.get("running_req") or []
    queue = series.get("queue_req") or []
    idle = idle_gaps(decode, prefill, gap)
    mark_idle(changes, series, idle)
    # decode windows whose throughput counts seconds without decoding: the log's first, and each
    # one more than ``gap`` after the decode record before it (idle time, or prefill batches alone)
    starts = [decode[0][0]] if decode else []
    starts += [b[0] for a, b in zip(decode, decode[1:]) if b[0] - a[0] > gap]
    ctx = _Context(width, dated, file, texts)
    judged = _judged(width, decode, running, set(starts))
    return {
        "thresholds": thresholds(),
        "idle": {"count": len(idle), "seconds": round(sum(g["seconds"] for g in idle), 1),
                 "gaps": [{"after_line": g["after_line"], "line": g["line"], "seconds": g["seconds"],
                           "at": ctx.at(g["resumed"])} for g in idle[:_KEEP]]},
        "stalls": stalls(ctx, judged, prefill, prefill_running),
        "seesaw": seesaw(ctx, judged, prefill, queue, idle),
        "imbalance": imbalance(ctx, groups),
    }


class _Context:
    """What every finding needs to cite its records: the window width, the clock, the texts."""

    def __init__(self, width: int, dated: bool, file: str | None, texts: Texts) -> None:
        self.width, self.dated, self.file, self.texts = width, dated, file, texts

    def key(self, sec: float) -> int:
        return int(sec // self.width)

    def at(self, sec: float) -> str:
        return iso(sec, self.dated)

    def evidence(self, line: int, rank: str | None = None, text: bool = True) -> dict[str, Any]:
        """A record by its line; ``text=False`` for a record that is not the first of its window
        in a combined series: whether a window keeps its text depends on how the series was
        combined, so it is never cited."""
        known, said = self.texts.get(line, (rank, None))
        label = rank if rank is not None else known
        return {"file": self.file, "line": line, "rank": None if label in (None, "-") else label,
                "text": said if text else None}


def idle_gaps(decode: Points, prefill: Points, gap: float) -> list[dict[str, Any]]:
    """Stretches longer than ``gap`` seconds without a batch record of either kind."""
    pts = sorted(list(decode) + list(prefill), key=lambda p: (p[0], p[2]))
    out = []
    for a, b in zip(pts, pts[1:]):
        if b[0] - a[0] > gap:
            out.append({"after_line": a[2], "line": b[2], "seconds": round(b[0] - a[0], 1), "resumed": b[0]})
    return out


def mark_idle(changes: list[dict[str, Any]], series: Mapping[str, Points], idle: Sequence[Mapping[str, Any]]) -> None:
    """Mark each change whose first window is the first after idle time (``after_idle_s``):
    the figure's level moved while nothing was served, with a new load, not by a collapse."""
    for c in changes:
        pts = series.get(c["metric"]) or []
        i = next((i for i, p in enumerate(pts) if p[2] == c["line"]), None)
        if not i:
            continue
        before, after = pts[i - 1][2], pts[i][2]
        gaps = [g["seconds"] for g in idle if before < g["line"] <= after]
        if gaps:
            c["after_idle_s"] = max(gaps)


class _Window:
    """A decode window judged against the running medians before it."""

    __slots__ = ("sec", "tok_s", "line", "median", "running", "running_median")

    def __init__(self, sec: float, tok_s: float, line: int, median: float, running: float | None,
                 running_median: float | None) -> None:
        self.sec, self.tok_s, self.line, self.median = sec, tok_s, line, median
        self.running, self.running_median = running, running_median


def _judged(width: int, decode: Points, running: Points, resumed: set[float]) -> list[_Window]:
    """The decode windows with STALL_HISTORY windows before them (the first after idle time
    left out, and out of the medians), each with the running medians of the MEDIAN_WINDOWS before it."""
    run = {int(t // width): v for t, v, _ in running}
    past: deque[float] = deque(maxlen=MEDIAN_WINDOWS)
    past_run: deque[float] = deque(maxlen=MEDIAN_WINDOWS)
    out = []
    for t, v, line in decode:
        if t in resumed:
            continue
        r = run.get(int(t // width))
        if len(past) >= STALL_HISTORY:
            out.append(_Window(t, v, line, statistics.median(past), r,
                               statistics.median(past_run) if past_run else None))
        past.append(v)
        if r is not None:
            past_run.append(r)
    return out


def stalls(ctx: _Context, judged: Sequence[_Window], prefill: Points, prefill_running: Points) -> dict[str, Any]:
    """Runs of decode windows below STALL_RATIO of the running median of decode throughput, in
    which a prefill batch ran while requests were decoding (where its line prints #running-req:
    a prefill with none running took no time from decode, and the low figure counts idle time)
    and the load held (#running-req at least STALL_LOAD_RATIO of its median)."""
    idle = {ctx.key(t) for t, v, _ in prefill_running if v <= 0}
    pre = {ctx.key(t): line for t, _, line in prefill if ctx.key(t) not in idle}
    runs: list[list[_Window]] = []
    after: list[_Window | None] = []  # the judged window that ended each run; None while it holds
    last: _Window | None = None
    for w in judged:
        load_held = w.running is not None and w.running_median is not None \
            and w.running >= STALL_LOAD_RATIO * w.running_median
        if w.median > 0 and w.tok_s < STALL_RATIO * w.median and ctx.key(w.sec) in pre and load_held:
            if runs and last is runs[-1][-1]:
                runs[-1].append(w)
            else:
                runs.append([w])
                after.append(None)
        elif runs and last is runs[-1][-1]:
            after[-1] = w
        last = w
    found = []
    for r, end in list(zip(runs, after))[:_KEEP]:
        first = r[0]
        pline = pre[ctx.key(first.sec)]
        found.append({"start": ctx.at(first.sec), "end": ctx.at(r[-1].sec), "line": first.line,
                      "prefill_line": pline, "windows": len(r), "tok_s": round(min(w.tok_s for w in r), 2),
                      "median_tok_s": round(first.median, 2), "running_req": first.running,
                      "evidence": [ctx.evidence(first.line), ctx.evidence(pline)],
                      "recovered": None if end is None else {**ctx.evidence(end.line), "at": ctx.at(end.sec),
                                                             "tok_s": round(end.tok_s, 2)}})
    return {"count": len(runs), "windows": sum(len(r) for r in runs), "first": found}


def seesaw(ctx: _Context, judged: Sequence[_Window], prefill: Points, queue: Points,
           idle: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The first stretch of windows alternating SEESAW_MIN_SWITCHES times or more between
    prefill starving decode ("P": a prefill batch, decode below SEESAW_RATIO of its running
    median or absent) and decode starving prefill ("D": decode at its level, requests queued,
    no prefill batch); idle time and any other window end a stretch."""
    if not judged:
        return None
    pre = {ctx.key(t): (t, line) for t, _, line in prefill}
    q = {ctx.key(t): v for t, v, _ in queue}
    dec = {ctx.key(w.sec): w for w in judged}
    lo, hi = min(dec), max(dec)
    breaks = {ctx.key(g["resumed"]) for g in idle}
    stretches: list[list[tuple[int, str, int]]] = []
    cur: list[tuple[int, str, int]] = []
    keys = sorted(set(dec) | {k for k in pre if lo <= k <= hi})
    for k in keys:
        w = dec.get(k)
        label = None
        if k in pre and (w is None or w.tok_s < SEESAW_RATIO * w.median):
            label, line = "P", pre[k][1]
        elif w is not None and k not in pre and (q.get(k) or 0) > 0 and w.tok_s >= SEESAW_RATIO * w.median:
            label, line = "D", w.line
        if label is None or k in breaks or (cur and k != cur[-1][0] + 1):
            if cur:
                stretches.append(cur)
            cur = []
        if label is not None:
            cur.append((k, label, line))
    if cur:
        stretches.append(cur)
    found = []
    for s in stretches:
        switches = sum(1 for a, b in zip(s, s[1:]) if a[1] != b[1])
        if switches >= SEESAW_MIN_SWITCHES:
            found.append((s, switches))
    if not found:
        return None
    s, switches = found[0]
    firsts = [s[0]] + [b for a, b in zip(s, s[1:]) if a[1] != b[1]][:3]
    # the window after the stretch ended it (one of neither kind, or one after idle time): its first record
    k_end = next((k for k in keys if k > s[-1][0]), None)
    ended = None
    if k_end is not None:
        w_end = dec.get(k_end)
        line_end = min(x for x in (w_end.line if w_end else None, pre.get(k_end, (0, None))[1]) if x is not None)
        ended = {**ctx.evidence(line_end), "at": ctx.at(k_end * ctx.width)}
    return {"start": ctx.at(s[0][0] * ctx.width), "end": ctx.at(s[-1][0] * ctx.width), "line": s[0][2],
            "windows": len(s), "switches": switches, "prefill_windows": sum(1 for x in s if x[1] == "P"),
            "decode_windows": sum(1 for x in s if x[1] == "D"), "stretches": len(found),
            "evidence": [ctx.evidence(line) for _, _, line in firsts], "ended": ended}


def imbalance(ctx: _Context, groups: Mapping[str, Mapping[str, Points]]) -> dict[str, Any] | None:
    """Per figure, each DP group's median share of the groups' mean over the windows in which
    every group printed it; the imbalance is found when IMBALANCE_SIGNALS figures name the same
    group as the heaviest at IMBALANCE_RATIO or more. None with fewer than two groups."""
    signals: list[dict[str, Any]] = []
    for figure in IMBALANCE_FIGURES:
        per = groups.get(figure) or {}
        if len(per) < 2:
            continue
        by_key = {rank: {ctx.key(t): (v, line) for t, v, line in pts} for rank, pts in per.items()}
        common = set.intersection(*(set(d) for d in by_key.values()))
        shares: dict[str, list[float]] = {rank: [] for rank in by_key}
        windows = []
        for k in sorted(common):
            mean = sum(d[k][0] for d in by_key.values()) / len(by_key)
            if mean <= 0:  # every group idle in it
                continue
            windows.append(k)
            for rank, d in by_key.items():
                shares[rank].append(d[k][0] / mean)
        if len(windows) < IMBALANCE_MIN_WINDOWS:
            continue
        medians = {rank: statistics.median(v) for rank, v in shares.items()}
        heavy = max(medians, key=lambda r: (medians[r], r))
        light = min(medians, key=lambda r: (medians[r], r))
        # the window whose share of the heaviest group is nearest its median: its two records
        i = min(range(len(windows)), key=lambda j: abs(shares[heavy][j] - medians[heavy]))
        k = windows[i]
        signals.append({"figure": figure, "windows": len(windows), "heaviest": heavy,
                        "heaviest_share": round(medians[heavy], 3), "lightest": light,
                        "lightest_share": round(medians[light], 3),
                        "signal": medians[heavy] >= IMBALANCE_RATIO,
                        "at": ctx.at(k * ctx.width),
                        "heaviest_value": by_key[heavy][k][0], "lightest_value": by_key[light][k][0],
                        "evidence": [ctx.evidence(by_key[heavy][k][1], heavy, text=False),
                                     ctx.evidence(by_key[light][k][1], light, text=False)]})
    if not signals:
        return None
    fired = [s for s in signals if s["signal"]]
    counts: dict[str, int] = {}
    for s in fired:
        counts[s["heaviest"]] = counts.get(s["heaviest"], 0) + 1
    top = max(counts, key=lambda r: (counts[r], r)) if counts else None
    agreeing = [s for s in fired if s["heaviest"] == top]
    return {"groups": max(len(per) for per in groups.values()),
            "found": len(agreeing) >= IMBALANCE_SIGNALS, "heaviest": top,
            "signals": signals, "agreeing": [s["figure"] for s in agreeing]}
