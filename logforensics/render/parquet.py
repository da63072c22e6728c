"""``parse --format parquet`` with the compiled column writer: row groups built from C buffers.

``tables.write_parquet`` turns every event into a dict and every row group into Arrow
arrays from Python values. Here the lines whose shape has a plain plan come back from C
(``read.emit.ColumnEmitter``) as Arrow buffers, a block at a time, one column per field
name and type; every other line is read on the exact path and kept as the dict that
``write_parquet`` makes of its event. A row group is these pieces in line order, each column
given the type its values in the group call for exactly as ``write_parquet`` decides it
(``int64`` / ``double`` / ``bool`` / ``string`` of ``str()``), then the file's type by the
same ``tables.conform``, so the file reads back as the same table on either of two paths:

* logs that are regular files (not standard input, not compressed) are read twice. The
  first pass (``parquet_columns``) learns the file's columns and their types without
  storing a value (the C scanner converts each value, so it takes exactly the lines it
  takes when filling, and the other lines' events give theirs); the second pass, reading
  the same bytes, hands each row group to a thread that encodes it while the next is
  scanned (pyarrow's encoder and the C scan release the GIL). Where two threads are asked
  for (``parquet_columns.two_cores``), the first pass reads a large log's halves at once
  and two encoders take the row groups in turn. The second pass is the exact one: where
  its rows call for another schema than the first pass learned, the file is written again
  from a first pass in one piece, or, if that was one already, the log changed between
  the passes;
* any other input is read once: the groups are spilled to Arrow streams in a temporary
  directory and written when the last line has fixed the columns (``tables.write_groups``).

Memory is a few row groups and one block.
"""

from __future__ import annotations

import os
import queue
import stat
import tempfile
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import IO, Any

from ..events import Event
from ..ingest.batch import BULK_BLOCK_SIZE
from ..ingest.files import InputError, blocks, compression_of
from ..read import emit
from ..read.parser import IncrementalParser
from .parquet_columns import learn, limited, two_cores
from .parquet_join import join
from .tables import _final, _kind, conform, final_schema, from_values, nulls, open_writer, parquet_row, write_groups

#: Rows per row group: C columns are compact (the text and a few numbers a row), so groups
#: can be larger than ``tables.ROW_GROUP``, whose rows are Python objects. Two passes keep
#: three groups in memory (one built, one waiting, one encoded): at 32,768 rows rather than
#: 65,536 the peak is 205-220 MiB instead of 250 on a 1 GiB serving log, at the same
#: encoding time and file size.
ROW_GROUP = 32768


@dataclass(frozen=True)
class ParquetStats:
    """How a file's rows were made: its lines, those taken in C, by kind."""

    lines: int
    taken: int
    by_kind: dict[str, int]
    refused: int


class _Groups:
    """Row groups collected from pieces (C columns or event rows), each handed as a table to
    ``put``. ``expect`` (the first pass's kinds of every column): a group with a column or
    a kind of value beyond them means the log changed between the passes."""

    def __init__(self, put: Callable[[Any], None], expect: dict[str, set[str]] | None = None) -> None:
        import pyarrow as pa

        self.pa = pa
        self.types = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "str": pa.string()}
        self.c_types = {"s": pa.string(), "q": pa.int64(), "d": pa.float64(), "b": pa.bool_()}
        self.put = put
        self.expect = expect
        self.order: dict[str, None] = {}
        self.kinds: dict[str, set[str]] = {}
        self.groups = 0
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
        """Hand the pending pieces to ``put`` as one row group."""
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
                    parts.append(nulls(first - at, target))
                if isinstance(part, list):
                    if kind == "str":
                        part = [None if v is None else str(v) for v in part]
                    elif kind == "float":
                        part = [None if v is None else float(v) for v in part]
                    parts.append(from_values(part, kind))
                else:
                    filled = [_as_type(a, target, pa) for a in part if a.null_count < len(a)]
                    parts.append(nulls(n, target) if not filled else filled[0] if len(filled) == 1
                                 else _coalesce(filled))
                at = first + n
            if total > at:
                parts.append(nulls(total - at, target))
            columns[name] = pa.chunked_array(parts, target)  # not concatenated: the stream writer slices
        table = pa.table(columns) if columns else pa.table({"line": pa.nulls(total, pa.int64())})
        expect = self.expect
        if expect is not None and any(name not in expect or not self.kinds.get(name, set()) <= expect[name]
                                      for name in self.order):
            raise _Mismatch
        self.put(table)
        self.groups += 1
        self.pieces = []
        self.pending = 0


