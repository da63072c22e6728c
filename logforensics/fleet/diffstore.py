"""``diff --store DIR FAILING``: the failing run against the baseline the store holds for it.

The store is read through the same locked, read-only DuckDB as ``query`` (only the columns
the choice needs, and the summaries of the two runs compared).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ..diagnose.engine import Diagnosis, evaluate
from ..diagnose.rulespec import load_rules
from ..pipeline import InputError
from . import baseline
from .discover import RunSource
from .parse import parse_run
from .query import run_sql
from .scan import summary_from_json
from .store import Store

#: The ``runs`` columns that choosing and stating a baseline use.
COLUMNS = ("run_id", "source", "outcome", "model", "tp_size", "dp_size", "pp_size", "ep_size", "gpu_device",
           "gpu_total_gib", "sglang_version", "settings", "start_time", "file_mtime")


def _runs(store: Store) -> list[dict[str, Any]]:
    columns, rows = run_sql(store, f"SELECT {', '.join(COLUMNS)} FROM runs")
    return [dict(zip(columns, r)) for r in rows]


def _summaries(store: Store, run_ids: set[str]) -> dict[str, Any]:
    _, rows = run_sql(store, "SELECT run_id, summary FROM summaries WHERE list_contains(?, run_id)",
                      [sorted(run_ids)])
    return {rid: summary_from_json(text) for rid, text in rows}


def _target(store: Store, runs: list[dict[str, Any]], failing: str) -> tuple[dict[str, Any], Any]:
    """The failing run's ``runs`` row and summary.

    A run_id of the store is that stored run; a log file that exists is read now (it may
    have grown since the scan); a source of the store that is no file (a directory of
    per-node logs, or a log since removed) is the stored run.
    """
    path = os.path.abspath(failing)
    row = next((r for r in runs if r["run_id"] == failing), None)
    if row is None and not os.path.isfile(path):
        row = next((r for r in runs if r["source"] == path), None)
    if row is not None:
        stored = _summaries(store, {row["run_id"]}).get(row["run_id"])
        if stored is None:
            raise InputError(f"{failing}: the store has no summary of this run; scan it again")
        return row, stored
    if not os.path.isfile(path):
        raise InputError(f"{failing}: neither a run of the store (run_id or source) nor a log file")
    parsed = parse_run(RunSource(path, (path,), (None,)), None)
    if parsed.error or parsed.runs is None:
        raise InputError(parsed.error or f"{failing}: cannot read")
    return parsed.runs, summary_from_json(parsed.summaries[0]["summary"])


def diagnose_in_store(store: Store, failing: str, rules_dirs: Iterable[str] = ()) -> tuple[Diagnosis, str]:
    """The diagnosis of ``failing`` against its baseline from the store, and the sentence that states the choice."""
    rules = load_rules(rules_dirs)
    runs = _runs(store)
    row, summary = _target(store, runs, failing)
    base = baseline.choose(row, runs)
    base_summary = _summaries(store, {base["run_id"]}).get(base["run_id"]) if base else None
    return evaluate(rules, summary, base_summary), baseline.statement(row, base)
