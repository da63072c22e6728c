"""Success that did no work: a run that looks fine and served nothing.

A benchmark can report success with zero generated tokens (``sglang.bench_serving``'s
"Successful requests: 1000" beside "Total generated tokens: 0"), and a server can keep
printing decode batches with requests running while it generates nothing. The outcome of
such a run is ``ready``; these facts say it did no work (VAL01), each with the lines that
show it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..model.run import RunSummary
from .sides import Evidence, ev_of

#: Seconds without generated tokens while requests run, before the server counts as stalled
#: (SGLang prints a decode batch every few seconds while it decodes).
STALL_S = 30.0


@dataclass(frozen=True)
class NoWork:
    """One sign that the run did no work."""

    #: ``no_tokens`` (a benchmark's success with no generated token), ``no_requests`` (a
    #: benchmark with no successful request), ``stalled`` (requests running, no token generated),
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
    found = _benchmarks(run) + _stalls(run) + _probes(run)
    return Validity(tuple(found), tuple(e for n in found for e in n.evidence)[:12])


def _benchmarks(run: RunSummary) -> list[NoWork]:
    out = []
    for b in run.throughput.get("benchmarks") or []:
        lines = tuple(e for entry in b.get("evidence") or [] for e in ev_of(entry))
        ok, tokens = b.get("successful_requests"), b.get("generated_tokens")
        if ok == 0:
            out.append(NoWork("no_requests", "the benchmark completed no request (Successful requests: 0)", lines))
        elif tokens == 0:
            out.append(NoWork("no_tokens", f"the benchmark reports {ok} successful requests and 0 generated tokens",
                              lines))
    return out


def _stalls(run: RunSummary) -> list[NoWork]:
    """Spans of the serving series with requests running and no token generated, at least
    STALL_S long: the first one."""
    series: dict[str, Any] = (run.serving or {}).get("series") or {}
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


def _seconds(a: str, b: str) -> float | None:
    try:
        return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()
    except (TypeError, ValueError):
        return None
