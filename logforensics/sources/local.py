"""Follow a local log file: read what exists, then wake on inotify events.

Design, and why:

* Reads use ``os.pread`` at an explicit offset on a descriptor we keep open, so
  the offset in every :class:`Chunk` is the true file offset and nothing can
  move it behind our back (two followers of one file each own a descriptor).
* Wake-ups come from a watchdog ``Observer`` (inotify on Linux) on the *parent
  directory*, not the file: a directory watch also sees the file being created
  (when it did not exist yet), renamed away and replaced.  A timer of
  ``poll_interval`` (0.5 s) is only a safety net for lost events or
  filesystems without inotify; normal latency is that of inotify (~ms).
* Truncation: after each wake-up the open descriptor is ``fstat``-ed; a size
  below our offset means the file was truncated, so we emit ``"truncated"`` and
  restart at 0.  (If a file is truncated *and* regrown past our offset between
  two looks, no size check can notice; inotify wake-ups make that window ms.)
* Rotation: when the path names another inode than our descriptor (rename +
  new file, or a symlink retargeted), we first drain the old descriptor to its
  end -- bytes written before the switch belong to the old file and are
  delivered -- then open the new file, emit ``"rotated"`` and start at 0.
  While the path is missing we keep reading the old descriptor: a writer that
  still holds it open is still producing the log.
"""

from __future__ import annotations

import inspect
import os
import stat
import threading
from collections.abc import Generator, Iterator

