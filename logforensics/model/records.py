"""The typed records of a run summary, down to the leaves, and how they read and write JSON.

Every record of :mod:`.summary` is a frozen dataclass that reads and writes its JSON
object key for key (:class:`Keyed`): ``summary --json`` of a summary read back with
``from_dict`` is the one that was saved, keys, key order and keys this version does not
know included. A record's fields that hold records (``frames: list[Frame]``) are read
by their type hints, so a record nests records without code of its own.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any, ClassVar

_Reader = Callable[[Any], Any]

#: A setting's value as the log prints it (``server_args``' Python literal, a launch flag's
#: word): a literal's lists and mappings hold the same.
Setting = str | int | float | bool | None | list[Any] | dict[str, Any]


class SummaryFormatError(ValueError):
    """A JSON document that is not a run summary (``summary --json``)."""


@dataclass(frozen=True)
class Keyed:
    """A record that reads and writes its JSON object key for key.

    Why the keys are kept: the forms differ in which keys they have (a crash seen only
    as the parent's notice has no ``chain``; a run of several nodes adds ``node``), and
    ``summary --json`` of a record read back must be the one that was saved. Keys this
    version does not know are kept in ``extra``. A record the model builds field by field
    (``keys`` None) writes every field, in the order they are declared. A JSON key that is
    no Python name (``as``) is held by the field ``renamed`` names. A record is a frozen
    dataclass that derives from this one: ``keys`` and ``extra`` are keyword-only fields of
    every record, after its own.
    """

    keys: tuple[str, ...] | None = field(default=None, repr=False, compare=False, kw_only=True)
    extra: dict[str, Any] = field(default_factory=dict, repr=False, kw_only=True)
    #: JSON key -> the field that holds it, where the key is no Python name
    renamed: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.name not in ("keys", "extra"))

    @classmethod
    def _json_names(cls) -> tuple[str, ...]:
        """The JSON keys of the fields, in the order they are declared."""
        back = {v: k for k, v in cls.renamed.items()}
        return tuple(back.get(n, n) for n in cls._names())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:
        """The record of a JSON object (``to_dict``'s form)."""
        if not isinstance(data, Mapping):
            raise SummaryFormatError(f"not a run summary: a {cls.__name__.lower()} is not an object")
        readers, ren = _readers(cls), cls.renamed
        values = {ren.get(k, k): (readers[ren.get(k, k)](v) if v is not None else v)
                  for k, v in data.items() if ren.get(k, k) in readers}
        try:
            return cls(**values, keys=tuple(data),
                       extra={k: v for k, v in data.items() if ren.get(k, k) not in readers})
        except TypeError as e:
            raise SummaryFormatError(f"not a run summary: a {cls.__name__.lower()} lacks a key ({e})") from None

    def to_dict(self, full: bool = False) -> dict[str, Any]:
        """The JSON object, with the keys it was made with, in their order; ``full``: with every
        field's key too (None where it was not made with it), as the rules read a record, so
        that a record made without a key reads as one whose value is unknown."""
        names, ren = _readers(type(self)), self.renamed
        keys = self._json_names() if self.keys is None else self.keys
        if full and self.keys is not None:
            keys = keys + tuple(k for k in self._json_names() if k not in keys)
        return {k: to_json(getattr(self, ren.get(k, k)), full) if ren.get(k, k) in names else self.extra[k]
                for k in keys}

    def put(self, **changes: Any) -> Any:
        """This record with ``changes``, as ``dict(d, **changes)`` would give its JSON: a
        key it has keeps its place, a new one comes last."""
        keys = self._json_names() if self.keys is None else self.keys
        names = _readers(type(self))
        extra = {**self.extra, **{k: v for k, v in changes.items() if k not in names}}  # keys of no field
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if k in names},
                                   keys=keys + tuple(k for k in changes if k not in keys), extra=extra)


def to_json(value: Any, full: bool = False) -> Any:
    """The JSON form of a value that may hold records (lists and mappings of them); ``full``:
    records with every field's key (``Keyed.to_dict``)."""
    if isinstance(value, Keyed):
        return value.to_dict(full)
    if isinstance(value, list):
        return [to_json(v, full) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v, full) for k, v in value.items()}
    return value


