"""The seam's batch: one kind's events as an Arrow RecordBatch of the kind's declared schema.

A column's type comes from the schema (``schema.arrow_schema``), never from the values,
so batches of one kind from any file, read in any order, have one schema and concatenate
without widening. A value the schema cannot hold (a field it lacks, or a value of
another type, such as a word where SGLang printed a number before) is not dropped: it
goes to the row's ``extra`` column as JSON, and its field's cell is null.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from . import Event
from .schema import PROVENANCE, arrow_schema, fields_of
from .types import arrow, fits


def to_batch(kind: str, events: Sequence[Event]) -> pa.RecordBatch:
    """``events`` (all of ``kind``) as one RecordBatch of ``arrow_schema(kind)``."""
    wrong = next((ev.kind for ev in events if ev.kind != kind), None)
    if wrong is not None:
        raise ValueError(f"a batch of {kind!r} events holds a {wrong!r} event")
    declared = fields_of(kind)
    extra: list[dict[str, Any] | None] = [None] * len(events)
    columns: list[pa.Array] = []
    values: list[Any]
    for name, t in PROVENANCE:
        if name == "end_line":  # a record of one line ends on it
            values = [ev.line if ev.end_line is None else ev.end_line for ev in events]
        else:
            values = [getattr(ev, name) for ev in events]
        columns.append(pa.array(values, arrow(t)))
    for name, t in sorted(declared.items()):
        values = [ev.fields.get(name) for ev in events]
        for i, value in enumerate(values):
            if not fits(value, t):
                extra[i] = {**(extra[i] or {}), name: value}
                values[i] = None
        columns.append(pa.array(values, arrow(t)))
    for i, ev in enumerate(events):
        lacking = {key: ev.fields[key] for key in ev.fields if key not in declared}
        if lacking:
            extra[i] = {**(extra[i] or {}), **lacking}
    columns.append(pa.array([ev.text for ev in events], pa.string()))
    columns.append(pa.array([None if e is None else json.dumps(e, default=str, ensure_ascii=False) for e in extra],
                            pa.string()))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(kind))
