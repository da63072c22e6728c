"""One Parquet file assembled from row groups encoded each as a file of its own columns.

A Parquet file's schema is written in its footer, at the end, and every row group has its
columns; but which columns a log has, and of what type, is known only when its last line
is read. So ``parse --format parquet`` reads a log once: pyarrow encodes every row group
as a small Parquet file of the columns that group has, of the types its values call for
(:class:`Assembler` appends its column chunks to the output, their byte offsets moved to
where they now are), and when the last line has fixed the file's schema the footer lists
every group's chunks in the file's column order. What a group lacks is a chunk of nulls; a
column whose type the file widened (an ``int`` that is a ``double`` or a ``string`` in
the file) is read back from the output and encoded again, as ``tables.conform`` converts
it. Nothing of a group is kept in memory once it is written: its chunks' metadata waits in
a temporary file, and the footer is written from there a group at a time.

A footer is a Thrift struct (``FileMetaData``) in the compact protocol. The row group's
chunks are copied byte for byte, only their offsets rewritten (:func:`group_chunks`, which
skips over everything else); the rest is read into a tree of fields and written back
field by field (``tests/test_parquet_assemble.py`` checks both against each other).
"""

from __future__ import annotations

import os
import pickle
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

MAGIC = b"PAR1"

# compact protocol types
_TRUE, _FALSE, _I8, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)

#: Field ids (parquet.thrift) of the byte offsets in a row group's metadata.
_FILE_ROW_GROUPS, _FILE_NUM_ROWS = 4, 3
_GROUP_COLUMNS, _GROUP_BYTES, _GROUP_ROWS, _GROUP_FILE_OFFSET, _GROUP_COMPRESSED = 1, 2, 3, 5, 6
_CHUNK_OFFSETS = (2, 4, 6)  # file_offset, offset_index_offset, column_index_offset
_CHUNK_META = 3
_META_OFFSETS = (9, 10, 11, 14)  # data_page, index_page, dictionary_page, bloom_filter offsets

Field = list[Any]  # [field id, type, value]; a struct is a list of fields, a list ("L", type, items)


class AssembleError(Exception):
    """Bytes that are not the Parquet pyarrow writes."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = value = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    def zigzag(self) -> int:
        v = self.varint()
        return (v >> 1) ^ -(v & 1)

    def value(self, type_: int) -> Any:
        if type_ in (_TRUE, _FALSE):  # a list's element (a field's bool is in its header)
            return self.byte() == _TRUE
        if type_ == _I8:
            return self.byte()
        if type_ in (_I16, _I32, _I64):
            return self.zigzag()
        if type_ == _DOUBLE:
            self.pos += 8
            return self.data[self.pos - 8:self.pos]
        if type_ == _BINARY:
            n = self.varint()
            self.pos += n
            return self.data[self.pos - n:self.pos]
        if type_ in (_LIST, _SET):
            head = self.byte()
            size, elem = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            return ("L", elem, [self.value(elem) for _ in range(size)])
        if type_ == _MAP:
            size = self.varint()
            kv = self.byte() if size else 0
            return ("M", kv, [(self.value(kv >> 4), self.value(kv & 0x0F)) for _ in range(size)])
        if type_ == _STRUCT:
            return self.struct()
        raise AssembleError(f"unknown Thrift type {type_}")

    def struct(self) -> list[Field]:
        fields: list[Field] = []
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return fields
            type_, delta = head & 0x0F, head >> 4
            fid = last + delta if delta else self.zigzag()
            last = fid
            fields.append([fid, type_, True if type_ == _TRUE else False if type_ == _FALSE else self.value(type_)])


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, v: int) -> None:
        while v >= 0x80:
            self.out.append((v & 0x7F) | 0x80)
            v >>= 7
        self.out.append(v)

    def zigzag(self, v: int) -> None:
        self.varint((v << 1) ^ (v >> 63))

    def value(self, type_: int, v: Any) -> None:
        if type_ in (_TRUE, _FALSE):
            self.out.append(_TRUE if v else _FALSE)
        elif type_ == _I8:
            self.out.append(v)
        elif type_ in (_I16, _I32, _I64):
            self.zigzag(v)
        elif type_ == _DOUBLE:
            self.out += v
        elif type_ == _BINARY:
            self.varint(len(v))
            self.out += v
        elif type_ in (_LIST, _SET):
            _, elem, items = v
            self.list_head(elem, len(items))
            for item in items:
                self.value(elem, item)
        elif type_ == _MAP:
            _, kv, items = v
            self.varint(len(items))
            if items:
                self.out.append(kv)
            for key, val in items:
                self.value(kv >> 4, key)
                self.value(kv & 0x0F, val)
        else:
            self.struct(v)

    def list_head(self, elem: int, size: int) -> None:
        if size < 15:
            self.out.append(size << 4 | elem)
        else:
            self.out.append(0xF0 | elem)
            self.varint(size)

    def field_head(self, fid: int, type_: int, last: int) -> None:
        if 0 < fid - last <= 15:
            self.out.append((fid - last) << 4 | type_)
        else:
            self.out.append(type_)
            self.zigzag(fid)

    def struct_field(self, fid: int, type_: int, v: Any, last: int) -> None:
        """One field of a struct whose previous field is ``last``."""
        if type_ in (_TRUE, _FALSE):
            type_ = _TRUE if v else _FALSE
        self.field_head(fid, type_, last)
        if type_ not in (_TRUE, _FALSE):
            self.value(type_, v)

    def struct(self, fields: list[Field]) -> None:
        last = 0
        for fid, type_, v in fields:
            self.struct_field(fid, type_, v, last)
            last = fid
        self.out.append(0)


def read_footer(data: bytes) -> list[Field]:
    """The ``FileMetaData`` fields of a footer's bytes."""
    return _Reader(data).struct()