_READERS: dict[type, dict[str, _Reader]] = {}


def _readers(cls: type[Keyed]) -> dict[str, _Reader]:
    """field -> how its JSON value is read (identity for plain values), from the type hints."""
    out = _READERS.get(cls)
    if out is None:
        hints = typing.get_type_hints(cls)
        out = _READERS[cls] = {name: reader_of(hints[name]) for name in cls._names()}
    return out


def _same(value: Any) -> Any:
    return value


def reader_of(hint: Any) -> _Reader:
    """How a JSON value of type ``hint`` becomes the field's value: records by ``from_dict``,
    lists and mappings of records item by item; anything else as it is."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [reader_of(a) for a in args if a is not type(None)]
        return inner[0] if len(inner) == 1 else _same
    if isinstance(hint, type) and issubclass(hint, Keyed):
        return hint.from_dict
    if origin is list and args:
        item = reader_of(args[0])
        if item is not _same:
            def read_list(value: Any) -> list[Any]:
                if not isinstance(value, list):
                    raise SummaryFormatError(f"not a run summary: {value!r:.40} is not a list")
                return [item(v) for v in value]
            return read_list
    if origin is dict and len(args) == 2:
        item = reader_of(args[1])
        if item is not _same:
            def read_dict(value: Any) -> dict[str, Any]:
                if not isinstance(value, Mapping):
                    raise SummaryFormatError(f"not a run summary: {value!r:.40} is not an object")
                return {k: item(v) for k, v in value.items()}
            return read_dict
    return _same


def record_fields(cls: type) -> dict[str, Any]:
    """field -> type hint of a record, without its bookkeeping (``keys``, ``extra``)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls) if f.name not in ("keys", "extra")}


# -- one rank's course ------------------------------------------------------------------
@dataclass(frozen=True)
class PhaseSpan(Keyed):
    """The first and last records that placed a rank in a phase."""

    first_line: int
    first_ts: str | None
    last_line: int
    last_ts: str | None


@dataclass(frozen=True)
class LastSeen(Keyed):
    """What a rank printed last: its line, the last stamp it printed, the text (cut at 500
    characters), the furthest start-up milestone it reached; in a run of several nodes, its
    node and file. A rank no file shows has none of them."""

    line: int | None = None
    ts: str | None = None
    text: str | None = None
    milestone: str | None = None
    node: str | None = None
    file: str | None = None

    @classmethod
    def of_rank(cls, line: int, ts: str | None, text: str, milestone: str | None) -> LastSeen:
        """What the run model says of a rank (no node, no file: a run of several nodes adds them)."""
        return cls(line, ts, text, milestone, keys=("line", "ts", "text", "milestone"))


#: The last seen of a rank no record shows (``{}``).
NOT_SEEN = LastSeen(keys=())


@dataclass(frozen=True)
class Bar(Keyed):
    """The last tqdm bar of a phase: ``n`` of ``total``, its description, line, and what its
    description shows (the batch size and tokens of a graph capture, the GiB left)."""

    n: int
    total: int
    desc: str
    line: int
    bs: int | None = None
    num_tokens: int | None = None
    avail_gib: float | None = None


@dataclass(frozen=True)
class KvPool(Keyed):
    """One ``KV Cache is allocated`` record of a rank: the target model's pool first, a
    draft model's or a hybrid model's labelled pools after it (GiB as SGLang's "GB"), and
    the free memory of the rank's ``Memory pool end`` line that followed it, where one did."""

    tokens: int | None = None
    k_gib: float | None = None
    v_gib: float | None = None
    kv_gib: float | None = None
    dtype: str | None = None
    label: str | None = None
    line: int | None = None
    pool_end_avail_gib: float | None = None


