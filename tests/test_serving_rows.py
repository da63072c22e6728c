"""The serving time series from rows equals the one from events, piece by piece.

The bulk reader hands decode and prefill records to the serving observer as rows
(``read/bulk.py`` ``Rows``): the stamp already read as seconds in C, the figures as
doubles, folded into the per-window aggregates (``model/windows.py``: numpy arrays) a
batch at a time. Each piece is checked here against the definition it stands for: the
stamp reading against ``serving.seconds`` (which reads naive stamps as UTC on every
machine), the windows against a plain one-value-at-a-time reference through adding,
adding rows, widening, merging and pickling, and the rows' targets against adding their
values one by one. ``test_bulk.py`` compares whole summaries.
"""

from __future__ import annotations

import calendar
import copy
import json
import math
import os
import pickle
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logforensics import native
from logforensics.model import changepoints, serving_rows
from logforensics.model import windows as windows_mod
from logforensics.model.clock import iso, seconds
from logforensics.model.windows import Windows, fixed

ROOT = Path(__file__).resolve().parent.parent
_scan = native.lib
compiled = pytest.mark.skipif(native.lib is None, reason="the accelerator is not built here")


def test_naive_stamps_are_read_as_utc_whatever_the_machine_zone() -> None:
    """A log's clock is its own: the machine's DST must not move its series."""
    for ts in ("2026-03-08 02:30:00", "2026-11-01T01:30:00", "2026-06-01T12:00:00.250"):
        day = datetime.fromisoformat(ts)
        want = calendar.timegm(day.timetuple()) + day.microsecond / 1e6
        assert seconds(ts) == want
        assert iso(want, True) == ts.replace(" ", "T")[:19]
    assert seconds("2026-03-08T02:30:00+01:00") == seconds("2026-03-08T01:30:00")
    assert seconds("08:42:44.5") == 8 * 3600 + 42 * 60 + 44.5
    assert seconds("2026-02-30 00:00:00") is None


_DATES = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59))


def _as_stamp(day: datetime, sep: str, digits: int) -> str:
    text = day.strftime(f"%Y-%m-%d{sep}%H:%M:%S").rjust(19, "0")
    if len(text) != 19:  # strftime pads years below 1000 differently on some C libraries
        text = f"{day.year:04d}-{day.month:02d}-{day.day:02d}{sep}{day.hour:02d}:{day.minute:02d}:{day.second:02d}"
    return text + ("." + f"{day.microsecond:06d}"[:digits] if digits else "")


@compiled
@settings(max_examples=400, deadline=None)
@given(_DATES, st.sampled_from([" ", "T"]), st.sampled_from([0, 3, 6]))
def test_c_reads_iso_stamps_as_seconds_does(day: datetime, sep: str, digits: int) -> None:
    assert _scan is not None
    ts = _as_stamp(day, sep, digits)
    got = _scan.stamp_seconds(ts.encode())
    if got is None:  # left to the exact path only where a double cannot hold the microseconds
        assert abs(seconds(ts) or 0) * 1e6 >= 2**53, ts
    else:
        assert got == (seconds(ts), True), ts


@compiled
@settings(max_examples=200, deadline=None)
@given(_DATES, st.sampled_from([3, 6]))
def test_c_reads_python_logging_s_comma_stamps_as_seconds_does(day: datetime, digits: int) -> None:
    """Python logging's ``%(asctime)s`` puts its milliseconds after a comma: read as after a point."""
    assert _scan is not None
    ts = _as_stamp(day, " ", digits)
    comma = ts[:19] + "," + ts[20:]
    assert seconds(comma) == seconds(ts)
    got = _scan.stamp_seconds(comma.encode())
    assert got is None and abs(seconds(ts) or 0) * 1e6 >= 2**53 or got == (seconds(ts), True), comma


