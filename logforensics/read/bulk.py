"""Apply the fast path's stored plans to whole blocks of lines, in C: columns, not events.

The fast path (``fastpath.py``) parses the first line of each digit-masked shape with the
grammar and keeps the plan. :class:`BulkScanner` hands the plain ones (one record filling
the line) to the accelerator (``native/scan.c``), together with what the caller wants from
each kind: a class code and the fields to convert into numbered value slots. The
extension then walks a block: it masks each line, looks its shape up, slices the rank,
converts the numbers and appends them to columns; it stops at the first line it cannot
take, which the caller reads on the exact path (in order, with its line number) before
scanning on. Nothing here knows a log format: the shapes, spans and converters all come
from the grammar's plans.

A plan is taken only when applying it in C gives exactly what ``grammar.build_event``
would: a stamp converted by ``str`` or the ISO ``T`` replacement (or no stamp, on lines
that name no rank and are no rows), a non-empty rank span,
and the wanted fields read by ``int``, ``float`` or the grammar's bool converter (the C
converters refuse any text these would read differently, and the line then goes the
exact way).

Lines of the *row classes* are also handed over one row each (:class:`Rows`): line,
rank, stamp in seconds, byte span and a number per value slot, for observers that need
each record's place in time (the serving time series, which folds them into its
per-window aggregates a batch at a time: ``model/windows.py``).

``LOGFORENSICS_PURE=1`` (or a missing accelerator) disables this path: ``native.available()``
is then False and every line is read on the exact path, with identical results.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

from .. import native
from ..events import Event
from .fastpath import LineClassifier
from .plan import _DATE_TO_ISO, Plan
from .values import to_bool

#: One segment of taken lines, as ``_scan.Scanner.scan`` returns it: the values as doubles
#: with whether int() read them (:func:`numbers`); the last item: the rows of the row
#: classes, as columns, or None.
Segment = tuple[int, int, list[tuple[int, int]], list[tuple[int, int, int, int, int, int]],
                list[tuple[int, int, bool, bytes]], list[tuple[int, list[Any], bool, bytes]], Any]
#: A value slot's converter, as the C scanner codes it.
_CONV = {int: 0, float: 1}
_BOOL = 2


class LineScanner(Protocol):
    """What ``IncrementalParser.feed_bulk`` drives: a C scanner of the classifier's plain
    plans (:class:`BulkScanner`: columns; ``emit.JsonlEmitter``: rows of output)."""

    taken: int

    @property
    def rank_names(self) -> list[str | None]:
        """Rank text by the scanner's rank id."""

    def learn(self) -> None:
        """Register the plain plans learned since the last call."""

    def set_ready(self, table: bytes | bytearray) -> None:
        """Which (class, rank id) lines may be taken now."""

    def scan(self, buf: bytes, pos: int, line: int) -> Any:
        """Take lines of ``buf`` from ``pos`` on (numbered from ``line``): a segment whose
        first two items are the offset where it stopped and the lines taken."""


class BulkSink(Protocol):
    """Where ``IncrementalParser.feed_bulk`` sends what it reads (the run model's feed)."""

    def ready_table(self, rank_names: list[str | None]) -> bytes | bytearray:
        """Which (class, rank id) lines may be taken as columns now (see ``set_ready``)."""

    def apply(self, seg: Any, first_line: int, scanner: Any, buf: bytes) -> None:
        """Take a segment of ``seg[1]`` lines of ``buf``, the first numbered ``first_line``
        (``seg``: what ``scanner.scan`` returned)."""

    def observe(self, events: Sequence[Event]) -> None:
        """Take the events of lines read on the exact path.

        A sink may also have ``take_others(buf, pos, end, line, binary) -> (pos, lines,
        undecodable lines)``: it then observes the runs of unrecognised lines from ``pos``
        on itself (``read/other.py``), and the parser goes on where it stopped."""


def compiled_sketch_batch() -> Callable[[list[Any], float, dict[int, int]], Any] | None:
    """The C loop over a sketch's batch of values (``Sketch._flush``), if built."""
    return None if native.lib is None else native.lib.sketch_batch


def compiled_sketch_doubles() -> Callable[[Any, bool, float, dict[int, int]], Any] | None:
    """The C loop over a scan's numbers for a sketch (``Sketch.extend_doubles``), if built."""
    return None if native.lib is None else native.lib.sketch_doubles


def numbers(ints: bool, doubles: bytes) -> Sequence[Any]:
    """A scan's numbers of one slot as int() or float() read them: ints (each within 2**53,
    so the double is the int), else the doubles themselves (a view, not a copy)."""
    view = memoryview(doubles).cast("d")
    return [int(x) for x in view] if ints else view




