"""A store survives its scans: killed at any moment, held by another scan, or holding a foreign file.

Real ``logforensics scan`` processes over the real excerpts are killed with SIGTERM or
SIGKILL at random moments, among them inside the commit. After each kill no worker of
the scan is left, pandas and ``query`` read the store with every run at most once, the
next scan ends (and repairs it), and then the store holds every run exactly once.
"""

from __future__ import annotations

import glob
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from logforensics.cli import main
from logforensics.fleet.schema import TABLES

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "fixtures" / "real"
CLI = [sys.executable, "-m", "logforensics"]
ENV = {**os.environ, "COLUMNS": "200"}


def _logs(dest: Path, n: int) -> list[Path]:
    """The ``n`` smallest real excerpts, each its own run."""
    dest.mkdir()
    picked = sorted(REAL.glob("*.log"), key=lambda p: (p.stat().st_size, p.name))[:n]
    return [Path(shutil.copy(p, dest / p.name)) for p in picked]


def _scan(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + ["scan", *args], capture_output=True, text=True, timeout=timeout, env=ENV)


def _group(pgid: int) -> list[str]:
    """The live processes of process group ``pgid`` (from /proc), as ``pid state command``."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        head, tail = stat.rsplit(")", 1)
        state, _ppid, pgrp = tail.split()[:3]
        if int(pgrp) == pgid and state not in "ZX":
            out.append(f"{pid} {state} {head.split('(', 1)[1]}")
    return out


def _end_group(proc: subprocess.Popen) -> None:
    """Whatever is left of a scan's process group (a test that failed must not leave workers running)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if proc.poll() is None:
        proc.wait()


def _read(store: Path) -> pd.DataFrame:
    """Every table read as the README says (pandas, ``query``): each must read, no run twice."""
    for table in TABLES:
        if (store / table).exists():
            pd.read_parquet(store / table)
    runs = pd.read_parquet(store / "runs") if (store / "runs").exists() else pd.DataFrame({"run_id": []})
    assert runs["run_id"].is_unique, runs["run_id"].value_counts().head()
    if (store / "summaries").exists():
        assert pd.read_parquet(store / "summaries")["run_id"].is_unique
    out = CliRunner().invoke(main, ["query", "--store", str(store), "--format", "json",
                                    "SELECT count(*) AS n, count(DISTINCT run_id) AS d FROM runs"])
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.stdout)
    assert row["n"] == row["d"] == len(runs)
    return runs


def _wait_for(proc: subprocess.Popen, store: Path, trigger: str, delay: float) -> bool:
    """Wait for the moment to kill: a delay, or a phase of the commit seen on disk. False if the scan ended first."""
    patterns = {"parse": ("_meta/commit-*/staging", "_meta/staging-*"),  # (the second: the earlier layout)
                "write": ("_meta/commit-*/runs.parquet", "*/*/part-*.parquet.tmp"),
                "publish": ("_meta/commit-*/journal.json", "*/*/part-*.parquet.tmp")}
    deadline = time.monotonic() + 120
    if trigger == "delay":
        end = time.monotonic() + delay
        while time.monotonic() < end:
            if proc.poll() is not None:
                return False
            time.sleep(0.005)
        return proc.poll() is None
    while not any(glob.glob(str(store / p)) for p in patterns[trigger]):
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.0005)
    time.sleep(delay)
    return proc.poll() is None


