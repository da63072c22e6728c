"""Assemble multi-line records (tracebacks, faulthandler dumps) into one event each.

A Python traceback reaches the log as one record whose continuation lines carry no
prefix, while other ranks keep writing prefixed lines in between. The assembler keeps
one open traceback: prefix-less frame, source, caret and message lines extend it;
prefixed lines of other ranks pass through untouched; the traceback is emitted as one
``exception`` event when it is over. Its constituent lines are kept in the event
(``lines``) so nothing is lost.

The open traceback is emitted only when the next record proves it over (or at the end
of input), so batch and live parsing give identical events. ``pending()`` lets a live
viewer look at an unfinished traceback without changing what is emitted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ..events import Event
from .oom import decompose_oom

#: Kinds that may continue a traceback's final message (multi-line messages).
_CONTINUATION = {"other", "indented", "blank", "tb_caret", "tb_fragment"}
_MAX_TB_LINES = 5000
#: Exception names that only count inside a traceback.
_GENERIC_NAMES = frozenset({"Exception", "Error", "Fault", "Exit"})
#: Kinds that open a traceback when none is open; all others pass straight through.
TRACEBACK_OPENERS = frozenset({"exc_header", "fatal_error", "tb_frame", "fh_thread", "exc_line"})


class _Traceback:
    __slots__ = ("first", "rank", "ts", "file", "node", "source", "frames", "exception", "message",
                 "chain", "lines", "last_line", "blanks", "fatal", "chained_wait", "exc_at")

    def __init__(self, ev: Event, source: str | None) -> None:
        self.first = ev.line
        self.rank = ev.rank
        self.ts = ev.ts
        self.file = ev.file
        self.node = ev.node
        self.source = source
        self.frames: list[dict[str, Any]] = []
        self.exception: str | None = None
        self.message: str | None = None
        self.chain: list[dict[str, Any]] = []
        self.lines: list[list[Any]] = []
        self.last_line = ev.line
        self.blanks = 0
        self.fatal = False
        self.chained_wait = False
        self.exc_at: dict[str, Any] | None = None  # the final "Type: message" line, as evidence

    def add_line(self, ev: Event) -> None:
        if len(self.lines) < _MAX_TB_LINES:
            self.lines.append([ev.line, ev.text])
        self.last_line = ev.line

    def to_event(self) -> Event:
        text = "\n".join(t for _, t in self.lines)
        fields: dict[str, Any] = {
            "source": self.source,
            "exception": self.exception,
            "message": self.message,
            "frames": self.frames,
            "chain": self.chain,
            "fatal_signal": self.fatal,
            "exception_line": self.exc_at,
            "lines": self.lines,
        }
        fields["oom"] = decompose_oom(self.exception, self.message)
        return Event("exception", self.first, self.rank, self.ts, fields, text, self.file, self.last_line, self.node)


class TracebackAssembler:
    """Stateful filter over record events; see the module docstring."""

    def __init__(self) -> None:
        self.open: _Traceback | None = None

    def feed(self, events: Iterable[Event]) -> Iterator[Event]:
        for ev in events:
            yield from self.step(ev)

    def close(self) -> Iterator[Event]:
        if self.open is not None:
            tb, self.open = self.open, None
            yield tb.to_event()

    def pending(self) -> Event | None:
        """The unfinished traceback as an event, without closing it."""
        return self.open.to_event() if self.open is not None else None

    def _start(self, ev: Event, source: str | None) -> _Traceback:
        tb = _Traceback(ev, source)
        tb.add_line(ev)
        self.open = tb
        return tb

    def step(self, ev: Event) -> Iterator[Event]:
        """Take one record event; yield the events that are complete."""
        kind = ev.kind
        tb = self.open
        prefixed = ev.rank is not None or ev.ts is not None

        if kind == "exc_header":
            source = ev.fields.get("source")
            if tb is not None and source is None and (tb.chained_wait or not tb.frames) and tb.exception is None:
                tb.chained_wait = False  # "Traceback (most recent call last):" continuing a header
                tb.add_line(ev)
                return
            if tb is not None:
                yield from self.close()
            self._start(ev, source)
            return
        if kind == "fatal_error":
            if tb is not None:
                yield from self.close()
            tb = self._start(ev, "faulthandler")
            tb.exception = "Fatal Python error"
            tb.message = ev.fields.get("message")
            tb.fatal = True
            return
        if kind in ("tb_frame", "fh_thread"):
            if tb is None or tb.exception is not None and not tb.chained_wait:
                if tb is not None:
                    yield from self.close()
                tb = self._start(ev, None)  # a traceback whose header was not in the log
            else:
                tb.add_line(ev)
            if kind == "tb_frame":
                tb.frames.append({"path": ev.fields.get("path"), "line": ev.fields.get("lineno"),
                                  "func": ev.fields.get("func"), "code": None, "log_line": ev.line})
            tb.blanks = 0
            return
        if kind == "tb_chain" and tb is not None:
            tb.chain.append({"exception": tb.exception, "message": tb.message, "frames": len(tb.frames)})
            tb.exception = tb.message = None
            tb.chained_wait = True
            tb.add_line(ev)
            return
        if kind == "exc_line" and not prefixed:
            if tb is None and ev.fields.get("exception") in _GENERIC_NAMES:
                yield ev  # "Exception: ..." alone is too common a shape to call a crash
                return
            if tb is None or (tb.exception is not None and not tb.chained_wait):
                if tb is not None:
                    yield from self.close()
                tb = self._start(ev, None)
            else:
                tb.add_line(ev)
            tb.chained_wait = False
            if tb.fatal:
                return
            tb.exception = ev.fields.get("exception")
            tb.message = ev.fields.get("message") or ""
            tb.exc_at = {"line": ev.line, "text": ev.text}
            tb.blanks = 0
            return
        if tb is None:
            yield ev
            return
        # An open traceback: does this record continue it?
        if not prefixed and kind in _CONTINUATION:
            if kind == "blank":
                tb.blanks += 1
                if tb.blanks > 2:
                    yield from self.close()
                    yield ev
                    return
                tb.add_line(ev)
                return
            if tb.exception is None and kind == "indented" and tb.frames and tb.frames[-1]["code"] is None:
                tb.frames[-1]["code"] = ev.text.strip()
            elif tb.exception is not None and kind != "tb_caret":
                tb.message = (tb.message + "\n" if tb.message else "") + ev.text.strip()
            tb.add_line(ev)
            tb.blanks = 0
            return
        if kind == "capture_failed" and tb.exception is None and not prefixed:
            tb.add_line(ev)
            return
        if prefixed and tb.exception is None and (ev.rank is None or ev.rank != tb.rank):
            yield ev  # another process wrote between the frames
            return
        yield from self.close()
        yield ev