def write_footer(fields: list[Field]) -> bytes:
    """The bytes of ``FileMetaData`` fields (those :func:`read_footer` read: the same bytes)."""
    w = _Writer()
    w.struct(fields)
    return bytes(w.out)


def _get(fields: list[Field], fid: int) -> Field | None:
    return next((f for f in fields if f[0] == fid), None)


def _fields(w: _Writer, fields: list[Field], last: int) -> int:
    """Write ``fields`` of a struct after the field ``last`` (no stop byte); the last id."""
    for fid, type_, v in fields:
        w.struct_field(fid, type_, v, last)
        last = fid
    return last


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _zigzag(v: int) -> bytes:
    w = _Writer()
    w.zigzag(v)
    return bytes(w.out)


def _skip(data: bytes, pos: int, type_: int) -> int:
    """Where the value of Thrift type ``type_`` at ``pos`` ends."""
    if type_ in (_I16, _I32, _I64):
        while data[pos] & 0x80:
            pos += 1
        return pos + 1
    if type_ == _BINARY:
        n, pos = _varint(data, pos)
        return pos + n
    if type_ == _STRUCT:
        return _skip_struct(data, pos)
    if type_ in (_LIST, _SET):
        head = data[pos]
        pos += 1
        size, elem = head >> 4, head & 0x0F
        if size == 15:
            size, pos = _varint(data, pos)
        for _ in range(size):
            pos = _skip(data, pos, elem)
        return pos
    if type_ in (_TRUE, _FALSE, _I8):
        return pos + 1
    if type_ == _DOUBLE:
        return pos + 8
    if type_ == _MAP:
        size, pos = _varint(data, pos)
        if size:
            kv = data[pos]
            pos += 1
            for _ in range(size):
                pos = _skip(data, _skip(data, pos, kv >> 4), kv & 0x0F)
        return pos
    raise AssembleError(f"unknown Thrift type {type_}")


def _skip_struct(data: bytes, pos: int) -> int:
    while True:
        head = data[pos]
        pos += 1
        if head == 0:
            return pos
        if not head >> 4:
            pos = _skip(data, pos, _I16)
        type_ = head & 0x0F
        if type_ not in (_TRUE, _FALSE):
            pos = _skip(data, pos, type_)


