"""Success that did no work: a run that looks fine and served nothing.

A benchmark can report success with zero generated tokens (``sglang.bench_serving``'s
"Successful requests: 1000" beside "Total generated tokens: 0"), and a server can keep
printing decode batches with requests running while it generates nothing, or whose figures
do not move. The outcome of
such a run is ``ready``; these facts say it did no work (VAL01), each with the lines that
show it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..model.records import ProbePath
from ..model.run import RunSummary
from .sides import Evidence, ev_of, notice_ev

#: Seconds without generated tokens while requests run, before the server counts as stalled
#: (SGLang prints a decode batch every few seconds while it decodes).
STALL_S = 30.0
#: Lines the log goes on for after its last batch record, that record with requests still
#: waiting (#queue-req > 0), before the server counts as having stopped serving: a waiting
#: request is prefilled as soon as the scheduler runs, and every prefill prints a batch line.
STOP_LINES = 50


@dataclass(frozen=True)
class NoWork:
    """One sign that the run did no work."""

    #: ``no_tokens`` (a benchmark's success with no generated token), ``no_requests`` (a
    #: benchmark with no successful request), ``stalled`` (requests running, no token generated),
    #: ``frozen`` (decode batches in a row with requests running and gen throughput 0, or
    #: with #running-req, #token and gen throughput that do not move),
    #: ``stopped`` (requests left waiting, then no batch while the log goes on, no error),
    #: ``health_generate`` (the health check answers, a real generation fails)
    kind: str
    what: str
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class Validity:
    """Whether the failing run's work shows in its log (``facts.validity``)."""

    no_work: tuple[NoWork, ...]
    evidence: tuple[Evidence, ...]


def validity(run: RunSummary) -> Validity:
    found = _benchmarks(run) + _stalls(run) + _frozen(run) + _stopped(run) + _probes(run) + _probe_lines(run)
    return Validity(tuple(found), tuple(e for n in found for e in n.evidence)[:12])


def _benchmarks(run: RunSummary) -> list[NoWork]:
    out = []
    for b in run.throughput.benchmarks:
        lines = tuple(notice_ev(n) for n in b.evidence)
        ok, tokens = b.successful_requests, b.generated_tokens
        if ok == 0:
            out.append(NoWork("no_requests", "the benchmark completed no request (Successful requests: 0)", lines))
        elif tokens == 0:
            out.append(NoWork("no_tokens", f"the benchmark reports {ok} successful requests and 0 generated tokens",
                              lines))
    return out


def _stalls(run: RunSummary) -> list[NoWork]:
    """Spans of the serving series with requests running and no token generated, at least
    STALL_S long: the first one."""
    series = run.serving.series if run.serving else {}
    running = {row[0]: row for row in series.get("running_req") or []}
    start: list[Any] | None = None
    for row in series.get("gen_tok_s") or []:
        ts, value = row[0], row[1]
        busy = running.get(ts)
        if value == 0 and busy is not None and busy[1] > 0:
            start = start or row
            span = _seconds(start[0], ts)
            if span is not None and span >= STALL_S:
                # the series keeps a window's first line, not its text: say what was read there
                first = {"file": run.file, "line": start[2], "rank": None,
                         "text": f"(the serving series' window at {start[0]}: gen throughput 0 token/s, "
                                 f"{busy[1]:g} requests running)"}
                return [NoWork("stalled", f"requests ran for {span:g} s (from {start[0]}) and no token was generated",
                               ev_of(first))]
        else:
            start = None
    return []


def _frozen(run: RunSummary) -> list[NoWork]:
    """``FROZEN_LINES`` or more consecutive decode batches of one rank with requests running
    that show no work (``serving.frozen``, ``model/frozen.py``): gen throughput 0, or
    ``#running-req``, ``#token`` and gen throughput that do not move. The first such run."""
    f = run.serving.frozen if run.serving else None
    if not f:
        return []
    shown = _FROZEN_SHOWS.get(f.kind or "gen_throughput_zero", "showed no work")
    what = (f"{f.lines} consecutive decode batches of {f.rank} had requests running and {shown} "
            f"(lines {f.first.line}-{f.last.line}; {f.threshold_lines} or more make a frozen counter)")
    return [NoWork("frozen", what, ev_of(f.first) + ev_of(f.last))]


