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
    assert f.schema_arrow.names == tables.file_schema().names  # the declared schema, whatever the log
    kept = 0
    for ev, row in zip(events, rows):
        extra = json.loads(row["extra"]) if row["extra"] else {}
        for key, value in ev.to_dict().items():
            got = row[key]
            if key in extra:  # a value its field's type cannot hold, or a field the schema lacks
                assert got is None and extra[key] == json.loads(json.dumps(value, default=str)), key
                kept += 1
            elif isinstance(value, (list, dict, tuple)):  # a list or a struct (a pair: its two fields)
                assert _plain(got, value), (key, got, value)
            else:
                assert got == value and (type(got) is type(value) or float(got) == value), key
        assert row["end_line"] == (ev.end_line or ev.line)
    assert kept == sum(bool(json.loads(r["extra"]) if r["extra"] else 0) and len(json.loads(r["extra"])) for r in rows)


def _plain(got: object, value: object) -> bool:
    """A list or a struct read back (``got``) is the value read from the log: a mapping's
    fields (a struct's unset fields are null), a pair's two values in order."""
    if isinstance(value, dict):
        return isinstance(got, dict) and all(v is None for k, v in got.items() if k not in value) and \
            all(_plain(got.get(k), v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        items = list(got.values()) if isinstance(got, dict) else got
        return isinstance(items, list) and len(items) == len(value) and all(map(_plain, items, value))
    return bool(got == value)


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
        if "." in column.path_in_schema:  # a list's or a struct's leaf
            continue
        kind = str(f.schema_arrow.field(column.path_in_schema).type)
        seen.add(kind)
        has = stats is not None and stats.has_min_max
        assert has == (kind != "string") or (kind != "string" and stats.null_count == group.num_rows), column.path_in_schema
    line = group.column(f.schema_arrow.names.index("line")).statistics
    assert line.min >= 1 and line.max > line.min
    assert {"string", "int64"} <= seen
