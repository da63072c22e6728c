"""The run's outcome, judged from the model's records without changing them.

Outcome rules (the first that applies, judged on the whole log):

* ``crashed``: a fatal record after the last time the server was ready, on a rank that
  did not go on after it: a traceback (``Scheduler hit an exception`` and kin, a bare
  one, one cut in its header), a native failure (C++ abort, device-side assertion, HSA
  fault, CANN error, a collective failure), a ``Fatal Python error``, or the parent's
  notice that a child died; unless the only fatal records are the consequence of a hang;
* ``hung``: evidence of a hang: an NCCL/c10d watchdog or store timeout, SGLang's own
  watchdog timeout, or a scheduler that gave no sign of life while others died waiting;
  or a start-up that stopped making progress, its health check refused for longer than
  SGLang's scheduler watchdog waits with no rank printing (:func:`stalled`);
* ``ready``: ``The server is fired up and ready to roll!``, served batches, or a request served
  with success (SGLang's HTTP server starts once every scheduler is ready); a server that
  was ready and then stopped (SGLang's SIGTERM handler, uvicorn's shutdown, a child ended by
  SIGTERM or SIGINT, a ``KeyboardInterrupt``) with no fatal record before the stop is ready
  too, and ``stop`` says where it stopped: what SGLang prints on its way down (children
  "crashed with exit code -15", "SIGQUIT received") is the stop, not a crash;
* ``incomplete``: none of these; the log just stops, or the server was stopped (as above)
  before it was ready, and ``stop`` says where.

Everything here is a pure function of the model: rank-less crash records get a rank
where the log allows it in *copies* (:func:`resolve`), so that summarising mid-stream
cannot change what a later summary says.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..read.assemble import FH_HEADERLESS, WARMUP_SOURCE
from ..read.fatal import scheduler_died
from ..read.values import THREAD_SOURCE
from ..units import clip
from .clock import seconds
from .coverage import record_count, vllm_records
from .failures import (
    CPP_RAISED_SOURCE,
    HEADERLESS_DUMP,
    HTTP_SOURCE,
    LOGGED_THEN_RAISED,
    PCG_SOURCE,
    cpp_exception_words,
    headerless_dump,
    is_hang_consequence,
    is_hang_report,
    named_process,
)
from .hang import TIMERS
from .phases import phase_of_words
from .rank import MILESTONES, NO_RANK, PURE_TP, TORCH_RANK, rank_sort_key, torch_rank_label, tp_part

if TYPE_CHECKING:
    from .run import RunModel

#: Notices of the parent process that a scheduler child died.
PARENT_NOTICES = ("sigquit", "child_failed", "scheduler_died", "subprocess_crashed")
#: Notices of a stop (``failures.on_shutdown``, ``on_uvicorn_msg``, ``on_failure_notice``).
STOP_NOTICES = ("shutdown", "stop_signal")
#: uvicorn's words as its HTTP server stops ("INFO:     Shutting down"), on a signal or not.
_HTTP_STOPPED = "Shutting down"


@dataclass(frozen=True)
class Verdict:
    """What :func:`judge` finds: the outcome and the records it rests on."""

    outcome: str
    reason: str
    crash: dict[str, Any] | None
    hang: dict[str, Any] | None
    #: id(original crash record) -> its copy with rank and phase resolved
    resolved: dict[int, dict[str, Any]]
    #: errors ranks logged and went on after (not crashes), in line order
    errors: list[dict[str, Any]]
    #: a ready server's stop (:func:`stopped`), or None
    stop: dict[str, Any] | None = None


def judge(m: RunModel) -> Verdict:
    t, fl = m.timeline, m.failures
    ready_line = t.last_serving_line if (t.ready or t.last_serving_line) else (t.answered or {}).get("line", 0)
    after = [c for c in fl.crash_events if c["line"] > ready_line or not ready_line]
    fatal_src = [c for c in after if not _went_on(m, c)]
    if len(fatal_src) > 1 and fatal_src[0].get("cpp_tail") and named_process(fatal_src[1].get("source")):
        # a C++ stack's tail at the window's top, then a process's own traceback: the tail says
        # nothing of what failed (what printed it is above the window); the traceback is the first failure
        fatal_src = fatal_src[1:]
    fatal = [dict(c) for c in fatal_src]
    resolved = {id(src): c for src, c in zip(fatal_src, fatal)}
    # (a record that is a crash's first, as torch's record of the C++ exception it logged, is no
    # error logged beside the crash: real-pairs 080)
    at = {(c["file"], c["line"]) for c in fatal}
    errors = [_error_view(c) for c in fl.crash_events if _went_on(m, c)] + \
        [dict(e) for e in fl.errors if (e["file"], e["line"]) not in at]
    errors.sort(key=lambda e: e["line"])
    fragments = [n for n in m.notices.get("tb_fragment", []) if n["line"] > ready_line]
    if fragments and not fatal:
        fatal = [_garbled_crash(m, fragments)]
    resolve(m, fatal)
    for c in fatal:  # a traceback cut above its frames: place it by its twins on other ranks
        if c["phase"] is None and c.get("exception"):
            twin = next((d for d in fatal if d["phase"] and d.get("exception") == c["exception"]), None)
            c["phase"] = twin["phase"] if twin else None
    # the parent noticing a dead child: evidence of a crash, though not of what or where
    sigquits = sorted((n for key in PARENT_NOTICES for n in m.notices.get(key, []) if n["line"] > ready_line),
                      key=lambda n: n["line"])
    stop = stopped(m, ready_line, fatal, sigquits)
    if stop is not None:  # what failed on the way down is an error logged during the stop; the
        # interrupt itself (a process's KeyboardInterrupt after the stop) is the stop's, no error
        errors = sorted(errors + [_error_view(c) for c in fatal if not _interrupted_by(stop, c)],
                        key=lambda e: e["line"])
        fatal, sigquits = [], []
    hang = None
    if fl.hang_events:
        def label(r: str | None) -> str | None:
            # a process group's own rank is not a TP rank, unless torch's "[rankN]:" named it too
            return r if r in fl.group_ranks and r not in m.timeline.ranks and r not in fl.c10d_lines \
                else global_rank_label(m, r)

        evidence = [dict(h, rank=label(h.get("rank"))) for h in fl.hang_events[:16]]
        named = {label(r) for r in fl.hang_ranks}
        hang = {"evidence": evidence, "first_line": fl.hang_events[0]["line"],
                "ranks": sorted((r for r in named if r), key=rank_sort_key),
                "silent_ranks": silent_ranks(m)}
    # the timer, collectives and py-spy dumps (model/hang.py): hung when a timer that
    # stops the server fired, as well as on the evidence above
    # the last record of the run's course (a batch, a start-up phase's record or progress bar; not an
    # answered probe, which the HTTP server gives whatever the schedulers do): a timer that does not
    # stop the server, with the course going on after it, did not end the run
    course = max([t.last_serving_line, *(info["last_line"] for r in t.ranks.values()
                                         for phase, info in r.phases.items() if phase != "serving")])
    built = m.hang_obs.build([k for k in t.ranks if k != NO_RANK], course, m.config.env,
                             m.coverage.kind_counts)
    if built is not None:
        detail = built.to_dict()
        hang = hang or {"silent_ranks": silent_ranks(m)}
        for key in ("evidence", "ranks"):
            if not detail[key]:
                detail.pop(key)
        for key, value in detail.items():  # the watchdog evidence and ranks above stay as they are
            hang.setdefault(key, value)
    hung_lines = [h["line"] for h in fl.hang_events[:1]] + ([built.first_line] if built and built.ends_run else [])
    if built is not None and built.timer == "pyspy_only" and built.evidence and not fatal \
            and built.first_line > t.last_serving_line:
        # a py-spy dump of a scheduler, nothing served after it and no failure in the log (SGLang
        # also dumps before a crash): what SGLang's watchdog, or an operator, takes of a hang
        hung_lines.append(built.first_line)
    first_hang = min(hung_lines) if hung_lines else None
    # the watchdog's own report (its frames, its terminate) is the hang's evidence, not a crash
    shown = [c for c in fatal if first_hang is None or not is_hang_report(c, first_hang)]
    crash = _crash(m, shown, sigquits) if (shown or sigquits) else None
    if fl.hang_events and (fl.hang_events[0]["line"] == first_hang
                           or built is not None and built.timer == "sglang_watchdog"):
        hang_text = fl.hang_events[0]["text"]  # the timer's own words (after the watchdog's batch dump)
    else:
        # the hang's first record: in the evidence kept above, else in the built hang's own
        # (the scheduler watchdog's batch dump, where the window ends before its timeout line)
        found = [*(hang or {}).get("evidence", []), *(built.to_dict()["evidence"] if built else [])]
        hang_text = next((e["text"] for e in found if e["line"] == first_hang), "")
    if first_hang is not None and (not fatal or all(is_hang_consequence(c, first_hang) for c in fatal)):
        # the parent's notice of a child the watchdog ended is the hang's end, not a crash of its own
        return Verdict("hung", "hang evidence: " + clip(hang_text, 160), crash if shown else None, hang, resolved,
                       errors)
    if crash:
        rank = crash.get("first_rank")
        naming = next((c for c in shown if c.get("rank") == rank), None) if rank else None
        if naming is not None and not shown[0].get("rank"):
            # the first fatal line names no rank: the rank is the next record's, and said so
            where = f" at line {crash['line']} (its line names no rank; {rank}'s record follows at line {naming['line']})"
            crash["rank_named_at"] = naming["line"]
        else:
            where = (f" on {rank}" if rank and rank != NO_RANK else "") + f" at line {crash['line']}"
        if sigquits:  # after the failure and the launcher's notice of it, what fails is its taking the
            # server down (a task cancelled, a child killed): no error of its own (real-pairs 085)
            down = max(crash["line"], sigquits[0]["line"])
            errors = [e for e in errors if e["file"] != crash["file"] or e["line"] < down]
        return Verdict("crashed", f"{what_failed(crash)}{where}", crash, hang, resolved,
                       errors)
    then = f"; stopped at line {stop['line']}, with no failure before it" if stop else ""
    if stop and stop["line"] < t.last_serving_line:
        then += f" (draining its requests: batches go on to line {t.last_serving_line})"
    elif stop and (running := _running_at_stop(m, stop["line"])):
        then += running
    last_record = max((r.last_line for r in t.ranks.values()), default=0)  # no rank printed after it
    ended = next((n for n in m.notices.get("process_exit", []) if n["line"] > max(ready_line, last_record)), None)
    if stop is None and ended is not None:  # the process ended, and the log does not say why
        then = (f"; its process ended at line {ended['line']} (Python's resource_tracker cleaning up at "
                f"shutdown), with no stop signal or failure before it in this log")
    if stop is not None and not ready_line:
        return Verdict("incomplete", f"stopped at line {stop['line']}, with no readiness or failure before it in "
                       "this log", None, hang, resolved, errors, stop)
    stall = stalled(m) if stop is None else None
    if stall is not None:  # a start-up that stopped making progress, the HTTP server up and refusing
        return Verdict("hung", stall.pop("reason") + then, None, {**(hang or {}), **stall}, resolved, errors)
    if t.ready:
        return Verdict("ready", f"server ready at line {t.ready['line']}{then}", None, hang, resolved, errors, stop)
    if t.last_serving_line:
        return Verdict("ready", f"served batches (last at line {t.last_serving_line}){then}", None, hang, resolved,
                       errors, stop)
    probe = t.answered if t.answered and t.answered.get("probe") else None
    refused = _health_refused(m) if probe is not None else None
    if probe is not None and refused is not None:  # the HTTP server is up, and says the server is not
        return Verdict("incomplete", f"its HTTP server answered a probe at line {probe['line']} "
                       f"({probe['request']}), but its health check was refused ({refused}) and never "
                       f"answered with success, and no request was served in this log: up, not ready (its warm-up "
                       f"unfinished, or unhealthy){then}", None, hang, resolved, errors, stop)
    if t.answered:  # SGLang starts its HTTP server once every scheduler is ready
        did = "its HTTP server answered a probe" if t.answered.get("probe") else "served a request"
        return Verdict("ready", f"{did} at line {t.answered['line']} ({t.answered['request']}), so it was "
                       f"ready (its readiness line is not in this log){then}", None, hang, resolved, errors, stop)
    vllm = vllm_records(m.coverage.kind_counts)
    if vllm:  # what the log shows may be vLLM's readiness or failure
        records = record_count(m.coverage.kind_counts)
        whose = "its records are vLLM's" if vllm == records else f"{vllm} of its {records} records are vLLM's"
        return Verdict("incomplete", f"the log stops at line {m.last_line} without SGLang's readiness or failure: "
                       f"{whose}, which this does not judge", None, hang, resolved, errors)
    cut = _cut_dump(m)
    if cut and not then:
        return Verdict("incomplete", f"the log stops at line {m.last_line} in {cut}", None, hang, resolved, errors)
    return Verdict("incomplete", f"the log stops at line {m.last_line} without readiness or failure{then}",
                   None, hang, resolved, errors)


#: The probes whose answer is the server's own word on its readiness (``/health`` answers 503
#: until the warm-up request has been answered; ``/health_generate`` runs a request). Others
#: (``/metrics``) show only the HTTP server up.
HEALTH_PATHS = ("/health", "/health_generate")


def _health_refused(m: RunModel) -> str | None:
    """Where the health check answered only with server errors: its first refusal and count
    in words (``GET /health 503 at line 2, 2 times``); None when it answered with success
    or not at all."""
    probes = m.coverage.probes
    refusals = []
    for path in HEALTH_PATHS:
        by: Mapping[int, int] = probes.counts.get(path) or {}
        if any(200 <= st < 300 for st in by):
            return None
        refusals += [(probes.first[path, st]["line"], path, st, n) for st, n in by.items()
                     if st >= 500 and (path, st) in probes.first]
    if not refusals:
        return None
    line, path, status, _ = min(refusals)
    times = sum(n for *_, n in refusals)
    return f"GET {path} {status} at line {line}" + (f", {times} times" if times > 1 else "")


def stalled(m: RunModel) -> dict[str, Any] | None:
    """A start-up that stopped making progress, as a hang's fields (``model.hang.TIMERS``'s
    ``no_progress``) with its ``reason`` in words; None where the log does not show one.

    The server never finished starting (no readiness, no batch, no request answered with
    success), its HTTP server refused the health check (a 5xx on ``HEALTH_PATHS``) at least
    three times, no rank printed a record of its course (a phase record, a batch) or any record
    naming it after the first refusal, and the log's stamps go on at least ``no_progress``'s
    300 s after it (SGLang's scheduler watchdog waits that long for a forward step): what the
    log shows of a warm-up that never ends. No timer fired, so what stalled is not said."""
    t = m.timeline
    if t.ready or t.last_serving_line or t.answered:
        return None
    probes = m.coverage.probes
    refusals = [(probes.first[path, st], path, st, n) for path in HEALTH_PATHS
                for st, n in (probes.counts.get(path) or {}).items() if st >= 500 and (path, st) in probes.first]
    if not refusals or sum(n for *_, n in refusals) < 3:
        return None
    first, path, status, _ = min(refusals, key=lambda r: r[0]["line"])
    times = sum(n for *_, n in refusals)
    last_record = max((r.course_line if label == NO_RANK else r.last_line for label, r in t.ranks.items()),
                      default=0)
    ends = [seconds(ts) for key, (_, ts) in probes.last.items() if key[0] in HEALTH_PATHS and key[1] >= 500]
    begun, end = seconds(first.get("ts")), max((e for e in [*ends, seconds(m.coverage.last_ts)] if e is not None),
                                                default=None)
    floor = TIMERS["no_progress"]["default_s"]
    if first["line"] < last_record or begun is None or end is None or end - begun < floor:
        return None
    warmup = [n for n in m.notices.get("warmup_begin", []) if n["line"] < first["line"]]
    after = (f"after {warmup[-1]['text'].split('] ', 1)[-1].strip()!r} (line {warmup[-1]['line']})"
             if warmup else f"after line {last_record}" if last_record else "in this log")
    span = int(end - begun)
    timer = TIMERS["no_progress"]
    evidence = [dict(n, ts=n.get("ts")) for n in warmup[-1:]] + [dict(first)]
    return {"reason": f"no progress {after}: its HTTP server refused the health check from line {first['line']} "
                      f"(GET {path} {status}, {times} times) for at least {span // 60} min {span % 60:02d} s, "
                      f"and no rank printed a record after it; no timer fired",
            "timer": "no_progress", "timed_out": False, "ends_run": True, "timeout_s": span,
            "setting": timer["setting"], "default_s": timer["default_s"], "what": timer["what"],
            "note": timer["note"], "source": timer["source"], "first_line": first["line"],
            "first_ts": first.get("ts"), "evidence": evidence, "ranks": [], "silent_ranks": [],
            "phase": "warmup" if warmup else None}


def _cut_dump(m: RunModel) -> str | None:
    """A faulthandler dump of every thread with one marked current (a fatal signal's, or an
    explicit dump_traceback's), whose header is not in the log, in words; None without one."""
    for r in m.hang_obs.records:
        if r["kind"] != "thread_dump":
            continue
        current = next((t for t in r["fields"].get("threads") or [] if t.get("current")), None)
        if current is not None:
            return (f"a faulthandler dump of every thread (from line {r['line']}; current thread at line "
                    f"{current['line']}, in {current.get('function') or 'no frame shown'}): the line above it that "
                    "says why it was written (a 'Fatal Python error' or a signal) is not in this log")
    return None


def stopped(m: RunModel, ready_line: int, fatal: list[dict[str, Any]],
            sigquits: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The server's stop: its first record after the server was last ready, or anywhere
    when it was never ready (a stop notice, or a ``KeyboardInterrupt`` traceback), when no
    fatal record and no parent's notice of a failed child comes before it; else None. A
    server stopped while it started is not a crash either: what fails after the signal
    (children it ended, a wrapper's traceback) is the stop's. {file, line, rank, text,
    evidence: the stop's records, the first eight}."""
    # SGLang drains the requests it holds after the signal: batch lines go on after its notice,
    # which is the stop wherever it comes after the readiness line
    drain_from = m.timeline.ready["line"] if m.timeline.ready else 0
    found = [n for key in STOP_NOTICES for n in m.notices.get(key, [])
             if (n["line"] > ready_line or key == "shutdown" and n["line"] > drain_from) and not _unheeded(m, n)]
    found += [{"file": c["file"], "line": c["line"], "rank": c["rank"], "text": c["text"]}
              for c in fatal if _exception_name(c.get("exception")) == "KeyboardInterrupt"]
    if not found:
        return None
    found.sort(key=lambda n: n["line"])
    first = found[0]["line"]
    if any(c["line"] < first for c in fatal) or any(n["line"] < first for n in sigquits):
        return None
    if not ready_line and fatal and all(_HTTP_STOPPED in str(n.get("text") or "") for n in found):
        # uvicorn's "Shutting down" says the HTTP server stopped, not why; before readiness, with no
        # signal in the log and a failure after it (the warm-up's request refused), it is no stop
        return None
    evidence: list[dict[str, Any]] = []
    for n in found:  # a record seen under two keys (a child ended by SIGTERM) once
        if not evidence or evidence[-1]["line"] != n["line"]:
            evidence.append(dict(n))
    return {**evidence[0], "evidence": evidence[:8]}


def _unheeded(m: RunModel, notice: dict[str, Any]) -> bool:
    """Whether a terminal's ``^C`` echo stopped nothing the log shows: records follow it, and
    none of them is a failure or a notice of a stop or of a child's end (what a Ctrl-C ends
    prints: ``KeyboardInterrupt`` tracebacks, children ended by SIGINT, SGLang's shutdown). A
    process that goes on logging after the echo was not stopped by it (real-unseen 510)."""
    line = notice["line"]
    if not str(notice.get("text") or "").startswith("^C") or m.last_line <= line:
        return False
    later = [n for key in (*STOP_NOTICES, *PARENT_NOTICES) for n in m.notices.get(key, []) if n["line"] > line]
    return not later and not any(c["line"] >= line for c in m.failures.crash_events) \
        and not any(e["line"] >= line for e in m.failures.errors)


def _exception_name(exception: str | None) -> str | None:
    """``KeyboardInterrupt`` of ``KeyboardInterrupt`` or ``builtins.KeyboardInterrupt: ...``."""
    return exception.split(":", 1)[0].strip().rsplit(".", 1)[-1] if exception else None


def what_failed(crash: dict[str, Any]) -> str:
    """The crash in a few words, saying only what the log shows: the exception, the native
    failure, or that the traceback's exception is not in this log."""
    if crash.get("first_message"):
        then = crash.get("exception") or "a traceback whose exception is not in this log (cut)" + _handling(crash)
        return f"{clip(str(crash['first_message']), 160)} (then {then})"
    if crash.get("exception"):
        return str(crash["exception"])
    if crash.get("source") == CPP_RAISED_SOURCE and crash.get("message"):
        return cpp_exception_words(str(crash["message"]))
    if crash.get("native") or crash.get("source") in LOGGED_THEN_RAISED and crash.get("message"):
        return clip(str(crash.get("message") or "a native failure"), 160)
    if crash.get("garbled"):
        return "a traceback torn by concurrent writers (exception unreadable)"
    if headerless_dump(crash.get("source"), crash.get("exception")):
        return HEADERLESS_DUMP
    if crash.get("source") is not None or crash.get("frames") or crash.get("count"):
        return "a traceback whose exception is not in this log (cut)" + _handling(crash)
    return "a child process failed (the parent says so; what failed is not in this log)"


def _handling(crash: dict[str, Any]) -> str:
    """``, raised while handling KeyError``: the last exception of a chain whose own last
    traceback is cut before its exception line (the exception that was being handled)."""
    shown = [str(link["exception"]) for link in crash.get("chain") or [] if link.get("exception")]
    return f", raised while handling {shown[-1]}" if shown else ""


def _went_on(m: RunModel, rec: dict[str, Any]) -> bool:
    """A record of an error after which its own rank printed records of its course (a
    phase line, a served batch): the rank logged the error and went on, so it did not stop.
    Later means a later stamp when both have one: wrappers that merge several processes'
    output (Ray's de-duplication) print a rank's earlier lines after its traceback."""
    if rec.get("handled_line"):  # the code that printed it caught it and went on (--debug-mode's
        return True  # discarded batch, a retry, a request answered with an error)
    rank = rec.get("rank")
    if rec.get("source") == CPP_RAISED_SOURCE and rank is not None \
            and m.failures.c10d_lines.get(rank, 0) > (rec.get("end_line") or rec["line"]):
        return True  # torch logged the C++ exception, and the same rank logs again: it was caught
    r = m.timeline.ranks.get(rank) if rank is not None else None
    if r is None or r.course_line <= (rec.get("end_line") or rec["line"]):
        return False
    if r.course_ts and rec.get("ts"):
        return r.course_ts > rec["ts"]
    return True


def _error_view(rec: dict[str, Any]) -> dict[str, Any]:
    return {"file": rec["file"], "line": rec["line"], "end_line": rec.get("end_line"), "rank": rec["rank"],
            "ts": rec.get("ts"), "text": rec["text"], "kind": "exception" if not rec.get("native") else "native",
            "exception": rec.get("exception"), **({"what": rec["what"]} if "what" in rec else {}),
            "message": rec.get("message"), "oom": rec.get("oom")}


def resolve(m: RunModel, records: list[dict[str, Any]]) -> None:
    """Give rank-less crash records (copies) a rank where the log allows it, saying how."""
    labels = m.timeline.ranks
    tp_labels = any(PURE_TP.fullmatch(k) for k in labels)
    # a log whose only records of a scheduler are progress bars is a single-rank run too
    single = set(labels) == {NO_RANK} or (not labels and bool(m.timeline.bars))
    # an HSA fault's node or a device assertion names no rank: only aborts are counted per rank
    unranked_native = [c for c in records if c.get("native") and c["rank"] is None
                       and c.get("native_kind") in (None, "cpp_abort", "cpp_terminate", "cpp_what")]
    labelled = named_ranks(m)
    for c in records:
        if c["rank"] is not None:
            mapped = global_rank_label(m, c["rank"])  # torch's [rankN] is TPN in a pure-TP run
            if mapped != c["rank"]:
                c["rank"], c["rank_inferred_from"] = mapped, "torch_global_rank"
            continue
        oom = c.get("oom")
        rank = _rank_of_gpu(m, oom["gpu"], records) if oom and oom.get("gpu") is not None and tp_labels else None
        if rank is not None:
            c["rank"], c["rank_inferred_from"] = rank
        elif single and c.get("source") not in (WARMUP_SOURCE, HTTP_SOURCE):
            # (the warm-up request is the launcher's, the bind error the HTTP server's: no scheduler's)
            c["rank"], c["rank_inferred_from"] = NO_RANK, "single_rank_run"
    # One C++ abort per rank and no rank printed: every rank died the same way.
    if unranked_native and labelled and len(unranked_native) >= len(labelled):
        for c, label in zip(unranked_native, labelled):
            c["rank"], c["rank_inferred_from"] = label, "one_native_abort_per_rank"


def _rank_of_gpu(m: RunModel, gpu: int, fatal: list[dict[str, Any]]) -> tuple[str, str] | None:
    """The TP rank of PyTorch's ``GPU N``, which is the index on its own node: on one
    node (``nnodes`` 1; or this file shows TP0 and TPN; or every rank-labelled OOM of
    this log names its own index), or from ``node_rank`` and the GPUs per node when
    nothing remaps devices; never by the index alone."""
    c = m.config
    args = {**c.launch_args, **c.server_args}
    nnodes, node_rank, tp = args.get("nnodes"), args.get("node_rank"), args.get("tp_size") or args.get("tp")
    remapped = "CUDA_VISIBLE_DEVICES" in c.env or args.get("base_gpu_id") not in (None, 0)
    if isinstance(nnodes, int) and nnodes > 1:
        if remapped or not isinstance(node_rank, int) or not isinstance(tp, int) or tp % nnodes:
            return None
        return f"TP{node_rank * (tp // nnodes) + gpu}", "oom_gpu_index_on_node"
    if nnodes == 1 and not remapped:
        return f"TP{gpu}", "oom_gpu_index"
    if remapped or nnodes is not None:
        return None
    pairs = [(rec["rank"], (rec.get("oom") or {}).get("gpu")) for rec in fatal if rec.get("rank")]
    pairs = [(r, g) for r, g in pairs if g is not None and PURE_TP.fullmatch(r)]
    ranks = m.timeline.ranks
    if (pairs and all(r == f"TP{g}" for r, g in pairs)) or (f"TP{gpu}" in ranks and "TP0" in ranks):
        return f"TP{gpu}", "oom_gpu_index"
    return None


def _crash(m: RunModel, fatal: list[dict[str, Any]], sigquits: list[dict[str, Any]]) -> dict[str, Any]:
    if not fatal:
        n = sigquits[0]
        return {"first_rank": None, "ranks": [], "phase": m.timeline.global_phase, "exception": None,
                "message": None, "frames": [], "oom": None, "line": n["line"], "file": n["file"],
                "text": n["text"], "evidence": sigquits[:8], "native": False}
    # A paste often starts or ends inside a traceback: each field comes from the first
    # fatal record that shows it, and `line` is the first record's.
    first = fatal[0]
    sigquit_at = {n["line"] for n in m.notices.get("sigquit", [])}
    ranks: list[str] = []
    for c in fatal:
        if c["rank"] and c["rank"] not in ranks:
            ranks.append(c["rank"])
    with_exc = next((c for c in fatal if c.get("exception")), None)
    if with_exc is not None and first.get("rank") and with_exc.get("rank") not in (None, first["rank"]) \
            and first.get("message") and (first.get("native") or first.get("source") in LOGGED_THEN_RAISED):
        # a rank's logged or native failure: its own exception, when the log has it; another
        # rank's is not what it raised, and its own words then say what failed
        with_exc = next((c for c in fatal if c.get("exception") and c.get("rank") == first["rank"]), None)
    if with_exc is not None:
        with_exc = _raised_remotely(with_exc, fatal)
    if with_exc is None and first.get("native"):  # a Python traceback after it, its exception cut
        with_exc = next((c for c in fatal if not c.get("native") and (c.get("frames") or c.get("source"))), None)
    with_exc = with_exc or first
    # a native failure before the first exception (a runtime's queue abort, then Python's
    # "Fatal Python error: Aborted"; a device-side assertion, then the scheduler's traceback):
    # what it says is what happened first
    before = {"first_message": first.get("message")} if first.get("native") and with_exc is not first \
        and first.get("message") else {}
    # the parent's notice of a dead child above a failure that no line ties to a rank (a harness's
    # or wrapper's traceback reporting the server's death after the fact) is the first record of it
    cited = sigquits[0] if not ranks and sigquits and sigquits[0]["file"] == first["file"] \
        and sigquits[0]["line"] < first["line"] else first
    return {
        **before,
        "first_rank": ranks[0] if ranks else None,
        "ranks": ranks,
        # a piecewise CUDA graph failure that nothing else places is its capture's (start-up); a
        # thread's traceback after the failure (its process's forward thread) shows what it was doing
        "phase": next((c["phase"] for c in fatal if c.get("phase")),
                      "cuda_graph_capture" if first.get("source") == PCG_SOURCE else next(
                          (d["phase"] for d in m.failures.exceptions if d.get("source") == THREAD_SOURCE
                           and d.get("phase") and d["first_line"] >= first["line"]), None)),
        "exception": with_exc["exception"],
        "message": with_exc["message"],
        "frames": _frames_of(fatal, with_exc),
        "chain": with_exc.get("chain") or [],
        # (what a native record's own text decomposed, a C++ exception's what(), when the Python
        # record after it has none: torch_npu's "NPU out of memory. Tried to allocate ...")
        "oom": with_exc["oom"] or first.get("oom"),
        "exception_line": with_exc.get("exception_line"),
        "source": first.get("source") or _named_after(first, sigquits),
        "native": bool(first.get("native")) and with_exc is first,  # no Python record after it
        "rank_inferred_from": first.get("rank_inferred_from"),
        "file": cited["file"],
        "line": cited["line"],
        "end_line": cited.get("end_line") or cited["line"],
        "ts": cited.get("ts") or first["ts"],  # (a notice keeps no stamp: the failure's own)
        "text": cited["text"],
        "count": len(fatal),
        "sigquit_lines": [n["line"] for n in sigquits if n["line"] in sigquit_at][:8],
        **({"quiet_before": first["quiet_before"]} if first.get("quiet_before") else {}),
        **({"exit_code": code} if (code := _exit_code(with_exc, first, fatal, sigquits)) is not None else {}),
    }


def _interrupted_by(stop: dict[str, Any], rec: dict[str, Any]) -> bool:
    """Whether ``rec`` is a process's own report of the stop before it: a KeyboardInterrupt (or
    SystemExit) raised at or after the stop's line (Ctrl-C, or the signal handler's exit)."""
    return rec["line"] >= stop["line"] and _exception_name(rec.get("exception")) in ("KeyboardInterrupt", "SystemExit")


def _running_at_stop(m: RunModel, line: int) -> str:
    """Requests the last batch line before a stop shows running ("#running-req: 1"), said of
    the stop (a request the signal cut short, unless it was answered after it); "" for none."""
    last = m.serving.last_batch
    if last is None or last[1] >= line or not isinstance(last[6], (int, float)) or last[6] <= 0:
        return ""
    n = last[6]
    return f" ({n:g} request{'s' if n != 1 else ''} running at the last batch line before it, line {last[1]})"


#: Ray's error for a task that raised: ``ray.exceptions.RayTaskError(RuntimeError): ray::Actor.method()
#: (pid=...)``, its message the remote traceback, which ends with the exception the task raised.
_RAY_WRAPPED = re.compile(r"(?:ray\.exceptions\.)?Ray(?:Task|Actor)Error\(([\w.]+)\)")


def _raised_remotely(rec: dict[str, Any], fatal: list[dict[str, Any]]) -> dict[str, Any]:
    """For Ray's wrapper of a task's exception (``_RAY_WRAPPED``), the record of the exception the
    task raised, where its remote traceback's last line is in the log (a later record whose own
    exception is the one the wrapper names); else ``rec``."""
    m = _RAY_WRAPPED.fullmatch(str(rec.get("exception") or ""))
    if m is None:
        return rec
    raised = m.group(1)
    return next((c for c in fatal if c["line"] > rec["line"] and c.get("exception")
                 and str(c["exception"]).rsplit(".", 1)[-1] == raised.rsplit(".", 1)[-1]), rec)


def _exit_code(with_exc: dict[str, Any], first: dict[str, Any], fatal: list[dict[str, Any]],
               notices: list[dict[str, Any]]) -> int | None:
    """The exit code the launcher gives for the process that died: the reported exception's,
    the first record's, else the first that a later fatal record of the crash gives (the
    launcher's "Rank 0 scheduler died during initialization (exit code: -6)" after an abort);
    for a first record that names no rank, the parent's notice of a dead child right after it
    ("Subprocess scheduler_0 (pid=922727) crashed with exit code -11.", within three lines)."""
    for rec in (with_exc, first, *fatal):
        if rec.get("exit_code") is not None:
            return int(rec["exit_code"])
    if first.get("rank") is None:
        end = first.get("end_line") or first["line"]
        for n in notices:
            if end < n["line"] <= end + 3 and n.get("exit_code") is not None:
                return int(n["exit_code"])
    return None


def _named_after(first: dict[str, Any], notices: list[dict[str, Any]]) -> str | None:
    """The process the launcher names right after a fatal record that names none: "Rank 0
    scheduler is dead" within three lines of its end is that scheduler's failure, as the
    launcher reports it (``the Rank 0 scheduler``); None without such a line."""
    if first.get("rank") is not None:
        return None
    end = first.get("end_line") or first["line"]
    for n in notices:
        if end < n["line"] <= end + 3 and (died := scheduler_died(n.get("text"))):
            return f"Rank {died['rank']} scheduler"
    return None


def _frames_of(fatal: list[dict[str, Any]], with_exc: dict[str, Any]) -> list[dict[str, Any]]:
    """The crash's frames: those of the record whose exception it reports; where that record
    shows none (a paste that starts at the exception line, a traceback torn in two), those of
    the nearest record before it with frames and no exception of its own, on its rank. A
    traceback after the exception is another one (Python prints a traceback's frames before its
    exception), so its frames are not this exception's. With no exception anywhere, the first
    record's frames that show any, up to a thread dump of its own (faulthandler's threads,
    its failing thread's header above the window): the frames after it are another record's."""
    if not with_exc.get("exception"):
        if with_exc is not fatal[0] and with_exc.get("frames"):  # a Python traceback after a native record
            return list(with_exc["frames"])
        for c in fatal:
            if c.get("frames") or c.get("source") == FH_HEADERLESS:
                return list(c.get("frames") or [])
        return []
    if with_exc.get("frames"):
        return list(with_exc["frames"])
    rank = with_exc.get("rank")
    return next((c["frames"] for c in reversed(fatal) if c["line"] < with_exc["line"] and c.get("frames")
                 and not c.get("exception") and c.get("rank") in (rank, None)), [])


def _garbled_crash(m: RunModel, fragments: list[dict[str, Any]]) -> dict[str, Any]:
    """Torn traceback text: no exception to read, but the functions still place it."""
    first = fragments[0]
    return {"rank": None, "source": "garbled", "exception": None,
            "message": "traceback text torn by concurrent writers (unreadable)", "frames": [],
            "oom": None, "file": first["file"], "line": first["line"],
            "end_line": fragments[-1]["line"], "ts": None, "text": first["text"],
            "phase": phase_of_words(n["text"] for n in fragments) or m.timeline.global_phase, "garbled": True}


def silent_ranks(m: RunModel) -> list[str]:
    """Ranks that fell behind the others (the ones the others wait on in a collective).

    Compared by the furthest start-up record each rank printed, so a rank that began
    loading weights and never finished is behind ranks that finished.
    """
    reached = {k: r.milestone for k, r in m.timeline.ranks.items() if r.milestone >= 0}
    if len(reached) < 2:
        return []
    top = max(reached.values())
    return sorted((k for k, v in reached.items() if v < top), key=rank_sort_key)


def global_rank_label(m: RunModel, head_rank: str | None) -> str | None:
    """c10d's ``[rankN]`` is the global rank: the SGLang rank ``rank.torch_rank_label`` names
    (TP rank N in a pure-TP run)."""
    if head_rank and TORCH_RANK.fullmatch(head_rank):
        return torch_rank_label(m.timeline.ranks, head_rank) or head_rank
    return head_rank


def named_ranks(m: RunModel) -> list[str]:
    """The ranks the log names, in rank order: ``-`` (nothing named) is not one of them, nor
    is torch's ``rankN`` when the log names ranks with a TP part (it is one of them, or cannot
    be told apart)."""
    ranks = m.timeline.ranks
    tp = any(tp_part(k) is not None for k in ranks)
    return sorted((k for k in ranks if k != NO_RANK and not (tp and TORCH_RANK.fullmatch(k))), key=rank_sort_key)


def milestone_name(index: int) -> str | None:
    return MILESTONES[index] if index >= 0 else None
