"""One Parquet file assembled from row groups encoded each as a file of its own columns.

A Parquet file's schema is written in its footer, at the end, and every row group has its
columns; but which columns a log has, and of what type, is known only when its last line
is read. So ``parse --format parquet`` reads a log once: pyarrow encodes every row group
as a small Parquet file of the columns that group has, of the types its values call for
(:class:`Assembler` appends its column chunks to the output, their byte offsets moved to
where they now are), and when the last line has fixed the file's schema the footer lists
every group's chunks in the file's column order. What a group lacks (a group is encoded
with only the columns it has values in) is a chunk of nulls, encoded once for its type and
row count and copied under each column's name (:class:`_NullChunk`); a
column whose type the file widened (an ``int`` that is a ``double`` or a ``string`` in
the file) is read back from the output and encoded again, as ``tables.conform`` converts
it. Nothing of a group is kept in memory once it is written: its chunks' metadata waits in
a temporary file, and the footer is written from there a group at a time.

The row group's chunks are copied byte for byte, only their offsets rewritten
(:func:`group_chunks`, with ``parquet_thrift``, which reads and writes the footer).
"""

from __future__ import annotations

import os
import pickle
import struct
import tempfile
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import IO, Any

from .parquet_thrift import (
    BINARY,
    CHUNK_META,
    CHUNK_OFFSETS,
    COMPRESSED,
    DATA_PAGE,
    DICT_PAGE,
    FILE_NUM_ROWS,
    FILE_ROW_GROUPS,
    GROUP_BYTES,
    GROUP_COLUMNS,
    GROUP_COMPRESSED,
    GROUP_FILE_OFFSET,
    GROUP_ROWS,
    I64,
    LIST,
    MAGIC,
    META_OFFSETS,
    META_PATH,
    STRUCT,
    UNCOMPRESSED,
    Field,
    ParquetFormatError,
    Writer,
    field_at,
    moved,
    read_footer,
    rows_of,
    varint,
    walk,
    write_fields,
    write_footer,
    zigzag,
    zigzag_value,
)


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
    pos, type_ = field_at(footer, FILE_ROW_GROUPS)
    if type_ != LIST:
        raise ParquetFormatError("a footer whose row groups are not a list")
    head = footer[pos]
    if head >> 4 != 1:
        raise ParquetFormatError("not a footer of one row group")
    pos += 1
    if footer[pos] != (GROUP_COLUMNS << 4 | LIST):
        raise ParquetFormatError("a row group that does not begin with its columns")
    pos += 1
    head = footer[pos]
    pos += 1
    count = head >> 4
    if count == 15:
        count, pos = varint(footer, pos)
    chunks = []
    for _ in range(count):
        chunk, pos = _moved_chunk(footer, pos, by)
        chunks.append(chunk)
    return chunks


_SHIFT, _INTO = frozenset(CHUNK_OFFSETS), {CHUNK_META: frozenset(META_OFFSETS)}


def _moved_chunk(data: bytes, pos: int, by: int) -> tuple[Chunk, int]:
    """The ``ColumnChunk`` at ``pos`` of ``data``, ``by`` added to its byte offsets; and its end."""
    out: list[bytes] = []
    seen: dict[int, int] = {}
    pos = walk(data, pos, _SHIFT, by, out, seen, _INTO)
    return Chunk(b"".join(out), _start(seen), seen[COMPRESSED], seen[UNCOMPRESSED]), pos


def _start(seen: dict[int, int]) -> int:
    """Where a chunk's pages begin (its dictionary page, if it has one), from ``walk``'s ``seen``."""
    return seen[DATA_PAGE] if not seen.get(DICT_PAGE) else min(seen[DATA_PAGE], seen[DICT_PAGE])


def _split(encoded: Any) -> tuple[memoryview, bytes]:
    """A Parquet file's bytes: its column chunks (after the magic) and its footer."""
    data = memoryview(encoded)
    if len(data) < 12 or bytes(data[:4]) != MAGIC or bytes(data[-4:]) != MAGIC:
        raise ParquetFormatError("not a Parquet file")
    (length,) = struct.unpack_from("<I", data, len(data) - 8)
    end = len(data) - 8 - length
    if end < 4 or not length:
        raise ParquetFormatError("a Parquet footer that its file cannot hold")
    return data[4:end], bytes(data[end:len(data) - 8])


