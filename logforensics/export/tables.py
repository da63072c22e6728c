"""``parse --format parquet``: events to a Parquet file in row groups, in bounded memory.

A log's events have different fields, so the file's columns (provenance, then every field
name in the order first seen, then ``text``) and their types are known only at the end.
Events are therefore collected a row group at a time (``ROW_GROUP`` events), each group a
table of the columns it has values in, of the types its own values need, and kept on disk
(:class:`Spill`: Arrow IPC streams, LZ4-compressed); at the end the file is written by
``pyarrow.parquet.ParquetWriter`` of the file's schema (:func:`write_spilled`), one row group
per group, each given the columns it lacks (as nulls) and the file's type of each column
(:func:`conform`). Memory stays that of one row group, whatever the size of the log; the
disk holds the groups, compressed, until the file is written.

A column's type: ``int64`` if every value is an integer (of at most 64 bits: a larger one
makes the column text), ``double`` if every value is a number, ``bool`` if every value is a
boolean, otherwise ``string`` (``str()`` of the value). Mappings and lists (tracebacks'
frames, progress) are JSON text. Missing values are nulls.
"""

from __future__ import annotations

import json
import os
import queue
import tempfile
import threading
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import IO, Any

from ..events import Event

#: Events per row group: a few tens of MiB of Python objects while a group is collected.
ROW_GROUP = 16384

#: Values handed to the Parquet encoder at a time (its default: 1,024); fewer, larger calls.
WRITE_BATCH = 65536

_TYPES = ("bool", "int", "float", "str")


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if -(1 << 63) <= value < (1 << 63) else "str"  # beyond int64: its digits
    if isinstance(value, float):
        return "float"
    return "str"


def _final(kinds: set[str]) -> str:
    if kinds <= {"int"}:
        return "int"
    if kinds <= {"int", "float"}:
        return "float"
    if kinds == {"bool"}:
        return "bool"
    return "str"


def parquet_row(ev: Event, order: dict[str, None]) -> dict[str, Any]:
    """``ev``'s row of a Parquet file: ``to_dict`` with lists and objects as JSON text; each
    new column name is added to ``order`` (the file's columns, in the order first seen)."""
    row = ev.to_dict()
    for key, value in row.items():
        if isinstance(value, (dict, list)):
            row[key] = json.dumps(value, default=str)
        if key not in order:
            order[key] = None
    return row


def group_table(rows: list[dict[str, Any]], order: dict[str, None], kinds: dict[str, set[str]]) -> Any:
    """A row group of ``rows`` (``parquet_row``'s) as a table of the columns they have values
    in (in ``order``), each of the type its own values need; ``kinds`` gains the kinds seen."""
    import pyarrow as pa

    columns = {}
    for name in order:
        values = [row.get(name) for row in rows]
        seen = {_kind(v) for v in values if v is not None}
        if not seen:
            continue
        kinds.setdefault(name, set()).update(seen)
        kind = _final(seen)
        if kind == "str":
            values = [None if v is None else str(v) for v in values]
        elif kind == "float":
            values = [None if v is None else float(v) for v in values]
        columns[name] = from_values(values, kind)
    if not columns and rows:  # every value null: one column of nulls, so that the group keeps its rows
        only = next(iter(order))
        columns[only] = nulls(len(rows), arrow_types()[_final(kinds.get(only, set()))])
    return pa.table(columns)


def write_parquet(events: Iterable[Event], where: str | IO[bytes]) -> int:
    """Write ``events`` as Parquet to ``where`` (a path or a binary file); returns the rows.

    The row groups wait on disk (:class:`Spill`, in the system's temporary directory) until
    the columns are known.
    """
    order: dict[str, None] = {}  # every column, in the order first seen ("text" last)
    kinds: dict[str, set[str]] = {}
    rows = 0
    with Spill() as spill:
        batch: list[dict[str, Any]] = []
        for ev in events:
            batch.append(parquet_row(ev, order))
            if len(batch) >= ROW_GROUP:
                rows += len(batch)
                spill.add(group_table(batch, order, kinds))
                batch = []
        if batch:
            rows += len(batch)
            spill.add(group_table(batch, order, kinds))
        write_spilled(spill, order, kinds, where)
    return rows


def arrow_types() -> dict[str, Any]:
    """The Arrow type of each kind of value."""
    import pyarrow as pa

    return {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "str": pa.string()}