def _walk(data: bytes, pos: int, shift: frozenset[int], by: int, out: list[bytes],
          into: dict[int, Any] | None = None, seen: dict[int, int] | None = None) -> int:
    """Copy the struct at ``pos`` to ``out``, ``by`` added to its i64 fields ``shift`` (where
    not 0) and to the offsets of a column chunk's metadata (field 3, into which ``into``
    says to walk); the values of its i64 fields are kept in ``seen``; returns its end."""
    copied = pos
    last = 0
    while True:
        head = data[pos]
        pos += 1
        if head == 0:
            out.append(data[copied:pos])
            return pos
        type_, delta = head & 0x0F, head >> 4
        if delta:
            fid = last + delta
        else:
            raw, pos = _varint(data, pos)
            fid = (raw >> 1) ^ -(raw & 1)
        last = fid
        if type_ == _I64 and seen is not None:
            raw, end = _varint(data, pos)
            value = (raw >> 1) ^ -(raw & 1)
            seen[fid] = value
            if fid in shift and value:
                out.append(data[copied:pos])
                out.append(_zigzag(value + by))
                seen[fid] = value + by
                copied = end
            pos = end
        elif type_ == _STRUCT and into is not None and fid in into:
            out.append(data[copied:pos])
            inner: dict[int, int] = {}
            pos = _walk(data, pos, into[fid], by, out, None, inner)
            seen = {} if seen is None else seen
            seen.update({-k: v for k, v in inner.items()})  # the inner struct's fields, negated
            copied = pos
        elif type_ not in (_TRUE, _FALSE):
            pos = _skip(data, pos, type_)


#: ColumnMetaData's total_uncompressed_size, total_compressed_size, data_page_offset and
#: dictionary_page_offset, as :func:`_walk` keeps them (negated: the inner struct's).
_UNCOMPRESSED, _COMPRESSED, _DATA_PAGE, _DICT_PAGE = -6, -7, -9, -11


@dataclass(frozen=True)
class Chunk:
    """A column chunk's metadata (``ColumnChunk``, its offsets where its bytes now are) and
    where its bytes begin and how many there are."""

    meta: bytes
    start: int
    size: int
    uncompressed: int


@dataclass(frozen=True)
class Group:
    """A row group as written: its rows and its columns' chunks, by name, with their Arrow
    type and whether the group has only nulls in them."""

    rows: int
    columns: dict[str, tuple[str, bool, Chunk]]


def group_chunks(footer: bytes, by: int) -> list[Chunk]:
    """The column chunks of the one row group of a file's ``footer``, in its schema's order,
    each with ``by`` added to its byte offsets: where they are once its bytes are moved."""
    pos = 0
    last = 0
    while True:
        head = footer[pos]
        pos += 1
        if head == 0:
            raise AssembleError("a footer without row groups")
        type_, delta = head & 0x0F, head >> 4
        fid = last + delta if delta else _varint(footer, pos)[0] >> 1
        if not delta:
            pos = _skip(footer, pos, _I16)
        last = fid
        if fid == _FILE_ROW_GROUPS:
            break
        if type_ not in (_TRUE, _FALSE):
            pos = _skip(footer, pos, type_)
    head = footer[pos]
    if head >> 4 != 1:
        raise AssembleError("not a footer of one row group")
    pos += 1
    if footer[pos] != (_GROUP_COLUMNS << 4 | _LIST):
        raise AssembleError("a row group that does not begin with its columns")
    pos += 1
    head = footer[pos]
    pos += 1
    count = head >> 4
    if count == 15:
        count, pos = _varint(footer, pos)
    chunks = []
    shift, into = frozenset(_CHUNK_OFFSETS), {_CHUNK_META: frozenset(_META_OFFSETS)}
    for _ in range(count):
        out: list[bytes] = []
        seen: dict[int, int] = {}
        pos = _walk(footer, pos, shift, by, out, into, seen)
        start = seen[_DATA_PAGE] if not seen.get(_DICT_PAGE) else min(seen[_DATA_PAGE], seen[_DICT_PAGE])
        chunks.append(Chunk(b"".join(out), start, seen[_COMPRESSED], seen[_UNCOMPRESSED]))
    return chunks


