"""Follow a server log live and explain a crash the moment it happens.

The byte source (a local file through watchdog, or a remote one over SSH) runs in a
thread and hands chunks to the main loop through a queue; the main loop feeds them to
the same :class:`~logforensics.ingest.LiveRun` that ``parse`` and ``diff`` use, so the
events seen live are the events of ``parse`` on the finished file.

A crash is recognised as soon as its exception line arrives: the traceback is still
open in the parser (more lines may follow), so the diagnosis runs on a snapshot of the
run model with that traceback added, without changing what the parser later emits.
Other ranks' tracebacks that arrive within ``grace`` seconds are folded into the
report (deduplicated, with the ranks that share each one).
"""

from __future__ import annotations

import copy
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..diagnose.engine import Diagnosis, evaluate
from ..diagnose.rulespec import RuleSpec
from ..events import PHASES, Event
from ..ingest import LiveRun
from ..model.failures import CAUGHT_SOURCES
from ..model.run import RunSummary
from ..model.serving_records import LastBatch, PressureWindow, Resumed, Serving
from ..model.startup import bar_phase
from ..sources import Chunk, Follower, Notice

_PHASE_INDEX = {p: i for i, p in enumerate(PHASES)}
_FATAL_KINDS = {"exception", "cpp_abort", "cpp_terminate", "subprocess_crashed"}
#: A rank silent this many times longer than the baseline needed for its phase is flagged.
HANG_FACTOR = 3.0
#: Seconds without new bytes after which a source counts as paused (``WatchState.settle``).
SETTLE_AFTER = 0.5
#: Serving health is judged again at most this often (seconds): it summarises the run.
HEALTH_EVERY = 1.0


@dataclass
class RankLive:
    """What the live view shows for one rank."""

    phase: str | None = None
    phase_since_wall: float = 0.0
    last_wall: float = 0.0
    last_line: int = 0
    avail_gib: float | None = None
    progress: tuple[str, str] | None = None  # (phase, "desc n/N") of the last bar seen


