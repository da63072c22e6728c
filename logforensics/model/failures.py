"""Failures as the log shows them: tracebacks, native aborts, hang evidence.

Handlers here only record; :mod:`.outcome` judges the run from the records, without
changing them, so that a summary taken mid-stream changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..events import Event
from ..read.assemble import FH_HEADERLESS, HTTP_REQUEST_SOURCE, SEGFAULT_SOURCE, WARMUP_SOURCE
from ..read.fatal import process_group
from ..read.oom import KV_ALLOC_WORDS, decompose_oom
from ..read.raises import raised_in
from ..read.values import LOGGED_SOURCE, THREAD_SOURCE
from .clock import seconds
from .coverage import shape
from .hang import title_rank
from .phases import PHASE_END, phase_of_frames, scheduler_step
from .rank import NO_RANK, PHASE_INDEX, TORCH_RANK, draws_bars, torch_rank_label
from .registry import handles
from .summary import NATIVE_NO_EXCEPTION

if TYPE_CHECKING:
    from .run import RunModel

MAX_DISTINCT_EXCEPTIONS = 50
MAX_HANG_EVENTS = 64
#: Texts of a watchdog or collective timeout (a hang, whatever is raised after it).
HANG_MARKERS = ("Watchdog caught collective operation timeout", "watchdog got stuck",
                "Timeout(ms)=", "watchdog timeout")
#: A launch harness's wait for the server to come up, given up (sglang/test/test_utils.py
#: popen_launch_server: "TimeoutError: Server failed to start within the timeout period.", often
#: in a thread of the harness): the server printed no failure of its own and was not ready in the
#: harness's time, which is a hang's evidence, whatever thread reports it.
START_TIMEOUT_MARKERS = ("Server failed to start within the timeout period",)


@dataclass
class Failures:
    """Fatal records in log order, distinct tracebacks, hang evidence."""

    #: distinct tracebacks, each with its occurrences (the crash records themselves)
    exceptions: list[dict[str, Any]] = field(default_factory=list)
    #: fatal records in order: tracebacks and native crashes
    crash_events: list[dict[str, Any]] = field(default_factory=list)
    hang_events: list[dict[str, Any]] = field(default_factory=list)  # the first MAX_HANG_EVENTS
    #: every rank any hang record named, in order (dict keys)
    hang_ranks: dict[str, None] = field(default_factory=dict)
    #: hang ranks that a record printed as its process group's rank ("[PG 3 Rank 5]"), not
    #: c10d's global "[rankN]:" prefix (dict keys)
    group_ranks: dict[str, None] = field(default_factory=dict)
    #: errors a rank logged without stopping (an OOM message outside a traceback), at most 64
    errors: list[dict[str, Any]] = field(default_factory=list)
    #: whether a C++ stack frame was seen (only the first one is a crash record)
    cpp_frame_seen: bool = False
    #: the last torch-prefixed record that carried an Ascend CANN code ("[rank0]:[W.. ]
    #: Warning: EZ9999: Inner Error!"): {code, rank, line}; the CANN record after it, which
    #: names no rank, is that rank's
    cann_hint: dict[str, Any] | None = None
    #: the line of the last error a logger logged ("ERROR:name:...", or an unrecognised record that
    #: says an error and ends with the exception's text: "Error receiving requests ...: not enough
    #: values to unpack ..."), and that record's text (None for a logger's record with a level)
    logged_error: int | None = None
    logged_says: str | None = None
    #: the line of Python logging's "--- Logging error ---" or "Call stack:": the traceback that begins
    #: within ``LOGGING_ERROR_LINES`` after it (other writers' lines may come between) is logging's
    logging_error: int | None = None
    #: the last line of a C++ stack that a warning's record printed (``STORE_CHECK_FRAME``): its
    #: frames go on it, not a crash
    warning_stack: tuple[str | None, int] | None = None
    #: the last ``Scheduler debug info:`` header and the line its body has reached: the body's
    #: batch line, which names no rank, is the header's rank's
    debug_head: tuple[Event, int] | None = None
    #: the last torch c10d record ("[rank1]:[W1119 ...] TCPStore.cpp:125] [c10d] recvValue failed
    #: ..."): {file, line, rank, text, message}; c10's "Exception raised from ..." on the next
    #: line continues it (``on_cpp_frame``)
    last_c10d: dict[str, Any] | None = None
    #: whether a torch c10d record was read (a merge takes the later part's ``last_c10d`` then,
    #: None included: a timeout's record clears it)
    c10d_seen: bool = False
    #: the last line of each torch rank's c10d records (``[rankN]:`` or the line's rank): a rank
    #: whose C++ exception was logged and that logs again went on from it (``outcome._went_on``)
    c10d_lines: dict[str, int] = field(default_factory=dict)
    #: the first C++ stack as it goes on: its file, its last line and its crash record while no
    #: rank names it (a frame's process title, ``sglang::scheduler_DP1_TP1``, then does)
    cpp_stack: tuple[str | None, int, dict[str, Any] | None] | None = None

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
                "signature": sig, "exception": rec["exception"], "message": rec["message"], "source": rec["source"],
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
        elif later.cpp_stack is not None:  # the later part's stack is the first: its record is kept
            self.cpp_stack = later.cpp_stack
        self.crash_events.extend(crashes)
        self.cpp_frame_seen = self.cpp_frame_seen or later.cpp_frame_seen
        self.cann_hint = later.cann_hint or self.cann_hint
        if later.logged_error is not None:
            self.logged_error, self.logged_says = later.logged_error, later.logged_says
        if later.logging_error is not None:
            self.logging_error = later.logging_error
        if later.warning_stack is not None:
            self.warning_stack = later.warning_stack
        self.debug_head = later.debug_head or self.debug_head
        if later.c10d_seen:
            self.last_c10d, self.c10d_seen = later.last_c10d, True
        self.c10d_lines.update(later.c10d_lines)
        hangs = later.hang_events
        if self.hang_events and hangs and hangs[0].get("kind") == "exception":
            hangs = hangs[1:]
        hangs = [h for h in hangs if h.get("rank") not in self.hang_ranks]
        self.hang_events.extend(hangs[:max(0, MAX_HANG_EVENTS - len(self.hang_events))])
        for label in later.hang_ranks:
            self.hang_ranks[label] = None
        for label in later.group_ranks:
            self.group_ranks[label] = None
        self.errors.extend(later.errors[:max(0, 64 - len(self.errors))])


def add_hang(m: RunModel, rec: dict[str, Any]) -> None:
    """Keep a hang record: the first one of each rank (and rank-less ones), up to
    MAX_HANG_EVENTS; every rank named is kept."""
    fl = m.failures
    rank = rec.get("rank")
    if rank in fl.hang_ranks:
        return  # one record per rank is evidence enough
    if len(fl.hang_events) < MAX_HANG_EVENTS:
        fl.hang_events.append(rec)
    if rank:
        fl.hang_ranks[rank] = None


#: Functions of torch's NCCL watchdog thread: C++ frames through them are the watchdog's own
#: report (its stack when it gives up on a collective), wherever the dump sits in the log.
WATCHDOG_FRAMES = ("ProcessGroupNCCL::ncclCommWatchdog", "ProcessGroupNCCL::watchdogHandler",
                   "ProcessGroupNCCL::Watchdog::run", "WorkNCCL::checkTimeout", "ProcessGroupNCCL::heartbeatMonitor")
#: How many lines the ``what():`` line of a C++ terminate may follow it by.
WHAT_LINES = 2


def is_hang_report(rec: dict[str, Any], first_hang_line: int | None = None) -> bool:
    """A fatal record that is the watchdog's own report of a hang, not a failure of its own:
    its message (a collective timeout), its thread's C++ frames, or the terminate whose
    ``what()`` is the timeout."""
    text = f"{rec.get('exception') or ''} {rec.get('message') or ''}"
    if any(mk in text for mk in HANG_MARKERS) or _start_timeout(rec):
        return True
    if rec.get("native") and any(fn in str(rec.get("text") or "") for fn in WATCHDOG_FRAMES):
        return True
    # "terminate called after throwing ... DistBackendError", then "what(): ... timeout"
    return bool(rec.get("native_kind") == "cpp_terminate" and "DistBackendError" in text
                and first_hang_line is not None and 0 < first_hang_line - rec["line"] <= WHAT_LINES)


def _start_timeout(rec: dict[str, Any]) -> bool:
    """Whether a traceback is a launch harness's report that the server did not start in its time."""
    text = f"{rec.get('exception') or ''} {rec.get('message') or ''}"
    return any(mk in text for mk in START_TIMEOUT_MARKERS)


