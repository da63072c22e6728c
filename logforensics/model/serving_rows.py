"""Decode and prefill records into the serving time series as rows, not one by one.

The bulk reader (``read/bulk.py``) hands the batch records of a run of taken lines over
as rows: line, rank, the stamp already read as seconds (``clock.seconds``' reading) and
the figures as numbers. :func:`add_rows` makes of them what ``ServingObserver.add_decode``
and ``observe`` make of the same records one at a time: the same windows, in the same
order, with the same sums (rows held, then added at once: ``_Plan.flush``,
``windows.add_rows_alike``), the same widening and the same CUDA-graph evidence. ``tests/test_serving_rows.py`` and
``tests/test_bulk.py`` check it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

import numpy as np

from .frozen import counters_key
from .serving import ServingObserver, _evidence
from .windows import Windows, add_rows_alike, new_windows

#: The windows a decode and a prefill record add to, as ``add_decode`` and ``observe`` do, in
#: their order: (figure, fields tried in order, field that must also be there, text kept).
_DECODE_ROWS = (
    ("gen_tok_s", ("gen_throughput_tok_s",), None, True),
    ("running_req", ("running_req",), None, False),
    ("queue_req", ("queue_req",), None, False),
    ("token_usage", ("token_usage", "full_token_usage"), None, False),
    ("retracted_req", ("retracted_req",), None, False),
)
_PREFILL_ROWS = (
    ("prefill_new", ("new_token",), "cached_token", True),
    ("prefill_cached", ("cached_token",), "new_token", False),
    ("prefill_queue_req", ("queue_req",), None, False),
    ("prefill_running_req", ("running_req",), None, False),
    ("prefill_token_usage", ("token_usage", "full_token_usage"), None, False),
)
#: The fields of each record kind that observing reads (the bulk reader keeps them in rows).
ROW_FIELDS = {
    "decode_batch": ("gen_throughput_tok_s", "running_req", "queue_req", "token_usage", "full_token_usage",
                     "retracted_req", "cuda_graph", "token", "full_token"),
    "prefill_batch": ("new_token", "cached_token", "queue_req", "token_usage", "full_token_usage", "running_req"),
}
#: A window's first record keeps this much of its text (as ``add_decode`` and ``observe``).
_TEXT = 400
#: Rows held before they go to the windows at once (``_Plan.flush``): each flush costs some
#: array operations per window whatever its rows, so fewer flushes are faster (at 2**15 rows a
#: log of every rank's batch records read 7% slower); what is held is the columns the windows
#: read and the lines' text, about 300 bytes a row (about 19 MiB).
HOLD_ROWS = 1 << 16


class BatchRows(Protocol):
    """Decode and prefill records as columns (``read.bulk.Rows``): one row each, in log order."""

    n: int
    raw: tuple[Any, ...]
    buf: bytes
    first_line: int

    def first(self, cls: int, col: int, value: float, start: int = 0) -> int: ...

    def counters_repeat(self, cls: int, tok: int, alt: int, run: int,
                        tput: int) -> tuple[int, list[tuple[int, int, Any, int, Any, Any]]]: ...

    def copy_stamp(self) -> Callable[[bytes, int], tuple[str, Any]]: ...

    def dated(self, i: int) -> bool: ...

    def line(self, i: int) -> int: ...

    def rank(self, i: int) -> str | None: ...

    def stamp(self, i: int) -> tuple[str, Any]: ...

    def later(self, i: int) -> Callable[[], tuple[str, Any]]: ...


def add_rows(obs: ServingObserver, rows: BatchRows, groups: Sequence[tuple[str, int, int, str | None]],
             cols: Mapping[str, Mapping[str, int]], file: str | None) -> None:
    """Observe the rows, every one timed, as ``add_decode`` / ``observe`` would one by one.

    ``groups`` lists the (kind, class, rank id, rank) of the rows; ``cols[kind]`` maps the
    kind's fields (``ROW_FIELDS``) to row columns."""
    if not rows.n:
        return
    obs._rev += rows.n
    if obs.dated is None:
        obs.dated = rows.dated(0)
    if obs.file is None:
        obs.file = file
    plan = obs.row_plan
    if plan is None or plan.cols is not cols or plan.windows != len(obs.windows) or not plan.covers(groups):
        if plan is not None:
            plan.flush(obs)  # the rows held go to the windows they were read for
        plan = obs.row_plan = _plan(obs, groups, cols)
    plan.hold(rows)
    if plan.held_rows >= HOLD_ROWS:
        plan.flush(obs)
    graph = cols.get("decode_batch", {}).get("cuda_graph")
    decode = next((cls for kind, cls, _, _ in groups if kind == "decode_batch"), None)
    if graph is not None and decode is not None:
        _graph_rows(obs, rows, decode, graph, file)
    if decode is not None:
        _frozen_rows(obs, rows, groups, cols["decode_batch"], decode, file)
        _fixed_rows(obs, rows, groups, cols["decode_batch"], decode, file)
    last = rows.n - 1
    kind = next(k for k, cls, _, _ in groups if cls == rows.raw[4][last])
    values = memoryview(rows.raw[10]).cast("d")
    queue, running = (values[cols[kind][name] * rows.n + last] for name in ("queue_req", "running_req"))
    text, ts = rows.stamp(last)
    obs.last_batch = (file, rows.line(last), rows.rank(last), ts, text, _number(queue), _number(running))


