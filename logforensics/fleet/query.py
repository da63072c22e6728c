"""SQL over a store with embedded DuckDB: one view per table, and the canned questions.

The views read the Parquet parts directly (``read_parquet`` with Hive partitioning),
so what ``query`` sees is exactly what DuckDB, Spark or Trino see outside the tool.

A query is text from whoever runs the tool (or a program acting for them), so DuckDB is
opened as a reader of the store and nothing more: file access only inside the store's
table folders, no extension installed or loaded, a memory limit, no spilling to disk,
and the configuration locked before the query runs. On top of that the statement must be
one read-only statement, as DuckDB's own parser classifies it: a ``COPY ... TO`` into
the store's own folders is allowed by the file settings, so the statement type is what
keeps a query from writing there. Rows are fetched in chunks, never the whole result.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .schema import PARTITION, SCHEMAS, TABLES
from .store import Store

#: DuckDB's memory limit for one query, unless the caller gives another (DuckDB's syntax).
DEFAULT_MEMORY_LIMIT = "2GB"

#: Rows fetched from DuckDB at a time (the most a caller holds at once).
CHUNK_ROWS = 1000


class QueryError(Exception):
    """Bad SQL, a refused statement or a failed query (one line, for the user)."""


@dataclass(frozen=True)
class Result:
    """A query's column names and its rows, chunk by chunk (a one-pass iterator)."""

    columns: tuple[str, ...]
    chunks: Iterator[list[tuple[Any, ...]]]


def _one_line(exc: BaseException) -> str:
    """DuckDB's message without the ``LINE 1: ... ^`` pointer lines, on one line."""
    text = re.split(r"\n\s*LINE \d+:", str(exc), maxsplit=1)[0]
    return " ".join(text.split())


def _message(exc: Exception, memory_limit: str) -> str:
    import duckdb

    text = _one_line(exc)
    if isinstance(exc, duckdb.PermissionException):
        m = re.search(r'Cannot access (?:file|directory) "([^"]*)"', text)
        what = f"{m.group(1)}: outside the store" if m else text
        return f"query refused: {what}; a query reads only the store's tables ({', '.join(TABLES)})"
    if isinstance(exc, duckdb.OutOfMemoryException):  # the first line; the rest advises SET, which is locked
        return f"query ran out of memory (limit {memory_limit}): {str(exc).splitlines()[0]}"
    return f"query failed: {text}"


def connect(store: Store, *, memory_limit: str = DEFAULT_MEMORY_LIMIT) -> Any:
    """A DuckDB connection with a view per table of ``store`` and nothing else within reach.

    File access is limited to the store's table folders, extensions are neither installed
    nor loaded, Python variables are not scanned as tables, nothing spills to disk, and
    the configuration is locked, so no later statement can undo any of it.
    """
    import duckdb

    try:
        con = duckdb.connect(":memory:", config={
            "memory_limit": memory_limit, "temp_directory": "",
            "autoinstall_known_extensions": False, "autoload_known_extensions": False,
            "python_enable_replacements": False})
    except duckdb.Error as exc:
        raise QueryError(f"memory limit {memory_limit!r}: {_one_line(exc)}") from None
    try:
        empties = {}
        parts = {table: store.parts(table) for table in TABLES}
        for table in TABLES:  # an empty table still has its columns
            if not parts[table]:
                empties[table] = SCHEMAS[table].empty_table()
                con.register(f"_empty_{table}", empties[table])
        folders = [os.path.join(store.root, table) + os.sep for table in TABLES]
        con.execute("SET allowed_directories = ?", [folders])
        con.execute("SET enable_external_access = false")
        for table in TABLES:
            if table in empties:
                con.execute(f"CREATE VIEW {table} AS SELECT *, NULL::VARCHAR AS {PARTITION} FROM _empty_{table}")
            else:  # the store's own parts: a foreign file in its folders is not read
                files = ", ".join("'" + p.replace("'", "''") + "'" for p in parts[table])
                con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet([{files}], "
                            "hive_partitioning = true, union_by_name = true)")
        con.execute("SET lock_configuration = true")
    except duckdb.Error as exc:
        con.close()
        raise QueryError(_message(exc, memory_limit)) from None
    return con


