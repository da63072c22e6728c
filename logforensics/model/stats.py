"""Bounded-memory statistics for series that grow with the log (throughput, usage).

A week-long serving log has millions of decode records; the run model must not keep
them. :class:`Sketch` keeps a log-bucketed histogram (1% relative error, like
DDSketch) for quantiles, and the values themselves while they are few (exact quantiles
of a short excerpt); :class:`Series` keeps a time series downsampled to a fixed
number of points by averaging neighbours.

Both merge exactly, so that byte ranges of one log summarised in separate processes
give the summary of the whole log (``RunModel.merge``). A sketch's counts and extremes
are exact, and its sum is kept exactly (see :func:`_exact_terms`), so the mean does not
depend on how the values were split. A series' points depend on how many values came
before (the stride doubles with their count), which the series of a later part cannot
know: such a series keeps its values instead (``keep_values``, memory bounded by the
part's size), and merging adds them to the earlier series one by one.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Sequence
from itertools import chain, repeat
from operator import mul
from typing import Any

from ..read.bulk import compiled_sketch_batch, compiled_sketch_doubles, numbers

_GAMMA = 1.02  # bucket ratio: quantiles within 1% of the true value
_INV_LOG_GAMMA = 1.0 / math.log(_GAMMA)
_log = math.log
_fsum = math.fsum
#: Values a sketch collects before it buckets them (in C-level bulk operations).
_BATCH = 2048

#: The compiled loop over a batch, or None (see ``_scan.sketch_batch``): the same extremes,
#: zero count, buckets and exact sum as the Python code in ``_flush``.
_sketch_batch = compiled_sketch_batch()
#: The same over a scan's numbers as doubles (``_scan.sketch_doubles``), or None.
_sketch_doubles = compiled_sketch_doubles()
#: Up to this many values a sketch keeps them all, and its quantiles are exact.
EXACT_LIMIT = 1024


def _exact_terms(values: list[float]) -> list[float]:
    """The exact sum of ``values`` as a short list of floats whose own exact sum it is.

    ``math.fsum`` returns the correctly rounded exact sum; subtracting it and summing
    again gives the rounding error, and so on until nothing is left (two or three terms
    for throughput figures). Keeping these terms instead of a running float makes the
    total independent of the order and grouping of the additions, so a sketch merged
    from parts equals the sketch of the whole.
    """
    rest = list(values)
    terms: list[float] = []
    while True:
        s = _fsum(rest)
        if not s:  # fsum is exact-rounded: 0.0 only when nothing is left
            return terms
        terms.append(s)
        rest.append(-s)


class Sketch:
    """Count, min, max, mean and approximate quantiles of non-negative values.

    ``add`` only appends: values are bucketed a batch at a time (``_flush``), which
    costs a fraction of doing it value by value on the hot path of a serving log.
    """

    __slots__ = ("count", "min", "max", "zeros", "buckets", "_terms", "_pending", "_exact", "_doubles",
                 "_doubles_ints")

    def __init__(self) -> None:
        self.count = 0  # bucketed values; see size for all of them
        self.min = math.inf
        self.max = -math.inf
        self.zeros = 0
        self.buckets: Counter[int] = Counter()
        self._terms: list[float] = []  # the exact sum of the bucketed values
        self._pending: list[float] = []
        #: every value, while there are at most EXACT_LIMIT: quantiles of a short series are
        #: then values the log printed (a bucket's midpoint, clamped, read as the maximum)
        self._exact: list[float] | None = []
        #: a scan's numbers not bucketed yet, as doubles (``extend_doubles``), all read by int()
        #: or all by float(); at most one of these and ``_pending`` holds values at a time
        self._doubles = array("d")
        self._doubles_ints = False

    def add(self, x: float) -> None:
        if self._doubles:
            self._flush_doubles()
        pending = self._pending
        pending.append(x)
        if len(pending) >= _BATCH:
            self._flush()

    def extend(self, values: list[float]) -> None:
        """``add`` each of ``values``, in order."""
        if self._doubles:
            self._flush_doubles()
        pending = self._pending
        pending.extend(values)
        if len(pending) >= _BATCH:
            self._flush()

    def extend_doubles(self, ints: bool, doubles: bytes) -> None:
        """``extend`` with a scan's numbers (``read.bulk.numbers``), without making a Python
        number of each: they are collected as doubles and folded in a batch at a time in
        C (``_flush_doubles``), after the values added before them. While the sketch still
        keeps every value, they go the way of ``extend``."""
        if self._exact is None and _sketch_doubles is not None:
            if self._pending:
                self._flush()
            if self._doubles and self._doubles_ints != ints:
                self._flush_doubles()
            self._doubles_ints = ints
            self._doubles.frombytes(doubles)
            if len(self._doubles) >= _BATCH:
                self._flush_doubles()
            return
        self.extend(list(numbers(ints, doubles)))

    def _flush_doubles(self) -> None:
        """Bucket the collected doubles: the same figures as ``_flush`` of the numbers they
        are (the extremes as the ints or floats they were read as)."""
        data = self._doubles
        self._doubles = array("d")
        assert _sketch_doubles is not None  # only collected where it is built
        got = _sketch_doubles(data, self._doubles_ints, _INV_LOG_GAMMA, self.buckets)
        if got is None:  # not finite, or a sum beyond doubles: the Python path decides
            self._pending = list(numbers(self._doubles_ints, data.tobytes()))
            self._flush()
            return
        self.count += len(data)
        self._fold_batch(*got)

    def _fold_batch(self, lo: Any, hi: Any, zeros: int, partials: list[float]) -> None:
        """A batch bucketed in C (its extremes, zeros and exact partial sums) into these figures."""
        if lo < self.min:
            self.min = lo
        if hi > self.max:
            self.max = hi
        self.zeros += zeros
        self._terms = _exact_terms(self._terms + partials)

    @property
    def total(self) -> float:
        """The sum of all values, correctly rounded."""
        if self._doubles:
            self._flush_doubles()
        return _fsum(self._terms + self._pending)

    def _flush(self) -> None:
        if self._doubles:
            self._flush_doubles()
        vals = self._pending
        if not vals:
            return
        self._pending = []
        self.count += len(vals)
        if self._exact is not None:
            self._exact = self._exact + vals if self.count <= EXACT_LIMIT else None
        got = None if _sketch_batch is None else _sketch_batch(vals, _INV_LOG_GAMMA, self.buckets)
        if got is not None:
            self._fold_batch(*got)
            return
        lo, hi = min(vals), max(vals)
        if lo < self.min:  # the first of equal extremes is kept, as value by value
            self.min = lo
        if hi > self.max:
            self.max = hi
        positive = vals if lo > 0 else [x for x in vals if x > 0]
        self.zeros += len(vals) - len(positive)
        # the same float operations as int(log(x) * _INV_LOG_GAMMA), value by value
        self.buckets.update(map(int, map(mul, map(_log, positive), repeat(_INV_LOG_GAMMA))))
        self._terms = _exact_terms(self._terms + vals)

    def merge(self, other: Sketch) -> None:
        self._flush()
        other._flush()
        self.count += other.count
        if self._exact is not None and other._exact is not None and self.count <= EXACT_LIMIT:
            self._exact = self._exact + other._exact
        else:
            self._exact = None
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.zeros += other.zeros
        self.buckets.update(other.buckets)
        self._terms = _exact_terms(self._terms + other._terms)

    def quantile(self, q: float) -> float | None:
        """The value at the nearest rank: the smallest value with at least ``q`` of the values
        at or below it (so a p90 of two values is the larger, as a reader takes it)."""
        self._flush()
        if not self.count:
            return None
        rank = max(0, math.ceil(q * self.count - 1e-9) - 1)  # (0-based; 1e-9: 0.1 * 30 is not 3.0)
        if self._exact is not None:  # the value at that rank, as the buckets would pick it
            return sorted(self._exact)[rank]
        seen = self.zeros
        if rank < seen:
            return 0.0
        for k in sorted(self.buckets):
            seen += self.buckets[k]
            if rank < seen:
                value = _GAMMA ** (k + 0.5)
                return min(max(value, self.min), self.max)
        return self.max

    def to_dict(self) -> dict[str, Any]:
        self._flush()
        if not self.count:
            return {"count": 0}
        return {
            "count": self.count,
            "mean": round(self.total / self.count, 3),
            "min": round(self.min, 3),
            "p10": _r(self.quantile(0.10)),
            "median": _r(self.quantile(0.5)),
            "p90": _r(self.quantile(0.90)),
            "max": round(self.max, 3),
        }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


class Series:
    """A time series of (x, y) points kept to at most ``limit`` points.

    Every point is the mean of ``stride`` consecutive values (x of the first); when
    ``limit`` points are reached, neighbours are averaged and the stride doubles. The
    stride and the number of points therefore depend only on how many values were added.

    With ``keep_values`` (the series of a part of a log that follows another part), the
    series only keeps its values, compactly, until :meth:`merge` adds them to the series
    of what came before: the result is then that of adding every value to one series.
    """

    __slots__ = ("limit", "points", "_stride", "_acc", "_acc_n", "_acc_x", "_kept")

    def __init__(self, limit: int = 1000, *, keep_values: bool = False) -> None:
        self.limit = limit
        self.points: list[tuple[Any, float]] = []
        self._stride = 1
        #: the values of the unfinished point, in order, in parts: lists of numbers, or arrays
        #: of doubles (a scan's numbers)
        self._acc: list[list[float] | array[float]] = []
        self._acc_n = 0  # how many
        self._acc_x: Any = None  # and the x of the first
        self._kept: _Kept | None = _Kept() if keep_values else None

    def add(self, x: Any, y: float) -> None:
        if self._kept is not None:
            self._kept.add(x, y)
            return
        acc = self._acc
        if not self._acc_n:
            self._acc_x = x
        if acc and type(acc[-1]) is list:
            acc[-1].append(y)
        else:
            acc.append([y])
        self._acc_n += 1
        if self._acc_n >= self._stride:
            self._close_point()

    def extend(self, points: list[tuple[Any, float]]) -> None:
        """``add`` each ``(x, y)`` of ``points``, in order."""
        self.extend_xy([x for x, _ in points], [y for _, y in points])

    def extend_xy(self, xs: Sequence[Any], ys: Sequence[float]) -> None:
        """``add`` each ``(xs[i], ys[i])`` in order, a point at a time."""
        if self._kept is not None:
            self._kept.extend(xs, ys)
            return
        # a scan's numbers as doubles (read.bulk.numbers)
        view = ys if isinstance(ys, memoryview) and ys.format == "d" else None
        i, n = 0, len(ys)
        while i < n:
            stride = self._stride
            if not self._acc_n and n - i >= stride:  # a whole point straight from the columns
                total = sum(ys[i:i + stride])
                self._add_point(xs[i], total / stride)
                i += stride
                continue
            if not self._acc_n:
                self._acc_x = xs[i]
            take = min(stride - self._acc_n, n - i)
            if view is None:
                self._acc.append(list(ys[i:i + take]))
            else:
                piece = array("d")
                piece.frombytes(view[i:i + take].cast("B"))
                self._acc.append(piece)
            self._acc_n += take
            i += take
            if self._acc_n >= stride:
                self._close_point()

    def _sum(self) -> Any:
        """``sum()`` of the unfinished point's values, in order (the same number either way)."""
        acc = self._acc
        return sum(chain.from_iterable(acc))

    def _close_point(self) -> None:
        total, n = self._sum(), self._acc_n
        self._acc, self._acc_n = [], 0
        self._add_point(self._acc_x, total / n)

    def _add_point(self, x: Any, y: float) -> None:
        self.points.append((x, y))
        if len(self.points) >= self.limit:
            self.points = [
                (self.points[i][0], (self.points[i][1] + self.points[i + 1][1]) / 2)
                for i in range(0, len(self.points) - 1, 2)
            ]
            self._stride *= 2

    def merge(self, later: Series) -> None:
        """Add the values of a series that followed this one: exact.

        ``later`` must have kept its values (``keep_values``); they are added in order,
        so the stride, the points and every mean are those of one series that took all
        values. (A series that kept only points cannot be merged exactly: its points
        straddle this series' points.) ``later`` is consumed.
        """
        kept = later._kept
        if kept is None:
            if later.points or later._acc_n:
                raise ValueError("a series merges exactly only from a series that kept its values")
            return
        kept.close()
        if self._kept is not None:
            self._kept.chunks.extend(kept.chunks)
            return
        for xs, ys in kept.chunks:
            self.extend_xy(xs, ys)
        later._kept = _Kept()

    def to_list(self) -> list[list[Any]]:
        if self._kept is not None:  # the points its values alone would give
            alone = Series(self.limit)
            self._kept.close()
            for xs, ys in self._kept.chunks:
                alone.extend_xy(xs, ys)
            return alone.to_list()
        pts = list(self.points)
        if self._acc_n:
            pts.append((self._acc_x, self._sum() / self._acc_n))
        return [[x, round(y, 3)] for x, y in pts]