def is_hang_consequence(rec: dict[str, Any], first_hang_line: int | None = None) -> bool:
    """A fatal error that a hang explains: the watchdog's own report (:func:`is_hang_report`),
    or, after a watchdog fired, an abort, a fatal signal, a collective error or the parent
    noticing a dead child."""
    if is_hang_report(rec, first_hang_line):
        return True
    text = f"{rec.get('exception') or ''} {rec.get('message') or ''}"
    if first_hang_line is None or rec["line"] < first_hang_line:
        return False
    return bool(rec.get("native") or rec.get("fatal_signal") or rec.get("rank") is None
                or "DistBackendError" in text or "NCCL" in text)


#: Where SGLang's child processes start (multiprocessing runs them by name, not as a script).
_CHILD_ENTRIES = frozenset({"run_scheduler_process", "run_data_parallel_controller_process",
                            "run_detokenizer_process", "_bootstrap", "spawn_main"})


#: bench_one_batch's (python/sglang/bench_one_batch.py) functions that run its batches once its
#: model runner is built: a failure under them is in none of a server's phases.
_BENCH_RUN = frozenset({"latency_test", "latency_test_run_once", "correctness_test"})


def phase_for(m: RunModel, rank: str | None, frames: list[dict[str, Any]], message: object = None) -> str | None:
    """The phase a failure on ``rank`` happened in: from its frames, else from its message when
    it is an error SGLang raises in one start-up step, else from what came last on that rank
    (its last phase record, or a later progress bar if the rank is the one that draws bars)."""
    phase = phase_of_frames(frames) or raised_in(message)
    if phase is not None:
        return phase
    if rank is None and frames and any(f.get("func") == "<module>" for f in frames) \
            and not any(f.get("func") in _CHILD_ENTRIES for f in frames):
        return None  # a script's own process (SGLang's launcher, a training driver): no scheduler's phase
    if any(f.get("func") in _BENCH_RUN for f in frames):
        return None  # bench_one_batch's own batches after its start-up: it starts no server, so no phase
    t = m.timeline
    key = rank or (NO_RANK if set(t.ranks) == {NO_RANK} else None)
    r = t.ranks.get(key) if key is not None else None
    bar = t.last_bar() if rank is None or draws_bars(rank) else None
    if r is not None and r.phase:
        if rank is None:  # "a single-rank run" may be false given ranks seen before us
            m.needs_context("the phase of a rank-less crash in a single-rank run")
        if bar is not None and bar[1]["line"] > r.phase_line and PHASE_INDEX[bar[0]] > PHASE_INDEX[r.phase]:
            m.needs_context("the phase of a crash, from the progress bar printed last")
            return bar[0]  # the bar this rank drew after its last phase line places it
        end = PHASE_END.get(r.phase)
        info = r.phases.get(r.phase) or {}
        seen_end = r.evidence.get(end[0]) if end else None
        ended = end is not None and (info.get("last_kind") == end[0]
                                     or seen_end is not None and seen_end["line"] == info.get("last_line"))
        if ended and (bar is None or bar[1]["line"] < (info.get("last_line") or 0)) and scheduler_step(frames) is None:
            return None  # its last record ends the phase: it had left it, and no line says for what
            # (a scheduler still being built, past its model worker's steps, is in the last it reached)
        return r.phase
    # Without a rank of its own in this model: the rank's phase or the furthest phase
    # of the whole log decide, and records before us may change either; unless the
    # crash has no rank, ranks are labelled, and serving (the last phase) was reached.
    if rank is not None or not any(k != NO_RANK for k in t.ranks) or t.global_phase != "serving":
        m.needs_context("the phase of a crash, from what its rank did before")
    if rank is not None and TORCH_RANK.fullmatch(rank) and not _same_process(rank, t.ranks):
        return None  # torch's global rank of a process no SGLang line names: no record or bar of the
        # run is tied to it, nor the server's answers (673, 710, 1160)
    if rank is not None and t.global_phase != "serving" \
            and not _same_process(rank, t.ranks) and any(k not in (NO_RANK, rank) for k in t.ranks):
        # every rank prints its own start-up records, so other ranks' phase does not place
        # one that printed none (only serving is logged by one rank for all); the bars it draws
        # still do
        return bar[0] if bar is not None else None
    if rank is not None and not draws_bars(rank) and t.global_phase in t.bars \
            and not any(r.phase == t.global_phase for r in t.ranks.values()):
        return None  # only the bars reached it, which TP rank 0 draws, not this rank
    return t.global_phase


def _same_process(rank: str, ranks: Any) -> bool:
    """Whether torch's ``rankN`` is a rank the log names otherwise (``rank.torch_rank_label``:
    the label whose TP part is N, with one pipeline stage)."""
    return TORCH_RANK.fullmatch(rank) is not None and torch_rank_label(ranks, rank) in ranks




