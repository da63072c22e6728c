"""The incremental parser: bytes in, events out, for files and live streams alike.

``IncrementalParser.feed(chunk)`` accepts any slice of the log's bytes and returns the
events of the lines it completed; ``close()`` finishes the last line and any open
traceback. Reading a file is feeding it in blocks, so ``parse``, ``summary``, ``diff``
and ``watch`` all run this one code path.

Physical lines are split on ``\\n`` only (a bare ``\\r`` is a tqdm redraw, not a new
line), so line numbers match ``grep -n``. A line is kept whole up to ``max_line_bytes``
(32 MiB: a bound on memory, not on time); a longer one is cut there and the rest of it
skipped, with a warning. The pieces of a line that spans many chunks are joined once,
when it ends (joined at each chunk, a line of N MB cost N^2 copies); the classifier reads
a long line's records on its first part only (``fastpath.LINE_LIMIT``), so every line
costs time linear in its length.

``feed`` hands each chunk's complete lines to ``LineClassifier.classify_block`` at once
(masking, splitting and decoding in C), and skips the traceback assembler for a block
with no traceback in it. ``line_offset`` lets a parser start in the middle of a file:
that is how ``parallel`` runs this parser on byte ranges.

Whether the stream is text at all (``segments.looks_binary``, which decides how a line
that is not valid UTF-8 is read) is judged from its first ``SNIFF_BYTES``, however they
are cut into chunks: until that many have come (or the stream ends), lines go on being
read while every byte so far is valid UTF-8, and from the first byte that is not, the
bytes wait for the verdict (or for counts that already decide it: random bytes are plainly
not text after a few KiB). ``watch``'s small chunks and a batch's large blocks read alike;
a stream that pauses while bytes wait is judged on what came (``settle``: ``watch`` asks
when nothing has come for a while), so a short live log with such a byte early is read on.

``feed_bulk`` reads the same lines with the same state, for batch reading: runs of lines
that the compiled scanner (``bulk.py``) takes go to a sink as columns, every other line
goes through the classifier and the traceback assembler as in ``feed``, in order. A sink
that can take runs of unrecognised lines in bulk (``take_others``: ``model.columns``, with
``read/other.py``) gets them where no traceback is open, with the same result.

A record that a concurrent writer tore across two physical lines is read as one record of
the first line, ending on the second, in both (``_joint``): a JSONL record of NVIDIA
Dynamo's whose first part is no whole record and the next line completes it, or a record
of start-up the grammar knows followed by a line that begins mid-record, when the two
together are that record with more of its fields (a ``server_args`` dump: the brackets its
first part left open, closed). Where a block ends does not change that: a block's last line
that may be such a first part waits, as the rest of an unfinished line does, for the next
block (:meth:`IncrementalParser._torn_cut`), so it is read with the line after it wherever
the tear falls; one line waits at most (a first part of at most ``LINE_LIMIT``), and the
line after it is bounded as any line is (``max_line_bytes``, counted in ``long_lines``). A
live stream that pauses (``settle``) reads a waiting line as it is: a torn record's rest
follows its first part at once. The parallel reader's ranges begin at a batch record after
another (``ingest.parallel``), which is neither a first part nor a rest: no tear crosses them.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..events import PHASE_OF_KIND, Event
from .assemble import ASSEMBLED, TracebackAssembler
from .fastpath import _MASK, LINE_LIMIT, PARTIAL_NOTE, LineClassifier
from .other import LIMIT as OTHER_LIMIT
from .segments import (
    DYNAMO_JSON,
    GUTTERS,
    SNIFF_BYTES,
    Margin,
    PasteMargin,
    looks_binary,
    rejoin,
    text_counts,
    torn_json,
)
from .values import literal_structure

if TYPE_CHECKING:
    from .bulk import BulkSink, LineScanner

#: Bytes read (and events built) at a time. Small on purpose: a block's events are alive
#: until the run model has seen them, and 32 KiB of them (about 250 lines) stay in the CPU
#: caches and mostly die before the garbage collector's first generation fills; 1 MiB
#: blocks made reading a serving log about 30% slower.
BLOCK_SIZE = 32 << 10
MAX_LINE_BYTES = 32 << 20
_MAX_WARNINGS = 20
#: How a JSONL record of Dynamo begins (``segments.DYNAMO_JSON``), as bytes.
_JSON_HEAD = DYNAMO_JSON.encode("ascii")
#: Records whose first part a torn line may be: those that place a rank in a phase of its
#: start-up (``max_total_num_tokens=...``, ``Load weight end. ...``) and the dump of the
#: server's settings. Never batch statistics: the bulk reader takes those in columns, and
#: both readers must read a log alike.
_TORN_HEADS = frozenset(PHASE_OF_KIND) - {"decode_batch", "prefill_batch"} | {"server_args"}


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _continues(ev: Event) -> bool:
    """Whether ``ev`` may be the rest of a torn record: unrecognised, without stamp or rank,
    not indented (an indented line continues a traceback or a message, not a torn record)."""
    return ev.kind == "other" and ev.ts is None and ev.rank is None and not ev.text[:1].isspace()


def _figures(ev: Event) -> int:
    """How many of a record's fields are figures, not text: a record's free text after its
    words ("Detected fp8 checkpoint." then anything) takes any next line, so only figures
    gained tell a torn record's rest."""
    return sum(not isinstance(v, str) for v in ev.fields.values())


