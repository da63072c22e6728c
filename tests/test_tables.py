"""``parse --format parquet`` streams row groups: every event, its fields as typed columns."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from logforensics.export import tables
from logforensics.pipeline import iter_events

ROOT = Path(__file__).resolve().parent.parent
LOGS = [ROOT / "fixtures" / "real" / "052-l4x4-tp4-pcie-custom-allreduce-disabled-full-startup-to-ready.log",
        ROOT / "fixtures" / "real" / "041-mi355x-tp8-hip-oom-during-model-init-transformers-fallback.log"]


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name[:3])
def test_parquet_row_groups_hold_every_event(log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tables, "ROW_GROUP", 40)  # many row groups, columns appearing late
    events = list(iter_events(log))
    out = tmp_path / "events.parquet"
    assert tables.write_parquet(iter(events), str(out)) == len(events)
    f = pq.ParquetFile(out)
    assert f.metadata.num_row_groups == -(-len(events) // 40)
    rows = f.read().to_pylist()
    assert len(rows) == len(events)
    names = f.schema_arrow.names
    assert names[:5] == ["kind", "rank", "ts", "file", "line"] and names[-1] == "text"
    for ev, row in zip(events, rows):
        want = ev.to_dict()
        assert set(k for k, v in row.items() if v is not None) <= set(want) | {"end_line"}
        for key, value in want.items():
            got = row[key]
            if isinstance(value, (dict, list)):
                value = json.dumps(value, default=str)
            column = f.schema_arrow.field(key).type
            if value is None:
                assert got is None, key
            elif str(column) == "string":
                assert got == str(value), key
            else:
                assert got == value and type(got) is type(value) or float(got) == value, key


def test_min_max_statistics_of_numbers_only(tmp_path: Path) -> None:
    """Row groups can be skipped by line or figure ranges; texts carry no min/max (their cost)."""
    out = tmp_path / "events.parquet"
    tables.write_parquet(iter_events(LOGS[0]), str(out))
    f = pq.ParquetFile(out)
    group = f.metadata.row_group(0)
    seen = set()
    for i in range(group.num_columns):
        column = group.column(i)
        stats = column.statistics
        kind = str(f.schema_arrow.field(column.path_in_schema).type)
        seen.add(kind)
        has = stats is not None and stats.has_min_max
        assert has == (kind != "string") or (kind != "string" and stats.null_count == group.num_rows), column.path_in_schema
    line = group.column(f.schema_arrow.names.index("line")).statistics
    assert line.min >= 1 and line.max > line.min
    assert {"string", "int64"} <= seen