@compiled
@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="0123456789-:.,TZ+ ", min_size=6, max_size=28))
def test_c_reads_no_stamp_that_seconds_reads_otherwise(text: str) -> None:
    """Digit soup in the shapes of stamps: where C reads seconds, they are Python's; where
    Python reads none (an invalid date), C reads none and leaves the line to the exact path."""
    assert _scan is not None
    got = _scan.stamp_seconds(text.encode())
    want = seconds(text)
    if got is not None:
        assert want is not None and got == (want, text[4:5] == "-"), text
    if want is None:
        assert got is None, text


@compiled
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 99), st.integers(0, 99), st.integers(0, 99), st.integers(0, 6), st.integers(0, 999999))
def test_c_reads_time_only_stamps_as_seconds_does(h: int, m: int, s: int, digits: int, us: int) -> None:
    assert _scan is not None
    ts = f"{h:02d}:{m:02d}:{s:02d}" + ("." + f"{us:06d}"[:digits] if digits else "")
    got = _scan.stamp_seconds(ts.encode())
    if digits != 0 or got is not None:  # a bare "." is left to the exact path
        assert got == (seconds(ts), False), ts


def _wrap(s: int) -> int:
    return (s + (1 << 127)) % (1 << 128) - (1 << 127)


class _Reference:
    """The windows' semantics in the plainest Python, one value at a time: cells by window,
    each [count, fixed-point sum, first line, first second, text, arrival of its first
    record], folded while there are more than ``MAX_WINDOWS``; read out in the order of
    their first lines (then of arrival). What ``Windows`` must give, however its values
    came in (one by one, as rows, in parts merged)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.cells: dict[int, list[Any]] = {}
        self.arrived = 0

    def add(self, sec: float, value: float, line: int, text: str | None = None) -> None:
        self.arrived += 1
        self._fold(int(sec // self.width), [1, fixed(value), line, sec, text, self.arrived])
        while len(self.cells) > windows_mod.MAX_WINDOWS:
            self.coarsen(self.width * 2)

    def _fold(self, key: int, c: list[Any]) -> None:
        d = self.cells.get(key)
        if d is None:
            self.cells[key] = list(c)
            return
        d[0] += c[0]
        d[1] += c[1]
        d[3] = min(d[3], c[3])
        if (c[2], c[5]) < (d[2], d[5]):
            d[2], d[4], d[5] = c[2], c[4], c[5]

    def ordered(self) -> list[tuple[int, list[Any]]]:
        return sorted(self.cells.items(), key=lambda kc: (kc[1][2], kc[1][5]))

    def coarsen(self, width: int) -> None:
        if width > self.width:
            cells, self.cells = self.ordered(), {}
            for key, c in cells:
                self._fold(key // (width // self.width), c)
            self.width = width

    def merge(self, later: _Reference) -> None:
        width = max(self.width, later.width)
        self.coarsen(width)
        for key, c in later.ordered():
            self._fold(key // (width // later.width), [*c[:5], c[5] + self.arrived])
        self.arrived += later.arrived
        while len(self.cells) > windows_mod.MAX_WINDOWS:
            self.coarsen(self.width * 2)

    def items(self) -> list[tuple[int, list[Any]]]:
        return [(k, [c[0], _wrap(c[1]), c[2], c[3], c[4]]) for k, c in self.ordered()]


def _same(got: Windows, want: _Reference) -> None:
    assert got.width == want.width
    assert got.items() == want.items()
    for (_, c), (_, d) in zip(got.items(), want.items()):
        assert [type(x) for x in c] == [type(x) for x in d]
    assert got.keys() == [k for k, _ in want.items()] and len(got) == len(want.cells)
    assert got.texts() == [(c[2], c[4]) for _, c in want.items() if c[4] is not None]
    assert got.first_line() == min((c[2] for c in want.cells.values()), default=None)


_VALUE = st.one_of(st.floats(-1e3, 1e3, allow_nan=False), st.integers(0, 10**6).map(float), st.just(math.nan),
                   st.just(math.inf), st.floats(0, 1).map(lambda v: round(v, 2)))
_ADD = st.tuples(st.floats(-50.0, 400.0, allow_nan=False), _VALUE, st.integers(0, 500),
                 st.one_of(st.none(), st.text(max_size=5)))
_OP = st.one_of(
    st.tuples(st.just("add"), _ADD),
    st.tuples(st.just("rows"), st.lists(_ADD, max_size=40), st.booleans()),
    st.tuples(st.just("coarsen"), st.sampled_from([1, 2, 4, 8, 16, 32])),
    st.tuples(st.just("merge"), st.lists(_ADD, max_size=30), st.sampled_from([1, 2, 4, 8])),
    st.tuples(st.just("copy"), st.booleans()),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_OP, max_size=40), st.integers(2, 9), st.sampled_from([1, 2, 3]))
def test_windows_are_what_adding_one_by_one_gives(ops: list[tuple[Any, ...]], most: int, width: int) -> None:
    """Values one by one (held, then grouped at once), rows at once, widening, merging a later
    part, pickling and copying: the cells of the plain one-by-one reference, in the same order,
    with the same sums, first lines, seconds and texts (stamps and lines in any order)."""
    monkey = windows_mod.MAX_WINDOWS
    windows_mod.MAX_WINDOWS = most
    try:
        got, want = Windows(width), _Reference(width)
        for op in ops:
            if op[0] == "add":
                got.add(*op[1])
                want.add(*op[1])
            elif op[0] == "rows":
                rows = [r for r in op[1] if r[1] == r[1]]  # rows have a value
                got.add_rows(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
                             np.array([r[2] for r in rows], np.int64), _texts([r[3] for r in rows]) if op[2] else None)
                for r in rows:
                    want.add(*r[:3], r[3] if op[2] else None)
            elif op[0] == "coarsen":
                assert got.coarsened(op[1]).items() == _coarsened(want, op[1]).items()
                got.coarsen(op[1])
                want.coarsen(op[1])
            elif op[0] == "merge":
                other, ref = Windows(op[2]), _Reference(op[2])
                for args in op[1]:
                    other.add(*args)
                    ref.add(*args)
                _same(other, ref)
                got.merge(other)
                want.merge(ref)
            else:
                got = pickle.loads(pickle.dumps(got)) if op[1] else copy.deepcopy(got)
            _same(got, want)
    finally:
        windows_mod.MAX_WINDOWS = monkey


def _texts(texts: list[str | None]) -> Any:
    return lambda picked: [texts[i] for i in picked.tolist()]


def _coarsened(ref: _Reference, width: int) -> _Reference:
    out = copy.deepcopy(ref)
    out.coarsen(width)
    return out


_ALIKE_OP = st.one_of(
    st.tuples(st.just("add"), st.floats(-50.0, 400.0, allow_nan=False), st.integers(0, 500),
              st.lists(_VALUE, min_size=3, max_size=3)),
    st.tuples(st.just("rows"), st.lists(st.tuples(st.floats(-50.0, 400.0, allow_nan=False), st.integers(0, 500),
                                                  st.lists(_VALUE.filter(lambda v: v == v), min_size=3, max_size=3)),
                                        max_size=40)),
    st.tuples(st.just("read"), st.integers(0, 2)),
    st.tuples(st.just("one"), st.integers(0, 2), st.floats(-50.0, 400.0, allow_nan=False), st.integers(0, 500), _VALUE),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_ALIKE_OP, max_size=30), st.integers(2, 9))
def test_windows_alike_take_rows_together_as_one_by_one(ops: list[tuple[Any, ...]], most: int) -> None:
    """A rank's figures of the same records (three windows, values added one by one to all,
    rows added to all at once, one of them read now and then, which folds its held values in
    alone, a value added to one alone): each window is what adding its values one by one gives."""
    monkey = windows_mod.MAX_WINDOWS
    windows_mod.MAX_WINDOWS = most
    try:
        got = [Windows(1) for _ in range(3)]
        want = [_Reference(1) for _ in range(3)]
        for op in ops:
            if op[0] == "add":
                for k in range(3):
                    got[k].add(op[1], op[3][k], op[2], f"t{op[2]}" if k == 0 else None)
                    want[k].add(op[1], op[3][k], op[2], f"t{op[2]}" if k == 0 else None)
            elif op[0] == "rows":
                rows = op[1]
                windows_mod.add_rows_alike(got, np.array([r[0] for r in rows], np.float64),
                                           [np.array([r[2][k] for r in rows], np.float64) for k in range(3)],
                                           np.array([r[1] for r in rows], np.int64),
                                           [_texts([f"t{r[1]}" for r in rows]), None, None])
                for r in rows:
                    for k in range(3):
                        want[k].add(r[0], r[2][k], r[1], f"t{r[1]}" if k == 0 else None)
            elif op[0] == "one":  # one window only (a record another figure lacks): counts apart, cells alike
                got[op[1]].add(op[2], op[4], op[3])
                want[op[1]].add(op[2], op[4], op[3])
            else:
                _same(got[op[1]], want[op[1]])
        for g, w in zip(got, want):
            _same(g, w)
    finally:
        windows_mod.MAX_WINDOWS = monkey


def test_windows_alike_in_their_cells_keep_their_own_counts() -> None:
    """Windows with the same cells whose counts differ (one took a record the others lacked,
    in a cell they all have) take rows in a log's order together: each keeps its own counts
    and first seconds, the appended rows' cells the same for all."""
    got = [Windows(1) for _ in range(3)]
    want = [_Reference(1) for _ in range(3)]

    def rows(secs: list[float], lines: list[int], values: list[float]) -> None:
        windows_mod.add_rows_alike(got, np.array(secs), [np.array(values) for _ in got], np.array(lines, np.int64),
                                   [None, None, None])
        for w in want:
            for sec, line, v in zip(secs, lines, values):
                w.add(sec, v, line, None)

    rows([0.0, 0.0, 1.5], [1, 2, 3], [1.0, 2.0, 3.0])
    got[1].add(1.2, 7.0, 4)  # the second cell's, not its first record: the cells stay alike
    want[1].add(1.2, 7.0, 4, None)
    _same(got[1], want[1])
    rows([1.0, 2.0], [5, 6], [4.0, 5.0])  # the first goes on the last cell
    for g, w in zip(got, want):
        _same(g, w)