@dataclass(frozen=True)
class Memory(Keyed):
    """A rank's start-up figures, each None where the rank printed none: free memory before
    and after each step and what the step took (GiB: SGLang's "GB" is GiB), the steps'
    seconds, the KV pools, the graphs' batch sizes, the limits of the ``max_total_num_tokens``
    line, and ``evidence``: the record behind each step's figures, by the step's kind."""

    init_mem_usage_gib: float | None = None
    init_elapsed_s: float | None = None
    load_begin_avail_gib: float | None = None
    load_end_avail_gib: float | None = None
    weights_gib: float | None = None
    load_elapsed_s: float | None = None
    kv_pools: list[KvPool] | None = None
    kv_tokens: int | None = None
    k_gib: float | None = None
    v_gib: float | None = None
    kv_gib: float | None = None
    pool_end_avail_gib: float | None = None
    capture_begin_avail_gib: float | None = None
    capture_bs: list[int] | None = None
    capture_end_avail_gib: float | None = None
    capture_mem_gib: float | None = None
    capture_elapsed_s: float | None = None
    #: a speculative draft model's first graph capture, apart: never the rank's own graphs
    draft_capture_begin_avail_gib: float | None = None
    draft_capture_end_avail_gib: float | None = None
    draft_capture_mem_gib: float | None = None
    #: a speculative draft model's weights, loaded after the target's graphs: never the rank's own
    draft_weights_gib: float | None = None
    draft_load_end_avail_gib: float | None = None
    draft_load_elapsed_s: float | None = None
    max_total_num_tokens: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int | None = None
    max_running_requests: int | None = None
    context_len: int | None = None
    available_gpu_mem_gib: float | None = None
    profiled_max_tokens: int | None = None
    evidence: dict[str, Notice] = field(default_factory=dict)

    def __bool__(self) -> bool:
        """Whether the rank printed any figure (a rank that printed none has an empty object)."""
        return bool(self.keys) if self.keys is not None else True

    def figure(self, name: str) -> Any:
        """The figure called ``name`` (a key of the JSON form), or None."""
        return getattr(self, name) if name in _readers(Memory) and name != "evidence" else self.extra.get(name)

    def figures(self) -> list[str]:
        """The names of the figures the rank printed, in the order it printed them."""
        keys = self._json_names() if self.keys is None else self.keys
        return [k for k in keys if k != "evidence" and self.figure(k) is not None]


#: The figures of a rank that printed none (``{}``).
NO_MEMORY = Memory(keys=())


# -- serving figures (model/throughput.py) ------------------------------------------------
@dataclass(frozen=True)
class Quantiles(Keyed):
    """A figure over a run's records (``stats.Sketch``): how many records printed it and its
    mean, least, 10th percentile, median, 90th percentile and greatest value (three
    decimals); only ``count`` (0) where no record printed it."""

    count: int
    mean: float | None = None
    min: float | None = None
    p10: float | None = None
    median: float | None = None
    p90: float | None = None
    max: float | None = None


#: A figure no record printed (``{"count": 0}``).
NO_QUANTILES = Quantiles(0, keys=("count",))


@dataclass(frozen=True)
class BenchResult(Keyed):
    """One result block of ``sglang.bench_serving`` in the log: its successful requests and
    generated tokens (None where the block is cut before the line), and its lines."""

    successful_requests: int | None
    generated_tokens: int | None
    evidence: list[Notice]


@dataclass(frozen=True)
class ThroughputFigures(Keyed):
    """A run's serving figures: decode token/s over every rank and per rank, the decode
    series ([stamp or line, token/s] points, at most ``stats.Series``' limit), prefill input
    token/s, speculative accept length, running requests, and the benchmark result blocks."""

    decode_gen_tok_s: Quantiles = NO_QUANTILES
    decode_by_rank: dict[str, Quantiles] = field(default_factory=dict)
    decode_series: list[list[Any]] = field(default_factory=list)
    prefill_input_tok_s: Quantiles = NO_QUANTILES
    accept_len: Quantiles = NO_QUANTILES
    running_req: Quantiles = NO_QUANTILES
    benchmarks: list[BenchResult] = field(default_factory=list)


# -- a traceback ------------------------------------------------------------------------
@dataclass(frozen=True)
class Frame(Keyed):
    """One frame of a traceback: the file and line Python names, the function, the code
    line printed under it (None when the log shows none), and the log line of the frame."""

    path: str | None
    line: int | None
    func: str | None
    code: str | None = None
    log_line: int | None = None


