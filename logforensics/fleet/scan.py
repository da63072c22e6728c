"""``scan``: find the runs under some paths, parse the new and changed ones, commit them to the store.

A file is unchanged when its size, modification time and the SHA-256 of its first
64 KiB all equal what the manifest recorded; a run is skipped when all its files are
unchanged and it has the same files as before. Findings are computed for the runs
parsed in this scan, against the baseline the store holds for each (``baseline.choose``).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from ..diagnose.engine import evaluate
from ..diagnose.rulespec import load_rules
from ..model.run import RunSummary
from . import baseline
from .discover import RunSource, discover
from .engines import run_local, run_ray
from .parse import ParsedRun
from .rows import run_id
from .store import Store, file_state


@dataclass(frozen=True)
class ScanResult:
    """What a scan did: counts for the closing line, and one line per problem."""

    runs_found: int
    runs_parsed: int
    runs_skipped: int
    files_found: int
    files_skipped: int
    findings: int
    warnings: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    parsed_sources: tuple[str, ...] = field(default=())


def summary_from_json(text: str) -> RunSummary:
    """A stored ``summary --json`` object back as a :class:`RunSummary`."""
    return RunSummary.from_dict(json.loads(text))


def _states(src: RunSource, warnings: list[str]) -> dict[str, dict[str, Any]] | None:
    out = {}
    for f in src.files:
        try:
            out[f] = file_state(f)
        except OSError as exc:
            warnings.append(f"{f}: cannot read ({exc.strerror or exc}); skipped")
    return out or None


def plan(sources: Sequence[RunSource], manifest: dict[str, dict[str, Any]],
         warnings: list[str]) -> tuple[list[RunSource], dict[str, dict[str, Any]], int]:
    """The runs to parse, the new manifest entries for them, and how many files were unchanged."""
    todo: list[RunSource] = []
    entries: dict[str, dict[str, Any]] = {}
    unchanged = 0
    for src in sources:
        states = _states(src, warnings)
        if states is None:
            continue
        rid = run_id(src.source)
        same = all(manifest.get(f, {}).get("run_id") == rid and
                   {k: manifest[f].get(k) for k in st} == st for f, st in states.items())
        members = {f for f, e in manifest.items() if e.get("run_id") == rid}
        if same and members == set(states):
            unchanged += len(states)
            continue
        readable = tuple(f for f in src.files if f in states)
        todo.append(RunSource(src.source, readable, tuple(n for f, n in zip(src.files, src.nodes) if f in states)))
        for f, st in states.items():
            entries[f] = dict(st, run_id=rid)
    return todo, entries, unchanged


def scan(paths: Iterable[str], store_dir: str, *, engine: str = "local", jobs: int | None = None,
         group_by: str = "file", events: bool = True, ray_address: str | None = None,
         rules_dirs: Iterable[str] = (), on_plan: Callable[[int], None] | None = None,
         on_run: Callable[[ParsedRun], None] | None = None) -> ScanResult:
    """Scan ``paths`` into the store at ``store_dir`` (created if missing)."""
    rules = load_rules(rules_dirs)  # a bad rule file fails before any parsing
    sources, missing = discover(paths, group_by)
    warnings = [f"{p}: no such file or directory" for p in missing]
    store = Store(store_dir, create=True)
    jobs = max(1, jobs or os.cpu_count() or 1)
    with store.lock():
        manifest = store.manifest()
        todo, entries, unchanged = plan(sources, manifest, warnings)
        if on_plan:
            on_plan(len(todo))
        scan_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
        staging = store.staging(scan_id) if events else None
        try:
            run = run_ray(todo, staging, jobs, ray_address) if engine == "ray" else run_local(todo, staging, jobs)
            parsed: list[ParsedRun] = []
            for p in run:
                parsed.append(p)
                if on_run:
                    on_run(p)
            errors = [p.error for p in parsed if p.error]
            warnings += [w for p in parsed for w in p.warnings]
            good = sorted((p for p in parsed if p.runs), key=lambda p: p.source)
            n_findings = _commit(store, good, scan_id, rules)
            for p in parsed:  # a run that could not be read is not recorded: the next scan tries again
                if p.error:
                    for f in [f for f, e in entries.items() if e["run_id"] == p.run_id]:
                        del entries[f]
            rescanned = {p.run_id for p in good}
            kept = {f: e for f, e in manifest.items() if e.get("run_id") not in rescanned}
            store.save_manifest({**kept, **entries})
        finally:
            if staging:
                shutil.rmtree(staging, ignore_errors=True)
    return ScanResult(runs_found=len(sources), runs_parsed=len(good), runs_skipped=len(sources) - len(todo),
                      files_found=sum(len(s.files) for s in sources), files_skipped=unchanged,
                      findings=n_findings, warnings=tuple(warnings), errors=tuple(errors),
                      parsed_sources=tuple(p.source for p in good))


def _commit(store: Store, parsed: list[ParsedRun], scan_id: str, rules: Any) -> int:
    if not parsed:
        return 0
    date = scan_id[:4] + "-" + scan_id[4:6] + "-" + scan_id[6:8]
    store.remove_runs({p.run_id for p in parsed})
    store.write_rows("runs", [p.runs for p in parsed if p.runs], date, scan_id)
    store.write_rows("ranks", [r for p in parsed for r in p.ranks], date, scan_id)
    store.write_rows("summaries", [r for p in parsed for r in p.summaries], date, scan_id)
    store.write_events([p.events_file for p in parsed if p.events_file], date, scan_id)
    findings = findings_for(store, [p.runs for p in parsed if p.runs], rules)
    store.write_rows("findings", findings, date, scan_id)
    return len(findings)


def stored_summaries(store: Store, run_ids: set[str]) -> dict[str, RunSummary]:
    """The stored summaries of these runs (what ``summary SOURCE --json`` printed at scan time)."""
    import pyarrow.compute as pc

    t = store.read("summaries")
    if not t.num_rows or not run_ids:
        return {}
    t = t.filter(pc.is_in(t.column("run_id"), value_set=pa.array(sorted(run_ids), pa.string())))
    return {r["run_id"]: summary_from_json(r["summary"]) for r in t.to_pylist()}


def findings_for(store: Store, targets: list[dict[str, Any]], rules: Any) -> list[dict[str, Any]]:
    """Findings rows for ``targets`` against each one's baseline (runs already in the store)."""
    all_runs = store.read("runs").to_pylist()
    pairs = [(row, baseline.choose(row, all_runs)) for row in targets]
    pairs = [(row, base) for row, base in pairs if base is not None or row["outcome"] != "ready"]
    summaries = stored_summaries(store, {r["run_id"] for r, _ in pairs} | {b["run_id"] for _, b in pairs if b})
    out = []
    for row, base in pairs:
        failing = summaries.get(row["run_id"])
        if failing is None:
            continue
        d = evaluate(rules, failing, summaries.get(base["run_id"]) if base else None)
        for f in d.findings:
            out.append({"run_id": row["run_id"], "baseline_run_id": base and base["run_id"],
                        "baseline_source": base and base["source"], "rule": f.rule, "name": f.name,
                        "severity": f.severity, "title": f.title, "explanation": f.explanation,
                        "evidence": json.dumps(list(f.evidence), default=str, ensure_ascii=False),
                        "verdict": d.verdict})
    return out
