"""Opening a log (a path, or ``-`` for standard input) and reading it in blocks."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator

from ..read.parser import BLOCK_SIZE


class InputError(Exception):
    """A log that cannot be read at all (missing, a directory, no permission)."""


def open_log(path: str | os.PathLike[str]):
    """Open a log for binary reading, or raise InputError with a one-line reason."""
    p = os.fspath(path)
    if p == "-":
        return sys.stdin.buffer
    if not os.path.exists(p):
        raise InputError(f"{p}: no such file")
    if os.path.isdir(p):
        raise InputError(f"{p}: is a directory, not a log file")
    try:
        return open(p, "rb")
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from None


def blocks(path: str | os.PathLike[str], progress: Callable[[int], None] | None = None,
           size: int = BLOCK_SIZE) -> Iterator[bytes]:
    """The file's bytes in blocks (``-`` is standard input), reporting progress."""
    fh = open_log(path)
    try:
        while True:
            try:
                block = fh.read(size)
            except OSError as exc:
                raise InputError(f"{path}: read failed ({exc.strerror or exc})") from None
            if not block:
                return
            yield block
            if progress is not None:
                progress(len(block))
    finally:
        if fh is not sys.stdin.buffer:
            fh.close()