def _split(encoded: Any) -> tuple[memoryview, bytes]:
    """A Parquet file's bytes: its column chunks (after the magic) and its footer."""
    data = memoryview(encoded)
    if len(data) < 12 or bytes(data[:4]) != MAGIC or bytes(data[-4:]) != MAGIC:
        raise AssembleError("not a Parquet file")
    (length,) = struct.unpack_from("<I", data, len(data) - 8)
    end = len(data) - 8 - length
    if end < 4 or not length:
        raise AssembleError("a Parquet footer that its file cannot hold")
    return data[4:end], bytes(data[end:len(data) - 8])


def encoded(table: Any, schema: Any = None) -> Any:
    """``table`` as the bytes of a Parquet file of the file's settings (``tables.open_writer``)."""
    import pyarrow as pa

    from .tables import open_writer

    sink = pa.BufferOutputStream()
    with open_writer(sink, table.schema if schema is None else schema) as writer:
        if table is not None and table.num_rows:
            writer.write_table(table)
    return sink.getvalue()


class Assembler:
    """The output file, written a row group at a time (:meth:`add`) and ended by the footer
    of the schema the last group fixed (:meth:`close`). ``out`` is a binary file that can be
    read back (a chunk whose type the file widened is read from it)."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        out.write(MAGIC)
        self.pos = len(MAGIC)
        self.meta = tempfile.TemporaryFile(prefix="logforensics-parquet-")
        self.groups = 0

    def add(self, file: Any, types: dict[str, tuple[str, bool]]) -> None:
        """Append the row group of the Parquet file ``file`` (one row group, the columns
        ``types``: name -> (Arrow type, only nulls) in the order of its schema)."""
        data, footer = _split(file)
        rows = _rows_of(footer)
        if not rows:
            return  # pyarrow writes no row group of no rows
        chunks = group_chunks(footer, self.pos - len(MAGIC))
        if len(chunks) != len(types):
            raise AssembleError("a row group whose chunks are not its columns")
        self.out.write(data)
        self.pos += len(data)
        group = Group(rows, {name: (type_, empty, chunk) for (name, (type_, empty)), chunk in zip(types.items(), chunks)})
        pickle.dump(group, self.meta, protocol=pickle.HIGHEST_PROTOCOL)
        self.groups += 1

    def _append(self, table: Any) -> Chunk:
        """Encode the one-column ``table`` and append its chunk; the chunk."""
        data, footer = _split(encoded(table))
        (chunk,) = group_chunks(footer, self.pos - len(MAGIC))
        self.out.write(data)
        self.pos += len(data)
        return chunk

    def _read_back(self, name: str, type_: Any, chunk: Chunk, rows: int) -> Any:
        """The values of a chunk already written, as an Arrow array of ``type_``."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.out.flush()
        self.out.seek(chunk.start)
        data = self.out.read(chunk.size)
        self.out.seek(0, os.SEEK_END)
        template = read_footer(_split(encoded(pa.table({name: pa.nulls(0, type_)})))[1])
        meta = read_footer(chunk.meta)
        group: list[Field] = [[_GROUP_COLUMNS, _LIST, ("L", _STRUCT, [meta])],
                              [_GROUP_BYTES, _I64, chunk.uncompressed], [_GROUP_ROWS, _I64, rows]]
        _moved(group, len(MAGIC) - chunk.start)
        for field in template:
            if field[0] == _FILE_NUM_ROWS:
                field[2] = rows
            elif field[0] == _FILE_ROW_GROUPS:
                field[2] = ("L", _STRUCT, [group])
        footer = write_footer(template)
        mini = MAGIC + data + footer + struct.pack("<I", len(footer)) + MAGIC
        return pq.read_table(pa.BufferReader(mini)).column(name)

    def close(self, schema: Any) -> int:
        """Write every group's chunks in the order of ``schema`` (the file's: a group's
        missing columns as nulls, a widened type read back and converted) and the footer;
        returns the rows written."""
        import pyarrow as pa

        from .tables import conform, nulls

        by_type = {str(f.type): f.type for f in schema}
        template = read_footer(_split(encoded(pa.table({f.name: pa.nulls(0, f.type) for f in schema},
                                                       schema=schema)))[1])
        rows = 0
        groups = tempfile.TemporaryFile(prefix="logforensics-parquet-")  # each group's RowGroup struct
        try:
            for group in self._stored():
                chunks = []
                for field in schema:
                    have = group.columns.get(field.name)
                    if have is not None and have[0] == str(field.type):
                        chunks.append(have[2])
                    elif have is None or have[1]:
                        chunks.append(self._append(pa.table({field.name: nulls(group.rows, field.type)})))
                    else:
                        part = pa.table({field.name: self._read_back(field.name, by_type.get(have[0]) or _arrow(have[0]),
                                                                     have[2], group.rows)})
                        chunks.append(self._append(conform(part, pa.schema([field]))))
                groups.write(_row_group(chunks, group.rows))
                rows += group.rows
            self._footer(template, rows, groups)
        finally:
            groups.close()
            self.meta.close()
        return rows

    def _stored(self) -> Iterator[Group]:
        self.meta.seek(0)
        for _ in range(self.groups):
            yield pickle.load(self.meta)

    def _footer(self, template: list[Field], rows: int, groups: IO[bytes]) -> None:
        """Write the footer: ``template``'s fields (the file's schema and settings), ``rows``,
        and the RowGroup structs in ``groups``, streamed."""
        w = _Writer()
        last = 0
        before = [f for f in template if f[0] < _FILE_ROW_GROUPS]
        after = [f for f in template if f[0] > _FILE_ROW_GROUPS]
        for field in before:
            if field[0] == _FILE_NUM_ROWS:
                field[2] = rows
        last = _fields(w, before, last)
        w.field_head(_FILE_ROW_GROUPS, _LIST, last)
        w.list_head(_STRUCT, self.groups)
        size = len(w.out)
        self.out.write(w.out)
        groups.seek(0)
        while block := groups.read(1 << 20):
            self.out.write(block)
            size += len(block)
        w = _Writer()
        _fields(w, after, _FILE_ROW_GROUPS)
        w.out.append(0)
        size += len(w.out)
        self.out.write(w.out + struct.pack("<I", size) + MAGIC)


