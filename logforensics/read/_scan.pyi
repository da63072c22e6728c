"""Types of the optional C extension built from ``_scan.c``."""

from typing import Any

MAX_RANKS: int
MAX_CLASSES: int
MAX_SLOTS: int

class Scanner:
    shapes: int
    rank_names: list[str | None]
    def __init__(self, nslots: int, ordered: tuple[int, ...] = ...) -> None: ...
    def add(self, key: bytes, plan: int, cls: int, kind: int, rank: tuple[int, int] | None,
            ts: tuple[int, int] | None, ts_iso: bool, slots: tuple[tuple[int, int, int, bool], ...]) -> bool: ...
    def set_ready(self, table: bytes | bytearray) -> None: ...
    def scan(self, buf: bytes, pos: int) -> Any: ...

def log_buckets(values: list[Any], factor: float, counter: dict[int, int]) -> None: ...