def encoded(table: Any, dictionary: Collection[str] | None = None) -> Any:
    """``table`` as the bytes of a Parquet file of the file's settings (``tables.open_writer``,
    ``dictionary`` its text columns with a dictionary; those without one compressed only if
    a sample of this group's values shows it pays, ``tables.incompressible``); a table of no
    rows gives a file of its schema and no row group."""
    import pyarrow as pa

    from .tables import incompressible, open_writer

    text = [f.name for f in table.schema if f.type == pa.string()
            and (f.name == "text" if dictionary is None else f.name not in dictionary)]
    plain = [name for name in text if table.num_rows and incompressible(table.column(name))]
    sink = pa.BufferOutputStream()
    with open_writer(sink, table.schema, dictionary, plain) as writer:
        if table.num_rows:
            writer.write_table(table)
    return sink.getvalue()


#: Bytes of output between two calls of :class:`WriteBehind`, and how many such windows
#: back its pages are let go: by then the disk has them.
WINDOW = 16 << 20
LAG = 2


class WriteBehind:
    """A large output written behind: each ``WINDOW`` bytes are handed to the disk as soon
    as they are written, and the pages of those ``LAG`` windows back, on disk by then, are
    let go (``posix_fadvise(DONTNEED)``, which does both and never waits), so that the next
    writes reuse them. The page cache then holds a few windows of the file, not all of it:
    a log's Parquet file can be larger than the log, and taking new pages for all of it
    cost more than encoding it (random bytes' 2 GB file: 6 s of system time in 8.5,
    ``bench/README.md``). Where the file cannot be advised (not a file, no
    ``posix_fadvise``), it does nothing."""

    def __init__(self, out: IO[bytes], start: int = 0) -> None:
        self.out = out
        self.marks = [start]  # the windows' starts, the last LAG + 1 of them
        self.fd: int | None = None
        if hasattr(os, "posix_fadvise"):
            try:
                self.fd = out.fileno()
            except (AttributeError, OSError, ValueError):  # an in-memory file
                self.fd = None

    def wrote(self, pos: int) -> None:
        """The file is written up to ``pos``."""
        if self.fd is None or pos - self.marks[-1] < WINDOW:
            return
        try:
            self.out.flush()
            os.posix_fadvise(self.fd, self.marks[-1], pos - self.marks[-1], os.POSIX_FADV_DONTNEED)
            self.marks.append(pos)
            if len(self.marks) > LAG + 1:
                first, end = self.marks[0], self.marks[1]
                os.posix_fadvise(self.fd, first, end - first, os.POSIX_FADV_DONTNEED)
                del self.marks[0]
        except OSError:  # not a file that takes advice (a pipe): written as it comes
            self.fd = None


class Assembler:
    """The output file, written a row group at a time (:meth:`add`) and ended by the footer
    of the schema the last group fixed (:meth:`close`). ``out`` is a binary file that can be
    read back (a chunk whose type the file widened is read from it), written behind
    (:class:`WriteBehind`)."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        out.write(MAGIC)
        self.pos = len(MAGIC)
        self.behind = WriteBehind(out)
        self.meta = tempfile.TemporaryFile(prefix="logforensics-parquet-")
        self.groups = 0
        # a null chunk's bytes by (Arrow type, rows), its ColumnChunk by (name, type, rows), at offset 4
        self.null_data: dict[tuple[str, int], tuple[bytes, list[Field]]] = {}
        self.null_meta: dict[tuple[str, str, int], _NullChunk] = {}

    def add(self, file: Any, types: dict[str, tuple[str, bool]]) -> None:
        """Append the row group of the Parquet file ``file`` (one row group, the columns
        ``types``: name -> (Arrow type, only nulls) in the order of its schema)."""
        data, footer = _split(file)
        rows = rows_of(footer)
        if not rows:
            return  # pyarrow writes no row group of no rows
        chunks = group_chunks(footer, self.pos - len(MAGIC))
        if len(chunks) != len(types):
            raise ParquetFormatError("a row group whose chunks are not its columns")
        self.out.write(data)
        self.pos += len(data)
        self.behind.wrote(self.pos)
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

    def _nulls(self, name: str, type_: Any, rows: int) -> Chunk:
        """Append a chunk of ``rows`` nulls of the column ``name`` (of Arrow type ``type_``);
        the chunk. Encoded once by (type, rows) and copied, its name set and its offsets
        moved in place: the row groups of a file have one of two row counts (``parquet.py``'s
        ``ROW_GROUP`` or half of it), and each lacks most of the file's columns."""
        key = (name, str(type_), rows)
        have = self.null_meta.get(key)
        if have is None:
            if len(self.null_meta) >= _NULL_CACHE:
                self.null_meta.clear()
                self.null_data.clear()
            base = self.null_data.get(key[1:])
            if base is None:
                import pyarrow as pa

                from .tables import nulls

                data, footer = _split(encoded(pa.table({"nulls": nulls(rows, type_)})))
                (chunk,) = group_chunks(footer, 0)
                base = self.null_data[key[1:]] = (bytes(data), read_footer(chunk.meta))
            have = self.null_meta[key] = _NullChunk(base[0], write_footer(_named(base[1], name)))
        self.out.write(have.data)
        chunk = have.at(self.pos - len(MAGIC))
        self.pos += len(have.data)
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
        group: list[Field] = [[GROUP_COLUMNS, LIST, ("L", STRUCT, [meta])],
                              [GROUP_BYTES, I64, chunk.uncompressed], [GROUP_ROWS, I64, rows]]
        moved(group, len(MAGIC) - chunk.start)
        for field in template:
            if field[0] == FILE_NUM_ROWS:
                field[2] = rows
            elif field[0] == FILE_ROW_GROUPS:
                field[2] = ("L", STRUCT, [group])
        footer = write_footer(template)
        mini = MAGIC + data + footer + struct.pack("<I", len(footer)) + MAGIC
        return pq.read_table(pa.BufferReader(mini)).column(name)

    def close(self, schema: Any) -> int:
        """Write every group's chunks in the order of ``schema`` (the file's: a group's
        missing columns as nulls, a widened type read back and converted) and the footer;
        returns the rows written."""
        import pyarrow as pa

        from .tables import conform

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
                        chunks.append(self._nulls(field.name, field.type, group.rows))
                    else:
                        part = pa.table({field.name: self._read_back(field.name, _arrow(have[0]), have[2], group.rows)})
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
        w = Writer()
        last = 0
        before = [f for f in template if f[0] < FILE_ROW_GROUPS]
        after = [f for f in template if f[0] > FILE_ROW_GROUPS]
        for field in before:
            if field[0] == FILE_NUM_ROWS:
                field[2] = rows
        last = write_fields(w, before, last)
        w.field_head(FILE_ROW_GROUPS, LIST, last)
        w.list_head(STRUCT, self.groups)
        size = len(w.out)
        self.out.write(w.out)
        groups.seek(0)
        while block := groups.read(1 << 20):
            self.out.write(block)
            size += len(block)
        w = Writer()
        write_fields(w, after, FILE_ROW_GROUPS)
        w.out.append(0)
        size += len(w.out)
        self.out.write(w.out + struct.pack("<I", size) + MAGIC)


