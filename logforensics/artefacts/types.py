"""What the files beside a server log say, as typed records with their provenance.

Every value carries the file and line it was read from (:class:`Cited`), as a log event
does, so a report can cite ``env.txt:14`` for a driver version as it cites ``server.log:88``
for a crash. The records are frozen; ``to_dict`` gives the JSON form ``summary --json``
prints under ``artefacts``, and ``from_dict`` reads it back from a saved summary.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

#: Artefact kinds, as ``summary`` names them.
KINDS = ("check_env", "nvidia-smi", "topology", "pip", "slurm", "kubernetes", "docker", "ray", "kernel",
         "crash_dump", "crash_snapshot", "incident")


@dataclass(frozen=True)
class Cited:
    """One value and where it was read: ``file:line`` (line 0: the file as a whole, JSON or a pickle)."""

    value: str
    file: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Cited:
        return cls(str(d["value"]), str(d["file"]), int(d["line"]))


@dataclass(frozen=True)
class Environment:
    """One run's environment from ``check_env``, ``nvidia-smi``, ``pip freeze`` (and the
    like): each key a fact with its line. Keys are the comparable names of
    :data:`artefacts.environment.KEYS` (``sglang``, ``torch``, ``cuda``, ``driver``,
    ``gpu``, ``gpu_count``, ``topology``, ...)."""

    facts: dict[str, Cited] = field(default_factory=dict)
    #: the files it was read from and the form each had (``check_env``, ``pip``, ...)
    sources: dict[str, str] = field(default_factory=dict)

    def value(self, key: str) -> str | None:
        c = self.facts.get(key)
        return c.value if c else None

    def to_dict(self) -> dict[str, Any]:
        return {"facts": {k: asdict(v) for k, v in self.facts.items()}, "sources": dict(self.sources)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Environment:
        return cls({k: Cited.from_dict(v) for k, v in (d.get("facts") or {}).items()}, dict(d.get("sources") or {}))


@dataclass(frozen=True)
class Termination:
    """What an orchestrator or the kernel recorded of the server's end: ``source``
    (slurm, kubernetes, docker, ray, kernel), ``cause`` (one of :data:`CAUSES`), the exit
    code when given, and the record's own line(s)."""

    source: str
    cause: str
    file: str
    line: int
    text: str
    exit_code: int | None = None
    #: what else the record says: a host, a pod and container, a restart count, a time
    detail: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    def code_words(self, shown: str) -> str:
        """``", exit code 137"`` to follow ``shown`` (what is shown of the record), or nothing
        when there is no code or ``shown`` already states it (``ExitCode: 137``,
        ``exitCode=137``, ``Exited with exit code 1``): the code is said once."""
        if self.exit_code is None:
            return ""
        said = (int(m.group(1)) for m in _SAYS_CODE.finditer(shown))
        return "" if self.exit_code in said else f", exit code {self.exit_code}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Termination:
        return cls(**{k: d[k] for k in ("source", "cause", "file", "line", "text")},
                   exit_code=d.get("exit_code"), detail=dict(d.get("detail") or {}))


#: an exit code as the records state it: ``ExitCode: 137``, ``exitCode: 137``, ``"exitCode":"137"``,
#: ``exitCode=137``, ``Exit Code: 137``, ``exit code 1``, ``exit_code=1``
_SAYS_CODE = re.compile(r"\bexit[ _]?code\W{0,4}(-?\d+)", re.IGNORECASE)


#: Why an orchestrator ended a process, most telling first.
CAUSES = {
    "oom_killed": "killed by the out-of-memory killer",
    "evicted": "evicted from its node",
    "time_limit": "cancelled at the job's time limit",
    "liveness_probe": "restarted after failing its liveness probe",
    "cancelled": "cancelled",
    "node_failure": "lost with its node",
    "sigkill": "killed by SIGKILL (no OOM kill recorded)",
    "sigsegv": "ended by SIGSEGV (a segmentation fault)",
    "sigabrt": "ended by SIGABRT (aborted)",
    "sigquit": "ended by SIGQUIT (Ctrl-\\ at a terminal, or what SGLang's children send their launcher when they fail)",
    "sigbus": "ended by SIGBUS (a bus error)",
    "sigill": "ended by SIGILL (an illegal instruction)",
    "sigfpe": "ended by SIGFPE (an arithmetic error)",
    "exited": "exited with a non-zero code",
}


@dataclass(frozen=True)
class Dump:
    """A crash dump, crash snapshot or saved incident bundle, summarised: ``kind`` (one of
    ``crash_dump``, ``crash_snapshot``, ``incident``), its figures (request count, time
    span, unfinished requests, counters) and what could not be read (``unread``)."""

    kind: str
    file: str
    figures: dict[str, Any] = field(default_factory=dict)
    launch_command: str | None = None
    server_args: dict[str, Any] = field(default_factory=dict)
    #: the command that replays the dump's requests (crash dumps only)
    replay: str | None = None
    unread: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Dump:
        return cls(d["kind"], d["file"], dict(d.get("figures") or {}), d.get("launch_command"),
                   dict(d.get("server_args") or {}), d.get("replay"), list(d.get("unread") or []))


#: A dump's figures that are seconds since the epoch as the writer's host counted them
#: (``time.time()``: UTC): a crash dump's request times. Kept as numbers in the JSON, written
#: for people as a stamp with its clock (``2025-06-01 10:00:00 UTC``).
EPOCH_FIGURES = frozenset({"first_start", "last_end"})

#: Records of a dump whose figures are SGLang's "GB" (GiB) with no unit in their keys, and the
#: keys in them that are not: ``/server_info``'s ``memory_usage`` (``weight``, ``kvcache``,
#: ``cuda_graph`` or ``graph``, each ``round(bytes / 2**30, 2)``; ``token_capacity`` a count).
GIB_RECORDS: dict[str, frozenset[str]] = {"memory_usage": frozenset({"token_capacity"})}


@dataclass(frozen=True)
class Artefacts:
    """Everything beside a run's logs that was read: its environment, what ended it, its
    dumps, and files that were given but are of no form this version reads (``unknown``:
    file -> why)."""

    environment: Environment | None = None
    terminations: tuple[Termination, ...] = ()
    dumps: tuple[Dump, ...] = ()
    unknown: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.environment or self.terminations or self.dumps or self.unknown)

    def to_dict(self) -> dict[str, Any]:
        return {"environment": self.environment.to_dict() if self.environment else None,
                "terminations": [t.to_dict() for t in self.terminations],
                "dumps": [d.to_dict() for d in self.dumps],
                "unknown": dict(self.unknown)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Artefacts:
        env = d.get("environment")
        return cls(Environment.from_dict(env) if env else None,
                   tuple(Termination.from_dict(t) for t in d.get("terminations") or ()),
                   tuple(Dump.from_dict(x) for x in d.get("dumps") or ()),
                   dict(d.get("unknown") or {}))
