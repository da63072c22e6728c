"""Bounded-memory statistics for series that grow with the log (throughput, usage).

A week-long serving log has millions of decode records; the run model must not keep
them. :class:`Sketch` keeps a log-bucketed histogram (1% relative error, like
DDSketch) for quantiles; :class:`Series` keeps a time series downsampled to a fixed
number of points by averaging neighbours.
"""

from __future__ import annotations

import math
from typing import Any

_GAMMA = 1.02  # bucket ratio: quantiles within 1% of the true value
_INV_LOG_GAMMA = 1.0 / math.log(_GAMMA)
_log = math.log


class Sketch:
    """Count, min, max, mean and approximate quantiles of non-negative values."""

    __slots__ = ("count", "total", "min", "max", "zeros", "buckets")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.min = math.inf
        self.max = -math.inf
        self.zeros = 0
        self.buckets: dict[int, int] = {}

    def add(self, x: float) -> None:
        self.count += 1
        self.total += x
        if x < self.min:
            self.min = x
        if x > self.max:
            self.max = x
        if x <= 0:
            self.zeros += 1
        else:
            k = int(_log(x) * _INV_LOG_GAMMA)
            self.buckets[k] = self.buckets.get(k, 0) + 1

    def merge(self, other: "Sketch") -> None:
        self.count += other.count
        self.total += other.total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.zeros += other.zeros
        for k, n in other.buckets.items():
            self.buckets[k] = self.buckets.get(k, 0) + n

    def quantile(self, q: float) -> float | None:
        if not self.count:
            return None
        rank = q * (self.count - 1)
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
    """A time series of (x, y) points kept to at most ``limit`` points."""

    __slots__ = ("limit", "points", "_stride", "_acc")

    def __init__(self, limit: int = 1000) -> None:
        self.limit = limit
        self.points: list[tuple[Any, float]] = []
        self._stride = 1
        self._acc: list[tuple[Any, float]] = []

    def add(self, x: Any, y: float) -> None:
        self._acc.append((x, y))
        if len(self._acc) >= self._stride:
            self.points.append((self._acc[0][0], sum(v for _, v in self._acc) / len(self._acc)))
            self._acc = []
            if len(self.points) >= self.limit:
                self.points = [
                    (self.points[i][0], (self.points[i][1] + self.points[i + 1][1]) / 2)
                    for i in range(0, len(self.points) - 1, 2)
                ]
                self._stride *= 2

    def to_list(self) -> list[list[Any]]:
        pts = list(self.points)
        if self._acc:
            pts.append((self._acc[0][0], sum(v for _, v in self._acc) / len(self._acc)))
        return [[x, round(y, 3)] for x, y in pts]