#: A crash record that is faulthandler's stack with its header above the window, in words:
#: such a dump has no exception line (none is cut); its header, which names the fatal error
#: or the signal, is what the log lacks.
HEADERLESS_DUMP = "a faulthandler stack dump (no exception line) whose header is not in this log"
#: What to collect for it.
HEADERLESS_DUMP_COLLECT = ("the lines above the stack dump: its header (the fatal error or signal faulthandler "
                           "names, and the thread) is not in this one")


def cpp_exception_words(message: str) -> str:
    """A C++ exception torch logged (``CPP_RAISED_SOURCE``), in words: where it was raised and
    logged (the record's own words are its message), and that no Python exception line shows it."""
    return f"{message.partition(': ')[0]} (no Python exception line in this log)"


def headerless_dump(source: str | None, exception: str | None) -> bool:
    """Whether a crash record is faulthandler's stack whose header is not in the log
    (``read.assemble``: frames in faulthandler's form with nothing above them)."""
    return source == FH_HEADERLESS and not exception


def _brief(rec: dict[str, Any]) -> dict[str, Any]:
    return {"file": rec["file"], "line": rec["line"], "rank": rec["rank"],
            "text": (rec.get("message") or rec["text"])[:300], "kind": "exception"}


#: Sources of tracebacks that SGLang logs and goes on from (``read.values.CAUGHT_LEADS``): the
#: NIXL KV sender's transfer thread marks the room failed and takes the next transfer; a
#: traceback wholly inside the HTTP server's packages (``read.assemble.http_layer_source``) is
#: one request's failure, which uvicorn logs and goes on from; a thread's, which Python's
#: threading reports ("Exception in thread X:"), ended the thread, not the process.
CAUGHT_SOURCES = frozenset({"transfer_worker", HTTP_REQUEST_SOURCE, THREAD_SOURCE, LOGGED_SOURCE})


def _logged_it(says: str | None, record: dict[str, Any]) -> bool:
    """Whether the record of the line above logged this traceback: Python's logging prints the
    traceback of ``exc_info`` on the lines after the record's message, which ends with the
    exception's text (``logger.error(f"...: {e}", exc_info=True)``). A logger's record with
    an error level (``says`` None) does; an unrecognised one where the exception's text is
    what it ends with, or where the exception is not in the log (cut)."""
    if says is None or record["exception"] is None:
        return True
    message = (record["message"] or "").split("\n", 1)[0].strip()
    return bool(message) and says.rstrip().endswith(message)


@handles("exception", reads_earlier=True)
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
        # the threads of a fatal error's dump whose failing thread is cut place the process too
        "phase": phase_for(m, rank, frames or f.get("dump_frames") or [], f.get("message")),
    }
    if record["source"] == SEGFAULT_SOURCE:  # a signal handler's banner and the native stack: no Python exception
        record["native"] = True
    if record["source"] == WARMUP_SOURCE:  # the launcher's warm-up request failed: its frames may be cut
        record["phase"] = "warmup"
    elif record["phase"] is None and str(f.get("message") or "").startswith(KV_ALLOC_WORDS):
        # SGLang's KV allocator raises it as it gives a batch its token slots: the server serves
        record["phase"] = "serving"
    logged = m.failures.logged_error
    if record["source"] is None and logged is not None and logged == ev.line - 1 \
            and _logged_it(m.failures.logged_says, record):
        record["source"] = LOGGED_SOURCE  # a logger logged it on the line above (``exc_info``)
    wrote = m.failures.logging_error
    if record["source"] is None and wrote is not None and 0 < ev.line - wrote <= LOGGING_ERROR_LINES:
        record["source"] = LOGGED_SOURCE  # logging's report of a record it could not write
        m.failures.logging_error = None
    died = f.get("scheduler_died")
    if record["source"] is None and died and died.get("rank") is not None:
        # the launcher's "Rank 0 scheduler died during initialization (exit code: -7)"
        record["source"] = f"Rank {died['rank']} scheduler"
    if died and isinstance(died.get("exit_code"), int):
        record["exit_code"] = died["exit_code"]
    quiet = _quiet_before(m, rank, ev)
    if quiet is not None:
        record["quiet_before"] = quiet
    fl = m.failures
    fl.add_distinct(record, m)
    if _start_timeout(record):
        if not fl.hang_events:
            add_hang(m, _brief(record))
        if record["source"] in CAUGHT_SOURCES:
            return  # a harness thread's report of the hang: its evidence, no error logged beside it
    if record["source"] in CAUGHT_SOURCES:  # logged by code that goes on: an error, not the rank's end
        if len(fl.errors) < 64:
            fl.errors.append({"file": ev.file, "line": ev.line, "end_line": ev.end_line, "rank": rank, "ts": ev.ts,
                              "text": ev.text, "kind": "exception", "source": record["source"], "what": None,
                              "exception": record["exception"], "message": record["message"], "oom": record["oom"]})
        return
    if is_hang_consequence(record) and not fl.hang_events:
        add_hang(m, _brief(record))
    fl.crash_events.append(record)
    if rank is not None:
        r = m.timeline.rank(rank)
        r.last_line, r.last_text = record_end(record)
        r.last_ts = ev.ts or r.last_ts  # the last stamp seen: the record's (its header's) where it has one


def record_end(rec: dict[str, Any]) -> tuple[int, str]:
    """Where a traceback record leaves its rank: its exception line, else its last line (and
    that line's text)."""
    exc_at = rec.get("exception_line")
    if exc_at:
        return exc_at["line"], exc_at["text"]
    lines = [ln for ln in str(rec.get("text") or "").splitlines() if ln.strip()]
    return rec.get("end_line") or rec["line"], lines[-1] if lines else ""


#: Seconds a rank printed nothing before its traceback that are worth saying (a timeout's
#: wait: NCCL's and DeepEP's are minutes).
QUIET_S = 60.0


def _quiet_before(m: RunModel, rank: str | None, ev: Event) -> dict[str, Any] | None:
    """How long before ``ev`` (stamped) its rank's last stamped record was, when ``QUIET_S``
    or more: {seconds, ts (that record's stamp)}; else None."""
    r = m.timeline.ranks.get(rank) if rank is not None else None
    if r is None or not r.last_line or r.last_line >= ev.line:
        return None
    now, before = seconds(ev.ts), seconds(r.last_ts)
    if now is None or before is None or now - before < QUIET_S:
        return None
    return {"seconds": round(now - before, 3), "ts": r.last_ts}


def _native_crash(m: RunModel, ev: Event, rank: str | None, message: str | None, **extra: Any) -> dict[str, Any]:
    """A crash without a Python exception (a C++ abort or stack dump), as a crash record."""
    rec = {"rank": rank, "source": "native", "exception": None, "message": message,
           "frames": [], "oom": None, "file": ev.file, "line": ev.line, "end_line": ev.line,
           "ts": ev.ts, "text": ev.text, "phase": phase_for(m, rank, []), "native": True, **extra}
    m.failures.crash_events.append(rec)
    return rec