class _Spill:
    """Row groups as Arrow stream files in ``tmp``, for ``tables.write_groups``."""

    def __init__(self, tmp: str) -> None:
        self.tmp = tmp
        self.files: list[str] = []

    def __call__(self, table: Any) -> None:
        import pyarrow.ipc as ipc

        file = os.path.join(self.tmp, f"{len(self.files)}.arrow")
        with ipc.new_stream(file, table.schema) as out:
            out.write_table(table)
        self.files.append(file)


class _Encoder:
    """Row groups given the file's schema and written to ``where`` by a thread of its own
    (pyarrow encodes without the GIL), while the caller builds the next. A group is handed
    over only when the last is written, and none is kept after: memory holds two groups,
    the one encoded and the one built. ``where`` is best a path: pyarrow writes to a Python
    file object with the GIL held, and this thread then waits for the scanning one at every
    write."""

    def __init__(self, where: str | IO[bytes], schema: Any) -> None:
        self.schema = schema
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=1)
        self.idle = threading.Semaphore(1)  # released when a group is written
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(where,), name="parquet-encoder", daemon=True)
        self.thread.start()

    def _run(self, where: str | IO[bytes]) -> None:
        ended = False  # the caller's last put (None) was taken
        try:
            with open_writer(where, self.schema) as writer:
                while (table := self.queue.get()) is not None:
                    writer.write_table(table)
                    del table  # not kept while the next is waited for
                    self.idle.release()
                ended = True
        except BaseException as exc:  # handed to the caller's thread
            self.error = exc
            self.idle.release()
            while not ended and self.queue.get() is not None:  # let the caller finish putting
                self.idle.release()

    def __call__(self, table: Any) -> None:
        table = conform(table, self.schema)  # here: the encoding thread is the slower
        self.idle.acquire()
        if self.error is not None:
            self.idle.release()
            self.close()
        self.queue.put(table)

    def close(self) -> None:
        """Wait for the last group to be written; raise the thread's error, if any."""
        if self.thread.is_alive():
            self.queue.put(None)
            self.thread.join()
        if self.error is not None:
            raise self.error


class _Pair:
    """Row groups dealt in turn to two encoders, each on a thread of its own (encoding is
    the longest of the work, and pyarrow does a row group on one thread), writing ``where``
    and a file beside it, which ``parquet_join.join`` makes one file of at the end."""

    def __init__(self, where: str, schema: Any) -> None:
        fd, self.second = tempfile.mkstemp(prefix=".logforensics-", suffix=".parquet",
                                           dir=os.path.dirname(os.path.abspath(where)))
        os.close(fd)
        self.where = where
        self.encoders = (_Encoder(where, schema), _Encoder(self.second, schema))
        self.dealt = 0

    def __call__(self, table: Any) -> None:
        self.encoders[self.dealt % 2](table)
        self.dealt += 1

    def close(self) -> None:
        """Wait for both; join their files (raise the first error, if any)."""
        try:
            try:
                self.encoders[0].close()
            finally:
                self.encoders[1].close()
            join(self.where, self.second)
        finally:
            os.unlink(self.second)


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


def _regular(path: str) -> bool:
    """Whether ``path`` is a regular file whose bytes are its text (it can be read twice)."""
    if path == "-":
        return False
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return False  # the reader reports it
    return compression_of(head) is None and not head.startswith((b"\xff\xfe", b"\xfe\xff"))