@dataclass
class WatchState:
    """Live state of one followed log: the run, per-rank view, crash and readiness."""

    run: LiveRun
    baseline: RunSummary | None
    rules: list[RuleSpec]
    ranks: dict[str, RankLive] = field(default_factory=dict)
    crash_at: float | None = None          # wall time the crash was seen
    diagnosis: Diagnosis | None = None
    ready_at: float | None = None
    notices: list[str] = field(default_factory=list)
    bytes_read: int = 0
    silent_after: float = 60.0  # never flag a rank silent for less than this
    closed: bool = False
    alerts: list[str] = field(default_factory=list)  # serving health, in the order raised
    health_seen: set[tuple[str, Any]] = field(default_factory=set)   # begun
    health_ended: set[tuple[str, Any]] = field(default_factory=set)
    health_at: float | None = None

    def feed(self, data: bytes, now: float) -> list[Event]:
        self.bytes_read += len(data)
        return self._took(self.run.feed(data), now)

    def settle(self, now: float) -> list[Event]:
        """The source paused (``SETTLE_AFTER``): events of bytes that waited for the verdict on text."""
        return self._took(self.run.settle(), now)

    def close(self, now: float) -> list[Event]:
        """The source ended (standard input closed): the records the parser still held (a
        traceback cut before its exception line), and the outcome of the whole log as
        ``summary`` judges it, so that a crash that ends the input is a crash here too. Once:
        the watch also closes the run when it stops on its own (after ``--grace``)."""
        if self.closed:
            return []
        self.closed = True
        events = self._took(self.run.close(), now)
        if self.crash_at is None and self.run.summary().outcome == "crashed":
            self.crash_at = now
            self.diagnosis = self.diagnose()
        return events

    def _took(self, events: list[Event], now: float) -> list[Event]:
        for ev in events:
            self._track(ev, now)
        if self.crash_at is None:
            self._check_crash(events, now)
        return events

    def _track(self, ev: Event, now: float) -> None:
        if ev.kind == "server_ready" and self.ready_at is None:
            self.ready_at = now
        if ev.rank is None:
            prog = ev.fields.get("progress") if ev.kind == "progress" else None
            phase = bar_phase(ev.fields.get("desc") or "") if prog else None
            first = self.ranks.get(self.run.model.bar_rank()) if phase else None
            if prog and phase and first is not None:  # the model's rule: which bars, whose
                desc = (ev.fields.get("desc") or "").split(" (")[0]
                first.progress = (phase, f"{desc} {prog.get('n')}/{prog.get('total')}".strip())
                if ev.fields.get("avail_gib") is not None:
                    first.avail_gib = ev.fields["avail_gib"]
                first.last_wall = now
            return
        r = self.ranks.setdefault(ev.rank, RankLive(phase_since_wall=now))
        r.last_wall = now
        r.last_line = ev.line
        rec = self.run.model.ranks.get(ev.rank)
        if rec is not None and rec.phase != r.phase:
            r.phase = rec.phase
            r.phase_since_wall = now
            r.progress = None
        for key in ("avail_gib",):
            if ev.fields.get(key) is not None and ev.kind not in ("decode_batch", "prefill_batch"):
                r.avail_gib = ev.fields[key]

    def _check_crash(self, events: list[Event], now: float) -> None:
        # a traceback under the lead of code that logs it and goes on is no crash (as in summary)
        fatal = any(e.kind in _FATAL_KINDS and e.fields.get("source") not in CAUGHT_SOURCES for e in events)
        pending = self.run.parser.pending()
        if pending is not None and (pending.fields.get("exception") or pending.fields.get("fatal_signal")) \
                and pending.fields.get("source") not in CAUGHT_SOURCES:
            fatal = True
        if fatal:
            self.crash_at = now
            self.diagnosis = self.diagnose()

    def serving_health(self, now: float, force: bool = False) -> list[str]:
        """Serving health changed since the last call, one message per change (``health_states``):
        a stall, seesaw, KV pressure or imbalance that began, and one that ended, never again
        while the state holds. At most every HEALTH_EVERY s unless ``force``d (the source ended)."""
        if not force and self.health_at is not None and now - self.health_at < HEALTH_EVERY:
            return []
        self.health_at = now
        serving = self.run.summary().serving
        current = health_states(serving, self.run.name)
        new: list[str] = []
        for st in current:
            if st.key not in self.health_seen:
                self.health_seen.add(st.key)
                new.append(st.begin)
            if st.end is not None and st.key not in self.health_ended:
                self.health_ended.add(st.key)
                new.append(st.end)
        keys = {st.key for st in current}
        for key in sorted((k for k in self.health_seen - keys if k[0] == "imbalance"), key=str):
            self.health_seen.discard(key)  # it may begin again
            last = serving.last_batch if serving else None
            new.append(f"attention-DP groups no longer unbalanced ({key[1]} no longer the heaviest) as of "
                       f"{_at(last, self.run.name)}")
        self.alerts.extend(new)
        return new

    def snapshot(self) -> RunSummary:
        """The run summary now, including a traceback the parser still holds open."""
        pending = self.run.parser.pending()
        if pending is None:
            return self.run.summary()
        model = copy.deepcopy(self.run.model)
        model.observe(pending)
        return self.run.summary(model)

    def diagnose(self) -> Diagnosis:
        return evaluate(self.rules, self.snapshot(), self.baseline)

    def silent_ranks(self, now: float) -> list[tuple[str, float, float | None]]:
        """(rank, seconds silent, baseline seconds for that phase) for ranks that look hung."""
        out: list[tuple[str, float, float | None]] = []
        if self.crash_at is not None or self.ready_at is not None or len(self.ranks) < 1:
            return out
        for label, r in self.ranks.items():
            silent = now - r.last_wall
            expected = baseline_phase_seconds(self.baseline, label, r.phase) if self.baseline else None
            limit = max(self.silent_after, HANG_FACTOR * expected) if expected else None
            if limit is not None and silent > limit:
                out.append((label, silent, expected))
        return out


@dataclass(frozen=True)
class HealthState:
    """One serving-health finding as ``watch`` follows it: the message when it began, and the
    message when it ended (None while the log shows it still holding)."""

    key: tuple[str, Any]
    begin: str
    end: str | None


def _at(ev: LastBatch | Resumed | PressureWindow | None, file: str | None) -> str:
    """``file:line (rank)`` of a record the summary cites."""
    if not ev:
        return "?"
    where = (None if isinstance(ev, PressureWindow) else ev.file) or file  # a window of a series names no file
    rank = ev.rank
    return f"{where + ':' if where else 'line '}{ev.line}{f' ({rank})' if rank else ''}"


