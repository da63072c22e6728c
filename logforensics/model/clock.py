"""The log's clock: SGLang's stamps as seconds and back.

Why its own module: the serving observer files records by second and the change-point
analysis prints the seconds it found as stamps again; both read the clock the same way.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import lru_cache

#: Where naive stamps count from: a log's clock is its own, read alike on every machine.
_EPOCH = datetime(1970, 1, 1)


def seconds(ts: str | None) -> float | None:
    """Seconds since the epoch of an ISO stamp, or of the day for a time-only stamp.

    A stamp without an offset (SGLang prints local time) is read as UTC, whatever the
    time zone of the machine reading the log: its series must not move with the reader's
    DST. The bulk reader's C scanner (``native/scan.c``) reads the stamps it takes the
    same way."""
    if not ts:
        return None
    try:
        if len(ts) >= 19 and ts[4] == "-":
            if ts[19:20] == ",":  # Python logging's "%(asctime)s": milliseconds after a comma
                ts = ts[:19] + "." + ts[20:]
            d = datetime.fromisoformat(ts[:26] if "+" not in ts[19:] else ts)
            return (d.replace(tzinfo=timezone.utc) if d.tzinfo is None else d).timestamp()
        if len(ts) >= 8 and ts[2] == ":":
            h, m, s = ts.split(":")[:3]
            return int(h) * 3600 + int(m) * 60 + float(s)
    except ValueError:
        return None
    return None


@lru_cache(maxsize=65536)
def iso(sec: float, dated: bool) -> str:
    """The inverse of :func:`seconds` (naive, as SGLang prints)."""
    if dated:
        return (_EPOCH + timedelta(seconds=sec)).isoformat(timespec="seconds")
    return str(timedelta(seconds=int(sec) % 86400)).rjust(8, "0")


def utc_stamp(sec: float) -> str | None:
    """Seconds since the epoch (a host's ``time.time()``, which counts in UTC) as a stamp
    written as SGLang writes its own, with the clock said: ``2025-06-01 10:00:00 UTC``,
    ``2025-06-01 10:00:01.500 UTC`` when the seconds have a fraction (to the millisecond,
    as ``SGLANG_LOG_MS`` prints them). None for a figure no date has (infinite, not a
    number, beyond year 9999 or before year 1: a crafted file's)."""
    try:
        at = _EPOCH + timedelta(seconds=round(sec, 3))
    except (OverflowError, ValueError):
        return None
    return at.isoformat(sep=" ", timespec="milliseconds" if at.microsecond else "seconds") + " UTC"