#: What a frozen run's decode batches showed, by its kind (``model.frozen.KINDS``).
_FROZEN_SHOWS = {
    "gen_throughput_zero": "gen throughput 0",
    "counters_fixed": "the same #running-req, #token and gen throughput line after line",
}


def _stopped(run: RunSummary) -> list[NoWork]:
    """The server stopped serving with no error: its last batch record left requests waiting
    (#queue-req > 0), and the log goes on ``STOP_LINES`` lines or more (probes, idle lines)
    with no batch record, no failure (crash, hang, error, exception after it) and no stop."""
    last = run.serving.last_batch if run.serving else None
    if not last or not isinstance(last.queue_req, (int, float)) or last.queue_req <= 0:
        return []
    after = int(run.coverage.lines_read or 0) - int(last.line)
    failed = (run.outcome != "ready" or run.crash or run.hang or run.stopped or run.errors
              or any(e.first_line > last.line for e in run.exceptions))
    if failed or after < STOP_LINES:
        return []
    what = (f"serving stopped with no error: the last batch record (line {last.line}) left {last.queue_req:g} "
            f"requests waiting, and the log goes on {after} lines with no batch record ({STOP_LINES} or more "
            "make a stop)")
    return [NoWork("stopped", what, ev_of(last))]


def _probes(run: RunSummary) -> list[NoWork]:
    """``/health`` answering while ``/health_generate`` (a real generation) fails, from the
    endpoint records of an incident bundle beside the logs (``artefacts.incident``)."""
    answers = {}
    for d in run.artefacts.dumps if run.artefacts else ():
        path = d.figures.get("path")
        if d.kind == "incident" and path in ("/health", "/health_generate") and "ok" in d.figures:
            answers[path] = d
    health, generate = answers.get("/health"), answers.get("/health_generate")
    if health is None or generate is None or not health.figures["ok"] or generate.figures["ok"]:
        return []
    why = generate.figures.get("status") or generate.figures.get("error") or "no answer"
    # a record is a file of one JSON document: cited at its first line
    lines = tuple(Evidence(d.file, 1, None, f"{d.figures['path']}: ok {d.figures['ok']}, status "
                           f"{d.figures.get('status')}") for d in (generate, health))
    return [NoWork("health_generate", f"/health answers while /health_generate fails ({why})", lines)]


def _ok(status: str) -> bool:
    return status.isdigit() and 200 <= int(status) < 300


def _probe_lines(run: RunSummary) -> list[NoWork]:
    """``/health`` answered 2xx while no ``/health_generate`` (a real generation) succeeded:
    each of its answers failed (non-2xx), from the log's own access lines (``coverage.probes``),
    with SGLang's timeout line beside them where the log has it (``Health check failed. Server
    couldn't get a response from detokenizer ...``, kept by the hang observer). A ``/health_generate`` that also
    answered 2xx is not flagged: a failure among successes is not a server that does no work. SGLang's
    timeout line alone does not flag it: one handler answers /health and /health_generate in the
    builds that print it, and the line does not say which path timed out."""
    probes = run.coverage.probes
    health, generate = probes.get("/health") or ProbePath(), probes.get("/health_generate") or ProbePath()
    answered = {st: n for st, n in health.answers.items() if _ok(st)}
    if not answered or any(_ok(st) for st in generate.answers):
        return []
    failed = {st: n for st, n in generate.answers.items() if not _ok(st)}
    lines = sorted((e.to_dict() for st, e in generate.first.items() if st in failed), key=lambda e: e["line"])
    # the grammar's literal of SGLang's health_generate timeout (health_check_failed)
    if not failed:
        return []
    timeouts = [e.to_dict() for e in (run.hang.evidence if run.hang else []) if "Health check failed" in str(e.text)]
    ok_first = min((at.to_dict() if (at := health.first.get(st)) else None for st in answered),
                   key=lambda e: e["line"] if e else 1 << 62)
    said = [f"{n} answered {st}" for st, n in sorted(failed.items())]
    if timeouts:
        said.append("timed out (Health check failed)")
    what = (f"/health answered {sum(answered.values())} times with {'/'.join(sorted(answered))} while "
            f"/health_generate never succeeded ({', '.join(said)})")
    evidence = tuple(e for entry in (lines[:1] + timeouts[:1] + [ok_first]) for e in ev_of(entry))
    return [NoWork("health_generate", what, evidence)]


def _seconds(a: str, b: str) -> float | None:
    try:
        return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()
    except (TypeError, ValueError):
        return None
