"""A serving window's sum does not depend on how its values were grouped.

The parallel reader (``ingest/parallel.py``) reads byte ranges apart and merges their windows;
one pass adds value after value, widening its windows when they fill. With float sums the
two groupings round differently, so the windows' sums are fixed point (``model/windows.py``
``fixed``): checked here, and the array parts a sum is kept in against Python's own.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logforensics.model import windows as windows_mod
from logforensics.model.windows import Windows, as_float, fixed

_TWINS: list[Any] = [Windows]

_VALUE = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(0, 10**6).map(float),
                   st.decimals(0, 10**5, places=2).map(float))
_ROW = st.tuples(st.integers(0, 40).map(float), _VALUE)


@settings(max_examples=300, deadline=None)
@given(st.lists(_ROW, max_size=120), st.integers(0, 120), st.sampled_from([1, 2, 4]), st.integers(2, 6))
def test_a_sum_does_not_depend_on_the_grouping(rows: list[tuple[float, float]], cut: int, width: int,
                                               most: int) -> None:
    """One pass against two parts merged, the first part's windows narrower or wider than
    the second's (as when one range has widened and the next has not): the same cells."""
    monkey = windows_mod.MAX_WINDOWS
    windows_mod.MAX_WINDOWS = most
    try:
        for make in _TWINS:
            whole = make(1)
            first, later = make(1), make(width)
            for i, (sec, v) in enumerate(rows):
                whole.add(sec, v, i)
                (first if i < cut else later).add(sec, v, i)
            first.merge(later)
            whole.coarsen(first.width)
            first.coarsen(whole.width)
            assert whole.items() == first.items()
    finally:
        windows_mod.MAX_WINDOWS = monkey


@settings(max_examples=500, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_value_on_the_grid(v: float) -> None:
    """Rounded to the nearest 2**-64, half to even, capped at 2**62: what a window sums."""
    s = fixed(v)
    if v != v:
        assert s == 0
    else:
        clipped = min(max(v, -(2.0**62)), 2.0**62)
        assert abs(s - clipped * 2.0**64) <= 0.5
        assert as_float(s) == clipped or abs(clipped) < 2.0**-11  # exact unless finer than the grid
    w = Windows(1)
    w.add(0.0, v, 1)
    assert w.items()[0][1][1] == s


@pytest.mark.parametrize("v", [2.0**-65, 3 * 2.0**-65, 5 * 2.0**-65, -3 * 2.0**-65, 2.0**-66, 2.0**-64 + 2.0**-117,
                               2.0**-54 * 3, 0.5, 1.0 + 2.0**-52, 2.0**62, -(2.0**62), 2.0**62 * 1.5, 5e-324, -0.0,
                               2.0**-11, 2.0**-12 * 3, 1e-20, 123456.789])
def test_the_grid_at_its_edges(v: float) -> None:
    """Halves of a step (to even), values below half a step, subnormals, the cap: the sum
    kept in four array parts is ``fixed`` of the value, and of its negative."""
    w = Windows(1)
    w.add(0.0, v, 1)
    w.add(0.0, -v, 2)
    w.add(1.0, -v, 3)
    items = w.items()
    assert items[0][1][1] == 0 and items[1][1][1] == fixed(-v) == -fixed(v)


_EDGES = st.sampled_from([2.0**-65, 3 * 2.0**-65, -3 * 2.0**-65, 2.0**-64 + 2.0**-117, 1.0 + 2.0**-52, -(2.0**-23),
                          2.0**31 - 0.5, -(2.0**31) + 2.0**-21, 2.0**31, 5e-324, -0.0, 0.1, -57.03])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.one_of(_VALUE, _EDGES, _VALUE.map(lambda v: -v)), min_size=1, max_size=40),
                min_size=1, max_size=4).filter(lambda rows: len({len(r) for r in rows}) == 1),
       st.sets(st.integers(1, 39)))
def test_cells_sum_each_value_on_the_grid(rows: list[list[float]], cuts: set[int]) -> None:
    """The windows' sums of a batch by cell (``_cell_parts``, a few passes where values are
    small, the general way elsewhere) are the sums of ``fixed`` of each value."""
    import numpy as np

    n = len(rows[0])
    starts = np.array([0, *sorted(c for c in cuts if c < n)], np.int64)
    parts = windows_mod._cell_parts(np.array(rows, np.float64), starts)
    bounds = [*starts.tolist(), n]
    for r, values in enumerate(rows):
        for c in range(len(starts)):
            p = [int(parts[k, r, c]) for k in range(4)]
            got = (p[0] << 96) + (p[1] << 64) + (p[2] << 32) + p[3]
            assert got == sum(fixed(v) for v in values[bounds[c]:bounds[c + 1]])
