"""Classify physical lines into record events: the grammar, memoised by line shape.

Lark's LALR parser costs about 100 µs a line in CPython, and ``Decode batch`` /
``Prefill batch`` / HTTP access lines are over 99% of a serving log, so parsing every
line with Lark would read a gigabyte in hours. Instead, each line is reduced to its
*shape*: the raw bytes with every digit replaced by ``0`` (``bytes.translate``, a C
loop). The first line of a shape is cut into records and parsed by the grammar; the
resulting plans (token offsets plus converters, see ``grammar.Plan``) are stored
under the shape. Later lines of the same shape differ only in their digits, the
grammar never distinguishes one digit from another, and masking keeps lengths, so the
grammar would put every token at the same offsets: the stored plans are applied by
slicing. The values are produced by the same ``grammar.build_event`` either way, and
``tests/test_fastpath.py`` checks the two paths agree on every fixture line.

Only pure-ASCII lines without control characters are memoised (byte offsets equal
character offsets there); the memo is bounded, and plans whose meaning depended on
digit values are never stored.

A line longer than ``LINE_LIMIT`` characters (a base64 payload, a tensor dump, minified
JSON) is read on its first part only: that part is cleaned, cut into records and matched
by the grammar, and the rest of the line belongs to the text of its last record, so the
line is kept whole in every output. The grammar and the regular expressions of
``segments.py`` cost time per character they read (Lark's lexer tries each terminal at
each token, and some terminals scan to the line's end), so reading whole lines made time
grow faster than the line; with the bound, what a line costs beyond it is copying and
decoding. Such lines are counted (``ParseStats.partial_lines``, ``partial_lines`` in the
summary's coverage).

:meth:`LineClassifier.classify_block` is the same memo applied to a block of lines at
once, for the parser's hot loop: masking, splitting and decoding are done once per
block in C, and the commonest case (a shape that is one record filling the line) is
built inline, without a function call per line.
"""

from __future__ import annotations

from typing import Any

from ..events import PHASE_OF_KIND, Event
from .assemble import ASSEMBLED, TRACEBACK_OPENERS
from .grammar import free_text_plan, plan_record
from .plan import Fields, Plan, build_event
from .segments import clean, needs_clean, segment, wrapper_nodes, wrapper_procs

_MASK = bytes.maketrans(b"123456789", b"000000000")

#: Lines longer than this are not memoised (server_args dumps, garbage).
_MEMO_MAX_LINE = 4096
#: Characters of a line that are read (see the module): the longest records of the real logs
#: and fixtures are ServerArgs dumps of about 11 KiB and lines of tqdm redraws of about 14 KiB.
LINE_LIMIT = 16384

_OTHER = Plan.make("other", None, None, ())

Entry = tuple[tuple[int, int, Plan], ...]

_new_tuple = tuple.__new__


#: Records that teach their process's rank (``LineClassifier._by_process``): a scheduler's
#: records of start-up, which every reader reads one by one (never in bulk), so that both
#: readers learn alike.
_TEACHES = frozenset(PHASE_OF_KIND) - {"decode_batch", "prefill_batch"}


#: Processes whose ranks a reading keeps (``LineClassifier.proc_ranks``): a log of more
#: names more pids than any launch has ranks.
MAX_PROCS = 4096


#: How the warning that names a file's first line read on its first part ends (one per file:
#: ``ParseStats.add`` keeps the first part's).
PARTIAL_NOTE = "(lines so read: coverage.partial_lines)"


def teach_procs(known: dict[str, str | None], later: dict[str, str | None]) -> None:
    """Add to ``known`` (the ranks processes named in a part of a log) what a later part's
    reading alone learned (``LineClassifier.proc_ranks``), as one reading of both parts
    learns it: a process that named two ranks names none."""
    for proc, rank in later.items():
        if proc not in known:
            if len(known) < MAX_PROCS:
                known[proc] = rank
        elif known[proc] != rank:
            known[proc] = None