class BulkScanner:
    """The C scanner, fed with the plain plans a :class:`LineClassifier` has learned.

    ``class_of(plan)`` gives the class code (1..8) of a plan's records, or None when they
    must always be read on the exact path; ``slots[kind]`` maps field names to value slots;
    ``ordered`` lists the slots whose values are also kept in line order with their
    stamps; lines of the classes in ``rows`` are also kept as rows (:class:`Rows`), whose
    columns are the slots; ``row_only`` slots are kept in rows alone (no value lists).
    ``groups[kind]`` names a field whose text is the same in every line of a shape: each
    text gets a kind code of its own (``groups`` by code: the text, None for ungrouped
    kinds), so a kind's lines are counted apart by it; a shape where that text holds a
    digit (masked, so not the same in every line) is read the exact way. Each text also
    gets a class of its own, of ``group_classes`` in the order the texts are met
    (``group_class``; once they are all given, the lines of a new text are read the exact
    way), so a caller can let the scanner take a text's lines only once it has read the
    first of them itself. ``guards[kind][field]``: a line is taken only when that field's
    slot holds this number.
    """

    def __init__(self, classifier: LineClassifier, class_of: Callable[[Plan], int | None],
                 slots: Mapping[str, Mapping[str, int]], ordered: tuple[int, ...] = (),
                 rows: tuple[int, ...] = (), row_only: tuple[int, ...] = (),
                 groups: Mapping[str, str] | None = None, group_classes: tuple[int, ...] = (),
                 guards: Mapping[str, Mapping[str, float]] | None = None) -> None:
        assert native.lib is not None
        self.classifier = classifier
        self.class_of = class_of
        self.slots = slots
        self.row_only = frozenset(row_only)
        self.row_classes = frozenset(rows)
        nslots = 1 + max((s for fields in slots.values() for s in fields.values()), default=-1)
        self.scanner = native.lib.Scanner(nslots, ordered, rows, row_only)
        self.plans: list[Plan] = []
        self.kinds: list[str] = []
        #: the text each kind code stands for, of a grouped kind (``groups``)
        self.groups: list[str | None] = []
        self.group_field = dict(groups or {})
        self.guards = dict(guards or {})
        self._free_classes = list(group_classes)
        #: the class of each grouped text (``groups``), as given
        self.group_class: dict[str, int] = {}
        self._kind_code: dict[tuple[str, str | None], int] = {}
        self._seen = (0, 0)  # the classifier's plans taken so far (``plans_since``)
        self.taken = 0  # lines taken as columns (counted by the parser)

    @property
    def rank_names(self) -> list[str | None]:
        """Rank text by the scanner's rank id (id 0: no rank)."""
        return self.scanner.rank_names

    def learn(self) -> None:
        """Register the plain plans the classifier learned since the last call, and those of
        records after a wrapper (applied from the record's offset in the line)."""
        items, self._seen = self.classifier.plans_since(self._seen)
        for key, plan, offset in items:
            self._register(key, plan, offset)

    def _register(self, key: bytes, plan: Plan, offset: int = 0) -> None:
        cls = self.class_of(plan)
        if cls is None:
            return
        rank = plan.rank
        if rank is not None and rank[1] <= rank[0]:
            return
        if offset:  # the record's spans as places in the line
            rank = None if rank is None else (rank[0] + offset, rank[1] + offset)
        if plan.ts is None or plan.ts_slice is None:
            # Without a stamp only lines that name no rank and are no rows: a rank's last
            # line is kept with its stamp (an unstamped record keeps the one before), and a
            # row is timed.
            if plan.ts is not None or plan.ts_slice is not None or rank is not None or cls in self.row_classes:
                return
        else:
            ta, tb = plan.ts
            if tb <= ta or plan.ts_conv not in (str, _DATE_TO_ISO):
                return
        ts = None if plan.ts is None else (plan.ts[0] + offset, plan.ts[1] + offset)
        slots: list[tuple[Any, ...]] = []
        guards = self.guards.get(plan.kind, {})
        for name, slot in self.slots.get(plan.kind, {}).items():
            where, conv = plan.spec.get(name, (None, None))
            if name not in plan.spec:
                if name in guards:
                    return  # no value to hold the guard's number
                continue  # the record lacks it: no value, as Fields.pick gives None
            code = _BOOL if conv is to_bool and slot in self.row_only else _CONV.get(conv)
            if where is None or where.step is not None or code is None:
                return  # a constant or another converter: the exact path reads these lines
            a, b, _ = where.indices(len(key) - offset)
            slots.append((slot, a + offset, b + offset, code) + ((guards[name],) if name in guards else ()))
        group = None
        if plan.kind in self.group_field:
            where, _ = plan.spec.get(self.group_field[plan.kind], (None, None))
            if where is None or where.step is not None:
                return
            a, b, _ = where.indices(len(key) - offset)
            group = key[a + offset:b + offset].decode("ascii")
            if "0" in group:  # a masked digit: not the same text in every line of the shape
                return
            if group not in self.group_class:
                if not self._free_classes:
                    return
                self.group_class[group] = self._free_classes.pop(0)
            cls = self.group_class[group]
        code = self._kind_code.get((plan.kind, group))
        if code is None:
            if len(self.kinds) >= 255:
                return
            code = self._kind_code[plan.kind, group] = len(self.kinds)
            self.kinds.append(plan.kind)
            self.groups.append(group)
        self.plans.append(plan)
        if not self.scanner.add(key, len(self.plans) - 1, cls, code, rank, ts, plan.ts_conv is _DATE_TO_ISO,
                                tuple(slots), offset):
            self.plans.pop()

    def set_ready(self, table: bytes | bytearray) -> None:
        """``table[cls * 256 + rank_id]`` non-zero: such lines may be taken."""
        self.scanner.set_ready(table)

    def scan(self, buf: bytes, pos: int, line: int = 0) -> Segment:
        """Take lines of ``buf`` (whole lines, each ending in a newline) from ``pos`` on
        (``line``: the number of the first, which the columns do not need)."""
        return self.scanner.scan(buf, pos)

    def stamp(self, buf: bytes, start: int, end: int, plan_id: int) -> tuple[str, Any]:
        """The text and converted stamp of one taken line (as build_event gives them)."""
        plan = self.plans[plan_id]
        text = buf[start:end].decode("ascii")
        return text, None if plan.ts_slice is None else plan.ts_conv(text[plan.ts_slice])

    def stamp_copy(self, raw: bytes, plan_id: int) -> tuple[str, Any]:
        """``stamp`` of a taken line's bytes alone."""
        return self.stamp(raw, 0, len(raw), plan_id)

    def rows(self, seg: Segment, buf: bytes, first_line: int) -> Rows | None:
        """The rows of a segment of ``buf`` whose first line is numbered ``first_line``."""
        return None if seg[6] is None else Rows(seg[6], self, buf, first_line)


