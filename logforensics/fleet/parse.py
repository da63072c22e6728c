"""Parse one run (its files, one per node) into rows: what a scan worker does, locally or on Ray.

Each file goes once through the one pipeline (``LiveRun``: the parser and run model of
``summary``), its events written to a Parquet file as they come, one row group at a
time, so memory stays bounded however large the log. The files' summaries are combined
across nodes by ``model.nodes.combine``, exactly as ``summary`` combines them, so the
stored run is what ``summary SOURCE --json`` prints.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..ingest import blocks, run_files
from ..ingest.runset import resolve_node
from ..model.nodes import NodeSummary, combine
from ..pipeline import InputError, LiveRun, with_beside
from .discover import RunSource
from .rows import EventColumns, environment_rows, parse_ts, ranks_rows, run_id, runs_row, sglang_version
from .schema import EVENTS

#: Events per Parquet row group.
ROW_GROUP = 65536
#: Kinds whose text may name the SGLang version.
_VERSION_KINDS = frozenset({"other", "launch_command", "vllm_log", "env"})


@dataclass(frozen=True)
class ParsedRun:
    """The rows of one run, or the reason it could not be read (``error``)."""

    run_id: str
    source: str
    runs: dict[str, Any] | None = None
    ranks: list[dict[str, Any]] = field(default_factory=list)
    summaries: list[dict[str, Any]] = field(default_factory=list)
    events_file: str | None = None
    warnings: tuple[str, ...] = ()
    environments: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


@dataclass
class _FileTimes:
    first: datetime | None = None
    last: datetime | None = None
    version: str | None = None


def _read_one(path: str, node: str | None, cols: EventColumns | None, flush: Any,
              times: _FileTimes) -> NodeSummary:
    run = LiveRun(path, node=node)

    def take(events: Sequence[Any]) -> None:
        for ev in events:
            if ev.ts:
                t = parse_ts(ev.ts)
                if t is not None:
                    times.first = times.first or t
                    times.last = t
            if times.version is None and ev.kind in _VERSION_KINDS:
                times.version = sglang_version([ev.text])
        if cols is not None:
            cols.add(events)
            if cols.n >= ROW_GROUP:
                flush(cols)

    for block in blocks(path):
        take(run.feed(block))
    take(run.close())
    return NodeSummary(node=node, file=path, summary=run.summary(), rank_nodes=dict(run.rank_nodes))


def parse_run(src: RunSource, staging: str | None) -> ParsedRun:
    """Parse ``src``; with ``staging``, write its events to a Parquet file there."""
    rid = run_id(src.source)
    cols = EventColumns(rid) if staging else None
    events_file = os.path.join(staging, f"{rid}.parquet") if staging else None
    pw: list[pq.ParquetWriter] = []

    def flush(c: EventColumns) -> None:
        if not pw:
            pw.append(pq.ParquetWriter(events_file, EVENTS, compression="zstd"))
        pw[0].write_table(pa.Table.from_pydict(c.columns(), schema=EVENTS))
        c.clear()

    parts: list[NodeSummary] = []
    warnings: list[str] = []
    times = _FileTimes()
    files = None
    try:
        files = run_files(list(src.files), list(src.artefacts))
        for f in files.files:
            try:
                parts.append(_read_one(f.path, resolve_node(f), cols, flush, times))
            except InputError as exc:
                warnings.append(str(exc))
        if cols is not None and (cols.n or not pw):
            flush(cols)
    except InputError as exc:
        warnings.append(str(exc))
    finally:
        if pw:
            pw[0].close()
    if not parts:
        if events_file and os.path.exists(events_file):
            os.unlink(events_file)
        return ParsedRun(rid, src.source, error="; ".join(warnings) or f"{src.source}: no log file")
    summary = combine(parts, source=src.source)
    if files is not None:
        summary = with_beside(summary, files)
    extra = {"sglang_version": times.version, "start_time": times.first, "end_time": times.last,
             "file_mtime": datetime.fromtimestamp(max(os.stat(p.file).st_mtime for p in parts))}
    row = runs_row(rid, src.source, [p.file for p in parts], [p.node for p in parts], summary, extra)
    summaries = [{"run_id": rid, "summary": json.dumps(summary.to_dict(), default=str, ensure_ascii=False)}]
    return ParsedRun(rid, src.source, row, ranks_rows(rid, summary), summaries, events_file, tuple(warnings),
                     environment_rows(rid, summary))
