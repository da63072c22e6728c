"""The serving time series' per-window aggregates of one figure on one rank.

Why apart from the observer (``serving.py``): a log in which every rank prints batch
statistics has dozens of such windows of thousands of cells each, so their representation
decides the run model's speed and memory. A window set keeps its cells as numpy arrays, in
the order of their first lines (for a log read in order, the order adding its values creates
them). Values come in by the batch: the rows of a segment at once (:func:`add_rows_alike`,
for all of a rank's figures of the same records), or one by one (:meth:`Windows.add`, held
until something reads the windows or enough are held). A batch is appended to the cells or
grouped with them in one pass (:func:`_grouped`), which gives what adding the values one by
one gives: the same cells, the same widening, the same first records.

A window's sum is fixed point (:func:`fixed`): each value rounded to a grid of 2**-64, the
sum an integer (128-bit two's complement). Integer addition is associative, so the sum does
not depend on how the values were grouped: one pass, a segment at once, a window widened
early or late, or a log read in byte ranges on several cores and merged
(``ingest/parallel.py``) all give the same sum, and :func:`as_float` the same double.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: Windows kept per figure and rank before their width doubles.
MAX_WINDOWS = 4096

#: One window's aggregates: [count, sum, first_line, first_second, first_text];
#: the sum in units of 2**-64 (:func:`fixed`), the last slot a record's text or None.
Cell = list[Any]

_ONE = 2.0**64
_CAP = 2.0**62  # values beyond are capped: a sum of 2**64 of them still fits in 128 bits
_HALF = 1 << 127
_SMALL = 2.0**31
_HALF_GRID = 2.0**32
#: Values added one by one and held before they go to the cells (bounds what is held).
HOLD = 1 << 14


def fixed(v: float) -> int:
    """``v`` on the sums' grid: the nearest multiple of 2**-64 (half to even), capped at
    +-2**62, NaN as 0; in units of 2**-64 (:func:`_fixed_parts` is the same for arrays)."""
    if v != v:
        return 0
    return round(min(max(v, -_CAP), _CAP) * _ONE)  # the product is exact: a power of two


def _wrapped(s: int) -> int:
    """``s`` in 128-bit two's complement (a sum past it wraps, whatever the grouping)."""
    return s if -_HALF <= s < _HALF else (s + _HALF) % (1 << 128) - _HALF


#: A sum's units per 1 (an int: ``sum / GRID`` is int / int, correctly rounded).
GRID = 1 << 64


def as_float(s: int) -> float:
    """A fixed-point sum as a float: correctly rounded (int / int)."""
    return s / GRID


