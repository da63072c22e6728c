"""Feed the run model from columns: what observing serving records does, a segment at a time.

A serving log is almost all ``Decode batch``, ``Prefill batch`` and HTTP access lines.
For those, observing an event only counts it, keeps the last line, stamp and text of its
rank and of the rank's serving phase, adds throughput figures to sketches and to the
series (``throughput.py``, ``rank.py``) and adds each batch record to the serving time
series (``serving_rows.py``). The bulk scanner (``read/bulk.py``) takes runs of such lines
and returns them as columns (counts per kind, the last line per class and rank, the
converted figures by rank, and the batch records as rows of line, rank, stamp and
figures); :meth:`ColumnFeed.apply` makes exactly the updates that observing those lines
one by one would make. That holds only while no taken line
would create a rank, open the serving phase or be kept as evidence;
:meth:`ColumnFeed.ready_table` says which (class, rank) pairs qualify, from the model as
it stands, and the scanner stops at any other line, which is then observed as an event.
Passive lines are those of kinds with no handler and no phase.

Runs of unrecognised lines (one ``other`` event each, of the whole line, without a rank)
are taken too, where the caller says which texts its observers read in them
(:meth:`ColumnFeed.take_others`, ``read/other.py``): the model only counts them, by
coverage shape (``coverage.add_others``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .. import native
from ..events import PHASE_OF_KIND, Event
from ..read import other
from ..read.bulk import BulkScanner, Rows, Segment, numbers
from ..read.plan import Plan
from .clock import iso
from .config import AWAITED
from .coverage import MAX_UNKNOWN_SHAPES, OVERFLOW_KEY, PROBE_OK, add_others
from .hang import HANG_KINDS
from .notices import limit
from .pd import OBSERVED as PD_OBSERVED
from .pools import BATCH_POOLS, POOL_FIELDS, take_rows
from .rank import NO_RANK
from .registry import HANDLERS
from .run import RunModel
from .serving import SERVING_KINDS
from .serving_rows import ROW_FIELDS, add_rows
from .stats import Sketch

DECODE, PREFILL, PASSIVE = 1, 2, 3
#: The classes of grouped texts (``GROUPS``: a probe path each), passive lines otherwise.
GROUP_CLASSES = (4, 5, 6, 7)
#: Answered requests: taken once the first was read as an event (``startup.on_http_access``
#: keeps its line as the evidence that the server was ready).
ANSWERED = 8
#: Kinds with a handler that :meth:`ColumnFeed.apply` replays from counts: an answered
#: HTTP request places the run in serving (``startup.on_http_access``); probes answered
#: ``PROBE_OK`` are counted by path (``coverage.on_http_probe``: the scanner takes no other
#: answer, and counts each path's lines under a kind code of its own, ``GROUPS``).
REPLAYED = frozenset({"http_access", "http_probe"})
#: Kinds whose taken lines are counted apart by the text of one field (constant in a shape).
GROUPS = {"http_probe": "path"}
#: Lines taken only when a value slot holds this number (the others go the exact way).
GUARDS = {"http_probe": {"status": float(PROBE_OK)}, "http_access": {"status": float(PROBE_OK)}}
#: The figures of the throughput sketches (``throughput.py``), by the sketch each feeds: the
#: scanner's value slots 0-3, in this order, whose values it also keeps as lists (slot 0 in
#: line order too: ``ORDERED``).
SKETCHED = (("decode_batch", "gen_throughput_tok_s", "decode_by_rank"), ("decode_batch", "accept_len", "accept_len"),
            ("decode_batch", "running_req", "running_req"), ("prefill_batch", "input_throughput_tok_s", "prefill"))


def _layout() -> dict[str, dict[str, int]]:
    """The scanner's value slots, per kind and field: the sketched figures' (``SKETCHED``),
    then, kept in rows alone (decode and prefill records are rows whose columns are the
    slots), what observing reads of each kind (``serving_rows.ROW_FIELDS``) and a hybrid
    model's per-pool fields (``model.pools``). A row is of one kind, so the kinds share the
    row-only slots: each kind's fields in turn from the first."""
    slots: dict[str, dict[str, int]] = {kind: {} for kind in ROW_FIELDS}
    for i, (kind, name, _) in enumerate(SKETCHED):
        slots[kind][name] = i
    for kind, names in ROW_FIELDS.items():
        rest = [name for name in dict.fromkeys(names + POOL_FIELDS) if name not in slots[kind]]
        slots[kind].update({name: len(SKETCHED) + j for j, name in enumerate(rest)})
    return slots


SLOTS = _layout()
ORDERED = (0,)
ROWS = (DECODE, PREFILL)
ROW_ONLY = tuple(range(len(SKETCHED), 1 + max(s for fields in SLOTS.values() for s in fields.values())))
#: A probe's status and a request's answer: checked (``GUARDS``: the bulk reader takes answers
#: of 200; the others are events, counted by status with their first line, ``coverage``), kept
#: nowhere (a row-only slot of a class with no rows).
SLOTS["http_probe"] = SLOTS["http_access"] = {"status": ROW_ONLY[0]}
_ROW_KIND = {DECODE: "decode_batch", PREFILL: "prefill_batch"}
#: Batch fields of a prefill/decode-disaggregated server, which ``model.pd`` reads from
#: events: records that carry them are observed as events.
_PD_FIELDS = ("transfer_req", "inflight_req", "unbootstrapped_req")


