"""``scan``: find the runs under some paths, parse the new and changed ones, commit them to the store.

A file is unchanged when its size, modification time and the SHA-256 of its first
64 KiB all equal what the manifest recorded; a run is skipped when all its files, the
artefacts beside its logs included, are unchanged and it has the same files as before. Findings are computed for the runs
parsed in this scan, against the baseline the store holds for each (``baseline.choose``).

Memory does not grow with the number of runs: each run's rows go to the commit as it is
parsed (written a row group at a time), and findings are computed afterwards a model
and a row group at a time, with the summaries read back from the commit's files.
A SIGTERM stops the scan where it is: its workers are stopped, its commit undone.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..diagnose.engine import evaluate
from ..diagnose.rulespec import load_rules
from ..model.run import RunSummary
from . import baseline
from .discover import RunSource, discover
from .engines import run_local, run_ray
from .parse import ParsedRun
from .rows import run_id
from .store import LOCK_WAIT, Commit, Store, file_state, read_parts

#: Baseline summaries kept decoded while findings are computed.
SUMMARY_CACHE = 64


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


class ScanInterrupted(KeyboardInterrupt):
    """A SIGTERM during a scan, raised where the scan is, so that it undoes its commit and stops its workers."""


def summary_from_json(text: str) -> RunSummary:
    """A stored ``summary --json`` object back as a :class:`RunSummary`."""
    return RunSummary.from_dict(json.loads(text))


def _states(src: RunSource, warnings: list[str]) -> dict[str, dict[str, Any]] | None:
    """Each readable log file's state (``file_state``); None when none is readable."""
    out = {}
    for f in src.files:
        try:
            out[f] = file_state(f)
        except OSError as exc:
            warnings.append(f"{f}: cannot read ({exc.strerror or exc}); skipped")
    return out or None


def _artefact_states(src: RunSource) -> dict[str, dict[str, Any]]:
    """The state of each file beside the run's logs, marked as such: a changed, added or
    removed artefact changes the run as a changed log does (an unreadable one is left out
    here; reading the run says why)."""
    out = {}
    for f in src.artefacts:
        try:
            out[f] = dict(file_state(f), artefact=True)
        except OSError:
            continue
    return out


def plan(sources: Sequence[RunSource], manifest: dict[str, dict[str, Any]],
         warnings: list[str]) -> tuple[list[RunSource], dict[str, dict[str, Any]], int]:
    """The runs to parse, the new manifest entries for them (log files and the artefacts
    beside them), and how many log files were unchanged."""
    todo: list[RunSource] = []
    entries: dict[str, dict[str, Any]] = {}
    unchanged = 0
    for src in sources:
        logs = _states(src, warnings)
        if logs is None:
            continue
        states = {**logs, **_artefact_states(src)}
        rid = run_id(src.source)
        same = all(manifest.get(f, {}).get("run_id") == rid and
                   {k: manifest[f].get(k) for k in st} == st for f, st in states.items())
        members = {f for f, e in manifest.items() if e.get("run_id") == rid}
        if same and members == set(states):
            unchanged += len(logs)
            continue
        todo.append(replace(src, files=tuple(f for f in src.files if f in logs),
                            nodes=tuple(n for f, n in zip(src.files, src.nodes) if f in logs)))
        for f, st in states.items():
            entries[f] = dict(st, run_id=rid)
    return todo, entries, unchanged


class _Stop:
    """A SIGTERM seen, raised as :class:`ScanInterrupted` at the scan's next step.

    The handler only records it: Python runs a handler wherever the main thread is, and
    an exception raised there inside a finalizer or a fork hook is printed and dropped.
    :meth:`check` raises it while the scan waits for its workers (every quarter second),
    between two runs, and between two steps of the commit.
    """

    def __init__(self) -> None:
        self.signum: int | None = None

    def handler(self, signum: int, _frame: Any) -> None:
        self.signum = signum

    def check(self) -> None:
        if self.signum is not None:
            raise ScanInterrupted(f"stopped by {signal.Signals(self.signum).name}")


