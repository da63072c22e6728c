"""Parquet's footer: a Thrift struct (``FileMetaData``) in the compact protocol, read and written.

A footer is read here into a tree of fields and written back field by field, so that
everything not changed is written as it was read (``write_footer(read_footer(b)) == b``).
For the column chunks of a row group, which ``parquet_assemble`` copies by the thousand,
:func:`walk` copies a struct's bytes as they are and rewrites only its byte offsets, and
:func:`skip` steps over a value without reading it into objects.
"""

from __future__ import annotations

from typing import Any

MAGIC = b"PAR1"

# compact protocol types
TRUE, FALSE, I8, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(1, 13)

#: Field ids (parquet.thrift) of the byte offsets in a row group's metadata.
FILE_ROW_GROUPS, FILE_NUM_ROWS = 4, 3
GROUP_COLUMNS, GROUP_BYTES, GROUP_ROWS, GROUP_FILE_OFFSET, GROUP_COMPRESSED = 1, 2, 3, 5, 6
CHUNK_OFFSETS = (2, 4, 6)  # file_offset, offset_index_offset, column_index_offset
CHUNK_META = 3
META_OFFSETS = (9, 10, 11, 14)  # data_page, index_page, dictionary_page, bloom_filter offsets
META_PATH = 3  # ColumnMetaData's path_in_schema: the column's name

Field = list[Any]  # [field id, type, value]; a struct is a list of fields, a list ("L", type, items)


class ParquetFormatError(Exception):
    """Bytes that are not the Parquet pyarrow writes."""


class Reader:
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
        if type_ in (TRUE, FALSE):  # a list's element (a field's bool is in its header)
            return self.byte() == TRUE
        if type_ == I8:
            return self.byte()
        if type_ in (I16, I32, I64):
            return self.zigzag()
        if type_ == DOUBLE:
            self.pos += 8
            return self.data[self.pos - 8:self.pos]
        if type_ == BINARY:
            n = self.varint()
            self.pos += n
            return self.data[self.pos - n:self.pos]
        if type_ in (LIST, SET):
            head = self.byte()
            size, elem = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            return ("L", elem, [self.value(elem) for _ in range(size)])
        if type_ == MAP:
            size = self.varint()
            kv = self.byte() if size else 0
            return ("M", kv, [(self.value(kv >> 4), self.value(kv & 0x0F)) for _ in range(size)])
        if type_ == STRUCT:
            return self.struct()
        raise ParquetFormatError(f"unknown Thrift type {type_}")

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
            fields.append([fid, type_, True if type_ == TRUE else False if type_ == FALSE else self.value(type_)])


class Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, v: int) -> None:
        _put_varint(self.out, v)

    def zigzag(self, v: int) -> None:
        _put_varint(self.out, (v << 1) ^ (v >> 63))

    def value(self, type_: int, v: Any) -> None:
        if type_ in (TRUE, FALSE):
            self.out.append(TRUE if v else FALSE)
        elif type_ == I8:
            self.out.append(v)
        elif type_ in (I16, I32, I64):
            self.zigzag(v)
        elif type_ == DOUBLE:
            self.out += v
        elif type_ == BINARY:
            self.varint(len(v))
            self.out += v
        elif type_ in (LIST, SET):
            _, elem, items = v
            self.list_head(elem, len(items))
            for item in items:
                self.value(elem, item)
        elif type_ == MAP:
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
        if type_ in (TRUE, FALSE):
            type_ = TRUE if v else FALSE
        self.field_head(fid, type_, last)
        if type_ not in (TRUE, FALSE):
            self.value(type_, v)

    def struct(self, fields: list[Field]) -> None:
        last = 0
        for fid, type_, v in fields:
            self.struct_field(fid, type_, v, last)
            last = fid
        self.out.append(0)


def read_footer(data: bytes) -> list[Field]:
    """The ``FileMetaData`` fields of a footer's bytes."""
    return Reader(data).struct()


def write_footer(fields: list[Field]) -> bytes:
    """The bytes of ``FileMetaData`` fields (those :func:`read_footer` read: the same bytes)."""
    w = Writer()
    w.struct(fields)
    return bytes(w.out)


def get(fields: list[Field], fid: int) -> Field | None:
    return next((f for f in fields if f[0] == fid), None)


def write_fields(w: Writer, fields: list[Field], last: int) -> int:
    """Write ``fields`` of a struct after the field ``last`` (no stop byte); the last id."""
    for fid, type_, v in fields:
        w.struct_field(fid, type_, v, last)
        last = fid
    return last


def varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _put_varint(out: bytearray, v: int) -> None:
    """Append the compact protocol's varint of ``v`` (not negative)."""
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def zigzag(v: int) -> bytes:
    """The compact protocol's bytes of an integer (zigzag, then a varint)."""
    out = bytearray()
    _put_varint(out, (v << 1) ^ (v >> 63))
    return bytes(out)