#: Records that end the rank that printed them without a Python exception, and what
#: each says happened (the record's own ``message`` field, when it has one, follows).
NATIVE_FATAL = {
    "cpp_abort": "C++ abort",
    "cpp_terminate": "C++ terminate",
    "cpp_what": "C++ exception",
    "device_assert": "CUDA device-side assertion",
    "hsa_fault": "GPU memory access fault (HSA)",
    "hsa_error": "ROCm runtime error",
    "cann_error": "Ascend CANN error",
    "cuda_error": "CUDA error",  # or HIP's (its ``api`` field)
    "kernel_launch_failed": "a kernel launch failed",
    "native_signal": "a fatal signal, caught by a native library's handler",
    "nvshmem_exit": "NVSHMEM ended the process",
    "glibc_abort": "heap corruption detected by glibc",
    "collective_failure": "collective failure detected by the watchdog",
}


@handles(*NATIVE_FATAL, reads_earlier=True)
def on_native_fatal(m: RunModel, ev: Event) -> None:
    """A native failure: the rank that printed it stopped. An HSA fault's ``node-N`` is an
    agent number, not a rank; torch's ``[rankN]`` before a c10d record is a global rank."""
    f = ev.fields
    rank = ev.rank
    extra: dict[str, Any] = {}
    if rank is None and ev.kind == "collective_failure":
        rank = c10d_rank(f.get("head") or {})
    group = process_group(str(f.get("message") or "")) if rank is None and ev.kind == "cpp_what" else None
    if group is not None:
        # torch's c10d says whose exception it is ("[PG ID 2 PG GUID 3 Rank 1] Process group watchdog
        # thread terminated ..."): the rank in that group, as a watchdog's record gives it (on_c10d_log)
        rank = f"rank{group[1]}"
        if group[0] != 0:
            m.failures.group_ranks[rank] = None
    hint = m.failures.cann_hint
    if rank is None and ev.kind == "cann_error" and hint and hint["code"] == f.get("code") \
            and ev.line - hint["line"] <= CANN_HINT_LINES:
        rank, extra = hint["rank"], {"rank_inferred_from": "torch_prefix_before"}
    what = (f"{f.get('api') or 'CUDA'} error" if ev.kind == "cuda_error"
            else f"kernel {f['kernel']} launch failed" if ev.kind == "kernel_launch_failed" and f.get("kernel")
            else NATIVE_FATAL[ev.kind])
    detail = f.get("message") or f.get("assertion") or f.get("code")
    if ev.kind == "cpp_what" and _what_of_terminate(m, ev, rank, str(detail or "")):
        return
    if ev.kind == "hsa_error":
        detail = f"{f.get('hsa_status')}: {detail}" if detail else f.get("hsa_status")
    elif ev.kind == "native_signal":
        detail = f"signal {f.get('signal')} {detail or ''}".rstrip()
    _native_crash(m, ev, rank, f"{what}: {detail}" if detail and ev.kind != "cpp_abort" else (detail or what),
                  native_kind=ev.kind, **extra)
    if extra and hint and hint["line"] == ev.line - 1 and hint.get("file") == ev.file:
        # torch's record of the same error on the line before ("[rank3]:[W1031 ..] Warning: EZ9999:
        # Inner Error!") is where the failure is first printed
        rec = m.failures.crash_events[-1]
        rec["line"], rec["text"] = hint["line"], f"{hint['text']}\n{ev.text}"
        rec["ts"] = rec["ts"] or hint.get("ts")
    m.notices.add("native_abort", ev)
    if ev.kind == "collective_failure":
        m.notices.add("c10d", ev)


def _what_of_terminate(m: RunModel, ev: Event, rank: str | None, what: str) -> bool:
    """``what():  ...`` on the line after "terminate called after throwing an instance of
    'c10::Error'" is that record's exception: its text joins the record (and an out-of-memory
    message in it, torch_npu's and older PyTorch's, its figures)."""
    events = m.failures.crash_events
    prev = events[-1] if events else None
    if prev is None or prev.get("native_kind") != "cpp_terminate" or prev["file"] != ev.file \
            or prev["end_line"] != ev.line - 1 or prev["rank"] not in (None, rank):
        return False
    prev["message"] = f"{prev['message']}: {what}" if what else prev["message"]
    prev["end_line"], prev["text"] = ev.line, f"{prev['text']}\n{ev.text}"
    prev["oom"] = prev.get("oom") or decompose_oom(None, what)
    m.notices.add("native_abort", ev)
    return True


def named_process(source: str | None) -> str | None:
    """The process a record's header names (``Scheduler`` of "Scheduler hit an exception",
    ``DetokenizerManager``, the launcher's ``Rank 0 scheduler``), or None: the sources this
    package gives records (``native``, ``faulthandler``, ``kv_alloc``, ...) are lower-case
    words, SGLang's names are not."""
    return source if source and source[:1].isupper() else None


#: Linux's signal numbers, of the signals that end a process: an exit code of -N
#: (Python's multiprocessing) or 128 + N (a shell) is the signal N ending it.
SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
           9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}


def ended_by(exit_code: int | None) -> str | None:
    """``signal 7 (SIGBUS)`` for an exit code of -7 or 135; None for a code no signal gives."""
    if exit_code is None:
        return None
    n = -exit_code if exit_code < 0 else exit_code - 128 if 128 < exit_code < 160 else None
    if n is None:
        return None
    return f"signal {n} ({SIGNALS[n]})" if n in SIGNALS else f"signal {n}"


def process_phrase(source: str | None) -> str | None:
    """The process a record's header names, for prose: ``the DetokenizerManager (its line
    names no rank)``, ``the Rank 0 scheduler``, ``the launcher's warm-up`` (the traceback its
    "Initialization failed. warmup error:" logs); None when it names none."""
    if source == WARMUP_SOURCE:
        return "the launcher's warm-up"
    if source == HTTP_SOURCE:
        return "the HTTP server"
    if source == RUNPY_SOURCE:
        return "the launcher's Python"
    named = named_process(source)
    if named is None:
        return None
    return f"the {named}" if any(ch.isdigit() for ch in named) else f"the {named} (its line names no rank)"


#: The source of uvicorn's record that the HTTP server could not bind its address (``on_uvicorn_msg``).
HTTP_SOURCE = "http_server"

#: The source of a piecewise CUDA graph runner's error record (``on_pcg_failed``).
PCG_SOURCE = "piecewise_cuda_graph"
#: The source of the KV allocator's error record (``on_kv_alloc_failed``).
KV_ALLOC_SOURCE = "kv_alloc"
#: The source of a C++ exception (c10::Error) that torch logged with its stack trace
#: (``on_cpp_frame``): its Python exception line, if it reached Python, is another record's.
CPP_RAISED_SOURCE = "cpp_exception"
#: The source of argparse's refusal of a command line (``on_argparse_error``).
ARGPARSE_SOURCE = "argparse"
#: The source of Python's refusal to run ``python -m MODULE`` (``on_runpy_error``).
RUNPY_SOURCE = "runpy"
#: Errors SGLang (or torch's c10d) logs and then raises, and argparse's, which it prints before
#: it exits: without a traceback's exception line, the logged message says what failed.
LOGGED_THEN_RAISED = frozenset({PCG_SOURCE, KV_ALLOC_SOURCE, CPP_RAISED_SOURCE, ARGPARSE_SOURCE})