def from_values(values: list[Any], kind: str) -> Any:
    """An Arrow array of ``values`` (None: null), all of ``kind`` ("bool", "int", "float",
    "str"), built from buffers: ``pa.array`` would import pandas (a second and tens of MiB)."""
    import itertools
    from array import array

    import pyarrow as pa

    n = len(values)
    valid = bytearray((n + 7) // 8)
    nulls = 0
    for i, v in enumerate(values):
        if v is None:
            nulls += 1
        else:
            valid[i >> 3] |= 1 << (i & 7)
    bitmap = pa.py_buffer(bytes(valid)) if nulls else None
    if kind == "str":
        encoded = [b"" if v is None else v.encode("utf-8") for v in values]
        offsets = array("i", itertools.accumulate(map(len, encoded), initial=0))
        return pa.Array.from_buffers(pa.string(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))],
                                     null_count=nulls)
    if kind == "bool":
        bits = bytearray((n + 7) // 8)
        for i, v in enumerate(values):
            if v:
                bits[i >> 3] |= 1 << (i & 7)
        return pa.Array.from_buffers(pa.bool_(), n, [bitmap, pa.py_buffer(bytes(bits))], null_count=nulls)
    if kind == "int":
        data = array("q", (0 if v is None else v for v in values))
        return pa.Array.from_buffers(pa.int64(), n, [bitmap, pa.py_buffer(data)], null_count=nulls)
    doubles = array("d", (0.0 if v is None else v for v in values))
    return pa.Array.from_buffers(pa.float64(), n, [bitmap, pa.py_buffer(doubles)], null_count=nulls)


_NULLS: dict[Any, Any] = {}


def nulls(n: int, type_: Any) -> Any:
    """``n`` nulls of Arrow type ``type_``: a slice of one array kept per type, not fresh
    zeroed buffers each time (a row group lacks most of a log's columns)."""
    import pyarrow as pa

    have = _NULLS.get(type_)
    if have is None or len(have) < n:
        have = _NULLS[type_] = pa.nulls(max(n, 1 << 16), type_)
    return have.slice(0, n)


def final_schema(order: dict[str, None], kinds: dict[str, set[str]]) -> Any:
    """The file's schema: the columns in ``order`` (``text`` last), each of the type its
    ``kinds`` (those of its values, over the whole log) call for."""
    import pyarrow as pa

    types = arrow_types()
    names = [n for n in order if n != "text"] + (["text"] if "text" in order else [])
    return pa.schema([(n, types[_final(kinds.get(n, set()))]) for n in names])


def open_writer(where: str | IO[bytes], schema: Any, dictionary: Collection[str] | None = None,
                plain: Collection[str] = ()) -> Any:
    """A ``pyarrow.parquet.ParquetWriter`` of ``schema`` to ``where``, with the file's settings;
    ``dictionary``: the text columns given a dictionary (default: all but ``text``); ``plain``:
    columns written without compression (``incompressible``), the rest with Snappy."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    # Dictionary pages only for the short texts (kind, rank, stamp, file, ...): for numbers and
    # the records' texts they cost most of the writing time and save little. Integers are
    # delta-encoded (line numbers, counters: a few bits a value where plain is 8 bytes, and
    # cheaper to write than snappy on plain). Min/max statistics only of numbers and
    # booleans: those of texts (compared byte by byte) cost a tenth of the writing time, and
    # no query filters a text by its range. The Arrow schema is not stored: a column given as
    # a dictionary (a file's name) then reads back as the text it is, like every other.
    if dictionary is None:
        dictionary = [f.name for f in schema if f.name != "text" and f.type == pa.string()]
    statistics = [f.name for f in schema if f.type != pa.string() and not pa.types.is_dictionary(f.type)]
    encoding = {f.name: "DELTA_BINARY_PACKED" for f in schema if f.type == pa.int64()}
    return pq.ParquetWriter(where, schema, use_dictionary=list(dictionary), write_statistics=statistics,
                            column_encoding=encoding or None, write_batch_size=WRITE_BATCH, store_schema=False,
                            compression={f.name: "none" if f.name in plain else "snappy" for f in schema})


#: Values of a text column sampled (its first, nulls left out) to tell whether a dictionary pays.
DICTIONARY_SAMPLE = 4096


def mostly_distinct(column: Any) -> bool | None:
    """Whether the first values of a text ``column`` are mostly distinct (client addresses,
    request ids: a dictionary would be as large as the values, and building it costs more
    than it saves); None if too few of them are not null to tell."""
    sample = [v for v in column.slice(0, DICTIONARY_SAMPLE).to_pylist() if v is not None]
    if len(sample) < 64:
        return None
    return 2 * len(set(sample)) > len(sample)


#: Bytes of a text column's values that Snappy compresses to tell whether it pays, and the
#: share of them it must save: a log's text shrinks to a sixth (at about 700 MB/s), random
#: words not at all, random bytes (each undecodable byte a U+FFFD) by a third but at 280 MB/s,
#: where writing the bytes it would save takes a fraction of that time (``bench/README.md``).
COMPRESS_SAMPLE = 1 << 16
COMPRESS_SAVING = 0.5


def incompressible(column: Any) -> bool:
    """Whether Snappy saves less than ``COMPRESS_SAVING`` of the first ``COMPRESS_SAMPLE``
    bytes of the values of the text ``column`` (an Arrow string array or chunked array)."""
    import struct

    import pyarrow as pa

    sample: list[bytes] = []
    size = 0
    for chunk in column.chunks if isinstance(column, pa.ChunkedArray) else [column]:
        if size >= COMPRESS_SAMPLE:
            break
        if not len(chunk) or chunk.null_count == len(chunk):
            continue
        _, offsets, data = chunk.buffers()
        first, = struct.unpack_from("<i", offsets, 4 * chunk.offset)
        last, = struct.unpack_from("<i", offsets, 4 * (chunk.offset + len(chunk)))
        take = min(last - first, COMPRESS_SAMPLE - size)
        if take <= 0:  # empty strings only
            continue
        sample.append(data[first:first + take].to_pybytes())
        size += take
    if size < COMPRESS_SAMPLE // 16:
        return False  # too little to tell: compressed, as by default
    data = b"".join(sample)
    return len(pa.Codec("snappy").compress(data, asbytes=True)) > (1 - COMPRESS_SAVING) * len(data)


def conform(part: Any, schema: Any) -> Any:
    """A row group's table ``part`` (each column of the type its own values need) as a table
    of ``schema``: the columns it lacks as nulls, each column of the file's type (a number or
    a boolean in a text column as ``str()`` writes it)."""
    import pyarrow as pa

    cols = []
    for field in schema:
        if field.name not in part.column_names:
            cols.append(nulls(part.num_rows, field.type))
            continue
        col = part.column(field.name)
        if col.type != field.type:
            if col.null_count == len(col):
                col = nulls(len(col), field.type)
            else:
                if _value_type(field.type) == pa.string() and _value_type(col.type) != pa.string():
                    col = from_values([None if v is None else str(v) for v in col.to_pylist()], "str")
                if col.type != field.type:
                    col = col.cast(field.type)  # int64 -> double, or a dictionary's values as text
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=schema)


def _value_type(t: Any) -> Any:
    """The type of a column's values: a dictionary column's is its values'."""
    return getattr(t, "value_type", t)