@dataclass(frozen=True)
class ChainLink(Keyed):
    """An exception the next one was raised while handling ("During handling of the above
    exception"): its name, its message, and how many of the traceback's frames are its own
    (the first ``frames`` of the record's frames)."""

    exception: str | None
    message: str | None
    frames: int


@dataclass(frozen=True)
class OtherProcess(Keyed):
    """Another process on the GPU, as an out-of-memory message names it."""

    pid: int
    in_use_gib: float


@dataclass(frozen=True)
class OomFigures(Keyed):
    """The figures of PyTorch's out-of-memory message (``read.oom``), in GiB; each None when
    the message does not show it. ``in_use_gib`` is the process's use when the message gives
    no other."""

    device: str
    tried_gib: float | None = None
    gpu: int | None = None
    total_gib: float | None = None
    free_gib: float | None = None
    process_in_use_gib: float | None = None
    allocated_gib: float | None = None
    private_pools_gib: float | None = None
    reserved_unallocated_gib: float | None = None
    reserved_total_gib: float | None = None
    other_processes: list[OtherProcess] = field(default_factory=list)
    in_use_gib: float | None = None
    #: whether the message suggests ``expandable_segments`` (fragmentation)
    expandable_segments_hint: bool = False


@dataclass(frozen=True)
class LogLine(Keyed):
    """A line of the log and its text (the line that names a traceback's exception)."""

    line: int
    text: str


@dataclass(frozen=True)
class Occurrence(Keyed):
    """One rank's print of a distinct traceback: the rank, its first and last lines, the
    stamp, and its out-of-memory figures."""

    rank: str | None
    line: int
    end_line: int | None = None
    ts: str | None = None
    oom: OomFigures | None = None


@dataclass(frozen=True)
class Quiet(Keyed):
    """A rank's silence before its failure: the seconds since its last stamped record, and
    that record's stamp (``model.failures.QUIET_S`` or more)."""

    seconds: float
    ts: str


@dataclass(frozen=True)
class Fingerprint(Keyed):
    """A crash's identity across runs, hosts and versions (``model.fingerprint``): ``id``
    (12 hex digits of SHA-1 over the others), the exception type, the innermost SGLang
    function (``module.function``, None when no frame is SGLang's), and the phase."""

    id: str
    exception: str
    function: str | None
    phase: str


# -- the run's course: readiness, its stop, errors it went on after ------------------------
@dataclass(frozen=True)
class Ready(Keyed):
    """The record that says the server is ready (the last one); in a run of several nodes,
    the node and file of the one that speaks for the run."""

    file: str | None
    line: int
    ts: str | None
    text: str
    node: str | None = None


@dataclass(frozen=True)
class Notice(Keyed):
    """A record of the log as evidence (``RunSummary.notices``, a stop's or a crash's records): where it
    was printed, the rank that printed it (None when the line names none, or it is not the server's: an
    orchestrator's record); in a run of several nodes, its node."""

    file: str | None
    line: int
    text: str
    rank: str | None = None
    node: str | None = None
    #: the exit code a parent's notice of a dead child gives ("crashed with exit code -11")
    exit_code: int | None = None


@dataclass(frozen=True)
class Stop(Keyed):
    """The server's stop (SIGTERM, Ctrl-C) with no failure before it: its first record and
    the stop's records (``evidence``, the first eight)."""

    file: str | None
    line: int
    rank: str | None
    text: str
    evidence: list[Notice] = field(default_factory=list)
    node: str | None = None


@dataclass(frozen=True)
class LoggedError(Keyed):
    """An error a rank logged and went on after: an out-of-memory message outside a
    traceback (``kind`` ``oom_message``, ``what`` failed), a traceback after which its rank
    printed more of its course (``exception``, or ``native``), or what failed during a stop."""

    file: str | None
    line: int
    end_line: int | None
    rank: str | None
    ts: str | None
    text: str
    kind: str
    exception: str | None = None
    what: str | None = None
    message: str | None = None
    oom: OomFigures | None = None
    node: str | None = None
    #: the code that logged it and went on, when a lead names it (``transfer_worker``: a KV transfer thread)
    source: str | None = None


