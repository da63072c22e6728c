"""SQL over a store with embedded DuckDB: one view per table, and the canned questions.

The views read the Parquet parts directly (``read_parquet`` with Hive partitioning),
so what ``query`` sees is exactly what DuckDB, Spark or Trino see outside the tool.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .schema import PARTITION, SCHEMAS, TABLES
from .store import Store


class QueryError(Exception):
    """Bad SQL or a failed query (one line, for the user)."""


def connect(store: Store) -> Any:
    """A DuckDB connection with a view per table of ``store``."""
    import duckdb

    con = duckdb.connect()
    for table in TABLES:
        if store.parts(table):
            pattern = os.path.join(store.root, table, f"{PARTITION}=*", "*.parquet").replace("'", "''")
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{pattern}', "
                        "hive_partitioning = true, union_by_name = true)")
        else:  # an empty table still has its columns
            empty = SCHEMAS[table].empty_table()
            con.register(f"_empty_{table}", empty)
            con.execute(f"CREATE VIEW {table} AS SELECT *, NULL::VARCHAR AS {PARTITION} FROM _empty_{table}")
    return con


def run_sql(store: Store, sql: str, params: Sequence[Any] = ()) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Column names and rows of ``sql`` (DuckDB's dialect) over the store's views."""
    import duckdb

    con = connect(store)
    try:
        cur = con.execute(sql, list(params))
        if cur.description is None:
            return [], []
        return [d[0] for d in cur.description], cur.fetchall()
    except duckdb.Error as exc:
        raise QueryError(" ".join(str(exc).split())) from None
    finally:
        con.close()


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
