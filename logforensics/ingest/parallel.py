"""Read a large log file on several cores: the same parser and run model, one byte range each.

Why: one process reads a gigabyte of serving log in seconds with the compiled scanner
(``read/bulk.py``) and in tens of seconds without it; a machine has more cores. A
regular file of at least ``PARALLEL_MIN_BYTES`` is therefore cut into byte ranges, each
range is read by a worker process with the very ``LiveRun`` that ``watch`` feeds chunk
by chunk (no second parser; on the compiled path through ``feed_bulk``, as
``ingest.batch`` reads), and the parent merges the per-range run models in file order
with ``RunModel.merge``, which is exact.

How the result stays that of one sequential pass (``tests/test_parallel.py`` checks it
byte for byte, on both reading paths, on every fixture with boundaries everywhere and on
generated logs of both generators), and where it does not yet:

* **Line numbers.** A worker's parser starts at ``line_offset``, the number of newlines
  before its range (``bytes.count`` in the parent, while the workers read earlier ranges).
  Whether the file is text is judged once, from its first bytes, for every range.
* **Boundaries.** A range starts at a line that cannot continue a record: an SGLang-prefixed
  ``Decode batch``, ``Prefill batch`` or HTTP access line right after another one
  (:func:`choose_ranges`). Where no such line is near, there is no boundary.
* **State a range cannot see.** A record whose handling reads state from before the
  range (a server-ready line moves every rank seen so far to serving; the phase of a
  crash whose frames do not tell; capture batch sizes kept only if none were seen) is
  deferred: the worker's model keeps it, between the parts of the range before and after
  it, and the merge observes it with the state of everything before
  (``RunModel(part=True)``). The decode series keeps a range's values for the merge
  (``Series.merge``). So a range with a restart in it is read once.
* **Ranks processes named.** A record behind a wrapper naming its process (Ray's
  ``pid=``) that names no rank takes the rank the process's earlier start-up records named
  (``LineClassifier._by_process``); those records are often in an earlier range. Each range
  reports what its records taught and what its rank-less records were given
  (``proc_ranks``, ``proc_reads``); the merge carries what the ranges before taught
  (``teach_procs``), and a range whose records would have been given another rank with it
  (``reads_differ``) is read again in the parent, its classifier knowing it.
* **Records across a boundary.** Other ranks can keep printing while a traceback is open,
  so the boundary rule is not a proof. A worker reports whether its parser ended inside a
  traceback (or with a line that waits for the next: a torn record's first part); then that
  range is not merged but read again in the parent, with the run model as it stands, and
  the parent's parser goes on into the next ranges until it is outside any traceback (and
  holds no such line) at a range's end. So is a range whose model could not defer
  what it read (``RunModel.merge_problem``: too many deferred records or unrecognised
  shapes). ``RangeCounts.read_again`` counts such ranges.
* **The serving windows' sums** (``model/windows.py``). A range's windows start narrow and
  are folded into the wider ones of the merge, so their values are grouped otherwise than in
  one pass; the sums are fixed point (integers, which add associatively), so the grouping does
  not change them (``tests/test_window_sums.py``).

Ranges are submitted through a window of twice the workers (``read_ranges``): at most
that many finished or running ranges wait for the merge, so the parent's memory stays
flat however many ranges a file has.

Small files, standard input and pipes are read sequentially, as are files when only one
core is usable or ``LOGFORENSICS_WORKERS=1``; on the compiled path, only when
``LOGFORENSICS_WORKERS`` asks for several (``COMPILED_BY_DEFAULT``), in ranges of the
file's size over twice the workers (a quarter of the file for two). The workers are ``workers - 1`` processes and this
one, which reads every ``workers``-th range while it would otherwise wait. The file is read
up to the size it had when reading began.
"""

from __future__ import annotations

import gc
import os
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import native
from ..model.pd import PDObserver
from ..model.run import RunModel
from ..read.fastpath import LineClassifier, merge_sharing, reads_differ, teach_procs
from ..read.parser import BLOCK_SIZE, IncrementalParser, ParseStats
from ..read.segments import SNIFF_BYTES, Margin, PasteMargin, looks_binary
from .files import InputError
from .live import LiveRun