def _open_brackets(text: str) -> int:
    """How many brackets ``text`` leaves open, outside quoted strings: more than 0 for a
    dump (``ServerArgs(...)``, ``{...}``) cut short."""
    return literal_structure(text)[1]


@dataclass
class ParseStats:
    """What the parser saw, for coverage and warnings."""

    lines: int = 0
    bytes: int = 0
    long_lines: int = 0  # lines cut at ``max_line_bytes``
    #: lines longer than ``fastpath.LINE_LIMIT``: read on their first part, kept whole (counted by the classifier)
    partial_lines: int = 0
    decode_errors: int = 0  # lines that were not valid UTF-8 (set from the classifier)
    unterminated_last_line: bool = False
    warnings: list[str] = field(default_factory=list)

    def add(self, later: ParseStats) -> None:
        """Count the lines of a part of the log read after these (by another parser)."""
        self.lines += later.lines
        self.bytes += later.bytes
        self.long_lines += later.long_lines
        named = self.partial_lines > 0  # the file's first line read on its first part is named once
        self.partial_lines += later.partial_lines
        self.unterminated_last_line = later.unterminated_last_line
        told = [w for w in later.warnings if not (named and w.endswith(PARTIAL_NOTE))]
        self.warnings.extend(told[:max(0, _MAX_WARNINGS - len(self.warnings))])


def _plainly_binary(prefix: bytes) -> bool:
    """Whether every stream beginning with ``prefix`` (shorter than ``SNIFF_BYTES``) is judged
    not text by ``looks_binary`` of its first ``SNIFF_BYTES``: the counts of NUL bytes and other
    control characters only grow as bytes follow, and that of replacements loses at most the one
    of a character cut short at the end, while the lengths they are compared with stay within
    ``SNIFF_BYTES``."""
    nul, bad, other = text_counts(prefix)
    return nul * 100 > SNIFF_BYTES or (bad - 1) * 20 > SNIFF_BYTES or other * 20 > SNIFF_BYTES


def _shape_held(buf: Any, pos: int, memo: dict[bytes, Any], coloured: set[bytes]) -> bool:
    """Whether the line of ``buf`` at ``pos`` is of a shape the classifier memoised (plain, or
    in colour): the only lines the bulk scanner may take."""
    raw = buf[pos:buf.index(b"\n", pos)]
    key = (raw if type(raw) is bytes else bytes(raw)).translate(_MASK)
    return key in memo or key in coloured


