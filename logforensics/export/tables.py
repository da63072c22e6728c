"""``parse --format parquet``: events to a Parquet file in row groups, in bounded memory.

A log's events have different fields, so the file's columns (provenance, then every field
name in the order first seen, then ``text``) and their types are known only at the end.
Events are therefore collected a row group at a time (``ROW_GROUP`` events) and each group
is written to a temporary Arrow stream with the types its own values need; at the end
every group is read back one at a time, given the columns it lacks (as nulls) and the
final type of each column, and written as one row group of the output. Memory stays that
of one row group, whatever the size of the log.

A column's type: ``int64`` if every value is an integer (of at most 64 bits: a larger one
makes the column text), ``double`` if every value is a number, ``bool`` if every value is a boolean, otherwise ``string`` (``str()`` of the
value). Mappings and lists (tracebacks' frames, progress) are JSON text. Missing values
are nulls.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Collection, Iterable
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


def write_parquet(events: Iterable[Event], where: str | IO[bytes]) -> int:
    """Write ``events`` as Parquet to ``where`` (a path or a binary file); returns the rows.

    The row groups wait in a temporary directory (the system's) until the columns are known.
    """
    import pyarrow as pa
    import pyarrow.ipc as ipc

    arrow_type = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "str": pa.string()}
    order: dict[str, None] = {}  # every column, in the order first seen ("text" last)
    kinds: dict[str, set[str]] = {}
    rows = 0
    with tempfile.TemporaryDirectory(prefix="logforensics-parquet-") as tmp:
        groups: list[str] = []

        def spill(batch: list[dict[str, Any]]) -> None:
            names = [n for n in order if any(n in row for row in batch)]
            columns = {}
            for name in names:
                values = [row.get(name) for row in batch]
                seen = {_kind(v) for v in values if v is not None}
                kinds.setdefault(name, set()).update(seen)
                kind = _final(seen)
                if kind == "str":
                    values = [None if v is None else str(v) for v in values]
                elif kind == "float":
                    values = [None if v is None else float(v) for v in values]
                columns[name] = pa.array(values, arrow_type[kind])
            table = pa.table(columns)
            file = os.path.join(tmp, f"{len(groups)}.arrow")
            with ipc.new_stream(file, table.schema) as out:
                out.write_table(table)
            groups.append(file)

        batch: list[dict[str, Any]] = []
        for ev in events:
            batch.append(parquet_row(ev, order))
            if len(batch) >= ROW_GROUP:
                rows += len(batch)
                spill(batch)
                batch = []
        if batch or not groups:
            rows += len(batch)
            spill(batch)
        write_groups(groups, order, kinds, where)
    return rows


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

    arrow_type = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "str": pa.string()}
    names = [n for n in order if n != "text"] + (["text"] if "text" in order else [])
    return pa.schema([(n, arrow_type[_final(kinds.get(n, set()))]) for n in names])


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
    # no query filters a text by its range.
    if dictionary is None:
        dictionary = [f.name for f in schema if f.name != "text" and f.type == pa.string()]
    statistics = [f.name for f in schema if f.type != pa.string() and not pa.types.is_dictionary(f.type)]
    encoding = {f.name: "DELTA_BINARY_PACKED" for f in schema if f.type == pa.int64()}
    return pq.ParquetWriter(where, schema, use_dictionary=list(dictionary), write_statistics=statistics,
                            column_encoding=encoding or None, write_batch_size=WRITE_BATCH,
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
    of ``schema``: the columns it lacks as nulls, each column of the file's type."""
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
            elif field.type == pa.string():
                col = from_values([None if v is None else str(v) for v in col.to_pylist()], "str")
            else:
                col = col.cast(field.type)
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=schema)


def write_groups(groups: list[str], order: dict[str, None], kinds: dict[str, set[str]],
                 where: str | IO[bytes]) -> None:
    """Write the spilled row groups (Arrow stream files, removed once read) as one Parquet
    file of ``final_schema(order, kinds)``."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    schema = final_schema(order, kinds)
    with open_writer(where, schema) as writer:
        for file in groups:
            with pa.memory_map(file) as source, ipc.open_stream(source) as reader:
                part = reader.read_all()
            os.unlink(file)
            writer.write_table(conform(part, schema))
