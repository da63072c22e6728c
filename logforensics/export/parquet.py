"""``parse --format parquet`` with the compiled column writer: row groups built from C buffers.

The lines whose shape has a plain plan, and runs of unrecognised lines (``read.other``),
come back from C (``read.emit.ColumnEmitter``) as Arrow buffers, one column per field name
and type, their rows held in C from scan to scan until a line of the exact path comes (or
``HOLD_ROWS``, or a group's count); every other line is read on the exact path, and its
event kept for ``tables.event_columns``. A row group is these pieces in line order, each
column of the type the event schema declares (``tables.file_schema``: an integer read in C
for a field of numbers is cast to a double), written as soon as it is full
(``tables.ParquetOut``): the file reads back as the exact path's table. The file's name and
the node are dictionary arrays of one value, not a copy a row. Memory is a row group and a
block, flat however long the log.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import IO, Any

from ..events import Event
from ..ingest.files import blocks
from ..ingest.parallel import BULK_BLOCK_SIZE
from ..read import emit
from ..read.parser import IncrementalParser
from .sink import ScanSink
from .tables import CONSTANTS, ParquetOut, event_columns, file_schema, from_values, nulls

#: Rows per row group: C columns are compact (the text and a few numbers a row), so groups
#: can be larger than ``tables.ROW_GROUP``, whose rows are Python objects; every column of
#: the file has a chunk in every group (of nulls, mostly), so fewer groups cost less.
ROW_GROUP = 65536
#: Bytes of C column buffers that half a group may hold before it is a group of its own: a
#: log's rows take about 320 bytes (10 MiB in 32,768 rows), random bytes' 480 (each
#: undecodable byte three of U+FFFD, written uncompressed), and their groups of 65,536 rows
#: took 100 MiB more at the peak, and no less time.
GROUP_BYTES = 12 << 20
#: Rows held in C (``_Groups.hold``) before they are taken as a piece: runs of unrecognised
#: lines and the records between them are then one piece, not one each (random bytes:
#: 37,000 pieces a GiB, each a tenth of a millisecond of Python), and the C buffers stay
#: small (a log's rows fill a hundred columns: held for half a group, they took 40 MiB).
HOLD_ROWS = 8192


@dataclass(frozen=True)
class ParquetStats:
    """How a file's rows were made: its lines, those taken in C, by kind."""

    lines: int
    taken: int
    by_kind: dict[str, int]
    refused: int