# -- a hang (model/hang.py) ----------------------------------------------------------------
@dataclass(frozen=True)
class Cite(Keyed):
    """A line a hang's finding rests on: its file, line, the rank that printed it, its text
    (cut at 300 characters); where only the place is cited there is no text, and a setting
    the log's environment shows is cited by the text alone. A timer's own line (the hang's
    ``evidence``) has its record's ``kind`` too."""

    file: str | None = None
    line: int | None = None
    rank: str | None = None
    text: str | None = None
    kind: str | None = None


@dataclass(frozen=True)
class Collective(Keyed):
    """What PyTorch's NCCL watchdog printed of one rank's collective (its sequence number),
    its lines merged: the process group, the operation, the last enqueued and completed
    sequence numbers, how long it ran and its timeout; each only when a line shows it."""

    rank: str | None
    pg: int | str | None
    line: int
    file: str | None = None
    op: str | None = None
    seq: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    ran_ms: float | None = None
    timeout_s: float | None = None


@dataclass(frozen=True)
class Behind(Keyed):
    """The rank with the lowest completed sequence in its process group, against the others'."""

    rank: str | None
    pg: int | str | None
    last_completed: int
    others_completed: int
    line: int
    file: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class PyspyDump(Keyed):
    """One py-spy dump: the PID, process title, rank (and where the rank was read from), its
    threads, and the main thread's state, function, location and stack (the first 12 frames)."""

    pid: int | None
    title: str | None
    rank: str | None
    line: int
    threads: int = 0
    main_function: str | None = None
    main_stack: list[str] = field(default_factory=list)
    file: str | None = None
    text: str | None = None
    main_state: str | None = None
    main_location: str | None = None
    rank_from: str | None = None


@dataclass(frozen=True)
class Initiator(Keyed):
    """The rank that differs from the others (the cause, not the victims), why, and the
    lines; with no majority, ``rank`` is None and ``candidates`` names the ranks."""

    rank: str | None
    why: str
    evidence: list[Cite] = field(default_factory=list)
    candidates: list[str] | None = None


@dataclass(frozen=True)
class StuckOn(Keyed):
    """What ranks are stuck on, as the log names it (``what``): a ``collective`` (op, seq,
    pg, ranks), a ``batch`` (its size and rids, the rank or ranks that show it, and
    ``source`` debug info when SGLang's debug blocks do), or the ``consensus events`` the
    rank-consensus checker compared (``events``, rids)."""

    what: str
    op: str | None = None
    seq: int | None = None
    pg: int | str | None = None
    batch_size: int | None = None
    rids: list[str] = field(default_factory=list)
    events: str | None = None
    rank: str | None = None
    ranks: list[str | None] = field(default_factory=list)
    source: str | None = None
    evidence: list[Cite] = field(default_factory=list)


@dataclass(frozen=True)
class WaitingOn(Keyed):
    """The collective a rank waits on: its operation, sequence number and process group."""

    op: str | None
    seq: int
    pg: int | str | None


@dataclass(frozen=True)
class RankProgress(Keyed):
    """One rank in a hang: its last enqueued and completed sequence numbers, the collective it
    waits on, its last phase and the source that names it, and the lines (the first six)."""

    rank: str
    last_enqueued: int | None = None
    last_completed: int | None = None
    waiting_on: WaitingOn | None = None
    last_phase: str | None = None
    phase_from: str | None = None
    evidence: list[Cite] = field(default_factory=list)


@dataclass(frozen=True)
class PoolCheck(Keyed):
    """One pool's check in a ``Scheduler debug info:`` block: its tokens and the line."""

    total: int | None = None
    available: int | None = None
    evictable: int | None = None
    line: int | None = None


