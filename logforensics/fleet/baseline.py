"""Choosing a run's baseline from the store, and saying which one was chosen and why.

The baseline of a run is the nearest ``ready`` run of the same setup that started before
it: the same model (the same checkpoint, wherever it lies), the same TP, DP and PP sizes,
and the same GPU and SGLang version where both logs show them. Its other settings
(server arguments and environment variables, EP size included) may differ: a failing run
usually changed one, and the statement lists each that differs. A run that is not
``ready`` and has no earlier one takes the nearest later one. A run whose log names no
model has no baseline: nothing says what it ran.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

#: The setup, in the order the statement names it: (column, label).
SETUP = (("model", "model"), ("tp_size", "TP"), ("dp_size", "DP"), ("pp_size", "PP"), ("gpu", "GPU"),
         ("sglang_version", "SGLang"))


def _when(row: Mapping[str, Any]) -> datetime:
    return row.get("start_time") or row.get("file_mtime") or datetime.min


def _setup(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row's setup values; None where its log does not show one."""
    values = {k: row.get(k) for k, _ in SETUP if k != "gpu"}
    total = row.get("gpu_total_gib")
    values["gpu"] = f"{row.get('gpu_device') or 'GPU'} {total:.1f} GiB" if total else None
    return values


def _same(key: str, a: Any, b: Any) -> bool:
    if key == "model":  # the same checkpoint under another directory is the same model
        return str(a).strip().rstrip("/").rsplit("/", 1)[-1] == str(b).strip().rstrip("/").rsplit("/", 1)[-1]
    return bool(a == b)


def same_setup(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Both rows name a model, the same one, and no other aspect of the setup that both show differs."""
    sa, sb = _setup(a), _setup(b)
    if not sa["model"] or not sb["model"]:
        return False
    return all(_same(k, sa[k], sb[k]) for k, _ in SETUP if sa[k] is not None and sb[k] is not None)


def choose(target: Mapping[str, Any], runs: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The baseline row for ``target`` among ``runs`` (rows of the ``runs`` table), or None."""
    if not target.get("model"):
        return None
    same = [r for r in runs if r["run_id"] != target["run_id"] and r.get("outcome") == "ready"
            and same_setup(target, r)]
    before = [r for r in same if _when(r) < _when(target)]
    if before:
        return max(before, key=_when)
    if target.get("outcome") == "ready":  # a ready run is compared only with earlier ones
        return None
    return min(same, key=_when) if same else None


def _settings(row: Mapping[str, Any]) -> dict[str, Any]:
    try:
        values = dict(json.loads(row.get("settings") or "{}"))
    except (TypeError, ValueError):
        values = {}
    if row.get("ep_size") is not None:
        values["ep_size"] = row["ep_size"]
    return values


def differing_settings(base: Mapping[str, Any], target: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(setting, baseline value, run's value) for each setting the two logs show differently
    (None: that log does not show it)."""
    b, t = _settings(base), _settings(target)
    return [(k, b.get(k), t.get(k)) for k in sorted(set(b) | set(t)) if b.get(k) != t.get(k)]


def _value(v: Any) -> str:
    return "not shown" if v is None else json.dumps(v) if isinstance(v, bool) else str(v)


def _describe(values: Mapping[str, Any]) -> str:
    """``model M, TP8 DP1 PP1, GPU CUDA 79.2 GiB, SGLang 0.5.3``: what is shown, nothing else."""
    sizes = " ".join(f"{label}{values[k]}" for k, label in SETUP[1:4] if values[k] is not None)
    parts = [f"model {values['model']}" if values["model"] else "", sizes,
             *(f"{label} {values[k]}" for k, label in SETUP[4:] if values[k] is not None)]
    return ", ".join(p for p in parts if p)


def statement(target: Mapping[str, Any], base: Mapping[str, Any] | None) -> str:
    """Which baseline and what setup it shares with the run (or why there is none), then, on a
    second line, the settings that differ."""
    ts = _setup(target)
    if base is None:
        if not target.get("model"):
            return "no baseline: the log names no model (no server_args or launch command)"
        return f"no baseline in the store: no ready run of the same setup ({_describe(ts)})"
    bs = _setup(base)
    shared = _describe({k: bs[k] if ts[k] is not None else None for k, _ in SETUP})
    started = base.get("start_time")
    when = f"started {started:%Y-%m-%d %H:%M:%S}" if started else "no start time in its log"
    nearest = "the nearest earlier" if _when(base) < _when(target) else "none started before it; the nearest"
    head = (f"baseline: {base['source']} (run {base['run_id']}, ready, {when}; {nearest} ready run of the "
            f"same setup: {shared})")
    diff = differing_settings(base, target)
    if not diff:
        return head + "\nsettings: none of those the rules weigh differs"
    return head + "\nsettings that differ (baseline -> this run): " + ", ".join(
        f"{k} {_value(b)} -> {_value(t)}" for k, b, t in diff)
