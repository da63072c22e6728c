"""Two Parquet files joined into one (``render/parquet_join.py``): the footer's Thrift read and
written back byte for byte, and the joined file read back as the rows dealt, with each row
group's statistics, by pyarrow."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from logforensics.render.parquet_join import JoinError, join, read_footer, write_footer
from logforensics.render.tables import open_writer

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _table(rows: int, seed: int) -> object:
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


def _dealt(tmp_path: Path, groups: list[object]) -> tuple[Path, Path]:
    """The row groups written in turn into two files, as the two encoders write them."""
    schema = groups[0].schema  # type: ignore[attr-defined]
    first, second = tmp_path / "first.parquet", tmp_path / "second.parquet"
    with open_writer(str(first), schema) as a, open_writer(str(second), schema) as b:
        for k, group in enumerate(groups):
            (a if k % 2 == 0 else b).write_table(group)
    return first, second


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


@pytest.mark.parametrize("count", [1, 2, 5, 8])
def test_joined_rows_are_the_rows_dealt_in_order(tmp_path: Path, count: int) -> None:
    groups = [_table(300 + 97 * k, k) for k in range(count)]
    first, second = _dealt(tmp_path, groups)
    alone = {k: pq.ParquetFile(first if k % 2 == 0 else second).metadata.row_group(k // 2) for k in range(count)}
    join(str(first), str(second))
    joined = pq.ParquetFile(first)
    assert joined.metadata.num_row_groups == count
    assert joined.read().equals(pa.concat_tables(groups))
    for k in range(count):  # each group whole, with its own statistics
        assert joined.read_row_group(k).equals(groups[k])
        got, was = joined.metadata.row_group(k), alone[k]
        assert got.num_rows == was.num_rows
        for c in range(got.num_columns):
            assert got.column(c).statistics == was.column(c).statistics
            assert got.column(c).total_compressed_size == was.column(c).total_compressed_size


def test_what_is_not_parquet_is_an_error(tmp_path: Path) -> None:
    first, second = _dealt(tmp_path, [_table(100, 1), _table(100, 2)])
    second.write_bytes(b"not parquet at all")
    with pytest.raises(JoinError):
        join(str(first), str(second))
    first, second = _dealt(tmp_path, [_table(100, k) for k in range(3)])  # two groups, and one
    with pytest.raises(JoinError, match="in turn"):
        join(str(second), str(first))  # one group, then two: not dealt in turn
