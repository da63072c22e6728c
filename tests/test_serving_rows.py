"""The serving time series from rows equals the one from events, piece by piece.

The bulk reader hands decode and prefill records to the serving observer as rows
(``read/bulk.py`` ``Rows``): the stamp already read as seconds in C, the figures as
doubles, folded into the per-window aggregates by ``_scan.window_add``. Each piece is
checked here against the Python it replaces: the stamp reading against
``serving.seconds`` (which reads naive stamps as UTC on every machine), ``window_add``
against ``_Windows.add`` one value at a time (windows widened on the way), and
``window_fold`` against ``_fold``. ``test_bulk.py`` compares whole summaries.
"""

from __future__ import annotations

import calendar
import json
import math
import os
import struct
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logforensics.model import serving
from logforensics.model.clock import iso, seconds
from logforensics.model.serving import _fold, _Windows
from logforensics.read import bulk

ROOT = Path(__file__).resolve().parent.parent
_scan = bulk._scan
compiled = pytest.mark.skipif(_scan is None, reason="the C scanner is not built here")


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
@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="0123456789-:. TZ+", min_size=6, max_size=28))
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


def _rows(values: list[tuple[float, float | None, float | None, int, int]]) -> tuple[Any, ...]:
    """Rows as the scanner returns them: (sec, value, other value, rank id, class) each, two
    slots (values slot after slot)."""
    n = len(values)
    nan = math.nan
    vals = [nan if a is None else a for _, a, _, _, _ in values] + [nan if b is None else b for _, _, b, _, _ in values]
    return (n, 2, struct.pack(f"{n}q", *range(n)), bytes(r for *_, r, _ in values), bytes(c for *_, c in values),
            bytes(n), struct.pack(f"{n}i", *([0] * n)), struct.pack(f"{n}d", *(s for s, *_ in values)),
            struct.pack(f"{n}q", *(10 * i for i in range(n))), struct.pack(f"{n}q", *(10 * i + 9 for i in range(n))),
            struct.pack(f"{2 * n}d", *vals))


_VALUES = st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False), st.integers(-1000, 10**6).map(float))
_ROW = st.tuples(st.floats(1.5e9, 1.5e9 + 5000, allow_nan=False), _VALUES, _VALUES, st.integers(0, 2),
                 st.integers(1, 2))


@compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(_ROW, max_size=200), st.integers(1, 3), st.integers(2, 12), st.booleans(), st.booleans(),
       st.sampled_from([1, 3, 4]))
def test_window_add_equals_adding_one_by_one(rows: list[tuple[float, float | None, float | None, int, int]],
                                             rid: int, most: int, fallback: bool, require: bool, width: int) -> None:
    """Rows of one class and rank (the others skipped), the first present of the value
    columns, rows without the required column skipped; windows widened when more than
    ``most``: the cells, sums and texts of ``_Windows.add``, value by value."""
    assert _scan is not None
    raw = _rows(rows)
    buf = b"".join(f"{i:09d}\n".encode() for i in range(len(rows)))
    want = _Windows(width)
    got = _Windows(width)
    monkey = serving._MAX_WINDOWS
    serving._MAX_WINDOWS = most
    try:
        first_line = 40
        for i, (sec, a, b, r, c) in enumerate(rows):
            value = a if a is not None else (b if fallback else None)
            if c != 1 or r != rid or value is None or (require and b is None):
                continue
            want.add(sec, float(value), first_line + i, f"{i:09d}"[:5])
        index = _scan.group_rows(raw).get((1, rid), b"")
        start = 0
        while start < len(index) // 4:
            start, widen = _scan.window_add(got.cells, got.width, most, raw, index, (0, 1) if fallback else (0,),
                                            1 if require else -1, 5, buf, first_line, start)
            if widen:
                got.coarsen(got.width * 2)
        whole = _Windows(width)  # one call for the segment: widening in C
        _scan.windows_add([(whole, index, (0, 1) if fallback else (0,), 1 if require else -1, 5)], most, raw, buf,
                          first_line)
    finally:
        serving._MAX_WINDOWS = monkey
    assert (whole.width, list(whole.cells.items())) == (want.width, list(want.cells.items()))
    assert got.width == want.width
    assert list(got.cells.items()) == list(want.cells.items())
    for c, d in zip(got.cells.values(), want.cells.values()):
        assert [type(x) for x in c] == [type(x) for x in d]


_CELL = st.tuples(st.integers(1, 50), st.floats(-1e6, 1e6), st.floats(-1e3, 1e3), st.floats(-1e3, 1e3),
                  st.integers(1, 10**6), st.integers(1, 10**6), st.floats(1e9, 2e9), st.one_of(st.none(), st.text()))


@compiled
@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.integers(-50, 10**6), _CELL, max_size=100), st.integers(1, 9))
def test_window_fold_equals_fold(cells: dict[int, tuple[Any, ...]], factor: int) -> None:
    assert _scan is not None
    cells_l = {k: list(c) for k, c in cells.items()}
    want: dict[int, list[Any]] = {}
    for key, c in cells_l.items():
        _fold(want, key // factor, c)
    before = {k: list(c) for k, c in cells_l.items()}
    got = _scan.window_fold(cells_l, factor)
    assert list(got.items()) == list(want.items())
    assert cells_l == before  # copies: the cells stay as they were
    reused = _scan.window_fold({k: list(c) for k, c in before.items()}, factor, True)
    assert list(reused.items()) == list(want.items())


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