def native_exception_words(source: str | None) -> str:
    """What a crash without a Python exception raised, in words: uvicorn's logged error (its
    OSError caught and logged, no traceback) or a native failure's none."""
    return ("none in this log (the HTTP server's error record: uvicorn logged its OSError, no traceback)"
            if source == HTTP_SOURCE else NATIVE_NO_EXCEPTION)


@handles("argparse_error")
def on_argparse_error(m: RunModel, ev: Event) -> None:
    """argparse refused a command line: it printed its usage, then this line, and exited
    with status 2 (``ArgumentParser.error``), before the program did anything else. The
    launcher's: a failure in the launch, before any scheduler started."""
    f = ev.fields
    m.failures.crash_events.append({
        "rank": ev.rank, "rank_inferred_from": None, "source": ARGPARSE_SOURCE, "exception": None,
        "message": f"{f.get('prog')} refused its command line: {f.get('message')}", "frames": [], "chain": [],
        "oom": None, "fatal_signal": False, "exception_line": None, "file": ev.file, "line": ev.line,
        "end_line": ev.line, "ts": ev.ts, "text": ev.text, "phase": "launch"})


#: runpy's message, the exception it caught in parentheses at its end ("Error while finding module
#: specification for 'sglang.launch_server' (ModuleNotFoundError: No module named 'sglang')").
_RUNPY_CAUGHT = re.compile(r"\((?P<exception>[A-Za-z_][\w.]*(?:Error|Exception)): (?P<message>.*)\)\s*$")


@handles("runpy_error")
def on_runpy_error(m: RunModel, ev: Event) -> None:
    """Python could not find the module ``python -m`` was to run (the package not installed in
    that interpreter, a typo): it printed this line and exited with status 1 before any of the
    module ran. The launcher's failure, before anything started."""
    message = str(ev.fields.get("message") or ev.text)
    caught = _RUNPY_CAUGHT.search(message)
    m.failures.crash_events.append({
        "rank": ev.rank, "rank_inferred_from": None, "source": RUNPY_SOURCE,
        "exception": caught.group("exception") if caught else None,
        "message": caught.group("message") if caught else message, "frames": [], "chain": [],
        "oom": None, "fatal_signal": False, "exception_line": None, "file": ev.file, "line": ev.line,
        "end_line": ev.line, "ts": ev.ts, "text": ev.text, "phase": "launch"})


def _logged_then_raised(m: RunModel, ev: Event, source: str, message: str, phase: str | None = None) -> None:
    """An error the rank logs and then raises: its first fatal record (its traceback, when
    the window holds it, follows), placed in ``phase`` where the error's own step says it, else
    in the rank's own phase. Were the rank to go on, it is an error the rank went on from
    (``outcome._went_on``)."""
    rank = ev.rank
    m.failures.crash_events.append({
        "rank": rank, "rank_inferred_from": None, "source": source, "exception": None, "message": message,
        "frames": [], "chain": [], "oom": None, "fatal_signal": False, "exception_line": None,
        "file": ev.file, "line": ev.line, "end_line": ev.line, "ts": ev.ts, "text": ev.text,
        "phase": phase or phase_for(m, rank, [])})
    if rank is not None:
        r = m.timeline.rank(rank)
        r.last_line, r.last_text, r.last_ts = ev.line, ev.text, ev.ts or r.last_ts


@handles("pcg_failed", reads_earlier=True)
def on_pcg_failed(m: RunModel, ev: Event) -> None:
    """The piecewise CUDA graph runner's error, which the rank then raises. When nothing else
    places the crash, ``outcome`` puts it in the graphs' capture."""
    msg = ev.fields.get("message")
    _logged_then_raised(m, ev, PCG_SOURCE, f"piecewise CUDA graph failed: {msg}" if msg
                        else "piecewise CUDA graph failed")


#: How each form of the KV allocator's error begins (its ``message`` field is the rest).
_KV_ALLOC_LEADS = dict(zip(("decode_oom", "prefill_oom", "kv_alloc_oom"), KV_ALLOC_WORDS))


@handles(*_KV_ALLOC_LEADS, reads_earlier=True)
def on_kv_alloc_failed(m: RunModel, ev: Event) -> None:
    """``Decode out of memory. Try to lower your batch size.`` (``Prefill``; since 2025 ``Out of
    memory. ...``): SGLang's KV allocator logs this, then raises it as a ``RuntimeError``
    (``alloc_token_slots``)."""
    rest = ev.fields.get("message") or ""
    # (it gives a batch its token slots: the server serves, whatever the rank's last record was)
    _logged_then_raised(m, ev, KV_ALLOC_SOURCE, f"{_KV_ALLOC_LEADS[ev.kind]} {rest}".strip(), "serving")


#: c10::Error's stack trace header: the function that threw and its source file and line.
_RAISED = re.compile(r"Exception raised from (\S+) at (\S+) \(most recent call first\)")
#: torch's c10d record head: its source file and line ("[rank1]:[W1119 ...] TCPStore.cpp:125] ").
_C10D_LOC = re.compile(r"\[[EFWIT][^\]]* ([^\s\]]+:\d+)\] ?")


_FRAME_NUMBER = re.compile(r"frame #(\d+): ")

#: The rendezvous store's check (c10d::TCPStore::check), which torch's heartbeat monitor calls for
#: its "should dump" flag: a failed check is logged as a warning ('[rank1]:[W...] Failed to check the
#: "should dump" flag on TCPStore ...') and the monitor goes on, so a stack through it is that
#: warning's, not a failure (real-unseen 1772).
STORE_CHECK_FRAME = "TCPStore::check("


