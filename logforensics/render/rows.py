"""Rows of a query as a terminal table, CSV or JSON (``query``, ``runs``, ``crashes``)."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .terminal import printable, table_box

#: Longest cell shown in a terminal table (CSV and JSON keep every character).
CELL_MAX = 120


def _plain(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat(sep=" ") if isinstance(value, datetime) else value.isoformat()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _cell(value: Any) -> str:
    if value is None:
        return ""
    v = _plain(value)
    text = json.dumps(v, ensure_ascii=False, default=str) if isinstance(v, (list, dict)) else str(v)
    return printable(text if len(text) <= CELL_MAX else text[:CELL_MAX - 3] + "...")


def write_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str, out: TextIO,
               console: Console | None = None, title: str | None = None) -> None:
    """``rows`` in ``fmt`` (``table``, ``csv`` or ``json``: a list of objects) on ``out``."""
    if fmt == "json":
        out.write(json.dumps([dict(zip(columns, map(_plain, r))) for r in rows], indent=1,
                             ensure_ascii=False, default=str) + "\n")
    elif fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow(["" if v is None else (json.dumps(_plain(v), default=str) if isinstance(v, (list, dict))
                                              else _plain(v)) for v in r])
    else:
        console = console or Console(file=out, highlight=False, markup=False)
        table = Table(title=Text(title) if title else None, box=table_box(console))  # a path is data, not markup
        for c in columns:
            table.add_column(c, overflow="fold")
        for r in rows:
            table.add_row(*(Text(_cell(v)) for v in r))
        console.print(table)
        console.print(f"{len(rows)} row{'s' if len(rows) != 1 else ''}", markup=False, highlight=False)
