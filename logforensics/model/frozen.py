"""Counters frozen while requests run: consecutive decode batches of one rank (an
attention-DP group's printing rank) that show no work with requests running.

A decode batch line (``Decode batch, #running-req: 8, #token: 9000, ... gen throughput
(token/s): 0.00``) is printed every ``--decode-log-interval`` decode steps. Two signs that a
server steps without working, each kept as its own runs (``KINDS``):

* ``gen_throughput_zero``: gen throughput 0 while requests run (a step generates a token
  for each running request);
* ``counters_fixed``: ``#running-req``, ``#token`` (``#full token`` of a hybrid model) and
  gen throughput all the same as the rank's line before, requests running: the figures of
  the batch do not move. ``#token`` alone is no such sign: a healthy server can print the
  same ``#token`` line after line while it decodes (KV reserved ahead of use), with a
  throughput that moves from line to line, since it is measured over each interval.

:class:`FrozenStreaks` keeps, per rank, the runs of lines of one key (``FROZEN_LINES`` in a row
make a finding, ``diagnose/validity.py``). It reads the records one at a time (:meth:`step`)
or a segment of the bulk reader's rows at a time, and merges in order (the parallel reader):
each rank's state is its leading run, its trailing run, and the first run of
``FROZEN_LINES`` or more between, so two parts join exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Consecutive decode batches of one rank that make a frozen counter (with SGLang's default
#: --decode-log-interval of 40, 200 decode steps).
FROZEN_LINES = 5
#: The kinds of frozen runs, in the order a tie (two kinds from one line) is reported.
KINDS = ("gen_throughput_zero", "counters_fixed")

#: A decode record's ``#token`` (``#full token`` of a hybrid model), the first it has.
TOKEN_FIELDS = ("token", "full_token")

Streak = list[Any]  # [lines, first record, last record, key] (records as evidence dicts)


class _Rank:
    __slots__ = ("lead", "tail", "inner", "broken")

    def __init__(self) -> None:
        self.lead: Streak | None = None  # the run the rank's lines begin with (the open run too, until a break)
        self.tail: Streak | None = None  # the run its lines end with, after the first break
        self.inner: Streak | None = None  # the first run of FROZEN_LINES or more between
        self.broken = False  # a line that ends the leading run was seen


def _joins(a: Streak | None, b: Streak | None) -> bool:
    return a is not None and b is not None and a[3] == b[3]


def _join(a: Streak, b: Streak) -> Streak:
    return [a[0] + b[0], a[1], b[2], a[3]]


def _long(s: Streak | None) -> Streak | None:
    return s if s is not None and s[0] >= FROZEN_LINES else None


def _kept(s: Streak | None) -> Streak | None:
    """A run's records as evidence: a run still open holds the callables that give them (a
    healthy log's lines each start a run of one, whose evidence is never needed)."""
    if s is not None:
        if callable(s[1]):
            s[1] = s[1]()
        if callable(s[2]):
            s[2] = s[2]()
    return s