def zigzag_value(data: bytes) -> int:
    """The integer of :func:`zigzag`'s bytes."""
    raw, _ = varint(data, 0)
    return (raw >> 1) ^ -(raw & 1)


def skip(data: bytes, pos: int, type_: int) -> int:
    """Where the value of Thrift type ``type_`` at ``pos`` ends."""
    if type_ in (I16, I32, I64):
        while data[pos] & 0x80:
            pos += 1
        return pos + 1
    if type_ == BINARY:
        n, pos = varint(data, pos)
        return pos + n
    if type_ == STRUCT:
        return skip_struct(data, pos)
    if type_ in (LIST, SET):
        head = data[pos]
        pos += 1
        size, elem = head >> 4, head & 0x0F
        if size == 15:
            size, pos = varint(data, pos)
        for _ in range(size):
            pos = skip(data, pos, elem)
        return pos
    if type_ in (TRUE, FALSE, I8):
        return pos + 1
    if type_ == DOUBLE:
        return pos + 8
    if type_ == MAP:
        size, pos = varint(data, pos)
        if size:
            kv = data[pos]
            pos += 1
            for _ in range(size):
                pos = skip(data, skip(data, pos, kv >> 4), kv & 0x0F)
        return pos
    raise ParquetFormatError(f"unknown Thrift type {type_}")


def skip_struct(data: bytes, pos: int) -> int:
    while True:
        head = data[pos]
        pos += 1
        if head == 0:
            return pos
        if not head >> 4:
            pos = skip(data, pos, I16)
        type_ = head & 0x0F
        if type_ not in (TRUE, FALSE):
            pos = skip(data, pos, type_)


def walk(data: bytes, pos: int, shift: frozenset[int], by: int, out: list[bytes], seen: dict[int, int],
         into: dict[int, frozenset[int]] | None = None, marks: list[int] | None = None) -> int:
    """Copy the struct at ``pos`` to ``out``, ``by`` added to its i64 fields ``shift`` (where
    not 0) and to those of the structs in its fields ``into`` (field -> their fields to
    shift); the values of its i64 fields are kept in ``seen``, an inner struct's negated,
    and where a shifted value is in ``out`` in ``marks``; returns its end."""
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
            raw, pos = varint(data, pos)
            fid = (raw >> 1) ^ -(raw & 1)
        last = fid
        if type_ == I64:
            raw, end = varint(data, pos)
            value = (raw >> 1) ^ -(raw & 1)
            seen[fid] = value
            if fid in shift and value:
                out.append(data[copied:pos])
                if marks is not None:
                    marks.append(len(out))
                out.append(zigzag(value + by))
                seen[fid] = value + by
                copied = end
            pos = end
        elif type_ == STRUCT and into is not None and fid in into:
            out.append(data[copied:pos])
            inner: dict[int, int] = {}
            pos = walk(data, pos, into[fid], by, out, inner, None, marks)
            seen.update({-k: v for k, v in inner.items()})
            copied = pos
        elif type_ not in (TRUE, FALSE):
            pos = skip(data, pos, type_)


#: ColumnMetaData's total_uncompressed_size, total_compressed_size, data_page_offset and
#: dictionary_page_offset, as :func:`walk` keeps them (negated: the inner struct's).
UNCOMPRESSED, COMPRESSED, DATA_PAGE, DICT_PAGE = -6, -7, -9, -11


def field_at(data: bytes, fid: int) -> tuple[int, int]:
    """Where the value of the field ``fid`` of the struct at the start of ``data`` begins,
    and its type, stepping over the fields before it without reading them."""
    pos = last = 0
    while True:
        head = data[pos]
        pos += 1
        if head == 0:
            raise ParquetFormatError(f"a footer without its field {fid}")
        type_, delta = head & 0x0F, head >> 4
        if delta:
            last += delta
        else:
            raw, pos = varint(data, pos)
            last = (raw >> 1) ^ -(raw & 1)
        if last == fid:
            return pos, type_
        if type_ not in (TRUE, FALSE):
            pos = skip(data, pos, type_)


def rows_of(footer: bytes) -> int:
    """A footer's ``num_rows``."""
    raw, _ = varint(footer, field_at(footer, FILE_NUM_ROWS)[0])
    return (raw >> 1) ^ -(raw & 1)


def moved(group: list[Field], by: int) -> None:
    """Add ``by`` to every byte offset of a row group's metadata (fields read in a tree)."""
    for field in group:
        if field[0] == GROUP_FILE_OFFSET:
            field[2] += by
    columns = get(group, GROUP_COLUMNS)
    for chunk in columns[2][2] if columns else []:
        for field in chunk:
            if field[0] in CHUNK_OFFSETS and field[2]:
                field[2] += by
            elif field[0] == CHUNK_META:
                for meta in field[2]:
                    if meta[0] in META_OFFSETS:
                        meta[2] += by