@dataclass(frozen=True)
class DebugInfo(Keyed):
    """A rank's last ``Scheduler debug info:`` block: the header's rank, line and file, the
    batch size, the first 8 rids (``requests`` counts them all), each pool's check, and the lines."""

    rank: str | None
    line: int
    file: str | None = None
    batch_size: int | None = None
    rids: list[str] = field(default_factory=list)
    requests: int | None = None
    pools: dict[str, PoolCheck] = field(default_factory=dict)
    evidence: list[Cite] = field(default_factory=list)


@dataclass(frozen=True)
class PyspyFailure(Keyed):
    """py-spy's failure as the log quotes it: the known cause it names (``reason``, None for
    none), what that means, the error (cut at 300 characters), the PID, and the line."""

    reason: str | None
    what: str
    error: str
    pid: int | None = None
    file: str | None = None
    line: int | None = None
    rank: str | None = None
    text: str | None = None


@dataclass(frozen=True)
class NextStep(Keyed):
    """A setting that shows more of a hang: on, off, or not in this log, as the line cited shows."""

    setting: str
    status: str
    gives: str
    evidence: Cite | None = None


@dataclass(frozen=True)
class Stacks(Keyed):
    """The stack dumps of a hang: py-spy's (and those with a main thread), faulthandler's,
    why there are none (the log's words, or "not in this log"), py-spy's failures (the
    first eight), and what to turn on next time."""

    pyspy_dumps: int = 0
    pyspy_main_threads: int = 0
    faulthandler_dumps: int = 0
    missing_why: str | None = None
    pyspy_failures: list[PyspyFailure] = field(default_factory=list)
    next_time: list[NextStep] = field(default_factory=list)


# -- a run of several nodes: stamps put on one clock (model/nodes.py) ---------------------
@dataclass(frozen=True)
class ClockAnchor(Keyed):
    """The records of one moment on both clocks that derived a file's offset (``file:line``)."""

    utc: str
    local: str


@dataclass(frozen=True)
class ClockPair(Keyed):
    """The records of one moment on both clocks of a file (NVIDIA Dynamo's UTC stamp and
    SGLang's local one): their lines and stamps as printed."""

    utc_line: int
    utc: str
    local_line: int
    local: str


@dataclass(frozen=True)
class Clock(Keyed):
    """Two clocks in one log (``model/dynamo.py``): how many records carry Dynamo's UTC
    stamps and SGLang's local ones; the offset (hours, local minus UTC) the records of one
    moment derive, how many pairs agree on it, their residual (s) and the first pair; the
    offsets of pairs that disagree (then none is derived) with how many pairs give each."""

    utc_records: int
    local_records: int
    local_offset_h: float | None = None
    pairs: int = 0
    residual_s: float | None = None
    anchor: ClockPair | None = None
    disagreeing: dict[str, int] = field(default_factory=dict)

    @property
    def offset(self) -> timedelta | None:
        """Local time minus UTC as the records derived it, or None when they derived none: no
        pair of records of one moment (no UTC anchor), or pairs that disagree."""
        if self.local_offset_h is None or not self.anchor:
            return None
        return timedelta(hours=self.local_offset_h)


@dataclass(frozen=True)
class ClockMove(Keyed):
    """A stamp an order across files put on the others' clock: the node, file and line, the
    stamp as printed and ``as`` (``on``) the clock (``local`` or ``utc``) gives it, the
    offset its file derived, that offset's anchor and residual."""

    renamed: ClassVar[Mapping[str, str]] = {"as": "on"}

    node: str
    file: str | None
    line: int | None
    stamp: str | None
    on: str
    clock: str
    local_offset_h: float | None = None
    anchor: ClockAnchor | None = None
    residual_s: float | None = None


# -- how much of the log was read (model/coverage.py) -------------------------------------
@dataclass(frozen=True)
class Unrecognised(Keyed):
    """A shape of lines no grammar rule reads (``model.coverage.shape``): how many, the first
    line, its text, the rank of the first and the ranks that printed it."""

    shape: str
    count: int
    first_line: int | None = None
    example: str | None = None
    first_rank: str | None = None
    ranks: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ProbeAnswer(Keyed):
    """The first answer of a probe path with one status: where it was printed, its stamp, its text."""

    file: str | None = None
    line: int | None = None
    rank: str | None = None
    ts: str | None = None
    text: str | None = None


