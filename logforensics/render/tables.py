"""``parse --format parquet``: events to a Parquet file in row groups, in bounded memory.

A log's events have different fields, so the file's columns (provenance, then every field
name in the order first seen, then ``text``) and their types are known only at the end.
Events are therefore collected a row group at a time (``ROW_GROUP`` events) and each group
is written to a temporary Arrow stream with the types its own values need; at the end
every group is read back one at a time, given the columns it lacks (as nulls) and the
final type of each column, and written as one row group of the output. Memory stays that
of one row group, whatever the size of the log.

A column's type: ``int64`` if every value is an integer, ``double`` if every value is a
number, ``bool`` if every value is a boolean, otherwise ``string`` (``str()`` of the
value). Mappings and lists (tracebacks' frames, progress) are JSON text. Missing values
are nulls.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from typing import IO, Any

from ..events import Event

#: Events per row group: a few tens of MiB of Python objects while a group is collected.
ROW_GROUP = 16384

_TYPES = ("bool", "int", "float", "str")


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
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


def write_parquet(events: Iterable[Event], where: str | IO[bytes]) -> int:
    """Write ``events`` as Parquet to ``where`` (a path or a binary file); returns the rows.

    The row groups wait in a temporary directory (the system's) until the columns are known.
    """
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

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
            row = ev.to_dict()
            for key, value in row.items():
                if isinstance(value, (dict, list)):
                    row[key] = json.dumps(value, default=str)
                if key not in order:
                    order[key] = None
            batch.append(row)
            if len(batch) >= ROW_GROUP:
                rows += len(batch)
                spill(batch)
                batch = []
        if batch or not groups:
            rows += len(batch)
            spill(batch)
        names = [n for n in order if n != "text"] + (["text"] if "text" in order else [])
        schema = pa.schema([(n, arrow_type[_final(kinds.get(n, set()))]) for n in names])
        with pq.ParquetWriter(where, schema) as writer:
            for file in groups:
                with ipc.open_stream(file) as reader:
                    part = reader.read_all()
                os.unlink(file)
                cols = []
                for field in schema:
                    if field.name not in part.column_names:
                        cols.append(pa.nulls(part.num_rows, field.type))
                        continue
                    col = part.column(field.name)
                    if col.type != field.type:
                        if field.type == pa.string():
                            col = pa.array([None if v is None else str(v) for v in col.to_pylist()], pa.string())
                        else:
                            col = col.cast(field.type)
                    cols.append(col)
                writer.write_table(pa.Table.from_arrays(cols, schema=schema))
    return rows