def _add_targets(targets: Sequence[tuple[Windows, tuple[int, int], tuple[int, ...], int, int]],
                 line: np.ndarray, rid: np.ndarray, cls: np.ndarray, sec: np.ndarray, start: np.ndarray,
                 end: np.ndarray, val: np.ndarray, buf: bytes | bytearray) -> None:
    """Each target (windows, (class, rank id), value columns, required column or -1, text
    kept) takes its rows: the first of its columns a row has (rows with none skipped, and
    rows without the required column), at the row's second and line, with the line's text
    (``buf[start:end]``) cut to the kept length for the cells a row begins."""
    n = len(line)
    group = (cls.astype(np.uint16) << 8) | rid  # a group's rows together, in the order of their lines:
    if not (group[1:] >= group[:-1]).all():  # each target's rows a slice, its values a view
        order = np.argsort(group, kind="stable")
        group, line, sec, start, end, val = group[order], line[order], sec[order], start[order], end[order], val[:, order]
    ids, firsts = np.unique(group, return_index=True)
    bounds = dict(zip(ids.tolist(), zip(firsts.tolist(), [*firsts[1:].tolist(), n])))
    alike: dict[tuple[int, int], list[tuple[Windows, np.ndarray, Any]]] = {}  # a group's targets that take every row
    shared: dict[tuple[tuple[int, int], int], Any] = {}  # their text function, one per group and length kept
    for w, index, cols, require, most in targets:
        span = bounds.get(index[0] << 8 | index[1])
        if span is None:
            continue
        a, b = span
        x = val[cols[0], a:b]
        for c in cols[1:]:
            x = np.where(np.isnan(x), val[c, a:b], x)
        missing = np.isnan(x)
        if require >= 0:
            missing |= np.isnan(val[require, a:b])
        every = not missing.any()
        taken = None if every else a + np.flatnonzero(~missing)
        if taken is not None and not len(taken):
            continue
        text = shared.get((index, most)) if every else None
        if most and text is None:
            def text(picked: np.ndarray, taken: np.ndarray | None = taken, a: int = a, most: int = most) -> list[str]:
                rows = a + picked if taken is None else taken[picked]
                i = start[rows]
                return [buf[p:q].decode("ascii") for p, q in zip(i.tolist(), np.minimum(end[rows], i + most).tolist())]
            if every:
                shared[index, most] = text
        if taken is None:
            alike.setdefault(index, []).append((w, x, text))
        else:
            w.add_rows(sec[taken], x[~missing], line[taken], text)
    for index, group_targets in alike.items():
        a, b = bounds[index[0] << 8 | index[1]]
        add_rows_alike([w for w, _, _ in group_targets], sec[a:b], [x for _, x, _ in group_targets], line[a:b],
                       [t for _, _, t in group_targets])


def _number(v: float) -> float | int | None:
    """A row's figure as the record printed it: None where it printed none (NaN), else whole or not."""
    return None if v != v else int(v) if v.is_integer() else v