_FIELD = st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False), st.integers(-1000, 10**6).map(float))
_ROW = st.tuples(st.floats(1.5e9, 1.5e9 + 5000, allow_nan=False), _FIELD, _FIELD, st.integers(0, 2),
                 st.integers(1, 2))


@settings(max_examples=300, deadline=None)
@given(st.lists(_ROW, max_size=200), st.integers(2, 12), st.booleans(), st.booleans())
def test_targets_take_their_rows_as_adding_one_by_one(rows: list[tuple[float, float | None, float | None, int, int]],
                                                      most: int, fallback: bool, require: bool) -> None:
    """Rows of every class and rank in one set of columns: each target takes the rows of its
    class and rank (the others skipped), the first of its value columns a row has, rows
    without the required column skipped, the line's text cut to the kept length."""
    n = len(rows)
    nan = math.nan
    val = np.array([[nan if a is None else a for _, a, _, _, _ in rows], [nan if b is None else b for _, _, b, _, _ in rows]],
                   np.float64).reshape(2, n)
    buf = b"".join(f"{i:09d}\n".encode() for i in range(n))
    targets = [(Windows(1), (c, r), (0, 1) if fallback else (0,), 1 if require else -1, 5)
               for c in (1, 2) for r in (0, 1, 2)]
    monkey = windows_mod.MAX_WINDOWS
    windows_mod.MAX_WINDOWS = most
    try:
        serving_rows._add_targets(targets, 40 + np.arange(n, dtype=np.int64), np.array([r[3] for r in rows], np.uint8),
                                  np.array([r[4] for r in rows], np.uint8), np.array([r[0] for r in rows], np.float64),
                                  10 * np.arange(n, dtype=np.int64), 10 * np.arange(n, dtype=np.int64) + 9, val, buf)
        for w, (c, r), *_ in targets:
            want = _Reference(1)
            for i, (sec, a, b, rid, cls) in enumerate(rows):
                value = a if a is not None else (b if fallback else None)
                if cls != c or rid != r or value is None or (require and b is None):
                    continue
                want.add(sec, float(value), 40 + i, f"{i:09d}"[:5])
            _same(w, want)
    finally:
        windows_mod.MAX_WINDOWS = monkey


