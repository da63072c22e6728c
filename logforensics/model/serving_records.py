"""The serving phase of a run summary as typed records (``RunSummary.serving``).

The run model's serving observer (``model/serving.py``, with ``changepoints.py`` and
``health.py``) builds the ``serving`` object; :meth:`Serving.from_dict` reads it, where the
summary is taken (``model/run.py``) and where a saved summary is read back, and ``to_dict``
writes it key for key (:class:`.records.Keyed`). A line the summary cites without its stamp
is a :class:`.records.Cite`; a batch or retraction record with its stamp is a
:class:`BatchRecord` or one of its kin below. ``docs/summary.md`` says what each key means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .records import Cite, Keyed

__all__ = [
    "BatchRecord", "ChangeContext", "DpImbalance", "Health", "Idle", "IdleGap", "ImbalanceSignal", "KvPressure",
    "LastBatch", "Latency", "LatencyWindow", "PressureRun", "PressureWindow", "Requests", "Resumed", "Retracted",
    "Retractions", "SeesawStretch", "Serving", "ServingChange", "ServingLevel", "SlowRequest", "StallRun",
    "Stalls", "Storm", "Thresholds", "FrozenRun",
]


# -- the records the serving summary cites ---------------------------------------------
@dataclass(frozen=True)
class BatchRecord(Keyed):
    """A batch record the serving summary cites with its stamp: where it was printed, the
    rank, the stamp as printed, its text (cut at 400 characters)."""

    file: str | None
    line: int
    rank: str | None
    ts: str | None
    text: str


@dataclass(frozen=True)
class LastBatch(Keyed):
    """The last decode or prefill batch record, as :class:`BatchRecord`, with the
    ``#queue-req`` and ``#running-req`` it printed (None where it printed none)."""

    file: str | None
    line: int
    rank: str | None
    ts: str | None
    text: str
    queue_req: float | None = None
    running_req: float | None = None


@dataclass(frozen=True)
class Retracted(Keyed):
    """A retraction record (``KV cache pool is full. Retract requests.``), as
    :class:`BatchRecord`, with the requests it retracted and ``new_token_ratio`` before and
    after (each None where the record does not print it)."""

    file: str | None
    line: int
    rank: str | None
    ts: str | None
    text: str
    retracted_reqs: int | None = None
    new_token_ratio: list[float | None] = field(default_factory=list)


# -- figures over time -------------------------------------------------------------------
@dataclass(frozen=True)
class ServingLevel(Keyed):
    """A series' extent: its windows, least, greatest and mean value."""

    windows: int
    min: float
    max: float
    mean: float


@dataclass(frozen=True)
class ChangeContext(Keyed):
    """What the log shows just before a change (``what``): another figure that moved
    (``change``: its ``metric``, ``at``, ``line``, ``before``, ``after``), the first
    retraction (``retraction``) or CUDA graphs switched off (``cuda_graph_off``): their
    ``line``, ``ts``, ``rank``, ``text``. Each field None where its kind has none."""

    what: str
    metric: str | None = None
    at: str | None = None
    line: int | None = None
    before: float | None = None
    after: float | None = None
    ts: str | None = None
    rank: str | None = None
    text: str | None = None


@dataclass(frozen=True)
class ServingChange(Keyed):
    """A figure moved to a new level (``changepoints.changes``): the levels' means before and
    after, their ratio (None from a level of 0), whether a later level came back, what came
    just before, the record that opens it, and the idle seconds before it when idle time
    opens it (a new load, never a collapse)."""

    metric: str
    at: str
    line: int
    before: float
    after: float
    ratio: float | None
    recovered: bool
    context: list[ChangeContext] = field(default_factory=list)
    evidence: Cite | None = None
    after_idle_s: float | None = None


