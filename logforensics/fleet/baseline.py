"""Choosing a run's baseline from the store, and saying which one was chosen and why.

The baseline of a run is the latest ``ready`` run with the same model, the same
parallel sizes (TP, DP, PP, EP) and the same settings hash, preferring runs that started
before it. A run whose log names no model has no baseline: nothing says what it ran.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

KEY = ("model", "tp_size", "dp_size", "pp_size", "ep_size", "settings_hash")


def _when(row: Mapping[str, Any]) -> datetime:
    return row.get("start_time") or row.get("file_mtime") or datetime.min


def choose(target: Mapping[str, Any], runs: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The baseline row for ``target`` among ``runs`` (rows of the ``runs`` table), or None."""
    if not target.get("model"):
        return None
    same = [r for r in runs if r["run_id"] != target["run_id"] and r.get("outcome") == "ready"
            and all(r.get(k) == target.get(k) for k in KEY)]
    before = [r for r in same if _when(r) < _when(target)]
    if before:
        return max(before, key=_when)
    if target.get("outcome") == "ready":  # a ready run is compared only with earlier ones
        return None
    return max(same, key=_when) if same else None


def _sizes(row: Mapping[str, Any]) -> str:
    return " ".join(f"{k[:2].upper()}{row[k] if row.get(k) is not None else '?'}"
                    for k in ("tp_size", "dp_size", "pp_size", "ep_size"))


def statement(target: Mapping[str, Any], base: Mapping[str, Any] | None) -> str:
    """One sentence: which baseline, and what it shares with the run (or why there is none)."""
    if base is None:
        if not target.get("model"):
            return "no baseline: the log names no model (no server_args or launch command)"
        return (f"no baseline in the store: no ready run with model {target['model']}, {_sizes(target)}, "
                f"settings {target.get('settings_hash')}")
    started = base.get("start_time")
    when = f"started {started:%Y-%m-%d %H:%M:%S}" if started else "no start time in its log"
    return (f"baseline: {base['source']} (run {base['run_id']}, ready, {when}; the latest ready run with "
            f"the same model {base['model']}, {_sizes(base)}, settings {base.get('settings_hash')})")
