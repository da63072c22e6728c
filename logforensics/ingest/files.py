"""Opening a log (a path, or ``-`` for standard input) and reading it in blocks.

The one opener of every batch path (``parse``, ``summary``, ``diff``, ``check``, runs of
several files). What it hands the parser is always the log's text as UTF-8 bytes:

* compressed logs (rotated logs usually are) are decompressed on the fly, recognised by
  their magic bytes, not their name: gzip, bzip2, xz and zstandard. Line numbers are
  those of the decompressed text; a stream that ends early (a file still being written)
  gives what it holds and a warning;
* a byte-order mark is read: UTF-8's is dropped, UTF-16 (LE or BE) is decoded and handed
  on as UTF-8, so its first line (often the environment) is read like any other;
* input that does not look like text (random bytes, NUL-heavy, UTF-16 without a mark)
  gets one warning, "this does not look like a text log", and is read as it is: its
  lines are kept and counted like any others.
"""

from __future__ import annotations

import bz2
import codecs
import io
import lzma
import os
import queue
import sys
import threading
import zlib
from collections.abc import Callable, Generator
from typing import IO, Any

from ..read.parser import BLOCK_SIZE
from ..read.segments import SNIFF_BYTES, looks_binary, text_counts

#: Magic bytes of the compressed formats read transparently.
MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)
COMPRESSED_FORMATS = tuple(name for _, name in MAGIC)
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
#: Bytes of a log's start looked at to judge whether it is text.

Warn = Callable[[str], None]


class InputError(Exception):
    """A log that cannot be read at all (missing, a directory, no permission)."""


def compression_of(head: bytes) -> str | None:
    """The compressed format whose magic bytes ``head`` starts with, else None."""
    return next((name for magic, name in MAGIC if head.startswith(magic)), None)