class _Stamps:
    """Stamps of equal length joined into one string: a part's x values in little memory
    (a str per value would cost about 70 bytes). Indexing and slicing give the stamps."""

    __slots__ = ("text", "width")

    def __init__(self, text: str, width: int) -> None:
        self.text = text
        self.width = width

    def __len__(self) -> int:
        return len(self.text) // self.width

    def __getitem__(self, i: int | slice) -> Any:
        w, text = self.width, self.text
        if isinstance(i, slice):
            start, stop, _ = i.indices(len(self))
            return [text[k:k + w] for k in range(start * w, stop * w, w)]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return text[i * w:(i + 1) * w]


#: Values a kept series collects before it stores them as a chunk.
_KEPT_BATCH = 1 << 16


class _Kept:
    """The values of a series kept in order, as chunks of (xs, ys): ys as doubles, xs as
    one string when they are stamps of one length."""

    __slots__ = ("chunks", "_xs", "_ys")

    def __init__(self) -> None:
        self.chunks: list[tuple[Any, Sequence[float]]] = []  # xs: a list or _Stamps
        self._xs: list[Any] = []
        self._ys: list[float] = []

    def add(self, x: Any, y: float) -> None:
        self._xs.append(x)
        self._ys.append(y)
        if len(self._ys) >= _KEPT_BATCH:
            self.close()

    def extend(self, xs: Sequence[Any], ys: Sequence[float]) -> None:
        self._xs.extend(xs)
        self._ys.extend(ys)
        if len(self._ys) >= _KEPT_BATCH:
            self.close()

    def close(self) -> None:
        """Store the values added one by one."""
        if self._ys:
            xs, ys = self._xs, self._ys
            self._xs, self._ys = [], []
            self._store(xs, ys)

    def _store(self, xs: list[Any], ys: list[float]) -> None:
        if not ys:
            return
        try:
            values: Sequence[float] = array("d", ys)
        except TypeError:  # not all floats: kept as they are
            values = ys
        try:  # stamps (str) of one length: one string; anything else as it is
            text = "".join(xs)
        except TypeError:
            text = ""
        width = len(xs[0]) if type(xs[0]) is str else 0
        if width and len(text) == width * len(xs) and len(set(map(len, xs))) == 1:
            self.chunks.append((_Stamps(text, width), values))
        else:
            self.chunks.append((xs, values))