def class_of(plan: Plan) -> int | None:
    """The scanner class of a plan's records, or None when they must be observed as events."""
    kind = plan.kind
    if any(name in plan.spec for name in _PD_FIELDS):
        return None
    if kind == "decode_batch":
        return DECODE
    if kind == "prefill_batch":
        return PREFILL
    if kind in HANG_KINDS or kind in SERVING_KINDS or kind in PD_OBSERVED:
        return None  # the hang, serving and PD observers read each record
    if kind == "http_access":
        return ANSWERED
    if kind in REPLAYED or kind in AWAITED:
        return PASSIVE
    if kind in HANDLERS or kind in PHASE_OF_KIND:
        return None
    return PASSIVE


class ColumnFeed:
    """Applies scanned segments to one :class:`RunModel`; ``observe`` takes the events of
    the other lines (the model's ``observe_all`` and whatever else watches events)."""

    def __init__(self, model: RunModel, observe: Callable[[Sequence[Event]], None] | None = None,
                 batches: Callable[[int], None] | None = None, other_needs: Iterable[str] | None = None,
                 group_class: Mapping[str, int] | None = None) -> None:
        self.model = model
        #: the scanner's class of each probe path (``BulkScanner.group_class``, filled as met)
        self._group_class = group_class if group_class is not None else {}
        self._observe = observe or model.observe_all
        #: told how many decode and prefill records each segment held (``PDObserver``)
        self._batches = batches
        #: runs of unrecognised lines, when the caller says what its observers read in
        #: them (``other_needs``: texts of which such a line must contain none)
        self._others = (other.OtherWalker(other_needs, MAX_UNKNOWN_SHAPES, OVERFLOW_KEY)
                        if other_needs is not None and native.available() else None)
        #: the scanner's plans looked at for a hybrid model's per-pool fields (``_pooled``),
        #: and whether each count field is read by ``int``
        self._plans_seen = 0
        self._has_pools = False
        self._pool_ints: dict[str, bool] = {}

    def take_others(self, buf: bytes, pos: int, end: int, line: int, binary: bool) -> tuple[int, int, int]:
        """Observe the unrecognised lines of ``buf[pos:end]`` from ``pos`` on (the first
        numbered ``line``) that ``read.other`` takes: (where it stopped, lines taken,
        undecodable lines among them)."""
        if self._others is None:
            return pos, 0, 0
        m = self.model
        stop, n, bad, overflowed, shapes, blanks = self._others.walk(buf, pos, end, line, m.coverage.unknown_shapes,
                                                                     binary, True)
        if n:
            add_others(m, line, n, overflowed, shapes, blanks)
        return stop, n, bad

    def ready_table(self, rank_names: list[str | None]) -> bytearray:
        """Which (class, rank id) lines ``apply`` handles exactly, given the model now.

        Decode and prefill lines: their rank (``-`` when none) has its serving phase open
        already, and the few decode records kept as evidence are noticed. Passive lines: no
        rank, or a rank the model already has (a new rank is created in log order by the
        event path), unless the model waits for a line of an ``AWAITED`` kind (``config``). A
        probe path's lines: as passive ones, once its first ``PROBE_OK`` answer was read as an
        event (its line is evidence: ``coverage.Probes``).
        """
        m = self.model
        ranks = m.ranks
        decode_ok = len(m.notices.get("decode", ())) >= limit("decode")
        table = bytearray((ANSWERED + 1) * 256)
        first = m.coverage.probes.first
        passive = ([] if m.config.continued else [PASSIVE]) + [cls for path, cls in self._group_class.items()
                                                               if (path.split("?", 1)[0], PROBE_OK) in first]
        if m.timeline.answered is not None and not m.timeline.answered.get("probe"):
            passive.append(ANSWERED)
        for cls in passive:
            table[cls * 256] = 1
        for rid, name in enumerate(rank_names):
            r = ranks.get(name or NO_RANK)
            if r is None:
                continue
            if "serving" in r.phases:
                table[PREFILL * 256 + rid] = 1
                if decode_ok:
                    table[DECODE * 256 + rid] = 1
            if rid:
                for cls in passive:
                    table[cls * 256 + rid] = 1
        return table

    def observe(self, events: Sequence[Event]) -> None:
        """Lines read on the exact path: observed as events."""
        self._observe(events)

    def apply(self, seg: Segment, first_line: int, scanner: BulkScanner, buf: bytes) -> None:
        """Observe the ``seg[1]`` lines of a segment of ``buf``, the first numbered ``first_line``."""
        _, n, counts, lasts, values, ordered, _rows = seg
        if not n:
            return
        kinds, rank_names = scanner.kinds, scanner.rank_names

        def stamp(start: int, end: int, plan: int) -> tuple[str, Any]:
            return scanner.stamp(buf, start, end, plan)

        m = self.model
        cov = m.coverage
        cov.events += n
        kc = cov.kind_counts
        batches = 0
        texts = scanner.groups
        for code, c in counts:
            kind = kinds[code]
            kc[kind] += c
            if kind == "http_probe":
                cov.probes.add(str(texts[code]).split("?", 1)[0], PROBE_OK, c)
            elif kind in REPLAYED and m.timeline.global_phase != "serving":
                m.timeline.reach("serving")
            if kind in SLOTS:
                batches += c
        if batches and self._batches is not None:
            self._batches(batches)
        m.last_line = first_line + n - 1
        touch: dict[str, tuple[int, int, int, int]] = {}
        serving: dict[str, tuple[int, int, int, int]] = {}
        for cls, rid, idx, start, end, plan in lasts:
            entry = (idx, start, end, plan)
            rows_cls = cls in _ROW_KIND
            if not rows_cls and not rid:
                continue
            label = rank_names[rid] or NO_RANK
            if rows_cls:
                got = serving.get(label)
                if got is None or idx > got[0]:
                    serving[label] = entry
            got = touch.get(label)
            if got is None or idx > got[0]:
                touch[label] = entry
        ranks = m.ranks
        for label, (idx, start, end, plan) in touch.items():
            r = ranks[label]
            r.last_line = first_line + idx
            r.last_text, r.last_ts = stamp(start, end, plan)
        if serving:
            timeline = m.timeline
            last = 0
            for label, (idx, start, end, plan) in serving.items():
                r = ranks[label]
                line = first_line + idx
                last = max(last, line)
                info = r.phases["serving"]
                info["last_line"] = line
                info["last_ts"] = stamp(start, end, plan)[1]
                r.phase = "serving"
                r.phase_line = r.course_line = line
                if info["last_ts"]:
                    r.course_ts = info["last_ts"]
            timeline.last_serving_line = last
            timeline.reach("serving")
        t = m.throughput
        for slot, rid, ints, doubles in values:
            sketch = SKETCHED[slot][2]
            if sketch == "decode_by_rank":
                label = rank_names[rid] or NO_RANK
                sk = t.decode_by_rank.get(label)
                if sk is None:
                    sk = t.decode_by_rank[label] = Sketch()
                sk.extend_doubles(ints, doubles)
            else:
                getattr(t, sketch).extend_doubles(ints, doubles)
        for _slot, xs, ints, doubles in ordered:
            t.decode_series.extend_xy(xs, numbers(ints, doubles))
        rows = scanner.rows(seg, buf, first_line)
        if rows is not None:
            groups = [(_ROW_KIND[cls], cls, rid, rank_names[rid]) for cls, rid, *_ in lasts if cls in _ROW_KIND]
            add_rows(m.serving, rows, groups, SLOTS, scanner.classifier.file)
            if self._pooled(scanner):
                _pool_rows(m, rows, scanner, self._pool_ints)

    def _pooled(self, scanner: BulkScanner) -> bool:
        """Whether a plan the scanner takes has a hybrid model's per-pool fields (the plans
        learned since the last call are looked at once)."""
        plans = scanner.plans
        if len(plans) > self._plans_seen:
            for plan in plans[self._plans_seen:]:
                for name in POOL_FIELDS:
                    if name in plan.spec:
                        self._pool_ints.setdefault(name, plan.spec[name][1] is int)
                        self._has_pools = True
            self._plans_seen = len(plans)
        return self._has_pools