@contextmanager
def _sigterm_interrupts() -> Iterator[_Stop]:
    """SIGTERM raises :class:`ScanInterrupted` in the scan (in the main thread only, where Python runs handlers)."""
    stop = _Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    old = signal.signal(signal.SIGTERM, stop.handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGTERM, old)


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """No SIGTERM or SIGINT while a stopped scan cleans up (a second signal would leave it half done)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def scan(paths: Iterable[str], store_dir: str, *, engine: str = "local", jobs: int | None = None,
         group_by: str = "file", events: bool = True, ray_address: str | None = None,
         rules_dirs: Iterable[str] = (), on_plan: Callable[[int], None] | None = None,
         on_run: Callable[[ParsedRun], None] | None = None, on_note: Callable[[str], None] | None = None,
         lock_wait: float = LOCK_WAIT) -> ScanResult:
    """Scan ``paths`` into the store at ``store_dir`` (created if missing).

    ``on_note`` gets one line when the scan waits for another scan's lock or repairs
    what a stopped scan left; ``lock_wait`` bounds the wait (seconds).
    """
    rules = load_rules(rules_dirs)  # a bad rule file fails before any parsing
    sources, missing = discover(paths, group_by)
    runs_found, files_found = len(sources), sum(len(s.files) for s in sources)
    warnings = [f"{p}: no such file or directory" for p in missing]
    store = Store(store_dir, create=True)
    jobs = max(1, jobs or os.cpu_count() or 1)
    with _sigterm_interrupts() as stop, store.lock(lock_wait, on_note):
        store.recover()
        warnings += store.foreign_warnings()
        manifest = store.manifest()
        todo, entries, unchanged = plan(sources, manifest, warnings)
        del sources
        if on_plan:
            on_plan(len(todo))
        now = datetime.now(timezone.utc)
        commit = store.begin(now.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6], now.strftime("%Y-%m-%d"))
        try:
            staging = commit.staging if events else None
            results = (run_ray(todo, staging, jobs, ray_address) if engine == "ray"
                       else run_local(todo, staging, jobs, stop.check))
            parsed, failed, errors = _take(results, commit, warnings, on_run, stop)
            n_findings = _findings(store, commit, parsed, rules, stop)
            kept = {f: e for f, e in manifest.items() if e.get("run_id") not in parsed}
            new = {f: e for f, e in entries.items() if e["run_id"] not in failed}  # tried again next time
            stop.check()
            commit.publish(parsed, {**kept, **new})
        except BaseException:
            with _signals_ignored():
                commit.abort()
            raise
    return ScanResult(runs_found=runs_found, runs_parsed=len(parsed), runs_skipped=runs_found - len(todo),
                      files_found=files_found, files_skipped=unchanged, findings=n_findings,
                      warnings=tuple(warnings), errors=tuple(errors))


def _take(results: Iterator[ParsedRun], commit: Commit, warnings: list[str],
          on_run: Callable[[ParsedRun], None] | None, stop: _Stop) -> tuple[set[str], set[str], list[str]]:
    """Each run's rows into the commit as the run comes (nothing of it is kept): parsed ids, failed ids, errors."""
    parsed: set[str] = set()
    failed: set[str] = set()
    errors: list[str] = []
    try:
        for p in results:
            stop.check()
            if on_run:
                on_run(p)
            warnings.extend(p.warnings)
            if p.error:  # a run that could not be read is not recorded: the next scan tries again
                errors.append(p.error)
                failed.add(p.run_id)
                continue
            if p.runs is None:
                continue
            commit.add_rows("runs", [p.runs])
            commit.add_rows("ranks", p.ranks)
            commit.add_rows("summaries", p.summaries)
            commit.add_rows("environments", p.environments)
            if p.events_file:
                commit.add_events(p.events_file)
            parsed.add(p.run_id)
    finally:
        close = getattr(results, "close", None)
        if close is not None:  # stops the workers now when the scan is stopped
            close()
    return parsed, failed, errors


def _model_key(model: Any) -> str | None:
    """What ``baseline`` compares of a model: the checkpoint's name, wherever it lies."""
    return str(model).strip().rstrip("/").rsplit("/", 1)[-1] if model else None


