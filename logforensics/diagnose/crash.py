"""The failing run's first fatal error and its hang, as rules word them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from ..model.failures import (
    CPP_RAISED_SOURCE,
    HEADERLESS_DUMP,
    LOGGED_THEN_RAISED,
    RUNPY_SOURCE,
    cpp_exception_words,
    ended_by,
    headerless_dump,
    process_phrase,
)
from ..model.phases import component_of, failed_outside_part, placing_function, scheduler_step, where_failed
from ..model.records import Frame, Occurrence, OomFigures
from ..model.run import RunSummary
from ..model.stops import left_phase
from ..model.summary import Crash, DistinctException
from ..read.assemble import WARMUP_SOURCE
from ..units import clip
from .sides import Evidence, ev, ev_of, notice_ev


@dataclass(frozen=True)
class CrashFacts:
    """The run's first fatal error as rules word it."""

    first_rank: str | None
    ranks: tuple[str, ...]
    phase: str | None
    exception: str | None
    cause: str | None                    # the exception it was raised while handling
    message_head: str
    is_oom: bool
    oom: OomFigures | None
    shortfall_gib: float | None
    fragmentation: bool
    alloc_site: Frame | None  # innermost SGLang frame of the part that failed to allocate
    not_enough_memory: bool
    capture_failed: bool
    evidence: tuple[Evidence, ...]
    #: a native failure's words when it came before the exception (``Crash.first_message``)
    first_native: str | None = None
    #: the SGLang function of the phase table that places the traceback (``placing_function``)
    placed_by: str | None = None
    #: the scheduler's own start-up step it failed in, past its model worker (weights, KV pool,
    #: graphs: ``model.phases.scheduler_step``): the phase is then the one its rank reached last
    scheduler_step: str | None = None
    #: every rank that raised printed the first one's traceback (its exception, message shape
    #: and innermost frames): they failed alike, not one rank first and the others after it
    alike: bool = False
    #: where it failed, in words (``model.phases.where_failed``): ``during load_weights``, or
    #: for the launcher's own phase the server arguments it was parsing and the frame of it
    where: str = "during an unknown phase"
    #: the optional part of SGLang its innermost SGLang frame is in (``model.phases.component_of``)
    component: str | None = None
    #: where the innermost SGLang frame is outside that part, that frame (``memory_pool.py:1534 in
    #: set_kv_buffer``): the part only called the code that failed (``model.phases.failed_outside_part``)
    failed_outside: str | None = None
    #: what failed when no exception line is in the log, in words that say only what it shows
    #: (``without_exception``)
    no_exception: str = "no Python exception (native abort or torn traceback)"
    #: the process the first fatal record's header names, in words (``the Scheduler (its line
    #: names no rank)``, ``the Rank 0 scheduler``), or None
    process: str | None = None
    #: where the first fatal line names no rank, the line of the record that names ``first_rank``
    #: (the verdict says so, and does not call the first line that rank's)
    rank_named_at: int | None = None
    #: seconds the first failing rank printed no stamped record before its failure (60 or
    #: more), and the stamp of its last one (``Crash.quiet_before``)
    quiet_s: float | None = None
    quiet_since: str | None = None
    #: what ran out, as its message names the device: "GPU memory" (CUDA, HIP), "NPU memory",
    #: or "memory" when it names none
    oom_of: str = "memory"
    #: the exit code the launcher gives for the process, and the signal it says ended it
    exit_code: int | None = None
    ended_by: str | None = None
    #: a torch collective's record, at or before the crash, that names another rank as the
    #: faulty one ("... from rank 0. Please check rank 0 logs for faulty rank."): the rank it
    #: names and the evidence; the first traceback in the log is then not shown to be the cause
    faulty_named: str | None = None
    faulty_at: Evidence | None = None
    #: the address the failing process could not bind because another process held it
    #: (uvicorn's "[Errno 98] error while attempting to bind on address ('127.0.0.1', 30000):
    #: address already in use", ZMQ's "Address already in use (addr='tcp://...')"): ``host:port``,
    #: the ZMQ endpoint, or "an address" where the message names none
    address_in_use: str | None = None
    #: later failing ranks whose own traceback is a failure of their own, not one that follows from
    #: the first rank's leaving: out of memory, or an address another process holds
    #: ("DP0 TP0: torch.OutOfMemoryError (out of memory), line 66")
    later_own: tuple[str, ...] = ()
    #: where the first record is no bind failure: the later rank that could not bind
    #: ``address_in_use`` in the first failure's phase, and its record. torch.distributed's store
    #: is served by one rank and its peers connect to its port: when that rank cannot listen, they
    #: reach whatever holds the port and fail before it reports (an invalid reply, a closed socket)
    bind_failed: str | None = None
    bind_at: Evidence | None = None
    #: the failure's own words are about memory or the KV pool's capacity (out of memory, "Not
    #: enough memory", max running requests, a fraction to raise), or no exception line is in the
    #: log: False for an error of another kind where the pool is made (a kernel a dtype lacks, a
    #: device call that failed), which is no failure to size or allocate it
    names_memory: bool = True
    #: the error says its stack may not show where it happened (a kernel runs asynchronously: CUDA's
    #: "the stacktrace below might be incorrect", torch_npu's "the stacktrace may be inaccurate")
    stack_inexact: bool = False
    bind_exception: str | None = None