def test_scan_killed_at_random_moments_leaves_a_store_the_next_scan_repairs(tmp_path: Path) -> None:
    logs = _logs(tmp_path / "logs", 12)
    store = tmp_path / "store"
    first = _scan(str(tmp_path / "logs"), "--store", str(store), "--jobs", "2")
    assert first.returncode == 0, first.stderr
    rng = random.Random(37)
    hits: Counter[str] = Counter()
    # every moment with both signals, once each (the order shuffled): each kill and repair
    # is two scans of seconds, so the cases are covered once rather than drawn at random
    cases = [(trigger, sig) for trigger in ("delay", "parse", "write", "publish")
             for sig in (signal.SIGTERM, signal.SIGKILL)]
    rng.shuffle(cases)
    for i, (trigger, sig) in enumerate(cases):
        for p in rng.sample(logs, 3):  # rescans: the old parts are rewritten without these runs
            with open(p, "a") as fh:
                fh.write(f"[2026-03-25 16:00:{i:02d}] INFO:     127.0.0.1:1 - \"GET /health HTTP/1.1\" 200 OK\n")
        logs.append(Path(shutil.copy(logs[i], tmp_path / "logs" / f"new-{i}.log")))  # a new run
        delay = rng.uniform(0.3, 1.5) if trigger == "delay" else rng.uniform(0, 0.02)
        proc = subprocess.Popen(CLI + ["scan", str(tmp_path / "logs"), "--store", str(store), "--jobs", "2"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                                start_new_session=True)
        try:
            running = _wait_for(proc, store, trigger, delay)
            if running:
                os.kill(proc.pid, sig)
                hits[f"{trigger} {sig.name}"] += 1
            _, err = proc.communicate(timeout=60)  # ends when no worker holds its pipes
        except BaseException:
            _end_group(proc)
            raise
        assert "Traceback" not in err, err
        left: list[str] = _group(proc.pid)
        deadline = time.monotonic() + 10
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = _group(proc.pid)
        try:
            assert not left, f"kill {i} ({trigger}, {sig.name}): workers left behind: {left}"
        finally:
            if left:
                os.killpg(proc.pid, signal.SIGKILL)
        _read(store)  # readable now, before any repair: every file whole, no run twice
        after = _scan(str(tmp_path / "logs"), "--store", str(store), "--jobs", "1", timeout=120)  # the repair
        assert after.returncode == 0, (i, trigger, sig.name, after.stderr)
        assert "Traceback" not in after.stderr and len(after.stderr.splitlines()) <= 1, after.stderr
        runs = _read(store)
        assert len(runs) == len(logs), (i, trigger, sig.name, len(runs), len(logs))
        assert not glob.glob(str(store / "_meta" / "commit-*")) and not glob.glob(str(store / "**" / "*.tmp"),
                                                                                    recursive=True)
        events = pd.read_parquet(store / "events")
        assert events.groupby("run_id").size().to_dict() == \
            {r: n for r, n in zip(runs["run_id"], runs["events"]) if n}  # each run's events once
    print(dict(hits))
    assert sum(hits.values()) >= 6, hits  # most kills hit a running scan


def _hold(store: Path) -> subprocess.Popen:
    """Another process that holds the store's lock until its stdin closes."""
    code = ("import sys; from logforensics.fleet.store import Store\n"
            f"s = Store({str(store)!r})\n"
            "with s.lock():\n    print('held', flush=True); sys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_held_store_makes_a_second_scan_wait_saying_who_holds_it(tmp_path: Path) -> None:
    _logs(tmp_path / "logs", 2)
    store = tmp_path / "store"
    assert _scan(str(tmp_path / "logs"), "--store", str(store)).returncode == 0
    holder = _hold(store)
    try:
        late = _scan(str(tmp_path / "logs"), "--store", str(store), "--lock-wait", "1", timeout=60)
        assert late.returncode == 2, late.stderr
        lines = late.stderr.strip().splitlines()
        assert f"pid {holder.pid}" in lines[0] and "waiting" in lines[0], lines
        assert len(lines) == 2 and lines[1].startswith("logforensics: error: ") and f"pid {holder.pid}" in lines[1]
        waiting = subprocess.Popen(CLI + ["scan", str(tmp_path / "logs"), "--store", str(store)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        assert waiting.stderr is not None
        said = select.select([waiting.stderr], [], [], 120)[0] and waiting.stderr.readline()
        assert said and f"pid {holder.pid}" in said and "waiting" in said, said  # it says so, and waits
        assert waiting.poll() is None
    finally:
        holder.communicate("", timeout=30)
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0 and "skipped 2 unchanged" in out and not err, out + err


def test_a_killed_scan_is_reported_once_and_its_leftovers_removed(tmp_path: Path) -> None:
    _logs(tmp_path / "logs", 12)
    store = tmp_path / "store"
    proc = subprocess.Popen(CLI + ["scan", str(tmp_path / "logs"), "--store", str(store), "--jobs", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True)
    try:
        assert _wait_for(proc, store, "parse", 0.3), "the scan ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)  # ends when no worker holds its pipes
    except BaseException:
        _end_group(proc)
        raise
    assert glob.glob(str(store / "_meta" / "commit-*"))  # what the killed scan left
    after = _scan(str(tmp_path / "logs"), "--store", str(store), timeout=120)
    assert after.returncode == 0 and "parsed 12," in after.stdout, after.stdout + after.stderr
    (line,) = after.stderr.splitlines()
    assert f"pid {proc.pid}" in line and "stopped before it ended" in line, line
    assert not glob.glob(str(store / "_meta" / "commit-*"))
    assert len(_read(store)) == 12


def test_a_foreign_parquet_file_is_warned_about_and_skipped(tmp_path: Path) -> None:
    _logs(tmp_path / "logs", 3)
    store = tmp_path / "store"
    assert _scan(str(tmp_path / "logs"), "--store", str(store)).returncode == 0
    (part,) = (store / "runs").glob("scan_date=*/part-*.parquet")
    foreign = part.parent / "extra.parquet"
    other = pd.read_parquet(part)
    other["run_id"] = other["run_id"] + "-x"
    other.to_parquet(foreign)
    again = _scan(str(tmp_path / "logs"), "--store", str(store))
    assert again.returncode == 0 and str(foreign) in again.stderr and "skipped" in again.stderr, again.stderr
    assert foreign.exists()  # not the store's to delete
    out = CliRunner().invoke(main, ["query", "--store", str(store), "--format", "json",
                                    "SELECT count(*) AS n FROM runs"])
    assert out.exit_code == 0 and json.loads(out.stdout) == [{"n": 3}], out.output
    assert str(foreign) in out.stderr
    listed = CliRunner().invoke(main, ["runs", "--store", str(store), "--format", "json"])
    assert len(json.loads(listed.stdout)) == 3 and str(foreign) in listed.stderr



@pytest.mark.parametrize("batches", [[1024], [1000, 24], [128] * 8, [1100], [2048, 1]])
def test_pending_rows_are_written_once_wherever_a_row_group_fills(tmp_path: Path, batches: list[int]) -> None:
    """A commit's rows reach its file once each, also when a row group fills in the middle of
    the rows held as dicts (a scan of more than 1024 runs wrote 128 of them twice)."""
    import pyarrow.parquet as pq

    from logforensics.fleet.store import _Pending

    path = str(tmp_path / "runs.parquet")
    pending = _Pending(path, "runs")
    n = 0
    for size in batches:
        pending.add_rows({"run_id": f"r{n + i}", "source": f"s{n + i}"} for i in range(size))
        n += size
    pending.close()
    ids = pq.read_table(path, columns=["run_id"]).column("run_id").to_pylist()
    assert sorted(ids) == sorted(f"r{i}" for i in range(n))