def read_only_statement(con: Any, sql: str) -> Any:
    """The one statement of ``sql``, if DuckDB's parser calls it a SELECT; else QueryError.

    A SELECT covers ``WITH ... SELECT``, ``FROM t``, ``VALUES``, ``DESCRIBE``, ``SHOW`` and
    ``SUMMARIZE``: all read. ``EXPLAIN`` is refused (``EXPLAIN ANALYZE`` runs its statement),
    as are ``PRAGMA``, ``SET``, ``CALL``, ``COPY``, ``ATTACH``, ``INSTALL``, ``LOAD`` and
    every statement that creates or changes something.
    """
    import duckdb

    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"query failed: {_one_line(exc)}") from None
    if not statements:
        raise QueryError("query refused: no SQL statement")
    if len(statements) > 1:
        raise QueryError(f"query refused: {len(statements)} statements; give one SELECT")
    (statement,) = statements
    if statement.type != duckdb.StatementType.SELECT:
        text = " ".join(str(statement.query).split())
        text = text if len(text) <= 40 else text[:39] + "\u2026"
        raise QueryError(f"query refused: not a SELECT (DuckDB reads `{text}` as {statement.type.name}); "
                         f"only one SELECT over the store's tables ({', '.join(TABLES)}) is run")
    return statement


def _chunks(cur: Any, chunk_rows: int, memory_limit: str) -> Iterator[list[tuple[Any, ...]]]:
    import duckdb

    try:
        while True:
            rows = cur.fetchmany(chunk_rows)
            if not rows:
                return
            yield rows
    except duckdb.Error as exc:
        raise QueryError(_message(exc, memory_limit)) from None
    except MemoryError:
        raise QueryError(f"query ran out of memory (limit {memory_limit})") from None


@contextmanager
def open_sql(store: Store, sql: str, params: Sequence[Any] = (), *, memory_limit: str = DEFAULT_MEMORY_LIMIT,
             chunk_rows: int = CHUNK_ROWS) -> Iterator[Result]:
    """Run one read-only ``sql`` (DuckDB's dialect) over the store's views; rows come in chunks.

    Every refusal and every DuckDB error (out of memory included) is a :class:`QueryError`,
    also when it happens while the chunks are read. The connection closes on leaving.
    """
    import duckdb

    con = connect(store, memory_limit=memory_limit)
    try:
        statement = read_only_statement(con, sql)
        try:
            cur = con.execute(statement, list(params))
        except duckdb.Error as exc:
            raise QueryError(_message(exc, memory_limit)) from None
        except MemoryError:
            raise QueryError(f"query ran out of memory (limit {memory_limit})") from None
        columns = tuple(d[0] for d in cur.description or ())
        yield Result(columns, _chunks(cur, chunk_rows, memory_limit) if columns else iter(()))
    finally:
        con.close()


def run_sql(store: Store, sql: str, params: Sequence[Any] = (), *, max_rows: int | None = None,
            memory_limit: str = DEFAULT_MEMORY_LIMIT) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Column names and rows (at most ``max_rows``) of one read-only ``sql`` over the store."""
    out: list[tuple[Any, ...]] = []
    with open_sql(store, sql, params, memory_limit=memory_limit) as result:
        for chunk in result.chunks:
            out.extend(chunk)
            if max_rows is not None and len(out) >= max_rows:
                del out[max_rows:]
                break
    return list(result.columns), out


RUNS_COLUMNS = ("run_id", "source", "outcome", "first_rank", "crash_phase", "exception", "fingerprint",
                "sglang_version", "model", "tp_size", "dp_size", "pp_size", "ep_size", "start_time", "lines")


def runs_sql(outcome: str | None, model: str | None, version: str | None) -> tuple[str, list[Any]]:
    """The ``runs`` command's query: runs, latest first, optionally filtered."""
    where, params = [], []
    if outcome:
        where.append("outcome = ?")
        params.append(outcome)
    if model:
        where.append("model ILIKE ?")
        params.append(f"%{model}%")
    if version:
        where.append("sglang_version = ?")
        params.append(version)
    sql = (f"SELECT {', '.join(RUNS_COLUMNS)} FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
           + " ORDER BY coalesce(start_time, file_mtime) DESC NULLS LAST, source")
    return sql, params


#: The ``crashes`` command: crash groups by fingerprint, most frequent first.
CRASHES_SQL = """
SELECT fingerprint,
       any_value(fingerprint_exception) AS exception,
       any_value(fingerprint_function) AS sglang_function,
       any_value(crash_phase) AS phase,
       count(*) AS runs,
       min(coalesce(start_time, file_mtime)) AS first_seen,
       max(coalesce(start_time, file_mtime)) AS last_seen,
       list_sort(list_distinct(list(sglang_version) FILTER (WHERE sglang_version IS NOT NULL))) AS versions,
       list_sort(list_distinct(flatten(list(CASE WHEN crash_node IS NOT NULL THEN [crash_node] ELSE [] END))))
           AS nodes,
       arg_max(source, coalesce(start_time, file_mtime)) AS latest_source
FROM runs
WHERE fingerprint IS NOT NULL
GROUP BY fingerprint
ORDER BY runs DESC, last_seen DESC NULLS LAST, fingerprint
"""