def reads_differ(known: dict[str, str | None], reads: set[tuple[str, bool, str | None]] | None,
                 learned: dict[str, str | None]) -> bool:
    """Whether records of a part read alone (``LineClassifier.proc_reads``; ``learned``: its
    ``proc_ranks``) would have been given other ranks had the reading known ``known``, the
    ranks the parts before it taught."""
    if not known or not reads:
        return bool(known) and reads is None
    full = len(known) + len(learned) > MAX_PROCS  # one reading might not have learned a process the part did
    for proc, was_known, rank in reads:
        if proc in known:
            if known[proc] != rank if was_known else known[proc] is not None:
                return True
        elif was_known and full:
            return True
    return False


def _by_its_process(plan: Plan) -> bool:
    """Whether a record behind a wrapper naming its process is read with the process's
    rank in mind: it teaches the rank (a start-up record of a rank), or may take it (a
    record that names none and opens or continues a traceback), or is a rank's own
    traceback (its header: which process printed the rank is noted, ``shared``)."""
    return plan.kind in _TEACHES or plan.kind in TRACEBACK_OPENERS if plan.rank is not None \
        else plan.kind in TRACEBACK_OPENERS


#: Processes kept for a rank that more than one printed (``LineClassifier.shared``).
MAX_SHARING = 8


def note_sharing(first: dict[str, str], shared: dict[str, list[str]], rank: str, proc: str) -> None:
    """Note that ``proc`` printed ``rank``: ``first`` the process that printed each rank
    first, ``shared`` the ranks that more than one printed, with those processes in order."""
    owner = first.get(rank)
    if owner is None:
        if len(first) < MAX_PROCS:
            first[rank] = proc
    elif owner != proc:
        procs = shared.setdefault(rank, [owner])
        if proc not in procs and len(procs) < MAX_SHARING:
            procs.append(proc)


def merge_sharing(first: dict[str, str], shared: dict[str, list[str]], later_first: dict[str, str],
                  later_shared: dict[str, list[str]]) -> None:
    """Add a later part's reading (its ``first`` and ``shared``) as one reading of both notes it."""
    for rank, procs in later_shared.items():
        for proc in procs:
            note_sharing(first, shared, rank, proc)
    for rank, proc in later_first.items():
        note_sharing(first, shared, rank, proc)


