"""A run's summary with what the files beside its logs say (``artefacts``).

A server killed from outside prints nothing: its log stops, and the run reads
``incomplete``. When an orchestrator's record beside the log says who ended it (the
kernel's OOM killer, Kubernetes' ``OOMKilled``, Slurm's time limit), that record is the
run's end: an OOM kill or a non-zero exit is a crash whose only evidence is that record;
a cancel (time limit, by hand) of a ready server is its stop, and of one still starting
the reason the log stops; a kill of a ready server after its last record is said after its
readiness (no crash is named: the log shows no failure of its own). A log that shows a failure of its own keeps it; the records are
then shown beside it. Slurm writes its records into the job's own output too, and a shell
its notice that the job it ran was killed (bash's ``Killed``): those are read from the log
(``job_end`` events, :func:`in_log`) and judged the same way; one after a failure the log
shows is said after it (the process was killed after it failed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..artefacts.types import CAUSES, Artefacts, Termination
from ..events import PHASES
from ..read import jobend
from ..units import clip
from .records import Notice, Stop
from .summary import Crash, RunSummary

#: Causes that mean the process was killed or failed (a crash), most telling first.
FAILED = ("oom_killed", "evicted", "node_failure", "liveness_probe", "sigkill", "sigsegv", "sigabrt", "sigbus", "sigill",
          "sigfpe", "exited")
#: Causes that end a job on purpose.
CANCELLED = ("time_limit", "cancelled")
#: Causes that say how the process ended but not whether on purpose: SIGQUIT is Ctrl-\ at a
#: terminal, and also what SGLang's children send their launcher when they fail
UNCLEAR = ("sigquit",)
SOURCES = {"slurm": "Slurm", "kubernetes": "Kubernetes", "docker": "Docker", "ray": "Ray", "kernel": "the kernel",
           "shell": "a shell"}
#: What to collect for a log that just stops: who ended the process is recorded outside the
#: log, if anywhere (``summary`` and ``diff`` say it in these words).
END_RECORD = ("the record of the process's end outside the log, beside it or with --artifacts: "
              "kubectl describe pod, docker inspect, the Slurm job's output or sacct, dmesg")


def stops_unexplained(s: RunSummary) -> bool:
    """The log stops without readiness, failure or a stop signal, and no record of its end (an
    orchestrator's or the kernel's) was read beside it or in it: :data:`END_RECORD` is what
    would tell why."""
    return s.outcome == "incomplete" and s.stopped is None and not (s.artefacts and s.artefacts.terminations)


def process_ended(s: RunSummary) -> Notice | None:
    """Python's resource_tracker warning after every rank's last record: the process ended
    there (``failures.on_tracker_exit``), so the log has no rest to collect, only the reason."""
    last = max((seen.line or 0 for seen in s.last_seen.values()), default=0)
    return next((n for n in s.notices.get("process_exit", []) if n.line > last), None)


def the_end(terminations: Sequence[Termination]) -> Termination | None:
    """The record that says most of how the run ended: a kill or failure before a cancel,
    the OOM killer first; the first such record in file order."""
    order = FAILED + CANCELLED + UNCLEAR
    ends = [t for t in terminations if t.cause in order]
    return min(ends, key=lambda t: order.index(t.cause)) if ends else None


def describe(t: Termination) -> str:
    """``killed by the out-of-memory killer (Kubernetes: Reason: OOMKilled, exit code 137; pod.txt:23)``."""
    shown = clip(t.text, 160)
    return f"{CAUSES[t.cause]} ({SOURCES.get(t.source, t.source)}: {shown}{t.code_words(shown)}; {t.where})"


def with_artefacts(s: RunSummary, arts: Artefacts) -> RunSummary:
    """``s`` with ``arts``; a log that just stops takes its end from the records beside it."""
    if not arts:
        return s
    return with_ends(dataclasses.replace(s, artefacts=arts), arts.terminations)


def in_log(notices: list[dict[str, Any]]) -> tuple[Termination, ...]:
    """The ``job_end`` records of a log (Slurm's lines in the job's own output, a shell's
    ``Killed``) as terminations."""
    out = []
    for n in notices:
        found = jobend.match(n["text"])
        if found is not None:
            out.append(Termination(found.source, found.cause, n["file"] or "", n["line"], n["text"][:500],
                                   found.exit_code, dict(found.detail)))
    return tuple(out)


def with_ends(s: RunSummary, terminations: Sequence[Termination]) -> RunSummary:
    """``s`` with its end taken from the orchestrator's records when its log just stops, or
    its stop when a ready server was cancelled (module docstring)."""
    end = the_end(terminations)
    changes: dict[str, object] = {}
    if end is not None and s.outcome == "incomplete":
        reached = [p for p in s.phase_reached.values() if p in PHASES]
        phase = max(reached, key=PHASES.index) if reached else None
        if end.cause in FAILED:
            changes["outcome"] = "crashed"
            changes["outcome_reason"] = f"{describe(end)}; the log itself stops without a failure"
            changes["crash"] = Crash(line=end.line, file=end.file, text=end.text, phase=phase, source=end.source,
                                     message=CAUSES[end.cause],
                                     evidence=[Notice(end.file, end.line, end.text, keys=("file", "line", "text"))],
                                     keys=("line", "file", "text", "phase", "source", "message", "evidence"))
        else:
            changes["outcome_reason"] = f"{s.outcome_reason}; {describe(end)}"
    elif end is not None and s.outcome in ("crashed", "hung") and end.cause in FAILED \
            and end.line > _failed_at(s) and end.file == _failed_file(s):
        # the process was killed after the failure its log shows: said after it, not instead of it
        changes["outcome_reason"] = f"{s.outcome_reason}; then {describe(end)}"
    elif end is not None and s.outcome == "ready" and s.stopped is None and end.cause in FAILED \
            and _after_every_record(s, end):
        # a ready server killed (the OOM killer, SIGKILL): said after its readiness, as it is
        # after a failure; the log shows no failure of the server's own, so no crash is named
        changes["outcome_reason"] = f"{s.outcome_reason}; then {describe(end)}, with no failure before it in this log"
    elif end is not None and s.outcome == "ready" and s.stopped is None and end.cause in CANCELLED:
        changes["stopped"] = Stop.from_dict({"file": end.file, "line": end.line, "rank": None, "text": end.text,
                                             "evidence": [{"file": end.file, "line": end.line, "text": end.text}]})
        changes["outcome_reason"] = f"{s.outcome_reason}; {describe(end)}"
    return dataclasses.replace(s, **changes) if changes else s  # type: ignore[arg-type]


def _after_every_record(s: RunSummary, end: Termination) -> bool:
    """``end`` comes after every rank's last record: a record beside the log (another file), or
    a line of the log after them all (not a kill of an earlier launch in the same log)."""
    if end.file != (s.file or ""):
        return True
    return end.line > max((seen.line or 0 for seen in s.last_seen.values()), default=0)


def _failed_at(s: RunSummary) -> int:
    """The line of the run's failure (its crash's, else its hang's first), or 0 if neither."""
    if s.crash is not None:
        return s.crash.line or 0
    return int((s.hang.first_line if s.hang is not None else 0) or 0)


def _failed_file(s: RunSummary) -> str:
    """The file of the run's failure: its crash's, else the run's own."""
    return str((s.crash.file if s.crash is not None else None) or s.file or "")
