"""The serving time series from rows equals the one from events, piece by piece.

The bulk reader hands decode and prefill records to the serving observer as rows
(``read/bulk.py`` ``Rows``): the stamp already read as seconds in C, the figures as
doubles, folded into the per-window aggregates (``native/windows.c``: parallel arrays) by
``_windows.windows_add``. Each piece is checked here against the Python it replaces: the
stamp reading against ``serving.seconds`` (which reads naive stamps as UTC on every
machine), ``windows_add`` against the pure twin's ``add`` one value at a time (windows
widened on the way), the compiled windows against the pure twin through adding, widening,
merging and pickling, and the summary's loops reading either type alike.
``test_bulk.py`` compares whole summaries.
"""

from __future__ import annotations

import calendar
import copy
import json
import math
import os
import pickle
import struct
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logforensics import native
from logforensics.model import changepoints, serving
from logforensics.model import windows as windows_mod
from logforensics.model.clock import iso, seconds
from logforensics.model.windows import _PyWindows

ROOT = Path(__file__).resolve().parent.parent
_scan = _windows = native.lib
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


def _numbers(values: list[tuple[float, float | None, float | None, int, int]], cls: int, rid: int) -> bytes:
    """The row numbers (int32) of the rows of a class and rank id, in row order."""
    found = [i for i, row in enumerate(values) if row[3:] == (rid, cls)]
    return struct.pack(f"{len(found)}i", *found)


_VALUES = st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False), st.integers(-1000, 10**6).map(float))
_ROW = st.tuples(st.floats(1.5e9, 1.5e9 + 5000, allow_nan=False), _VALUES, _VALUES, st.integers(0, 2),
                 st.integers(1, 2))


def _same(got: Any, want: _PyWindows) -> None:
    """Compiled windows equal to the pure twin's: width, cells in order, their types."""
    assert got.width == want.width
    assert got.items() == want.items()
    for (_, c), (_, d) in zip(got.items(), want.items()):
        assert [type(x) for x in c] == [type(x) for x in d]
    assert got.keys() == want.keys() and len(got) == len(want)
    assert got.texts() == want.texts() and got.first_line() == want.first_line()


@compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(_ROW, max_size=200), st.integers(1, 3), st.integers(2, 12), st.booleans(), st.booleans(),
       st.sampled_from([1, 3, 4]))
def test_windows_add_equals_adding_one_by_one(rows: list[tuple[float, float | None, float | None, int, int]],
                                              rid: int, most: int, fallback: bool, require: bool, width: int) -> None:
    """Rows of one class and rank (the others skipped), the first present of the value
    columns, rows without the required column skipped; windows widened when more than
    ``most``: the cells, sums and texts of ``_PyWindows.add``, value by value."""
    assert _scan is not None and _windows is not None
    raw = _rows(rows)
    buf = b"".join(f"{i:09d}\n".encode() for i in range(len(rows)))
    want = _PyWindows(width)
    monkey = windows_mod.MAX_WINDOWS
    windows_mod.MAX_WINDOWS = most
    try:
        first_line = 40
        for i, (sec, a, b, r, c) in enumerate(rows):
            value = a if a is not None else (b if fallback else None)
            if c != 1 or r != rid or value is None or (require and b is None):
                continue
            want.add(sec, float(value), first_line + i, f"{i:09d}"[:5])
    finally:
        windows_mod.MAX_WINDOWS = monkey
    index = _numbers(rows, 1, rid)
    got = _windows.Windows(width, most)
    half = len(index) // 8 * 4  # two segments: the second goes on where the first stopped
    for part, base in ((index[:half], raw), (index[half:], raw)):
        _windows.windows_add([(got, part, (0, 1) if fallback else (0,), 1 if require else -1, 5)], base, buf,
                             first_line)
    _same(got, want)
    # the rows named by (class, rank id) instead, found by windows_add: the same windows
    found = _windows.Windows(width, most)
    _windows.windows_add([(found, (1, rid), (0, 1) if fallback else (0,), 1 if require else -1, 5)], raw, buf,
                         first_line)
    _same(found, want)