def _pool_rows(m: RunModel, rows: Rows, scanner: BulkScanner, pool_ints: dict[str, bool]) -> None:
    """The per-pool fields of a segment's rows into ``m.pools`` (``pools.take_rows``)."""
    raw = rows.raw
    n = raw[0]
    vals = memoryview(raw[10]).cast("d")

    def col(slot: int) -> Sequence[float]:
        return vals[slot * n:(slot + 1) * n]

    decode, prefill = col(SLOTS["decode_batch"]["full_token_usage"]), col(SLOTS["prefill_batch"]["full_token_usage"])
    full = [d if c == DECODE else q for c, d, q in zip(raw[4], decode, prefill)]
    usage = [full if u == "full_token_usage" else col(SLOTS["decode_batch"][u]) for _, u, _ in BATCH_POOLS]
    count = [col(SLOTS["decode_batch"][c]) for _, _, c in BATCH_POOLS]
    ints = [pool_ints.get(c, True) for _, _, c in BATCH_POOLS]
    file = scanner.classifier.file

    def where(i: int) -> dict[str, Any]:
        text, ts = rows.stamp(i)
        return {"file": file, "line": rows.line(i), "rank": rows.rank(i), "ts": ts, "text": text}

    secs, dated = memoryview(raw[7]).cast("d"), raw[5]

    def point(i: int) -> tuple[str | None, str | None]:
        sec = secs[i]
        return rows.rank(i), (iso(sec, bool(dated[i])) if sec == sec else None)

    first = rows.first_line
    take_rows(m.pools, usage, count, ints, where, [first + x for x in memoryview(raw[2]).cast("q")], point)
