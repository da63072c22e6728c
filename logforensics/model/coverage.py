"""How much of the log was understood: kinds counted, unrecognised lines grouped by shape.

Nothing is lost: a line no rule of the grammar reads is an ``other`` event, counted,
and grouped by its shape (numbers and hex ids masked) so the summary can show which
unknown wordings are most frequent.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..events import Event
from ..read.fastpath import LINE_LIMIT
from ..units import clip
from . import startup
from .clock import seconds
from .rank import rank_sort_key
from .registry import handles

#: Characters of an unrecognised line shown as its shape's example; one more is kept, so that
#: a longer line's example says it was cut ("…", ``units.clip``). ``native/other.c``'s
#: EXAMPLE_MAX is ``EXAMPLE_KEPT``.
EXAMPLE_CHARS = 200
EXAMPLE_KEPT = EXAMPLE_CHARS + 1

if TYPE_CHECKING:
    from .run import RunModel

MAX_UNKNOWN_SHAPES = 5000
#: Where the lines of shapes beyond ``MAX_UNKNOWN_SHAPES`` are counted, and why the
#: model then cannot be merged after another part.
OVERFLOW_KEY = "(other shapes)"
OVERFLOW_REASON = "too many unrecognised shapes: which are kept depends on those before"
_DIGITS = re.compile(r"\d+")
_HEX = re.compile(r"0x[0-9a-fA-F]+")


def shape(text: str) -> str:
    """A line's shape for grouping unknown lines: numbers and hex ids masked. A line longer
    than the reader's ``LINE_LIMIT`` has the shape of its first part, as it is read on that
    only (the whole line would cost time per character in the regular expressions)."""
    if len(text) > LINE_LIMIT:
        text = text[:LINE_LIMIT]
    return _DIGITS.sub("N", _HEX.sub("0xH", text.strip()))[:160]


#: Records that are not structure (blank, indented, unrecognised): the log's own lines.
_NOT_RECORDS = frozenset({"blank", "indented", "other"})


def vllm_records(kind_counts: Counter[str]) -> int:
    """How many records are vLLM's own (``INFO 03-07 12:29:02 file.py:190] ...``) when they
    are at least half of the log's records, else 0: a vLLM log, which this does not read
    (an SGLang log carries a few such lines from the vLLM modules it imports)."""
    vllm = kind_counts.get("vllm_log", 0)
    records = record_count(kind_counts)
    return vllm if vllm >= 3 and 2 * vllm >= records else 0


def record_count(kind_counts: Counter[str]) -> int:
    """How many of the log's records are structure (not blank, indented or unrecognised)."""
    return sum(n for kind, n in kind_counts.items() if kind not in _NOT_RECORDS)