@handles("cpp_frame", "cpp_raised", reads_earlier=True)
def on_cpp_frame(m: RunModel, ev: Event) -> None:
    """A C++ stack frame, or c10::Error's header above the frames: a native crash (the first
    of them). The rank may be in the process title. c10's "Exception raised from X at F:N
    (most recent call first):" on the line after a torch c10d record is that record's: the
    record logged a thrown C++ exception with its stack (c10::Error's message ends in it), so
    the failure starts at the record, on the rank its ``[rankN]:`` prefix names, and it is an
    exception raised in X, not an abort (below a CUDA or HIP error's lines of advice too)."""
    rank = title_rank(ev.text) or ev.rank
    fl = m.failures
    held = fl.warning_stack
    if held is not None and held[0] == ev.file and 0 < ev.line - held[1] <= 2:
        fl.warning_stack = (ev.file, ev.line)  # the logged warning's stack goes on
        m.notices.add("cpp_frame", ev)
        return
    if not fl.cpp_frame_seen and ev.kind == "cpp_frame" and STORE_CHECK_FRAME in ev.text:
        fl.warning_stack = (ev.file, ev.line)  # a store check's stack: a warning torch logged, no failure
        m.notices.add("cpp_frame", ev)
        return
    if not m.failures.cpp_frame_seen:
        m.failures.cpp_frame_seen = True
        number = _FRAME_NUMBER.search(ev.text) if ev.kind == "cpp_frame" else None
        # a stack's tail, its header and first frames above the window: what printed it is not in the log
        tail = number is not None and int(number.group(1)) > 0
        logged = m.failures.last_c10d
        raised = _RAISED.match(ev.text) if ev.kind == "cpp_raised" else None
        if raised and logged is not None and logged["file"] == ev.file \
                and 0 < ev.line - logged["line"] <= _message_lines(str(logged["message"])):
            rec = _logged_cpp_exception(m, ev, logged, raised)
        else:
            rec = _native_crash(m, ev, rank, "C++ stack trace", cpp_frame=True, **({"cpp_tail": True} if tail else {}))
        m.failures.cpp_stack = (ev.file, ev.line, rec if rec["rank"] is None else None)
    elif (stack := m.failures.cpp_stack) is not None and stack[0] == ev.file and 0 < ev.line - stack[1] <= 2:
        # the first stack goes on (a paste may put an empty line after each line); a frame in its
        # process's main program names the process by its title, and so the record's rank
        unnamed = stack[2]
        if unnamed is not None and rank is not None and ev.kind == "cpp_frame":
            unnamed.update(rank=rank, rank_inferred_from="process_title", phase=phase_for(m, rank, []))
            unnamed = None
        m.failures.cpp_stack = (ev.file, ev.line, unnamed)
    m.notices.add("cpp_frame", ev)


#: c10's CUDA and HIP errors: their message goes on for lines of advice after its first
#: ("CUDA kernel errors might be asynchronously reported ...", "For debugging consider passing
#: CUDA_LAUNCH_BLOCKING=1", "Compile with `TORCH_USE_CUDA_DSA` ...", since 2.5 a "Search for
#: `cudaError...'" line) and an empty line before the stack's header (c10/cuda/CUDAException.cpp);
#: torch_npu's allocator adds an empty line and its own "[ERROR] <stamp> (PID:N, Device:N, ...)
#: ERR00006 PTA memory error" to an out-of-memory message (real-pairs 080).
_DEVICE_ERROR = re.compile(r"\b(?:CUDA|HIP) error\b|\bNPU out of memory\b")
_DEVICE_ERROR_LINES = 6


def _message_lines(message: str) -> int:
    """How many lines below a torch record the stack header of the exception it logged may
    be: the next line, or below a CUDA or HIP error's advice; twice as many where a paste put an
    empty line after every line (real-unseen 1107)."""
    return 2 * (_DEVICE_ERROR_LINES if _DEVICE_ERROR.search(message) else 1)


def _logged_cpp_exception(m: RunModel, ev: Event, logged: dict[str, Any], raised: re.Match[str]) -> dict[str, Any]:
    """The crash record of a C++ exception torch logged (``on_cpp_frame``): from the c10d
    record's line to c10's header, with the function that threw, where, and the record's words."""
    rank = logged["rank"]
    where = raised.group(2).rsplit("/", 1)[-1]
    loc = _C10D_LOC.search(logged["text"])
    by = f", logged at {loc.group(1)}" if loc else ""
    what = f"C++ exception raised in {raised.group(1)} ({where}){by}"
    message = f"{what}: {logged['message']}".rstrip(": ")
    record = {
        "rank": rank, "rank_inferred_from": None, "source": CPP_RAISED_SOURCE, "exception": None,
        "message": message, "frames": [], "chain": [], "oom": decompose_oom(None, str(logged["message"])),
        "fatal_signal": False, "exception_line": None,
        "file": ev.file, "line": logged["line"], "end_line": ev.line, "ts": logged["ts"] or ev.ts,
        "text": f"{logged['text']}\n{ev.text}", "phase": phase_for(m, rank, []), "cpp_frame": True,
        "what": what}  # (the error's ``what``, should the rank go on)
    died = next((c for c in m.failures.crash_events if c["line"] == logged["line"] and c.get("file") == ev.file
                 and c.get("native")), None)
    if died is not None:  # the watchdog's death, read at its record: now with the stack it logged
        died.clear()
        died.update(record)
        return died
    m.failures.crash_events.append(record)
    return record


#: Exit codes of a child ended by a stop signal, SIGTERM or SIGINT: as Python's
#: multiprocessing reports them (-15, -2) and as a shell does (143, 130).
STOP_EXIT_CODES = frozenset({-15, -2, 143, 130})
#: SIGINT and SIGTERM, as the low seven bits of a wait status.
_STOP_SIGNALS = frozenset({2, 15})


def ended_by_stop_signal(kind: str, code: int | None) -> bool:
    """Whether a child's exit code says SIGTERM or SIGINT ended it. The launcher's
    ``Child process unexpectedly failed with ...`` prints ``os.waitpid``'s status, not an
    exit code: a status that is only a stop signal (exit byte 0, no core) is a child those
    signals ended (15: SIGTERM); 131 is SIGQUIT with a core."""
    if code is None:
        return False
    if code in STOP_EXIT_CODES:
        return True
    return kind == "child_failed" and code in _STOP_SIGNALS


@handles("sigquit", "subprocess_crashed", "tb_fragment", "child_failed", "scheduler_died")
def on_failure_notice(m: RunModel, ev: Event) -> None:
    """Records that say a process failed without saying how (the parent noticing a dead
    child, torn traceback text): kept as evidence; the outcome reads them. A child that a
    stop signal ended is also a sign of a stop (``stop_signal``)."""
    m.notices.add(ev.kind, ev, exit_code=ev.fields.get("exit_code"))
    if ev.kind == "scheduler_died" and not m.failures.crash_events:
        # the launcher's record that a scheduler is gone, no failure above it: the first fatal record
        _native_crash(m, ev, None, ev.text.split("] ", 1)[-1] if ev.text.startswith("[") else ev.text,
                      native_kind=ev.kind, exit_code=ev.fields.get("exit_code"))
    if ev.kind in ("subprocess_crashed", "child_failed") and ended_by_stop_signal(ev.kind, ev.fields.get("exit_code")):
        m.notices.add("stop_signal", ev)