@dataclass(frozen=True)
class ProbePath(Keyed):
    """A health or metrics path's answers: status -> how many, status -> the first one."""

    answers: dict[str, int] = field(default_factory=dict)
    first: dict[str, ProbeAnswer] = field(default_factory=dict)


@dataclass(frozen=True)
class Coverage(Keyed):
    """How much of the log the grammar read: lines read, recognised and not, events and their
    kinds, the shapes of lines not read (the top ten, and every shape's count), lines cut or
    undecodable, bytes, lines dropped as duplicates, probe answers; a run of several files
    sums them (``files``). Each is None when the summary lacks it (one saved by an earlier version)."""

    lines_read: int | None = None
    lines_recognised: int | None = None
    lines_unrecognised: int | None = None
    recognised_pct: float | None = None
    events: int | None = None
    kinds: dict[str, int] = field(default_factory=dict)
    top_unrecognised: list[Unrecognised] = field(default_factory=list)
    unrecognised_shapes: dict[str, int] = field(default_factory=dict)
    long_lines: int | None = None
    partial_lines: int | None = None
    decode_errors: int | None = None
    unterminated_last_line: bool | None = None
    bytes: int | None = None
    lines_dropped_by_dedup: int | None = None
    probe_requests: int | None = None
    probes: dict[str, ProbePath] = field(default_factory=dict)
    files: int | None = None
    #: requests answered (``http_access``): status -> how many, status -> the first one other than 200
    requests: ProbePath | None = None
    #: the earliest and the latest stamp of the records a handler read (batch and access lines
    #: aside), as printed, whatever their order in the file (one file: a run of several has each
    #: file's in ``nodes``)
    first_ts: str | None = None
    last_ts: str | None = None


# -- a hybrid model's memory pools (model/pools.py) ---------------------------------------
@dataclass(frozen=True)
class PoolState(Keyed):
    """A pool as SGLang's invariant checker printed it (``[pool] total=, available=, evictable=``),
    or an out-of-memory message's account of it (available and evictable, no total)."""

    total: int | None
    available: int
    evictable: int
    at: Cite | None = None


@dataclass(frozen=True)
class Pool(Keyed):
    """One memory pool: its size in its unit (tokens, or ``states`` for Mamba), GiB, the line
    that sized it; its peak and last use (0-1 of the size) on the batch lines, with the count
    printed with each; the invariant checker's state. Each None where no line shows it."""

    unit: str = "tokens"
    size: int | None = None
    gib: float | None = None
    size_at: Cite | None = None
    peak_usage: float | None = None
    peak_at: Cite | None = None
    last_usage: float | None = None
    last_at: Cite | None = None
    peak_used: int | None = None
    last_used: int | None = None
    state: PoolState | None = None


@dataclass(frozen=True)
class Retraction(Keyed):
    """A retraction and the pool that bound it: the fullest on the batch line before it
    (``usage``, at ``usage_at``), and the other pools' usage then."""

    at: Cite | None
    pool: str | None
    usage: float | None
    usage_at: Cite | None
    others: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class StartupOrder(Keyed):
    """Whether start-up allocated the KV pool before capturing CUDA graphs
    (``kv_before_graphs``) or sized it after them (``graphs_before_kv``), with the lines;
    whether the environment asked for post-capture sizing, and whether SGLang fell back."""

    order: str | None
    kv_at: Cite | None = None
    capture_at: Cite | None = None
    va_at: Cite | None = None
    post_capture_at: list[Cite] = field(default_factory=list)
    env_set: bool = False
    env_at: list[Cite] = field(default_factory=list)
    fell_back: bool = False


@dataclass(frozen=True)
class PoolPoint(Keyed):
    """One point of a pool's use over the log: a bucket's highest usage (0-1), the first line
    that printed it, the count printed with it, its rank and stamp (to the second)."""

    line: int
    usage: float
    used: int | None = None
    rank: str | None = None
    ts: str | None = None


@dataclass(frozen=True)
class PoolSeries(Keyed):
    """A pool's use over the log: at most 64 points, each of ``lines_per_point`` lines."""

    lines_per_point: int
    points: list[PoolPoint]


