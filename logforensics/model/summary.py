"""The run summary: the stage boundary that ``summary``, ``diff``, ``watch`` and ``check`` read.

A :class:`RunSummary` is a frozen snapshot: building it copies what it needs from the
run model, so observing more records never changes a summary already taken. Per-rank
facts live in one :class:`RankRecord` per rank; ``summary --json`` prints them under
the keys documented in ``docs/summary.md`` (``phase_reached``, ``phases``, ...), and
:meth:`RunSummary.from_dict` reads that JSON back, so a saved summary can be diffed
without the log. The records inside (a phase's span, a traceback's frames, its OOM
figures, the stop, ...) are typed too (:mod:`.records`); ``to_dict`` is their JSON.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..artefacts.types import Artefacts
from .records import (
    NO_MEMORY,
    NOT_SEEN,
    Bar,
    Behind,
    ChainLink,
    Cite,
    Clock,
    ClockMove,
    Collective,
    Coverage,
    DebugInfo,
    Fingerprint,
    Frame,
    Initiator,
    Keyed,
    LastSeen,
    LoggedError,
    LogLine,
    Memory,
    MemoryPools,
    NodeEntry,
    Notice,
    Occurrence,
    OomFigures,
    PhaseSpan,
    PyspyDump,
    Quiet,
    RankProgress,
    Ready,
    Setting,
    Stacks,
    Stop,
    StuckOn,
    SummaryFormatError,
    ThroughputFigures,
    reader_of,
    to_json,
)
from .serving_records import Serving

__all__ = ["JSON_KEYS", "OUTCOMES", "Crash", "DistinctException", "Hang", "RankRecord", "RunSummary", "SummaryFormatError"]

#: The JSON keys of a summary, in the order ``summary --json`` prints them.
JSON_KEYS = ("file", "outcome", "outcome_reason", "ranks", "phase_reached", "phases", "last_seen", "progress",
             "crash", "exceptions", "errors", "hang", "ready", "stopped", "memory", "throughput", "server_args", "server_args_form",
             "launch_command", "launch_args", "env", "versions", "notices", "coverage", "warnings", "clock",
             "serving", "pools", "artefacts", "nodes", "rank_nodes", "missing_ranks")
_PER_RANK = ("phase_reached", "phases", "last_seen", "progress", "memory")
#: Keys a summary saved by an earlier version may lack.
_OPTIONAL = ("errors", "serving", "stopped", "artefacts", "clock", "pools")
OUTCOMES = ("crashed", "hung", "ready", "incomplete")
#: Keys whose values hold records (written by ``to_json``).
_TYPED = ("serving", "pools", "clock", "phases", "last_seen", "progress", "memory", "throughput", "errors", "ready", "stopped", "notices", "coverage", "nodes")
#: Fields read from the JSON by their type (``records.reader_of``).
_READ = ("serving", "pools", "clock", "throughput", "errors", "ready", "stopped", "notices", "coverage", "nodes")
_PHASES = reader_of(dict[str, PhaseSpan])
_BARS = reader_of(dict[str, Bar])


#: The exception of a native failure record (a C++ abort or exception, a CUDA, HIP or CANN
#: error, a collective failure torch's watchdog detected): none; its message says which.
NATIVE_NO_EXCEPTION = "none (a native failure, no Python exception)"


@dataclass(frozen=True)
class Crash(Keyed):
    """What stopped the run (``model.outcome``): the first fatal record after the server
    was last ready, each field from the first fatal record that shows it; or, with no
    traceback in the log, the parent's notice that a child died (``evidence``)."""

    line: int
    file: str | None
    text: str
    first_rank: str | None = None
    ranks: list[str] = field(default_factory=list)
    phase: str | None = None
    exception: str | None = None
    message: str | None = None
    frames: list[Frame] = field(default_factory=list)
    #: the exceptions this one was raised while handling, outermost last
    chain: list[ChainLink] = field(default_factory=list)
    #: an out-of-memory message's figures (``read.oom``)
    oom: OomFigures | None = None
    #: the line that names the exception, when it is not the first
    exception_line: LogLine | None = None
    source: str | None = None
    native: bool = False
    rank_inferred_from: str | None = None
    #: where the first fatal line names no rank: the line of the record that names ``first_rank``
    rank_named_at: int | None = None
    end_line: int | None = None
    ts: str | None = None
    #: fatal records (one per rank that printed one)
    count: int = 0
    #: the lines of the launcher's "Received sigquit from a child process" (not its other notices)
    sigquit_lines: list[int] = field(default_factory=list)
    #: the parent's notices, when they are all the log shows of the crash
    evidence: list[Notice] = field(default_factory=list)
    #: the crash's identity across runs and versions (``model.fingerprint``)
    fingerprint: Fingerprint | None = None
    #: a native failure's own words when it came before the first exception (``exception``
    #: and ``message`` are then a later record's: Python's abort after a runtime's error)
    first_message: str | None = None
    #: a run of several nodes: the node that failed first, every node that failed, and a
    #: note when the nodes' clocks cannot tell which was first
    node: str | None = None
    nodes: list[str] = field(default_factory=list)
    order_uncertain: str | None = None
    #: a run of several nodes: the failures whose stamps were put on the others' clock, each
    #: with the offset its file derived, that offset's anchor and residual (``model.nodes``)
    clock: list[ClockMove] | None = None
    #: how long the first failing rank printed no stamped record before its failure
    quiet_before: Quiet | None = None
    #: the exit code the launcher gives for the process that died ("Rank 0 scheduler died
    #: during initialization (exit code: -7)")
    exit_code: int | None = None