def _frozen_rows(obs: ServingObserver, rows: BatchRows, groups: Sequence[tuple[str, int, int, str | None]],
                 cols: Mapping[str, int], cls: int, file: str | None) -> None:
    """``add_decode``'s runs of frozen decode batches from rows: without a row of throughput
    0 every rank's run breaks (no row is read); else the decode rows are stepped one by one."""
    frozen = obs.frozen
    tput, running = cols["gen_throughput_tok_s"], cols["running_req"]
    if rows.first(cls, tput, 0.0) < 0:
        for kind, _, _, rank in groups:
            if kind == "decode_batch":
                frozen.breaks(rank or "-")
        return
    n = rows.n
    val = memoryview(rows.raw[10]).cast("d")
    kinds = rows.raw[4]
    for i in range(n):
        if kinds[i] == cls:
            if val[tput * n + i] == 0 and val[running * n + i] > 0:
                rank = rows.rank(i) or "-"
                frozen.step(rank, True, _row_later(rows, i, rank, file))
            else:
                frozen.breaks(rows.rank(i) or "-")


def _fixed_rows(obs: ServingObserver, rows: BatchRows, groups: Sequence[tuple[str, int, int, str | None]],
                cols: Mapping[str, int], cls: int, file: str | None) -> None:
    """``add_decode``'s runs of decode batches whose figures do not move, from rows. Where no
    row repeats the one of its rank before it (``Rows.counters_repeat``, one pass in C), each rank's rows
    between its first and last start runs of one line, and its last row starts the run the
    next segment may extend: ``FrozenStreaks.ends``, or (where the first row may extend the
    run the rank ended with) the first row, a break and the last row stepped. Else the decode
    rows are stepped one by one."""
    fixed = obs.fixed
    tok, alt, run, tput = cols["token"], cols["full_token"], cols["running_req"], cols["gen_throughput_tok_s"]
    found, spans = rows.counters_repeat(cls, tok, alt, run, tput)
    if found < 0:
        names = {rid: rank for _, c, rid, rank in groups if c == cls}
        ends, stamp, at = fixed.ends, rows.copy_stamp(), rows.first_line
        for rid, first, kfirst, last, klast, copy in spans:
            name = names[rid]
            rank = name or "-"
            if ends(rank, kfirst, klast,
                    None if copy is None else partial(_copy_evidence, stamp, at + copy[0], copy[1], copy[2], name, file)):
                continue
            fixed.step(rank, kfirst, _row_later(rows, first, rank, file))
            if last != first:
                fixed.breaks(rank)
                fixed.step(rank, klast, _row_later(rows, last, rank, file))
        return
    n = rows.n
    val = memoryview(rows.raw[10]).cast("d")
    kinds = rows.raw[4]
    for i in range(n):
        if kinds[i] == cls:
            t, r, g = val[tok * n + i], val[run * n + i], val[tput * n + i]
            if t != t:
                t = val[alt * n + i]
            key = counters_key(None if t != t else t, None if r != r else r, None if g != g else g)
            rank = rows.rank(i) or "-"
            if key is None:
                fixed.breaks(rank)
            else:
                fixed.step(rank, key, _row_later(rows, i, rank, file))