@handles("child_terminated", reads_earlier=True)
def on_child_terminated(m: RunModel, ev: Event) -> None:
    """A launcher or DP controller joined a scheduler process and logged its exit code: 0 is a
    scheduler that returned; a stop signal's code a stop; any other a process that failed, its
    first record (what failed in it may be in no line of the log)."""
    code = ev.fields.get("exit_code")
    if code == 0:
        return
    m.notices.add("subprocess_crashed", ev)
    if ended_by_stop_signal("subprocess_crashed", code):
        m.notices.add("stop_signal", ev)
        return
    _native_crash(m, ev, ev.rank, ev.text.split("] ", 1)[-1] if ev.text.startswith("[") else ev.text,
                  native_kind=ev.kind, exit_code=code)


@handles("batch_discarded", reads_earlier=True)
def on_batch_discarded(m: RunModel, ev: Event) -> None:
    """--debug-mode's "Discarded the failed batch ...; resuming the event loop": the traceback
    just before it, of this rank, did not end the scheduler (the outcome counts it as an error
    the rank went on after)."""
    m.notices.add("batch_discarded", ev)
    _handled(m, ev)


#: Lines between a traceback's end and the record that says its code caught it.
_HANDLED_NEXT = 2


def _handled(m: RunModel, ev: Event, adjacent: bool = False) -> None:
    """The traceback just before ``ev`` (of its rank, or of none) was caught by the code that
    printed it, which went on (``handled_line``; ``adjacent``: only where it ended on the lines
    right above)."""
    events = m.failures.crash_events
    if not events or events[-1].get("native") or not (events[-1].get("rank") in (ev.rank, None) or ev.rank is None):
        return
    if adjacent and ev.line - (events[-1].get("end_line") or events[-1]["line"]) > _HANDLED_NEXT:
        return
    events[-1]["handled_line"] = ev.line


@handles("retry_failed", reads_earlier=True)
def on_retry_failed(m: RunModel, ev: Event) -> None:
    """SGLang's retry(): "retry() failed once ... Will delay 0.85s and retry.", after the exception
    it printed: that traceback was caught and the call is tried again."""
    _handled(m, ev, adjacent=True)


@handles("request_error", reads_earlier=True)
def on_request_error(m: RunModel, ev: Event) -> None:
    """"Error in request: ...": one request failed and was answered; the traceback just before it,
    or the one it logs after it, is that request's, not the server's end."""
    _handled(m, ev, adjacent=True)
    m.failures.logged_error, m.failures.logged_says = ev.line, None


#: Lines after logging's "--- Logging error ---" (or "Call stack:") within which its traceback (or
#: the stack) begins: the write failed because another writer held the stream, and that writer's
#: lines come between (real-unseen 1765: four children's exit lines).
LOGGING_ERROR_LINES = 16


@handles("logging_error", "logging_call_stack")
def on_logging_error(m: RunModel, ev: Event) -> None:
    """Python logging could not write a record ("--- Logging error ---"): the traceback after it is
    that write's, and the frames after "Call stack:" the call that logged; the process goes on."""
    m.failures.logging_error = ev.line


@handles("shutdown")
def on_shutdown(m: RunModel, ev: Event) -> None:
    """SGLang's SIGTERM handler and its drain: the operator stopping the server."""
    m.notices.add("shutdown", ev)


@handles("ctrl_c")
def on_ctrl_c(m: RunModel, ev: Event) -> None:
    """A terminal's ``^C`` echo: the operator typed Ctrl-C, and SIGINT stops the server; what
    its processes print after it (``KeyboardInterrupt`` tracebacks, children ended) is the stop's."""
    m.notices.add("stop_signal", ev)


@handles("basic_log")
def on_basic_log(m: RunModel, ev: Event) -> None:
    """Another program's logger in Python's default format ("ERROR:xoscar.api:...") or one that
    begins with Python's asctime ("2025-05-03 23:03:33,244 xinference.core.worker 141 ERROR ..."): an error
    it logs is kept as one; a traceback on the next line is the exception it logged
    (``logger.exception``, whose code goes on), not the server's crash (``on_exception``)."""
    if ev.fields.get("level") in ("ERROR", "CRITICAL"):
        m.failures.logged_error, m.failures.logged_says = ev.line, None


@handles("job_end")
def on_job_end(m: RunModel, ev: Event) -> None:
    """Slurm's record of the job's end in its own output (``model.beside`` judges it)."""
    m.notices.add("job_end", ev)


@handles("tracker_exit")
def on_tracker_exit(m: RunModel, ev: Event) -> None:
    """Python's multiprocessing resource_tracker warning of objects "to clean up at shutdown":
    the tracker prints it when the process that started it has ended, so the process ended
    there, whatever ended it (``outcome.judge`` says so when nothing else in the log does)."""
    m.notices.add("process_exit", ev)


#: SGLang's readiness line, which some builds log in uvicorn's format.
_READY = "The server is fired up and ready to roll"
#: uvicorn's error when the HTTP server cannot listen ("[Errno 98] error while attempting to bind on
#: address ('127.0.0.1', 30000): address already in use").
_BIND_FAILED = "error while attempting to bind on address"


@handles("uvicorn_msg", reads_earlier=True)
def on_uvicorn_msg(m: RunModel, ev: Event) -> None:
    """uvicorn's "Shutting down": the HTTP server stopping on SIGTERM or SIGINT (Ctrl-C); its
    "Uvicorn running on ...": the HTTP server up (``Timeline.http_up``); its error that it
    cannot bind its address: the HTTP server's failure, a fatal record."""
    message = str(ev.fields.get("message") or "")
    if message.startswith(_READY):
        # SGLang's own readiness line behind uvicorn's level ("INFO:     The server is fired up
        # and ready to roll!": builds whose logger takes uvicorn's format)
        from .startup import on_server_ready  # (startup's handlers import this module)

        on_server_ready(m, ev)
    elif message == "Shutting down":
        m.notices.add("shutdown", ev)
    elif ev.fields.get("level") == "ERROR" and _BIND_FAILED in message:
        # uvicorn could not listen (a port another process holds): it exits, and the server
        # never answers on that port; what fails after it (a warm-up request timing out) follows.
        # SGLang starts its HTTP server once every scheduler is ready, before the launcher's
        # warm-up request: with no request answered and no readiness, the failure is in the
        # warm-up, whatever batches a custom warm-up (--warmups) ran before it
        t = m.timeline
        phase = None if t.ready or t.answered else "warmup"
        _native_crash(m, ev, None, message, source=HTTP_SOURCE, native_kind="http_bind",
                      **({"phase": phase} if phase else {}))
    elif message.startswith("Uvicorn running on"):
        if m.timeline.http_up is None:
            m.timeline.http_up = ev.line
        m.notices.add("http_up", ev)  # (each: a log read in parts keeps the same first ones)


#: The NCCL version a torch NCCL error names at its end ("..., NCCL version 2.21.5").
_NCCL_IN_ERROR = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)")


