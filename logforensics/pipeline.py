"""Glue: a file (or stream) through the incremental parser into the run model.

``LiveRun`` is the one pipeline: ``watch`` feeds it chunks as they arrive, and batch
commands feed it a file (``feed_file``), on several cores for large files (``parallel``).
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Iterable, Iterator

from .events import Event
from .parser import BLOCK_SIZE, IncrementalParser
from .run import RunModel, RunSummary


class InputError(Exception):
    """A log that cannot be read at all (missing, a directory, no permission)."""


class LiveRun:
    """Parser plus run model over one log: feed bytes, read events and the summary.

    ``watch`` feeds it chunks as they arrive; ``summarize_file`` feeds it a file; the
    workers of ``parallel`` feed it byte ranges of a file. Each chunk's events go to the
    model in one ``observe_all`` call.
    """

    def __init__(self, name: str | None) -> None:
        self.name = name
        self.parser = IncrementalParser(name)
        self.model = RunModel(name)

    def feed(self, chunk: bytes) -> list[Event]:
        events = self.parser.feed(chunk)
        self.model.observe_all(events)
        return events

    def close(self) -> list[Event]:
        events = self.parser.close()
        self.model.observe_all(events)
        return events

    def summary(self) -> RunSummary:
        stats = self.parser.stats
        stats.decode_errors = self.parser.classifier.decode_errors
        return self.model.summary(stats)


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


def blocks(path: str | os.PathLike[str], progress: Callable[[int], None] | None = None) -> Iterator[bytes]:
    """The file's bytes in blocks (``-`` is standard input), reporting progress."""
    fh = open_log(path)
    try:
        while True:
            try:
                block = fh.read(BLOCK_SIZE)
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


def feed_file(run: LiveRun, path: str | os.PathLike[str], *,
              progress: Callable[[int], None] | None = None) -> None:
    """Feed the whole file (or ``-``, standard input) into ``run``, then close it.

    A large regular file fed into a fresh run is read on several cores by
    ``parallel.read_in_parallel``, with this same LiveRun code in each worker; everything
    else is read here, block by block.
    """
    if run.parser.stats.bytes == 0 and run.model.events == 0:
        from .parallel import read_in_parallel

        if read_in_parallel(run, path, progress=progress):
            return
    for block in blocks(path, progress):
        run.feed(block)
    run.close()


def summarize_file(path: str | os.PathLike[str], *, name: str | None = None,
                   progress: Callable[[int], None] | None = None) -> RunSummary:
    """Parse a whole log and return its run summary."""
    run = LiveRun(name or os.fspath(path))
    feed_file(run, path, progress=progress)
    return run.summary()


def iter_events(path: str | os.PathLike[str], *, name: str | None = None,
                progress: Callable[[int], None] | None = None) -> Iterable[Event]:
    """Every event of a log, in order (a generator: constant memory)."""
    parser = IncrementalParser(name or os.fspath(path))
    for block in blocks(path, progress):
        yield from parser.feed(block)
    yield from parser.close()