class _NullChunk:
    """A chunk of nulls as encoded in a file of its own (its bytes, and its ``ColumnChunk``
    in pieces), to be written again and again: :meth:`at` gives it moved by ``by`` bytes
    without walking its Thrift again."""

    def __init__(self, data: bytes, meta: bytes) -> None:
        self.data = data
        self.pieces: list[bytes] = []
        self.marks: list[int] = []
        seen: dict[int, int] = {}
        walk(meta, 0, _SHIFT, 0, self.pieces, seen, _INTO, self.marks)
        self.values = [zigzag_value(self.pieces[k]) for k in self.marks]
        self.start = _start(seen)
        self.size, self.uncompressed = seen[COMPRESSED], seen[UNCOMPRESSED]

    def at(self, by: int) -> Chunk:
        pieces = list(self.pieces)
        for k, value in zip(self.marks, self.values):
            pieces[k] = zigzag(value + by)
        return Chunk(b"".join(pieces), self.start + by, self.size, self.uncompressed)


#: Null chunks kept (by column, type and rows) before the cache starts again.
_NULL_CACHE = 4096


def _named(chunk: list[Field], name: str) -> list[Field]:
    """A copy of a ``ColumnChunk``'s fields (read as a tree), of the column ``name``."""
    out = []
    for fid, type_, value in chunk:
        if fid == CHUNK_META:
            value = [[f, t, ("L", BINARY, [name.encode()]) if f == META_PATH else v] for f, t, v in value]
        out.append([fid, type_, value])
    return out


def _arrow(type_name: str) -> Any:
    import pyarrow as pa

    return {"int64": pa.int64(), "double": pa.float64(), "bool": pa.bool_(), "string": pa.string()}[type_name]


def _row_group(chunks: list[Chunk], rows: int) -> bytes:
    """A RowGroup struct of ``chunks``, with the fields pyarrow writes."""
    w = Writer()
    w.field_head(GROUP_COLUMNS, LIST, 0)
    w.list_head(STRUCT, len(chunks))
    for chunk in chunks:
        w.out += chunk.meta
    fields: list[Field] = [[GROUP_BYTES, I64, sum(c.uncompressed for c in chunks)], [GROUP_ROWS, I64, rows]]
    if chunks:
        fields.append([GROUP_FILE_OFFSET, I64, min(c.start for c in chunks)])
        fields.append([GROUP_COMPRESSED, I64, sum(c.size for c in chunks)])
    write_fields(w, fields, GROUP_COLUMNS)
    w.out.append(0)
    return bytes(w.out)