@handles("group_init_failed")
def on_group_init_failed(m: RunModel, ev: Event) -> None:
    """The weight-update group's failure (``init_weights_update_group``): SGLang logs it and
    answers the caller; the server goes on, so it is an error it logged, with the NCCL version
    a torch NCCL error names."""
    message = str(ev.fields.get("message") or "")
    if len(m.failures.errors) < 64:
        m.failures.errors.append({"file": ev.file, "line": ev.line, "end_line": ev.end_line, "rank": ev.rank,
                                  "ts": ev.ts, "text": ev.text, "kind": "group_init_failed",
                                  "what": "Failed to initialize custom process group",
                                  "message": message, "oom": None})
    nccl = _NCCL_IN_ERROR.search(message)
    if nccl:
        m.config.versions.setdefault("nccl", nccl.group(1))
    m.notices.add("group_init_failed", ev)


@handles("oom_message")
def on_oom_message(m: RunModel, ev: Event) -> None:
    """An out-of-memory message outside a traceback (``Failed to initialize X: CUDA out of
    memory. ...``): the code that printed it may have caught the error, so it does not end
    the rank; it is kept, with its figures decomposed, as an error the rank logged."""
    f = ev.fields
    if len(m.failures.errors) < 64:
        m.failures.errors.append({"file": ev.file, "line": ev.line, "end_line": ev.end_line, "rank": ev.rank,
                                  "ts": ev.ts, "text": ev.text, "kind": "oom_message", "what": f.get("what"),
                                  "message": f.get("message"), "oom": f.get("oom")})
    m.notices.add("oom_message", ev)


def c10d_rank(head: dict[str, Any]) -> str | None:
    return f"rank{head['global_rank']}" if "global_rank" in head else None


#: How far (in lines) the CANN record may follow the torch-prefixed line that names its rank.
CANN_HINT_LINES = 3
_CANN_CODE = re.compile(r"\bE[A-Z0-9]\d{4}(?=:)")


#: torch's record of its NCCL watchdog thread's death (``ProcessGroupNCCL``), before the error that ended it.
WATCHDOG_DIED = "Process group watchdog thread terminated with exception:"


@handles("c10d_log", "collective_timeout")  # torch watchdog and store timeouts
def on_c10d_log(m: RunModel, ev: Event) -> None:
    """A watchdog or collective timeout is a hang, whatever is raised after it. A torch
    record that carries an Ascend CANN code names the rank of the CANN record after it."""
    msg = ev.fields.get("message") or ""
    head = ev.fields.get("head") or {}
    own = ev.rank or c10d_rank(head)
    if own is not None:
        m.failures.c10d_lines[own] = ev.line
    hang = ev.kind == "collective_timeout" or any(mk in msg for mk in HANG_MARKERS)
    # a C++ exception logged by a timeout's record is the watchdog's report, the hang's evidence
    m.failures.c10d_seen = True
    m.failures.last_c10d = None if hang else {"file": ev.file, "line": ev.line, "rank": own, "ts": ev.ts,
                                              "text": ev.text, "message": msg}
    if not hang and WATCHDOG_DIED in msg and not any(c["line"] == ev.line for c in m.failures.crash_events):
        # the NCCL watchdog thread died of another error (a CUDA error it met): torch ends the
        # process (its abort follows, when the log holds it): the rank's first fatal record
        # (its phase is not its record's to say: the watchdog thread runs beside every phase; the
        # C++ stack it logs, when the log holds it, makes this record whole: _logged_cpp_exception)
        _native_crash(m, ev, own, msg.split(WATCHDOG_DIED, 1)[1].strip() or msg, phase=None)
    code = _CANN_CODE.search(msg) if "E" in msg else None
    if code and c10d_rank(head):
        m.failures.cann_hint = {"code": code.group(0), "rank": c10d_rank(head), "line": ev.line, "file": ev.file,
                                "ts": ev.ts, "text": ev.text}
    oom = None if hang else decompose_oom(None, msg)
    if oom is not None and len(m.failures.errors) < 64:
        # the allocator's warning of a failed allocation ("memory allocation failed with OOM ..."):
        # the caller may recover, so it is an error the rank logged, with its figures
        m.failures.errors.append({"file": ev.file, "line": ev.line, "end_line": ev.end_line, "rank": own,
                                  "ts": ev.ts, "text": ev.text, "kind": "oom_warning",
                                  "what": "memory allocation failed with OOM", "message": msg, "oom": oom})
    if hang:
        rank = c10d_rank(head)
        if rank is None and ev.rank is None and ev.fields.get("pg_rank") is not None:
            # no "[rankN]:" prefix: the rank the record itself prints ("[PG 3 Rank 5]"): the
            # global rank in the default group (PG 0), else the rank in that process group,
            # which is not read as a TP rank (model/outcome.py)
            rank = f"rank{ev.fields['pg_rank']}"
            if ev.fields.get("pg") != 0:
                m.failures.group_ranks[rank] = None
        # the reader's family of the timer (NCCL's watchdog or heartbeat, c10d's store socket)
        add_hang(m, {"file": ev.file, "line": ev.line, "rank": rank, "text": ev.text,
                     "kind": ev.fields.get("family") or "nccl_watchdog"})
    m.notices.add("c10d", ev)


@handles("watchdog_timeout")
def on_watchdog_timeout(m: RunModel, ev: Event) -> None:
    """SGLang's watchdog fired. The scheduler's watches a batch in flight (it fires only with
    ``cur_batch`` set): its rank was serving."""
    if ev.fields.get("component") == "Scheduler":
        m.timeline.enter(ev, "serving")
    if ev.fields.get("soft") is True:
        return  # the soft watchdog only dumps: the server goes on (model/hang.py TIMERS)
    add_hang(m, {"file": ev.file, "line": ev.line, "rank": ev.rank, "text": ev.text, "kind": "sglang_watchdog"})


@handles("watchdog_debug")
def on_watchdog_debug(m: RunModel, ev: Event) -> None:
    """The scheduler watchdog fired and prints its debug info (utils/watchdog.py): the lines
    below it say what it watched (``on_watchdog_body``)."""
    m.failures.debug_head = (ev, ev.line) if ev.fields.get("component") == "Scheduler" else None


@handles("watchdog_body", reads_earlier=True)
def on_watchdog_body(m: RunModel, ev: Event) -> None:
    """A line of the scheduler watchdog's debug info. Its batch (``scheduler.cur_batch.batch_size()=N``,
    ``cur_batch_for_debug`` from 2026) is the one in flight when it fired: the header's rank was
    serving. (A watchdog that fired while the scheduler started prints ``is_initializing``.)"""
    head = m.failures.debug_head
    if head is None or ev.line != head[1] + 1:
        m.failures.debug_head = None
        return
    m.failures.debug_head = (head[0], ev.line)
    if "batch_size()=" in str(ev.fields.get("message") or ""):
        m.timeline.enter(head[0], "serving")


__all__ = ["Failures", "draws_bars"]
