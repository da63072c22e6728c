"""``parse --format parquet`` with the compiled column writer: row groups built from C buffers.

``tables.write_parquet`` turns every event into a dict and every row group into Arrow
arrays from Python values. Here the lines whose shape has a plain plan come back from C
(``read.emit.ColumnEmitter``) as Arrow buffers, a block at a time, one column per field
name and type; every other line is read on the exact path and kept as the dict that
``write_parquet`` makes of its event. A row group is these pieces in line order, each column
given the type its values in the group call for exactly as ``write_parquet`` decides it
(``int64`` / ``double`` / ``bool`` / ``string`` of ``str()``); the groups are spilled to
Arrow streams and written at the end by the same ``tables.write_groups``, so the file reads
back as the same table. Memory is one row group and one block.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import IO, Any

from ..events import Event
from ..ingest.batch import BULK_BLOCK_SIZE
from ..ingest.files import blocks
from ..read import emit
from ..read.parser import IncrementalParser
from .tables import _final, _kind, from_values, parquet_row, write_groups

#: Rows per row group: C columns are compact (the text and a few numbers a row), so groups
#: can be larger than ``tables.ROW_GROUP``, whose rows are Python objects.
ROW_GROUP = 65536


@dataclass(frozen=True)
class ParquetStats:
    """How a file's rows were made: its lines, those taken in C, by kind."""

    lines: int
    taken: int
    by_kind: dict[str, int]
    refused: int


class _Groups:
    """Row groups collected from pieces (C columns or event rows) and spilled to ``tmp``."""

    def __init__(self, tmp: str) -> None:
        import pyarrow as pa

        self.pa = pa
        self.types = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "str": pa.string()}
        self.c_types = {"s": pa.string(), "q": pa.int64(), "d": pa.float64(), "b": pa.bool_()}
        self.tmp = tmp
        self.order: dict[str, None] = {}
        self.kinds: dict[str, set[str]] = {}
        self.files: list[str] = []
        self.pieces: list[tuple[int, Any]] = []  # (rows, list of row dicts | {name: [arrays]})
        self.pending = 0
        self.rows = 0
        self.names: dict[int, tuple[str, str]] = {}  # C column -> (name, type)

    def add_events(self, events: Sequence[Event], wanted: Collection[str]) -> None:
        order = self.order
        rows = [parquet_row(ev, order) for ev in events if not wanted or ev.kind in wanted]
        if rows:
            if self.pieces and isinstance(self.pieces[-1][1], list):
                self.pieces[-1][1].extend(rows)
                self.pieces[-1] = (len(self.pieces[-1][1]), self.pieces[-1][1])
            else:
                self.pieces.append((len(rows), rows))
            self._added(len(rows))

    def add_columns(self, seg: Sequence[Any], scanner: emit.ColumnEmitter) -> None:
        _, _, n, plans, cols, _ = seg
        if not n:
            return
        pa = self.pa
        for pid in plans:
            for key in scanner.plan_keys[pid]:
                if key not in self.order:
                    self.order[key] = None
        arrays: dict[str, list[Any]] = {}
        if any(col not in self.names for col, *_ in cols):
            self.names = {col: key for key, col in scanner.columns.items()}
        for col, type_, nonnull, valid, data, offsets in cols:
            name = self.names[col][0]
            bufs = [pa.py_buffer(valid)]
            if offsets is not None:
                bufs.append(pa.py_buffer(offsets))
            bufs.append(pa.py_buffer(data))
            arrays.setdefault(name, []).append(
                pa.Array.from_buffers(self.c_types[type_], n, bufs, null_count=n - nonnull))
        self.pieces.append((n, arrays))
        self._added(n)

    def _added(self, n: int) -> None:
        self.pending += n
        self.rows += n
        if self.pending >= ROW_GROUP:
            self.spill()

    def spill(self) -> None:
        """Write the pending pieces as one row group (an Arrow stream in ``tmp``)."""
        import pyarrow.ipc as ipc

        pa = self.pa
        entries: dict[str, list[tuple[int, int, Any]]] = {}  # name -> (first row, rows, [values] or (arrays))
        start = 0
        for n, piece in self.pieces:
            if isinstance(piece, list):
                names = dict.fromkeys(key for row in piece for key in row)
                for name in names:
                    entries.setdefault(name, []).append((start, n, [row.get(name) for row in piece]))
            else:
                for name, arrays in piece.items():
                    entries.setdefault(name, []).append((start, n, tuple(arrays)))
            start += n
        total = start
        columns = {}
        for name in self.order:
            got = entries.get(name)
            if got is None:
                continue  # no row of this group has it: nulls, given at the end
            seen: set[str] = set()
            for _, _, part in got:
                if isinstance(part, list):
                    seen.update(_kind(v) for v in part if v is not None)
                else:
                    seen.update(emit.KIND_OF_TYPE[_type_code(a.type, pa)] for a in part if a.null_count < len(a))
            self.kinds.setdefault(name, set()).update(seen)
            kind = _final(seen)
            target = self.types[kind]
            parts = []
            at = 0
            for first, n, part in got:
                if first > at:
                    parts.append(pa.nulls(first - at, target))
                if isinstance(part, list):
                    if kind == "str":
                        part = [None if v is None else str(v) for v in part]
                    elif kind == "float":
                        part = [None if v is None else float(v) for v in part]
                    parts.append(from_values(part, kind))
                else:
                    filled = [_as_type(a, target, pa) for a in part if a.null_count < len(a)]
                    parts.append(pa.nulls(n, target) if not filled else filled[0] if len(filled) == 1
                                 else _coalesce(filled))
                at = first + n
            if total > at:
                parts.append(pa.nulls(total - at, target))
            columns[name] = pa.chunked_array(parts, target)  # not concatenated: the stream writer slices
        table = pa.table(columns) if columns else pa.table({"line": pa.nulls(total, pa.int64())})
        file = os.path.join(self.tmp, f"{len(self.files)}.arrow")
        with ipc.new_stream(file, table.schema) as out:
            out.write_table(table)
        self.files.append(file)
        self.pieces = []
        self.pending = 0


