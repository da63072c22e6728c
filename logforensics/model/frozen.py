"""Token counters frozen while requests run: consecutive decode batches of one rank that
generated nothing with requests running.

A decode batch line (``Decode batch, #running-req: 8, ... gen throughput (token/s): 0.00``)
is printed every ``--decode-log-interval`` decode steps; a step generates a token for each
running request, so one whose throughput is 0 while requests run is a line of a server that
steps without generating. :class:`FrozenStreaks` keeps, per rank, the runs of such lines
(``FROZEN_LINES`` in a row make a finding, ``diagnose/validity.py``). It reads the
records one at a time (:meth:`step`) or a segment of the bulk reader's rows at a time, and
merges in order (the parallel reader): each rank's state is its leading run, its trailing
run, and the first run of ``FROZEN_LINES`` or more between, so two parts join exactly.
"""

from __future__ import annotations

from typing import Any

#: Consecutive decode batches of one rank with requests running and gen throughput 0 that
#: make a frozen counter (with SGLang's default --decode-log-interval of 40, 200 decode steps).
FROZEN_LINES = 5

Streak = list[Any]  # [lines, first record, last record] (records as evidence dicts)


class _Rank:
    __slots__ = ("lead", "tail", "inner", "broken")

    def __init__(self) -> None:
        self.lead: Streak | None = None  # the run the rank's lines begin with (the tail too, until a break)
        self.tail: Streak | None = None  # the run its lines end with, after the first break
        self.inner: Streak | None = None  # the first run of FROZEN_LINES or more between
        self.broken = False  # a line that is not frozen was seen


def _join(a: Streak | None, b: Streak | None) -> Streak | None:
    if a is None or b is None:
        return a or b
    return [a[0] + b[0], a[1], b[2]]


class FrozenStreaks:
    """Per rank, the runs of frozen decode batches; see the module."""

    def __init__(self) -> None:
        self.ranks: dict[str, _Rank] = {}

    def open(self) -> bool:
        """Whether a rank's lines end in a frozen run (its next line may extend it)."""
        return any((r.tail if r.broken else r.lead) is not None for r in self.ranks.values())

    def step(self, rank: str, frozen: bool, record: Any) -> None:
        """One decode batch of ``rank``: ``frozen`` when requests ran and nothing was generated;
        ``record`` (its evidence) is called for frozen ones only."""
        r = self.ranks.get(rank)
        if r is None:
            r = self.ranks[rank] = _Rank()
        if frozen:
            ev = record()
            if r.broken:
                r.tail = _join(r.tail, [1, ev, ev])
            else:
                r.lead = _join(r.lead, [1, ev, ev])
        elif not r.broken:
            r.broken = True
        else:
            self._close(r)

    @staticmethod
    def _close(r: _Rank) -> None:
        if r.tail is not None and r.tail[0] >= FROZEN_LINES and r.inner is None:
            r.inner = r.tail
        r.tail = None

    def breaks(self, rank: str) -> None:
        """A decode batch of ``rank`` that is not frozen (``step`` with ``frozen=False``)."""
        self.step(rank, False, None)

    def merge(self, later: FrozenStreaks) -> None:
        """Fold in the part of the log that followed this one's."""
        for rank, b in later.ranks.items():
            a = self.ranks.get(rank)
            if a is None:
                self.ranks[rank] = b
                continue
            if not a.broken:
                a.lead = _join(a.lead, b.lead)
                if b.broken:
                    a.broken, a.tail, a.inner = True, b.tail, b.inner
                continue
            joined = _join(a.tail, b.lead)
            if not b.broken:
                a.tail = joined
                continue
            if a.inner is None and joined is not None and joined[0] >= FROZEN_LINES:
                a.inner = joined
            a.inner = a.inner or b.inner
            a.tail = b.tail

    def first(self) -> dict[str, Any] | None:
        """The first run of ``FROZEN_LINES`` or more (by its first line): rank, lines, first
        and last record; None when there is none."""
        found = []
        for rank, r in self.ranks.items():
            for s in (r.lead, r.inner, r.tail if r.broken else None):
                if s is not None and s[0] >= FROZEN_LINES:
                    found.append((s[1]["line"], rank, s))
                    break
        if not found:
            return None
        _, rank, s = min(found, key=lambda x: x[0])
        return {"rank": rank, "lines": s[0], "first": s[1], "last": s[2], "threshold_lines": FROZEN_LINES}
