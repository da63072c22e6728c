"""Commands over a store of many runs: ``scan``, ``query``, ``runs``, ``crashes``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from ..outputs import (
    EXIT_USAGE,
)
from ._app import (
    _silence_broken_pipe,
    _stderr,
    fail,
    main,
    stdout_console,
)

_STORE = click.option("--store", "store_dir", required=True, type=click.Path(file_okay=False),
                      help="The store directory (written by scan).")
_FORMAT = click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
                       show_default=True, help="Output format (json: a list of objects).")


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--store", "store_dir", required=True, type=click.Path(file_okay=False),
              help="The store directory (created if missing; scanned again, only new and changed files are read).")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: worker processes on this machine; ray: Ray Data tasks on a Ray cluster "
              "(pip install 'logforensics[ray]').")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Parallel workers (default: the number of CPUs; with --engine ray, the CPUs of a local cluster).")
@click.option("--ray-address", default=None, help="With --engine ray: the cluster to join (ray.init address, "
              "e.g. 10.0.0.5:6379 or auto); default: start a local cluster for this scan.")
@click.option("--group-by", type=click.Choice(["file", "dir"]), default="file", show_default=True,
              help="file: each log is a run, except per-node files of one directory (node0.log, "
              "job_nodeN.out), which form one; dir: every directory is one run.")
@click.option("--no-events", is_flag=True, help="Do not write the events table (smaller store, faster scan).")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(file_okay=False),
              help="A directory of your own rule files (*.yml), for the findings table.")
@click.option("--lock-wait", type=click.FloatRange(min=0), default=600, show_default=True, metavar="SECONDS",
              help="How long to wait for another scan of the same store to end before giving up.")
def scan(paths: tuple[str, ...], store_dir: str, engine: str, jobs: int | None, ray_address: str | None,
         group_by: str, no_events: bool, rules_dirs: tuple[str, ...], lock_wait: float) -> None:
    """Parse every run under PATHS (files or directories of *.log, *.out, *.err) into a Parquet store.

    Tables runs, ranks, findings, events, summaries and environments, in Hive-style partitions that
    DuckDB, Spark, Trino or pandas read directly (schema: docs/fleet.md). A second scan
    reads only files that are new or changed (size, mtime, hash of the first 64 KiB) and
    says how many it skipped. Unreadable files are warned about and skipped.

    A scan stopped at any moment (SIGTERM, kill -9) leaves the store readable; the next
    scan repairs it. One scan writes a store at a time: a second one waits, saying which.
    """
    from ..diagnose.rulespec import RuleError
    from ..fleet.engines import EngineError
    from ..fleet.scan import scan as run_scan
    from ..fleet.store import StoreError
    from ..pipeline import InputError

    if ray_address and engine != "ray":
        raise fail("--ray-address goes with --engine ray")
    with _scan_progress() as (on_plan, on_run):
        try:
            r = run_scan(paths, store_dir, engine=engine, jobs=jobs, group_by=group_by, events=not no_events,
                         ray_address=ray_address, rules_dirs=rules_dirs, on_plan=on_plan, on_run=on_run,
                         on_note=lambda line: click.echo(f"logforensics: {line}", err=True), lock_wait=lock_wait)
        except (StoreError, EngineError, RuleError, InputError) as exc:
            raise fail(str(exc)) from None
    for line in r.warnings + r.errors:
        click.echo(f"logforensics: warning: {line}", err=True)
    click.echo(f"{store_dir}: {r.runs_found} runs in {r.files_found} files; parsed {r.runs_parsed}, "
               f"skipped {r.runs_skipped} unchanged ({r.files_skipped} files), {len(r.errors)} unreadable; "
               f"{r.findings} findings")
    if r.runs_found == 0 or (r.errors and r.runs_parsed == 0 and r.runs_skipped == 0):
        raise click.exceptions.Exit(EXIT_USAGE)


@contextmanager
def _scan_progress() -> Iterator[tuple[Any, Any]]:
    """A progress bar over the runs to parse, on stderr when it is a terminal."""
    err = _stderr()
    if not err.is_terminal:
        yield None, None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as prog:
        task = prog.add_task("scanning", total=None)
        yield (lambda n: prog.update(task, total=n)), (lambda _run: prog.advance(task))


_MEMORY = click.option("--memory-limit", default=None, metavar="SIZE",
                       help="DuckDB's memory limit for the query (DuckDB's syntax: 500MB, 4GB) [default: 2GB]; "
                       "a query that needs more stops with one line, exit status 2.")
_WIDE = click.option("--wide", is_flag=True, help="table: every column and whole cells (up to 1,000 characters), "
                     "however wide the terminal; by default the columns that fit, cut with an ellipsis.")

#: ``runs`` in a terminal: the columns that stay when the terminal is narrow, most wanted first.
RUNS_LAYOUT = {"priority": ("source", "outcome", "start_time", "first_rank", "crash_phase", "exception", "model",
                            "tp_size", "sglang_version", "dp_size", "pp_size", "ep_size", "fingerprint", "lines",
                            "run_id"),
               "min_width": {"source": 36, "outcome": 10, "first_rank": 10, "crash_phase": 12, "exception": 18,
                             "model": 18, "start_time": 19, "fingerprint": 12, "run_id": 16, "sglang_version": 14,
                             "tp_size": 7, "dp_size": 7, "pp_size": 7, "ep_size": 7},
               "left": frozenset({"source", "model"})}

#: ``crashes`` in a terminal, likewise.
CRASHES_LAYOUT = {"priority": ("fingerprint", "exception", "runs", "phase", "sglang_function", "last_seen",
                               "latest_source", "first_seen", "versions", "nodes"),
                  "min_width": {"fingerprint": 12, "exception": 18, "sglang_function": 16, "phase": 14,
                                "first_seen": 19, "last_seen": 19, "latest_source": 30},
                  "left": frozenset({"latest_source"})}


def _rows_out(store_dir: str, sql: str, params: list[Any], fmt: str, title: str | None = None, *,
              wide: bool = False, memory_limit: str | None = None, layout: dict[str, Any] | None = None) -> None:
    """One read-only query over the store, its rows written chunk by chunk as they come."""
    from ..fleet.query import DEFAULT_MEMORY_LIMIT, QueryError, open_sql
    from ..fleet.store import Store, StoreError
    from ..render.rows import Layout, write_rows

    shape = Layout(**(layout or {}), wide=wide, more="--wide or --format csv/json shows every column")
    try:
        store = Store(store_dir)
        for line in store.foreign_warnings():
            click.echo(f"logforensics: warning: {line}", err=True)
        with open_sql(store, sql, params, memory_limit=memory_limit or DEFAULT_MEMORY_LIMIT) as result:
            write_rows(result.columns, result.chunks, fmt, sys.stdout,
                       stdout_console() if fmt == "table" else None, title, shape)
    except (StoreError, QueryError) as exc:
        raise fail(str(exc)) from None
    except BrokenPipeError:
        _silence_broken_pipe()


@main.command()
@_STORE
@click.argument("sql")
@_FORMAT
@_WIDE
@_MEMORY
def query(store_dir: str, sql: str, fmt: str, wide: bool, memory_limit: str | None) -> None:
    """Run one SELECT (DuckDB's dialect) over the store's tables: runs, ranks, findings, events, summaries, environments.

    Example: logforensics query --store fleet "SELECT outcome, count(*) FROM runs GROUP BY 1"

    The query reads the store and nothing else: one SELECT (WITH, FROM-first, VALUES,
    DESCRIBE and SUMMARIZE are SELECTs too); anything else (COPY, ATTACH, INSTALL, LOAD,
    SET, PRAGMA, CREATE, INSERT, several statements) and any file outside the store's
    tables is refused with exit status 2. Rows are written as they come.
    """
    _rows_out(store_dir, sql, [], fmt, wide=wide, memory_limit=memory_limit)


@main.command()
@_STORE
@click.option("--outcome", type=click.Choice(["ready", "crashed", "hung", "incomplete"]), help="Only runs with this outcome.")
@click.option("--model", help="Only runs whose model contains this text (case-insensitive).")
@click.option("--version", "version", help="Only runs whose log shows this SGLang version.")
@_FORMAT
@_WIDE
def runs(store_dir: str, outcome: str | None, model: str | None, version: str | None, fmt: str, wide: bool) -> None:
    """The runs of a store, latest first: outcome, first rank, crash phase, fingerprint, model, sizes.

    In a terminal each run is one line: the columns that fit (source, outcome, start
    time, first rank, crash phase, exception, model, sizes first), long values cut with
    an ellipsis, and the columns left out named under the table. --wide shows them all;
    --format csv or json gives every column and every character.
    """
    from ..fleet.query import runs_sql

    sql, params = runs_sql(outcome, model, version)
    _rows_out(store_dir, sql, params, fmt, "runs", wide=wide, layout=RUNS_LAYOUT)


@main.command()
@_STORE
@_FORMAT
@_WIDE
def crashes(store_dir: str, fmt: str, wide: bool) -> None:
    """Crash groups by fingerprint (exception type, innermost SGLang function, phase), most runs first.

    With the number of runs, first and last seen, the SGLang versions and nodes, and
    the latest run's source.
    """
    from ..fleet.query import CRASHES_SQL

    _rows_out(store_dir, CRASHES_SQL, [], fmt, "crashes", wide=wide,
              layout=CRASHES_LAYOUT)
