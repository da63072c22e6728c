"""Parse one run (its files, one per node) into rows: what a scan worker does, locally or on Ray.

Each file goes once through the one pipeline (``LiveRun``: the parser and run model of
``summary``), and its events are written to a Parquet file as they come, one row group
at a time, so memory stays bounded however large the log.

A run of several per-node files is summarised file by file and combined by
:func:`combine`, until the run model reads several files as one run; this is the only
place that would change then.
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

from ..ingest import blocks
from ..model.run import RunSummary
from ..pipeline import InputError, LiveRun
from .discover import RunSource
from .rows import EventColumns, parse_ts, ranks_rows, run_id, runs_row, sglang_version
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
    error: str | None = None


@dataclass
class _FileResult:
    node: str | None
    file: str
    summary: RunSummary
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    version: str | None = None


def _read_one(path: str, node: str | None, cols: EventColumns | None, writer: Any) -> _FileResult:
    run = LiveRun(path)
    res = _FileResult(node, path, None)  # type: ignore[arg-type]

    def take(events: Sequence[Any]) -> None:
        for ev in events:
            if ev.ts:
                t = parse_ts(ev.ts)
                if t is not None:
                    res.first_ts = res.first_ts or t
                    res.last_ts = t
            if res.version is None and ev.kind in _VERSION_KINDS:
                res.version = sglang_version([ev.text])
        if cols is not None:
            cols.add(events, node)
            if cols.n >= ROW_GROUP:
                writer(cols)

    for block in blocks(path):
        take(run.feed(block))
    take(run.close())
    res.summary = run.summary()
    return res


def combine(parts: Sequence[_FileResult]) -> tuple[_FileResult, str | None]:
    """The file whose summary speaks for the run, and its node when the run has several.

    A failed node decides (the earliest failure by timestamp when every failed node
    shows one, else the first in node order); else a ready node; else the first file.
    """
    if len(parts) == 1:
        return parts[0], parts[0].node
    failed = [p for p in parts if p.summary.outcome in ("crashed", "hung")]
    if failed:
        def when(p: _FileResult) -> datetime | None:
            c = p.summary.crash or {}
            return parse_ts(c.get("ts")) or (p.last_ts if p.summary.outcome == "hung" else None)
        times = [when(p) for p in failed]
        lead = failed[times.index(min(t for t in times if t))] if all(times) else failed[0]
        return lead, lead.node
    ready = [p for p in parts if p.summary.outcome == "ready"]
    return (ready[0] if ready else parts[0]), None


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

    parts: list[_FileResult] = []
    warnings: list[str] = []
    try:
        for path, node in zip(src.files, src.nodes):
            try:
                parts.append(_read_one(path, node, cols, flush))
            except InputError as exc:
                warnings.append(str(exc))
        if cols is not None and (cols.n or not pw):
            flush(cols)
    finally:
        if pw:
            pw[0].close()
    if not parts:
        if events_file and os.path.exists(events_file):
            os.unlink(events_file)
        return ParsedRun(rid, src.source, error="; ".join(warnings) or f"{src.source}: no log file")
    lead, crash_node = combine(parts)
    mtimes = [os.stat(p.file).st_mtime for p in parts]
    extra = {"sglang_version": next((p.version for p in parts if p.version), None),
             "start_time": min((p.first_ts for p in parts if p.first_ts), default=None),
             "end_time": max((p.last_ts for p in parts if p.last_ts), default=None),
             "file_mtime": datetime.fromtimestamp(max(mtimes))}
    row = runs_row(rid, src.source, [p.file for p in parts], [p.node for p in parts], lead.summary,
                   [p.summary for p in parts], crash_node, extra)
    ranks = [r for p in parts for r in ranks_rows(rid, p.node, p.file, p.summary)]
    summaries = [{"run_id": rid, "node": p.node, "file": p.file, "lead": p is lead,
                  "summary": json.dumps(p.summary.to_dict(), default=str, ensure_ascii=False)} for p in parts]
    return ParsedRun(rid, src.source, row, ranks, summaries, events_file, tuple(warnings))
