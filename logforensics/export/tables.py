"""``parse --format parquet``: events to one Parquet file of the declared schema, a row group at a time.

The file's columns and their types are the event schema's (``events.schema.table_schema``):
provenance, every declared field in name order, the record's ``text`` and ``extra`` (what
the schema cannot hold, as JSON). They are known before a line is read, so each row group
is written as soon as it is full (:class:`ParquetOut`): memory is one group, whatever the
size of the log, and nothing waits on disk. A group carries every column; those of kinds
it lacks are nulls, which Parquet stores in a few bytes.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from functools import cache
from typing import IO, Any, TypeVar

from ..events import Event
from ..events.schema import PROVENANCE, TRAILER, field_types, table_schema
from ..events.types import BOOL, FLOAT, INT, STR, Type, fits

#: Events per row group: a few tens of MiB of Python objects while a group is collected.
ROW_GROUP = 16384

#: Values handed to the Parquet encoder at a time (its default: 1,024); fewer, larger calls.
WRITE_BATCH = 65536

#: The text columns written as a dictionary array (one value a file), not a copy a row.
CONSTANTS = ("file", "node")

#: ``from_values``'s name of each primitive declared type.
_PRIMITIVE = {INT: "int", FLOAT: "float", STR: "str", BOOL: "bool"}


def file_schema() -> Any:
    """The file's schema: ``table_schema`` with the file and the node as dictionary columns."""
    import pyarrow as pa

    schema = table_schema()
    for name in CONSTANTS:
        schema = schema.set(schema.get_field_index(name), pa.field(name, pa.dictionary(pa.int64(), pa.string())))
    return schema


@cache
def declared_types() -> dict[str, Type]:
    """Every column's declared type (``text`` and ``extra`` are text)."""
    return {**dict(PROVENANCE), **field_types(), **dict(TRAILER)}


def events_table(events: Sequence[Event]) -> Any:
    """``events`` (of any kinds) as a table of :func:`file_schema`, in their order."""
    import pyarrow as pa

    schema = file_schema()
    have = event_columns(events)
    return pa.Table.from_arrays([have.get(f.name) or nulls(len(events), f.type) for f in schema], schema=schema)


def event_columns(events: Sequence[Event]) -> dict[str, Any]:
    """The columns of :func:`file_schema` that ``events`` (of any kinds) have values in, as
    Arrow arrays of the file's types. A value its field's type cannot hold, and a field the
    schema lacks, go to ``extra`` as JSON."""
    schema = file_schema()
    types = declared_types()
    n = len(events)
    present: dict[str, list[Any]] = {}
    extra: list[dict[str, Any] | None] = [None] * n
    for i, ev in enumerate(events):
        for key, value in ev.fields.items():
            t = types.get(key)
            if t is None or key in _OWN or not fits(value, t):
                extra[i] = {**(extra[i] or {}), key: value}
                continue
            column = present.get(key)
            if column is None:
                column = present[key] = [None] * n
            column[i] = value
    present.update({
        "kind": [ev.kind for ev in events], "file": [ev.file for ev in events], "line": [ev.line for ev in events],
        "end_line": [ev.line if ev.end_line is None else ev.end_line for ev in events],
        "rank": [ev.rank for ev in events], "ts": [ev.ts for ev in events], "node": [ev.node for ev in events],
        "text": [ev.text for ev in events],
        "extra": [None if e is None else json.dumps(e, default=str, ensure_ascii=False) for e in extra],
    })
    out = {}
    for name, values in present.items():
        if all(v is None for v in values):
            continue
        if name in CONSTANTS:
            out[name] = encode_constant(values)
        else:
            out[name] = column_of(values, types[name], schema.field(name).type)
    return out


#: Names of an event's own attributes: a field of one of these names goes to ``extra``.
_OWN = frozenset(name for name, _ in PROVENANCE) | {"text", "extra"}


def column_of(values: list[Any], t: Type, arrow_type: Any) -> Any:
    """An Arrow array of ``values`` (each fits ``t``; None: null) of ``arrow_type``."""
    import pyarrow as pa

    kind = _PRIMITIVE.get(t) if isinstance(t, str) else None
    if kind is None:  # a list or a struct: few values, pyarrow converts them
        return pa.array(values, arrow_type)
    if kind == "float":
        values = [None if v is None else float(v) for v in values]
    return from_values(values, kind)


def encode_constant(values: list[str | None]) -> Any:
    """A text column of few values (a file's name, the node) as a dictionary array."""
    import pyarrow as pa

    distinct = list(dict.fromkeys(v for v in values if v is not None))
    where = {v: i for i, v in enumerate(distinct)}
    return pa.DictionaryArray.from_arrays(from_values([None if v is None else where[v] for v in values], "int"),
                                          from_values(distinct, "str"))


class _Closing:
    """A context manager that ``close()``s on leaving; an error of ``close`` is raised only
    when the block itself raised none (the caller's own error is the one that counts)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        try:
            self.close()
        except BaseException:
            if kind is None:
                raise


_C = TypeVar("_C", bound=_Closing)


def write_parquet(events: Iterable[Event], where: str | IO[bytes]) -> int:
    """Write ``events`` as Parquet to ``where`` (a path or a binary file); returns the rows."""
    rows = 0
    with ParquetOut(where) as out:
        batch: list[Event] = []
        for ev in events:
            batch.append(ev)
            if len(batch) >= ROW_GROUP:
                rows += len(batch)
                out.write(events_table(batch))
                batch = []
        if batch:
            rows += len(batch)
            out.write(events_table(batch))
    return rows


class ParquetOut(_Closing):
    """One Parquet file of :func:`file_schema`, a row group for each table written.

    The writer's settings are judged on the first group: which text columns get a
    dictionary (not those whose values are mostly distinct: ``mostly_distinct``), and
    whether the records' text is written without compression (``incompressible``). The
    groups are encoded by a thread of their own (:class:`Behind`) while the next is built.
    """

    def __init__(self, where: str | IO[bytes]) -> None:
        self.where = where
        self.schema = file_schema()
        self.writer: Any = None
        self.behind: Behind | None = None
        self.rows = 0

    def _open(self, first: Any | None) -> None:
        import pyarrow as pa

        texts = [f.name for f in self.schema if f.type == pa.string()]
        dictionary = [name for name in texts if name not in ("text", "extra")
                      and not (first is not None and mostly_distinct(first.column(name)))]
        dictionary += list(CONSTANTS)
        plain = [name for name in ("text", "extra") if first is not None and incompressible(first.column(name))]
        self.writer = open_writer(self.where, self.schema, dictionary, plain)
        writer = self.writer
        self.behind = Behind(lambda table: writer.write_table(table, row_group_size=table.num_rows))

    def write(self, table: Any) -> None:
        """Write ``table`` (of the file's schema) as the next row group."""
        if not table.num_rows:
            return
        if self.writer is None:
            self._open(table)
        assert self.behind is not None
        self.behind(table)
        self.rows += table.num_rows

    def close(self) -> None:
        """Wait for the last group and end the file (a file of the schema and no group if none was written)."""
        if self.writer is None:
            self._open(None)
        try:
            assert self.behind is not None
            self.behind.close()
        finally:
            self.writer.close()


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
    statistics = [f.name for f in schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
                  or pa.types.is_boolean(f.type)]
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


class Behind(_Closing):
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


