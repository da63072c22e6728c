"""Types of the optional C extension built from ``_emit.c``."""

from typing import Any

OP_LINE: int
OP_TEXT: int
OP_STR: int
OP_ISO: int
OP_INT: int
OP_FLOAT: int
OP_BOOL: int
OP_WORD: int
OP_STRIP: int
OP_RCOLON: int
OP_CSTR: int
OP_CINT: int
OP_CFLOAT: int
OP_CBOOL: int

class Rows:
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __len__(self) -> int: ...
    def release(self) -> None: ...

class Emitter:
    shapes: int
    kept: int
    def __init__(self) -> None: ...
    def add(self, key: bytes, kind: int, ops: list[Any]) -> bool: ...
    def known(self, key: bytes) -> bool: ...
    def scan(self, buf: bytes | memoryview, pos: int, first_line: int, every: bool = False,
             view: bool = False) -> tuple[int, int, bytes | Rows, dict[int, int]]: ...
    def set_column(self, col: int, type: str) -> None: ...
    def add_columns(self, key: bytes, kind: int, plan: int, skip: bool, ops: list[Any]) -> bool: ...
    def scan_columns(self, buf: bytes | memoryview, pos: int, first_line: int, every: bool = False,
                     hold: bool = False) -> tuple[int, int, int, list[int] | None, list[Any] | None, dict[int, int]]: ...
    def take_columns(self) -> tuple[int, list[int], list[Any]]: ...