#: An address another process holds, and the forms messages name it in.
_IN_USE = re.compile(r"[Aa]ddress already in use|is used by a process already")
_BIND_ADDRESS = re.compile(r"bind on address \('([^']*)', (\d+)\)|addr='([^']+)'|\bat (\d+) is not available in \d+ seconds"
                           r"|\bport: (\d+), useIpv6")


def address_in_use(*messages: str | None) -> str | None:
    """The address a failure could not bind because it was in use (``CrashFacts.address_in_use``):
    uvicorn's, ZMQ's and torch.distributed's store's words ("The server socket has failed to listen
    on any local network address. port: 30238, useIpv6: 0, code: -98, name: EADDRINUSE, ..."), and
    SGLang's own wait for a port ("port_base at 8234 is not available in 30 seconds. port_base is
    used by a process already")."""
    for message in messages:
        if message and _IN_USE.search(message):
            m = _BIND_ADDRESS.search(message)
            if m is None:
                return "an address"
            port = m.group(4) or m.group(5)
            return m.group(3) or (f"port {port}" if port else f"{m.group(1)}:{m.group(2)}")
    return None


#: torch's words for a peer it blames (ProcessGroupGloo's monitoredBarrier, c10d's errors).
_FAULTY = re.compile(r"[Pp]lease check rank (\d+) logs? for faulty rank|errors? while waiting for send/recv from rank (\d+)")
#: torch's rank prefix of the record (``[rank3]:``).
_TORCH_RANK = re.compile(r"\[rank(\d+)\]:")


def faulty_named(run: RunSummary, line: int) -> tuple[str, Evidence] | None:
    """The peer rank a torch collective record at or before ``line`` names as faulty, when it is
    not the rank that printed it (``rank0``), with the record's evidence; None without one."""
    for n in run.notices.get("c10d", []):
        if n.line is None or n.line > line:
            continue
        m = _FAULTY.search(n.text or "")
        if m is None:
            continue
        named = m.group(1) or m.group(2)
        own = _TORCH_RANK.match(n.text or "")
        if own is not None and own.group(1) == named:
            continue
        return f"rank{named}", notice_ev(n)
    return None


#: Words of a failure about memory or the KV pool's capacity (``CrashFacts.names_memory``).
_MEMORY_WORDS = re.compile(r"memory|\bOOM\b|kv[ _-]?cache|max[ _]running[ _]req|max_total_num_tokens|mem[ _-]fraction|"
                           r"capacity|allocat", re.IGNORECASE)
#: What an asynchronous kernel's error says of the stack printed with it (``CrashFacts.stack_inexact``).
_STACK_INEXACT = re.compile(r"stack ?trace (?:below )?(?:may|might) be (?:inaccurate|incorrect)", re.IGNORECASE)