class _Plan:
    """The windows each group of rows goes to (``_add_targets``' targets), kept from one
    segment to the next while the observer's windows stay the same and the segment's groups
    are among the plan's: the targets name their rows by (class, rank id), which
    ``_add_targets`` finds among the rows held (none, for a group they lack). The rows wait
    here (:meth:`hold`) until enough are held, or something reads the windows (:meth:`flush`)."""

    __slots__ = ("groups", "cols", "windows", "targets", "fresh", "keys", "slots", "held", "held_rows", "text")

    def __init__(self, groups: dict[tuple[int, int], tuple[str, int, int, str | None]],
                 cols: Mapping[str, Mapping[str, int]], windows: int,
                 targets: list[tuple[Windows, tuple[int, int], tuple[int, ...], int, int]],
                 fresh: list[tuple[int, tuple[str, str], Windows]], keys: set[tuple[str, str]]) -> None:
        self.groups = groups  # by (class, rank id), in the order first met
        self.cols = cols
        self.windows = windows  # how many the observer had
        #: the value slots the targets read, kept of the rows held (the targets' columns renumbered)
        self.slots = sorted({c for _, _, use, need, _ in targets for c in (*use, need) if c >= 0})
        at = {c: i for i, c in enumerate(self.slots)}
        self.targets = [(w, index, tuple(at[c] for c in use), at.get(need, -1), text)
                        for w, index, use, need, text in targets]
        self.fresh = fresh  # (order, key, windows) not the observer's yet: empty until rows fill them
        self.keys = keys  # the (figure, rank) of the fresh windows
        #: the rows held, not in the windows yet (:meth:`flush`): line, rank id, class, second,
        #: start and end of the line's text in ``text``, and the values of ``slots``; None when none
        self.held: tuple[np.ndarray, ...] | None = None
        self.held_rows = 0
        self.text = bytearray()  # the held rows' lines (the blocks they were read from are read into again)

    def hold(self, rows: BatchRows) -> None:
        """Copy a segment's rows (the columns the targets read, the text of their lines) to
        the rows held, for the next :meth:`flush`."""
        raw, n, at = rows.raw, rows.n, self.held_rows
        if self.held is None or at + n > len(self.held[0]):
            self._room(at + n)
        assert self.held is not None
        line, rid, cls, sec, start, end, val = self.held
        begin, stop = np.frombuffer(raw[8], np.int64), np.frombuffer(raw[9], np.int64)
        a = int(begin[0])  # the rows' lines follow each other in the block
        shift = len(self.text) - a
        self.text += memoryview(rows.buf)[a:int(stop.max())]
        np.add(np.frombuffer(raw[2], np.int64), rows.first_line, out=line[at:at + n])
        rid[at:at + n] = np.frombuffer(raw[3], np.uint8)
        cls[at:at + n] = np.frombuffer(raw[4], np.uint8)
        sec[at:at + n] = np.frombuffer(raw[7], np.float64)
        np.add(begin, shift, out=start[at:at + n])
        np.add(stop, shift, out=end[at:at + n])
        val[:, at:at + n] = np.frombuffer(raw[10], np.float64).reshape(-1, n)[self.slots]
        self.held_rows = at + n

    def __getstate__(self) -> tuple[Any, ...]:
        """What a copy keeps: the room for rows held only while it holds some (the observer
        flushes them first)."""
        return tuple(None if name == "held" and not self.held_rows else getattr(self, name) for name in self.__slots__)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self.__slots__, state):
            setattr(self, name, value)

    def _room(self, rows: int) -> None:
        """Columns for at least ``rows`` rows held (those held kept)."""
        size = max(rows, HOLD_ROWS)
        old, kept = self.held, self.held_rows
        self.held = (np.empty(size, np.int64), np.empty(size, np.uint8), np.empty(size, np.uint8),
                     np.empty(size, np.float64), np.empty(size, np.int64), np.empty(size, np.int64),
                     np.empty((len(self.slots), size), np.float64))
        if old is not None:
            for new, was in zip(self.held, old):
                new[..., :kept] = was[..., :kept]

    def flush(self, obs: ServingObserver) -> None:
        """The rows held into the windows of their targets, and the windows they began made the
        observer's, in the order their first records created them."""
        if not self.held_rows:
            return
        assert self.held is not None
        n, text = self.held_rows, self.text
        line, rid, cls, sec, start, end, val = (c[..., :n] for c in self.held)
        _add_targets(self.targets, line, rid, cls, sec, start, end, val, text)
        self.held_rows = 0
        del text[:]
        if self.fresh:
            created = [(w.first_line(), order, key, w) for order, key, w in self.fresh if len(w)]
            for _, _, key, w in sorted(created, key=lambda x: x[:2]):
                obs.windows[key] = w  # in the order their first records created them (and the next rows plan anew)

    def covers(self, groups: Sequence[tuple[str, int, int, str | None]]) -> bool:
        return all(self.groups.get(g[1:3]) == g for g in groups)


