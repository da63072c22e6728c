"""A run's summary as table rows: one ``runs`` row, ``ranks`` rows, event columns.

Pure functions of a :class:`RunSummary` (and the run's events): what ``summary --json``
says, flattened. Nothing here guesses: a figure the log does not show stays null.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..diagnose.settings import EFFECTS
from ..events import Event
from ..model.beside import the_end
from ..model.records import NO_MEMORY, NOT_SEEN, Quantiles
from ..model.run import RunSummary
from .schema import ENV_COLUMNS, EVENT_NUMBERS, RANK_FIGURES

#: Launch-option spellings of each parallel size (server_args first, then the command line).
PARALLEL = {"tp_size": ("tp_size", "tp", "tensor_parallel_size"), "dp_size": ("dp_size", "dp"),
            "pp_size": ("pp_size", "pp"), "ep_size": ("ep_size", "ep", "expert_parallel_size")}
MODEL_KEYS = ("model_path", "model")
#: The settings hashed into ``settings_hash``: those the rules link to an effect, less the
#: parallel sizes and the model (their own columns).
SETTINGS = tuple(sorted(k for k in EFFECTS if k not in PARALLEL and k not in MODEL_KEYS))

_FULL_TS = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,6})?$")
_SGLANG_VERSION = re.compile(
    r"\bsglang(?:==|:v|-v|\s+v|\s+version\s+v?)(\d+\.\d+\.\d+(?:\.post\d+|rc\d+)?)", re.IGNORECASE)


def run_id(source: str) -> str:
    """A run's id: 16 hex digits of SHA-1 over its source path (a rescan keeps it)."""
    return hashlib.sha1(source.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def parse_ts(ts: str | None) -> datetime | None:
    """A log timestamp with a full date (``2026-03-24 08:58:32[.123]``) as a naive datetime."""
    if not ts or not _FULL_TS.match(ts):
        return None
    try:
        return datetime.fromisoformat(ts.replace(",", "."))
    except ValueError:
        return None


def sglang_version(texts: Iterable[str]) -> str | None:
    """The SGLang version a line names (``sglang==0.5.3``, ``lmsysorg/sglang:v0.4.6``), else None."""
    for text in texts:
        m = _SGLANG_VERSION.search(text)
        if m:
            return m.group(1)
    return None


def _number(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            try:
                return float(value)
            except ValueError:
                return value.strip()
    return value


def _arg(s: RunSummary, names: Sequence[str]) -> Any:
    for args in (s.server_args, s.launch_args):
        for n in names:
            v = args.get(n)
            if v not in (None, ""):
                return v
    return None


def _int(value: Any) -> int | None:
    value = _number(value)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def settings(s: RunSummary) -> dict[str, Any]:
    """The settings that matter, as the log shows them (server_args, launch command, env)."""
    out: dict[str, Any] = {}
    for key in SETTINGS:
        v = _arg(s, (key,))
        if v is None:
            v = s.env.get(key)
        if v is not None:
            out[key] = _number(v)
    return out


def settings_hash(values: Mapping[str, Any]) -> str:
    """12 hex digits of SHA-1 over the sorted settings (``{}`` too: a log that shows none)."""
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _median(stats: Quantiles | None) -> float | None:
    v = stats.median if stats is not None else None
    return float(v) if isinstance(v, (int, float)) else None


def runs_row(rid: str, source: str, files: Sequence[str], nodes: Sequence[str | None], s: RunSummary,
             extra: Mapping[str, Any]) -> dict[str, Any]:
    """The ``runs`` row of a run's (combined) summary; ``extra`` holds what the events gave."""
    crash = s.crash
    fp = crash.fingerprint if crash else None
    oom = crash.oom if crash else None
    values = settings(s)
    cov = s.coverage

    def of_crash(name: str) -> Any:
        return getattr(crash, name) if crash else None

    return {
        "run_id": rid, "source": source, "files": list(files), "nodes": [n for n in nodes if n],
        "outcome": s.outcome, "outcome_reason": s.outcome_reason,
        "first_rank": of_crash("first_rank"), "crash_phase": of_crash("phase"),
        "exception": of_crash("exception"), "fingerprint": fp.id if fp else None,
        "fingerprint_exception": fp.exception if fp else None, "fingerprint_function": fp.function if fp else None,
        "crash_node": of_crash("node"), "crash_file": of_crash("file"), "crash_line": of_crash("line"),
        "sglang_version": extra.get("sglang_version"), "model": _arg(s, MODEL_KEYS),
        **{k: _int(_arg(s, names)) for k, names in PARALLEL.items()},
        "gpu_device": oom.device if oom else None, "gpu_total_gib": oom.total_gib if oom else None,
        "settings_hash": settings_hash(values), "settings": json.dumps(values, sort_keys=True, default=str),
        "start_time": extra.get("start_time"), "end_time": extra.get("end_time"),
        "file_mtime": extra.get("file_mtime"),
        "lines": cov.lines_read, "bytes": cov.bytes, "events": cov.events,
        "lines_unrecognised": cov.lines_unrecognised, "recognised_pct": cov.recognised_pct,
        "ranks_seen": len(s.ranks), "missing_ranks": list(s.missing_ranks),
        "decode_tok_s_median": _median(s.throughput.decode_gen_tok_s),
    }


def environment_rows(rid: str, s: RunSummary) -> list[dict[str, Any]]:
    """The ``environments`` row of a run with files beside its logs (none without): each
    environment fact, and the record that ended the run (``model.beside.the_end``)."""
    a = s.artefacts
    if not a or not (a.environment or a.terminations):
        return []
    facts = a.environment.facts if a.environment else {}
    row: dict[str, Any] = {"run_id": rid, **{k: facts[k].value if k in facts else None for k in ENV_COLUMNS}}
    count = facts.get("gpu_count")
    row["gpu_count"] = int(count.value) if count and count.value.isdigit() else None
    row["provenance"] = json.dumps({k: c.where for k, c in facts.items()}, sort_keys=True)
    end = the_end(a.terminations)
    row.update({"ended_by": end.source if end else None, "end_cause": end.cause if end else None,
                "end_exit_code": end.exit_code if end else None, "end_at": end.where if end else None})
    return [row]


def ranks_rows(rid: str, s: RunSummary) -> list[dict[str, Any]]:
    """One ``ranks`` row per rank of a run's summary, with the rank's node and file."""
    crashed = set(s.crash.ranks if s.crash else [])
    by_rank = s.throughput.decode_by_rank
    rows = []
    for rank in s.ranks:
        mem = s.memory.get(rank, NO_MEMORY)
        seen = s.last_seen.get(rank, NOT_SEEN)
        row: dict[str, Any] = {"run_id": rid, "node": s.rank_nodes.get(rank), "file": seen.file or s.file,
                               "rank": rank, "phase_reached": s.phase_reached.get(rank),
                               "milestone": seen.milestone, "last_line": seen.line,
                               "last_ts": seen.ts, "crashed": rank in crashed}
        for name, _ in RANK_FIGURES:
            v = mem.figure(name)
            row[name] = v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
        stats = by_rank.get(rank)
        row["decode_tok_s_median"] = _median(stats)
        row["decode_batches"] = stats.count if stats is not None else None
        rows.append(row)
    return rows


class EventColumns:
    """Events gathered column by column, for one Parquet row group at a time."""

    def __init__(self, rid: str) -> None:
        self.rid = rid
        self.clear()

    def clear(self) -> None:
        self.cols: dict[str, list[Any]] = {n: [] for n in
                                           ("node", "file", "line", "end_line", "rank", "ts", "kind",
                                            *EVENT_NUMBERS, "fields", "text")}
        self.n = 0

    def add(self, events: Sequence[Event]) -> None:
        c = self.cols
        for ev in events:
            d = {k: ev.fields[k] for k in ev.fields} if ev.fields else {}
            c["node"].append(ev.node)
            c["file"].append(ev.file)
            c["line"].append(ev.line)
            c["end_line"].append(ev.end_line)
            c["rank"].append(ev.rank)
            c["ts"].append(ev.ts)
            c["kind"].append(ev.kind)
            for n in EVENT_NUMBERS:
                v = d.get(n)
                c[n].append(float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None)
            c["fields"].append(json.dumps(d, default=str, ensure_ascii=False) if d else None)
            c["text"].append(ev.text)
        self.n += len(events)

    def columns(self) -> dict[str, list[Any]]:
        return {"run_id": [self.rid] * self.n, **self.cols}