def write_run_parquet(files: Sequence[tuple[str, str | None]], where: str | IO[bytes], *,
                      wanted: Collection[str] = (), progress: Callable[[int], None] | None = None,
                      warn: Callable[[str, str], None] | None = None,
                      two_pass: bool | None = None, split: bool | None = None) -> list[ParquetStats]:
    """Write every event of the logs ``files`` ((path, node), in order; kinds ``wanted``, or
    all) as one Parquet file, as ``tables.write_parquet`` of ``pipeline.iter_run_events``
    would. Needs the compiled writer (``read.emit.available()``). ``two_pass``: whether to
    learn the columns in a first pass and encode the row groups as they come (by default
    when every log is a regular, uncompressed file), or spill them until the end.
    ``split``: whether a large log may be read and encoded on two threads, where
    ``parquet_columns.two_cores`` has them asked for (by default where ``where`` is a path,
    which can be written again if the halves' guess was wrong; never for a file object)."""
    if two_pass is None:
        two_pass = all(_regular(path) for path, _ in files)
    if not two_pass:
        columns: dict[tuple[str, str], int] = {}
        with tempfile.TemporaryDirectory(prefix="logforensics-parquet-") as tmp:
            spill = _Spill(tmp)
            groups = _Groups(spill)
            stats = _read(files, groups, columns, wanted, progress, warn)
            if groups.pending or not groups.groups:
                groups.spill()
            write_groups(spill.files, groups.order, groups.kinds, where)
        return stats
    split = split is not False and isinstance(where, str)  # a file object cannot be written again
    try:
        try:
            return _two_passes(files, where, wanted, progress, warn, split=split)
        except _Mismatch as exc:
            if not exc.split:
                raise
        # a record across the halves' boundary was read otherwise: learn in one pass
        return _two_passes(files, where, wanted, progress, warn, split=False)
    except _Mismatch:
        raise InputError("the log changed between the two passes of writing Parquet (columns or types "
                         "the first pass did not see); write it again") from None


class _Mismatch(Exception):
    """The second pass met columns or kinds of values other than the first pass learned.
    ``split``: the first pass had read a log in two halves."""

    split = False


def _two_passes(files: Sequence[tuple[str, str | None]], where: str | IO[bytes], wanted: Collection[str],
                progress: Callable[[int], None] | None, warn: Callable[[str, str], None] | None,
                split: bool) -> list[ParquetStats]:
    """Learn the columns, then read again and encode each row group as it is made. The
    second pass is the exact one: a schema other than its rows' (``_Mismatch``) means
    the file written is not the exact table."""
    columns: dict[tuple[str, str], int] = {}
    first, sizes, halved = learn(files, wanted, columns, split)
    schema = final_schema(first.order, first.kinds)
    encoder: _Encoder | _Pair
    if split and isinstance(where, str) and two_cores(sum(sizes)) and (os.path.isfile(where) or not os.path.exists(where)):
        encoder = _Pair(where, schema)  # a file of its own beside it, joined at the end
    else:
        encoder = _Encoder(where, schema)
    groups = _Groups(encoder, {name: first.kinds.get(name, set()) for name in first.order})
    try:
        try:
            stats = _read(files, groups, columns, wanted, progress, warn, sizes)
            if groups.pending or not groups.groups:
                groups.spill()
        finally:
            encoder.close()
        if list(groups.order) != list(first.order) or final_schema(groups.order, groups.kinds) != schema:
            raise _Mismatch
    except _Mismatch as exc:
        exc.split = halved
        raise
    return stats


def _read(files: Sequence[tuple[str, str | None]], groups: _Groups, columns: dict[tuple[str, str], int],
          wanted: Collection[str], progress: Callable[[int], None] | None,
          warn: Callable[[str, str], None] | None, sizes: Sequence[int] | None = None) -> list[ParquetStats]:
    """Read the logs ``files`` into ``groups`` (each up to its size in ``sizes``, if given)."""
    stats = []
    for k, (path, node) in enumerate(files):
        parser = IncrementalParser(path, node=node)
        scanner = emit.ColumnEmitter(parser.classifier, parser.file, node, frozenset(wanted), columns)
        sink = _Sink(groups, wanted)
        # buffers read into again and again (C copies what a row group keeps), by a thread of
        # their own where the input is a file
        parts = blocks(path, progress, BULK_BLOCK_SIZE, warn=None if warn is None else _warn(warn, path),
                       reuse=True, ahead=True)
        for block in parts if sizes is None else limited(parts, sizes[k]):
            parser.feed_bulk(block, scanner, sink)
        sink.observe(parser.close())
        stats.append(ParquetStats(parser.stats.lines, scanner.taken, dict(scanner.by_kind), scanner.refused))
    return stats


def _warn(warn: Callable[[str, str], None], path: str) -> Callable[[str], None]:
    return lambda message: warn(path, message)