def health_states(serving: Serving | None, file: str | None = None) -> list[HealthState]:
    """Each serving-health episode and state the summary's ``serving`` shows, with its beginning
    and, once the log shows it, its end: stalls and the seesaw by their first line (ended by the
    window after them), KV pressure by each run of full windows with requests queued (eased by
    the first window without), DP imbalance by its heaviest group (its end is its absence:
    ``WatchState.serving_health``). The messages cite the lines."""
    if not serving:
        return []
    out: list[HealthState] = []
    h = serving.health
    for st in h.stalls.first if h else []:
        rank = next((e.rank for e in st.evidence if e.rank), None)
        rec = st.recovered
        out.append(HealthState(
            ("stall", st.line),
            f"decode stalled at line {st.line}{f' ({rank})' if rank else ''}: {st.tok_s:g} tok/s, "
            f"under a quarter of its running median {st.median_tok_s:g}, while prefill ran "
            f"(line {st.prefill_line})",
            None if not rec else f"decode stall of line {st.line} over at {_at(rec, file)}: "
                                 f"{rec.tok_s:g} tok/s after {st.windows} stalled window(s)"))
    sw = h.seesaw if h else None
    if sw:
        end = sw.ended
        out.append(HealthState(
            ("seesaw", sw.line),
            f"prefill and decode starve each other in turn from line {sw.line}: "
            f"{sw.switches} switches over {sw.windows} windows",
            None if not end else f"prefill/decode seesaw of line {sw.line} over at {_at(end, file)}"))
    imb = h.imbalance if h else None
    if imb and imb.found:
        sig = ", ".join(f"{x.figure} {x.heaviest_share:g}x" for x in imb.signals if x.figure in imb.agreeing)
        lines = sorted({e.line for x in imb.signals if x.figure in imb.agreeing
                        for e in x.evidence if e.line is not None})
        out.append(HealthState(("imbalance", imb.heaviest),
                               f"attention-DP groups unbalanced: {imb.heaviest} carries "
                               f"{sig} the groups' mean (lines {', '.join(map(str, lines))})", None))
    for run in serving.kv_full.runs if serving.kv_full else []:
        eased = run.eased
        out.append(HealthState(
            ("kv_pressure", run.line),
            f"KV pool full (token usage {run.token_usage:g}) with {run.queue_req:g} requests queued "
            f"from line {run.line}",
            None if not eased else f"KV pressure of line {run.line} eased at {_at(eased, file)}: token usage "
                                   f"{eased.token_usage:g}, {eased.queue_req:g} requests queued"))
    return out


def baseline_phase_seconds(base: RunSummary | None, rank: str, phase: str | None) -> float | None:
    """How long the baseline's rank spent in ``phase`` (first line of it to first line of the next)."""
    if base is None or phase is None or rank not in base.phases:
        return None
    from datetime import datetime

    phases = base.phases[rank]
    info = phases.get(phase)
    if not info or not info.first_ts:
        return None
    later = [phases[p].first_ts for p in PHASES[_PHASE_INDEX[phase] + 1:] if p in phases and phases[p].first_ts]
    end = later[0] if later else info.last_ts
    if end is None:
        return None
    try:
        return max((datetime.fromisoformat(end) - datetime.fromisoformat(info.first_ts)).total_seconds(), 1.0)
    except (TypeError, ValueError):
        return None


def pump(source: Follower, out: queue.Queue[Any], stop: threading.Event) -> None:
    """Thread body: move items from a follower into a queue until stopped or exhausted."""
    try:
        for item in source:
            out.put(item)
            if stop.is_set():
                break
    except Exception as exc:  # noqa: BLE001 - handed to the main loop, which reports it
        out.put(exc)
    finally:
        out.put(None)


def follow(source: Follower, *, tick: float = 0.05) -> Iterator[Chunk | Notice | Exception | None | str]:
    """Items of ``source`` as they come, and "tick" when nothing came for ``tick`` seconds."""
    q: queue.Queue[Any] = queue.Queue()
    stop = threading.Event()
    thread = threading.Thread(target=pump, args=(source, q, stop), daemon=True)
    thread.start()
    try:
        while True:
            try:
                item = q.get(timeout=tick)
            except queue.Empty:
                yield "tick"
                continue
            yield item
            if item is None:
                return
    finally:
        stop.set()
        try:
            source.stop()
        except Exception:  # noqa: BLE001
            pass

