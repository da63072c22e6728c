"""Bounded-memory statistics for series that grow with the log (throughput, usage).

A week-long serving log has millions of decode records; the run model must not keep
them. :class:`Sketch` keeps a log-bucketed histogram (1% relative error, like
DDSketch) for quantiles, and the values themselves while they are few (exact quantiles
of a short excerpt); :class:`Series` keeps a time series downsampled to a fixed
number of points by averaging neighbours.

Both can be merged, so that byte ranges of one log summarised in separate processes
give the summary of the whole log (``RunModel.merge``). A sketch merges exactly: its
counts and extremes are exact, and its sum is kept exactly (see :func:`_exact_terms`),
so the mean does not depend on how the values were split. A series merges
approximately: see :meth:`Series.merge`.
"""

from __future__ import annotations

import math
from collections import Counter
from itertools import repeat
from operator import itemgetter, mul
from typing import Any

from ..read.bulk import compiled_sketch_batch

_GAMMA = 1.02  # bucket ratio: quantiles within 1% of the true value
_INV_LOG_GAMMA = 1.0 / math.log(_GAMMA)
_log = math.log
_fsum = math.fsum
#: Values a sketch collects before it buckets them (in C-level bulk operations).
_BATCH = 2048

#: The compiled loop over a batch, or None (see ``_scan.sketch_batch``): the same extremes,
#: zero count, buckets and exact sum as the Python code in ``_flush``.
_sketch_batch = compiled_sketch_batch()
#: Up to this many values a sketch keeps them all, and its quantiles are exact.
EXACT_LIMIT = 1024
_Y = itemgetter(1)


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

    __slots__ = ("count", "min", "max", "zeros", "buckets", "_terms", "_pending", "_exact")

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

    def add(self, x: float) -> None:
        pending = self._pending
        pending.append(x)
        if len(pending) >= _BATCH:
            self._flush()

    def extend(self, values: list[float]) -> None:
        """``add`` each of ``values``, in order."""
        pending = self._pending
        pending.extend(values)
        if len(pending) >= _BATCH:
            self._flush()

    @property
    def total(self) -> float:
        """The sum of all values, correctly rounded."""
        return _fsum(self._terms + self._pending)

    def _flush(self) -> None:
        vals = self._pending
        if not vals:
            return
        self._pending = []
        self.count += len(vals)
        if self._exact is not None:
            self._exact = self._exact + vals if self.count <= EXACT_LIMIT else None
        got = None if _sketch_batch is None else _sketch_batch(vals, _INV_LOG_GAMMA, self.buckets)
        if got is not None:
            lo, hi, zeros, partials = got
            if lo < self.min:
                self.min = lo
            if hi > self.max:
                self.max = hi
            self.zeros += zeros
            self._terms = _exact_terms(self._terms + partials)
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
        self._flush()
        if not self.count:
            return None
        rank = q * (self.count - 1)
        if self._exact is not None:  # the value at that rank, as the buckets would pick it
            return sorted(self._exact)[int(rank)]
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
    """

    __slots__ = ("limit", "points", "_stride", "_acc")

    def __init__(self, limit: int = 1000) -> None:
        self.limit = limit
        self.points: list[tuple[Any, float]] = []
        self._stride = 1
        self._acc: list[tuple[Any, float]] = []

    def add(self, x: Any, y: float) -> None:
        acc = self._acc
        acc.append((x, y))
        if len(acc) >= self._stride:
            self._close_point()

    def extend(self, points: list[tuple[Any, float]]) -> None:
        """``add`` each ``(x, y)`` of ``points``, in order, a group at a time."""
        i, n = 0, len(points)
        while i < n:
            take = self._stride - len(self._acc)
            self._acc.extend(points[i:i + take])
            i += take
            if len(self._acc) >= self._stride:
                self._close_point()

    def extend_xy(self, xs: list[Any], ys: list[float]) -> None:
        """``extend(list(zip(xs, ys)))``, without building pairs for whole points."""
        i, n = 0, len(ys)
        while i < n:
            stride = self._stride
            if not self._acc and n - i >= stride:  # a whole point straight from the columns
                self._add_point(xs[i], sum(ys[i:i + stride]) / stride)
                i += stride
                continue
            take = stride - len(self._acc)
            self._acc.extend(zip(xs[i:i + take], ys[i:i + take]))
            i += take
            if len(self._acc) >= stride:
                self._close_point()

    def _close_point(self) -> None:
        acc = self._acc
        self._acc = []
        self._add_point(acc[0][0], sum(map(_Y, acc)) / len(acc))

    def _add_point(self, x: Any, y: float) -> None:
        self.points.append((x, y))
        if len(self.points) >= self.limit:
            self.points = [
                (self.points[i][0], (self.points[i][1] + self.points[i + 1][1]) / 2)
                for i in range(0, len(self.points) - 1, 2)
            ]
            self._stride *= 2

    def merge(self, later: Series) -> None:
        """Append the values of a series that followed this one: an approximation.

        ``later`` no longer holds its values, only its points (means of ``later``'s own
        stride of values). Each point is added back as that many copies of its mean,
        then its unfinished values one by one. The result has the stride and number of
        points that adding every value would give, and each point is the mean of as
        many values; but a point may straddle one of ``later``'s points, so its x (that
        of its first value) and its mean can differ slightly from adding the values.
        """
        for x, y in later.points:
            self._add_copies(x, y, later._stride)
        for x, y in later._acc:
            self.add(x, y)

    def _add_copies(self, x: Any, y: float, n: int) -> None:
        while n:
            take = min(n, self._stride - len(self._acc))
            self._acc.extend([(x, y)] * take)
            n -= take
            if len(self._acc) >= self._stride:
                self._close_point()

    def to_list(self) -> list[list[Any]]:
        pts = list(self.points)
        if self._acc:
            pts.append((self._acc[0][0], sum(map(_Y, self._acc)) / len(self._acc)))
        return [[x, round(y, 3)] for x, y in pts]