class Windows:
    """Per-window [count, sum, first_line, first_second, first_text] of one
    figure on one rank (the text only where kept: the record a change point cites), in
    the order of their first lines: what values were added decides the cells, not their
    order (a log's values in order create the cells in that order).

    Each cell's sum is kept as four int64 parts (:func:`_fixed_parts`, :func:`_cell_parts`), exact
    for up to 2**31 - 1 values a window, and read out as one Python int (:meth:`items`)."""

    __slots__ = ("_width", "_key", "_count", "_parts", "_line", "_sec", "_text", "_held", "_alike")

    def __init__(self, width: int = 1) -> None:
        self._width = width
        self._key = np.empty(0, np.int64)
        self._count = np.empty(0, np.int64)
        self._parts = np.empty((4, 0), np.int64)
        self._line = np.empty(0, np.int64)
        self._sec = np.empty(0, np.float64)
        self._text = np.empty(0, object)
        self._held: tuple[list[float], list[float], list[int], list[str | None]] = ([], [], [], [])
        #: shared by windows that took the same values last, and so hold the same cells' windows
        #: and lines (``add_rows_alike``); a new one when anything else changes these
        self._alike = object()

    @property
    def width(self) -> int:
        self._settle()
        return self._width

    def __len__(self) -> int:
        self._settle()
        return len(self._key)

    def add(self, sec: float, value: float, line: int, text: str | None = None) -> None:
        """One value at second ``sec`` of line ``line`` (``text``: the line's, kept when the
        value is its window's first record); held until something reads the windows."""
        held = self._held
        self._alike = object()
        held[0].append(sec)
        held[1].append(value)
        held[2].append(line)
        held[3].append(text)
        if len(held[0]) >= HOLD:
            self._settle()

    def add_rows(self, sec: np.ndarray, value: np.ndarray, line: np.ndarray,
                 text: Callable[[np.ndarray], Sequence[str | None]] | None = None) -> None:
        """``add(sec[i], value[i], line[i], text(i))`` for every i in order, the texts made
        only for the rows that become a cell's first record (``text(rows)``: theirs)."""
        add_rows_alike([self], sec, [value], line, [text])

    def _settle(self) -> None:
        """The values held go to the cells."""
        if self._held[0]:
            add_rows_alike([self], np.empty(0), [np.empty(0)], np.empty(0, np.int64), [None])

    def _window_of(self, sec: np.ndarray) -> np.ndarray:
        q = np.floor_divide(sec, self._width)  # Python's float floor division
        if not (np.abs(q) < 9e18).all():
            raise OverflowError("a stamp out of range")
        return q.astype(np.int64)

    def _group_in(self, keys: np.ndarray, value: np.ndarray, line: np.ndarray, sec: np.ndarray,
                  text: Callable[[np.ndarray], Sequence[str | None]] | None) -> None:
        """Values (their windows at this width, which holds them) grouped with the cells."""
        n0, n = len(self._key), len(keys)
        pick = self._take(_grouped(np.concatenate((self._key, keys)), np.concatenate((self._count, np.ones(n, np.int64))),
                                   np.concatenate((self._parts, _fixed_parts(value)), axis=1),
                                   np.concatenate((self._line, line)), np.concatenate((self._sec, sec)),
                                   np.concatenate((self._text, np.full(n, None, object)))))
        made = np.flatnonzero(pick >= n0)  # cells whose first record is one of these values
        if len(made) and text is not None:
            self._text = self._text.copy()
            self._text[made] = text(pick[made] - n0)

    def _steps(self, keys: np.ndarray, line: np.ndarray, sec: np.ndarray) -> tuple[np.ndarray, ...] | None:
        """The common case, in fewer steps: values in a log's order (windows and lines rising),
        all in the last cell's window or later ones. Where they begin cells, how many each
        cell takes, its earliest second, and whether the first goes on the last cell; None
        when that is not the case. The same for all windows alike (``add_rows_alike``)."""
        n, n0 = len(keys), len(self._key)
        if not ((keys[1:] >= keys[:-1]).all() and (line[1:] > line[:-1]).all()):
            return None
        if n0 and not (line[0] > self._line[-1] and
                       (keys[0] > self._key.max() or keys[0] == self._key[-1] == self._key.max())):
            return None
        starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
        go_on = np.array(n0 > 0 and keys[0] == self._key[-1])
        return starts, np.diff(np.append(starts, n)), np.minimum.reduceat(sec, starts), go_on

    def _widening(self, keys: np.ndarray) -> int:
        """By how much the windows widen when values of these windows come in, as adding them
        one by one widens them (doubling while they hold more than ``MAX_WINDOWS`` cells): 1
        when they fit."""
        if len(self._key) + len(keys) <= MAX_WINDOWS:
            return 1
        both = np.concatenate((self._key, keys))
        if not (both[1:] >= both[:-1]).all():  # else a log's clock: in order already
            both.sort()
        factor = 1
        while np.count_nonzero(np.diff(both // factor)) >= MAX_WINDOWS:  # the windows, counted by their steps
            factor *= 2
        return factor

    def _take(self, grouped: tuple[Any, ...]) -> Any:
        """These grouped cells as the cells; the rows each came from (``_grouped``'s pick)."""
        self._key, self._count, self._parts, self._line, self._sec, self._text, pick = grouped
        self._alike = object()
        return pick

    def _coarsen_by(self, factor: int, width: int | None = None) -> None:
        """The cells folded into windows ``factor`` times as wide (``width``: the new width)."""
        self._take(_grouped(self._key // factor, self._count, self._parts, self._line, self._sec, self._text))
        self._width = self._width * factor if width is None else width

    def coarsen(self, width: int) -> None:
        self._settle()
        if width > self._width:
            self._coarsen_by(width // self._width, width)

    def coarsened(self, width: int) -> Windows:
        """The windows at ``width`` (a multiple of this width), leaving these unchanged."""
        self._settle()
        if width <= self._width:
            return self
        out = Windows(self._width)
        out._take((self._key, self._count, self._parts, self._line, self._sec, self._text, None))
        out._coarsen_by(width // self._width, width)
        return out

    def merge(self, other: Windows) -> None:
        """Fold in the windows of a later part of the log (their cells after these)."""
        self._settle()
        width = max(self._width, other.width)
        self.coarsen(width)
        o = other.coarsened(width)
        self._take(_grouped(*(np.concatenate((a, b), axis=-1) for a, b in
                              zip(self._columns(), o._columns()))))
        while len(self._key) > MAX_WINDOWS:
            self._coarsen_by(2)

    def _columns(self) -> tuple[np.ndarray, ...]:
        return self._key, self._count, self._parts, self._line, self._sec, self._text

    def keys(self) -> list[int]:
        self._settle()
        return self._key.tolist()

    def items(self) -> list[tuple[int, Cell]]:
        self._settle()
        hh, hl, lh, ll = (p.tolist() for p in self._parts)
        return [(k, [c, _wrapped((a << 96) + (b << 64) + (d << 32) + e), line, sec, t])
                for k, c, a, b, d, e, line, sec, t in zip(self._key.tolist(), self._count.tolist(), hh, hl, lh, ll,
                                                          self._line.tolist(), self._sec.tolist(), self._text.tolist())]

    def texts(self) -> list[tuple[int, str]]:
        """(first line, text) of the cells that keep a text."""
        self._settle()
        return [(line, t) for line, t in zip(self._line.tolist(), self._text.tolist()) if t is not None]

    def first_line(self) -> int | None:
        self._settle()
        return int(self._line.min()) if len(self._line) else None

    def __getstate__(self) -> tuple[Any, ...]:
        self._settle()
        return (self._width, *self._columns())

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self._width = state[0]
        self._take((*state[1:], None))
        self._held = ([], [], [], [])


def _grouped(key: np.ndarray, count: np.ndarray | None, parts: np.ndarray, line: np.ndarray, sec: np.ndarray,
             text: np.ndarray) -> tuple[np.ndarray, ...]:
    """Cells (or values: ``count`` None, 1 each) grouped by key: counts and sums added, the
    earliest second, and the first line with its text from the member with the smallest
    line (the first of equal ones), which member that was (``pick``); the groups in the
    order of their first lines, which is the order in which adding a log's values in the
    log's order creates them, whatever order they come in."""
    n = len(key)
    if not n:
        return key, np.zeros(0, np.int64) if count is None else count, parts, line, sec, text, np.empty(0, np.int64)
    later = key[1:] > key[:-1]
    if (later | ((key[1:] == key[:-1]) & (line[1:] >= line[:-1]))).all():  # a log's clock: in order already
        starts = np.flatnonzero(np.concatenate(([True], later)))
        pick = starts
        summed = (np.diff(np.append(starts, n)) if count is None else np.add.reduceat(count, starts),
                  np.add.reduceat(parts, starts, axis=1), np.minimum.reduceat(sec, starts))
    else:
        order = np.lexsort((np.arange(n), line, key))  # by key, then line, then as they came
        k = key[order]
        starts = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
        pick = order[starts]
        summed = (np.diff(np.append(starts, n)) if count is None else np.add.reduceat(count[order], starts),
                  np.add.reduceat(parts[:, order], starts, axis=1), np.minimum.reduceat(sec[order], starts))
    out = np.lexsort((pick, line[pick]))  # the groups by first line (then by who came first)
    pick = pick[out]
    return key[pick], summed[0][out], summed[1][:, out], line[pick], summed[2][out], text[pick], pick


def _fixed_parts(values: np.ndarray) -> np.ndarray:
    """:func:`fixed` of every value in four signed 32-bit parts (rows, high to low): the sum
    of a part over up to 2**31 values fits an int64, and the parts' sums, shifted by 96, 64,
    32 and 0 bits and added as Python ints, are the exact sum of the fixed values."""
    v = np.asarray(values, np.float64)
    out = np.zeros((4, len(v)), np.int64)
    with np.errstate(invalid="ignore"):  # NaN and infinities are not whole: the general way below
        whole = v.astype(np.int64)  # counts and token figures: small whole numbers, on the grid as they are
    if (whole == v).all() and (np.abs(whole) < 1 << 31).all():
        out[1] = whole
        return out
    if np.isnan(v).any():
        v = np.where(np.isnan(v), 0.0, v)
    negative = v < 0
    a = np.minimum(np.abs(v), _CAP) if negative.any() else np.minimum(v, _CAP)
    whole = np.floor(a)
    low = np.rint((a - whole) * _ONE)  # exact: a - floor(a) for a >= 0, and a power of two's product
    carry = low == _ONE
    if carry.any():
        whole += carry
        low[carry] = 0.0
    w = whole.astype(np.int64)  # |fixed| == whole * 2**64 + low
    lo = low.astype(np.uint64).view(np.int64)  # the bits, below 2**64
    np.right_shift(w, 32, out=out[0])
    np.bitwise_and(w, 0xFFFFFFFF, out=out[1])
    np.right_shift(lo, 32, out=out[2])
    np.bitwise_and(out[2], 0xFFFFFFFF, out=out[2])
    np.bitwise_and(lo, 0xFFFFFFFF, out=out[3])
    if negative.any():
        out[:, negative] *= -1
    return out


def _cell_parts(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The sums of :func:`_fixed_parts` of each row of ``values`` over the cells beginning at
    ``starts``, as (part, row, cell): parts that add up to the same fixed-point sums.

    The common case costs a few passes: values below 2**31 in magnitude, at most 2**21 of
    them. Then ``|v| == floor(|v|) + hi * 2**-32 + lo * 2**-64`` exactly, ``hi`` and ``lo``
    whole and at most 2**32 (``lo`` rounded half to even, as :func:`fixed` rounds), and the
    three, signed as ``v``, are summed in doubles, exactly: no sum passes 2**53. Rows of whole
    numbers (counts, tokens) are summed as they are."""
    rows, n = values.shape
    with np.errstate(invalid="ignore"):  # NaN: the general way
        common = n < 1 << 21 and bool(values.min() > -_SMALL) and bool(values.max() < _SMALL)
    if not common:
        return np.add.reduceat(_fixed_parts(values.ravel()).reshape(4, rows, n), starts, axis=2)
    out = np.zeros((4, rows, len(starts)), np.int64)
    out[1] = np.add.reduceat(values, starts, axis=1)
    size = np.abs(values)
    whole = np.floor(size)
    frac = size - whole  # exact, in [0, 1)
    some = np.flatnonzero(frac.any(axis=1))
    if len(some):
        v = values[some]
        f = frac[some] * _HALF_GRID
        hi = np.floor(f)
        for part, x in ((1, whole[some]), (2, hi), (3, np.rint((f - hi) * _HALF_GRID))):
            out[part, some] = np.add.reduceat(np.copysign(x, v), starts, axis=1)
    return out


def _merged_texts(order: np.ndarray, alone: list[str | None],
                  text: Callable[[np.ndarray], Sequence[str | None]] | None) -> Callable[[np.ndarray], Sequence[str | None]]:
    """The texts of values put in line order by ``order``: first those added one by one
    (``alone``, their texts), then rows (``text``)."""
    held = len(alone)

    def merged(picked: np.ndarray) -> list[str | None]:
        source = order[picked]
        out: list[str | None] = [alone[i] if i < held else None for i in source.tolist()]
        of_rows = np.flatnonzero(source >= held)
        if text is not None and len(of_rows):
            for j, t in zip(of_rows.tolist(), text(source[of_rows] - held)):
                out[j] = t
        return out
    return merged


def add_rows_alike(windows: Sequence[Windows], sec: np.ndarray, values: Sequence[np.ndarray], line: np.ndarray,
                   texts: Sequence[Callable[[np.ndarray], Sequence[str | None]] | None]) -> None:
    """``add_rows`` of each windows' values, all at the same seconds and lines (a rank's
    figures of the same records): where the windows are alike (the same width, the same
    cells' windows and first lines, the same values held), their windows and steps are found
    once. Values held come in with the rows, all in the order of their lines (the order the
    cells are cheapest to add in; the cells do not depend on it). The windows are widened
    first as far as adding the values one by one would widen them, then the values are
    appended (``_steps``, ``_append_alike``) or grouped with the cells (``_group_in``)."""
    lead = windows[0]
    held = lead._held
    if len(windows) > 1 and not all(w._alike is lead._alike for w in windows) and not all(
            w._held[0] == held[0] and w._held[2] == held[2] and w._width == lead._width
            and np.array_equal(w._key, lead._key) and np.array_equal(w._line, lead._line) for w in windows):
        for w, value, text in zip(windows, values, texts):
            add_rows_alike([w], sec, [value], line, [text])
        return
    if held[0]:  # values added one by one (to all of them, at the same seconds and lines) first, all in line order
        order = np.argsort(np.concatenate((np.array(held[2], np.int64), line)), kind="stable")
        sec = np.concatenate((np.array(held[0], np.float64), sec))[order]
        line = np.concatenate((np.array(held[2], np.int64), line))[order]
        values = [np.concatenate((np.array(w._held[1], np.float64), v))[order] for w, v in zip(windows, values)]
        texts = [_merged_texts(order, w._held[3], t) for w, t in zip(windows, texts)]
        for w in windows:
            w._held = ([], [], [], [])
    if not len(sec):
        return
    keys = lead._window_of(sec)
    factor = lead._widening(keys)
    if factor > 1:
        for w in windows:
            w._coarsen_by(factor)
        keys //= factor
    steps = lead._steps(keys, line, sec)
    if steps is None:
        for w, value, text in zip(windows, values, texts):
            w._group_in(keys, value, line, sec, text)
    else:
        _append_alike(windows, steps, keys, line, values, texts)
    token = object()
    for w in windows:
        w._alike = token


def _append_alike(windows: Sequence[Windows], steps: tuple[np.ndarray, ...], keys: np.ndarray, line: np.ndarray,
                  values: Sequence[np.ndarray], texts: Sequence[Callable[[np.ndarray], Sequence[str | None]] | None]) -> None:
    """The values' cells (``_steps``, the same for all the windows): the first goes on the
    last cell or is appended, the others appended. The windows' cells' windows and lines are
    then the same arrays (never changed in place: new ones replace them); counts and seconds
    are each window's (windows with the same cells can differ in them: one took a record
    another lacked), and so are the sums (all made at once, ``_cell_parts``) and texts."""
    starts, counts, secs, go_on = steps
    lead = windows[0]
    last = len(lead._key) - 1  # the cell the first goes on (go_on)
    new = starts[1:] if go_on else starts
    key = np.concatenate((lead._key, keys[new]))
    first = np.concatenate((lead._line, line[new]))
    parts = _cell_parts(np.stack(values), starts)  # (part, window, cell)
    made: dict[int, np.ndarray] = {}  # the new cells' texts by text function: windows alike share one
    for i, (w, text) in enumerate(zip(windows, texts)):
        count = np.concatenate((w._count, counts[1:] if go_on else counts))
        sec = np.concatenate((w._sec, secs[1:] if go_on else secs))
        summed = np.concatenate((w._parts, parts[:, i, 1:] if go_on else parts[:, i]), axis=1)
        if go_on:
            count[last] += counts[0]
            sec[last] = min(sec[last], secs[0])
            summed[:, last] += parts[:, i, 0]
        got = made.get(id(text))
        if got is None:
            got = made[id(text)] = np.empty(len(new), object)
            if text is not None:
                got[:] = text(new)
        w._key, w._count, w._line, w._sec = key, count, first, sec
        w._parts, w._text = summed, np.concatenate((w._text, got))


def new_windows() -> Windows:
    """Empty windows of width 1."""
    return Windows()