def _baselines(runs: pa.Table, new_ids: set[str]) -> dict[str, tuple[str, str] | None]:
    """For each new run that gets findings: its baseline's ``(run_id, source)``, or None.

    A baseline has the run's model (``baseline``: a log that names no model has none), so
    the candidates are taken a model at a time.
    """
    out: dict[str, tuple[str, str] | None] = {}
    keys = [_model_key(m) for m in runs.column("model").to_pylist()]
    ids = runs.column("run_id").to_pylist()
    groups: dict[str | None, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    wanted = {keys[i] for i, r in enumerate(ids) if r in new_ids}
    del keys
    for key in wanted:
        rows = groups[key]
        for start in range(0, len(rows), 1024 if key is None else len(rows)):
            part = runs.take(pa.array(rows[start:start + (1024 if key is None else len(rows))])).to_pylist()
            for row in part:
                if row["run_id"] not in new_ids:
                    continue
                base = baseline.choose(row, part) if key is not None else None
                if base is not None or row["outcome"] != "ready":
                    out[row["run_id"]] = (base["run_id"], base["source"]) if base else None
            del part
    return out


class _Summaries:
    """Baseline summaries by run id, read a row group at a time and kept for the next few runs."""

    def __init__(self, stored: list[str], rescanned: set[str], new: str) -> None:
        self.where: dict[str, tuple[str, int]] = {}
        for path in [*stored, new]:
            pf = pq.ParquetFile(path)
            for i in range(pf.num_row_groups):
                for rid in pf.read_row_group(i, columns=["run_id"]).column("run_id").to_pylist():
                    if path == new or rid not in rescanned:  # a rescanned run's old summary is not its baseline
                        self.where[rid] = (path, i)
        self.cache: OrderedDict[str, RunSummary] = OrderedDict()

    def get(self, ids: set[str]) -> dict[str, RunSummary]:
        out = {i: self.cache[i] for i in ids if i in self.cache}
        groups: dict[tuple[str, int], set[str]] = {}
        for i in ids - set(out):
            if i in self.where:
                groups.setdefault(self.where[i], set()).add(i)
        for (path, rg), wanted in groups.items():
            t = pq.ParquetFile(path).read_row_group(rg, columns=["run_id", "summary"])
            t = t.filter(pc.is_in(t.column("run_id"), value_set=pa.array(sorted(wanted), pa.string())))
            for r in t.to_pylist():
                out[r["run_id"]] = summary_from_json(r["summary"])
        for i, s in out.items():
            self.cache[i] = s
            self.cache.move_to_end(i)
        while len(self.cache) > SUMMARY_CACHE:
            self.cache.popitem(last=False)
        return out


def _findings(store: Store, commit: Commit, new_ids: set[str], rules: Any, stop: _Stop) -> int:
    """Findings rows for the new runs, against each one's baseline (any run of the store after this scan)."""
    if not new_ids:
        return 0
    new_runs, new_summaries = commit.finish("runs"), commit.finish("summaries")
    if new_runs is None or new_summaries is None:
        return 0
    runs = pa.concat_tables([store.read("runs", without=new_ids), read_parts([new_runs], "runs")])
    bases = _baselines(runs, new_ids)
    del runs
    if not bases:
        return 0
    summaries = _Summaries(store.parts("summaries"), new_ids, new_summaries)
    n = 0
    pf = pq.ParquetFile(new_summaries)
    for i in range(pf.num_row_groups):
        stop.check()
        t = pf.read_row_group(i)
        mine = [(r, s) for r, s in zip(t.column("run_id").to_pylist(), t.column("summary").to_pylist())
                if r in bases]
        base_of = {r: bases[r] for r, _ in mine}
        known = summaries.get({b[0] for b in base_of.values() if b})
        rows = []
        for rid, text in mine:
            base = base_of[rid]
            d = evaluate(rules, summary_from_json(text), known.get(base[0]) if base else None)
            for f in d.findings:
                rows.append({"run_id": rid, "baseline_run_id": base and base[0], "baseline_source": base and base[1],
                             "rule": f.rule, "name": f.name, "severity": f.severity, "title": f.title,
                             "explanation": f.explanation,
                             "evidence": json.dumps(list(f.evidence), default=str, ensure_ascii=False),
                             "verdict": d.verdict})
        commit.add_rows("findings", rows)
        n += len(rows)
    return n
