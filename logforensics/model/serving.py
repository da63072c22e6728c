"""The serving phase as a time series: load, throughput, KV usage, cache hits, retractions.

Why a time series and not one median: a server that served 1,700 tok/s for an hour and
144 tok/s after a retraction storm has a median that describes neither hour. This
module keeps bounded per-window aggregates of the batch statistics SGLang prints
(``Decode batch``, ``Prefill batch``, the retraction warnings) and of request logs, and
finds the points where a figure moved to a new level (``changes``).

Windows are seconds of the log's own clock (SGLang's stamps have one-second resolution),
doubled in width when a log gets long, so memory is bounded by ``windows.MAX_WINDOWS`` per
figure and rank whatever the log's length (``windows.py``). Aggregates are
fixed-point sums, counts and extremes, so an observer of a later part of a log merges exactly into that of the earlier part
(``merge``), which the parallel reader relies on.

Figures keep SGLang's meaning (``docs/summary.md``): ``gen_tok_s`` is "gen throughput
(token/s)" summed over the attention-DP groups, one rank each (the first, which prints
batch statistics; when every TP rank prints them, the others repeat it), ``running_req``/
``queue_req`` likewise summed, ``token_usage`` the largest of the ranks' "token usage"
(0-1), ``cache_hit`` #cached-token / (#new-token + #cached-token)
of the prefill batches in the window.
"""

from __future__ import annotations

import copy
import heapq
from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Any

from ..units import clip
from . import changepoints, health
from .changepoints import Change
from .clock import iso, seconds
from .frozen import KINDS as FROZEN_KINDS
from .frozen import TOKEN_FIELDS, FrozenStreaks, counters_key
from .rank import stats_ranks
from .stats import Sketch
from .windows import GRID as _GRID
from .windows import Cell, Windows, new_windows

#: Slowest requests kept.
_SLOWEST = 10
#: Latency windows are at least this wide (seconds) and at most this many.
_LATENCY_MIN_WIDTH = 60
_MAX_LATENCY_WINDOWS = 512
#: Request records and the field that holds each figure.
REQUEST_KINDS = ("request_finish", "request_json", "req_time_stats", "request_receive")
#: Kinds the run model hands to ``observe`` (decode batches go through ``add_decode``).
SERVING_KINDS = frozenset(("retract",) + REQUEST_KINDS)
#: Decode fields per figure: (figure, field names tried in order, how ranks combine).
_DECODE = (
    ("gen_tok_s", ("gen_throughput_tok_s",), "sum"),
    ("running_req", ("running_req",), "sum"),
    ("queue_req", ("queue_req",), "sum"),
    ("token_usage", ("token_usage", "full_token_usage", "gpu_token_usage"), "max"),
    ("retracted_req", ("retracted_req",), "sum"),
)
_PREFILL = (
    ("prefill_queue_req", ("queue_req",), "sum"),
    # requests decoding while the prefill batch ran (SV07: a prefill with none took nothing from decode)
    ("prefill_running_req", ("running_req",), "sum"),
    ("prefill_token_usage", ("token_usage", "full_token_usage"), "max"),
)
FIGURES: dict[str, str] = {
    "gen_tok_s": "decode throughput (tok/s)",
    "running_req": "#running-req",
    "queue_req": "#queue-req",
    "token_usage": "token usage",
    "cache_hit": "cached share of prefill tokens",  # not SGLang's cumulative "cache hit rate"
    "retracted_req": "#retracted-req",
}
#: Figures searched for change points.
CHANGE_FIGURES = ("gen_tok_s", "running_req", "queue_req", "token_usage", "cache_hit")
#: The windows that keep their first record's text, and the series whose points cite texts
#: (a change point's line, the first full-KV window's): each the windows it is combined from.
TEXT_FIGURES = ("gen_tok_s", "prefill_new")