# -- retractions and KV pressure ----------------------------------------------------------
@dataclass(frozen=True)
class Storm(Keyed):
    """A run of retractions of one rank, each within ``changepoints.STORM_WINDOW_S`` of the
    one before: its first and last windows' stamps, first line, retractions, seconds."""

    start: str
    end: str
    first_line: int
    records: int
    duration_s: float


@dataclass(frozen=True)
class Retractions(Keyed):
    """The retraction records: how many, the requests they retracted, the first eight, and
    the storms of the rank with the largest one."""

    count: int
    retracted_reqs: int
    first: list[Retracted] = field(default_factory=list)
    storms: list[Storm] = field(default_factory=list)


@dataclass(frozen=True)
class PressureWindow(Keyed):
    """A window of the token-usage series: its first line and rank, its stamp, its token usage
    (0-1) and ``#queue-req``."""

    line: int
    rank: str | None
    at: str
    token_usage: float
    queue_req: float


@dataclass(frozen=True)
class PressureRun(Keyed):
    """A run of consecutive windows under KV pressure, as its first window, and the window
    that eased it (None while it holds)."""

    line: int
    rank: str | None
    at: str
    token_usage: float
    queue_req: float
    eased: PressureWindow | None = None


@dataclass(frozen=True)
class KvPressure(Keyed):
    """KV pressure (``changepoints.kv_full``): from the first window at a full pool with
    requests queued, its stamp, line, text and token usage; how many such windows, the queue
    then and at its longest, whether it grew, and the last runs of such windows."""

    at: str
    line: int
    text: str | None
    token_usage: float
    windows: int
    queue_start: float
    queue_max: float
    queue_grew: bool
    runs: list[PressureRun] = field(default_factory=list)


@dataclass(frozen=True)
class FrozenRun(Keyed):
    """The first run of consecutive decode batches of one rank, requests running, that show no
    work (``model/frozen.py``): its ``kind``, rank, batches, first and last records, and the
    batches that make a run."""

    kind: str
    rank: str
    lines: int
    first: BatchRecord
    last: BatchRecord
    threshold_lines: int


# -- requests -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Latency(Keyed):
    """Latency of finished requests (s): median, 90th and 99th percentile, greatest."""

    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None


@dataclass(frozen=True)
class LatencyWindow(Keyed):
    """One latency window: its start, first line, requests finished in it, their latency (s)."""

    at: str
    line: int
    count: int
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None


@dataclass(frozen=True)
class SlowRequest(Keyed):
    """One of the slowest requests: its record, request id, latency (s), prompt and output
    tokens, and the kind of record that gave it (``request_finish``, ...)."""

    file: str | None
    line: int
    ts: str | None
    rid: str | None
    latency_s: float
    input_tokens: int | None
    output_tokens: int | None
    source: str


@dataclass(frozen=True)
class Requests(Keyed):
    """Requests received (None when no Receive record is in the log) and finished, their
    latency overall (None with none finished), the latency windows' width (s) and windows,
    and the slowest requests."""

    received: int | None
    finished: int
    latency_s: Latency | None
    window_s: int
    over_time: list[LatencyWindow] = field(default_factory=list)
    slowest: list[SlowRequest] = field(default_factory=list)


# -- health (model/health.py) -------------------------------------------------------------
@dataclass(frozen=True)
class Thresholds(Keyed):
    """The thresholds the health findings are judged by (``health.thresholds``)."""

    stall_ratio: float
    stall_load_ratio: float
    median_windows: int
    seesaw_ratio: float
    seesaw_min_switches: int
    imbalance_ratio: float
    imbalance_min_windows: int
    imbalance_signals: int


@dataclass(frozen=True)
class IdleGap(Keyed):
    """A stretch without a batch record: the line before it, the first after it, its
    seconds, and the stamp at which serving resumed."""

    after_line: int
    line: int
    seconds: float
    at: str


@dataclass(frozen=True)
class Idle(Keyed):
    """Idle stretches: how many, their seconds, the first eight."""

    count: int
    seconds: float
    gaps: list[IdleGap] = field(default_factory=list)


