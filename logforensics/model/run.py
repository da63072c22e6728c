"""The run model: what one SGLang launch did, rank by rank, built incrementally.

:class:`RunModel` takes events one at a time (from a file or a live stream) and keeps
only bounded state, in parts that each own a kind of fact: the ranks' course through
start-up (:mod:`.startup`), failures (:mod:`.failures`), configuration (:mod:`.config`),
serving figures (:mod:`.throughput`) and coverage (:mod:`.coverage`). Each record kind
has one handler, registered by kind in the module of the state it feeds; this module
only dispatches. :meth:`RunModel.summary` judges the outcome (:mod:`.outcome`) and
freezes everything into a :class:`~.summary.RunSummary`, without changing the model.

Ranks are labelled as SGLang printed them (``TP5``, ``DP0 TP3 EP3``). A single-GPU
run prints no rank: its scheduler is reported as rank ``-``.

Models of consecutive parts of one log merge (:meth:`RunModel.merge`) into the model of
the whole, which is how a large file is read on several cores (``ingest/parallel.py``):
each part merges by the rules written beside its state. A few handlers read state that
a model of a later part lacks (the phase a crash happened in, when its frames do not
tell; the ranks a server-ready line moves to serving; capture batch sizes kept only if
none were seen): they are registered ``reads_earlier``. The model of a later part
(``RunModel(part=True)``) does not observe such a record: it closes the model so far
as a part, keeps the record, and goes on with a fresh model (:meth:`deferred`); the
merge observes the kept record between the parts, with the state of everything before.
Only when records of that sort are too many in one part, or the unrecognised shapes
overflow, is the model marked ``context_read`` and not merged.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from ..events import PHASE_OF_KIND, Event
from . import config, coverage, failures, startup, throughput  # noqa: F401  (register their handlers)
from .beside import in_log, with_ends
from .config import AWAITED, Config
from .coverage import MAX_UNKNOWN_SHAPES, Coverage
from .dynamo import DynamoObserver
from .failures import CAUGHT_SOURCES, Failures, record_end
from .fingerprint import fingerprint
from .hang import HANG_KINDS, HangObserver, dump_places
from .notices import Notices
from .outcome import judge, milestone_name, named_ranks
from .pools import Pools, place_rank
from .pools import summarize as summarize_pools
from .rank import KV_HYBRID, MILESTONES, NO_RANK, PHASE_INDEX, RankState, bar_rank, rank_sort_key
from .records import (
    NOT_SEEN,
    Bar,
    LastSeen,
    LoggedError,
    Memory,
    MemoryPools,
    Notice,
    PhaseSpan,
    Ready,
    Stop,
    ThroughputFigures,
)
from .records import Coverage as CoverageRecord
from .registry import HANDLERS, READS_EARLIER, Handler
from .serving import SERVING_KINDS, ServingObserver
from .serving_records import Serving
from .startup import Timeline, pool_ends
from .stats import Series
from .summary import Crash, DistinctException, Hang, RankRecord, RunSummary
from .throughput import Throughput

__all__ = ["MILESTONES", "NO_RANK", "RunModel", "RunSummary", "rank_sort_key"]
_KIND = itemgetter(0)  # Event.kind
#: Records a part's model defers to the merge (each one closes a part): beyond this
#: many, the part reads them itself and is marked ``context_read`` if they read state.
MAX_DEFERRED = 512
#: What the handlers of deferred records read or change (``_defer``): everything else of
#: a model goes on through a deferred record.
_CUT = ("timeline", "failures", "notices", "hang_obs")


def _dispatch_table() -> dict[str, Handler]:
    """kind -> what observing a record of that kind does, after "last seen" is updated:
    its handler, then placing its rank in the kind's phase, or else noting that the rank
    printed something (a traceback's handler says itself where its rank stopped)."""
    table: dict[str, Handler] = {}
    for kind in set(HANDLERS) | set(PHASE_OF_KIND):
        handler, phase = HANDLERS.get(kind), PHASE_OF_KIND.get(kind)
        table[kind] = _compose(handler, phase, touch=kind != "exception")
    return table


def _compose(handler: Handler | None, phase: str | None, touch: bool) -> Handler:
    if phase is not None:
        def enter(m: RunModel, ev: Event) -> None:
            if handler is not None:
                handler(m, ev)
            m.timeline.enter(ev, phase)
        return enter
    assert handler is not None

    def handle(m: RunModel, ev: Event) -> None:
        handler(m, ev)
        if touch and ev.rank is not None:
            m.timeline.rank(ev.rank).touch(ev.line, ev.ts, ev.text)
    return handle


def _seen(m: RunModel, ev: Event) -> None:
    """A record without a handler or phase (an HTTP access line): its rank was alive."""
    if ev.rank is not None:
        m.timeline.rank(ev.rank).touch(ev.line, ev.ts, ev.text)


class RunModel:
    """Incremental run model: ``observe`` every event, then ``summary``."""

    def __init__(self, file: str | None = None, *, part: bool = False) -> None:
        self.file = file
        self.timeline = Timeline()
        self.failures = Failures()
        self.config = Config()
        self.throughput = Throughput()
        self.coverage = Coverage()
        self.notices = Notices()
        self.hang_obs = HangObserver()  # the timers, collectives and py-spy dumps of a hang (model/hang.py)
        self.serving = ServingObserver()  # the serving phase as a time series (model/serving.py)
        self.dynamo = DynamoObserver()  # NVIDIA Dynamo's clock and ranks (model/dynamo.py)
        self.pools = Pools()  # a hybrid model's pools one by one (model/pools.py)
        self.last_line = 0
        #: Why this model's figures may depend on records before its first one (None if
        #: they cannot): set when a handler read state that a model of a later part of
        #: the log would lack. Such a part cannot be merged; see :meth:`merge`.
        self.context_read: str | None = None
        #: The model of a part of a log that follows another part: its series keeps its
        #: values, and records that read earlier state are deferred (``_defer``).
        self.part = part
        if part:
            self.throughput.decode_series = Series(keep_values=True)
        #: (model of the records before, deferred record) pairs, in log order: this model
        #: holds the records after the last of them.
        self._deferred: list[tuple[RunModel, Event]] = []

    # -- the parts other stages read while observing -----------------------------------
    @property
    def ranks(self) -> dict[str, RankState]:
        """label -> the rank's record so far."""
        return self.timeline.ranks

    @property
    def events(self) -> int:
        return self.coverage.events

    @property
    def decode_series(self) -> Series:
        return self.throughput.decode_series

    @decode_series.setter
    def decode_series(self, series: Series) -> None:
        self.throughput.decode_series = series

    def bar_rank(self) -> str:
        """The rank the progress bars belong to, given the ranks seen so far."""
        return bar_rank(self.timeline.ranks)

    # -- observe -----------------------------------------------------------------------
    def observe(self, ev: Event) -> None:
        """Take one event; see :meth:`observe_all`."""
        self.observe_all((ev,))

    def observe_all(self, events: Sequence[Event]) -> None:
        """Take events in log order: the one implementation of observing."""
        if not events:
            return
        if self.part and len(self._deferred) < MAX_DEFERRED:
            kinds = list(map(_KIND, events))
            if not READS_EARLIER.isdisjoint(kinds):
                start = 0
                for i, kind in enumerate(kinds):
                    if kind in READS_EARLIER and len(self._deferred) < MAX_DEFERRED:
                        self._observe(events[start:i])
                        self._defer(events[i])
                        start = i + 1
                self._observe(events[start:])
                return
        self._observe(events)

    def _defer(self, ev: Event) -> None:
        """Close the parts of the model that ``ev`` reads or changes (``_CUT``) as a part
        before ``ev``, keep ``ev`` for the merge, and go on with fresh ones: the records
        after ``ev`` merge exactly after it. The other parts (serving series, sketches,
        configuration, coverage) go on through the cut: ``ev`` touches none of them, and
        they are the large ones."""
        before = RunModel(self.file)
        for name in _CUT:
            setattr(before, name, getattr(self, name))
        before.last_line = self.last_line
        self.timeline = Timeline()
        self.failures = Failures()
        self.notices = Notices()
        self.hang_obs = HangObserver()
        self._deferred.append((before, ev))

    def deferred(self) -> list[tuple[RunModel, Event]]:
        """The parts this model closed, each with the record it deferred after it: merge
        each part, observe its record, then merge this model."""
        return self._deferred

    def _observe(self, events: Sequence[Event]) -> None:
        if not events:
            return
        cov = self.coverage
        cov.events += len(events)
        cov.kind_counts.update(map(_KIND, events))
        table = _TABLE
        extra = _OBSERVED
        last = self.last_line
        dynamo = self.dynamo
        clocked = _CLOCKED
        for ev in events:
            end = ev.end_line or ev.line
            if end > last:
                last = self.last_line = end
            kind = ev.kind
            (table.get(kind) or _seen)(self, ev)
            if ev.ts is not None and kind in clocked:  # Dynamo's records, and the local ones next to them
                cov.stamped(ev.ts)
                if ev.text[10:11] == "T" or ev.line <= dynamo.until:
                    dynamo.observe(kind, ev.line, ev.rank, ev.ts, ev.text)
                else:
                    dynamo.local_records += 1
                    dynamo.passed = ev
            if kind in extra:
                if kind in HANG_KINDS:
                    self.hang_obs.observe(kind, ev.line, ev.rank, ev.ts, ev.fields, ev.text, ev.file)
                else:
                    self.serving.observe(kind, ev.line, ev.rank, ev.ts, ev.fields, ev.text, ev.file)

    def needs_context(self, reason: str) -> None:
        """A handler read state that a model of a later part of the log would lack."""
        if self.context_read is None:
            self.context_read = reason

    # -- merge -------------------------------------------------------------------------
    def merge_problem(self, later: RunModel) -> str | None:
        """Why ``later`` cannot be merged into this model exactly, or None if it can.

        (A problem of the unrecognised shapes is judged against this model as it stands:
        deferred records add no shapes, so the parts of ``later`` are judged together.)"""
        if self.config.continued:  # its lines, which a part read alone took for no command's
            return "a launch command that goes on with a backslash into the next part"
        shapes = dict.fromkeys(self.coverage.unknown_shapes)
        for part in [p for p, _ in later._deferred] + [later]:
            if part.context_read is not None:
                return part.context_read
            new = [s for s in part.coverage.unknown_shapes if s not in shapes]
            if new and len(shapes) + len(new) > MAX_UNKNOWN_SHAPES:
                return "too many unrecognised shapes to keep them all"
            shapes.update(dict.fromkeys(new))
        return None

    def merge(self, later: RunModel) -> None:
        """Add ``later``, the model of the records that followed this model's, in place.

        The result is the model one pass over both parts would have built (the parallel
        reader relies on it): ``later``'s deferred records are observed here, between its
        parts, with this model's state. ``later`` must not have read state it lacked
        (:meth:`merge_problem`); given that, each part merges by its own rules (``merge``
        beside each state). ``later`` is consumed (its objects move into this model).
        """
        problem = self.merge_problem(later)
        if problem is not None:
            raise ValueError(f"cannot merge: {problem}")
        for part, ev in later._deferred:
            self._merge(part)
            self._observe((ev,))  # as one pass would have: after everything before it
        later._deferred = []
        self._merge(later)

    def _merge(self, later: RunModel) -> None:
        self.timeline.merge(later.timeline)
        self.failures.merge(later.failures)
        self.config.merge(later.config)
        self.throughput.merge(later.throughput)
        self.coverage.merge(later.coverage)
        self.notices.merge(later.notices)
        self.hang_obs.merge(later.hang_obs)
        self.serving.merge(later.serving)
        self.dynamo.merge(later.dynamo)
        self.pools.merge(later.pools)
        for rank in later.pools.rank_kv:  # a rank whose pools' records span both parts
            place_rank(self, rank)
        self.last_line = max(self.last_line, later.last_line)

    # -- summary -----------------------------------------------------------------------
    def summary(self, stats: Any = None) -> RunSummary:
        """The run as it stands: a snapshot that later observing does not change, and
        that taking changes nothing in the model."""
        verdict = judge(self)
        t = self.timeline
        # "-" is a rank only when the log names none: then it is the single scheduler
        labels = named_ranks(self)
        # a py-spy dump's process title (sglang::scheduler_DP1_TP1_EP1_PP0) names its rank where no
        # line is prefixed with it; its main thread's frames place it (an event loop is serving)
        dumped = dump_places(self.hang_obs)
        titled = [d["rank"] for d, _ in dumped if d.get("rank_from") == "process title" and d["rank"] not in labels]
        labels = sorted(dict.fromkeys(labels + titled), key=rank_sort_key)
        bars = t.drawn_bars()
        if not labels and (NO_RANK in t.ranks or bars or t.answered or t.ready or t.http_up or dumped):
            labels = [NO_RANK]
        drawer = bar_rank(t.ranks) if bars else None
        if drawer == NO_RANK and NO_RANK not in labels:
            labels = [NO_RANK, *labels]  # the bars' process (TP rank 0's), which no line of the log names
        reached: dict[str, str] = {k: p for k in labels if k in t.ranks and (p := t.ranks[k].phase)}
        if drawer is not None and bars:
            # the bars are the drawer's (TP rank 0's, or an unnamed process's): they place it
            furthest = max(bars, key=PHASE_INDEX.__getitem__)
            if PHASE_INDEX[furthest] > PHASE_INDEX.get(reached.get(drawer, ""), -1):
                reached[drawer] = furthest
        if labels == [NO_RANK] and (t.ready or t.answered):
            # the server of a log that names no rank is ready (its fired-up line, a request or probe
            # it answered): its scheduler serves
            reached[NO_RANK] = "serving"
        elif labels == [NO_RANK] and t.http_up and PHASE_INDEX.get(reached.get(NO_RANK, ""), -1) < PHASE_INDEX["warmup"]:
            reached[NO_RANK] = "warmup"  # its HTTP server is up: every scheduler was ready, the warm-up not done
        elif t.ready:  # the server is ready once every scheduler is: a rank that printed after it serves
            after = t.ready["line"]
            reached.update({k: "serving" for k in labels
                            if k not in reached and k in t.ranks and t.ranks[k].last_line > after})
        elif t.answered and not t.answered.get("probe"):
            # a request served, its readiness line not in the log: SGLang starts its HTTP server once
            # every scheduler is ready, so a rank past its KV pool before it serves, as the line would say
            served = t.answered["line"]
            reached.update({k: "serving" for k, p in reached.items() if k in t.ranks
                            and PHASE_INDEX[p] >= PHASE_INDEX["kv_cache_alloc"] and t.ranks[k].last_line < served})
        later: dict[str, dict[str, Any]] = {}  # a rank's records the verdict gave it (a rank-less traceback)
        for rec in self.failures.crash_events:  # a traceback can place a rank further than its log lines did
            src, rec = rec, verdict.resolved.get(id(rec), rec)
            r, p = rec.get("rank"), rec.get("phase")
            if r is not None and src.get("rank") is None and rec is not src:
                later[r] = rec
            if r is None and labels == [NO_RANK] and rec.get("source") not in CAUGHT_SOURCES:
                r = NO_RANK  # a log that names no rank: its one scheduler's crash (or the launcher's
                # warm-up, which begins once every scheduler is ready: the scheduler is in warmup)
            # (the launcher's own phase is no rank's: a rank it names is not placed by it)
            if r is not None and r in labels and p in PHASE_INDEX and (r not in reached
                                                                     or PHASE_INDEX[p] > PHASE_INDEX[reached[r]]):
                reached[r] = p
        served = min((rec["line"] for rec in self.failures.crash_events if rec.get("rank") in labels
                      and rec.get("phase") == "serving" and rec.get("source") not in CAUGHT_SOURCES), default=None)
        if served is not None:
            # a rank failed in its event loop: its batches run with every other rank of the server
            # (their collectives), so a rank past its KV pool whose lines end before that was
            # serving too, as when a request was answered (real-pairs 017)
            reached.update({k: "serving" for k, p in reached.items() if k in t.ranks
                            and PHASE_INDEX[p] >= PHASE_INDEX["kv_cache_alloc"] and t.ranks[k].last_line < served})
        for d, p in dumped:
            r = d["rank"] or NO_RANK  # (a scheduler's dump whose rank no title names: the unnamed one's)
            if r in labels and p in PHASE_INDEX and (r not in reached or PHASE_INDEX[p] > PHASE_INDEX[reached[r]]):
                reached[r] = p
            if r in titled and r not in later:  # its last record is the dump
                later[r] = {"file": d.get("file"), "line": d["line"], "rank": r, "text": d.get("text") or ""}
        per_rank = {k: self._rank_record(k, reached.get(k), drawer, later.get(k)) for k in labels}
        c = self.config
        return with_ends(self._summary(verdict, labels, per_rank, c, stats), in_log(self.notices.get("job_end", [])))

    def _summary(self, verdict: Any, labels: list[str], per_rank: dict[str, RankRecord], c: Config,
                 stats: Any) -> RunSummary:
        t = self.timeline
        return RunSummary(
            file=self.file,
            outcome=verdict.outcome,
            outcome_reason=verdict.reason,
            ranks=labels,
            per_rank=per_rank,
            crash=_with_fingerprint(copy.deepcopy(verdict.crash)),
            exceptions=[DistinctException.from_dict(_distinct_view(d, verdict.resolved))
                        for d in self.failures.exceptions],
            hang=Hang.from_dict(copy.deepcopy(verdict.hang)) if verdict.hang else None,
            errors=[LoggedError.from_dict(copy.deepcopy(e)) for e in verdict.errors],
            ready=Ready.from_dict(t.ready) if t.ready else None,
            throughput=ThroughputFigures.from_dict(self.throughput.to_dict()),
            server_args=copy.deepcopy(c.server_args),
            server_args_form=c.server_args_form,
            launch_command=c.launch_command,
            launch_args=dict(c.launch_args),
            env=dict(sorted(c.env.items())),
            versions=dict(c.versions),
            notices={k: [Notice.from_dict(n) for n in v] for k, v in self.notices.items()},
            coverage=CoverageRecord.from_dict(self.coverage.to_dict(stats, self.last_line)),
            warnings=list(getattr(stats, "warnings", []) or []) + self.coverage.warnings() + self.dynamo.warnings(),
            clock=self.dynamo.clock(),
            serving=self._serving(),
            pools=self._pools(c),
            stopped=Stop.from_dict(copy.deepcopy(verdict.stop)) if verdict.stop else None,
        )

    def _serving(self) -> Serving | None:
        """The serving phase for the summary: the observer's object as records (a copy, which
        ``summary()`` makes: observing more never changes a summary already taken)."""
        serving = self.serving.summary()
        return Serving.from_dict(serving) if serving is not None else None

    def _pools(self, c: Config) -> MemoryPools | None:
        """The pools for the summary, with the texts that may carry per-pool state lines."""
        messages = [(d.get("message") or "", _message_at(d)) for d in self.failures.exceptions]
        messages += [(n.get("text") or "", n) for key in ("leak_message", "pool_leak", "pool_check")
                     for n in self.notices.get(key, [])]
        env_evidence = [n for key in ("env", "launch_command") for n in self.notices.get(key, [])]
        pools = summarize_pools(self.pools, c.env, env_evidence, messages)
        return MemoryPools.from_dict(copy.deepcopy(pools)) if pools is not None else None

    def _last_seen(self, label: str, r: RankState, given: dict[str, Any] | None) -> LastSeen:
        """The rank's last record: its own, or a rank-less fatal record the verdict gave it."""
        line, ts, text = (r.last_line, r.last_ts, r.last_text) if label in self.timeline.ranks else (0, None, "")
        if given is not None:
            end, end_text = record_end(given)
            if end > line:
                line, ts, text = end, given.get("ts") or ts, end_text
        if not line:
            return NOT_SEEN  # no line of its own
        return LastSeen.of_rank(line, ts, text[:500], milestone_name(r.milestone))

    def _rank_record(self, label: str, reached: str | None, drawer: str | None,
                     given: dict[str, Any] | None = None) -> RankRecord:
        """One rank's record; ``given``: a rank-less fatal record the verdict gave this rank,
        which is the rank's last seen when it comes after the rank's own lines."""
        r = self.timeline.ranks.get(label) or RankState()
        memory = pool_ends({key: copy.deepcopy(v) for key, v in r.memory.items()
                            if key not in ("capture_end_line", KV_HYBRID)})
        if memory:
            memory["evidence"] = {key: dict(v) for key, v in r.evidence.items()}
        return RankRecord(
            label=label,
            phase_reached=reached,
            phases={p: PhaseSpan(info["first_line"], info["first_ts"], info["last_line"], info["last_ts"])
                    for p, info in r.phases.items()},
            last_seen=self._last_seen(label, r, given),
            progress={p: Bar(**b) for p, b in self.timeline.drawn_bars().items()} if label == drawer else {},
            memory=Memory.from_dict(memory),
        )


def _message_at(d: dict[str, Any]) -> dict[str, Any]:
    """Where a distinct traceback's message was printed: its exception line when known."""
    first = (d.get("occurrences") or [{}])[0]
    at = first.get("exception_line") or {"line": d.get("first_line"), "text": d.get("text")}
    return {"file": d.get("file"), "line": at.get("line"), "rank": first.get("rank"), "text": at.get("text")}


def _distinct_view(d: dict[str, Any], resolved: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """A distinct traceback with the ranks that share it (as resolved) and its occurrences."""
    out = {k: copy.deepcopy(v) for k, v in d.items() if k not in ("signature", "occurrences")}
    occurrences = [resolved.get(id(o), o) for o in d["occurrences"]]
    ranks: list[str | None] = []
    for occ in occurrences:
        if occ["rank"] not in ranks:
            ranks.append(occ["rank"])
    out["ranks"] = ranks
    out["occurrences"] = [{"rank": o["rank"], "line": o["line"], "end_line": o["end_line"], "ts": o.get("ts"),
                           "oom": o["oom"]} for o in occurrences]
    return out


_TABLE = _dispatch_table()
# A deferred record must not feed the serving observer, which goes on through it (_defer).
assert not READS_EARLIER & SERVING_KINDS


def _with_fingerprint(crash: dict[str, Any] | None) -> Crash | None:
    """The crash with its fingerprint (``model.fingerprint``), the same across runs and versions."""
    if crash is None:
        return None
    crash["fingerprint"] = fingerprint(crash)
    return Crash.from_dict(crash)
#: Kinds that also feed the hang and serving observers (decode and prefill batches feed the
#: serving observer from their handlers, model/throughput.py).
_OBSERVED = HANG_KINDS | SERVING_KINDS
#: Kinds whose records the clock of ``model/dynamo.py`` reads: those always observed as events
#: (the bulk reader takes batch and access lines, a probe path's answers once its first was read,
#: records no handler reads, and the lines a handler reads only while the model waits for them, in
#: columns: ``columns.class_of``), so that both readers give one clock.
_CLOCKED = frozenset((set(_TABLE) | set(_OBSERVED)) - {"decode_batch", "prefill_batch", "http_access", "http_probe"}
                     - AWAITED)