def is_plain_file(path: str | os.PathLike[str]) -> bool:
    """True for a log whose bytes are its text (no compression, no UTF-16): only such a
    file may be cut into byte ranges (the parallel reader)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return True  # the reader reports it
    return compression_of(head) is None and not head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))


def not_text_reason(sample: bytes) -> str | None:
    """Why ``sample`` (a log's first bytes, as UTF-8) does not look like text, or None."""
    if not looks_binary(sample):
        return None
    nul, bad, other = text_counts(sample)
    return (f"this does not look like a text log (of its first {len(sample)} bytes: {nul} NUL, {bad} not UTF-8, "
            f"{other} other control characters); its lines are read as they are")


class _Transcoded(io.RawIOBase):
    """A UTF-16 stream read as UTF-8 bytes (invalid sequences become U+FFFD)."""

    def __init__(self, raw: IO[bytes], encoding: str) -> None:
        self._raw = raw
        self._decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        self._pending = b""
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def read(self, size: int | None = -1) -> bytes:
        size = -1 if size is None else size
        while not self._eof and (size < 0 or len(self._pending) < size):
            raw = self._raw.read(BLOCK_SIZE)
            if not raw:
                self._eof = True
                self._pending += self._decoder.decode(b"", final=True).encode("utf-8")
                break
            self._pending += self._decoder.decode(raw).encode("utf-8")
        if size < 0:
            out, self._pending = self._pending, b""
        else:
            out, self._pending = self._pending[:size], self._pending[size:]
        return out

    def close(self) -> None:
        self._raw.close()
        super().close()


def _new_decompressor(kind: str) -> Any:
    if kind == "gzip":
        return zlib.decompressobj(wbits=31)
    if kind == "bzip2":
        return bz2.BZ2Decompressor()
    if kind == "xz":
        return lzma.LZMADecompressor()
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj()


class _Decompressed(io.RawIOBase):
    """A compressed stream's text, decompressed as it is read, member after member.

    Incremental decompressors rather than ``gzip.open`` and friends: those raise at a
    truncated end and drop what the last read had decompressed; here everything up to the
    cut is delivered, and ``problem`` says what was wrong (truncated, damaged).
    """

    def __init__(self, raw: IO[bytes], kind: str) -> None:
        self._raw = raw
        self._kind = kind
        self._d = _new_decompressor(kind)
        self._pending = b""
        self._done = False
        self.problem: str | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending and not self._done:
            self._step()
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def _step(self) -> None:
        chunk = self._raw.read(BLOCK_SIZE)
        if not chunk:
            self._done = True
            if not self._d.eof and self._started:
                self.problem = f"the {self._kind} data ends early (a file still being written?); read up to there"
            return
        try:
            while chunk:
                self._started = True
                self._pending += self._d.decompress(chunk)
                if not self._d.eof:
                    break
                chunk = self._d.unused_data  # the next member (concatenated streams)
                self._d = _new_decompressor(self._kind)
                self._started = bool(chunk)
        except Exception as exc:  # noqa: BLE001 - zlib.error, OSError, LZMAError, ZstdError
            self._done = True
            self.problem = f"the {self._kind} data is damaged ({exc}); read up to there"

    _started = False

    def close(self) -> None:
        self._raw.close()
        super().close()


def _raw_open(p: str) -> IO[bytes]:
    if p == "-":
        return io.BufferedReader(sys.stdin.buffer.raw) if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer
    if not os.path.exists(p):
        raise InputError(f"{p}: no such file")
    if os.path.isdir(p):
        raise InputError(f"{p}: is a directory, not a log file")
    try:
        return open(p, "rb")
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from None


def _peek(fh: IO[bytes], n: int) -> bytes:
    peek = getattr(fh, "peek", None)
    if peek is not None:
        return peek(n)[:n]
    return b""


def open_log(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open a log for reading its text as UTF-8 bytes (decompressed, BOM read), or raise
    InputError with a one-line reason."""
    p = os.fspath(path)
    fh: IO[bytes] = _raw_open(p)
    kind = compression_of(_peek(fh, 8))
    if kind is not None:
        try:
            fh = io.BufferedReader(_Decompressed(fh, kind))
        except ImportError:
            fh.close()
            raise InputError(f"{p}: {kind}-compressed; install zstandard to read it") from None
    head = _peek(fh, 4)
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            fh.read(len(bom))
            if encoding != "utf-8":
                fh = io.BufferedReader(_Transcoded(fh, encoding))
            break
    return fh


def blocks(path: str | os.PathLike[str], progress: Callable[[int], None] | None = None,
           size: int = BLOCK_SIZE, *, warn: Warn | None = None, reuse: bool = False,
           ahead: bool = False) -> Generator[bytes, None, None]:
    """The log's text in blocks (``-`` is standard input), reporting progress; ``warn``
    receives each warning (input that is not text, a compressed stream cut short) once.

    The first block holds at least ``SNIFF_BYTES``: the parser judges from its first bytes
    whether the stream is text, so that verdict must not depend on the block size.

    ``reuse``: the blocks are ``bytearray`` buffers read into again and again (a fresh block
    of a megabyte each time costs more in page faults than in copying). A block is then
    valid only until the next one is asked for, and nothing may keep it, or a view of it.
    With ``ahead`` too, a file (not standard input) is read by a thread that fills the next
    blocks while the caller works on this one, at most two blocks ahead (memory stays
    flat); that pays only where the caller's work releases the GIL (the summary's C
    scanner does; the thread needs the GIL after each read)."""
    fh = open_log(path)
    sniffed = bytearray()
    judged = warn is None
    first = max(size, SNIFF_BYTES)
    # standard input is read in the caller's thread: a thread waiting there could not be ended
    reader = _ReadAhead(fh, first, size) if reuse and ahead and path != "-" else None
    buf: bytearray | None = None
    try:
        while True:
            if reader is not None:
                block: bytes | bytearray = reader.next()
            else:
                try:
                    want = first or size
                    if not reuse:
                        block = fh.read(want)
                    else:
                        if buf is None or len(buf) != want:
                            buf = bytearray(want)
                        got = fh.readinto(buf)  # type: ignore[attr-defined]  # a BufferedReader: open_log
                        block = buf if got == want else buf[:got]
                except OSError as exc:
                    raise InputError(f"{path}: read failed ({exc.strerror or exc})") from None
                first = 0
            if not judged and (not block or len(sniffed) + len(block) >= SNIFF_BYTES):
                judged = True
                sniffed += block[: SNIFF_BYTES - len(sniffed)]
                _judge(bytes(sniffed), warn)  # type: ignore[arg-type]
            elif not judged:
                sniffed += block
            if not block:
                problem = _problem(fh)
                if problem and warn is not None:
                    warn(problem)
                return
            yield block  # type: ignore[misc]
            if progress is not None:
                progress(len(block))
    except _ReadFailed as exc:
        raise InputError(f"{path}: read failed ({exc.args[0]})") from None
    finally:
        if reader is not None:
            reader.stop()
        if path != "-":
            fh.close()


class _ReadFailed(Exception):
    """An OSError of the reading thread, handed to the reader of the blocks."""


class _ReadAhead:
    """A thread filling three reused buffers in turn, handing each over through a queue of
    one: while the caller works on block k, block k+1 waits in the queue and k+2 is read,
    into the buffer of k-1, which the caller is done with (it asked for k)."""

    def __init__(self, fh: IO[bytes], first: int, size: int) -> None:
        self._fh = fh
        self._sizes = (first, size)
        self._queue: queue.Queue[bytes | bytearray | BaseException] = queue.Queue(maxsize=1)
        self._stopping = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._run, name="logforensics-read", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        bufs: list[bytearray] = []
        want = self._sizes[0]
        k = 0
        while not self._stopping.is_set():
            try:
                if len(bufs) < 3:
                    bufs.append(bytearray(want))
                elif len(bufs[k % 3]) != want:
                    bufs[k % 3] = bytearray(want)
                buf = bufs[k % 3]
                got = self._fh.readinto(buf)  # type: ignore[attr-defined]  # a BufferedReader: open_log
                item: bytes | bytearray | BaseException = buf if got == want else bytes(buf[:got])
            except OSError as exc:
                item = _ReadFailed(exc.strerror or str(exc))
            except BaseException as exc:  # noqa: BLE001 - handed to the reader, raised there
                item = exc
            if not self._put(item) or isinstance(item, BaseException) or not item:
                return  # stopped, failed, or the end
            want = self._sizes[1]
            k += 1

    def _put(self, item: bytes | bytearray | BaseException) -> bool:
        while not self._stopping.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def next(self) -> bytes | bytearray:
        """The next block (empty at the end)."""
        if self._done:
            return b""
        item = self._queue.get()
        if isinstance(item, BaseException):
            self._done = True
            raise item
        if not item:
            self._done = True
        return item

    def stop(self) -> None:
        """End the thread (the caller may stop before the end) before the file is closed."""
        self._stopping.set()
        while self._thread.is_alive():
            try:
                self._queue.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(0.05)


def _problem(fh: Any) -> str | None:
    """What the decompressor under ``fh`` (if any) found wrong with its stream."""
    raw = getattr(fh, "raw", None)
    if isinstance(raw, _Transcoded):
        raw = getattr(raw._raw, "raw", None)
    return getattr(raw, "problem", None)


def _judge(sample: bytes, warn: Warn) -> None:
    reason = not_text_reason(sample)
    if reason is not None:
        warn(reason)


def text_warning(path: str | os.PathLike[str]) -> str | None:
    """The not-text warning for a plain file, from its first bytes (for readers that do not
    go through :func:`blocks`, such as the parallel one)."""
    try:
        with open(path, "rb") as fh:
            return not_text_reason(fh.read(SNIFF_BYTES))
    except OSError:
        return None
