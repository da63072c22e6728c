"""What ``feed_bulk`` asks of an export's sink beyond its own writing, said once for every format."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class ScanSink:
    """A sink of the compiled scanner's segments: an export keeps no run model, so no (class,
    rank) pair needs the event path (an empty ready table), and a run of unrecognised lines is
    a segment like any other."""

    scanner: Any

    def ready_table(self, rank_names: list[str | None]) -> bytes:
        return b""

    def apply(self, seg: Sequence[Any], first_line: int, scanner: Any, buf: bytes) -> None:
        raise NotImplementedError

    def take_others(self, buf: bytes, pos: int, end: int, line: int, binary: bool) -> tuple[int, int, int]:
        stop, n, bad, seg = self.scanner.others(buf, pos, end, line, binary)
        if n:
            self.apply(seg, line, self.scanner, buf)
        return stop, n, bad
