"""Failures as the log shows them: tracebacks, native aborts, hang evidence.

Handlers here only record; :mod:`.outcome` judges the run from the records, without
changing them, so that a summary taken mid-stream changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..events import Event
from .coverage import shape
from .phases import phase_of_frames
from .rank import NO_RANK, draws_bars
from .registry import handles

if TYPE_CHECKING:
    from .run import RunModel

MAX_DISTINCT_EXCEPTIONS = 50
_PROCTITLE = re.compile(r"sglang::scheduler_((?:[A-Z_]+-?\d+_?)+)")
#: Texts of a watchdog or collective timeout (a hang, whatever is raised after it).
HANG_MARKERS = ("Watchdog caught collective operation timeout", "watchdog got stuck",
                "Timeout(ms)=", "watchdog timeout")


@dataclass
class Failures:
    """Fatal records in log order, distinct tracebacks, hang evidence."""

    #: distinct tracebacks, each with its occurrences (the crash records themselves)
    exceptions: list[dict[str, Any]] = field(default_factory=list)
    #: fatal records in order: tracebacks and native crashes
    crash_events: list[dict[str, Any]] = field(default_factory=list)
    hang_events: list[dict[str, Any]] = field(default_factory=list)
    #: whether a C++ stack frame was seen (only the first one is a crash record)
    cpp_frame_seen: bool = False

    def add_distinct(self, rec: dict[str, Any], m: RunModel) -> None:
        sig = (rec["exception"], shape(rec["message"] or ""),
               tuple((fr.get("path"), fr.get("func")) for fr in rec["frames"][-6:]))
        for d in self.exceptions:
            if d["signature"] == sig:
                d["occurrences"].append(rec)
                return
        if len(self.exceptions) >= MAX_DISTINCT_EXCEPTIONS:
            m.needs_context("too many distinct exceptions: which are kept depends on those before")
        else:
            self.exceptions.append({
                "signature": sig, "exception": rec["exception"], "message": rec["message"],
                "phase": rec["phase"], "frames": rec["frames"],
                "chain": rec["chain"], "oom": rec["oom"], "text": rec["text"],
                "first_line": rec["line"], "end_line": rec["end_line"], "file": rec["file"],
                "occurrences": [rec],
            })

    def merge(self, later: Failures) -> None:
        """Records follow in order; a traceback seen on both sides keeps one entry; only
        the first C++ frame is a crash; a crash is hang evidence only if nothing else is."""
        for d in later.exceptions:
            mine = next((x for x in self.exceptions if x["signature"] == d["signature"]), None)
            if mine is not None:
                mine["occurrences"].extend(d["occurrences"])
            elif len(self.exceptions) < MAX_DISTINCT_EXCEPTIONS:
                self.exceptions.append(d)
        crashes = later.crash_events
        if self.cpp_frame_seen:
            crashes = [c for c in crashes if not c.get("cpp_frame")]
        self.crash_events.extend(crashes)
        self.cpp_frame_seen = self.cpp_frame_seen or later.cpp_frame_seen
        hangs = later.hang_events
        if self.hang_events and hangs and hangs[0].get("kind") == "exception":
            hangs = hangs[1:]
        self.hang_events.extend(hangs)


def is_hang_consequence(rec: dict[str, Any], first_hang_line: int | None = None) -> bool:
    """A fatal error that a hang explains: a watchdog's own message, or, after a watchdog
    fired, an abort, a fatal signal, a collective error or the parent noticing a dead child."""
    text = f"{rec.get('exception') or ''} {rec.get('message') or ''}"
    if any(mk in text for mk in HANG_MARKERS):
        return True
    if first_hang_line is None or rec["line"] < first_hang_line:
        return False
    return bool(rec.get("native") or rec.get("fatal_signal") or rec.get("rank") is None
                or "DistBackendError" in text or "NCCL" in text)


def phase_for(m: RunModel, rank: str | None, frames: list[dict[str, Any]]) -> str | None:
    """The phase a failure on ``rank`` happened in: from its frames, else from what came
    last on that rank (its last phase record, or a later progress bar if the rank is the
    one that draws bars)."""
    phase = phase_of_frames(frames)
    if phase is not None:
        return phase
    t = m.timeline
    key = rank or (NO_RANK if set(t.ranks) == {NO_RANK} else None)
    r = t.ranks.get(key) if key is not None else None
    if r is not None and r.phase:
        if rank is None:  # "a single-rank run" may be false given ranks seen before us
            m.needs_context("the phase of a rank-less crash in a single-rank run")
        return r.phase
    # Without a rank of its own in this model: the rank's phase or the furthest phase
    # of the whole log decide, and records before us may change either; unless the
    # crash has no rank, ranks are labelled, and serving (the last phase) was reached.
    if rank is not None or not any(k != NO_RANK for k in t.ranks) or t.global_phase != "serving":
        m.needs_context("the phase of a crash, from what its rank did before")
    return t.global_phase


def _brief(rec: dict[str, Any]) -> dict[str, Any]:
    return {"file": rec["file"], "line": rec["line"], "rank": rec["rank"],
            "text": (rec.get("message") or rec["text"])[:300], "kind": "exception"}


@handles("exception")
def on_exception(m: RunModel, ev: Event) -> None:
    f = ev.fields
    rank = ev.rank
    frames = f.get("frames") or []
    record = {
        "rank": rank,
        "rank_inferred_from": None,
        "source": f.get("source"),
        "exception": f.get("exception"),
        "message": f.get("message"),
        "frames": frames,
        "chain": f.get("chain") or [],
        "oom": f.get("oom"),
        "fatal_signal": f.get("fatal_signal"),
        "exception_line": f.get("exception_line"),
        "file": ev.file,
        "line": ev.line,
        "end_line": ev.end_line,
        "ts": ev.ts,
        "text": ev.text,
        "phase": phase_for(m, rank, frames),
    }
    fl = m.failures
    fl.add_distinct(record, m)
    if is_hang_consequence(record) and not fl.hang_events:
        fl.hang_events.append(_brief(record))
    fl.crash_events.append(record)
    if rank is not None:
        r = m.timeline.rank(rank)
        exc_at = f.get("exception_line")
        r.last_line = exc_at["line"] if exc_at else (ev.end_line or ev.line)
        lines = [ln for ln in (ev.text or "").splitlines() if ln.strip()]
        r.last_text = exc_at["text"] if exc_at else (lines[-1] if lines else "")


def _native_crash(m: RunModel, ev: Event, rank: str | None, message: str | None, **extra: Any) -> None:
    """A crash without a Python exception (a C++ abort or stack dump), as a crash record."""
    rec = {"rank": rank, "source": "native", "exception": None, "message": message,
           "frames": [], "oom": None, "file": ev.file, "line": ev.line, "end_line": ev.line,
           "ts": ev.ts, "text": ev.text, "phase": phase_for(m, rank, []), "native": True, **extra}
    m.failures.crash_events.append(rec)


@handles("cpp_abort", "cpp_terminate")
def on_cpp_abort(m: RunModel, ev: Event) -> None:
    _native_crash(m, ev, ev.rank, ev.fields.get("message"))
    m.notices.add("native_abort", ev)


@handles("cpp_frame")
def on_cpp_frame(m: RunModel, ev: Event) -> None:
    """A C++ stack frame: a native crash. The rank may be in the process title."""
    found = _PROCTITLE.search(ev.text)
    rank = found.group(1).replace("_", " ") if found else ev.rank
    if not m.failures.cpp_frame_seen:
        m.failures.cpp_frame_seen = True
        _native_crash(m, ev, rank, "C++ stack trace", cpp_frame=True)
    m.notices.add("cpp_frame", ev)


@handles("sigquit", "subprocess_crashed", "tb_fragment")
def on_failure_notice(m: RunModel, ev: Event) -> None:
    """Records that say something failed without saying what: kept as evidence."""
    m.notices.add(ev.kind, ev)


def c10d_rank(head: dict[str, Any]) -> str | None:
    return f"rank{head['global_rank']}" if "global_rank" in head else None


@handles("c10d_log", "collective_timeout", "collective_failure")  # torch watchdog and store timeouts
def on_c10d_log(m: RunModel, ev: Event) -> None:
    msg = ev.fields.get("message") or ""
    head = ev.fields.get("head") or {}
    if any(mk in msg for mk in HANG_MARKERS):
        m.failures.hang_events.append({"file": ev.file, "line": ev.line, "rank": c10d_rank(head),
                                       "text": ev.text, "kind": "nccl_watchdog"})
    m.notices.add("c10d", ev)


@handles("watchdog_timeout")
def on_watchdog_timeout(m: RunModel, ev: Event) -> None:
    m.failures.hang_events.append({"file": ev.file, "line": ev.line, "rank": ev.rank, "text": ev.text,
                                   "kind": "sglang_watchdog"})


__all__ = ["Failures", "draws_bars"]
