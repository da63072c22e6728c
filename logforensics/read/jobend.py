"""The records an orchestrator or the kernel writes when it ends a job: one table for the
job's own output (Slurm writes ``slurmstepd``/``srun`` lines into it: the grammar's
``job_end`` record) and for the files beside it (``artefacts.orchestrator``).

Each record gives a ``source`` (slurm, kernel, ray, docker, shell), a ``cause`` (``oom_killed``,
``time_limit``, ``cancelled``, ``node_failure``, ``exited``) and what else it names (job,
host, task, process, exit code).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..events.types import INT, STR
from .values import typed


@dataclass(frozen=True)
class JobEnd:
    """What one record says of a job's end."""

    source: str
    cause: str
    exit_code: int | None
    detail: tuple[tuple[str, str], ...]


_Rec = tuple[re.Pattern[str], str, str, Callable[[re.Match[str]], dict[str, Any]]]


def _groups(m: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {k: v for k, v in m.groupdict().items() if v is not None}
    if "exit_code" in out:
        out["exit_code"] = int(out["exit_code"])
    return out


def _docker(m: re.Match[str]) -> dict[str, Any]:
    """A Docker event's container (the text form names it after the action, the JSON form
    as ``"id"``) and exit code."""
    out = _groups(m)
    if "json_code" in out:
        out["exit_code"] = int(out.pop("json_code"))
    if "container" not in out and (i := _JSON_ID.search(m.string)):
        out["container"] = i.group(1)
    return out


_JSON_ID = re.compile(r'"id":\s*"([0-9a-f]{12,})"')
#: a record whose cause is its exit code's: 0 is no failure, 137 (128 + SIGKILL) a kill by
#: whom the record does not say, any other an exit with that code
BY_CODE = "by_code"


#: slurmstepd's own prefix, or the stamp it writes before a batch step's records instead
#: ("[2026-02-20T16:40:38.612] error: Detected 1 oom_kill event in StepId=1459995.batch. ...")
_STEPD = r"(?:slurmstepd(?:-\S+)?:|\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?\])"

#: Line records: (expression, source, cause, what to keep). The first that matches a line wins.
RECORDS: tuple[_Rec, ...] = (
    (re.compile(_STEPD + r" error: \*\*\* (?:JOB|STEP) (?P<job>[\d.]+) ON (?P<host>\S+) CANCELLED AT "
                r"(?P<time>\S+) DUE TO TIME LIMIT"), "slurm", "time_limit", _groups),
    (re.compile(_STEPD + r" error: \*\*\* (?:JOB|STEP) (?P<job>[\d.]+) ON (?P<host>\S+) CANCELLED AT "
                r"(?P<time>\S+) DUE TO NODE FAIL"), "slurm", "node_failure", _groups),
    (re.compile(_STEPD + r" error: \*\*\* (?:JOB|STEP) (?P<job>[\d.]+) ON (?P<host>\S+) CANCELLED AT "
                r"(?P<time>\S+)"), "slurm", "cancelled", _groups),
    (re.compile(_STEPD + r" error: Detected (?P<events>\d+) oom[-_]kill event\(?s?\)? in "
                r"(?:StepId=|step )?(?P<job>\d+(?:\.\w+)?)"), "slurm", "oom_killed", _groups),
    (re.compile(r"srun: error: (?P<host>[^\s:]+): tasks? (?P<task>[\d,-]+): Out Of Memory"), "slurm", "oom_killed",
     _groups),
    (re.compile(r"srun: error: (?P<host>[^\s:]+): tasks? (?P<task>[\d,-]+): Exited with exit code "
                r"(?P<exit_code>\d+)"), "slurm", "exited", _groups),
    (re.compile(r"^\s*(?P<job>\d+(?:\.\w+)?)\s.*\s(?:OUT_OF_MEMORY|OUT_OF_ME\+)\s"), "slurm", "oom_killed",
     _groups),  # sacct: the State column (cut to OUT_OF_ME+ by its width)
    (re.compile(r"^\s*(?P<job>\d+(?:\.\w+)?)\s.*\sTIMEOUT\s"), "slurm", "time_limit", _groups),
    (re.compile(r"\bKilled process (?P<pid>\d+) \((?P<process>[^)]*)\)"), "kernel", "oom_killed", _groups),
    (re.compile(r"OutOfMemoryError: Task was killed due to the node running low on memory"), "ray", "oom_killed",
     _groups),
    (re.compile(r"(?P<workers>\d+) Workers \(tasks / actors\) killed due to memory pressure"), "ray", "oom_killed",
     _groups),
    (re.compile(r"\bcontainer oom (?P<container>[0-9a-f]{12,})|\"status\":\s*\"oom\""), "docker", "oom_killed",
     _docker),
    # ``docker events``' die, as text (``container die <id> (exitCode=137, image=..., name=...)``; the
    # attributes in name order, so Kubernetes' ``annotation.*`` labels may come first) or as the API's
    # JSON (``"status":"die"`` ... ``"Attributes":{"exitCode":"137",...}``)
    (re.compile(r"\bcontainer die (?P<container>[0-9a-f]{12,}) \(.*?\bexitCode=(?P<exit_code>-?\d+)"
                r"|\"status\":\s*\"die\".*?\"exitCode\":\s*\"(?P<json_code>-?\d+)\""), "docker", BY_CODE, _docker),
    (re.compile(r"Worker exit type: (?P<exit_type>\w+)(?: Worker exit detail: (?P<exit_detail>.*))?"), "ray",
     "exited", _groups),
    # a shell's job-control notice, alone on its line: the job it ran died of SIGKILL (bash's
    # "Killed"; the OOM killer or an operator sent it, the notice does not say which)
    (re.compile(r"^\s*Killed\s*$"), "shell", "sigkill", _groups),
    # the same notice of another fatal signal, the core dump's words after it where one was written
    *((re.compile(rf"^\s*{words}(?: \(core dumped\))?\s*$"), "shell", cause, _groups) for words, cause in (
        ("Segmentation fault", "sigsegv"), ("Aborted", "sigabrt"), ("Quit", "sigquit"), ("Bus error", "sigbus"),
        ("Illegal instruction", "sigill"), ("Floating point exception", "sigfpe"))),
    # the notices in a Chinese locale (glibc's zh_CN strsignal: "已杀死", "段错误 (核心已转储)", "已放弃")
    *((re.compile(rf"^\s*{words}(?: ?\(核心已转储\))?\s*$"), "shell", cause, _groups) for words, cause in (
        ("已杀死", "sigkill"), ("段错误", "sigsegv"), ("已放弃", "sigabrt"))),
    # zsh's notice, the command after it ("zsh: killed     python -m sglang.launch_server ...")
    *((re.compile(rf"^\s*zsh: {words}(?: \(core dumped\))?(?:\s|$)"), "shell", cause, _groups) for words, cause in (
        ("killed", "sigkill"), ("segmentation fault", "sigsegv"), ("abort", "sigabrt"), ("quit", "sigquit"),
        ("bus error", "sigbus"), ("illegal hardware instruction", "sigill"), ("floating point exception", "sigfpe"))),
)



def match(line: str) -> JobEnd | None:
    """The record a line holds, or None; a Ray worker that Ray stopped itself
    (``INTENDED_USER_EXIT``, ``INTENDED_SYSTEM_EXIT``) and a container that exited with 0
    are no failure and give None."""
    if not _MAYBE.search(line):
        return None
    for rx, source, cause, keep in RECORDS:
        m = rx.search(line)
        if m:
            detail = keep(m)
            code = detail.pop("exit_code", None)
            if source == "ray" and str(detail.get("exit_type", "")).startswith("INTENDED_"):
                return None
            if cause == BY_CODE:
                if not code:
                    return None
                cause = "sigkill" if code == 137 else "exited"
            repeated = _RAY_REPEATED.search(line)
            if repeated:  # Ray's log de-duplication: N more records like this one across the cluster
                detail = {k: _RAY_REPEATED.sub("", v) if isinstance(v, str) else v for k, v in detail.items()}
                detail["repeated"] = repeated.group(1)
            return JobEnd(source, cause, code, tuple((k, str(v)) for k, v in detail.items()))
    return None


def field(name: str) -> Any:
    """A converter for one field of a ``job_end`` record (the grammar's): its ``source``,
    ``cause``, ``exit_code``, or what it names (``job``, ``host``)."""
    def conv(s: str) -> Any:
        found = match(s)
        if found is None:
            return None
        if name in ("source", "cause", "exit_code"):
            return getattr(found, name)
        return dict(found.detail).get(name)
    return typed(INT if name == "exit_code" else STR, conv)


_RAY_REPEATED = re.compile(r"\s*\[repeated (\d+)x across cluster\]\s*$")
#: a cheap test before the table: words every record has one of
_MAYBE = re.compile(r"slurm|srun|[Kk]illed|exit|oom|OUT_OF|TIMEOUT|Segmentation|Aborted|Quit|Bus error|Illegal|Floating|zsh: "
                    r"|已杀死|段错误|已放弃")
