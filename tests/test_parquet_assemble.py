"""One Parquet file assembled from row groups encoded each alone (``export/parquet_assemble.py``):
the footer's Thrift read and written back byte for byte (``export/parquet_thrift.py``), the
chunks' offsets moved as the full reading moves them, and the assembled file read back by pyarrow as the groups given,
in the file's columns and types, with each chunk's statistics kept."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from logforensics.export.parquet_assemble import Assembler, WriteBehind, _split, encoded, group_chunks
from logforensics.export.parquet_thrift import ParquetFormatError, Writer, moved, read_footer, write_footer
from logforensics.export.tables import conform, final_schema, open_writer

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _table(rows: int, seed: int) -> Any:
    rng = random.Random(seed)
    return pa.table({
        "kind": pa.array([rng.choice(["decode_batch", "prefill_batch", "other"]) for _ in range(rows)]),
        "line": pa.array(range(seed * rows, seed * rows + rows), pa.int64()),
        "token_usage": pa.array([rng.random() if rng.random() < 0.7 else None for _ in range(rows)], pa.float64()),
        "cuda_graph": pa.array([rng.random() < 0.5 if rng.random() < 0.5 else None for _ in range(rows)]),
        "never": pa.nulls(rows, pa.int64()),
        "text": pa.array([f"line {k} " + "x" * rng.randrange(300) for k in range(rows)]),
    })


def _footer_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    return data[-8 - length:-8]


def test_a_footer_is_written_back_as_it_was_read(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    table = _table(5000, 1)
    pq.write_table(table, path, row_group_size=700)  # pyarrow's own settings: dictionaries, statistics
    with open_writer(str(tmp_path / "ours.parquet"), table.schema) as w:
        for k in range(0, 5000, 1300):
            w.write_table(table.slice(k, 1300))
    for file in (path, tmp_path / "ours.parquet"):
        footer = _footer_bytes(file)
        assert write_footer(read_footer(footer)) == footer


@pytest.mark.parametrize("by", [0, 1, 1000, 1 << 40])
def test_chunks_are_moved_as_the_whole_footer_read_moves_them(by: int) -> None:
    file = encoded(_table(3000, 2))
    footer = _split(file)[1]
    chunks = group_chunks(footer, by)
    (group,) = next(f for f in read_footer(footer) if f[0] == 4)[2][2]
    moved(group, by)
    whole = next(f for f in group if f[0] == 1)[2][2]
    assert len(chunks) == len(whole) == 6
    meta = pq.ParquetFile(pa.BufferReader(file)).metadata.row_group(0)
    for k, (chunk, tree) in enumerate(zip(chunks, whole)):
        w = Writer()
        w.struct(tree)
        assert chunk.meta == bytes(w.out)
        col = meta.column(k)
        first = col.data_page_offset if col.dictionary_page_offset is None else col.dictionary_page_offset
        assert chunk.start == first + by
        assert (chunk.size, chunk.uncompressed) == (col.total_compressed_size, col.total_uncompressed_size)


def _assembled(tmp_path: Path, groups: list[object], schema: object) -> Path:
    out = tmp_path / "out.parquet"
    with open(out, "w+b") as fh:
        asm = Assembler(fh)
        for g in groups:
            asm.add(encoded(g), {f.name: (str(f.type), g.column(k).null_count == g.num_rows)  # type: ignore[attr-defined]
                                 for k, f in enumerate(g.schema)})  # type: ignore[attr-defined]
        assert asm.close(schema) == sum(g.num_rows for g in groups)  # type: ignore[attr-defined]
    return out


@pytest.mark.parametrize("count", [1, 2, 5])
def test_groups_of_one_schema_read_back_with_their_statistics(tmp_path: Path, count: int) -> None:
    groups = [_table(300 + 97 * k, k) for k in range(count)]
    alone = [pq.ParquetFile(pa.BufferReader(encoded(g))).metadata.row_group(0) for g in groups]
    out = _assembled(tmp_path, groups, groups[0].schema)
    got = pq.ParquetFile(out)
    assert got.metadata.num_row_groups == count
    assert got.read().equals(pa.concat_tables(groups))
    for k in range(count):
        assert got.read_row_group(k).equals(groups[k])
        have, was = got.metadata.row_group(k), alone[k]
        assert (have.num_rows, have.total_byte_size) == (was.num_rows, was.total_byte_size)
        for c in range(have.num_columns):
            assert have.column(c).statistics == was.column(c).statistics
            assert have.column(c).total_compressed_size == was.column(c).total_compressed_size


def test_groups_of_other_columns_and_types_read_back_as_the_files(tmp_path: Path) -> None:
    """A group without a column gets nulls; a group whose column the file widened (int to
    double, int or bool to string) is read back and converted as ``conform`` converts it;
    the columns come in the file's order whatever each group's order."""
    a = pa.table({"line": pa.array([1, 2, 3], pa.int64()), "bs": pa.array([8, None, 16], pa.int64()),
                  "text": pa.array(["a", "b", "c"])})
    b = pa.table({"text": pa.array(["d", "e"]), "line": pa.array([4, 5], pa.int64()),
                  "bs": pa.array(["auto", None]), "flag": pa.array([True, None])})
    c = pa.table({"line": pa.array([6], pa.int64()), "flag": pa.nulls(1, pa.bool_()),
                  "rate": pa.array([2], pa.int64()), "text": pa.array(["f"])})
    d = pa.table({"line": pa.array([7, 8], pa.int64()), "rate": pa.array([0.5, None]),
                  "flag": pa.array(["yes", None]), "text": pa.array(["g", "h"])})
    order = dict.fromkeys(["line", "bs", "text", "flag", "rate"])
    kinds = {"line": {"int"}, "bs": {"int", "str"}, "text": {"str"}, "flag": {"bool", "str"}, "rate": {"int", "float"}}
    schema = final_schema(order, kinds)
    out = _assembled(tmp_path, [a, b, c, d], schema)
    got = pq.read_table(out)
    assert got.schema == schema and got.column_names[-1] == "text"
    assert got.equals(pa.concat_tables([conform(t, schema) for t in (a, b, c, d)]))
    assert got["bs"].to_pylist() == ["8", None, "16", "auto", None, None, None, None]
    assert got["rate"].to_pylist() == [None] * 5 + [2.0, 0.5, None]
    assert got["flag"].to_pylist() == [None, None, None, "True", None, None, "yes", None]


def test_no_rows_is_a_file_of_the_schema_and_no_group(tmp_path: Path) -> None:
    schema = pa.schema([("line", pa.int64()), ("text", pa.string())])
    out = _assembled(tmp_path, [pa.table({"line": pa.nulls(0, pa.int64())})], schema)
    got = pq.ParquetFile(out)
    assert got.metadata.num_row_groups == 0 and got.read().num_rows == 0 and got.schema_arrow == schema


def test_what_is_not_parquet_is_an_error() -> None:
    for junk in (b"not parquet at all", b"PAR1" + b"\x00" * 4 + b"PAR1", b"PAR1\xff\xff\xff\x7fPAR1"):
        with pytest.raises(ParquetFormatError):
            _split(junk)


def test_another_reader_reads_the_assembled_file_as_pyarrow_does(tmp_path: Path) -> None:
    """DuckDB, which reads Parquet with its own code, finds the same rows, and its filters on
    the chunks' statistics keep the same ones: offsets, sizes and statistics hold outside
    pyarrow too."""
    import duckdb

    groups = [_table(400 + 50 * k, k) for k in range(4)]
    groups[2] = groups[2].drop_columns(["cuda_graph"])  # a group that lacks a column
    groups[3] = groups[3].set_column(1, "line", pa.array([str(v) for v in groups[3]["line"].to_pylist()]))
    order = dict.fromkeys(groups[0].column_names)
    kinds = {"kind": {"str"}, "line": {"int", "str"}, "token_usage": {"float"}, "cuda_graph": {"bool"},
             "never": set(), "text": {"str"}}
    schema = final_schema(order, kinds)
    out = _assembled(tmp_path, groups, schema)
    expected = pq.read_table(out)
    con = duckdb.connect()
    rel = con.sql(f"SELECT * FROM read_parquet('{out}')")
    rows = rel.fetchall()
    assert rel.columns == expected.column_names and len(rows) == expected.num_rows
    for k, name in enumerate(rel.columns):
        assert [r[k] for r in rows] == expected[name].to_pylist(), name
    where = "token_usage > 0.5 AND cuda_graph"
    got = con.sql(f"SELECT count(*), sum(length(text)) FROM read_parquet('{out}') WHERE {where}").fetchall()[0]
    kept = [(u, t) for u, c, t in zip(expected["token_usage"].to_pylist(), expected["cuda_graph"].to_pylist(),
                                      expected["text"].to_pylist()) if u is not None and u > 0.5 and c]
    assert got == (len(kept), sum(len(t) for _, t in kept))


def test_the_columns_a_group_lacks_are_null_chunks_encoded_once_by_type_and_rows(tmp_path: Path) -> None:
    """Groups of the same rows that lack columns of several types: each missing chunk is a
    copy of one encoded for its type and rows, under its own column's name, at its own
    offsets, with its own statistics (every value null); pyarrow and DuckDB read back the
    file the groups make once conformed."""
    import duckdb

    rows = 500
    full = _table(rows, 9).append_column("rank", pa.array([f"TP{k % 8}" for k in range(rows)]))
    groups = [full.select(["line", "text"]),
              full.select(["kind", "line", "token_usage", "text"]),
              full.select(["line", "cuda_graph", "text", "rank"]),
              _table(rows // 3, 4).select(["line", "text"])]  # the last group, of fewer rows
    order = dict.fromkeys(["kind", "line", "token_usage", "cuda_graph", "never", "rank", "text"])
    kinds = {"kind": {"str"}, "line": {"int"}, "token_usage": {"float"}, "cuda_graph": {"bool"},
             "never": set(), "rank": {"str"}, "text": {"str"}}
    schema = final_schema(order, kinds)
    out = tmp_path / "out.parquet"
    with open(out, "w+b") as fh:
        asm = Assembler(fh)
        for g in groups:
            asm.add(encoded(g), {f.name: (str(f.type), False) for f in g.schema})
        assert asm.close(schema) == sum(g.num_rows for g in groups)
        # one encoding for each (type, rows) a missing chunk needed, not one for each chunk
        assert set(asm.null_data) == {(t, n) for t in ("bool", "double", "int64", "string") for n in (rows, rows // 3)}
    expected = pa.concat_tables([conform(g, schema) for g in groups])
    got = pq.ParquetFile(out)
    assert got.read().equals(expected)
    meta = got.metadata
    for k, g in enumerate(groups):
        group = meta.row_group(k)
        assert group.num_rows == g.num_rows
        for c, field in enumerate(schema):
            col = group.column(c)
            assert col.path_in_schema == field.name
            if field.name not in g.column_names:
                assert col.statistics is None or col.statistics.null_count == g.num_rows
        assert got.read_row_group(k).equals(conform(g, schema))
    starts = sorted(meta.row_group(k).column(c).data_page_offset for k in range(len(groups)) for c in range(len(schema)))
    assert len(set(starts)) == len(starts)  # every chunk has bytes of its own
    rel = duckdb.connect().sql(f"SELECT * FROM read_parquet('{out}')")
    assert rel.columns == expected.column_names
    rows_back = rel.fetchall()
    for k, name in enumerate(rel.columns):
        assert [r[k] for r in rows_back] == expected[name].to_pylist(), name
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{out}') WHERE never IS NULL AND kind IS NULL").fetchall() \
        == [(rows + rows + rows // 3,)]


def test_the_file_is_written_behind_a_window_at_a_time_and_reads_back_whole(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Each window of the output is handed to the disk as it is written, and let go ``LAG``
    windows later (``posix_fadvise(DONTNEED)``, which the kernel really does here): the
    windows follow one another without a gap, only the last ``LAG`` are kept, and the file
    (a widened column read back from it once its pages were let go) is the groups given."""
    if not hasattr(os, "posix_fadvise"):
        pytest.skip("no posix_fadvise here")
    import logforensics.export.parquet_assemble as assemble

    monkeypatch.setattr(assemble, "WINDOW", 4096)
    calls: list[tuple[int, int]] = []
    advise = os.posix_fadvise

    def recorded(fd: int, offset: int, length: int, advice: int) -> None:
        assert advice == os.POSIX_FADV_DONTNEED
        calls.append((offset, length))
        advise(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", recorded)
    a = _table(400, 1)
    b = _table(300, 2).set_column(1, "line", pa.array([str(k) for k in range(300)]))  # the file widens it
    groups = [a, _table(500, 3), b, _table(350, 4)]
    schema = final_schema(dict.fromkeys(a.column_names), {"kind": {"str"}, "line": {"int", "str"},
                                                           "token_usage": {"float"}, "cuda_graph": {"bool"},
                                                           "never": {"int"}, "text": {"str"}})
    out = _assembled(tmp_path, groups, schema)
    assert pq.read_table(out).equals(pa.concat_tables([conform(t, schema) for t in groups]))
    windows = list(dict.fromkeys(calls))
    assert len(windows) > assemble.LAG + 1 and windows[0][0] == 0
    assert all(a + n == b for (a, n), (b, _) in zip(windows, windows[1:]))  # one after another
    assert all(n >= assemble.WINDOW for _, n in windows)
    lag = assemble.LAG  # each handed on as it is written, and let go LAG windows later
    assert calls == [c for k, w in enumerate(windows) for c in [w] + ([windows[k - lag]] if k >= lag else [])]


def test_write_behind_leaves_what_is_not_a_file_alone() -> None:
    """An in-memory output, or one the kernel will not advise (a pipe), is written as it comes."""
    import io

    out = io.BytesIO()
    behind = WriteBehind(out)
    out.write(b"x" * (3 << 20))
    behind.wrote(3 << 20)
    assert behind.fd is None and out.getvalue() == b"x" * (3 << 20)
    if hasattr(os, "posix_fadvise"):
        r, w = os.pipe()
        with os.fdopen(w, "wb") as pipe, os.fdopen(r, "rb"):
            behind = WriteBehind(pipe)
            import logforensics.export.parquet_assemble as assemble

            behind.wrote(assemble.WINDOW)  # ESPIPE: given up, not raised
            assert behind.fd is None