def crash_facts(run: RunSummary) -> CrashFacts | None:
    crash = run.crash
    if not crash:
        return None
    faulty = faulty_named(run, crash.line or 0)
    frames = crash.frames
    chain = crash.chain
    if chain and "OutOfMemory" in (chain[0].exception or "") and chain[0].frames:
        # "During handling of the above exception": the allocation failed in the first part.
        frames = frames[:chain[0].frames]
    sglang_frames = [fr for fr in frames if "sglang" in (fr.path or "")]
    site = (sglang_frames or frames)[-1] if frames else None
    oom = crash.oom
    text_lines = (crash.text or "").splitlines()
    named_at = crash.rank_named_at  # the first fatal line names no rank: it is not cited as the rank's
    evidence = [ev(run, crash.line, None if named_at else crash.first_rank, text_lines[0] if text_lines else crash.text)]
    exc_at = crash.exception_line
    if exc_at and exc_at.line != crash.line:
        evidence.append(ev(run, exc_at.line, crash.first_rank, exc_at.text))
    tried, free = (oom.tried_gib, oom.free_gib) if oom else (None, None)
    reserved = oom.reserved_unallocated_gib if oom else None
    message = crash.message or ""
    ranks = tuple(r for r in crash.ranks if r)
    bind = _bind(run, crash, ranks)
    first = next((e for e in run.exceptions
                  if e.file == crash.file and any(o.line == crash.line for o in e.occurrences)), None)
    return CrashFacts(
        first_rank=crash.first_rank, ranks=ranks,
        phase=crash.phase, exception=crash.exception,
        cause=chain[-1].exception if chain else None,  # the one right before it (None: cut)
        message_head=_head(message), is_oom=oom is not None, oom=oom,
        shortfall_gib=round(tried - free, 6) if tried is not None and free is not None else None,
        fragmentation=bool(reserved is not None and tried is not None and reserved >= tried),
        alloc_site=site, not_enough_memory="Not enough memory" in message,
        capture_failed="capture cuda graph failed" in message.lower(), evidence=tuple(evidence),
        first_native=crash.first_message, placed_by=placing_function(crash.frames),
        scheduler_step=scheduler_step(crash.frames),
        alike=len(ranks) > 1 and first is not None and set(ranks) <= set(first.ranks),
        where=_where(run, crash), component=component_of(crash.frames),
        failed_outside=failed_outside_part(crash.frames, [link.frames for link in chain]),
        no_exception=without_exception(crash),
        process=process_phrase(crash.source), rank_named_at=named_at,
        quiet_s=crash.quiet_before.seconds if crash.quiet_before else None,
        quiet_since=crash.quiet_before.ts if crash.quiet_before else None,
        oom_of=_memory_of(oom.device if oom else None),
        exit_code=crash.exit_code, ended_by=ended_by(crash.exit_code),
        faulty_named=faulty[0] if faulty else None, faulty_at=faulty[1] if faulty else None,
        address_in_use=bind[0] if bind else None, bind_failed=bind[1] if bind else None,
        bind_at=bind[2] if bind else None, bind_exception=bind[3] if bind else None, later_own=_later_own(run, ranks),
        names_memory=crash.exception is None or oom is not None
        or _MEMORY_WORDS.search(f"{crash.exception} {message}") is not None,
        stack_inexact=_STACK_INEXACT.search(message) is not None)


def _bind(run: RunSummary, crash: Crash,
          ranks: tuple[str, ...]) -> tuple[str, str | None, Evidence | None, str | None] | None:
    """The address in use that explains the failure (``CrashFacts.address_in_use``): the first
    record's own, or a later rank's in the same phase (``bind_failed``) where the first failure
    is not one of its own (out of memory)."""
    own = address_in_use(crash.first_message, crash.message)
    if own is not None:
        return own, None, None, None
    if crash.oom is not None or crash.phase is None:
        return None
    for rank, e, o in _later_tracebacks(run, ranks):
        held = address_in_use(e.message) if e.phase == crash.phase else None
        if held is not None:
            at = ev(run, o.end_line or o.line, rank, f"{e.exception or 'error'}: {_head(e.message or '')}")
            return held, rank, at, e.exception
    return None