from watchdog.events import (
    DirModifiedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from .base import EOF, OPENED, ROTATED, TRUNCATED, WAITING, Chunk, Item, Notice, SourceError

# Our own reads open the file; opened/closed-no-write events would only cause
# pointless wake-ups (and ping-pong between two followers of the same file).
_EVENT_FILTER = [
    FileModifiedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileClosedEvent,
    DirModifiedEvent,
]


class _Waker(FileSystemEventHandler):
    """Turns any relevant event in the watched directory into a wake-up."""

    def __init__(self, event: threading.Event) -> None:
        self._event = event

    def on_any_event(self, event: FileSystemEvent) -> None:
        self._event.set()


class LocalFollower:
    """Iterator of :class:`Chunk` / :class:`Notice` for a local file.

    ``offset`` is the file offset up to which bytes have been delivered (it
    starts at ``start_offset`` and returns to 0 after "truncated"/"rotated").
    ``stop()`` may be called from any thread; the iterator then ends promptly.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        follow: bool = True,
        start_offset: int = 0,
        chunk_size: int = 1 << 20,
        poll_interval: float = 0.5,
    ) -> None:
        if start_offset < 0:
            raise ValueError("start_offset must be >= 0")
        if chunk_size <= 0:
            raise ValueError("chunk_size must be > 0")
        self.path = os.path.abspath(os.fspath(path))
        self.follow = follow
        self.start_offset = start_offset
        self.chunk_size = chunk_size
        self.poll_interval = min(max(poll_interval, 0.01), 0.5)
        self._offset = start_offset
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._observer: BaseObserver | None = None
        self._watching = False
        self._gen = self._run()

    # -- public API -----------------------------------------------------------
    @property
    def offset(self) -> int:
        return self._offset

    def __iter__(self) -> Iterator[Item]:
        return self

    def __next__(self) -> Item:
        return next(self._gen)

    def stop(self) -> None:
        """Make the iterator end promptly; safe from any thread, idempotent."""
        self._stopping.set()
        self._wake.set()
        with self._lock:
            if self._observer is not None:
                self._observer.stop()

    close = stop

    def __enter__(self) -> LocalFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if inspect.getgeneratorstate(self._gen) != inspect.GEN_RUNNING:  # another thread may be inside next()
            self._gen.close()

    # -- internals ------------------------------------------------------------
    def _start_observer(self) -> None:
        with self._lock:
            if self._stopping.is_set():
                return
            self._observer = Observer()
            self._observer.daemon = True
            self._observer.start()
        self._ensure_watch()

    def _ensure_watch(self) -> None:
        """Watch the parent directory once it exists (it may appear later)."""
        if self._watching or self._observer is None:
            return
        try:
            self._observer.schedule(
                _Waker(self._wake),
                os.path.dirname(self.path),
                recursive=False,
                event_filter=_EVENT_FILTER,
            )
            self._watching = True
        except OSError:
            pass  # directory missing or inotify unavailable: the poll timer covers it

    def _stop_observer(self) -> None:
        with self._lock:
            obs, self._observer = self._observer, None
        if obs is not None:
            obs.stop()
            if obs.is_alive() and obs is not threading.current_thread():
                obs.join(timeout=2)

    def _wait(self) -> None:
        self._ensure_watch()
        self._wake.wait(self.poll_interval)

    def _open(self) -> tuple[int, os.stat_result] | None:
        """Open the path; None if it does not exist. Errors are SourceError."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SourceError(f"cannot open {self.path}: {exc.strerror or exc}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise SourceError(f"{self.path} is not a regular file")
        return fd, st

    def _read_to_eof(self, fd: int) -> Iterator[Chunk]:
        while not self._stopping.is_set():
            data = os.pread(fd, self.chunk_size, self._offset)
            if not data:
                return
            chunk = Chunk(data, self._offset)
            self._offset += len(data)
            yield chunk

    def _run(self) -> Generator[Item, None, None]:
        fd: int | None = None
        try:
            if self.follow:
                self._start_observer()
            # Phase 1: get the file open (maybe waiting for it to appear).
            waiting = False
            while fd is None:
                if self._stopping.is_set():
                    return
                self._wake.clear()
                opened = self._open()
                if opened is None:
                    if not self.follow:
                        raise SourceError(f"{self.path}: no such file")
                    if not waiting:
                        waiting = True
                        parent = os.path.dirname(self.path)
                        missing = "" if os.path.isdir(parent) else f" (its directory {parent} does not exist yet)"
                        yield Notice(WAITING, f"waiting for {self.path} to appear{missing}")
                    self._wait()
                    continue
                fd, st = opened
            ident = (st.st_dev, st.st_ino)
            if self._offset > st.st_size:
                yield Notice(
                    OPENED,
                    f"{self.path}: {st.st_size} bytes, shorter than start offset "
                    f"{self._offset}; reading from 0",
                )
                self._offset = 0
            else:
                yield Notice(OPENED, f"{self.path} from offset {self._offset}")

            # Phase 2: follow.
            while not self._stopping.is_set():
                self._wake.clear()
                if os.fstat(fd).st_size < self._offset:
                    self._offset = 0
                    yield Notice(TRUNCATED, f"{self.path} was truncated; reading from 0")
                yield from self._read_to_eof(fd)
                if self._stopping.is_set():
                    return
                if not self.follow:
                    yield Notice(EOF, f"end of {self.path} at offset {self._offset}")
                    return
                try:
                    pst = os.stat(self.path)
                except OSError:
                    pst = None  # moved away or deleted: keep the old descriptor
                if pst is not None and (pst.st_dev, pst.st_ino) != ident:
                    yield from self._read_to_eof(fd)  # drain what the old file got
                    opened = self._open()
                    if opened is None:
                        continue  # vanished again between stat and open
                    os.close(fd)
                    fd, st = opened
                    ident = (st.st_dev, st.st_ino)
                    self._offset = 0
                    yield Notice(ROTATED, f"{self.path} was replaced; reading the new file from 0")
                    continue
                self._wait()
        finally:
            if fd is not None:
                os.close(fd)
            self._stop_observer()


class StdinFollower:
    """Iterator of :class:`Chunk` for standard input (``watch -``): a pipe is read as it
    fills and ends at end of input with an ``eof`` notice; ``stop()`` ends it promptly."""

    def __init__(self, fd: int = 0, *, chunk_size: int = 1 << 16, poll_interval: float = 0.1) -> None:
        self.fd = fd
        self.chunk_size = chunk_size
        self.poll_interval = poll_interval
        self._offset = 0
        self._stopping = threading.Event()

    @property
    def offset(self) -> int:
        return self._offset

    def stop(self) -> None:
        self._stopping.set()

    def __iter__(self) -> Iterator[Item]:
        import select

        yield Notice(OPENED, "standard input")
        while not self._stopping.is_set():
            try:
                ready, _, _ = select.select([self.fd], [], [], self.poll_interval)
                if not ready:
                    continue
                data = os.read(self.fd, self.chunk_size)
            except OSError as exc:
                raise SourceError(f"standard input: read failed ({exc.strerror or exc})") from None
            if not data:
                yield Notice(EOF, f"end of standard input at offset {self._offset}")
                return
            chunk = Chunk(data, self._offset)
            self._offset += len(data)
            yield chunk
