"""The serving time series' per-window aggregates of one figure on one rank.

Why apart from the observer (``serving.py``): a log in which every rank prints batch
statistics has dozens of such windows of thousands of cells each, so their representation
decides the run model's memory. Where the accelerator is built (``native/windows.c``) a window set
is parallel arrays, about 64 bytes a cell; :class:`_PyWindows` is its pure twin (a dict of
lists), used with ``LOGFORENSICS_PURE=1`` or without a compiler. Both keep cells in the order
they were created and fold them in that order when widened or merged.

A window's sum is fixed point (:func:`fixed`): each value rounded to a grid of 2**-64, the
sum an integer (128-bit two's complement). Integer addition is associative, so the sum does
not depend on how the values were grouped: one pass, a window widened early or late, or a
log read in byte ranges on several cores and merged (``ingest/parallel.py``) all give the
same sum, and :func:`as_float` the same double on either path.
"""

from __future__ import annotations

import array
import sys
from typing import Any

from .. import native

#: Windows kept per figure and rank before their width doubles.
MAX_WINDOWS = 4096

#: One window's aggregates: [count, sum, first_line, first_second, first_text];
#: the sum in units of 2**-64 (:func:`fixed`), the last slot a record's text or None.
Cell = list[Any]

_ONE = 2.0**64
_CAP = 2.0**62  # values beyond are capped: a sum of 2**64 of them still fits in 128 bits
_HALF = 1 << 127


def fixed(v: float) -> int:
    """``v`` on the sums' grid: the nearest multiple of 2**-64 (half to even), capped at
    +-2**62, NaN as 0; in units of 2**-64. ``native/windows.c`` fix_of() is the same."""
    if v != v:
        return 0
    return round(min(max(v, -_CAP), _CAP) * _ONE)  # the product is exact: a power of two


def _wrapped(s: int) -> int:
    """``s`` in 128-bit two's complement, as the C sums keep it."""
    return s if -_HALF <= s < _HALF else (s + _HALF) % (1 << 128) - _HALF


#: A sum's units per 1 (an int: ``sum / GRID`` is int / int, correctly rounded).
GRID = 1 << 64


def as_float(s: int) -> float:
    """A fixed-point sum as a float: correctly rounded (int / int)."""
    return s / GRID


class _PyWindows:
    """Per-window [count, sum, first_line, first_second, first_text] of one
    figure on one rank (the text only where kept: the record a change point cites).

    The pure twin of the compiled ``Windows`` (``native/windows.c``) (parallel arrays, the same semantics:
    cells in the order they were created, folded in that order when widened or merged)."""

    __slots__ = ("width", "cells")

    def __init__(self, width: int = 1, most: int | None = None) -> None:
        self.width = width
        self.cells: dict[int, Cell] = {}

    def __len__(self) -> int:
        return len(self.cells)

    def add(self, sec: float, value: float, line: int, text: str | None = None) -> None:
        key = int(sec // self.width)
        # fixed(value), inline: a value within the cap (NaN is not) is only rounded onto the grid
        f = round(value * _ONE) if -_CAP <= value <= _CAP else fixed(value)
        c = self.cells.get(key)
        if c is None:
            self.cells[key] = [1, f, line, sec, text]
            if len(self.cells) > MAX_WINDOWS:
                self.coarsen(self.width * 2)
            return
        c[0] += 1
        s = c[1] + f
        c[1] = s if -_HALF <= s < _HALF else _wrapped(s)
        if line < c[2]:
            c[2] = line
            c[4] = text
        if sec < c[3]:
            c[3] = sec

    def coarsen(self, width: int) -> None:
        if width <= self.width:
            return
        self.width, self.cells = width, _folded(self.cells, width // self.width)

    def coarsened(self, width: int) -> _PyWindows:
        """The windows at ``width`` (a multiple of this width), leaving these unchanged."""
        if width <= self.width:
            return self
        out = _PyWindows(width)
        out.cells = _folded(self.cells, width // self.width, copy=True)
        return out

    def merge(self, other: Any) -> None:
        width = max(self.width, other.width)
        self.coarsen(width)
        factor = width // other.width
        for key, c in other.items():
            _fold(self.cells, key // factor, c)
        while len(self.cells) > MAX_WINDOWS:
            self.coarsen(self.width * 2)

    def keys(self) -> list[int]:
        return list(self.cells)

    def items(self) -> list[tuple[int, Cell]]:
        return list(self.cells.items())

    def texts(self) -> list[tuple[int, str]]:
        """(first line, text) of the cells that keep a text."""
        return [(c[2], c[4]) for c in self.cells.values() if c[4] is not None]

    def first_line(self) -> int | None:
        return min((c[2] for c in self.cells.values()), default=None)


def _folded(cells: dict[int, Cell], factor: int, copy: bool = False) -> dict[int, Cell]:
    """The cells of windows ``factor`` times as wide, folded in order; ``copy``: these stay as they were."""
    out: dict[int, Cell] = {}
    for key, c in cells.items():
        k = key // factor
        d = out.get(k)
        if d is None:
            out[k] = list(c) if copy else c
        else:
            _fold(out, k, c)
    return out


def _fold(cells: dict[int, Cell], key: int, c: Cell) -> None:
    d = cells.get(key)
    if d is None:
        cells[key] = list(c)
        return
    d[0] += c[0]
    d[1] = _wrapped(d[1] + c[1])
    if c[2] < d[2]:
        d[2], d[4] = c[2], c[4]
    d[3] = min(d[3], c[3])


#: Either type of windows (an observer's are of one type; ``like`` converts between them).
Windows = Any


def new_windows() -> Windows:
    """Empty windows of the compiled type where built and not disabled, else the pure twin."""
    if native.lib is not None and native.available():
        return native.lib.Windows(1, MAX_WINDOWS)
    return _PyWindows()


def like(mine: Windows, other: Windows) -> Windows:
    """``other`` as windows of ``mine``'s type (parts of one log read on different paths)."""
    if type(other) is type(mine):
        return other
    items = other.items()
    if isinstance(mine, _PyWindows):
        out = _PyWindows(other.width)
        out.cells = dict(items)
        return out

    def col(typecode: str, j: int) -> bytes:
        return array.array(typecode, [c[j] for _, c in items]).tobytes()

    sums = b"".join((s & (2**64 - 1)).to_bytes(8, sys.byteorder) + (s >> 64).to_bytes(8, sys.byteorder, signed=True)
                    for s in (c[1] for _, c in items))  # the C layout: low word, then high
    w = type(mine)(other.width, MAX_WINDOWS)
    w.__setstate__((array.array("q", [k for k, _ in items]).tobytes(), col("q", 0), sums, col("q", 2), col("d", 3),
                    [c[4] for _, c in items]))
    return w


def compiled(windows: list[Windows]) -> bool:
    """Whether these windows are all of the compiled type (``prune_texts`` runs on those alone)."""
    return native.lib is not None and all(type(w) is native.lib.Windows for w in windows)