class Rows:
    """The taken lines of the row classes of one segment, one row each, as columns.

    Row ``i`` has a class, a rank id, a line, a stamp (as seconds: ISO local times read
    as UTC, time-only stamps as seconds of the day, as ``model.serving.seconds`` reads
    them) and one number per value slot (NaN where the record has no such field; the
    bool converter's values as 1.0 and 0.0).
    """

    __slots__ = ("raw", "n", "scanner", "buf", "first_line", "_lines", "_rids", "_plans", "_starts", "_ends")

    def __init__(self, raw: tuple[Any, ...], scanner: BulkScanner, buf: bytes, first_line: int) -> None:
        self.raw = raw
        self.n: int = raw[0]
        self.scanner = scanner
        self.buf = buf
        self.first_line = first_line
        self._lines = memoryview(raw[2]).cast("q")
        self._rids = raw[3]
        self._plans = memoryview(raw[6]).cast("i")
        self._starts = memoryview(raw[8]).cast("q")
        self._ends = memoryview(raw[9]).cast("q")

    def first(self, cls: int, col: int, value: float, start: int = 0) -> int:
        """The first row from ``start`` of class ``cls`` whose column ``col`` is ``value``, or -1."""
        assert native.lib is not None
        return int(native.lib.first_row(self.raw, cls, col, value, start))

    def counters_repeat(self, cls: int, tok: int, alt: int, run: int,
                        tput: int) -> tuple[int, list[tuple[int, int, Any, int, Any, Any]]]:
        """The first row of class ``cls`` whose columns ``tok`` (else ``alt``), ``run`` (above
        0) and ``tput`` hold the values of its rank's row before, or -1; and the (rank id,
        first row, its key, last row, its key, its copy) of the class's rows of each rank id (a
        key: those three values, None where ``run`` is not above 0 or a value is missing; the
        copy (line index, bytes, plan; for :meth:`copy_stamp`) where the last row has a key)."""
        assert native.lib is not None
        return native.lib.counters_repeat(self.raw, cls, tok, alt, run, tput, self.buf)

    def copy_stamp(self) -> Callable[[bytes, int], tuple[str, Any]]:
        """What gives the text and converted stamp of a row's copy (``counters_repeat``: its
        bytes and plan), as :meth:`stamp` gives them, after the block and these rows are gone."""
        return self.scanner.stamp_copy

    def dated(self, i: int) -> bool:
        """Whether row ``i``'s stamp has a date."""
        return bool(self.raw[5][i])

    def line(self, i: int) -> int:
        return self.first_line + self._lines[i]

    def rank(self, i: int) -> str | None:
        return self.scanner.rank_names[self._rids[i]]

    def stamp(self, i: int) -> tuple[str, Any]:
        """Row ``i``'s text and converted stamp."""
        return self.scanner.stamp(self.buf, self._starts[i], self._ends[i], self._plans[i])

    def later(self, i: int) -> Callable[[], tuple[str, Any]]:
        """``stamp(i)``, made when called: of a copy of the row's bytes, since the block they
        are in may be a buffer read into again (``ingest.files.blocks``)."""
        raw = bytes(self.buf[self._starts[i]:self._ends[i]])
        return partial(self.scanner.stamp, raw, 0, len(raw), self._plans[i])