#: How the groups are compressed on disk while they wait for the file's schema: LZ4 is fast
#: enough not to be seen beside the scan and the encoder, and keeps the disk's share to a
#: fraction of the groups' size.
SPILL_COMPRESSION = "lz4"


class Behind:
    """Calls of ``work`` made by a thread of its own, in the order given, while the caller goes
    on (pyarrow lets the GIL go while it compresses, decompresses and encodes): an item is
    handed over only when the thread is free, so memory holds the one being worked on and
    the one the caller is making. An error of ``work`` is raised to the caller at its next
    call or at ``close``; later calls are then dropped, so that nothing waits for a thread
    that waits for it."""

    _END = object()

    def __init__(self, work: Callable[[Any], None]) -> None:
        self.work = work
        self.queue: queue.Queue[Any] = queue.Queue()
        self.idle = threading.Semaphore(1)  # released when an item is done
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="parquet-behind", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (item := self.queue.get()) is not self._END:
            if self.error is None:
                try:
                    self.work(item)
                except BaseException as exc:  # handed to the caller's thread
                    self.error = exc
            del item  # not kept while the next is waited for
            self.idle.release()

    def __call__(self, item: Any) -> None:
        self.idle.acquire()
        if self.error is not None:
            self.idle.release()
            raise self.error
        self.queue.put(item)

    def close(self) -> None:
        """Wait for the last call; raise its error, if any."""
        if self.thread.is_alive():
            self.queue.put(self._END)
            self.thread.join()
        if self.error is not None:
            raise self.error

    def __enter__(self) -> Behind:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        try:
            self.close()
        except BaseException:
            if kind is None:  # the caller's own error, if any, is the one raised
                raise