class _Groups:
    """Row groups collected from pieces (C columns or exact-path events), each handed to
    ``put`` as a table of the file's schema (``tables.file_schema``)."""

    def __init__(self, put: Callable[[Any], None]) -> None:
        import pyarrow as pa

        self.pa = pa
        self.schema = file_schema()
        self.c_types = {"s": pa.string(), "q": pa.int64(), "d": pa.float64(), "b": pa.bool_()}
        self.put = put
        self.pieces: list[tuple[int, Any]] = []  # (rows, list of events | {name: [arrays]})
        self.held = 0  # rows held in C after the pieces (``hold``)
        self.pending = 0
        self.pending_bytes = 0  # of the pending C columns' buffers
        self.names: dict[int, tuple[str, str]] = {}  # C column -> (name, type)

    def add_events(self, events: Sequence[Event], wanted: Collection[str], scanner: emit.ColumnEmitter) -> None:
        """Exact-path events, after the rows held in C (those of the lines before)."""
        kept = [ev for ev in events if not wanted or ev.kind in wanted]
        if kept:
            self.take(scanner)
            if self.pieces and isinstance(self.pieces[-1][1], list):
                self.pieces[-1][1].extend(kept)
                self.pieces[-1] = (len(self.pieces[-1][1]), self.pieces[-1][1])
            else:
                self.pieces.append((len(kept), kept))
            self._added(len(kept))

    def hold(self, n: int, scanner: emit.ColumnEmitter) -> None:
        """``n`` rows more held in C (``ColumnEmitter.scan``): taken as one piece when a
        group's rows are to be counted (half a group, then a whole one: ``_added``), so that
        runs of unrecognised lines and the records between them are not a piece each."""
        self.held += n
        if (self.held >= HOLD_ROWS
                or self.pending + self.held >= (ROW_GROUP // 2 if self.pending < ROW_GROUP // 2 else ROW_GROUP)):
            self.take(scanner)

    def take(self, scanner: emit.ColumnEmitter) -> None:
        """The rows held in C, as the next piece (before an exact-path row, at a file's end)."""
        if self.held:
            self.held = 0
            self.add_columns(scanner.take(), scanner)

    def add_columns(self, taken: Sequence[Any], scanner: emit.ColumnEmitter) -> None:
        """A piece of C columns: ``taken`` is (rows, plans, cols) (``ColumnEmitter.take``)."""
        n, plans, cols = taken
        if not n:
            return
        pa = self.pa
        arrays: dict[str, list[Any]] = {}
        if any(col not in self.names for col, *_ in cols):
            self.names = {col: key for key, col in scanner.columns.items()}
        size = 0
        for col, type_, nonnull, valid, data, offsets in cols:
            if not nonnull:
                continue
            name = self.names[col][0]
            bufs = [pa.py_buffer(valid)]
            if offsets is not None:
                bufs.append(pa.py_buffer(offsets))
                size += len(offsets)
            bufs.append(pa.py_buffer(data))
            size += len(valid) + len(data)
            arrays.setdefault(name, []).append(
                pa.Array.from_buffers(self.c_types[type_], n, bufs, null_count=n - nonnull))
        for name in scanner.CONSTANT:
            value = getattr(scanner, name)
            if value is not None and any(name in scanner.plan_keys[pid] for pid in plans):
                arrays[name] = [_constant(value, n)]
        self.pieces.append((n, arrays))
        self._added(n, size)

    def _added(self, n: int, size: int = 0) -> None:
        """``n`` rows (``size`` bytes of C columns) more pending: a group handed on for each
        ``ROW_GROUP`` rows, or for half as many where those would hold ``GROUP_BYTES``."""
        self.pending += n
        self.pending_bytes += size
        half = ROW_GROUP // 2
        while self.pending >= half:
            if self.pending_bytes * half >= GROUP_BYTES * self.pending:
                self.spill(half)
            elif self.pending >= ROW_GROUP:
                self.spill(ROW_GROUP)
            else:
                break

    def spill(self, rows: int | None = None) -> None:
        """Hand the first ``rows`` pending rows (or all) to ``put`` as one row group: every
        group but the last has ``ROW_GROUP`` rows, or half as many where those would hold
        ``GROUP_BYTES``."""
        pa = self.pa
        pieces, self.pieces = self.pieces, []
        if rows is not None and rows < self.pending:
            pieces, self.pieces = _cut(pieces, rows)
        entries: dict[str, list[tuple[int, Any]]] = {}  # name -> (first row, array), in row order
        total = 0
        for n, piece in pieces:
            if isinstance(piece, list):
                have = event_columns(piece)
            else:
                have = {}
                for name, arrays in piece.items():
                    filled = [a for a in arrays if a.null_count < len(a)]
                    if filled:
                        have[name] = filled[0] if len(filled) == 1 else _coalesce(filled)
                if "line" in have and "end_line" not in have:  # a line's record ends on it
                    have["end_line"] = have["line"]
            for name, column in have.items():
                entries.setdefault(name, []).append((total, column))
            total += n
        unknown = set(entries) - set(self.schema.names)
        if unknown:
            raise ValueError(f"columns the event schema lacks: {sorted(unknown)}")
        columns = []
        for field in self.schema:
            parts = []
            at = 0
            for first, column in entries.get(field.name, ()):
                if first > at:
                    parts.append(nulls(first - at, field.type))
                parts.append(column if column.type == field.type else column.cast(field.type))
                at = first + len(column)
            if total > at:
                parts.append(nulls(total - at, field.type))
            column = pa.chunked_array(parts, field.type)  # not concatenated: the writer slices
            columns.append(column.unify_dictionaries().combine_chunks() if field.name in CONSTANTS else column)
        if total:
            self.put(pa.Table.from_arrays(columns, schema=self.schema))
        self.pending_bytes -= self.pending_bytes * total // self.pending if self.pending else 0
        self.pending -= total


def _cut(pieces: list[tuple[int, Any]], rows: int) -> tuple[list[tuple[int, Any]], list[tuple[int, Any]]]:
    """``pieces`` up to their first ``rows`` rows (fewer than theirs), and the rest: a piece
    cut in two is sliced (a list of rows, or Arrow arrays: without copying)."""
    head: list[tuple[int, Any]] = []
    for k, (n, piece) in enumerate(pieces):
        if n <= rows:
            head.append((n, piece))
            rows -= n
            if not rows:
                return head, pieces[k + 1:]
            continue
        first: list[Any] | dict[str, list[Any]]
        rest: list[Any] | dict[str, list[Any]]
        if isinstance(piece, list):
            first, rest = piece[:rows], piece[rows:]
        else:
            first = {name: [a.slice(0, rows) for a in arrays] for name, arrays in piece.items()}
            rest = {name: [a.slice(rows) for a in arrays] for name, arrays in piece.items()}
        if rows:
            head.append((rows, first))
        return head, [(n - rows, rest)] + pieces[k + 1:]
    return head, []


def _coalesce(arrays: list[Any]) -> Any:
    import pyarrow.compute as pc

    return pc.coalesce(*arrays)


_ZEROS: list[Any] = []  # one array of zero indices, sliced (``_constant``)
_LAST: list[Any] = []  # the last constant's value and dictionary: files come one after another


def _constant(value: str, n: int) -> Any:
    """``n`` rows of the text ``value`` as a dictionary array (its one value, and ``n`` zero
    indices: a slice of one array), not ``n`` copies: a file's name is in every row, and for
    random words it is more bytes than their text (``bench/README.md``)."""
    import pyarrow as pa

    if not _ZEROS or len(_ZEROS[0]) < n:
        size = max(n, 1 << 16)
        _ZEROS[:] = [pa.Array.from_buffers(pa.int64(), size, [None, pa.py_buffer(bytes(8 * size))])]
    if not _LAST or _LAST[0] != value:
        _LAST[:] = [value, from_values([value], "str")]
    return pa.DictionaryArray.from_arrays(_ZEROS[0].slice(0, n), _LAST[1], safe=False)


class _Sink(ScanSink):
    """Where ``feed_bulk`` sends a file's lines: C segments (runs of unrecognised lines too:
    ``take_others``) and exact-path events to the groups."""

    def __init__(self, groups: _Groups, wanted: Collection[str], scanner: emit.ColumnEmitter) -> None:
        self.groups = groups
        self.wanted = wanted
        self.scanner = scanner

    def apply(self, seg: Sequence[Any], first_line: int, scanner: emit.ColumnEmitter, buf: bytes) -> None:
        self.groups.hold(seg[2], scanner)
        scanner.count(seg[5])

    def observe(self, events: Sequence[Event]) -> None:
        self.groups.add_events(events, self.wanted, self.scanner)


def write_run_parquet(files: Sequence[tuple[str, str | None]], where: str | IO[bytes], *,
                      wanted: Collection[str] = (), progress: Callable[[int], None] | None = None,
                      warn: Callable[[str, str], None] | None = None) -> list[ParquetStats]:
    """Write every event of the logs ``files`` ((path, node), in order; kinds ``wanted``, or
    all) as one Parquet file, as ``tables.write_parquet`` of ``pipeline.iter_run_events``
    would, to ``where`` (a path, or a binary file). Needs the compiled writer
    (``native.available()``)."""
    with ParquetOut(where) as out:
        groups = _Groups(out.write)
        stats = _read(files, groups, wanted, progress, warn)
        if groups.pending:
            groups.spill()
    return stats


def _read(files: Sequence[tuple[str, str | None]], groups: _Groups, wanted: Collection[str],
          progress: Callable[[int], None] | None, warn: Callable[[str, str], None] | None) -> list[ParquetStats]:
    """Read the logs ``files`` into ``groups``."""
    stats = []
    columns: dict[tuple[str, str], int] = {}  # the C columns, one numbering for every file
    for path, node in files:
        parser = IncrementalParser(path, node=node)
        scanner = emit.ColumnEmitter(parser.classifier, parser.file, node, frozenset(wanted), columns)
        sink = _Sink(groups, wanted, scanner)
        # buffers read into again and again (C copies what a row group keeps), by a thread of
        # their own where the input is a file, ended with the reading, whatever ends it
        with closing(blocks(path, progress, BULK_BLOCK_SIZE, warn=None if warn is None else _warn(warn, path),
                            reuse=True, ahead=True)) as parts:
            for block in parts:
                parser.feed_bulk(block, scanner, sink)
        sink.observe(parser.close())
        groups.take(scanner)  # the file's last rows, before the next file's
        stats.append(ParquetStats(parser.stats.lines, scanner.taken, dict(scanner.by_kind), scanner.refused))
    return stats


def _warn(warn: Callable[[str, str], None], path: str) -> Callable[[str], None]:
    return lambda message: warn(path, message)
