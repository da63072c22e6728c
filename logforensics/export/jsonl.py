"""``parse --format jsonl``: one JSON object per event, written in bounded memory.

:func:`event_line` is the row of one event (``Event.to_dict`` as ``json.dumps`` writes
it). :func:`write_jsonl` writes a file's rows: where the compiled row writer is built
(``read.emit``), the lines whose shape has a plain plan are written in C, a block at a
time, straight from the bytes, and so are runs of unrecognised lines (``read.other``);
every other line is read on the exact path (the parser's
events, in line order) and written by :func:`event_line`. The output is the same byte for
byte either way; memory is one block of input and its rows.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Collection, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import IO, Any

from .. import native
from ..events import Event
from ..ingest.files import blocks
from ..ingest.parallel import BULK_BLOCK_SIZE
from ..read import emit
from ..read.parser import IncrementalParser
from .sink import ScanSink


def event_line(ev: Event, ascii_only: bool = False) -> str:
    """The JSON row of one event, newline included (``ascii_only``: other characters as
    ``\\u`` escapes, for a stream that is not UTF-8)."""
    import json

    return json.dumps(ev.to_dict(), ensure_ascii=ascii_only, default=str) + "\n"


class _RowSink(ScanSink):
    """Where ``feed_bulk`` sends a file's lines: rows written in C (runs of unrecognised
    lines too: ``take_others``), events by :func:`event_line`."""

    def __init__(self, out: IO[bytes], wanted: Collection[str], encoding: str, errors: str,
                 scanner: emit.JsonlEmitter | None) -> None:
        self.out = out
        self.wanted = wanted
        self.encoding = encoding
        self.errors = errors
        self.scanner = scanner

    def apply(self, seg: Sequence[Any], first_line: int, scanner: emit.JsonlEmitter, buf: bytes) -> None:
        rows = seg[2]  # the writer's buffer (not a copy), handed back once written
        self.out.write(rows)
        rows.release()
        scanner.count(seg[3])

    def observe(self, events: Sequence[Event]) -> None:
        wanted = self.wanted
        rows = [event_line(ev) for ev in events if not wanted or ev.kind in wanted]
        if rows:
            self.out.write("".join(rows).encode(self.encoding, self.errors))


def fast_encoding(encoding: str | None) -> bool:
    """Whether rows written in C (ASCII, file names in UTF-8) can go to a stream of this encoding."""
    try:
        return encoding is not None and codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        return False


def write_jsonl(path: str, out: IO[bytes], *, name: str | None = None, node: str | None = None,
                wanted: Collection[str] = (), progress: Callable[[int], None] | None = None,
                warn: Callable[[str], None] | None = None, errors: str = "strict") -> JsonlStats:
    """Write the rows of every event of the log ``path`` (kinds ``wanted``, or all) to
    ``out`` (a binary stream taking UTF-8), as ``pipeline.iter_events`` would give them.

    Without the compiled row writer (``native.available()``), every row is the parser's
    event written by :func:`event_line`: the reference the compiled rows equal byte for byte.
    """
    parser = IncrementalParser(name or path, node=node)
    if not native.available():
        sink = _RowSink(out, wanted, "utf-8", errors, None)
        with closing(blocks(path, progress, BULK_BLOCK_SIZE, warn=warn)) as parts:
            for block in parts:
                sink.observe(parser.feed(block))
        sink.observe(parser.close())
        return JsonlStats(parser.stats.lines, 0, {}, 0)
    scanner = emit.JsonlEmitter(parser.classifier, parser.file, node, frozenset(wanted), "utf-8", errors)
    sink = _RowSink(out, wanted, "utf-8", errors, scanner)
    # buffers read into again and again (C copies what a row keeps), by a thread of their own
    # where the input is a file, ended with the reading, whatever ends it
    with closing(blocks(path, progress, BULK_BLOCK_SIZE, warn=warn, reuse=True, ahead=True)) as parts:
        for block in parts:
            parser.feed_bulk(block, scanner, sink)
    sink.observe(parser.close())
    return JsonlStats(parser.stats.lines, scanner.taken, dict(scanner.by_kind), scanner.refused)


@dataclass(frozen=True)
class JsonlStats:
    """How a file's rows were written: its lines, those written in C (all, and by kind),
    and the plain plans left to the exact path."""

    lines: int
    taken: int
    by_kind: dict[str, int]
    refused: int