if TYPE_CHECKING:
    import multiprocessing.context

#: Files smaller than this are read by one process: starting workers costs more.
PARALLEL_MIN_BYTES = 64 << 20
#: Bytes of file per worker at least: a worker less than this would spend its time starting.
BYTES_PER_WORKER = 32 << 20
#: About this many bytes per range: small enough to balance two workers and to keep a
#: range read again cheap, large enough that the per-range costs do not show (and that
#: the compiled scanner runs long stretches).
RANGE_BYTES = 32 << 20
#: Whether the compiled path reads a large file on several cores when ``LOGFORENSICS_WORKERS``
#: does not ask for it. Not yet: measured on 1 GiB logs, two processes spent 1.4-1.8x (one
#: rank's batch records) to 1.9-2x (eight ranks') the CPU seconds of one: every range starts
#: its serving windows afresh, one second wide, and the parent merges them cell by cell
#: (``bench/README.md``).
COMPILED_BY_DEFAULT = False
#: Bytes per block on the compiled path: the scanner's columns, not events, are alive
#: between blocks, so large blocks cost no memory to speak of and save per-block work.
BULK_BLOCK_SIZE = 1 << 20
#: Bytes searched after a range's nominal start for a line that can begin a range.
_WINDOW = 1 << 20
#: Kinds of the lines a range may start at (when the line before is one too).
BOUNDARY_KINDS = frozenset({"decode_batch", "prefill_batch", "http_access"})
_MAX_WORKERS = 8


class RangeResult(NamedTuple):
    """What a worker returns for one byte range."""

    range_index: int
    model: RunModel
    stats: ParseStats
    decode_errors: int
    open_at_end: bool  # the parser ended inside a traceback (the range is read again)
    pd: PDObserver
    rank_nodes: dict[str, str]
    #: the ranks processes behind a wrapper named in the range, and what the rank-less
    #: records that may take them were given (``LineClassifier.proc_ranks``, ``proc_reads``)
    proc_ranks: dict[str, str | None]
    proc_reads: set[tuple[str, bool, str | None]] | None
    #: the process and the node that printed each rank first, and the ranks more than one
    #: printed (``fastpath.note_sharing``)
    rank_procs: dict[str, str]
    shared: dict[str, list[str]]
    node_shared: dict[str, list[str]]