def _later_own(run: RunSummary, ranks: tuple[str, ...]) -> tuple[str, ...]:
    """The ranks after the first whose own traceback is a failure of their own (out of memory,
    an address in use), each with its exception, why and line (``CrashFacts.later_own``)."""
    out: dict[str, str] = {}
    for rank, e, o in _later_tracebacks(run, ranks):
        why = "out of memory" if o.oom is not None or e.oom is not None \
            else "an address in use" if address_in_use(e.message) else None
        if why and rank not in out:
            out[rank] = f"{rank}: {e.exception or 'no exception line'} ({why}), line {o.line}"
    return tuple(out.values())


def _later_tracebacks(run: RunSummary, ranks: tuple[str, ...]) -> Iterator[tuple[str, DistinctException, Occurrence]]:
    """Each rank after the first, with each distinct traceback it printed and its print of it."""
    for rank in ranks[1:]:
        for e in run.exceptions:
            o = next((o for o in e.occurrences if o.rank == rank), None)
            if o is not None:
                yield rank, e, o


def _where(run: RunSummary, crash: Crash) -> str:
    """Where the crash happened, in words (``CrashFacts.where``). A rank whose last phase record
    is its phase's end line ('Memory pool end') had left that phase's own records behind: a
    failure without a phase is after it; one whose frames place it in that phase came after its
    end line, in the step that follows it within SGLang's same start-up call (the attention
    backend's set-up after the KV pool), and is said so, with the function that places it."""
    if crash.source == RUNPY_SOURCE:
        return "before any of SGLang ran (Python could not find the module to run)"
    left = left_phase(run, crash.first_rank or ("-" if set(run.ranks) <= {"-"} else None))
    if crash.phase is None and left:
        return left
    placed = placing_function(crash.frames)
    if left and placed and left.startswith(f"after {crash.phase} (") and scheduler_step(crash.frames) is None:
        return f"{left}, in {placed}"
    return _in_warmup(run, crash) or where_failed(crash.phase, crash.frames)


def _memory_of(device: str | None) -> str:
    """``GPU memory`` for CUDA and HIP, ``NPU memory`` for an Ascend NPU, ``memory`` for none."""
    if device in ("CUDA", "HIP"):
        return "GPU memory"
    return f"{device} memory" if device else "memory"


def without_exception(crash: Crash) -> str:
    """A crash without an exception line, in words: a native abort (or a traceback torn by
    concurrent writers) had none; a Python traceback cut before its last line had one that
    is not in this log; the parent's notice of a dead child says nothing of what failed."""
    if crash.native or crash.source == "garbled":
        return "no Python exception (native abort or torn traceback)"
    if crash.source == CPP_RAISED_SOURCE and crash.message:
        return cpp_exception_words(crash.message)
    if crash.source in LOGGED_THEN_RAISED and crash.message:
        return clip(crash.message, 160)  # what it logged before raising it
    if headerless_dump(crash.source, crash.exception):
        return HEADERLESS_DUMP
    if crash.frames or crash.source is not None:
        shown = [link.exception for link in crash.chain if link.exception]
        # (a chain cut before its last exception: the one it was raised while handling, as the summary says)
        return "a traceback whose exception is not in this log (cut)" + (
            f", raised while handling {shown[-1]}" if shown else "")
    return "a child process failed, what failed is not in this log"


#: Records that show the server serving requests, not only its warm-up: batches, answered
#: requests and probes, and a decode batch's retraction (the KV pool full under running requests:
#: a warning-level server prints no batch, but these; real-pairs 073, 074).
_SERVED = ("decode_batch", "prefill_batch", "http_access", "http_probe", "retract")


def _answered_before(run: RunSummary, file: str | None, line: int) -> bool:
    """Whether the HTTP server answered a request before ``file``'s ``line``: any success (the
    counts keep no line for them), or another answer first printed before it or in another file
    (real-pairs 085's only answer, a 500, comes after the crash, as the server goes down)."""
    req = run.coverage.requests
    if req is None:
        return bool(run.coverage.kinds.get("http_access"))
    if any(str(status).startswith("2") for status in req.answers):
        return True
    return any(ev.file != file or ev.line is None or ev.line < line for ev in req.first.values())


