"""The run summary: the stage boundary that ``summary``, ``diff``, ``watch`` and ``check`` read.

A :class:`RunSummary` is a frozen snapshot: building it copies what it needs from the
run model, so observing more records never changes a summary already taken. Per-rank
facts live in one :class:`RankRecord` per rank; ``summary --json`` prints them under
the keys documented in ``docs/summary.md`` (``phase_reached``, ``phases``, ...), and
:meth:`RunSummary.from_dict` reads that JSON back, so a saved summary can be diffed
without the log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

#: The JSON keys of a summary, in the order ``summary --json`` prints them.
JSON_KEYS = ("file", "outcome", "outcome_reason", "ranks", "phase_reached", "phases", "last_seen", "progress",
             "crash", "exceptions", "errors", "hang", "ready", "memory", "throughput", "server_args", "server_args_form",
             "launch_command", "launch_args", "env", "versions", "notices", "coverage", "warnings",
             "serving", "nodes", "rank_nodes", "missing_ranks")
_PER_RANK = ("phase_reached", "phases", "last_seen", "progress", "memory")
#: Keys a summary saved by an earlier version may lack.
_OPTIONAL = ("errors", "serving")
OUTCOMES = ("crashed", "hung", "ready", "incomplete")


class SummaryFormatError(ValueError):
    """A JSON document that is not a run summary (``summary --json``)."""


@dataclass(frozen=True)
class RankRecord:
    """One rank of the run: the phase it reached, each phase's first and last lines,
    what it printed last, the progress bars it drew and its memory figures."""

    label: str
    phase_reached: str | None = None
    #: phase -> {first_line, first_ts, last_line, last_ts}
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: {line, ts, text, milestone}
    last_seen: dict[str, Any] = field(default_factory=dict)
    #: phase -> the last bar {n, total, desc, line, bs, num_tokens, avail_gib}
    progress: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: figures (GiB, s, tokens) and their ``evidence``; empty when the rank printed none
    memory: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunSummary:
    """One run, as ``summary --json`` prints it. See ``docs/summary.md`` for every key."""

    file: str | None
    outcome: str
    outcome_reason: str
    ranks: list[str]
    per_rank: dict[str, RankRecord]
    crash: dict[str, Any] | None
    exceptions: list[dict[str, Any]]
    #: errors ranks logged and went on after: an OOM message outside a traceback, a
    #: traceback after which its rank printed more of its course
    errors: list[dict[str, Any]]
    hang: dict[str, Any] | None
    ready: dict[str, Any] | None
    throughput: dict[str, Any]
    server_args: dict[str, Any]
    server_args_form: str | None
    launch_command: str | None
    launch_args: dict[str, Any]
    env: dict[str, str]
    versions: dict[str, Any]
    notices: dict[str, list[dict[str, Any]]]
    coverage: dict[str, Any]
    warnings: list[str]
    #: A run of several files (``model.nodes``): each node's file, role and outcome; the
    #: node of each rank; ranks the parallel sizes call for that no file shows.
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    rank_nodes: dict[str, str] = field(default_factory=dict)
    missing_ranks: list[str] = field(default_factory=list)
    #: The serving phase as a time series (``model/serving.py``); None when nothing timed was served.
    serving: dict[str, Any] | None = None

    # -- the per-rank views of the JSON form -----------------------------------------
    @property
    def phase_reached(self) -> dict[str, str]:
        return {k: r.phase_reached for k, r in self.per_rank.items() if r.phase_reached}

    @property
    def phases(self) -> dict[str, dict[str, dict[str, Any]]]:
        return {k: r.phases for k, r in self.per_rank.items()}

    @property
    def last_seen(self) -> dict[str, dict[str, Any]]:
        return {k: r.last_seen for k, r in self.per_rank.items()}

    @property
    def progress(self) -> dict[str, dict[str, Any]]:
        return {k: r.progress for k, r in self.per_rank.items() if r.progress}

    @property
    def memory(self) -> dict[str, dict[str, Any]]:
        return {k: r.memory for k, r in self.per_rank.items() if r.memory}

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``summary --json``)."""
        return {key: getattr(self, key) for key in JSON_KEYS}

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
        per_rank = {
            label: RankRecord(label=label, phase_reached=views["phase_reached"].get(label),
                              phases=views["phases"].get(label) or {}, last_seen=views["last_seen"].get(label) or {},
                              progress=views["progress"].get(label) or {}, memory=views["memory"].get(label) or {})
            for label in data["ranks"]
        }
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values.setdefault("errors", [])
        return cls(per_rank=per_rank, **values)