def _plan(obs: ServingObserver, groups: Sequence[tuple[str, int, int, str | None]],
          cols: Mapping[str, Mapping[str, int]]) -> _Plan:
    windows = obs.windows
    known: dict[tuple[int, int], tuple[str, int, int, str | None]] = {}
    # the last plan's groups stay, and the windows it made that rows left empty (an empty one
    # is a new one: making them anew for every segment cost more than filling the others)
    spare: dict[tuple[str, str], Windows] = {}
    if obs.row_plan is not None:
        known.update(obs.row_plan.groups)
        spare.update((key, w) for _, key, w in obs.row_plan.fresh if key not in windows)
    known.update((g[1:3], g) for g in groups)  # a rank id's rank as the rows name it now
    fresh: list[tuple[int, tuple[str, str], Windows]] = []
    targets: list[tuple[Windows, tuple[int, int], tuple[int, ...], int, int]] = []
    keys: set[tuple[str, str]] = set()
    for kind, cls, rid, rank in known.values():
        index = (cls, rid)  # one object for the group's targets: _add_targets finds their rows once
        label = rank or "-"
        for order, figure, use, need, text in _targets(kind, cols[kind]):
            key = (figure, label)
            w = windows.get(key)
            if w is None:
                w = spare.pop(key, None)
                if w is None:
                    w = new_windows()
                fresh.append((order, key, w))
                keys.add(key)
            targets.append((w, index, use, need, text))
    return _Plan(known, cols, len(windows), targets, fresh, keys)


_SPECS: dict[tuple[str, tuple[tuple[str, int], ...]], list[tuple[int, str, tuple[int, ...], int, int]]] = {}


def _targets(kind: str, have: Mapping[str, int]) -> list[tuple[int, str, tuple[int, ...], int, int]]:
    """(order, figure, value columns, required column or -1, text kept) of a kind's windows
    that records with these columns can fill."""
    key = (kind, tuple(have.items()))
    got = _SPECS.get(key)
    if got is None:
        got = _SPECS[key] = []
        for order, (figure, names, require, text) in enumerate(
                _DECODE_ROWS if kind == "decode_batch" else _PREFILL_ROWS):
            use = tuple(have[n] for n in names if n in have)
            need = -1 if require is None else have.get(require)
            if use and need is not None:  # else no record of this kind has the fields
                got.append((order, figure, use, need, _TEXT if text else 0))
    return got


def _graph_rows(obs: ServingObserver, rows: BatchRows, cls: int, col: int, file: str | None) -> None:
    """``add_decode``'s CUDA-graph evidence from rows: the first batch run without one."""
    on = rows.first(cls, col, 1.0)
    off = rows.first(cls, col, 0.0)
    if off < 0:
        obs.graph_on_seen = obs.graph_on_seen or on >= 0
        return
    if obs.first_graph_off is None:
        obs.first_graph_off = _row_evidence(rows, off, file)
    if obs.graph_off is None:
        after = off if obs.graph_on_seen else (rows.first(cls, col, 0.0, on + 1) if on >= 0 else -1)
        if after >= 0:
            obs.graph_off = _row_evidence(rows, after, file)
    obs.graph_on_seen = obs.graph_on_seen or on >= 0


def _row_evidence(rows: BatchRows, i: int, file: str | None) -> dict[str, Any]:
    text, ts = rows.stamp(i)
    return _evidence(file, rows.line(i), rows.rank(i), ts, text)


def _row_later(rows: BatchRows, i: int, label: str, file: str | None) -> Callable[[], dict[str, Any]]:
    """``_row_evidence`` of row ``i`` (of rank ``label``), made when called (a frozen run's
    evidence is made only when the run is kept: ``model.frozen``), of a copy of the row, not
    of the block it is in."""
    return partial(_later_evidence, file, rows.line(i), None if label == "-" else label, rows.later(i))


def _copy_evidence(stamp: Callable[[bytes, int], tuple[str, Any]], line: int, raw: bytes, plan: int,
                   rank: str | None, file: str | None) -> dict[str, Any]:
    text, ts = stamp(raw, plan)
    return _evidence(file, line, rank, ts, text)


def _later_evidence(file: str | None, line: int, rank: str | None, stamp: Callable[[], tuple[str, Any]]) -> dict[str, Any]:
    text, ts = stamp()
    return _evidence(file, line, rank, ts, text)