@compiled
@settings(max_examples=200, deadline=None)
@given(st.lists(_ROW, max_size=200), st.booleans())
def test_targets_by_class_and_rank_equal_targets_by_row_numbers(rows: list[tuple[float, float | None, float | None,
                                                                                 int, int]], shared: bool) -> None:
    """Targets of every class and rank in one call, their rows named by (class, rank id)
    (one object for a group's targets, or one each): the windows of targets given the row
    numbers of each group."""
    assert _windows is not None
    raw = _rows(rows)
    buf = b"".join(f"{i:09d}\n".encode() for i in range(len(rows)))
    groups = [(c, r) for c in (1, 2) for r in (0, 1, 2)]
    by_numbers, by_group = [], []
    for c, r in groups:
        numbers = _numbers(rows, c, r)
        key = (c, r)
        for cols, require in (((0,), -1), ((1, 0), 0)):
            a, b = _windows.Windows(1, 8), _windows.Windows(1, 8)
            by_numbers.append((a, numbers, cols, require, 5))
            by_group.append((b, key if shared else (c, r), cols, require, 5))
    _windows.windows_add(by_numbers, raw, buf, 7)
    _windows.windows_add(by_group, raw, buf, 7)
    for (a, *_), (b, *_) in zip(by_numbers, by_group):
        assert a.items() == b.items() and a.texts() == b.texts() and a.first_line() == b.first_line()
    # every row with a first value has its group's windows: some cells exactly when there is one
    assert any(len(b) for b, *_ in by_group) == any(row[1] is not None for row in rows)


_OP = st.one_of(
    st.tuples(st.just("add"), st.floats(-50.0, 400.0, allow_nan=False), st.floats(-1e3, 1e3, allow_nan=False),
              st.integers(0, 500), st.one_of(st.none(), st.text(max_size=5))),
    st.tuples(st.just("coarsen"), st.sampled_from([1, 2, 4, 8, 16, 32])),
    st.tuples(st.just("merge"), st.lists(st.tuples(st.floats(-50.0, 400.0, allow_nan=False),
                                                   st.floats(-1e3, 1e3, allow_nan=False), st.integers(0, 500),
                                                   st.one_of(st.none(), st.text(max_size=5))), max_size=30),
              st.sampled_from([1, 2, 4, 8])),
    st.tuples(st.just("copy")),
)


@compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(_OP, max_size=60), st.integers(2, 9), st.sampled_from([1, 2, 3]))
def test_compiled_windows_equal_the_pure_twin(ops: list[tuple[Any, ...]], most: int, width: int) -> None:
    """Adding, widening, merging a later part, pickling and copying: the same cells in the
    same order, every sum the same double (stamps and lines in any order)."""
    assert _windows is not None
    monkey = windows_mod.MAX_WINDOWS
    windows_mod.MAX_WINDOWS = most
    try:
        got, want = _windows.Windows(width, most), _PyWindows(width)
        for op in ops:
            if op[0] == "add":
                got.add(*op[1:])
                want.add(*op[1:])
            elif op[0] == "coarsen":
                assert got.coarsened(op[1]).items() == want.coarsened(op[1]).items()
                got.coarsen(op[1])
                want.coarsen(op[1])
            elif op[0] == "merge":
                other_c, other_p = _windows.Windows(op[2], most), _PyWindows(op[2])
                for args in op[1]:
                    other_c.add(*args)
                    other_p.add(*args)
                _same(other_c, other_p)
                if len(op[1]) % 2:
                    got.merge(other_c)
                    want.merge(other_p)
                else:  # across the two types, as parts read on different paths are
                    got.merge(windows_mod.like(got, other_p))
                    want.merge(windows_mod.like(want, other_c))
            else:
                got = pickle.loads(pickle.dumps(got)) if len(ops) % 2 else copy.deepcopy(got)
            _same(got, want)
    finally:
        windows_mod.MAX_WINDOWS = monkey


_CELLS = st.lists(st.tuples(st.integers(0, 40), st.floats(0, 1e4, allow_nan=False), st.integers(1, 5),
                            st.integers(0, 10**5)), max_size=60)


@compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["gen_tok_s", "token_usage", "prefill_new", "prefill_cached"]), _CELLS),
                max_size=8))