def _arrow(type_name: str) -> Any:
    import pyarrow as pa

    return {"int64": pa.int64(), "double": pa.float64(), "bool": pa.bool_(), "string": pa.string()}[type_name]


def _rows_of(footer: bytes) -> int:
    fields = _Reader(footer)
    pos = 0
    last = 0
    data = fields.data
    while True:  # num_rows comes before the row groups: no need to read them
        head = data[pos]
        pos += 1
        if head == 0:
            raise AssembleError("a footer without its rows")
        type_, delta = head & 0x0F, head >> 4
        if not delta:
            raise AssembleError("a footer's field out of order")
        last += delta
        if last == _FILE_NUM_ROWS:
            raw, _ = _varint(data, pos)
            return (raw >> 1) ^ -(raw & 1)
        if type_ not in (_TRUE, _FALSE):
            pos = _skip(data, pos, type_)


def _row_group(chunks: list[Chunk], rows: int) -> bytes:
    """A RowGroup struct of ``chunks``, with the fields pyarrow writes."""
    w = _Writer()
    w.field_head(_GROUP_COLUMNS, _LIST, 0)
    w.list_head(_STRUCT, len(chunks))
    for chunk in chunks:
        w.out += chunk.meta
    fields: list[Field] = [[_GROUP_BYTES, _I64, sum(c.uncompressed for c in chunks)], [_GROUP_ROWS, _I64, rows]]
    if chunks:
        fields.append([_GROUP_FILE_OFFSET, _I64, min(c.start for c in chunks)])
        fields.append([_GROUP_COMPRESSED, _I64, sum(c.size for c in chunks)])
    _fields(w, fields, _GROUP_COLUMNS)
    w.out.append(0)
    return bytes(w.out)


def _moved(group: list[Field], by: int) -> None:
    """Add ``by`` to every byte offset of a row group's metadata (fields read in a tree)."""
    for field in group:
        if field[0] == _GROUP_FILE_OFFSET:
            field[2] += by
    columns = _get(group, _GROUP_COLUMNS)
    for chunk in columns[2][2] if columns else []:
        for field in chunk:
            if field[0] in _CHUNK_OFFSETS and field[2]:
                field[2] += by
            elif field[0] == _CHUNK_META:
                for meta in field[2]:
                    if meta[0] in _META_OFFSETS:
                        meta[2] += by