class ServingObserver:
    """Observes the serving records of one log (or one part of it); bounded memory."""

    def __init__(self) -> None:
        self.windows: dict[tuple[str, str], Windows] = {}
        self.dated: bool | None = None
        self.untimed = 0
        self.retractions: list[dict[str, Any]] = []  # the first ones (bounded)
        self.retraction_count = 0
        self.retracted_reqs = 0
        self.requests = 0
        self.received = 0
        self.latency = Sketch()
        self.latency_width = _LATENCY_MIN_WIDTH
        self.latency_cells: dict[int, list[Any]] = {}  # window -> [Sketch, first line]
        self.slowest: list[tuple[float, int, dict[str, Any]]] = []  # min-heap of (latency, line, record)
        self.kv_full: dict[str, Any] | None = None  # the first window with token usage >= 0.95
        self.graph_off: dict[str, Any] | None = None  # the first decode batch not run as a CUDA graph
        self.graph_on_seen = False
        self.file: str | None = None
        self.first_graph_off: dict[str, Any] | None = None  # the first False, CUDA graphs seen or not
        self._rev = 0  # changes with every record taken: summary() reuses its last result until then
        self._cached: tuple[int, dict[str, Any] | None] | None = None
        self._last_ts: str | None = None
        self._last_sec = 0.0
        self.row_plan: Any = None  # where rows go (``serving_rows.add_rows``), kept while it holds
        #: decode batches with requests running and nothing generated, in runs per rank...
        self.frozen = FrozenStreaks()
        #: ...and those whose figures do not move, requests running (``frozen.counters_key``)
        self.fixed = FrozenStreaks()
        #: the last batch record: (file, line, rank, ts, text, #queue-req, #running-req)
        self.last_batch: tuple[Any, ...] | None = None

    # -- observing ------------------------------------------------------------------------
    def _sec(self, ts: str | None) -> float | None:
        if ts is not None and ts == self._last_ts:
            return self._last_sec
        sec = seconds(ts)
        if sec is None:
            self.untimed += 1
            return None
        if self.dated is None:
            self.dated = bool(ts and ts[4:5] == "-")
        self._last_ts, self._last_sec = ts, sec
        return sec

    def add_decode(self, rank: str | None, ts: str | None, line: int, tput: float | None, running: float | None,
                   queue: float | None, usage: float | None, retracted: float | None, graph: Any,
                   text: str, file: str | None, tokens: float | None = None) -> None:
        """One ``Decode batch`` record, its figures already read (the run model's hot path);
        ``tokens``: its ``#token`` (``#full token``)."""
        self._rev += 1
        label = rank or "-"

        def record() -> dict[str, Any]:
            return _evidence(file, line, rank, ts, text)

        self.frozen.step(label, True if tput == 0 and running is not None and running > 0 else None, record)
        self.fixed.step(label, counters_key(tokens, running, tput), record)
        self.last_batch = (file, line, rank, ts, text, queue, running)
        sec = self._sec(ts)
        if sec is None:
            return
        if self.file is None:
            self.file = file
        for figure, value in (("gen_tok_s", tput), ("running_req", running), ("queue_req", queue),
                              ("token_usage", usage), ("retracted_req", retracted)):
            if value is not None:
                self._add(figure, label, sec, float(value), line, text[:400] if figure == "gen_tok_s" else None)
        if graph is True:
            self.graph_on_seen = True
        elif graph is False:
            if self.graph_on_seen and self.graph_off is None:
                self.graph_off = _evidence(file, line, rank, ts, text)
            if self.first_graph_off is None:
                self.first_graph_off = _evidence(file, line, rank, ts, text)

    def _add(self, figure: str, rank: str, sec: float, value: float, line: int, text: str | None = None) -> None:
        self.settle((figure, rank))
        w = self.windows.get((figure, rank))
        if w is None:
            w = self.windows[(figure, rank)] = new_windows()
        w.add(sec, value, line, text)

    def observe(self, kind: str, line: int, rank: str | None, ts: str | None, fields: Mapping[str, Any],
                text: str, file: str | None = None) -> None:
        """One record; kinds other than the serving ones are ignored."""
        self._rev += 1
        if kind == "decode_batch":
            tput, running, queue, usage, retracted = (_first(fields, names) for _, names, _ in _DECODE)
            self.add_decode(rank, ts, line, tput, running, queue, usage, retracted,
                            fields.get("cuda_graph"), text, file, _first(fields, TOKEN_FIELDS))
        elif kind == "prefill_batch":
            self.last_batch = (file, line, rank, ts, text, fields.get("queue_req"), fields.get("running_req"))
            sec = self._sec(ts)
            if sec is None:
                return
            label = rank or "-"
            new, cached = fields.get("new_token"), fields.get("cached_token")
            if new is not None and cached is not None:
                self._add("prefill_new", label, sec, float(new), line, text[:400])
                self._add("prefill_cached", label, sec, float(cached), line)
            for figure, names, _ in _PREFILL:
                value = _first(fields, names)
                if value is not None:
                    self._add(figure, label, sec, float(value), line)
        elif kind == "retract":
            n = fields.get("retracted_reqs") or 0
            self.retraction_count += 1
            self.retracted_reqs += int(n)
            if len(self.retractions) < 256:
                rec = _evidence(file, line, rank, ts, text)
                rec["retracted_reqs"] = n
                rec["new_token_ratio"] = [fields.get("new_token_ratio_before"), fields.get("new_token_ratio_after")]
                self.retractions.append(rec)
            sec = self._sec(ts)
            if sec is not None:
                self._add("retractions", rank or "-", sec, float(n), line)
        elif kind in REQUEST_KINDS:
            self._request(kind, line, ts, fields, file)

    def _request(self, kind: str, line: int, ts: str | None, fields: Mapping[str, Any], file: str | None) -> None:
        if kind == "request_receive" or fields.get("event") == "request.received":
            self.received += 1
            return
        latency = fields.get("e2e_latency_s")
        if latency is None and fields.get("forward_ms") is not None:
            latency = (fields.get("forward_ms") or 0.0) / 1000.0 + (fields.get("queue_ms") or 0.0) / 1000.0
        if latency is None:
            return
        latency = float(latency)
        self.requests += 1
        self.latency.add(latency)
        sec = self._sec(ts)
        if sec is not None:
            key = int(sec // self.latency_width)
            sk = self.latency_cells.get(key)
            if sk is None:
                sk = self.latency_cells[key] = [Sketch(), line]
                if len(self.latency_cells) > _MAX_LATENCY_WINDOWS:
                    self._coarsen_latency(self.latency_width * 2)
                    sk = self.latency_cells[int(sec // self.latency_width)]
            sk[0].add(latency)
            sk[1] = min(sk[1], line)
        rec = {"file": file, "line": line, "ts": ts, "rid": fields.get("rid"), "latency_s": round(latency, 4),
               "input_tokens": fields.get("prompt_tokens") if fields.get("prompt_tokens") is not None
               else fields.get("input_len"),
               "output_tokens": fields.get("completion_tokens") if fields.get("completion_tokens") is not None
               else fields.get("output_len"),
               "source": kind}
        _keep_slowest(self.slowest, (latency, -line, rec))

    def _coarsen_latency(self, width: int) -> None:
        factor = width // self.latency_width
        cells: dict[int, list[Any]] = {}
        for key, (sk, line) in self.latency_cells.items():
            d = cells.get(key // factor)
            if d is None:
                cells[key // factor] = [sk, line]
            else:
                d[0].merge(sk)
                d[1] = min(d[1], line)
        self.latency_width, self.latency_cells = width, cells

    def settle(self, key: tuple[str, str] | None = None) -> None:
        """Put the rows held for the windows (``serving_rows``) into them: before anything
        reads them, and before a record goes one by one to the windows ``key`` while they are
        only the rows' (their order does not matter to windows, but a window is made once)."""
        plan = self.row_plan
        if plan is not None and plan.held_rows and (key is None or key in plan.keys):
            plan.flush(self)

    def __getstate__(self) -> dict[str, Any]:
        self.settle()
        return self.__dict__

    def merge(self, later: ServingObserver) -> None:
        """Fold in the observer of the part of the log that followed this one's."""
        self.settle()
        later.settle()
        self._rev += later._rev + 1
        for key, w in later.windows.items():
            mine = self.windows.get(key)
            if mine is None:
                self.windows[key] = w
            else:
                mine.merge(w)
        if self.dated is None:
            self.dated = later.dated
        self.file = self.file or later.file
        self.frozen.merge(later.frozen)
        self.fixed.merge(later.fixed)
        self.last_batch = later.last_batch or self.last_batch
        self.untimed += later.untimed
        self.retractions.extend(later.retractions[:max(0, 256 - len(self.retractions))])
        self.retraction_count += later.retraction_count
        self.retracted_reqs += later.retracted_reqs
        self.requests += later.requests
        self.received += later.received
        self.latency.merge(later.latency)
        if later.latency_width > self.latency_width:
            self._coarsen_latency(later.latency_width)
        factor = self.latency_width // later.latency_width
        for window, (sk, line) in later.latency_cells.items():
            d = self.latency_cells.get(window // factor)
            if d is None:
                self.latency_cells[window // factor] = [sk, line]
            else:
                d[0].merge(sk)
                d[1] = min(d[1], line)
        while len(self.latency_cells) > _MAX_LATENCY_WINDOWS:
            self._coarsen_latency(self.latency_width * 2)
        for item in later.slowest:
            _keep_slowest(self.slowest, item)
        if self.graph_off is None:
            self.graph_off = later.first_graph_off if self.graph_on_seen else later.graph_off
        if self.first_graph_off is None:
            self.first_graph_off = later.first_graph_off
        self.graph_on_seen = self.graph_on_seen or later.graph_on_seen

    # -- the summary -------------------------------------------------------------------------
    def summary(self) -> dict[str, Any] | None:
        """``summary --json``'s ``serving`` object, or None when the log served nothing timed.

        Pure, and cheap when nothing changed since the last call (``watch`` summarises often)."""
        if self._cached is None or self._cached[0] != self._rev:
            self._cached = (self._rev, self._summary())
        return copy.deepcopy(self._cached[1])

    def _summary(self) -> dict[str, Any] | None:
        self.settle()
        if not self.windows and not self.requests and not self.retraction_count:
            return None
        base = max([w.width for w in self.windows.values()] + [1])
        width = _pow2_at_least(max(base, self._natural_width()), base)
        series = {fig: self._combined(fig, self._at(width, (fig,))) for fig in
                  ("gen_tok_s", "running_req", "queue_req", "token_usage", "retracted_req")}
        series["cache_hit"] = self._cache_hit(self._at(width, ("prefill_new", "prefill_cached")))
        series = {k: v for k, v in series.items() if v}
        gap = changepoints.gap(series.get("gen_tok_s") or [], width)
        texts = {line: (key[1], text) for key, w in self.windows.items() if w.texts()
                 for line, text in w.coarsened(width).texts()}
        changes: list[Change] = []
        for fig in CHANGE_FIGURES:
            pts = series.get(fig)
            if pts:
                changes.extend(changepoints.changes(fig, pts, texts, bool(self.dated), self.file))
        changes.sort(key=lambda c: (c.line, c.metric))
        storms = self._storms(bool(self.dated))
        for c in changes:
            c.context.extend(changepoints.context(c, changes, self.retractions, self.graph_off))
        dated = bool(self.dated)
        change_dicts = [c.to_dict() for c in changes]
        judged = health.health(width, gap, dated, self.file, series,
                               self._combined("prefill_new", self._at(width, ("prefill_new",))),
                               self._combined("prefill_running_req", self._at(width, ("prefill_running_req",))),
                               self._per_group(width, health.IMBALANCE_FIGURES), texts, change_dicts)
        return {
            "window_s": width,
            "idle_gap_s": gap,
            "dated": dated,
            "untimed_records": self.untimed,
            "series": {fig: [[iso(t, dated), round(v, 4), line] for t, v, line in changepoints.downsample(pts)]
                       for fig, pts in series.items()},
            "levels": {fig: changepoints.levels(pts) for fig, pts in series.items()},
            "changes": change_dicts,
            "retractions": {"count": self.retraction_count, "retracted_reqs": self.retracted_reqs,
                            "first": self.retractions[:8], "storms": storms},
            "kv_full": changepoints.kv_full(series.get("token_usage") or [], series.get("queue_req") or [], dated, texts),
            "cuda_graph_off": self.graph_off,
            "frozen": self._frozen(),
            "last_batch": None if self.last_batch is None else {
                **_evidence(*self.last_batch[:5]), "queue_req": self.last_batch[5],
                **({} if self.last_batch[6] is None else {"running_req": self.last_batch[6]})},
            "requests": self._requests(width, dated),
            "health": judged,
        }

    def _frozen(self) -> dict[str, Any] | None:
        """The first frozen run of either kind (``model/frozen.py``), with its ``kind``."""
        runs = [(f["first"]["line"], i, f) for i, f in enumerate((self.frozen.first(), self.fixed.first()))
                if f is not None]
        if not runs:
            return None
        _, i, f = min(runs, key=lambda x: x[:2])  # a tie: the kind first in FROZEN_KINDS
        return {"kind": FROZEN_KINDS[i], **f}

    def _per_group(self, width: int, figures: tuple[str, ...]) -> dict[str, dict[str, list[tuple[float, float, int]]]]:
        """Per figure, the series of each attention-DP group's rank (``rank.stats_ranks``)."""
        out: dict[str, dict[str, list[tuple[float, float, int]]]] = {}
        for fig in figures:
            cells = self._at(width, (fig,))
            ranks = stats_ranks(rank for _, rank in cells)
            if len(ranks) > 1:
                out[fig] = {rank: self._combined(fig, {(fig, rank): cells[(fig, rank)]}) for rank in ranks.values()}
        return out

    def _at(self, width: int, figures: tuple[str, ...]) -> dict[tuple[str, str], Windows]:
        """The windows of ``figures`` at ``width``, in order. A few figures at a time: widened
        copies of every window at once would be a passing peak of the run model's size."""
        return {key: w.coarsened(width) for key, w in self.windows.items() if key[0] in figures}

    def _natural_width(self) -> int:
        """A window wide enough to hold a decode record of every stats rank (the decode log
        interval), so that figures summed over ranks are not missing ranks."""
        widths = []
        for (fig, _), w in self.windows.items():
            if fig != "gen_tok_s" or len(w) < 3:
                continue
            keys = sorted(w.keys())
            steps = sorted(b - a for a, b in zip(keys, keys[1:]))
            widths.append(steps[len(steps) // 2] * w.width)
        return max(widths) if widths else 1

    @staticmethod
    def _combined(figure: str, cells: dict[tuple[str, str], Windows]) -> list[tuple[float, float, int]]:
        """One figure over the ranks, one rank per attention-DP group (``rank.stats_ranks``):
        summed across DP groups, never across the TP ranks of one group, which print the same
        statistics when every scheduler prints them."""
        how = next((h for f, _, h in _DECODE if f == figure), "sum")
        counted = set(stats_ranks(rank for fig, rank in cells if fig == figure).values())
        per_rank = [w for (fig, rank), w in cells.items() if fig == figure and rank in counted]
        keys: dict[int, list[Cell]] = {}
        for w in per_rank:
            for k, c in w.items():
                keys.setdefault(k, []).append(c)
        out = []
        for k in sorted(keys):
            group = keys[k]  # the ranks' cells of one window
            means = [c[1] / _GRID / c[0] for c in group]  # as_float(sum) / count
            level = max(means) if how == "max" else sum(means)
            first = min(group, key=itemgetter(2))  # the earliest first line (the first of equal ones)
            out.append((float(first[3]), level, int(first[2])))
        return out

    @staticmethod
    def _cache_hit(cells: dict[tuple[str, str], Windows]) -> list[tuple[float, float, int]]:
        prefill = [(fig == "prefill_new", w) for (fig, _), w in cells.items()
                   if fig in ("prefill_new", "prefill_cached")]
        new: dict[int, list[Any]] = {}
        for is_new, w in prefill:
            j = 0 if is_new else 1
            for k, c in w.items():
                slot = new.get(k)
                if slot is None:
                    slot = new[k] = [0.0, 0.0, c[2], c[3]]
                slot[j] += c[1] / _GRID  # as_float
                if c[2] < slot[2]:
                    slot[2], slot[3] = c[2], c[3]
        out = []
        for k in sorted(new):
            n, cached, line, sec = new[k]
            if n + cached > 0:
                out.append((float(sec), cached / (n + cached), int(line)))
        return out

    def _storms(self, dated: bool) -> list[dict[str, Any]]:
        """The retraction storms of the rank with the largest one (then the earliest), each rank's
        runs counted alone: tensor-parallel ranks mirror one scheduler, so each prints the same
        step's retraction, and summing ranks would count one retraction once per rank."""
        found = [changepoints.storms(self._retraction_cells(rank), dated)
                 for fig, rank in self.windows if fig == "retractions"]
        found = [runs for runs in found if runs]
        if not found:
            return []
        return min(found, key=lambda runs: (-max(r["records"] for r in runs), min(r["first_line"] for r in runs)))

    def _retraction_cells(self, rank: str) -> list[tuple[float, int, float]]:
        """(second, first line, retractions) per retraction window of one rank, in order."""
        w = self.windows[("retractions", rank)]
        return sorted((k * w.width, c[2], c[0]) for k, c in w.items())

    def _requests(self, width: int, dated: bool) -> dict[str, Any] | None:
        """Latency of finished requests (seconds): overall, per window, and the slowest."""
        if not self.requests and not self.received:
            return None
        over_time = []
        for key, (sk, line) in sorted(self.latency_cells.items()):
            over_time.append({"at": iso(key * self.latency_width, dated), "line": line, "count": sk.count + len(sk._pending),
                              "p50": _r(sk.quantile(0.5)), "p90": _r(sk.quantile(0.9)), "p99": _r(sk.quantile(0.99)),
                              "max": _r(sk.quantile(1.0))})
        lat = self.latency
        return {
            # (no Receive record: --log-requests was off, or the window holds none; not zero)
            "received": self.received or None,
            "finished": self.requests,
            "latency_s": {"p50": _r(lat.quantile(0.5)), "p90": _r(lat.quantile(0.9)), "p99": _r(lat.quantile(0.99)),
                          "max": _r(lat.quantile(1.0))} if self.requests else None,
            "window_s": self.latency_width,
            "over_time": over_time,
            "slowest": [rec for _, _, rec in sorted(self.slowest, key=lambda x: (-x[0], x[1]))],
        }


def _first(fields: Mapping[str, Any], names: Iterable[str]) -> Any:
    for n in names:
        v = fields.get(n)
        if v is not None:
            return v
    return None


def _evidence(file: str | None, line: int, rank: str | None, ts: str | None, text: str) -> dict[str, Any]:
    return {"file": file, "line": line, "rank": rank, "ts": ts, "text": clip(text, 400)}


def _pow2_at_least(width: int, base: int) -> int:
    w = base
    while w < width:
        w *= 2
    return w


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _keep_slowest(heap: list[tuple[float, int, dict[str, Any]]], item: tuple[float, int, dict[str, Any]]) -> None:
    if len(heap) < _SLOWEST:
        heapq.heappush(heap, item)
    elif item[:2] > heap[0][:2]:
        heapq.heapreplace(heap, item)