def _in_warmup(run: RunSummary, crash: Crash) -> str:
    """Where the event loop of a server that never became ready failed: in the launcher's
    warm-up request, where the launcher then reports it failed (real-pairs 026); before
    readiness, where the log shows its HTTP server up and no request answered after it
    (real-pairs 031); a window that shows no batch, request or probe at all says nothing of
    readiness, and the words say so (real-pairs 067). Empty otherwise (the phase's own words,
    ``during serving``, then say it)."""
    if crash.phase != "serving" or run.ready is not None or run.outcome != "crashed":
        return ""
    if any(e.source == WARMUP_SOURCE and e.first_line > crash.line for e in run.exceptions):
        return "in the launcher's warmup request (the event loop serving it; the server never said it was ready)"
    up = run.notices.get("http_up") or []
    if up and up[0].line < crash.line and not _answered_before(run, crash.file, crash.line):
        # its HTTP server up (line N), no request answered (a probe, /get_model_info, is no request
        # the event loop serves), no readiness: the launcher sends its warm-up then, though which
        # request a batch in flight served the log does not say (real-pairs 075: two prefills)
        return (f"before readiness, in the event loop with no generation request answered yet (its HTTP server up "
                f"at line {up[0].line}, when the launcher sends its warmup request; which request the failing "
                f"batch served is not in this log)")
    if not any(run.coverage.kinds.get(k) for k in _SERVED):
        # no batch, request or probe in the log: its frames say the event loop ran a batch, not whose
        return ("in the event loop (by its frames; whether the server had said it was ready, or was serving the "
                "launcher's warmup request, is not in this log)")
    return ""


def _head(message: str) -> str:
    """The first line of an exception message without PyTorch's boilerplate advice."""
    first = message.split("\n")[0]
    first = first.split(" If reserved but unallocated memory is large")[0]
    return first[:500]


def same_crash(a: CrashFacts | None, b: CrashFacts | None) -> bool:
    """Both runs died the same way: the same exception (or native abort) in the same phase."""
    return a is not None and b is not None and (a.exception, a.phase, a.message_head) == (b.exception, b.phase, b.message_head)


@dataclass(frozen=True)
class HangFacts:
    """A hang: the ranks that fell silent and the watchdog lines of the others."""

    hung: bool
    silent_ranks: tuple[str, ...] = ()
    watchdog_ranks: tuple[str, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    #: the ranks whose scheduler a py-spy dump shows, where no timer's words are in the log
    dumped_ranks: tuple[str, ...] = ()
    #: the one phase every rank the hang names (else every rank) had reached: the hang came in it
    #: (serving only after the server said it was ready)
    phase: str | None = None


def hang_facts(run: RunSummary) -> HangFacts:
    hang = run.hang
    if not hang:
        return HangFacts(run.outcome == "hung")
    silent = tuple(hang.silent_ranks)
    evidence = tuple(e for entry in hang.evidence[:8] for e in ev_of(entry.to_dict()))
    evidence += tuple(ev(run, run.last_seen[r].line, r, run.last_seen[r].text) for r in silent if r in run.last_seen)
    reached = run.phase_reached or {}
    phases = {reached.get(r) for r in (hang.ranks if any(r in reached for r in hang.ranks) else reached)}
    phase = hang.phase or (phases.pop() if len(phases) == 1 else None)
    if phase == "serving" and (run.ready is None or run.ready.line > (hang.first_line or 0)):
        phase = None  # batches before readiness (a warm-up's): not what a reader calls serving
    if hang.timer == "pyspy_only":  # no watchdog's words: a py-spy dump of the stuck scheduler
        return HangFacts(True, silent, (), evidence, tuple(hang.ranks), phase)
    return HangFacts(True, silent, tuple(hang.ranks), evidence, phase=phase)