#: Bytes a margin may take at a line's start (a gutter's spaces, number and mark): the start of a
#: line shorter than this at a block's end waits for the rest of it.
_MARGIN_MOST = 24


class IncrementalParser:
    """Feed bytes, get events. One instance per log file or stream."""

    def __init__(self, file: str | None = None, *, max_line_bytes: int = MAX_LINE_BYTES,
                 node: str | None = None) -> None:
        self.file = file
        self.classifier = LineClassifier(file, node=node)
        self.assembler = TracebackAssembler()
        self.stats = ParseStats()
        self.classifier.stats = self.stats  # it counts the lines it reads on their first part
        self.max_line_bytes = max_line_bytes
        self._tail = b""
        #: the pieces of an unfinished line after ``_tail`` (chunks without a newline), and their length
        self._pieces: list[bytes] = []
        self._pieces_len = 0
        self._overflow = False  # inside an over-long line whose rest is skipped
        #: Lines before the first byte fed: a worker reading a byte range of a file starts
        #: here, so its events carry the line numbers of the whole file (and the caller
        #: gives the verdict on the file's first bytes, :meth:`judged`: they are not fed here).
        self.line_offset = 0
        self._judged = False  # classifier.binary is decided
        self._sniffed = bytearray()  # the stream's first bytes, while it is not
        self._utf8 = codecs.getincrementaldecoder("utf-8")()  # have they all been valid UTF-8?
        self._held = bytearray()  # bytes fed and not read yet: they wait for the verdict
        self._held_bulk: tuple[Any, Any] | None = None  # feed_bulk's scanner and sink, to read them with
        #: a paste's margin before every line (``segments.PasteMargin``): its first lines wait in
        #: ``_margin_held`` for the verdict; then every line loses it, the start of a line cut at a
        #: block's end (fewer bytes than a margin can take) waiting in ``_carry`` for the rest
        self._paste = PasteMargin()
        self._margin_held = bytearray()
        self._carry = b""
        self._line_start = True

    def _admit(self, chunk: bytes) -> bytes | None:
        """The bytes to read now (``chunk``, after any held before it, without the margin a paste
        put before every line), or None while they wait for the verdicts on the stream's first bytes."""
        data = self._admit_text(chunk)
        return None if data is None else self._admit_margin(data)

    def _admit_margin(self, data: bytes, final: bool = False) -> bytes | None:
        """``data`` without the margin a paste put before every line, or None while the first
        lines wait for the verdict (``final``: the stream ended or paused: judged now)."""
        if self._paste.margin is None:
            self._margin_held += data
            if self._paste.judge(self._margin_held, final) is None:
                return None
            data, self._margin_held = bytes(self._margin_held), bytearray()
        return self._dedent(data, self._paste.margin) if self._paste.margin else data

    def _dedent(self, data: bytes, margin: Margin, final: bool = False) -> bytes:
        """Each line of ``data`` without the paste's margin (a line without it is left as it
        is); the bytes of the margins removed are counted as read. ``final``: no more bytes come."""
        if self._carry:
            data, self._carry = self._carry + bytes(data), b""
        last = data.rfind(b"\n")
        start = last + 1 if last >= 0 else (0 if self._line_start else -1)
        if not final and start >= 0 and len(data) - start < _MARGIN_MOST:
            self._carry, data = bytes(data[start:]), data[:start]  # the rest of the line decides
        if margin.gutter:
            head = 0 if self._line_start else data.find(b"\n") + 1
            out = data[:head] + GUTTERS.sub(b"", data[head:]) if head or self._line_start else data
        else:
            k = margin.indent
            out = data.replace(b"\n" + b" " * k, b"\n")
            if self._line_start and out.startswith(b" " * k):
                out = out[k:]
        if data:
            self._line_start = data.endswith(b"\n")
        self.stats.bytes += len(data) - len(out)
        return out

    def _release_margin(self) -> bytes:
        """The bytes that wait for the margin's verdict, judged on what came."""
        return self._admit_margin(b"", final=True) or b""

    def _admit_text(self, chunk: bytes) -> bytes | None:
        """The bytes to read now (``chunk``, after any held before it), or None while they wait
        for the verdict on the stream's first ``SNIFF_BYTES``."""
        if self._judged:
            return chunk
        self._sniffed += chunk[:SNIFF_BYTES - len(self._sniffed)]
        if len(self._sniffed) >= SNIFF_BYTES:
            self._judge()
            if not self._held:
                return chunk
            self._held += chunk
            held, self._held = bytes(self._held), bytearray()
            return held
        if not self._held:
            try:
                self._utf8.decode(chunk)  # (incremental: a character may straddle two chunks)
                return chunk  # the verdict changes nothing for valid UTF-8
            except UnicodeDecodeError:
                pass
        self._held += chunk
        if _plainly_binary(bytes(self._sniffed)):  # the verdict on SNIFF_BYTES, known already
            self._judge()
            held, self._held = bytes(self._held), bytearray()
            return held
        return None

    def judged(self, binary: bool, margin: Margin | None = None) -> None:
        """Take the caller's verdicts on whether the stream is text and what margin a paste put
        before every line (a part of a file whose first bytes it judged): nothing fed waits for
        the parser's own."""
        self.classifier.binary = binary
        self._judged = True
        self._sniffed = bytearray()
        self._paste.margin = margin or Margin()

    def _judge(self) -> None:
        self.classifier.binary = looks_binary(bytes(self._sniffed))
        self._judged = True
        self._sniffed = bytearray()
        self._utf8.reset()

    def feed(self, chunk: bytes) -> list[Event]:
        """Events of every line completed by ``chunk`` (in line order)."""
        if not chunk:
            return []
        admitted = self._admit(chunk)
        if admitted is None:
            return []
        return self._feed_admitted(admitted)

    def _feed_admitted(self, chunk: bytes) -> list[Event]:
        if not chunk:
            return []
        self.stats.bytes += len(chunk)
        if self._overflow:  # still inside an over-long line: skip to its end
            idx = chunk.find(b"\n")
            if idx < 0:
                return []
            chunk = chunk[idx:]
            self._overflow = False
        if chunk.find(b"\n") < 0:  # the line goes on: kept in pieces, joined when it ends
            self._hold(bytes(chunk))
            return []
        data = self._joined_tail() + chunk if self._tail or self._pieces else chunk
        cut = self._torn_cut(data, data.rfind(b"\n"))
        if cut < 0:  # a torn record's first part, alone: it waits for the rest
            self._tail = bytes(data)
            self._cap_tail()
            return []
        self._tail = data[cut + 1:]
        if len(self._tail) > self.max_line_bytes:
            self._cap_tail(data.count(b"\n", 0, cut + 1))
        return self._read_body(data[:cut])

    def _torn_cut(self, data: bytes, cut: int) -> int:
        """Where the lines to read now end (``cut``: the last newline of ``data``): before
        the last line when it may be the first part of a record that a concurrent writer
        tore (a JSONL record of Dynamo's that is no whole record, ``segments.torn_json``, or
        a record of start-up, ``_TORN_HEADS``), so that it waits for the line that may
        complete it in the next block, as the rest of an unfinished line does; -1 when it
        is the first. So a tear is read alike wherever a block ends."""
        start = data.rfind(b"\n", 0, cut) + 1
        if cut - start > LINE_LIMIT or cut <= start:
            return cut
        head = bytes(data[start:cut])
        if not _utf8(head):
            return cut
        if head.startswith(_JSON_HEAD):
            torn = torn_json(head.decode("utf-8"))
        else:
            torn = self.classifier.last_kind(head) in _TORN_HEADS
        return start - 1 if torn else cut

    def _cap_tail(self, before: int = 0) -> None:
        """Bound what waits: the unfinished line in ``_tail`` (after a first part that waits
        with it) is cut at ``max_line_bytes`` (a warning, counted in ``long_lines``), and the
        rest of it skipped. ``before``: lines being read now, before those of ``_tail``."""
        done = self._tail.rfind(b"\n") + 1  # a waiting first part (one whole line) before it
        if len(self._tail) - done > self.max_line_bytes:
            line = self.line_offset + self.stats.lines + before + 1 + self._tail.count(b"\n", 0, done)
            self._tail = self._tail[:done] + self._truncate(self._tail[done:], line)
            self._overflow = True

    def _read_body(self, body: bytes) -> list[Event]:
        """The events of the whole lines ``body`` (without its last newline), numbered on."""
        first = self.line_offset + self.stats.lines + 1
        done = self.classifier.classify_block(body, first, self.max_line_bytes)
        if done is None:  # an over-long line: cut it, line by line
            return self._feed_lines(body.split(b"\n"))
        events, openers = done
        events, openers = self._rejoin_block(body, first, events, openers)
        self.stats.lines += body.count(b"\n") + 1
        assembler = self.assembler
        if not openers and assembler.idle and first > 1:  # no multi-line record here: nothing to assemble
            return events
        out: list[Event] = []
        for ev in events:
            if assembler.idle and not assembler.opens(ev):
                out.append(ev)
            else:
                out.extend(assembler.step(ev))
        return out

    def feed_bulk(self, chunk: bytes, scanner: LineScanner, sink: BulkSink) -> None:
        """``feed``, with the events going to ``sink``: in columns where ``scanner`` takes
        the lines, as events otherwise. The parser's state and statistics end up exactly
        as ``feed`` leaves them. The chunk is not copied, and nothing keeps it or a view of
        it: it may be a ``bytearray`` the caller reads the next chunk into.
        """
        if not chunk:
            return
        admitted = self._admit(chunk)
        if admitted is None:
            self._held_bulk = (scanner, sink)
            return
        self._feed_bulk_admitted(admitted, scanner, sink)

    def _feed_bulk_admitted(self, chunk: bytes, scanner: LineScanner, sink: BulkSink) -> None:
        if not chunk:
            return
        self.stats.bytes += len(chunk)
        if self._overflow:  # still inside an over-long line: skip to its end
            idx = chunk.find(b"\n")
            if idx < 0:
                return
            chunk = chunk[idx:]
            self._overflow = False
        last = chunk.rfind(b"\n")
        if last < 0:  # the line goes on (bytes: the chunk may be reused)
            self._hold(bytes(chunk))
            return
        tail = self._joined_tail()
        idx = chunk.find(b"\n")  # where the line begun in an earlier chunk ends
        if tail and self._torn_cut(tail + chunk[:idx + 1], len(tail) + idx) < len(tail) + idx:
            idx = chunk.find(b"\n", idx + 1)  # a torn record's first part: read with the line after it
        cut = self._torn_cut(chunk, last)  # a torn record's first part at the end waits for the next chunk
        if idx < 0 or cut < (idx if tail else 0):
            self._hold(bytes(chunk))
            return
        self._tail = bytes(chunk[cut + 1:])
        if len(self._tail) > self.max_line_bytes:  # as feed: before the lines are counted
            self._cap_tail(tail.count(b"\n") + chunk.count(b"\n", 0, cut + 1))
        first = line = self.line_offset + self.stats.lines + 1
        pos = 0
        if tail:  # the line begun in an earlier chunk (and a torn record's rest)
            line = self._bulk_lines(tail + chunk[:idx + 1], 0, len(tail) + idx + 1, line, scanner, sink)
            pos = idx + 1
        # the scanner takes every whole line of what it is given: never the line that waits
        body = chunk if cut == last else bytes(chunk[:cut + 1])
        line = self._bulk_lines(body, pos, cut + 1, line, scanner, sink)
        self.stats.lines += line - first

    def _hold(self, piece: bytes) -> None:
        """Keep ``piece``, a part of a line that has not ended; past ``max_line_bytes`` the
        line is cut (a warning) and the rest of it skipped."""
        self._pieces.append(piece)
        self._pieces_len += len(piece)
        if len(self._tail) + self._pieces_len > self.max_line_bytes:
            self._joined_tail()
            self._cap_tail()

    def _joined_tail(self) -> bytes:
        """The unfinished line's bytes so far, in one piece (the pieces are then let go)."""
        if self._pieces:
            self._tail = b"".join([self._tail, *self._pieces])
            self._pieces = []
            self._pieces_len = 0
        return self._tail

    def _bulk_lines(self, buf: bytes, pos: int, end: int, line: int, scanner: LineScanner, sink: BulkSink) -> int:
        """Read the whole lines of ``buf[pos:end]``, the first numbered ``line``; returns the
        number of the line after them."""
        assembler = self.assembler
        classifier = self.classifier
        classify = classifier.classify
        # runs of unrecognised text, where the sink takes them (``read.other``)
        others = getattr(sink, "take_others", None) if self.max_line_bytes >= OTHER_LIMIT else None
        memo, coloured = classifier.memo, classifier.coloured
        scanner.learn()
        scanner.set_ready(sink.ready_table(scanner.rank_names))
        told = True  # the scanner knows the model as it stands (else: told before its next scan)
        while pos < end:
            if assembler.idle and line > 1:  # a file's first line may lead into a record
                # after a line read exactly, the scanner is asked again only for a line of a shape it
                # may hold (one the classifier memoised): a run of another program's lines, each of a
                # shape of its own, goes the exact way without a scan and a new table per line
                if told or _shape_held(buf, pos, memo, coloured):
                    if not told:
                        scanner.learn()
                        scanner.set_ready(sink.ready_table(scanner.rank_names))
                        told = True
                    seg = scanner.scan(buf, pos, line)
                    if seg[1]:
                        sink.apply(seg, line, scanner, buf)
                        line += seg[1]
                        scanner.taken += seg[1]
                    pos = seg[0]
                    if pos >= end:
                        break
                if others is not None:
                    pos, n, bad = others(buf, pos, end, line, classifier.binary)
                    if n:  # such lines change nothing the scanner is told: scan on
                        line += n
                        classifier.decode_errors += bad
                        continue
            nl = buf.index(b"\n", pos)
            raw = buf[pos:nl]
            if type(raw) is not bytes:  # a line of a reused buffer: events keep their own copy
                raw = bytes(raw)
            if len(raw) > self.max_line_bytes:
                raw = self._truncate(raw, line)
            out: list[Event] = []
            events = classify(raw, line)
            if events and (raw.startswith(_JSON_HEAD) or events[-1].kind in _TORN_HEADS):
                joined = self._rejoined(raw, buf, nl, end, line)
                if joined is not None:  # a torn record and the line that completes it: one record
                    events, nl = joined
                    line += 1
            for ev in events:
                if assembler.idle and not assembler.opens(ev):
                    out.append(ev)
                else:
                    out.extend(assembler.step(ev))
            sink.observe(out)
            line += 1
            pos = nl + 1
            told = False
        return line

    def _rejoin_block(self, body: bytes, first: int, events: list[Event],
                      openers: bool) -> tuple[list[Event], bool]:
        """``events`` of the lines of ``body`` (the first numbered ``first``) with each torn
        record and the line that completes it read as one record (:meth:`_joint`)."""
        heads = [ev.line for prev, ev in zip(events, events[1:])
                 if ev.line == prev.line + 1 and _continues(ev) and prev.kind in _TORN_HEADS]
        if not heads and _JSON_HEAD not in body:
            return events, openers
        lines = body.split(b"\n")
        joints: dict[int, list[Event]] = {}
        candidates = sorted({first + i for i, raw in enumerate(lines) if raw.startswith(_JSON_HEAD)}
                            | {line - 1 for line in heads})
        for line in candidates:
            i = line - first
            if i + 1 >= len(lines) or line in joints or line - 1 in joints:
                continue
            got = self._joint(lines[i], lines[i + 1], line)
            if got is not None:
                joints[line] = got
        if not joints:
            return events, openers
        replaced = set(joints) | {line + 1 for line in joints}
        out: list[Event] = []
        for ev in events:
            if ev.line not in replaced:
                out.append(ev)
            elif ev.line in joints:
                out.extend(joints.pop(ev.line))
        return out, openers or any(ev.kind in ASSEMBLED for ev in out)

    def _rejoined(self, raw: bytes, buf: Any, nl: int, end: int, line: int) -> tuple[list[Event], int] | None:
        """For ``feed_bulk``: the events of the torn record on ``raw`` (line ``line``, ending
        at ``nl`` in ``buf``) joined with the next line, and where that line ends; None
        unless the next line, in this chunk, completes it."""
        if nl + 1 >= end or buf[nl + 1:nl + 2].isspace() or buf[nl + 1:nl + 2] == b"\n":
            return None
        nxt = buf.index(b"\n", nl + 1)
        got = self._joint(raw, bytes(buf[nl + 1:nxt]), line)
        return None if got is None else (got, nxt)

    def _joint(self, head: bytes, rest: bytes, line: int) -> list[Event] | None:
        """The events of lines ``line`` (``head``) and ``line + 1`` (``rest``) read as one
        record, when a concurrent writer tore that record across them: ``head`` is a JSONL
        record of Dynamo's that ``rest`` completes (``segments.rejoin``), or ``head`` ends
        in a record the grammar knows, ``rest`` begins mid-record (alone, an unrecognised
        line without stamp or rank), and together they are that record with more of its
        figures. The joined record ends on ``line + 1``."""
        classify = self.classifier.classify
        # reading a line again must count nothing again: only valid UTF-8, never a line read in part
        if len(head) + len(rest) > LINE_LIMIT or not _utf8(head) or not _utf8(rest):
            return None
        if head.startswith(_JSON_HEAD):
            whole = rejoin(head.decode("utf-8"), rest.decode("utf-8"))
            if whole is None:
                return None
            return [ev._replace(end_line=line + 1) for ev in classify(whole.encode("utf-8"), line)]
        if not rest or rest[:1].isspace():
            return None
        alone = classify(head, line)
        if not alone or alone[-1].kind not in _TORN_HEADS:
            return None
        after = classify(rest, line + 1)
        if len(after) != 1 or not _continues(after[0]):
            return None
        joined = classify(head + rest, line)
        if [ev.kind for ev in joined] != [ev.kind for ev in alone]:
            return None
        if _figures(joined[-1]) <= _figures(alone[-1]) and not (
                _open_brackets(alone[-1].text) > 0 and _open_brackets(joined[-1].text) == 0):
            return None  # neither more figures nor a dump's brackets closed: not that record's rest
        return joined[:-1] + [joined[-1]._replace(end_line=line + 1)]

    def _feed_lines(self, lines: list[bytes]) -> list[Event]:
        out: list[Event] = []
        classify = self.classifier.classify
        assembler = self.assembler
        lineno = self.line_offset + self.stats.lines
        for raw in lines:
            lineno += 1
            if len(raw) > self.max_line_bytes:
                raw = self._truncate(raw, lineno)
            for ev in classify(raw, lineno):
                if assembler.idle and not assembler.opens(ev):
                    out.append(ev)
                else:
                    out.extend(assembler.step(ev))
        self.stats.lines = lineno - self.line_offset
        return out

    def settle(self) -> list[Event]:
        """Events of the bytes that wait for the verdict on the stream's first ``SNIFF_BYTES``
        (a byte that is not UTF-8 came early, and the rest has not yet), the stream judged
        on what came, as at its end. For a live follower when its stream pauses: a server
        that dies soon after such a byte writes no more, and its crash must not wait for
        bytes that never come. The verdict can differ from that of the whole stream's
        first ``SNIFF_BYTES`` only if the bytes after the pause would change it."""
        if self._judged and self._paste.margin is None and self._margin_held:
            # every line so far with a margin: judged on them, as at the stream's end
            held = self._release_margin()
            bulk, self._held_bulk = self._held_bulk, None
            if bulk is not None:
                self._feed_bulk_admitted(held, *bulk)
                return []
            return self._feed_admitted(held)
        if self._judged or not self._sniffed or not self._held:
            return self._release()
        self._judge()
        held, self._held = bytes(self._held), bytearray()
        bulk, self._held_bulk = self._held_bulk, None
        if bulk is not None:
            self.feed_bulk(held, *bulk)
            return []
        return self.feed(held)

    def waiting(self) -> bool:
        """Whether a whole line waits for the next (the first part of a torn record, maybe)."""
        return b"\n" in self._joined_tail()

    def _release(self) -> list[Event]:
        """The stream paused: a line that waits for the rest of a torn record (the whole
        lines before the unfinished one in ``_tail``) is read as it is; a writer that tore
        a record writes its rest at once."""
        done = self._joined_tail().rfind(b"\n") + 1
        if not done:
            return []
        body, self._tail = self._tail[:done - 1], self._tail[done:]
        return self._read_body(body)

    def close(self) -> list[Event]:
        """Finish the last (unterminated) line and any open traceback."""
        out: list[Event] = []
        if not self._judged and self._sniffed:  # the stream ended before SNIFF_BYTES: judged on all of it
            self._judge()
            held, self._held = bytes(self._held), bytearray()
            if held and self._held_bulk is not None:
                self.feed_bulk(held, *self._held_bulk)
            elif held:
                out.extend(self.feed(held))
        if self._paste.margin is None and self._margin_held:  # every line with a margin: judged on all of them
            held = self._release_margin()
            if self._held_bulk is not None:
                self._feed_bulk_admitted(held, *self._held_bulk)
            else:
                out.extend(self._feed_admitted(held))
        self._held_bulk = None
        if self._carry:  # the start of the last line, unended
            carry, self._carry = self._carry, b""
            margin = self._paste.margin or Margin()
            piece = self._dedent(carry, margin, final=True) if margin else carry
            self.stats.bytes += len(piece)
            self._hold(piece)
        tail = self._joined_tail()
        if b"\n" in tail:  # a torn record's first part waited here: the lines, joined where they make one
            self.stats.unterminated_last_line = not tail.endswith(b"\n")
            out.extend(self._read_body(tail[:-1] if tail.endswith(b"\n") else tail))
        elif tail:
            self.stats.unterminated_last_line = True
            self.stats.lines += 1
            for ev in self.classifier.classify(tail, self.line_offset + self.stats.lines):
                out.extend(self.assembler.step(ev))
        self._tail = b""
        self._overflow = False
        out.extend(self.assembler.close())
        return out

    def pending(self) -> Event | None:
        """An unfinished traceback, for live display (does not change later output)."""
        return self.assembler.pending()

    def _truncate(self, raw: bytes, lineno: int | None = None) -> bytes:
        self.stats.long_lines += 1
        if len(self.stats.warnings) < _MAX_WARNINGS:
            where = lineno if lineno is not None else self.line_offset + self.stats.lines + 1
            self.stats.warnings.append(
                f"line {where}: longer than {self.max_line_bytes} bytes; "
                f"only its first {self.max_line_bytes} bytes were read"
            )
        return raw[: self.max_line_bytes]