class Spill:
    """Row groups (Arrow tables of the columns each has values in, each column of the type its
    own values need) kept on disk until the file's schema is known: one file of Arrow IPC
    streams, one a group, in a temporary directory of the system's, removed on ``close``;
    each written by a thread of its own (:class:`Behind`) while the next is built.

    It also judges the text columns as they come, for :func:`write_spilled`'s settings:
    whether a dictionary pays (not for values that are mostly distinct, ``mostly_distinct``,
    decided on the first group with enough of them), and, for text without a dictionary,
    whether Snappy pays (``incompressible``, judged on each group and decided by the bytes
    of the groups either way: Parquet has one codec a column for the whole file)."""

    def __init__(self) -> None:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        self._dir = tempfile.TemporaryDirectory(prefix="logforensics-parquet-")
        self.path = os.path.join(self._dir.name, "groups.arrow")
        self.sink: Any = pa.OSFile(self.path, "wb")
        self.options = ipc.IpcWriteOptions(compression=SPILL_COMPRESSION)
        self.starts: list[int] = []  # where each group's stream begins
        self.dictionaries: set[str] = set()  # columns given as dictionary arrays (a file's name)
        self.texts: set[str] = set()  # columns given as text
        self.distinct: dict[str, bool] = {}
        self.compressible: dict[str, list[int]] = {}  # text without a dictionary: [bytes Snappy shrinks, bytes it does not]
        self.behind = Behind(self._write)

    def add(self, table: Any) -> None:
        """Keep the row group ``table``."""
        if table.num_rows:
            self.behind(table)

    def _write(self, table: Any) -> None:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        for field in table.schema:
            name = field.name
            if pa.types.is_dictionary(field.type):
                self.dictionaries.add(name)
                continue
            if field.type != pa.string():
                continue
            self.texts.add(name)
            column = table.column(name)
            if name != "text" and name not in self.distinct and (distinct := mostly_distinct(column)) is not None:
                self.distinct[name] = distinct
            if name == "text" or self.distinct.get(name):
                self.compressible.setdefault(name, [0, 0])[incompressible(column)] += column.nbytes
        self.starts.append(self.sink.tell())
        with ipc.new_stream(self.sink, table.schema, options=self.options) as stream:
            stream.write_table(table)

    def __iter__(self) -> Iterator[Any]:
        """The groups kept, in order, one at a time."""
        import pyarrow as pa
        import pyarrow.ipc as ipc

        self.finish()
        with pa.OSFile(self.path) as source:  # read, not mapped: the pages read are not kept
            for start in self.starts:
                source.seek(start)
                with ipc.open_stream(source) as reader:
                    table = reader.read_all()
                yield table

    def finish(self) -> None:
        """Wait for the last group to be written (and judged); raise the writing's error, if any."""
        self.behind.close()
        self.sink.close()

    def schema(self, order: dict[str, None], kinds: dict[str, set[str]]) -> Any:
        """The file's schema (``final_schema``), a text column that came only as dictionary
        arrays (a file's name, the node: one value a file) kept as one, written as it is."""
        import pyarrow as pa

        schema = final_schema(order, kinds)
        for name in self.dictionaries - self.texts:
            at = schema.get_field_index(name)
            if at >= 0 and schema.field(at).type == pa.string():
                schema = schema.set(at, pa.field(name, pa.dictionary(pa.int64(), pa.string())))
        return schema

    def close(self) -> None:
        try:
            self.behind.close()
        finally:
            self.sink.close()
            self._dir.cleanup()

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        try:
            self.close()
        except BaseException:
            if kind is None:
                raise


def write_spilled(spill: Spill, order: dict[str, None], kinds: dict[str, set[str]], where: str | IO[bytes]) -> int:
    """Write the groups of ``spill`` to ``where`` (a path or a binary file) as one Parquet file of
    the columns ``order`` and the types their ``kinds`` call for, a row group each; the rows."""
    import pyarrow as pa

    spill.finish()
    schema = spill.schema(order, kinds)
    texts = [f.name for f in schema if f.type == pa.string()]
    dictionary = [name for name in texts if name != "text" and not spill.distinct.get(name)]
    dictionary += [f.name for f in schema if pa.types.is_dictionary(f.type)]
    plain = [name for name, (shrinks, not_) in spill.compressible.items() if name in texts and not_ > shrinks]
    rows = 0
    with open_writer(where, schema, dictionary, plain) as writer:
        # each group read back and conformed while the one before is encoded
        with Behind(lambda table: writer.write_table(table, row_group_size=table.num_rows)) as encode:
            for group in spill:
                encode(conform(group, schema))
                rows += group.num_rows
    return rows
