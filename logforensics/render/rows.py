"""Rows of a query as a terminal table, CSV or JSON (``query``, ``runs``, ``crashes``).

Rows arrive in chunks and are written as they come, so a result of any size costs the
memory of one chunk. A terminal table keeps every row on one line: its column widths
come from the first chunk, the columns that do not fit the terminal are left out
(lowest priority first) and named under the table, and a cell wider than its column is
cut with an ellipsis (at its start for a path, whose end tells it apart).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, TextIO

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .console import ELLIPSIS
from .terminal import printable, table_box

#: Longest cell shown in a terminal table, and with ``--wide`` (CSV and JSON keep every character).
CELL_MAX = 120
CELL_MAX_WIDE = 1000

#: A column is not made narrower than this to fit (unless its values are all narrower).
MIN_WIDTH = 8

#: Characters a column costs besides its cells: a space each side and the rule between columns.
_GAP = 3


@dataclass(frozen=True)
class Layout:
    """How a terminal table fits the terminal: which columns go first, which are cut at the start.

    ``priority`` lists columns from the most to the least wanted (the rest follow, in
    their order); ``min_width`` overrides :data:`MIN_WIDTH` per column; ``left`` names the
    columns cut at their start. ``wide`` keeps every column and cell whatever the width.
    """

    priority: tuple[str, ...] = ()
    min_width: Mapping[str, int] = field(default_factory=dict)
    left: frozenset[str] = frozenset()
    wide: bool = False
    #: What the note under a table that left columns out says shows them.
    more: str = "--format csv or json shows every column"


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
    return printable(json.dumps(v, ensure_ascii=False, default=str) if isinstance(v, (list, dict)) else str(v))


def fit_cell(text: str, width: int, *, left: bool = False) -> str:
    """``text`` in at most ``width`` terminal cells, cut with an ellipsis (at the start with ``left``)."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    kept: list[str] = []
    used = 0
    for ch in (reversed(text) if left else text):
        used += cell_len(ch)
        if used > width - 1:
            break
        kept.append(ch)
    return ELLIPSIS + "".join(reversed(kept)) if left else "".join(kept) + ELLIPSIS


def _span(widths: Iterable[int]) -> int:
    ws = list(widths)
    return sum(ws) + _GAP * len(ws) - 1 if ws else 0


def fit_columns(columns: Sequence[str], natural: Sequence[int], room: int, layout: Layout) -> dict[int, int]:
    """Column index -> width for the columns shown: all at their natural width when they fit,
    else the least wanted left out until the rest fit at their least width, then the widest
    narrowed one cell at a time (so short columns stay whole)."""
    if layout.wide:
        return dict(enumerate(natural))
    order = [columns.index(c) for c in layout.priority if c in columns]
    order += [i for i in range(len(columns)) if i not in order]
    least = {i: min(natural[i], layout.min_width.get(columns[i], MIN_WIDTH)) for i in order}
    shown = list(order)
    while len(shown) > 1 and _span(least[i] for i in shown) > room:
        shown.pop()
    widths = {i: natural[i] for i in shown}
    excess = _span(widths.values()) - room
    while excess > 0:
        i = max((i for i in shown if widths[i] > least[i]), key=lambda i: widths[i], default=None)
        if i is None:  # one column wider than the terminal even at its least width
            j = shown[0]
            widths[j] = max(1, widths[j] - excess)
            break
        widths[i] -= 1
        excess -= 1
    return dict(sorted(widths.items()))


def _json_rows(columns: Sequence[str], chunks: Iterable[Sequence[Sequence[Any]]], out: TextIO) -> None:
    """A JSON list of objects, written object by object (the text of ``json.dumps(rows, indent=1)``)."""
    first = True
    for chunk in chunks:
        for r in chunk:
            obj = json.dumps(dict(zip(columns, map(_plain, r))), indent=1, ensure_ascii=False, default=str)
            out.write(("[\n" if first else ",\n") + "\n".join(" " + line for line in obj.split("\n")))
            first = False
    out.write("[]\n" if first else "\n]\n")


def _csv_rows(columns: Sequence[str], chunks: Iterable[Sequence[Sequence[Any]]], out: TextIO) -> None:
    w = csv.writer(out, lineterminator="\n")
    w.writerow(columns)
    for chunk in chunks:
        w.writerows(["" if v is None else (json.dumps(_plain(v), default=str) if isinstance(v, (list, dict))
                                           else _plain(v)) for v in r] for r in chunk)


def _table_rows(columns: Sequence[str], chunks: Iterable[Sequence[Sequence[Any]]], console: Console,
                title: str | None, layout: Layout) -> None:
    cap = CELL_MAX_WIDE if layout.wide else CELL_MAX
    room = console.width
    box = table_box(console)
    natural = [min(cap, max(cell_len(c), 1)) for c in columns]
    widths: dict[int, int] | None = None
    printed: dict[int, int] | None = None
    n = 0
    for chunk in chunks:
        rows = [[_cell(v) for v in r] for r in chunk]
        grown = [min(cap, max([natural[i]] + [cell_len(r[i]) for r in rows])) for i in range(len(columns))]
        if widths is None:  # the first chunk chooses the columns shown
            widths = fit_columns(columns, grown, room, layout)
        elif grown != natural:  # a wider value later: the same columns, widened where there is room
            idx = list(widths)
            least = {columns[i]: min(widths[i], layout.min_width.get(columns[i], MIN_WIDTH)) for i in idx}
            refit = fit_columns([columns[i] for i in idx], [grown[i] for i in idx], room,
                                Layout(min_width=least, wide=layout.wide))  # each fits as it did: none dropped
            widths = {idx[j]: w for j, w in refit.items()}
        natural = grown
        if layout.wide:
            console.width = max(console.width, _span(widths.values()))
        t = Table(title=Text(title) if n == 0 and title else None, box=box, show_header=widths != printed,
                  show_edge=False)  # the header again where the columns moved
        for i, w in widths.items():
            t.add_column(fit_cell(columns[i], w), width=w, no_wrap=True, overflow="ellipsis")
        for r in rows:  # a path is data, not markup: Text, never a string rich would parse
            t.add_row(*(Text(fit_cell(r[i], w, left=columns[i] in layout.left)) for i, w in widths.items()))
        console.print(t)
        printed = dict(widths)
        n += len(rows)
    if widths is None:  # no rows: the header alone
        widths = fit_columns(columns, natural, room, layout)
        t = Table(title=Text(title) if title else None, box=box, show_edge=False)
        for i, w in widths.items():
            t.add_column(fit_cell(columns[i], w), width=w, no_wrap=True)
        console.print(t)
    console.print(f"{n} row{'s' if n != 1 else ''}", markup=False, highlight=False)
    hidden = [c for i, c in enumerate(columns) if i not in widths]
    if hidden:
        console.print(Text(f"{len(hidden)} column{'s' if len(hidden) != 1 else ''} not shown to fit "
                           f"{room} columns: {', '.join(hidden)} ({layout.more})"))


def write_rows(columns: Sequence[str], chunks: Iterable[Sequence[Sequence[Any]]], fmt: str, out: TextIO,
               console: Console | None = None, title: str | None = None, layout: Layout | None = None) -> None:
    """Rows, given chunk by chunk, in ``fmt`` (``table``, ``csv`` or ``json``: a list of objects) on ``out``."""
    if fmt == "json":
        _json_rows(columns, chunks, out)
    elif fmt == "csv":
        _csv_rows(columns, chunks, out)
    else:
        _table_rows(columns, chunks, console or Console(file=out, highlight=False, markup=False), title,
                    layout or Layout())
