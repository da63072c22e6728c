"""``diff --store DIR FAILING``: the failing run against the baseline the store holds for it."""

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
from .scan import stored_summaries, summary_from_json
from .store import Store


def _target(store: Store, failing: str) -> tuple[dict[str, Any], Any]:
    """The failing run's ``runs`` row and summary.

    A run_id of the store is that stored run; a log file that exists is read now (it may
    have grown since the scan); a source of the store that is no file (a directory of
    per-node logs, or a log since removed) is the stored run.
    """
    runs = store.read("runs").to_pylist()
    path = os.path.abspath(failing)
    row = next((r for r in runs if r["run_id"] == failing), None)
    if row is None and not os.path.isfile(path):
        row = next((r for r in runs if r["source"] == path), None)
    if row is not None:
        stored = stored_summaries(store, {row["run_id"]}).get(row["run_id"])
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
    row, summary = _target(store, failing)
    base = baseline.choose(row, store.read("runs").to_pylist())
    base_summary = stored_summaries(store, {base["run_id"]}).get(base["run_id"]) if base else None
    return evaluate(rules, summary, base_summary), baseline.statement(row, base)