@dataclass(frozen=True)
class Hang(Keyed):
    """Evidence that the run hung: watchdog and store timeouts (``evidence``, ``ranks``),
    and the timer, collectives and py-spy dumps of ``model.hang``."""

    evidence: list[Cite] = field(default_factory=list)
    first_line: int | None = None
    ranks: list[str] = field(default_factory=list)
    #: ranks that fell behind the others (the ones the others wait on)
    silent_ranks: list[str] = field(default_factory=list)
    timer: str | None = None
    timed_out: bool = False
    ends_run: bool = False
    timeout_s: float | None = None
    setting: str | None = None
    default_s: float | None = None
    what: str | None = None
    note: str | None = None
    source: str | None = None
    families: list[str] = field(default_factory=list)
    collectives: list[Collective] = field(default_factory=list)
    behind: Behind | None = None
    pyspy: list[PyspyDump] = field(default_factory=list)
    exit_code: int | None = None
    first_ts: str | None = None
    dropped: int = 0
    #: the rank that differs (the cause, not the victims), why, and the lines it rests on
    initiator: Initiator | None = None
    #: the collective, batch or requests the ranks are stuck on, as the log names them
    stuck_on: list[StuckOn] = field(default_factory=list)
    #: per rank: last sequence numbers, last phase, the lines
    progress: list[RankProgress] = field(default_factory=list)
    #: per rank, the last ``Scheduler debug info:`` block: batch, requests, pools, the lines
    debug_info: list[DebugInfo] = field(default_factory=list)
    #: the stack dumps, why they are missing (the log's words or "not in this log"), what to enable
    stacks: Stacks | None = None
    node: str | None = None
    nodes: list[str] = field(default_factory=list)
    #: a run of several nodes: why the order of the hangs across nodes is uncertain (their
    #: clocks cannot be related), and the stamps put on the others' clock (as a crash's)
    order_uncertain: str | None = None
    clock: list[ClockMove] | None = None
    #: the phase the hang came in where a record says so itself (the warm-up request's start
    #: before a start-up that stopped making progress), else null: the ranks' phases tell it
    phase: str | None = None


@dataclass(frozen=True)
class DistinctException(Keyed):
    """One distinct traceback of the run and the ranks that printed it (``occurrences``:
    rank, line, end_line, ts, oom of each)."""

    exception: str | None
    message: str | None
    text: str
    first_line: int
    phase: str | None = None
    frames: list[Frame] = field(default_factory=list)
    chain: list[ChainLink] = field(default_factory=list)
    oom: OomFigures | None = None
    end_line: int | None = None
    file: str | None = None
    ranks: list[str | None] = field(default_factory=list)
    occurrences: list[Occurrence] = field(default_factory=list)
    node: str | None = None
    #: the process its header names (``Scheduler``, ``DetokenizerManager``), or None
    source: str | None = None


@dataclass(frozen=True)
class RankRecord:
    """One rank of the run: the phase it reached, each phase's first and last lines,
    what it printed last, the progress bars it drew and its memory figures."""

    label: str
    phase_reached: str | None = None
    #: phase -> its first and last lines and stamps
    phases: dict[str, PhaseSpan] = field(default_factory=dict)
    #: what the rank printed last
    last_seen: LastSeen = NOT_SEEN
    #: phase -> the last bar (only the rank that draws them has bars)
    progress: dict[str, Bar] = field(default_factory=dict)
    #: figures (GiB, s, tokens) and their ``evidence``; empty when the rank printed none
    memory: Memory = NO_MEMORY


