"""The log's clock: SGLang's stamps as seconds and back.

Why its own module: the serving observer files records by second and the change-point
analysis prints the seconds it found as stamps again; both read the clock the same way.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import lru_cache


def seconds(ts: str | None) -> float | None:
    """Seconds since the epoch of an ISO stamp, or of the day for a time-only stamp."""
    if not ts:
        return None
    try:
        if len(ts) >= 19 and ts[4] == "-":
            return datetime.fromisoformat(ts[:26]).timestamp() if "+" not in ts[19:] else \
                datetime.fromisoformat(ts).timestamp()
        if len(ts) >= 8 and ts[2] == ":":
            h, m, s = ts.split(":")[:3]
            return int(h) * 3600 + int(m) * 60 + float(s)
    except ValueError:
        return None
    return None


@lru_cache(maxsize=65536)
def iso(sec: float, dated: bool) -> str:
    """The inverse of :func:`seconds` (local, naive, as SGLang prints)."""
    if dated:
        return datetime.fromtimestamp(sec).isoformat(timespec="seconds")
    return str(timedelta(seconds=int(sec) % 86400)).rjust(8, "0")