class FrozenStreaks:
    """Per rank, the runs of decode batches of one key; see the module."""

    def __init__(self) -> None:
        self.ranks: dict[str, _Rank] = {}

    def key(self, rank: str) -> Any:
        """The key of the run a rank's lines end with (None: they end with a break or the
        rank has none): the key its next line extends."""
        r = self.ranks.get(rank)
        s = None if r is None else r.tail if r.broken else r.lead
        return None if s is None else s[3]

    def step(self, rank: str, key: Any, record: Callable[[], Any]) -> None:
        """One decode batch of ``rank``: ``key`` None when it shows work (no run), else the
        key of its run (consecutive lines of one key make a run); ``record`` gives its
        evidence, called only when the line is kept past its run's end (``_kept``)."""
        r = self.ranks.get(rank)
        if r is None:
            r = self.ranks[rank] = _Rank()
        if key is None:
            if not r.broken:
                r.broken = True
                _kept(r.lead)
            else:
                self._close(r)
            return
        if not r.broken:
            s = r.lead
            if s is None:
                r.lead = [1, record, record, key]
                return
            if s[3] == key:
                s[0] += 1
                s[2] = record
                return
            r.broken = True
            _kept(s)
        s = r.tail
        if s is not None and s[3] == key:
            s[0] += 1
            s[2] = record
            return
        self._close(r)
        r.tail = [1, record, record, key]

    @staticmethod
    def _close(r: _Rank) -> None:
        if r.inner is None:
            r.inner = _kept(_long(r.tail))
        r.tail = None

    def ends(self, rank: str, first: Any, last: Any, record: Callable[[], Any] | None) -> bool:
        """Lines of ``rank`` no two of which in a row share a key, the first of key ``first``,
        the last of key ``last`` (``record``: its evidence): what stepping them one by one
        gives, when the first cannot extend the run the rank's lines end with (True); else
        nothing is done (False: step them)."""
        r = self.ranks.get(rank)
        if r is None or not r.broken:
            return False
        s = r.tail
        if s is not None:
            if s[3] == first:
                return False
            if s[0] >= FROZEN_LINES and r.inner is None:  # the first line ends it (``_close``)
                r.inner = _kept(s)
        r.tail = None if last is None else [1, record, record, last]  # the lines after start runs of one
        return True

    def breaks(self, rank: str) -> None:
        """A decode batch of ``rank`` that shows work (``step`` with ``key=None``)."""
        self.step(rank, None, _no_record)

    def merge(self, later: FrozenStreaks) -> None:
        """Fold in the part of the log that followed this one's."""
        for rank, b in later.ranks.items():
            a = self.ranks.get(rank)
            if a is None:
                self.ranks[rank] = b
                continue
            if not a.broken:
                if _joins(a.lead, b.lead):
                    assert a.lead is not None and b.lead is not None
                    a.lead = _join(a.lead, b.lead)
                    if b.broken:
                        a.broken, a.tail, a.inner = True, b.tail, b.inner
                    continue
                a.broken = True  # a's leading run ends where b begins: b's first run lies between
                _kept(a.lead)
                if not b.broken:
                    a.tail = b.lead
                else:
                    a.inner, a.tail = _kept(_long(b.lead)) or b.inner, b.tail
                continue
            between: Streak | None
            if _joins(a.tail, b.lead):
                assert a.tail is not None and b.lead is not None
                between = _join(a.tail, b.lead)
            else:
                self._close(a)
                between = b.lead
            if not b.broken:
                a.tail = between
                continue
            a.inner = a.inner or _kept(_long(between)) or b.inner
            a.tail = b.tail

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a part read in parallel): the open runs' evidence made, not their callables."""
        for r in self.ranks.values():
            _kept(r.lead)
            _kept(r.tail)
        return self.__dict__

    def first(self) -> dict[str, Any] | None:
        """The first run of ``FROZEN_LINES`` or more (by its first line): rank, lines, first
        and last record; None when there is none."""
        found = []
        for rank, r in self.ranks.items():
            for s in (r.lead, r.inner, r.tail if r.broken else None):
                if s is not None and s[0] >= FROZEN_LINES:
                    _kept(s)
                    found.append((s[1]["line"], rank, s))
                    break
        if not found:
            return None
        _, rank, s = min(found, key=lambda x: x[0])
        return {"rank": rank, "lines": s[0], "first": s[1], "last": s[2], "threshold_lines": FROZEN_LINES}


def counters_key(tokens: float | None, running: float | None, tput: float | None) -> tuple[float, float, float] | None:
    """A decode record's key for ``counters_fixed`` runs: its ``#token``, ``#running-req`` and
    gen throughput, when requests run and it has all three (else None: no run)."""
    if tokens is None or tput is None or running is None or not running > 0:
        return None
    return (tokens, running, tput)


def _no_record() -> None:
    return None