@dataclass
class Coverage:
    """Counts of what was read."""

    events: int = 0
    kind_counts: Counter[str] = field(default_factory=Counter)
    #: physical lines with an unrecognised record (records of one line are consecutive)
    other_lines: int = 0
    last_other_line: int = 0
    #: shape -> [count, first line, example, {rank: None} (ordered, the first line's rank first, at most 64)]
    unknown_shapes: dict[str, list[Any]] = field(default_factory=dict)
    #: lines Ray's log de-duplication left out ("[repeated 3x across cluster]": 2 more like it)
    dedup_dropped: int = 0
    #: the first record a grammar rule matched but whose handler failed: (line, error)
    first_unplanned: tuple[int, str] | None = None
    #: health and metrics probes answered (``http_probe``), by path (the query left out):
    #: answers by status, and the first answer of each status as evidence (:class:`Probes`)
    probes: Probes = field(default_factory=lambda: Probes())
    #: requests answered (``http_access``) with a status other than 200, by status, and the
    #: first line of each: the bulk reader takes only answers of 200 (``columns.GUARDS``),
    #: whose count is the kind's count less these
    answers: Counter[int] = field(default_factory=Counter)
    first_answers: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: the earliest and the latest stamp of the records every reader reads one by one (those a
    #: handler reads, batch and access lines aside: their ranks' last stamps are the ranks'),
    #: in whatever order the log printed them (a paste of several servers' lines is not sorted)
    first_ts: str | None = None
    last_ts: str | None = None

    def stamped(self, ts: str) -> None:
        """A record's stamp; one that is no moment (a paste's misread "2026-84-18") is not taken."""
        if (self.first_ts is None or ts < self.first_ts or self.last_ts is None or ts > self.last_ts) \
                and seconds(ts) is None:
            return
        if self.first_ts is None or ts < self.first_ts:
            self.first_ts = ts
        if self.last_ts is None or ts > self.last_ts:
            self.last_ts = ts

    def observe_answer(self, ev: Event) -> None:
        """A request answered with a status other than 200 (read as an event on both paths)."""
        status = ev.fields.get("status")
        if not isinstance(status, int) or status == PROBE_OK:
            return
        self.answers[status] += 1
        if status not in self.first_answers:
            self.first_answers[status] = {"file": ev.file, "line": ev.line, "rank": ev.rank, "ts": ev.ts,
                                          "text": ev.text}

    def requests_answered(self) -> dict[str, Any] | None:
        """The requests' answers by status (``coverage.requests``), or None when none shows."""
        total = self.kind_counts.get("http_access", 0)
        if not total:
            return None
        by = Counter(self.answers)
        if total > sum(by.values()):
            by[PROBE_OK] = total - sum(by.values())
        return {"answers": {str(st): n for st, n in sorted(by.items())},
                "first": {str(st): self.first_answers[st] for st in sorted(self.first_answers)}}

    def merge(self, later: Coverage) -> None:
        """Counts add up; a shape keeps its first line and example."""
        self.events += later.events
        self.kind_counts.update(later.kind_counts)
        self.other_lines += later.other_lines  # a part starts at a line start: no line is in both
        self.dedup_dropped += later.dedup_dropped
        self.first_unplanned = self.first_unplanned or later.first_unplanned
        self.probes.merge(later.probes)
        self.answers.update(later.answers)
        for status, first in later.first_answers.items():
            self.first_answers.setdefault(status, first)
        self.last_other_line = later.last_other_line or self.last_other_line
        for ts in (later.first_ts, later.last_ts):
            if ts is not None:
                self.stamped(ts)
        for key, (count, first, example, ranks) in later.unknown_shapes.items():
            entry = self.unknown_shapes.get(key)
            if entry is None:
                self.unknown_shapes[key] = [count, first, example, ranks]
                continue
            entry[0] += count
            for label in ranks:
                if len(entry[3]) >= 64:
                    break
                entry[3][label] = None

    def warnings(self) -> list[str]:
        """What the reader of the summary must know about lines that are not in the log."""
        out = []
        vllm = vllm_records(self.kind_counts)
        if vllm:
            out.append(f"{vllm} of the log's records are vLLM's ('INFO MM-DD hh:mm:ss file.py:N]'): this reads "
                       "SGLang logs; vLLM's own readiness, failures and figures are not judged")
        if self.dedup_dropped:
            out.append(f"Ray's log de-duplication left out {self.dedup_dropped} lines ('[repeated Nx across "
                       "cluster]'): counts, rates and per-rank records may be short")
        if self.first_unplanned is not None:
            line, error = self.first_unplanned
            out.append(f"{self.kind_counts['unplanned']} records matched a grammar rule that then failed to read "
                       f"them (a bug of logforensics; first at line {line}: {error}); they are counted as "
                       "unrecognised lines")
        return out

    def to_dict(self, stats: Any, last_line: int) -> dict[str, Any]:
        lines = getattr(stats, "lines", last_line) or last_line
        other = self.other_lines
        top = sorted(self.unknown_shapes.items(), key=lambda kv: -kv[1][0])[:10]
        return {
            "lines_read": lines,
            "lines_recognised": max(lines - other, 0),
            "lines_unrecognised": other,
            "recognised_pct": round(100.0 * (lines - other) / lines, 2) if lines else 100.0,
            "events": self.events,
            "kinds": dict(sorted(self.kind_counts.items(), key=lambda kv: (-kv[1], kv[0]))),  # ties: by name
            "top_unrecognised": [
                {"shape": s, "count": v[0], "first_line": v[1], "example": clip(v[2], EXAMPLE_CHARS),
                 "first_rank": next(iter(v[3]), None), "ranks": sorted((r for r in v[3] if r), key=rank_sort_key)}
                for s, v in top
            ],
            "unrecognised_shapes": {s: v[0] for s, v in self.unknown_shapes.items()},
            "long_lines": getattr(stats, "long_lines", 0),
            "partial_lines": getattr(stats, "partial_lines", 0),
            "decode_errors": getattr(stats, "decode_errors", 0),
            "unterminated_last_line": getattr(stats, "unterminated_last_line", False),
            "bytes": getattr(stats, "bytes", None),
            "lines_dropped_by_dedup": self.dedup_dropped,
            # health and metrics probes answered (``http_probe``, apart from the requests served):
            # counted by kind, so that the bulk reader takes them in its runs as it takes requests
            "probe_requests": self.kind_counts.get("http_probe", 0),
            "probes": self.probes.to_dict(),
            "requests": self.requests_answered(),
            "first_ts": self.first_ts,
            "last_ts": self.last_ts,
        }


#: The status a probe line answered with that the bulk reader takes (counted by path, with
#: no event): any other answer is read on the exact path, so its line is known.
PROBE_OK = 200


@dataclass
class Probes:
    """Probe answers by path and status, with the first line of each (path, status).

    The bulk reader takes the ``PROBE_OK`` answers of a path in its runs and only counts
    them (:meth:`add`); every other answer, and the first line of each shape, is an event
    (:meth:`observe`), so the first answer of each status, a failure above all, is a line
    of the log with its number. Paths are the grammar's probe paths, statuses three-digit
    numbers: both bounded.
    """

    #: path -> status -> answers
    counts: dict[str, Counter[int]] = field(default_factory=dict)
    #: (path, status) -> the first such answer: file, line, rank, ts, text
    first: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    #: (path, status) -> the last such answer read as an event (every one but ``PROBE_OK``'s):
    #: line, ts (how long a refusal went on; not in ``to_dict``)
    last: dict[tuple[str, int], tuple[int, str | None]] = field(default_factory=dict)

    def add(self, path: str, status: int, n: int) -> None:
        by = self.counts.get(path)
        if by is None:
            by = self.counts[path] = Counter()
        by[status] += n

    def observe(self, ev: Event) -> None:
        path = str(ev.fields.get("path") or "").split("?", 1)[0]
        status = ev.fields.get("status")
        if not path or not isinstance(status, int):
            return
        self.add(path, status, 1)
        self.last[path, status] = (ev.line, ev.ts)
        if (path, status) not in self.first:
            self.first[path, status] = {"file": ev.file, "line": ev.line, "rank": ev.rank, "ts": ev.ts,
                                        "text": ev.text}

    def merge(self, later: Probes) -> None:
        """Those of a later part of the log: counts add up, the first answers stay."""
        for path, by in later.counts.items():
            for status, n in by.items():
                self.add(path, status, n)
        for key, first in later.first.items():
            self.first.setdefault(key, first)
        self.last.update(later.last)

    def to_dict(self) -> dict[str, Any]:
        """Per path: ``answers`` by status, and ``first`` (the first answer of each status)."""
        return {path: {"answers": {str(st): n for st, n in sorted(by.items())},
                       "first": {str(st): self.first[path, st] for st in sorted(by) if (path, st) in self.first}}
                for path, by in sorted(self.counts.items())}


def add_others(m: RunModel, line: int, n: int, overflowed: bool,
               shapes: list[tuple[str, int, int | None, str | None, bool]], blanks: int = 0) -> None:
    """Observe ``n`` consecutive lines from ``line`` on that are each one ``other`` event
    of the whole line without a rank (counted by shape: ``shapes`` as ``read.other`` gives
    them), exactly as :func:`on_other` one at a time would; ``blanks`` of them, never the
    last, are empty lines, each a ``blank`` event (which no handler reads: only counted)."""
    c = m.coverage
    c.events += n
    c.kind_counts["other"] += n - blanks
    if blanks:
        c.kind_counts["blank"] += blanks
    c.other_lines += n - blanks
    last = line + n - 1
    c.last_other_line = last
    if last > m.last_line:
        m.last_line = last
    known = c.unknown_shapes
    for key, count, first, example, overflow in shapes:
        if first is None:
            known[key][0] += count
        else:  # new: in the order one pass would have added them
            known[key] = [count, first, example, {} if overflow else {None: None}]
    if overflowed:
        m.needs_context(OVERFLOW_REASON)


@handles("ray_dedup", reads_earlier=True)
def on_ray_dedup(m: RunModel, ev: Event) -> None:
    """Ray printed one line for N alike: N - 1 lines of the cluster are not in this log. A
    progress bar on that line was drawn by several processes: it is no one rank's (the rank
    that draws bars is not given it)."""
    m.coverage.dedup_dropped += max(int(ev.fields.get("count") or 1) - 1, 0)
    bars = m.timeline.bars
    for phase in [p for p, bar in bars.items() if bar["line"] == ev.line and int(ev.fields.get("count") or 1) > 1]:
        del bars[phase]
    bare = m.timeline.bare_bar
    if bare is not None and bare["line"] == ev.line and int(ev.fields.get("count") or 1) > 1:
        m.timeline.bare_bar = None


@handles("http_probe")
def on_http_probe(m: RunModel, ev: Event) -> None:
    """A probe of the HTTP server (``GET /health`` every few seconds, ``/health_generate``,
    ``/metrics``), read on the exact path: a failed one, or the first of its shape (the bulk
    reader counts the others, ``ColumnFeed.apply``). Kept apart from the requests served
    (``http_access``), which it would outnumber. A success shows the HTTP server up, which
    SGLang starts once every scheduler is ready: the run is past start-up (the launcher's
    model-info probe too, though its answer is no evidence of readiness: ``startup.answered``)."""
    m.coverage.probes.observe(ev)
    up = startup.answered(m, ev, probe=True) or startup.launcher_probe_answered(ev)
    if up and m.timeline.global_phase != "serving":
        m.timeline.reach("serving")


@handles("unplanned")
def on_unplanned(m: RunModel, ev: Event) -> None:
    """A record whose grammar rule's handler failed: unrecognised, and reported."""
    if m.coverage.first_unplanned is None:
        m.coverage.first_unplanned = (ev.line, str(ev.fields.get("error")))
    on_other(m, ev)


#: An unrecognised record that says an error and ends with what the error was, as code that
#: logs an exception with its traceback writes it (``logger.error(f"Error during X: {e}",
#: exc_info=True)``): a traceback on the next line is the one it logged (``failures._logged_it``).
_SAYS_AN_ERROR = re.compile(r"\b(?:[Ee]rror|ERROR|[Ff]ailed|FAILED|[Ee]xception)\b[^:]*: \S")
#: Texts of which a line ``_SAYS_AN_ERROR`` matches holds one: the bulk reader hands such a line
#: over as an event (``on_other`` reads it), never only counts it.
SAYS_AN_ERROR_NEEDS = ("Error", "error", "ERROR", "Failed", "failed", "FAILED", "Exception", "exception")


@handles("other")
def on_other(m: RunModel, ev: Event) -> None:
    """An unrecognised record: counted by shape (coverage); one that says an error is kept as the
    last error logged (``_SAYS_AN_ERROR``)."""
    if _SAYS_AN_ERROR.search(ev.text):
        m.failures.logged_error, m.failures.logged_says = ev.line, ev.text
    c = m.coverage
    if ev.line != c.last_other_line:
        c.other_lines += 1
        c.last_other_line = ev.line
    key = shape(ev.text)
    entry = c.unknown_shapes.get(key)
    if entry is None:
        if len(c.unknown_shapes) >= MAX_UNKNOWN_SHAPES:
            m.needs_context(OVERFLOW_REASON)
            key = OVERFLOW_KEY
            entry = c.unknown_shapes.setdefault(key, [0, ev.line, ev.text[:EXAMPLE_KEPT], {}])
        else:
            # The first key is the first line's rank (None when it names none): NV01 cites it.
            entry = c.unknown_shapes[key] = [0, ev.line, ev.text[:EXAMPLE_KEPT], {ev.rank: None}]
    entry[0] += 1
    if ev.rank and len(entry[3]) < 64:  # ranks as dict keys: kept in order, for merge
        entry[3][ev.rank] = None