class LineClassifier:
    """Turns one physical line (bytes, no newline) into its record events."""

    def __init__(self, file: str | None = None, memo_limit: int = 200_000, node: str | None = None) -> None:
        self.file = file
        #: The node of every record whose line has no wrapper naming another one.
        self.node = node
        #: Shapes whose wrappers name a node (Ray ``ip=``, a pod): the name has digits, so it
        #: is read from each line again; such shapes are never in ``plain``.
        self.node_shapes: set[bytes] = set()
        #: Shapes whose wrappers name a process (Ray's ``pid=``) and whose records teach the
        #: process's rank or may take it (``_by_its_process``): read from each line again
        #: (never in ``plain`` or ``wrapped_log``), so every such record is an event and a
        #: record that names no rank can take its process's (``_by_process``). Other records
        #: behind such a wrapper (batch statistics: most of a log) are read as any others.
        self.proc_shapes: set[bytes] = set()
        #: The rank each process's records named, by its wrapper: None once they named two.
        self.proc_ranks: dict[str, str | None] = {}
        #: What the rank-less records that may take their process's rank were given from
        #: ``proc_ranks`` as it stood: (process, whether it was known, its rank). A part of a
        #: log read alone (``ingest.parallel``) gave them what the parts before it would have
        #: changed only if those taught one of these processes; None once more than
        #: ``MAX_PROCS`` were kept.
        self.proc_reads: set[tuple[str, bool, str | None]] | None = set()
        #: The process wrapper that printed each rank's records first, and the ranks that more
        #: than one process printed (two engines' TP0 under two Ray workers): their processes.
        self.rank_procs: dict[str, str] = {}
        self.shared: dict[str, list[str]] = {}
        self.memo: dict[bytes, Entry] = {}
        #: The subset of ``memo`` that ``classify_block`` builds inline: shapes that are
        #: one record filling the whole line and cannot open a traceback.
        self.plain: dict[bytes, Plan] = {}
        #: ``plain``'s entries in the order they were added, for readers that take the new
        #: ones from time to time (the bulk scanner) without walking the whole dict
        self.plain_log: list[tuple[bytes, Plan]] = []
        #: Shapes that are one record from a fixed offset to the line's end, after a wrapper
        #: that names no node (``docker compose``'s ``sglang-1  | ``): (key, plan, offset), in
        #: the order learned, for the bulk scanner (which applies the plan from the offset)
        self.wrapped_log: list[tuple[bytes, Plan, int]] = []
        #: Shapes of lines in colour given to ``wrapped_log`` (their record is plain text)
        self.coloured: set[bytes] = set()
        self.memo_limit = memo_limit
        self.grammar_calls = 0
        self.decode_errors = 0
        #: The stream does not look like text (``segments.looks_binary`` of its first bytes):
        #: its lines with undecodable bytes are ``other`` without asking the grammar.
        self.binary = False
        #: Where the lines read on their first part only are counted (``ParseStats``: the
        #: parser's), if anywhere: an object with an int ``partial_lines``.
        self.stats: Any = None

    def share_memo(self, other: LineClassifier) -> None:
        """Use ``other``'s memo: plans do not depend on the file or on the line number,
        so a process that reads several parts of a log learns each shape once."""
        self.memo = other.memo
        self.plain = other.plain
        self.plain_log = other.plain_log
        self.wrapped_log = other.wrapped_log
        self.coloured = other.coloured
        self.node_shapes = other.node_shapes
        self.proc_shapes = other.proc_shapes

    def plans_since(self, seen: tuple[int, int]) -> tuple[list[tuple[bytes, Plan, int]], tuple[int, int]]:
        """The shapes a reader of plans (the bulk scanner, the C writers) takes from time to
        time, learned since ``seen`` (the lengths of ``plain_log`` and ``wrapped_log`` then;
        the whole memo is never walked again): each as (key, plan, offset of its record, 0
        for a plain one), and the lengths now."""
        plain, wrapped = seen
        items = [(key, plan, 0) for key, plan in self.plain_log[plain:]]
        return items + self.wrapped_log[wrapped:], (len(self.plain_log), len(self.wrapped_log))

    def classify(self, raw: bytes, line: int) -> list[Event]:
        key = raw.translate(_MASK)
        entry = self.memo.get(key)
        if entry is not None:
            text = raw.decode("ascii")
            if key in self.node_shapes or key in self.proc_shapes:
                return self._with_nodes(entry, text, line)
            if len(entry) == 1:  # the usual case: one record on the line
                a, b, plan = entry[0]
                return [build_event(plan, text if a == 0 and b == len(text) else text[a:b], line, self.file,
                                    self.node)]
            file, node = self.file, self.node
            return [build_event(plan, text[a:b], line, file, node) for a, b, plan in entry]
        return self._classify_slow(raw, key, line)

    def _learn_coloured(self, key: bytes, raw: bytes, text: str, clean_key: bytes) -> None:
        """Give the raw shape of a line in colour to ``wrapped_log`` where its colour is all
        before its one record (a wrapper in colour): the record is then the same bytes in
        the raw line as in the clean text, from a fixed offset, in every line of the shape
        (the colour codes are no digits, so the shape keeps their places)."""
        entry = self.memo.get(clean_key)
        if (entry is None or len(entry) != 1 or clean_key in self.node_shapes or clean_key in self.proc_shapes
                or key in self.coloured
                or len(raw) > _MEMO_MAX_LINE or not raw.isascii()):  # a shape's key as the memo's are
            return
        a, b, plan = entry[0]
        record = text[a:].encode("ascii")
        if b != len(text) or plan.kind in ASSEMBLED or not raw.endswith(record):
            return
        if len(self.coloured) < self.memo_limit:
            self.coloured.add(key)
            self.wrapped_log.append((key, plan, len(raw) - len(record)))

    def _with_nodes(self, entry: Entry, text: str, line: int) -> list[Event]:
        spans = [(a, b) for a, b, _ in entry]
        nodes = wrapper_nodes(text, spans) or [None] * len(entry)
        events = [build_event(plan, text[a:b], line, self.file, n or self.node)
                  for (a, b, plan), n in zip(entry, nodes)]
        procs = wrapper_procs(text, spans)
        return events if procs is None else self._by_process(events, procs)

    def _by_process(self, events: list[Event], procs: list[str | None]) -> list[Event]:
        """Records behind a wrapper that names their process: a start-up record that names a
        rank teaches the process's rank (``_TEACHES``); one that names none and opens or continues a traceback (a
        ``Fatal Python error``, its ``Thread 0x..`` and frame lines) takes the rank that the
        process's earlier records all named, if they named one (Ray prints a worker's
        children's lines under the worker's pid: several ranks, then none is taken)."""
        known = self.proc_ranks
        out = []
        for ev, proc in zip(events, procs):
            if proc is None:
                pass
            elif ev.rank is None:
                if ev.kind in TRACEBACK_OPENERS:
                    rank = known.get(proc)
                    reads = self.proc_reads
                    if reads is not None and (rank is not None or proc not in known):
                        reads.add((proc, proc in known, rank))
                        if len(reads) > MAX_PROCS:
                            self.proc_reads = None
                    if rank is not None:
                        ev = ev._replace(rank=rank)
            else:
                if ev.kind in _TEACHES or ev.kind in TRACEBACK_OPENERS:  # (every reading reads these so)
                    note_sharing(self.rank_procs, self.shared, ev.rank, proc)
                if ev.kind in _TEACHES:
                    if proc not in known:
                        if len(known) < MAX_PROCS:
                            known[proc] = ev.rank
                    elif known[proc] != ev.rank:
                        known[proc] = None
            out.append(ev)
        return out

    def classify_block(self, body: bytes, first: int, max_line: int) -> tuple[list[Event], bool] | None:
        """Events of the lines of ``body`` (``\\n``-separated, numbered from ``first``).

        Also says whether any event may open a traceback (else the caller can skip the
        traceback assembler). Returns None when a line is longer than ``max_line`` (the
        caller cuts such lines first); a block that is not pure ASCII goes line by line.
        """
        keys = body.translate(_MASK).split(b"\n")
        if len(body) > max_line and max(map(len, keys)) > max_line:
            return None
        if not body.isascii():
            out: list[Event] = []
            for line, raw in enumerate(body.split(b"\n"), first):
                out.extend(self.classify(raw, line))
            return out, any(ev.kind in ASSEMBLED for ev in out)
        texts = body.decode("ascii").split("\n")
        plain = self.plain.get
        file = self.file
        node = self.node
        new = _new_tuple
        out = []
        append = out.append
        openers = False
        line = first - 1
        stamp: str | None = None  # the last stamp read: neighbouring lines often share it
        converted: Any = None
        for key, text in zip(keys, texts):
            line += 1
            plan = plain(key)
            if plan is not None:  # build_event, inlined
                rank, at = plan.rank_slice, plan.ts_slice
                if at is None:
                    ts = None
                else:
                    cut = text[at]
                    if cut == stamp:  # the conversion depends on the stamp's text only
                        ts = converted
                    else:
                        stamp, ts = cut, plan.ts_conv(cut)
                        converted = ts
                append(new(Event, (plan.kind, line, None if rank is None else text[rank], ts,
                                   new(Fields, (plan, text)), text, file, None, node)))
                continue
            events = self.classify_text(key, text, line)
            if not openers:
                openers = any(ev.kind in ASSEMBLED for ev in events)
            out.extend(events)
        return out, openers

    def last_kind(self, raw: bytes) -> str | None:
        """The kind of the last record on ``raw`` (valid UTF-8, at most ``LINE_LIMIT``
        long), learning nothing: no shape, no process's rank, no count. For the parser,
        which asks it of a block's last line before it reads the block's lines in order
        (whether that line waits for the next block, ``IncrementalParser._torn_cut``)."""
        entry = self.memo.get(raw.translate(_MASK))
        if entry is not None:
            return entry[-1][2].kind if entry else None
        text = raw.decode("utf-8", "replace")
        if needs_clean(text):
            text = clean(text)
        spans = segment(text)
        if not spans:
            return None
        seg = text[spans[-1][0]:spans[-1][1]]
        plan = free_text_plan(seg)
        return (plan or plan_record(seg)).kind

    def classify_text(self, key: bytes, text: str, line: int) -> list[Event]:
        """``classify`` for an ASCII line already masked (``key``) and decoded (``text``)."""
        entry = self.memo.get(key)
        if entry is None:
            return self._classify_slow(text.encode("ascii"), key, line)
        if key in self.node_shapes or key in self.proc_shapes:
            return self._with_nodes(entry, text, line)
        file, node = self.file, self.node
        return [build_event(plan, text if a == 0 and b == len(text) else text[a:b], line, file, node)
                for a, b, plan in entry]

    def _classify_slow(self, raw: bytes, key: bytes, line: int) -> list[Event]:
        text = raw.decode("utf-8", "replace")
        if "\ufffd" in text and b"\xef\xbf\xbd" not in raw:
            self.decode_errors += 1
            if self.binary:  # noise, not a record: two failed Lark parses would say the same
                return [build_event(_OTHER, text, line, self.file, self.node)]
        if len(text) > LINE_LIMIT:
            return self._classify_long(text, line)
        memoisable = raw.isascii() and len(raw) <= _MEMO_MAX_LINE
        if needs_clean(text):
            text = clean(text)
            if text.isascii() and not needs_clean(text):
                # a line in colour (docker compose on a terminal, a coloured logger): its
                # plan is the clean text's, learned once for its shape, not asked of Lark
                # again for every line
                clean_key = text.encode("ascii").translate(_MASK)
                events = self.classify_text(clean_key, text, line)
                self._learn_coloured(key, raw, text, clean_key)
                return events
            memoisable = False
        entry = []
        spans = segment(text)
        nodes = wrapper_nodes(text, spans)
        for a, b in spans:
            seg = text[a:b]
            plan = free_text_plan(seg)
            if plan is None:
                self.grammar_calls += 1
                plan = plan_record(seg)
                memoisable = memoisable and plan.memo_ok
            else:  # no record begins so: cheaper to tell again than to keep (unknown lines rarely repeat)
                memoisable = False
            entry.append((a, b, plan))
        procs = wrapper_procs(text, spans)
        if memoisable and len(self.memo) < self.memo_limit:
            self.memo[key] = tuple(entry)
            if nodes is not None:
                self.node_shapes.add(key)
            elif procs is not None and any(_by_its_process(plan) for _, _, plan in entry):
                self.proc_shapes.add(key)
            elif len(entry) == 1:
                a, b, plan = entry[0]
                if b == len(text) and plan.kind not in ASSEMBLED:
                    if a == 0:
                        self.plain[key] = plan
                        self.plain_log.append((key, plan))
                    else:
                        self.wrapped_log.append((key, plan, a))
        if nodes is None:
            events = [build_event(plan, text[a:b], line, self.file, self.node) for a, b, plan in entry]
        else:
            events = [build_event(plan, text[a:b], line, self.file, n or self.node)
                      for (a, b, plan), n in zip(entry, nodes)]
        return events if procs is None else self._by_process(events, procs)

    def _classify_long(self, text: str, line: int) -> list[Event]:
        """The events of a line longer than ``LINE_LIMIT``: its first part read as a line,
        the rest of it added to the last record's text (see the module)."""
        stats = self.stats
        if stats is not None:
            stats.partial_lines += 1
            if stats.partial_lines == 1 and len(stats.warnings) < 20:  # the first one is named
                stats.warnings.append(f"line {line}: longer than {LINE_LIMIT} characters; read and matched on its "
                                      f"first {LINE_LIMIT} only, its text kept whole {PARTIAL_NOTE}")
        head, whole = text[:LINE_LIMIT], text
        if needs_clean(head):  # the rest is kept as it is
            head = clean(head)
            whole = head + text[LINE_LIMIT:]
        spans = segment(head)
        nodes = wrapper_nodes(head, spans)
        plans = []
        for a, b in spans:
            plan = free_text_plan(head[a:b])
            if plan is None:
                self.grammar_calls += 1
                plan = plan_record(head[a:b])
            plans.append(plan)
        last = len(spans) - 1
        out = []
        for i, ((a, b), plan) in enumerate(zip(spans, plans)):
            node = nodes[i] if nodes is not None else None
            out.append(build_event(plan, whole[a:] if i == last else head[a:b], line, self.file, node or self.node))
        return out
