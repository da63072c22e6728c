"""Two Parquet files of one schema joined into one, their row groups dealt in turn.

pyarrow encodes a row group on one thread, and for ``parse --format parquet`` that
encoding is the longest of the work. Two writers, each on a thread of its own, encode the
row groups in turn (the first, the third, ... and the second, the fourth, ...) into two
files; :func:`join` then makes one file of them without encoding anything again: the
second file's column chunks are copied after the first's, and one footer lists every row
group in the order they were dealt, the second file's offsets moved by where its bytes now
begin. A Parquet footer is a Thrift struct (``FileMetaData``) in the compact protocol; it
is read here into a tree of fields and written back field by field, so that everything not
moved is written as it was read (``tests/test_parquet_join.py`` checks the round trip).
"""

from __future__ import annotations

import os
import struct
from typing import Any

MAGIC = b"PAR1"

# compact protocol types
_TRUE, _FALSE, _I8, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)

#: Field ids (parquet.thrift) of the byte offsets in a row group's metadata.
_FILE_ROW_GROUPS, _FILE_NUM_ROWS = 4, 3
_GROUP_COLUMNS, _GROUP_FILE_OFFSET, _GROUP_ORDINAL = 1, 5, 7
_CHUNK_OFFSETS = (2, 4, 6)  # file_offset, offset_index_offset, column_index_offset
_CHUNK_META = 3
_META_OFFSETS = (9, 10, 11, 14)  # data_page, index_page, dictionary_page, bloom_filter offsets

Field = list[Any]  # [field id, type, value]; a struct is a list of fields, a list ("L", type, items)


class JoinError(Exception):
    """A file that is not the Parquet these writers write."""


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
        raise JoinError(f"unknown Thrift type {type_}")

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
            if len(items) < 15:
                self.out.append(len(items) << 4 | elem)
            else:
                self.out.append(0xF0 | elem)
                self.varint(len(items))
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

    def struct(self, fields: list[Field]) -> None:
        last = 0
        for fid, type_, v in fields:
            if type_ in (_TRUE, _FALSE):
                type_ = _TRUE if v else _FALSE
            if 0 < fid - last <= 15:
                self.out.append((fid - last) << 4 | type_)
            else:
                self.out.append(type_)
                self.zigzag(fid)
            last = fid
            if type_ not in (_TRUE, _FALSE):
                self.value(type_, v)
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


def _moved(group: list[Field], by: int) -> None:
    """Add ``by`` to every byte offset of a row group's metadata."""
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


def _footer_of(path: str) -> tuple[list[Field], int]:
    """A file's footer fields and where its footer begins (the end of its column chunks)."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(4)
        fh.seek(size - 8)
        tail = fh.read(8)
        if head != MAGIC or tail[4:] != MAGIC or size < 12:
            raise JoinError(f"{path}: not a Parquet file")
        (length,) = struct.unpack("<I", tail[:4])
        start = size - 8 - length
        fh.seek(start)
        return read_footer(fh.read(length)), start


def join(first: str, second: str) -> None:
    """Make ``first`` the file of both: ``second``'s row groups after each of ``first``'s in
    turn (first[0], second[0], first[1], ...), ``second`` left as it was. Both were written
    with one schema; ``first`` has as many row groups as ``second`` or one more."""
    a, a_end = _footer_of(first)
    b, b_end = _footer_of(second)
    groups_a, groups_b = _get(a, _FILE_ROW_GROUPS), _get(b, _FILE_ROW_GROUPS)
    rows_a, rows_b = _get(a, _FILE_NUM_ROWS), _get(b, _FILE_NUM_ROWS)
    if groups_a is None or groups_b is None or rows_a is None or rows_b is None:
        raise JoinError("a footer without row groups")
    ga, gb = groups_a[2][2], groups_b[2][2]
    if not len(gb) <= len(ga) <= len(gb) + 1:
        raise JoinError("row groups not dealt in turn")
    by = a_end - len(MAGIC)  # the second file's chunks begin after the first's
    for group in gb:
        _moved(group, by)
    dealt = [g for pair in zip(ga, gb) for g in pair] + ga[len(gb):]
    for k, group in enumerate(dealt):
        for field in group:
            if field[0] == _GROUP_ORDINAL:
                field[2] = k
    groups_a[2] = ("L", groups_a[2][1], dealt)
    rows_a[2] += rows_b[2]
    footer = write_footer(a)
    with open(first, "r+b") as out, open(second, "rb") as src:
        out.truncate(a_end)
        out.seek(a_end)
        src.seek(len(MAGIC))
        left = b_end - len(MAGIC)
        while left > 0:
            chunk = src.read(min(left, 8 << 20))
            if not chunk:
                raise JoinError(f"{second}: shorter than its footer says")
            out.write(chunk)
            left -= len(chunk)
        out.write(footer)
        out.write(struct.pack("<I", len(footer)))
        out.write(MAGIC)