@dataclass(frozen=True)
class MemoryPools(Keyed):
    """A run's memory pools one by one (``model/pools.py``), how many retractions each bound
    and the first of them, the start-up order, and each pool's use over the log."""

    pools: dict[str, Pool]
    bound_by: dict[str, int]
    retractions: list[Retraction]
    order: StartupOrder | None
    series: dict[str, PoolSeries] | None = None


# -- prefill/decode disaggregation: a file's part (model/pd.py) ---------------------------
@dataclass(frozen=True)
class RoleEvidence(Keyed):
    """The first record that gave a file its role, and why (``#transfer-req in a decode batch``)."""

    file: str | None
    line: int
    rank: str | None
    why: str
    text: str


@dataclass(frozen=True)
class KvFailure(Keyed):
    """A KV transfer that failed for a request (``Prefill transfer failed for request rank=0
    req.rid=... req.bootstrap_room=...``): the side and stage, the rank (as the prefix names it
    and as the message counts it), the request and its room, the exception and its message,
    the seconds after which a timeout struck and the state it polled, and the record."""

    side: str
    stage: str | None
    rank: str | None
    rank_index: int
    rid: str | None
    room: str | None
    exception: str
    message: str
    timed_out_s: float | None
    poll: str | None
    file: str | None
    line: int
    ts: str | None
    text: str


@dataclass(frozen=True)
class PdTimeout(Keyed):
    """A PD timer's warning (``waiting`` or ``bootstrap``), the variable that sets it, the record."""

    timer: str
    setting: str
    rank: str | None
    file: str | None
    line: int
    ts: str | None
    text: str


@dataclass(frozen=True)
class RouterError(Keyed):
    """A router's warning or error line: its level, module, source file and line, message."""

    file: str | None
    line: int
    ts: str | None
    level: str
    module: str | None
    src: str | None
    src_line: int | None
    message: str
    rank: str | None
    text: str


@dataclass(frozen=True)
class PdPart(Keyed):
    """A file's part in prefill/decode disaggregation: its role (``prefill``, ``decode``,
    ``prefill+decode`` for a file with both servers' records, ``router``) and the record behind it, its KV-transfer failures, PD timeouts, router
    warnings and errors (the first few of each), and how many router lines it has."""

    role: str | None
    role_evidence: RoleEvidence | None
    kv_failures: list[KvFailure] = field(default_factory=list)
    timeouts: list[PdTimeout] = field(default_factory=list)
    router_errors: list[RouterError] = field(default_factory=list)
    router_lines: int = 0
    #: the router's own readiness (``Router ready | workers: [...]``), when it logged it
    router_ready: Notice | None = None


# -- a run of several files: each node (model/nodes.py) -----------------------------------
@dataclass(frozen=True)
class NodeCrash(Keyed):
    """A node's own crash, as its file's summary shows it."""

    first_rank: str | None = None
    phase: str | None = None
    exception: str | None = None
    line: int | None = None
    ts: str | None = None
    file: str | None = None


@dataclass(frozen=True)
class NodeEntry(Keyed):
    """One file of a run of several: its node, file and role (``prefill``, ``decode``,
    ``router`` or None), ``node_rank``, its own outcome and reason, ranks, first and last
    stamps (on the run's one clock), lines, each rank's furthest start-up milestone, its
    crash, the line that says it is ready; the KV-transfer story of a disaggregated part
    (``pd``, ``model/pd.py``); the stamps put on the others' clock and why its order is uncertain."""

    node: str | None
    file: str
    role: str | None = None
    node_rank: int | None = None
    outcome: str | None = None
    outcome_reason: str | None = None
    ranks: list[str] = field(default_factory=list)
    first_ts: str | None = None
    last_ts: str | None = None
    lines: int | None = None
    furthest: dict[str, str | None] = field(default_factory=dict)
    crash: NodeCrash | None = None
    ready_line: int | None = None
    pd: PdPart | None = None
    clock: list[ClockMove] | None = None
    order_uncertain: str | None = None