def _coalesce(arrays: list[Any]) -> Any:
    import pyarrow.compute as pc

    return pc.coalesce(*arrays)


def _type_code(t: Any, pa: Any) -> str:
    return "s" if t == pa.string() else "q" if t == pa.int64() else "d" if t == pa.float64() else "b"


def _as_type(arr: Any, target: Any, pa: Any) -> Any:
    """A column piece as the group's type, the values as ``write_parquet`` converts them."""
    if arr.type == target:
        return arr
    if target == pa.string():
        return from_values([None if v is None else str(v) for v in arr.to_pylist()], "str")
    return arr.cast(target)  # int64 -> double: float(v)


class _Sink:
    """Where ``feed_bulk`` sends a file's lines: C segments and exact-path events to the groups."""

    def __init__(self, groups: _Groups, wanted: Collection[str]) -> None:
        self.groups = groups
        self.wanted = wanted

    def ready_table(self, rank_names: list[str | None]) -> bytes:
        return b""

    def apply(self, seg: Sequence[Any], first_line: int, scanner: emit.ColumnEmitter, buf: bytes) -> None:
        self.groups.add_columns(seg, scanner)
        scanner.count(seg[5])

    def observe(self, events: Sequence[Event]) -> None:
        self.groups.add_events(events, self.wanted)


def write_run_parquet(files: Sequence[tuple[str, str | None]], where: str | IO[bytes], *,
                      wanted: Collection[str] = (), progress: Callable[[int], None] | None = None,
                      warn: Callable[[str, str], None] | None = None) -> list[ParquetStats]:
    """Write every event of the logs ``files`` ((path, node), in order; kinds ``wanted``, or
    all) as one Parquet file, as ``tables.write_parquet`` of ``pipeline.iter_run_events``
    would. Needs the compiled writer (``read.emit.available()``)."""
    stats = []
    columns: dict[tuple[str, str], int] = {}
    with tempfile.TemporaryDirectory(prefix="logforensics-parquet-") as tmp:
        groups = _Groups(tmp)
        for path, node in files:
            parser = IncrementalParser(path, node=node)
            scanner = emit.ColumnEmitter(parser.classifier, parser.file, node, frozenset(wanted), columns)
            sink = _Sink(groups, wanted)
            for block in blocks(path, progress, BULK_BLOCK_SIZE, warn=None if warn is None else _warn(warn, path)):
                parser.feed_bulk(block, scanner, sink)
            sink.observe(parser.close())
            stats.append(ParquetStats(parser.stats.lines, scanner.taken, dict(scanner.by_kind), scanner.refused))
        if groups.pending or not groups.files:
            groups.spill()
        write_groups(groups.files, groups.order, groups.kinds, where)
    return stats


def _warn(warn: Callable[[str, str], None], path: str) -> Callable[[str], None]:
    return lambda message: warn(path, message)
