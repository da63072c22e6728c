"""Types of the optional C extension built from ``_other.c``."""

from typing import Any

SHAPE_MAX: int
EXAMPLE_MAX: int

class Walker:
    def __init__(self, refuse: bytes, needles: list[tuple[bytes, bytes]], limit: int) -> None: ...
    def walk(self, buf: bytes, pos: int, end: int, line: int, shapes: dict[str, Any], binary: bool, cap: int,
             overflow: str) -> tuple[int, int, int, bool, list[tuple[str, int, int | None, str | None, bool]]]: ...

def shape(text: str) -> str: ...
def decode(data: bytes) -> tuple[str, bool]: ...