@dataclass(frozen=True)
class RunSummary:
    """One run, as ``summary --json`` prints it. See ``docs/summary.md`` for every key."""

    file: str | None
    outcome: str
    outcome_reason: str
    ranks: list[str]
    per_rank: dict[str, RankRecord]
    crash: Crash | None
    exceptions: list[DistinctException]
    #: errors ranks logged and went on after: an OOM message outside a traceback, a
    #: traceback after which its rank printed more of its course, or under the lead of code
    #: that logs it and goes on
    errors: list[LoggedError]
    hang: Hang | None
    ready: Ready | None
    throughput: ThroughputFigures
    server_args: dict[str, Setting]
    server_args_form: str | None
    launch_command: str | None
    launch_args: dict[str, Setting]
    env: dict[str, str]
    #: what the log says of the software: ``nccl``, ``cuda`` (NCCL's build), the model's
    #: ``model_type``, ``dtype``, ``quant`` (the weight load's line), ``sglang`` (a container's banner)
    versions: dict[str, str]
    #: kind -> the first records of the kind ({file, line, rank, text}; a run of several
    #: nodes adds ``node``)
    notices: dict[str, list[Notice]]
    coverage: Coverage
    warnings: list[str]
    #: A run of several files (``model.nodes``): each node's file, role and outcome; the
    #: node of each rank; ranks the parallel sizes call for that no file shows.
    nodes: dict[str, NodeEntry] = field(default_factory=dict)
    rank_nodes: dict[str, str] = field(default_factory=dict)
    missing_ranks: list[str] = field(default_factory=list)
    #: The serving phase as a time series (``model/serving.py``, its records in
    #: ``model/serving_records.py``); None when nothing timed was served.
    serving: Serving | None = None
    #: The server's stop (SIGTERM, Ctrl-C) with no failure before it, after it was ready
    #: (``outcome`` ready) or while it started (``incomplete``): its first record {file, line,
    #: rank, text} and ``evidence``, the stop's records; None when it did not stop so.
    stopped: Stop | None = None
    #: Two clocks in one log (``model/dynamo.py``): NVIDIA Dynamo's UTC stamps beside SGLang's
    #: local ones, and the offset between them where records show one moment on both; None
    #: when no stamp of Dynamo's is in the log.
    clock: Clock | None = None
    #: The memory pools of a hybrid model one by one (``model/pools.py``): each pool's size,
    #: peak and last use, evictable part, the pool that bound each retraction, and the order
    #: of KV allocation and CUDA-graph capture; None when the log shows neither.
    pools: MemoryPools | None = None
    #: What the files beside the logs say (``artefacts``): the environment, the orchestrator's
    #: records of the end, dumps; None when no such file was given or found.
    artefacts: Artefacts | None = None

    # -- the per-rank views of the JSON form -----------------------------------------
    @property
    def phase_reached(self) -> dict[str, str]:
        return {k: r.phase_reached for k, r in self.per_rank.items() if r.phase_reached}

    @property
    def phases(self) -> dict[str, dict[str, PhaseSpan]]:
        return {k: r.phases for k, r in self.per_rank.items()}

    @property
    def last_seen(self) -> dict[str, LastSeen]:
        return {k: r.last_seen for k, r in self.per_rank.items()}

    @property
    def progress(self) -> dict[str, dict[str, Bar]]:
        return {k: r.progress for k, r in self.per_rank.items() if r.progress}

    @property
    def memory(self) -> dict[str, Memory]:
        return {k: r.memory for k, r in self.per_rank.items() if r.memory}

    def to_dict(self, full: bool = False) -> dict[str, Any]:
        """The JSON form (``summary --json``); ``full``: every record with every field's key,
        as the rules read it (``Keyed.to_dict``)."""
        out = {key: getattr(self, key) for key in JSON_KEYS}
        for key in _TYPED:
            out[key] = to_json(out[key], full)
        out["crash"] = self.crash.to_dict(full) if self.crash else None
        out["hang"] = self.hang.to_dict(full) if self.hang else None
        out["exceptions"] = [e.to_dict(full) for e in self.exceptions]
        out["artefacts"] = self.artefacts.to_dict() if self.artefacts else None  # every key always
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSummary:
        """A summary from its JSON form, as ``to_dict`` (``summary --json``) wrote it."""
        if not isinstance(data, Mapping):
            raise SummaryFormatError("not a run summary: the JSON is not an object")
        missing = [k for k in JSON_KEYS[:-3] if k not in data and k not in _OPTIONAL]
        if missing:
            raise SummaryFormatError("not a run summary (`summary --json`): missing " + ", ".join(missing[:5]))
        if data["outcome"] not in OUTCOMES:
            raise SummaryFormatError(f"not a run summary: unknown outcome {data['outcome']!r}")
        views = {key: data[key] or {} for key in _PER_RANK}
        try:
            per_rank = {
                label: RankRecord(label=label, phase_reached=views["phase_reached"].get(label),
                                  phases=_PHASES(views["phases"].get(label) or {}),
                                  last_seen=LastSeen.from_dict(views["last_seen"].get(label) or {}),
                                  progress=_BARS(views["progress"].get(label) or {}),
                                  memory=Memory.from_dict(views["memory"].get(label) or {}))
                for label in data["ranks"]
            }
        except AttributeError as e:
            raise SummaryFormatError(f"not a run summary: its per-rank keys do not read back ({e})") from None
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values.setdefault("errors", [])
        hints = typing.get_type_hints(cls)
        for key in _READ:
            if values.get(key) is not None:
                values[key] = reader_of(hints[key])(values[key])
        values["crash"] = Crash.from_dict(data["crash"]) if data["crash"] else None
        values["hang"] = Hang.from_dict(data["hang"]) if data["hang"] else None
        values["exceptions"] = [DistinctException.from_dict(e) for e in data["exceptions"] or []]
        try:
            values["artefacts"] = Artefacts.from_dict(data["artefacts"]) if data.get("artefacts") else None
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise SummaryFormatError(f"not a run summary: its artefacts do not read back ({e})") from None
        return cls(per_rank=per_rank, **values)