def _best_split_loop(values: list[float], a: int, b: int) -> tuple[int | None, float]:
    """The segmentation's scan as its definition reads: one split at a time."""
    n = b - a
    prefix, sq = [0.0], [0.0]
    for x in values[a:b]:
        prefix.append(prefix[-1] + x)
        sq.append(sq[-1] + x * x)
    best: int | None = None
    best_t = 0.0
    for k in range(changepoints._MIN_SEGMENT, n - changepoints._MIN_SEGMENT + 1):
        n1, n2 = k, n - k
        m1, m2 = prefix[k] / n1, (prefix[n] - prefix[k]) / n2
        v1 = max(sq[k] / n1 - m1 * m1, 0.0)
        v2 = max((sq[n] - sq[k]) / n2 - m2 * m2, 0.0)
        top = max(abs(m1), abs(m2))
        floor = (top * 0.02) ** 2 + 1e-12
        se = math.sqrt(max(v1, floor) / n1 + max(v2, floor) / n2)
        t = abs(m1 - m2) / se
        if top and abs(m1 - m2) / top >= changepoints._MIN_REL_CHANGE and t > best_t:
            best, best_t = k, t
    return best, best_t


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(-1e6, 1e6), st.floats(0, 10), st.just(0.0), st.just(-0.0)), max_size=80), st.data())
def test_the_segmentation_scan_is_its_definition(values: list[float], data: st.DataObject) -> None:
    """The scan, run a column of splits at a time, picks the split (the first of equal t) and
    the t that the loop over splits does, bit for bit."""
    a = data.draw(st.integers(0, len(values)))
    b = data.draw(st.integers(a, len(values)))
    assert changepoints._best_split(values, a, b) == _best_split_loop(values, a, b)


def _summary(path: Path, tz: str, pure: bool) -> dict[str, Any]:
    env = {**os.environ, "TZ": tz, "LOGFORENSICS_PURE": "1" if pure else "0"}
    out = subprocess.run([sys.executable, "-m", "logforensics", "summary", "--json", str(path)], env=env,
                         capture_output=True, text=True, check=True, timeout=300)
    return json.loads(out.stdout)


def test_series_do_not_move_with_the_machine_time_zone(tmp_path: Path) -> None:
    """A log across a US DST change, summarised in a zone with that change and in UTC, on
    both reading paths: one summary."""
    path = tmp_path / "dst.log"
    start = datetime(2026, 3, 8, 1, 40)
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_serving_log.py"), "--size", "1M", "--start",
                    start.isoformat(sep=" "), "-o", str(path)], check=True, timeout=120)
    want = _summary(path, "UTC", pure=True)
    series = want["serving"]["series"]["gen_tok_s"]
    assert series[0][0] < (start + timedelta(minutes=20)).isoformat() < series[-1][0]  # across 02:00
    for pure in (True, False):
        assert _summary(path, "EST5EDT,M3.2.0,M11.1.0", pure) == want