def worker_count(size: int | None = None) -> int:
    """Worker processes to use: ``LOGFORENSICS_WORKERS``, else the usable cores (at most 8),
    and for a file of ``size`` bytes no more than one per ``BYTES_PER_WORKER``."""
    env = os.environ.get("LOGFORENSICS_WORKERS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    n = max(1, min(cores, _MAX_WORKERS))
    return n if size is None else max(1, min(n, size // BYTES_PER_WORKER))


def _fork_context() -> multiprocessing.context.BaseContext | None:
    """Workers are forked: they start at once, with the grammar already loaded. Where
    forking is not available (or not safe, as on macOS), files are read sequentially."""
    import multiprocessing  # only for a file large enough to read in parallel

    if sys.platform != "linux" or "fork" not in multiprocessing.get_all_start_methods():
        return None
    return multiprocessing.get_context("fork")


def read_in_parallel(path: str | os.PathLike[str], *, name: str | None = None,
                     progress: Callable[[int], None] | None = None,
                     workers: int | None = None, min_bytes: int | None = None,
                     range_bytes: int | None = None, node: str | None = None,
                     counts: RangeCounts | None = None) -> LiveRun | None:
    """Read the file at ``path`` into a new run on several cores, if worthwhile.

    Returns None, having done nothing, when the file should be read sequentially (not a
    regular file, smaller than ``min_bytes``, one worker, no fork); the caller then reads
    it as usual, which also reports unreadable files. ``name`` defaults to the path;
    ``counts`` is told how the ranges went (``read_ranges``).
    """
    min_bytes = PARALLEL_MIN_BYTES if min_bytes is None else min_bytes
    range_bytes = RANGE_BYTES if range_bytes is None else range_bytes
    p = os.fspath(path)
    name = name or p
    if p == "-" or workers == 1:
        return None
    try:
        st = os.stat(p)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size < max(min_bytes, 1):
        return None
    if workers is None:
        if native.available() and not COMPILED_BY_DEFAULT and not os.environ.get("LOGFORENSICS_WORKERS", "").strip():
            return None
        workers = worker_count(st.st_size)
    if workers < 2:
        return None
    if native.available() and range_bytes == RANGE_BYTES:  # long stretches for each scanner
        range_bytes = max(RANGE_BYTES, st.st_size // (2 * workers))
    context = _fork_context()
    if context is None:
        return None
    # Choosing the ranges loads the grammar and learns line shapes in this process: the
    # workers, forked after, start with both.
    try:
        ranges = choose_ranges(p, st.st_size, range_bytes)
    except OSError:  # unreadable: the sequential reader says why
        return None
    if len(ranges) < 2:
        return None
    from concurrent.futures import ProcessPoolExecutor  # only for a file read in parallel
    from concurrent.futures.process import BrokenProcessPool

    try:  # this process reads ranges too: one process fewer to hold the grammar and a model
        pool = ProcessPoolExecutor(workers - 1, mp_context=context, initializer=_init_worker)
    except OSError:  # no processes or semaphores here: read sequentially
        return None

    def submit(job: tuple) -> Any:
        return _Local(job) if job[2] % workers == workers - 1 else pool.submit(_read_range, job)

    try:
        run = read_ranges(p, name, ranges, progress=progress, submit=submit, node=node, window=2 * workers,
                          counts=counts)
    except BrokenProcessPool:
        raise InputError(f"{p}: a worker process died while reading (out of memory?); "
                         "LOGFORENSICS_WORKERS=1 reads the file in one process") from None
    except OSError as exc:
        raise InputError(f"{p}: read failed ({exc.strerror or exc})") from None
    finally:  # on an error (a worker killed, Ctrl-C), do not read the ranges not started
        pool.shutdown(wait=True, cancel_futures=True)
    return run


class _Done(NamedTuple):
    value: RangeResult

    def result(self) -> RangeResult:
        return self.value

    def done(self) -> bool:
        return True


class _Local:
    """A range this process reads itself: when it would otherwise wait for a worker, or
    when its result is wanted."""

    def __init__(self, job: tuple) -> None:
        self.job = job
        self.value: RangeResult | None = None

    def done(self) -> bool:
        return self.value is not None

    def result(self) -> RangeResult:
        if self.value is None:
            self.value = _read_range(self.job)
        return self.value


@dataclass
class RangeCounts:
    """How the ranges of one read went: merged as the workers read them, or read again here."""

    merged: int = 0
    read_again: int = 0
    #: of those, ranges whose model could not be merged (``RunModel.merge_problem``); the
    #: others ended inside a traceback or followed one that did
    unmergeable: int = 0
    #: bytes of the ranges read again
    bytes_again: int = 0


def read_ranges(path: str, name: str | None, ranges: list[tuple[int, int]], *,
                progress: Callable[[int], None] | None = None,
                submit: Callable[[tuple], Any] | None = None, node: str | None = None,
                window: int = 4, counts: RangeCounts | None = None) -> LiveRun:
    """Read ``ranges`` (consecutive, starting at line starts) of the file into a new run.

    ``submit(job)`` starts reading one range and returns a future whose ``result()`` is
    its ``RangeResult`` and ``done()`` whether it is there: a process pool's ``submit``, a
    range left for this process (``_Local``: read while it would wait for a worker), or by
    default the job done at once in this process (tests). At most ``window`` ranges are submitted and not yet merged,
    so finished results do not pile up in this process while it merges an earlier one.
    This process counts the lines of each range, which gives the next range's first line
    number, while the workers read the earlier ones. ``counts``, if given, is told how
    many ranges were merged and how many read again.
    """
    submit = submit or (lambda job: _Done(_read_range(job)))
    counts = counts if counts is not None else RangeCounts()
    last = len(ranges) - 1
    window = max(1, window)
    verdict = sniff(path)
    first_lines: list[int] = []
    handles: dict[int, Any] = {}

    def submit_until(limit: int) -> None:
        for k in range(len(first_lines), min(limit, len(ranges))):
            a, b = ranges[k]
            first_lines.append(first_lines[-1] + count_lines(path, ranges[k - 1][0], a) if k else 0)
            handles[k] = submit((path, name, k, a, b, first_lines[k], k == last, node, verdict))

    parser = IncrementalParser(name, node=node)  # the run's parser: it only sums the ranges' counts
    model = RunModel(name)
    pd = PDObserver()
    rank_nodes: dict[str, str] = {}
    node_shared: dict[str, list[str]] = {}
    procs: dict[str, str | None] = {}  # the ranks processes named in the ranges merged so far
    rank_procs: dict[str, str] = {}
    shared: dict[str, list[str]] = {}
    stats = parser.stats
    decode_errors = 0
    again: LiveRun | None = None  # the parent's own reader, while it reads ranges again
    for k in range(len(ranges)):
        submit_until(k + window)
        handle = handles.pop(k)
        while not handle.done():  # rather than wait for a worker, read a range of this process's
            mine = next((h for h in handles.values() if isinstance(h, _Local) and not h.done()), None)
            if mine is None:
                break
            mine.result()
        res = handle.result()  # the range's model goes once merged: memory stays flat
        problem = None if again is not None or res.open_at_end or k == 0 else model.merge_problem(res.model)
        if problem is None and again is None and reads_differ(procs, res.proc_reads, res.proc_ranks):
            problem = "a rank-less record of a process whose rank the ranges before taught"
        if again is None and not res.open_at_end and problem is None:
            if k == 0:
                model = res.model  # nothing came before the first range: its model is the run's
            else:
                model.merge(res.model)
            pd.merge(res.pd)
            teach_procs(procs, res.proc_ranks)
            merge_sharing(rank_procs, shared, res.rank_procs, res.shared)
            merge_sharing(rank_nodes, node_shared, res.rank_nodes, res.node_shared)
            stats.add(res.stats)
            decode_errors += res.decode_errors
            counts.merged += 1
        else:  # read the range here, with the model as it stands (and on after a traceback)
            counts.read_again += 1
            counts.unmergeable += problem is not None
            counts.bytes_again += ranges[k][1] - ranges[k][0]
            if again is None:
                again = LiveRun(name, model=model, node=node, pd=pd)
                again.rank_nodes, again.node_shared = rank_nodes, node_shared
                again.parser.line_offset = first_lines[k]
                again.parser.judged(*verdict)
                again.parser.classifier.share_memo(_shared_classifier())
                again.parser.classifier.proc_ranks = procs  # what the ranges before taught, taught on
                again.parser.classifier.rank_procs, again.parser.classifier.shared = rank_procs, shared
            _feed_range(again, path, ranges[k][0], ranges[k][1])
            if k == last:
                again.close()
            if (again.parser.assembler.idle and not again.parser.waiting()) or k == last:
                stats.add(again.parser.stats)
                decode_errors += again.parser.classifier.decode_errors
                again = None
        if progress is not None:
            progress(ranges[k][1] - ranges[k][0])
    parser.classifier.decode_errors += decode_errors
    run = LiveRun(name, model=model, parser=parser, node=node, pd=pd)
    run.rank_nodes, run.node_shared = rank_nodes, node_shared
    run.parser.classifier.rank_procs, run.parser.classifier.shared = rank_procs, shared
    return run


def sniff(path: str) -> tuple[bool, Margin]:
    """Whether the file is not text, and the margin a paste put before every line, judged from
    its first bytes as one pass judges them."""
    with open(path, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
        return looks_binary(head), PasteMargin().judge(head, final=len(head) < SNIFF_BYTES) or Margin()


def choose_ranges(path: str, size: int, range_bytes: int = RANGE_BYTES, *,
                  anywhere: bool = False) -> list[tuple[int, int]]:
    """Consecutive byte ranges covering the file, each about ``range_bytes`` long.

    Each range after the first starts at the first line, at or after its nominal start,
    that is an SGLang-prefixed line of a ``BOUNDARY_KINDS`` kind following another such
    line (or, with ``anywhere``, for tests of the repair, at any line). The kind is
    judged by the same classifier as the parser's.
    """
    classifier = _shared_classifier()
    starts = [0]
    range_bytes = max(range_bytes, 1)
    with open(path, "rb") as fh:
        target = range_bytes
        while target < size:
            found = _boundary_at_or_after(fh, target, classifier, anywhere)
            if found is not None and found < size:
                starts.append(found)
                # the last fifth in quarter ranges: the workers run out of work closer together
                target = found + (range_bytes if found < size * 0.8 else max(range_bytes // 4, 1))
            else:
                target += max(range_bytes, _WINDOW)
    return list(zip(starts, starts[1:] + [size]))


def _boundary_at_or_after(fh, offset: int, classifier: LineClassifier, anywhere: bool) -> int | None:
    fh.seek(offset - 1)
    window = fh.read(_WINDOW + 1)
    pos = 0 if window[:1] == b"\n" else window.find(b"\n")  # window[0] is the byte before offset
    if pos < 0:
        return None
    previous_ok = False
    while True:
        end = window.find(b"\n", pos + 1)
        if end < 0:
            return None
        start = pos + 1  # a line starts here, at file offset offset - 1 + start
        if anywhere:
            return offset - 1 + start
        events = classifier.classify(window[start:end], 0)
        ok = (len(events) == 1 and events[0].kind in BOUNDARY_KINDS and events[0].ts is not None)
        if ok and previous_ok:
            return offset - 1 + start
        previous_ok = ok
        pos = end


# -- in the workers -----------------------------------------------------------------------
_SHARED: LineClassifier | None = None


def _shared_classifier() -> LineClassifier:
    """One memo of line shapes per process, for every range it reads."""
    global _SHARED
    if _SHARED is None:
        _SHARED = LineClassifier()
    return _SHARED


def _init_worker() -> None:
    # What the fork inherited (the grammar's tables, the modules) lives as long as the
    # worker: the garbage collector need not walk it again and again.
    gc.freeze()


def count_lines(path: str, start: int, end: int) -> int:
    """Newlines in the file's bytes ``start`` to ``end``."""
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    count = 0
    with open(path, "rb", buffering=0) as fh:
        fh.seek(start)
        left = end - start
        while left > 0:
            n = fh.readinto(view[:min(len(buf), left)])
            if not n:
                break
            count += buf.count(b"\n", 0, n)
            left -= n
    return count


def _read_range(job: tuple[str, str, int, int, int, int, bool, str | None, tuple[bool, Margin]]) -> RangeResult:
    path, name, index, start, end, first_line, last, node, verdict = job
    # after the first range: records that read earlier state wait for the merge
    run = LiveRun(name, node=node, model=RunModel(name, part=index > 0))
    run.parser.line_offset = first_line
    # the file's verdicts, from its first bytes, for every range (the first too: a range shorter than
    # the bytes judged, with an undecodable line in it, would wait for bytes that never come)
    run.parser.judged(*verdict)
    run.parser.classifier.share_memo(_shared_classifier())
    _feed_range(run, path, start, end)
    open_at_end = False
    if last:
        run.close()
    else:  # the range ends at a line start: only an open traceback (or a line that waits) can remain
        open_at_end = not run.parser.assembler.idle or run.parser.waiting()
    classifier = run.parser.classifier
    return RangeResult(index, run.model, run.parser.stats, classifier.decode_errors, open_at_end, run.pd,
                       run.rank_nodes, classifier.proc_ranks, classifier.proc_reads, classifier.rank_procs,
                       classifier.shared, run.node_shared)


def _feed_range(run: LiveRun, path: str, start: int, end: int) -> None:
    """Feed a range as ``ingest.batch`` feeds a file: in bulk where the scanner is built."""
    size = BULK_BLOCK_SIZE if native.available() else BLOCK_SIZE
    for block in range_blocks(path, start, end, size):
        run.feed_bulk(block)


def range_blocks(path: str, start: int, end: int, size: int) -> Iterator[bytes]:
    """The file's bytes ``start`` to ``end``, in blocks of ``size``."""
    with open(path, "rb") as fh:
        fh.seek(start)
        left = end - start
        while left > 0:
            block = fh.read(min(size, left))
            if not block:
                return
            left -= len(block)
            yield block