def test_the_summary_loops_read_both_types_of_windows_alike(windows: list[tuple[str, list[tuple[int, float, int, int]]]]) -> None:
    """A figure over ranks and the cache-hit rate, from the same values in compiled and in pure windows."""
    assert _windows is not None
    cells: dict[tuple[str, str], Any] = {}
    pure: dict[tuple[str, str], Any] = {}
    for r, (fig, values) in enumerate(windows):
        c, p = _windows.Windows(1, 10**6), _PyWindows(1)
        for sec, value, times, line in values:
            for _ in range(times):
                c.add(float(sec), value, line)
                p.add(float(sec), value, line)
        cells[(fig, str(r))], pure[(fig, str(r))] = c, p
    obs = serving.ServingObserver
    for fig in ("gen_tok_s", "token_usage"):
        assert obs._combined(fig, cells) == obs._combined(fig, pure)
    assert obs._cache_hit(cells) == obs._cache_hit(pure)


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


_RECORD = st.tuples(st.booleans(), st.integers(0, 2), st.integers(0, 3), st.integers(0, 40),
                    st.sets(st.sampled_from(["running_req", "queue_req", "token_usage"])))


def _observer(records: list[tuple[bool, int, int, int, set[str]]], first: int, most: int,
              prune: int = 0) -> serving.ServingObserver:
    """An observer of decode (True) and prefill records (rank, second step, value, figures the
    decode record also has), numbered from line ``first``, in compiled windows; its texts
    pruned every ``prune`` records (0: never)."""
    assert _windows is not None
    obs = serving.ServingObserver()
    sec = 0
    for i, (decode, rank, step, value, has) in enumerate(records):
        sec += step - 1  # mostly later, sometimes earlier
        line = first + i
        figs = ["gen_tok_s", *sorted(has)] if decode else ["prefill_new", "prefill_cached"]
        for fig in figs:
            w = obs.windows.get((fig, str(rank)))
            if w is None:
                w = obs.windows[(fig, str(rank))] = _windows.Windows(1, most)
            w.add(float(sec), float(value), line, f"text {line}" if fig in serving.TEXT_FIGURES else None)
        if prune and i % prune == 0:
            obs.prune_texts()
    return obs


def _cited(obs: serving.ServingObserver, width: int) -> dict[int, Any]:
    """What a summary at ``width`` looks up: the text of every point of every citing series."""
    cells = {key: w.coarsened(width) for key, w in obs.windows.items()}
    texts = {line: (key[1], text) for key, w in cells.items() for line, text in w.texts()}
    points = [p for fig in ("gen_tok_s", "running_req", "queue_req", "token_usage")
              for p in obs._combined(fig, cells)] + obs._cache_hit(cells)
    return {line: texts.get(line) for _, _, line in points}


@compiled
@settings(max_examples=200, deadline=None)
@given(st.lists(_RECORD, max_size=80), st.lists(_RECORD, max_size=80), st.integers(3, 9), st.integers(1, 20))
def test_pruned_texts_are_never_cited(first: list[Any], later: list[Any], most: int, every: int) -> None:
    """Texts dropped as uncitable (pruned while reading, and again after merging the next part
    of the log) are none that a summary at any width looks up: the same texts cited as with
    every text kept, the same cells."""
    got = _observer(first, 1, most, every)
    got.merge(_observer(later, 1 + len(first), most, every))  # prunes again
    prune = serving.ServingObserver.prune_texts
    serving.ServingObserver.prune_texts = lambda self: None  # type: ignore[method-assign]
    try:
        want = _observer(first, 1, most)
        want.merge(_observer(later, 1 + len(first), most))
    finally:
        serving.ServingObserver.prune_texts = prune  # type: ignore[method-assign]
    assert list(got.windows) == list(want.windows)
    for w, v in zip(got.windows.values(), want.windows.values()):
        assert w.width == v.width and [c[:4] for _, c in w.items()] == [c[:4] for _, c in v.items()]
    widest = max([w.width for w in want.windows.values()] + [1])
    for width in (widest, 2 * widest, 8 * widest):
        assert _cited(got, width) == _cited(want, width)
    assert sum(len(w.texts()) for w in got.windows.values()) <= sum(len(w.texts()) for w in want.windows.values())


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