@dataclass(frozen=True)
class Resumed(Keyed):
    """The first record of the window that ended a finding (a stall's ``recovered``, a
    seesaw's ``ended``): as :class:`.records.Cite`, with the window's stamp and, after a
    stall, its decode throughput."""

    file: str | None
    line: int
    rank: str | None
    text: str | None
    at: str
    tok_s: float | None = None


@dataclass(frozen=True)
class StallRun(Keyed):
    """A run of stalled decode windows: its first and last stamps, the decode record and the
    prefill record of its first window, its windows, the lowest throughput, the running
    median before it, ``#running-req`` then, the two records, and the window that ended it."""

    start: str
    end: str
    line: int
    prefill_line: int
    windows: int
    tok_s: float
    median_tok_s: float
    running_req: float | None
    evidence: list[Cite] = field(default_factory=list)
    recovered: Resumed | None = None


@dataclass(frozen=True)
class Stalls(Keyed):
    """Decode stalls: how many runs, their windows, the first eight."""

    count: int
    windows: int
    first: list[StallRun] = field(default_factory=list)


@dataclass(frozen=True)
class SeesawStretch(Keyed):
    """The first stretch of windows alternating between prefill starving decode and decode
    starving prefill: its stamps, first line, windows, switches, windows of each kind, the
    stretches found, the records of its first switches, and the window that ended it."""

    start: str
    end: str
    line: int
    windows: int
    switches: int
    prefill_windows: int
    decode_windows: int
    stretches: int
    evidence: list[Cite] = field(default_factory=list)
    ended: Resumed | None = None


@dataclass(frozen=True)
class ImbalanceSignal(Keyed):
    """One figure over the attention-DP groups: the windows compared, the heaviest and the
    lightest group with their median shares of the groups' mean, whether it signals, and one
    window's stamp, both groups' values and records (cited without their texts)."""

    figure: str
    windows: int
    heaviest: str
    heaviest_share: float
    lightest: str
    lightest_share: float
    signal: bool
    at: str
    heaviest_value: float
    lightest_value: float
    evidence: list[Cite] = field(default_factory=list)


@dataclass(frozen=True)
class DpImbalance(Keyed):
    """Attention-DP groups compared: how many, whether enough signals name one heaviest group,
    that group, every figure's signal, and the figures that agree."""

    groups: int
    found: bool
    heaviest: str | None
    signals: list[ImbalanceSignal] = field(default_factory=list)
    agreeing: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Health(Keyed):
    """Serving health from the batch lines (``model/health.py``): the thresholds, idle time,
    decode stalls, a prefill/decode seesaw and DP imbalance (each None where not found)."""

    thresholds: Thresholds
    idle: Idle
    stalls: Stalls
    seesaw: SeesawStretch | None = None
    imbalance: DpImbalance | None = None


# -- the whole ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Serving(Keyed):
    """The serving phase as a time series (``model/serving.py``): the window's seconds, the
    gap at which a chart breaks its line, whether stamps carry a date, records without a
    stamp; each figure's series and extent, the changes of level, retractions, KV pressure,
    the first decode batch not run as a CUDA graph, the first frozen run, the last batch
    record, request latency, and health. Each None where the log shows none."""

    window_s: int
    idle_gap_s: float
    dated: bool
    untimed_records: int
    #: figure -> points, each [the window's stamp (ISO time, or time of day when the log's
    #: stamps have no date), the figure's value, the window's first line]
    series: dict[str, list[list[Any]]] = field(default_factory=dict)
    levels: dict[str, ServingLevel] = field(default_factory=dict)
    changes: list[ServingChange] = field(default_factory=list)
    retractions: Retractions | None = None
    kv_full: KvPressure | None = None
    cuda_graph_off: BatchRecord | None = None
    frozen: FrozenRun | None = None
    last_batch: LastBatch | None = None
    requests: Requests | None = None
    health: Health | None = None
