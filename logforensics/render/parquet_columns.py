"""The first pass of ``parse --format parquet`` over regular files: the file's columns.

A Parquet file's schema comes first in the writer, but which columns a log has, and of
what type, is known only when its last line is read. So a regular file is read twice
(``render/parquet.py``): this first pass learns the columns, in the order first seen, and
the kinds of their values, exactly as the row groups of the second would collect them,
without storing a value. A large log's two halves can be read at once, on two threads (the
C scan releases the GIL): the second half starts at a line that cannot continue a record
(``ingest.parallel.choose_ranges``), with the text-or-not verdict of the file's first
bytes. That is a guess where a record crosses the boundary after all; the second pass,
which is one exact pass, checks it (``parquet._Mismatch``). Only where asked for
(:func:`two_cores`): on two cores it has not paid yet.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Iterator, Sequence
from typing import Any

from ..events import Event
from ..ingest.batch import BULK_BLOCK_SIZE
from ..ingest.files import blocks
from ..ingest.parallel import choose_ranges, count_lines, range_blocks, sniff, worker_count
from ..read import emit
from ..read.parser import IncrementalParser
from .tables import _kind, parquet_row

#: Logs smaller than this are learned in one pass, not in two halves at once: a thread
#: and the search for a boundary would cost more than they save.
SPLIT_MIN_BYTES = 64 << 20
class Columns:
    """The first pass's sink: the file's columns (in the order first seen) and the kinds of
    their values, exactly as ``_Groups`` would collect them, without a value stored."""

    def __init__(self, wanted: Collection[str]) -> None:
        self.wanted = wanted
        self.order: dict[str, None] = {}
        self.kinds: dict[str, set[str]] = {}
        self.names: dict[int, tuple[str, str]] = {}
        self.bytes = 0
        self.error: BaseException | None = None

    def ready_table(self, rank_names: list[str | None]) -> bytes:
        return b""

    def apply(self, seg: Sequence[Any], first_line: int, scanner: emit.ColumnEmitter, buf: bytes) -> None:
        _, _, n, plans, cols, counts = seg
        scanner.count(counts)
        if not n:
            return
        for pid in plans:
            for key in scanner.plan_keys[pid]:
                if key not in self.order:
                    self.order[key] = None
        if any(col not in self.names for col, *_ in cols):
            self.names = {col: key for key, col in scanner.columns.items()}
        for col, type_, nonnull, *_ in cols:
            if nonnull:
                name = self.names[col][0]
                self.kinds.setdefault(name, set()).add(emit.KIND_OF_TYPE[type_])

    def observe(self, events: Sequence[Event]) -> None:
        wanted = self.wanted
        for ev in events:
            if not wanted or ev.kind in wanted:
                for key, value in parquet_row(ev, self.order).items():
                    if value is not None:
                        self.kinds.setdefault(key, set()).add(_kind(value))

    def read(self, path: str, node: str | None, columns: dict[tuple[str, str], int], limit: int | None = None) -> int:
        """Learn from the log ``path`` (its first ``limit`` bytes, if given); the bytes read."""
        parser = IncrementalParser(path, node=node)
        scanner = emit.ColumnEmitter(parser.classifier, parser.file, node, frozenset(self.wanted), columns,
                                     fill=False)
        # nothing keeps a block; the C scan releases the GIL while a thread reads the next
        parts = blocks(path, None, BULK_BLOCK_SIZE, reuse=True, ahead=True)
        for block in parts if limit is None else limited(parts, limit):
            parser.feed_bulk(block, scanner, self)
        self.observe(parser.close())
        return parser.stats.bytes

    def read_range(self, path: str, node: str | None, span: tuple[int, int], columns: dict[tuple[str, str], int]) -> None:
        """Learn from the bytes ``span`` of the log ``path`` (on a thread of its own: an
        error is kept in ``error``), as a parser that starts there reads them."""
        try:
            start, end = span
            parser = IncrementalParser(path, node=node)
            parser.line_offset = count_lines(path, 0, start)
            parser.classifier.binary = sniff(path)  # judged from the file's first bytes, as one pass does
            scanner = emit.ColumnEmitter(parser.classifier, parser.file, node, frozenset(self.wanted), columns,
                                         fill=False)
            for block in range_blocks(path, start, end, BULK_BLOCK_SIZE):
                parser.feed_bulk(block, scanner, self)
            self.observe(parser.close())
            self.bytes = parser.stats.bytes
        except BaseException as exc:  # handed to the caller's thread
            self.error = exc

    def absorb(self, later: Columns) -> None:
        """Add what was learned from the bytes after these: columns first seen there come
        after this part's, as one pass over both would order them."""
        for name in later.order:
            self.order.setdefault(name, None)
        for name, kinds in later.kinds.items():
            self.kinds.setdefault(name, set()).update(kinds)


#: Whether a large log is read (and its row groups encoded) on two threads when
#: ``LOGFORENSICS_WORKERS`` does not ask for it. Not yet: on a 2-core machine two threads took
#: 7-25% longer than one over a 1 GiB log, for 20-30% more CPU time (``bench/README.md``).
TWO_BY_DEFAULT = False


def two_cores(size: int) -> bool:
    """Whether ``size`` bytes of log get two threads: by ``TWO_BY_DEFAULT``, or where
    ``LOGFORENSICS_WORKERS`` asks for two or more (``ingest.parallel.worker_count``)."""
    asked = TWO_BY_DEFAULT or bool(os.environ.get("LOGFORENSICS_WORKERS", "").strip())
    return asked and size >= SPLIT_MIN_BYTES and worker_count(size) > 1


def limited(parts: Iterator[bytes], limit: int) -> Iterator[bytes]:
    """``parts`` up to ``limit`` bytes: the second pass reads what the first read, even of a
    log that has grown since."""
    for block in parts:
        if len(block) >= limit:
            if limit:
                yield block[:limit]
            return
        limit -= len(block)
        yield block


def learn(files: Sequence[tuple[str, str | None]], wanted: Collection[str], columns: dict[tuple[str, str], int],
           split: bool) -> tuple[Columns, list[int], bool]:
    """The first pass: the logs' columns and their kinds, how many bytes of each were read,
    and whether a log was read in two halves."""
    first = Columns(wanted)
    sizes = []
    halved = False
    for path, node in files:
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0  # the reader reports it
        halves = choose_ranges(path, size, size // 2 + 1) if split and two_cores(size) else []
        if len(halves) == 2:
            later = Columns(wanted)
            reader = threading.Thread(target=later.read_range, args=(path, node, halves[1], {}),
                                      name="parquet-columns", daemon=True)
            reader.start()
            try:
                got = first.read(path, node, columns, halves[0][1])
            finally:
                reader.join()
            if later.error is not None:
                raise later.error
            first.absorb(later)
            sizes.append(got + later.bytes)
            halved = True
        else:
            sizes.append(first.read(path, node, columns))
    return first, sizes, halved
