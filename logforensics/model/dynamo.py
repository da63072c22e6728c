"""What NVIDIA Dynamo's rewriting of a log changes: its clock and its ranks.

Dynamo (``python -m dynamo.sglang``) takes over SGLang's logging unless
``DYN_SKIP_SGLANG_LOG_FORMATTING=1``: every record gets Dynamo's head, a UTC stamp
(``2026-04-27T23:03:15.250907Z  INFO scheduler.init_model_worker: ...``, the grammar's
``DYN_HEAD``), and loses SGLang's rank prefix. Two things follow, and this module
observes both:

* **ranks not printed**: a start-up or serving record of SGLang behind Dynamo's head
  names no rank, so the run's records all go to rank ``-`` (the single scheduler of a
  one-GPU worker; of several ranks, their records mixed). The summary says so once.
* **two clocks**: where SGLang's own lines are left as they were (the flag above, or
  its other processes), they carry SGLang's stamps in local time without a zone, and
  Dynamo's carry UTC. The offset between them is derived, never guessed, from records
  that show one moment on both clocks: one record with both stamps (Dynamo's head
  before SGLang's prefix), or two adjacent records (on one line or on consecutive
  lines), one on each clock. Dynamo's side is the UTC anchor: its ``Z`` (or the offset
  ``DYN_LOG_USE_LOCAL_TZ`` writes) says which instant it is. The difference of a pair is
  rounded to whole quarter hours (zones such as UTC+5:30 exist); what is left, the
  residual, is how far apart the two records were written, and a pair whose residual
  is over ``MAX_RESIDUAL`` shows no moment on both clocks and is not used. Pairs that
  disagree on the offset are reported as such, and no offset is given.

The records read are those every reader observes one by one (``run._CLOCKED``): batch
statistics and HTTP access lines, which the bulk reader takes in columns, are left out,
so both readers give one clock. Bounded state: counts, a few lines, one entry per offset.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..events import Event
from .records import Clock

#: Dynamo's head as the grammar reads it (``DYN_HEAD``): the stamp and its zone.
_HEAD = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(Z|[+-]\d\d:\d\d) +(?:ERROR|WARN|INFO|DEBUG|TRACE) ")
#: Offsets are whole quarter hours.
STEP_S = 900
#: How far apart (beyond the offset) the stamps of a pair may be, in seconds.
MAX_RESIDUAL = 60.0
#: Records that are no record of SGLang's own (a line of Dynamo's reads as ``other``).
_NOT_SGLANG = frozenset({"other", "blank", "indented", "unplanned"})
#: The warning of a run whose SGLang records Dynamo wrote without their rank.
RANKS_WARNING = ("ranks not printed: Dynamo drops SGLang's rank prefix unless DYN_SKIP_SGLANG_LOG_FORMATTING=1 "
                 "(records without a rank are rank '-')")


def _instant(stamp: str) -> datetime | None:
    try:
        return datetime.fromisoformat(stamp[:26])
    except ValueError:
        return None


def _zone(zone: str) -> timedelta:
    """``Z`` or ``+08:00`` as the offset from UTC."""
    if zone == "Z":
        return timedelta(0)
    sign = -1 if zone[0] == "-" else 1
    return sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))


#: A record with a stamp: its line, its stamp as read, and the zone its stamp says (Dynamo's:
#: ``Z`` or an offset; None for SGLang's own, local time). Parsed only when it makes a pair.
_Stamped = tuple[int, str, str | None]


@dataclass
class DynamoObserver:
    """See the module docstring."""

    #: records with Dynamo's head, and with SGLang's own stamp (local time)
    utc_records: int = 0
    local_records: int = 0
    #: the first SGLang record (a kind of its own) that Dynamo wrote without a rank: its line
    unranked_line: int = 0
    #: offset in seconds -> [pairs, |residual| of the best, its residual, UTC line, UTC stamp, local line, local stamp]
    offsets: dict[int, list[Any]] = field(default_factory=dict)
    #: the first and the last stamped record (the merge pairs the last of one part with the first of the next)
    first: _Stamped | None = None
    last: _Stamped | None = None

    #: the last local record the run model passed over without calling :meth:`observe`
    #: (``observe`` is called for records of Dynamo's, and for local ones up to ``until``)
    passed: Event | None = None
    until: int = sys.maxsize

    def observe(self, kind: str, line: int, rank: str | None, ts: str, text: str) -> None:
        """A record with the stamp ``ts`` (as read) and text ``text``. The run model calls
        this for every record with Dynamo's head (``text[10:11] == "T"``) and for the
        others up to line ``until`` (the first stamped record of all, and the record after
        one of Dynamo's); it counts the other local records and keeps the last (``passed``)."""
        m = _HEAD.match(text) if text[10:11] == "T" else None
        if m is None:
            rec: _Stamped = (line, ts, None)
            self.local_records += 1
        else:
            rec = (line, m.group(1), m.group(2))
            self.utc_records += 1
            if rank is None and not self.unranked_line and kind not in _NOT_SGLANG:
                self.unranked_line = line
            if not ts.startswith(m.group(1)[:19]):  # SGLang's own prefix after Dynamo's head: one record, two clocks
                self._pair(rec, (line, ts, None))
        if self.first is None:
            self.first = rec
        last = self._last()
        if last is not None and (last[2] is None) != (rec[2] is None) and line - last[0] <= 1:
            self._pair(*((last, rec) if rec[2] is None else (rec, last)))
        self.last = rec
        self.passed = None
        self.until = line + 1 if m is not None else 0

    def _pair(self, utc: _Stamped, local: _Stamped) -> None:
        """Two stamps of one moment, Dynamo's (``utc``) and SGLang's (``local``)."""
        anchor, here = _instant(utc[1]), _instant(local[1])
        if anchor is None or here is None or utc[2] is None:  # a time of day only: no instant
            return
        diff = (here - (anchor - _zone(utc[2]))).total_seconds()
        offset = round(diff / STEP_S) * STEP_S
        residual = diff - offset
        if abs(residual) > MAX_RESIDUAL:
            return
        entry = self.offsets.get(offset)
        if entry is None:
            if len(self.offsets) >= 16:  # pairs that disagree this much say nothing more
                return
            self.offsets[offset] = [1, abs(residual), residual, utc[0], utc[1] + utc[2], local[0], local[1]]
            return
        entry[0] += 1
        if abs(residual) < entry[1]:
            entry[1:] = [abs(residual), residual, utc[0], utc[1] + utc[2], local[0], local[1]]

    def merge(self, later: DynamoObserver) -> None:
        """Counts add up; the last record of this part and the first of ``later`` may be a pair."""
        first, last = later.first, self._last()
        if first is not None and last is not None and (last[2] is None) != (first[2] is None) \
                and first[0] - last[0] <= 1:
            self._pair(*((last, first) if first[2] is None else (first, last)))
        self.utc_records += later.utc_records
        self.local_records += later.local_records
        self.unranked_line = self.unranked_line or later.unranked_line
        for offset, entry in later.offsets.items():
            mine = self.offsets.get(offset)
            if mine is None:
                if len(self.offsets) < 16:
                    self.offsets[offset] = list(entry)
                continue
            mine[0] += entry[0]
            if entry[1] < mine[1]:
                mine[1:] = entry[1:]
        self.first = self.first or later.first
        if later.first is not None:
            self.last, self.passed = later.last, later.passed
        elif later.passed is not None:
            self.passed = later.passed
        self.until = later.until if later.first is not None else self.until

    def _last(self) -> _Stamped | None:
        """The last stamped record seen, observed or passed over."""
        passed = self.passed
        if passed is not None and passed.ts is not None and (self.last is None or passed.line > self.last[0]):
            return (passed.line, passed.ts, None)
        return self.last

    def warnings(self) -> list[str]:
        return [RANKS_WARNING] if self.unranked_line else []

    def clock(self) -> Clock | None:
        """The summary's ``clock``: None unless Dynamo's UTC stamps are in the log."""
        if not self.utc_records:
            return None
        return Clock.from_dict(self._clock())

    def _clock(self) -> dict[str, Any]:
        out: dict[str, Any] = {"utc_records": self.utc_records, "local_records": self.local_records,
                               "local_offset_h": None, "pairs": 0, "residual_s": None, "anchor": None,
                               "disagreeing": {}}
        if not self.offsets:
            return out
        ranked = sorted(self.offsets.items(), key=lambda kv: (-kv[1][0], kv[1][1]))
        (offset, (pairs, _, residual, utc_line, utc_stamp, local_line, local_stamp)), rest = ranked[0], ranked[1:]
        out["disagreeing"] = {f"{_hours(o):+g}": e[0] for o, e in rest}
        out["pairs"] = pairs
        if rest:  # pairs that disagree: no offset is derived
            return out
        out["local_offset_h"] = _hours(offset)
        out["residual_s"] = round(residual, 6)
        out["anchor"] = {"utc_line": utc_line, "utc": utc_stamp, "local_line": local_line, "local": local_stamp}
        return out


def _hours(offset_s: int) -> float:
    return offset_s / 3600


def utc_instant(text: str, ts: str | None) -> datetime | None:
    """The UTC instant (naive) of a record's stamp ``ts`` when the stamp is Dynamo's (its
    head begins ``text``: a ``Z`` or an offset says which instant it is); None for SGLang's
    own stamp (local time without a zone), as :meth:`DynamoObserver.observe` tells them."""
    if not ts or text[10:11] != "T":
        return None
    m = _HEAD.match(text)
    if m is None or not ts.startswith(m.group(1)[:19]):
        return None
    at = _instant(m.group(1))
    return None if at is None else at - _zone(m.group(2))



