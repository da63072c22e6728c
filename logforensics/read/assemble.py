"""Assemble multi-line records (tracebacks, faulthandler dumps) into one event each.

A Python traceback reaches the log as one record whose continuation lines carry no
prefix, while other ranks keep writing prefixed lines in between. The assembler keeps
one open traceback: prefix-less frame, source, caret and message lines extend it;
prefixed lines of other ranks pass through untouched; the traceback is emitted as one
``exception`` event when it is over. Its constituent lines are kept in the event
(``lines``) so nothing is lost.

Some launchers and logging configurations write a prefix on every line, traceback lines
included (torch's ``[rank3]: ``, a custom formatter's ``... [ TP6 PP0 scheduler.py:2547] ``):
pieces of a traceback (frames, source lines, carets, the exception line) that carry the
rank of the open traceback continue it. Ray's ``[repeated Nx across cluster]`` records
pass through an open traceback without ending it. An out-of-memory message that a
component logged instead of raising (``Failed to initialize X: CUDA out of memory. ...``)
is assembled the same way, with the lines a terminal hard-wrapped it into, as one
``oom_message`` event with its figures decomposed.

The open record is emitted only when the next record proves it over (or at the end
of input), so batch and live parsing give identical events. ``pending()`` lets a live
viewer look at an unfinished traceback without changing what is emitted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ..events import Event
from ..events.types import BOOL, INT, STR, Type, list_of, struct
from .fatal import DIED_TYPE, STORE_TYPE, scheduler_died, store_error
from .oom import OOM_TYPE, decompose_oom
from .raises import raised_in
from .segments import FLAT_EXC, RAY_SUFFIX
from .values import PROCESS_SOURCE

#: Kinds that may continue a traceback's final message (multi-line messages).
#: (``pool_check``: SGLang's per-pool check, which a "pool memory leak detected!" message goes on with)
#: (``cpp_raised``: c10::Error's stack trace header, which a C++ error's message carries)
_CONTINUATION = {"other", "indented", "blank", "tb_caret", "tb_fragment", "pool_check", "cpp_raised"}
_MAX_TB_LINES = 5000
#: Exception names that only count inside a traceback.
_GENERIC_NAMES = frozenset({"Exception", "Error", "Fault", "Exit"})


#: torch.compile's line in an exception's message before the user's frames it was compiling.
_USER_CODE = "from user code:"


def _generic(ev: Event) -> bool:
    """Whether an exception line alone is too common a shape to be a traceback's end: a generic
    name ("Exception: ..."), unless its words are an error SGLang raises in start-up
    (``Exception: Capture cuda graph failed: ...``)."""
    return ev.fields.get("exception") in _GENERIC_NAMES and raised_in(ev.fields.get("message")) is None


#: Kinds that open a traceback when none is open; all others pass straight through.
#: (``warmup_failed``: the launcher's "Initialization failed. warmup error: Traceback (most recent
#: call last):" is the header of the traceback it logs, as uvicorn's "ERROR:    Traceback (most
#: recent call last):" is, ``uvicorn_msg``; with another message either passes through)
TRACEBACK_OPENERS = frozenset({"exc_header", "fatal_error", "tb_frame", "fh_thread", "exc_line", "oom_message",
                               "fh_timeout", "warmup_failed", "uvicorn_msg", "segfault_banner"})
#: The source of a record that a fatal-signal handler's banner opens ("!!!!!!! Segfault
#: encountered !!!!!!!", then the native stack as frames): a native failure, no Python exception.
SEGFAULT_SOURCE = "segfault handler"
#: The source of a traceback that the launcher's warm-up logged (``warmup_failed``).
WARMUP_SOURCE = "warmup"
#: Python's traceback header (also how ``artefacts.sniff`` tells a log from a file of records)
TB_START = "Traceback (most recent call last):"
#: Pieces that can begin a file cut inside a traceback (a frame's source line, a caret line,
#: Python's "During handling of the above exception, another exception occurred:" between the
#: exception above the window and the one raised while handling it): held at line 1, they join
#: the traceback that follows them, or pass on as they were.
_LEAD = frozenset({"indented", "tb_caret", "tb_chain"})
#: Lines of unrecognised text at a file's top that may be the end of an exception's message
#: above the window (CUDA's and torch.compile's advice lines): held while no more than this many
#: came, they join the record only where Python's "During handling of the above exception ..."
#: follows them; anything else, and they pass on as they were. (A traceback's pieces held at a
#: file's top are bounded alike.)
_MESSAGE_TAIL = 64
#: Indented lines at the end of held text that a frame's File line follows: a frame's code line,
#: its caret line, a code line a terminal wrapped
_CODE_LINES = 4
#: A frame's code line and the carets under it: held while no record is open (at most
#: ``_CODE_LINES``), they begin the traceback whose File line follows them (a log's tail that
#: begins inside a traceback, under another program's words); anything else, and they pass on.
_CODE_KINDS = frozenset({"indented", "tb_caret"})
#: Kinds the assembler must see when no record is open: the readers never take their lines in
#: bulk, and a block that holds one goes through the assembler.
ASSEMBLED = TRACEBACK_OPENERS | _CODE_KINDS
#: Kinds that only a traceback's own lines have: with a rank, it came from a prefix that
#: the launcher writes on every line, and the piece belongs to that rank's traceback.
_PIECES = frozenset({"tb_frame", "indented", "tb_caret", "tb_chain", "exc_line", "blank"})
#: Kinds that leave an open traceback open: a mark about the record before it, a kernel
#: library's logger that any process writes at any time, a log viewer's time column.
_TRANSPARENT = frozenset({"ray_dedup", "lib_log", "gloo_connected", "gloo_not_connected", "viewer_stamp"})
#: A word alone on a line right after a frame line: the frame's function name, wrapped
#: by a terminal ("in R" / "untime").
_WRAPPED_WORD = re.compile(r"\w+")
#: An exception line (the grammar's ``exc_line``) as a paste that indented the whole traceback
#: leaves it: read as such only inside a traceback, after a frame's source line, indented less.
_INDENTED_EXC = re.compile(r"(?P<exception>(?:[a-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception|Interrupt|Exit|Fault))"
                           r"(?::(?P<message>.*))?")
#: Python's exception line of any class (``psutil.AccessDenied: (pid=1)``,
#: ``requests.exceptions.ConnectTimeout: ...``, ``StopIteration``), taken only where Python prints
#: it: on the line after a frame's source line (the grammar's own ``EXC_NAME`` knows the usual
#: endings, Error, Exception, ..., anywhere). The name is a module's (dotted) or in CamelCase:
#: a word alone ("Note: ...", "Warning: ...") is another writer's line.
_ANY_EXC = re.compile(r"(?P<exception>(?:[a-z_]\w*\.)+[A-Z]\w*|[A-Z][a-z0-9]+[A-Z]\w*)"
                      r"(?::(?P<message>[ \t].*|))?")


def _flattened(func: str | None) -> tuple[str | None, str | None, re.Match[str] | None]:
    """A frame's function name, its source line and its exception line's match
    (``_INDENTED_EXC``) where the traceback's line breaks were lost and its header is not in
    the log, so the segmenter did not cut it (a paste as one line: ``File "m.py", line 145,
    in __init__ self.x = f() TypeError: f() missing ...``): Python prints a function's name as
    one word, and its code and exception line follow it (:data:`~.segments.FLAT_EXC`).
    Else the name as read, no code, no match: without an exception line after it, what follows
    the name may be another writer's text (Ray's suffix hard-wrapped by a terminal, its rest on
    the next line: ``_wrapped_suffix``), so it is not taken for the code."""
    if not func or " " not in func.strip():
        return func, None, None
    name, rest = func.strip().split(None, 1)
    cut = FLAT_EXC.search(rest)
    exc = _INDENTED_EXC.fullmatch(rest[cut.end():]) if cut else None
    if cut is None or exc is None or exc.group("message") is None:
        return func, None, None  # ("raise ValueError": the class alone is as likely the code's)
    return name, rest[:cut.start()].strip() or None, exc


#: A logging prefix whose stamp has no year (SGLang's multimodal generation server: ``[12-24 08:20:04] ...``):
#: its record has no time stamp (no year is guessed), but it is a record of its own, never a traceback's line.
_DATELESS = re.compile(r"\[\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [A-Z_]+-?\d+)*\] ")
#: A record of another logger that heads its lines with its level in brackets ("[ERROR] ...").
_LEVEL_TAG = re.compile(r"\[(?:CRITICAL|ERROR|WARNING|WARN|INFO|DEBUG)\] ")
#: grep's line between two groups of matches and their context (``grep -A``/``-B``/``-C``): lines
#: of the log are left out there, and it is no frame's source line.
_GREP_GAP = "--"
#: What CPython prints after a fatal error's dump of the threads (``_Py_DumpExtensionModules``).
_EXTENSION_MODULES = "Extension modules: "
#: Functions a process or thread starts in: a traceback's outermost frame, printed first.
_ENTRY_FUNCS = frozenset({"run_scheduler_process", "run_detokenizer_process", "run_data_parallel_controller_process",
                          "<module>", "_run_module_as_main", "_bootstrap", "_bootstrap_inner"})
#: A frame as faulthandler prints it (``File "x.py", line 508 in __init__``: no comma before
#: ``in``, no source line after it), most recent call first; Python's traceback writes
#: ``line 508, in __init__``. The grammar reads both as ``tb_frame`` (``fh_frame``).
_FH_FRAME = re.compile(r'", line \d+ in ')
#: A frame of a native handler's backtrace (SGLang's segfault handler, after its "Segfault
#: encountered" banner: ``File "<unknown>", line 0, in _PyEval_EvalFrameDefault``), innermost first.
_NATIVE_FRAME = re.compile(r'File "<unknown>", line 0, in ')
#: What a native backtrace whose banner is above the window says (no words of its own are in the log).
NATIVE_HEADERLESS = "a native stack dump (its banner is not in this log)"
#: The source of a faulthandler stack whose header ("Fatal Python error: ...", "Current
#: thread 0x...", "Stack (most recent call first):") is not in the log: it has no exception
#: line, and what wrote it is above the window.
FH_HEADERLESS = "faulthandler"
#: torch's advice after a CUDA (or HIP) error's message (c10's device check): a window that
#: opens on it opens inside that error's message, the exception line above the window
_GPU_ERROR_ADVICE = re.compile(r"(?:CUDA|HIP) kernel errors might be asynchronously reported|"
                               r"For debugging consider passing (?:CUDA|HIP)_LAUNCH_BLOCKING=1|"
                               r"Compile with `TORCH_USE_(?:CUDA|HIP)_DSA`|Search for `(?:cuda|hip)Error\w*' in ")
#: The source of such a message's tail, as a record of its own (its exception is not in the log).
GPU_ERROR_TAIL = "gpu_error_message"


#: A record's physical lines: (line number, text) each.
LINES_TYPE: Type = list_of(struct(line=INT, text=STR))
#: The fields of the records assembled here, and their types (``events/schema.py`` is derived
#: from these, the converters' declarations and the grammar's samples).
FIELDS: dict[str, dict[str, Type]] = {
    "exception": {
        "source": STR, "exception": STR, "message": STR,
        "frames": list_of(struct(path=STR, line=INT, func=STR, code=STR, log_line=INT)),
        "chain": list_of(struct(exception=STR, message=STR, frames=INT)),
        "fatal_signal": BOOL, "exception_line": struct(line=INT, text=STR), "header_cut": BOOL,
        "lines": LINES_TYPE, "oom": OOM_TYPE, "scheduler_died": DIED_TYPE,
        "store": STORE_TYPE,
        # a fatal error's dump whose failing thread is not in the log: every thread's frames there
        "dump_frames": list_of(struct(path=STR, line=INT, func=STR, code=STR, log_line=INT)),
    },
    "oom_message": {"what": STR, "message": STR, "oom": OOM_TYPE, "lines": LINES_TYPE},
    # faulthandler.dump_traceback_later's dump of every thread ("Timeout (0:00:00.500000)!", then
    # "Thread 0x.. (most recent call first):" and frames): the process goes on, no crash
    "thread_dump": {"source": STR, "frames": list_of(struct(path=STR, line=INT, func=STR, code=STR, log_line=INT)),
                    "lines": LINES_TYPE},
}


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


def _body(ev: Event) -> str:
    """A record's text without the prefix a launcher writes on every line, stripped."""
    return str(ev.fields.get("body", ev.text)).strip()


#: Packages of the HTTP server in front of SGLang's tokenizer manager: a traceback whose every
#: frame is in them (and none in SGLang) is one request's failure inside the web layer, which
#: uvicorn logs and goes on from ("Exception in ASGI application"), not a rank's end.
_HTTP_LAYER = re.compile(r"/(?:starlette|uvicorn|fastapi|h11|anyio|asyncio)/")
#: SGLang's own package in a path: its directory inside an installation (``site-packages/sglang/``)
#: or a source tree (``python/sglang/``), or its ``srt`` runtime; not a directory that is only
#: named so (a conda environment ``envs/sglang/``, a user's checkout ``~/sglang/``)
_SGLANG_PACKAGE = re.compile(r"(?:site-packages|dist-packages|python)/sglang/|/sglang/srt/")


def _in_http_layer(path: str) -> bool:
    """Whether a frame's file is in one of the HTTP server's packages and not in SGLang: the
    package's directory is in its path, with no SGLang package directory in it."""
    return bool(_HTTP_LAYER.search(path)) and not _SGLANG_PACKAGE.search(path)


#: Records whose message may be the header of the traceback their logger logs after it:
#: the launcher's ``Initialization failed. warmup error: ...`` (``_wait_and_warmup``), and
#: uvicorn's ``ERROR:    Traceback (most recent call last):`` and ``Exception in ASGI application``; the source
#: each traceback takes (the ASGI record's traceback: ``http_request``, one request's failure).
LEADS_INTO_TRACEBACK = {"warmup_failed": WARMUP_SOURCE, "uvicorn_msg": None}
#: uvicorn's record of a request whose handler raised ("ERROR:    Exception in ASGI application"),
#: the traceback it logs on the next lines: one request's failure, answered with a 500.
ASGI_EXCEPTION = "Exception in ASGI application"
#: The source of one request's traceback, which the HTTP server logs and goes on from.
HTTP_REQUEST_SOURCE = "http_request"


def _code_above(held: list[Event]) -> list[Event]:
    """The indented lines at the end of ``held`` with the carets Python printed under them (at
    most ``_CODE_LINES``, after its first line, beginning with a code line): the code of a frame
    whose File line is not in the log, when a frame follows them."""
    n = 0
    while n < min(_CODE_LINES, len(held) - 1) and held[-1 - n].kind in _CODE_KINDS:
        n += 1
    while n and held[len(held) - n].kind != "indented":  # carets under no code line here
        n -= 1
    return held[len(held) - n:] if n else []


def lead_header(ev: Event) -> bool | None:
    """For a record that logs a traceback after its own words (``LEADS_INTO_TRACEBACK``): True
    when its message is a traceback's header, the record the frames on the next lines continue;
    False when it is the header cut at the window's end ("Traceback (m", the warm-up's only);
    None for any other message or record."""
    if ev.kind not in LEADS_INTO_TRACEBACK:
        return None
    message = str(ev.fields.get("message") or "").strip()
    if ev.kind != "warmup_failed":
        return True if message in (TB_START, ASGI_EXCEPTION) else None
    if message == TB_START:
        return True
    return False if message and TB_START.startswith(message) else None


#: SGLang's HTTP server module (``srt/entrypoints/http_server.py``; sglang-jax's alike), and the
#: functions there that are the server's own life, not a request's (its import, its launch, its
#: lifespan, which builds the OpenAI handlers, its warm-up): a frame of any other is a route handler's.
_HTTP_ENTRY = re.compile(r"/srt/entrypoints/http_server\.py$")
_SERVER_LIFE = frozenset({"<module>", "launch_server", "_launch_subprocesses", "lifespan", "_wait_and_warmup",
                          "_execute_server_warmup", "warmup_thread_func"})
#: The ASGI stack's dispatch of one request to its route (uvicorn's ``run_asgi``, starlette's
#: ``wrapped_app`` and ``request_response``, fastapi's ``run_endpoint_function``): what raises
#: through it is answered with a 500 by the server's error middleware, which goes on serving.
_REQUEST_DISPATCH = frozenset({"run_asgi", "wrapped_app", "request_response", "run_endpoint_function"})


def http_layer_source(frames: list[dict[str, Any]]) -> str | None:
    """``HTTP_REQUEST_SOURCE`` when a traceback is one request's, which the HTTP server logs and goes
    on from (``model.failures.CAUGHT_SOURCES``): every frame in the HTTP server's packages (a
    window cut inside uvicorn's ``run_asgi`` and the middleware stack), or a frame in one of
    SGLang's route handlers (``v1_score_request`` and what it awaits: a request's coroutine,
    which the launcher and the schedulers never run), or one the ASGI stack dispatched to a route
    (``_REQUEST_DISPATCH``); with or without its exception line.
    Else None."""
    paths = [str(f.get("path") or "") for f in frames]
    if paths and all(_in_http_layer(p) for p in paths) and any("/asyncio/" not in p for p in paths):
        return HTTP_REQUEST_SOURCE
    if any(_HTTP_ENTRY.search(p) and f.get("func") not in _SERVER_LIFE for p, f in zip(paths, frames)):
        return HTTP_REQUEST_SOURCE
    if any(_in_http_layer(p) and f.get("func") in _REQUEST_DISPATCH for p, f in zip(paths, frames)) \
            and not any(f.get("func") in _SERVER_LIFE for f in frames):
        return HTTP_REQUEST_SOURCE  # a route of any of SGLang's servers (the multimodal one's image_api)
    return None


#: Frames of the processes that never answer a request themselves (the schedulers, their model
#: workers): their traceback before a request's 500 is theirs, not the request's.
_SCHEDULER_SIDE = re.compile(r"/srt/(?:managers/(?:scheduler|tp_worker)\w*\.py|model_executor/)")


def _answers_it(tb: _Traceback, ev: Event) -> bool:
    """Whether the HTTP server's access line ``ev`` answering a request with a 5xx right after a
    traceback that names no process (no header, no rank, no scheduler frame) is that request's
    answer: the traceback is the request's failure, which the server logged and went on from."""
    status = ev.fields.get("status")
    return (isinstance(status, int) and 500 <= status < 600 and ev.line == tb.last_line + 1 and tb.held is None
            and tb.source is None and tb.rank is None and tb.exception is not None
            and not any(_SCHEDULER_SIDE.search(str(f.get("path") or "")) for f in tb.frames))


class _Traceback:
    __slots__ = ("first", "rank", "ts", "file", "node", "source", "frames", "exception", "message",
                 "chain", "lines", "last_line", "blanks", "fatal", "chained_wait", "exc_at",
                 "piece_rank", "header_cut", "oom_record", "what", "thread_dump", "held", "blocks", "fh_stack",
                 "user_code")

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
        self.lines: list[tuple[int, str]] = []
        self.last_line = ev.line
        self.blanks = 0
        self.fatal = False
        self.chained_wait = False
        self.exc_at: dict[str, Any] | None = None  # the final "Type: message" line, as evidence
        self.piece_rank: str | None = None  # the rank that a line prefix gave this traceback's pieces
        self.header_cut = bool(ev.fields.get("header_cut"))
        self.oom_record = False  # an out-of-memory message logged outside a traceback
        self.what: str | None = None
        self.thread_dump = False  # faulthandler's timed dump of every thread, not a failure
        #: a file's first lines, held while only pieces that may lead into a traceback came
        #: (``TracebackAssembler.opens``): None once a frame or exception line joined them
        self.held: list[Event] | None = None
        #: a fatal error's thread dumps: (index of the first frame, whether faulthandler marks
        #: it the current thread), each printed most recent call first
        self.blocks: list[tuple[int, bool]] = []
        #: frames in faulthandler's form with no header above them (a window cut inside a
        #: fatal error's or a signal's dump): most recent call first, no source lines
        self.fh_stack = False
        #: the message went on with torch.compile's "from user code:": the frames under it
        #: (indented by three spaces) are the message's, not another traceback's
        self.user_code = False

    def owns(self, ev: Event) -> bool:
        """Whether a piece of a traceback that carries a rank (from a line prefix) is ours."""
        rank = ev.rank
        if rank is None or rank == self.rank or rank == self.piece_rank:
            return True
        if self.piece_rank is None and len(self.lines) <= 1:
            self.piece_rank = rank  # "[rank0]: [.. TP0] Scheduler hit an exception:", then "[rank0]: File ..."
            return True
        return False

    def printed_newest_first(self) -> bool:
        """Whether these frames, with no header above them and no exception line, are a
        traceback that a console listing lines newest first (a Kubernetes dashboard's or
        a log viewer's export) turned over: its outermost frame, where the process
        started, is the last, and its header follows it."""
        frames = self.frames
        return (self.source is None and not self.header_cut and self.exception is None and not self.chain
                and len(frames) >= 2 and frames[0]["log_line"] == self.first
                and frames[-1]["func"] in _ENTRY_FUNCS and frames[0]["func"] not in _ENTRY_FUNCS)

    def headers_only(self) -> bool:
        """Whether this record is so far a traceback's header alone (no frame, exception, message
        or chain): another header under it is a second process's, its body still to come."""
        return (self.source is not None and not self.frames and self.exception is None and not self.message
                and not self.chain and not self.fatal and not self.thread_dump and not self.oom_record
                and self.held is None)

    def take_header_below(self, ev: Event, source: str | None) -> None:
        """The header printed below the frames of a traceback turned over: the record is
        the header's (its line, rank and source); the frames go back to the order Python
        printed them, each with the source line printed above it."""
        codes = [f["code"] for f in self.frames]
        for i, f in enumerate(self.frames):
            f["code"] = codes[i - 1] if i else None
        self.frames.reverse()
        self.first, self.rank, self.ts, self.source = ev.line, ev.rank, ev.ts, source
        self.header_cut = bool(ev.fields.get("header_cut"))
        self.add_line(ev)

    def fatal_header_cut(self) -> None:
        """A faulthandler dump that turns out to be a fatal error's, its ``Fatal Python error: ...``
        header not in the log (CPython lists the extension modules after a fatal error's dump
        only, never after a timed or a signal's dump)."""
        if self.fh_stack and not self.blocks:  # frames alone, most recent call first: one thread's
            self.blocks.append((0, True))
            self.fh_stack = False
        self.thread_dump = False
        self.fatal = self.header_cut = True  # (its exception, the header's text, is not read: not in the log)

    def line_text(self, line: int) -> str | None:
        """The text of the record's physical ``line``, if it is kept."""
        return next((t for n, t in reversed(self.lines) if n == line), None)

    def add_line(self, ev: Event) -> None:
        if len(self.lines) < _MAX_TB_LINES:
            self.lines.append((ev.line, ev.text))
        self.last_line = ev.line

    def to_event(self) -> Event:
        text = "\n".join(t for _, t in self.lines)
        if self.oom_record:
            fields_: dict[str, Any] = {"what": self.what, "message": self.message,
                                       "oom": decompose_oom("OutOfMemoryError", self.message), "lines": self.lines}
            return Event("oom_message", self.first, self.rank, self.ts, fields_, text, self.file, self.last_line,
                         self.node)
        if self.thread_dump:
            return Event("thread_dump", self.first, self.rank, self.ts,
                         {"source": self.source, "frames": self.frames, "lines": self.lines}, text, self.file,
                         self.last_line, self.node)
        frames = self.frames
        dump: list[dict[str, Any]] | None = None
        if self.fh_stack:  # printed most recent call first: innermost last, as Python prints a traceback
            frames = frames[::-1]
        if (self.fatal or self.fh_stack) and self.blocks:  # a dump's threads: the failing one's stack, in
            # Python's order (innermost last); never one stack of several threads' frames
            frames = _failing_thread(self.frames, self.blocks)
            if not frames:  # the failing thread's block is not in the log: the others place the process
                dump = [fr for start, _ in self.blocks for fr in _block(self.frames, start)]
        fields: dict[str, Any] = {
            "source": self.source or http_layer_source(self.frames),
            "exception": self.exception,
            "message": self.message,
            "frames": frames,
            "chain": self.chain,
            "fatal_signal": self.fatal,
            "exception_line": self.exc_at,
            "header_cut": self.header_cut,
            "lines": self.lines,
        }
        if dump is not None:  # only where the failing thread is cut (no key on every other record)
            fields["dump_frames"] = dump
        fields["oom"] = decompose_oom(self.exception, self.message)
        # the launcher's "Rank 0 scheduler died during initialization (exit code: -9)"
        fields["scheduler_died"] = scheduler_died(self.message) if self.exception else None
        # torch.distributed's store that a rank could not reach, or that waited for the others, in
        # time (only on such records, as dump_frames)
        if self.exception and (store := store_error(self.message)) is not None:
            fields["store"] = store
        return Event("exception", self.first, self.rank, self.ts, fields, text, self.file, self.last_line, self.node)


def _failing_thread(frames: list[dict[str, Any]], blocks: list[tuple[int, bool]]) -> list[dict[str, Any]]:
    """The frames of the thread faulthandler marks current, innermost last as Python prints a
    traceback: faulthandler prints each thread most recent call first, its frames on
    consecutive lines (a native backtrace after them is another record's). None when no block
    of the dump is marked current: the failing thread's is not in the log, and another thread's
    stack is not the failure's."""
    start = next((i for i, current in blocks if current), None)
    return [] if start is None else _block(frames, start)[::-1]


def _block(frames: list[dict[str, Any]], start: int) -> list[dict[str, Any]]:
    """One dumped thread's frames, as printed: those on consecutive lines from ``start``."""
    run: list[dict[str, Any]] = []
    for fr in frames[start:]:
        if run and fr["log_line"] != run[-1]["log_line"] + 1:
            break
        run.append(fr)
    return run


class TracebackAssembler:
    """Stateful filter over record events; see the module docstring."""

    def __init__(self) -> None:
        self.open: _Traceback | None = None
        #: code lines held while no record is open (``_CODE_KINDS``)
        self.code: list[Event] = []

    @property
    def idle(self) -> bool:
        """Whether nothing is open or held: an event that :meth:`opens` no record passes by."""
        return self.open is None and not self.code

    def close(self) -> Iterator[Event]:
        if self.code:
            yield from self._release()
        if self.open is not None:
            tb, self.open = self.open, None
            if tb.held is not None and tb.held[0].kind == "other" and _GPU_ERROR_ADVICE.match(tb.held[0].text):
                # the end of a GPU error's message, its traceback above the window: that error's record
                held, tb.held, tb.source, tb.header_cut = tb.held, None, GPU_ERROR_TAIL, True
                n = len(held)
                while held[n - 1].kind == "blank":
                    n -= 1
                for h in held[1:n]:
                    tb.add_line(h)
                tb.message = "\n".join(_body(h) for h in held[:n])
                yield tb.to_event()
                yield from held[n:]
            elif tb.held is not None:  # no traceback followed: the lines are what they were
                yield from tb.held
            else:
                yield tb.to_event()

    def pending(self) -> Event | None:
        """The unfinished traceback as an event, without closing it."""
        return self.open.to_event() if self.open is not None and self.open.held is None else None

    @staticmethod
    def opens(ev: Event) -> bool:
        """Whether ``ev`` may begin a record here when none is open (:meth:`_begins`), or is a
        code line the assembler holds until it sees what follows (``_CODE_KINDS``)."""
        return TracebackAssembler._begins(ev) or ev.kind in _CODE_KINDS and ev.ts is None

    @staticmethod
    def _begins(ev: Event) -> bool:
        """Whether ``ev`` may begin a record here when none is open: a traceback's opener, or
        a piece of one on a file's first line (a window cut inside a traceback, whose record
        then begins at line 1)."""
        return ev.kind in TRACEBACK_OPENERS or (ev.line == 1 and ev.ts is None and (
            ev.rank is None and (ev.kind in _LEAD or ev.kind == "other")
            or ev.kind in _LEAD))  # (a piece behind a prefix of every line: torch's "[rank2]:")

    def _release(self) -> list[Event]:
        held, self.code = self.code, []
        return held

    def _hold_code(self, ev: Event) -> Iterator[Event] | None:
        """Where no record is open: hold a code line (or the carets under one), or begin the
        traceback the held lines are the first frame's code of, when a File line of their
        process follows them; else release them. None when ``ev`` is to be read on (the held
        lines, if any, then yielded before it)."""
        held = self.code
        if held and ev.ts is None and ev.rank == held[0].rank and ev.line == held[-1].line + 1:
            if ev.kind == "tb_frame":  # the frame's File line is above the window: the traceback begins here
                self.code = []
                tb = self._start(held[0], None)
                for h in held[1:]:
                    tb.add_line(h)
                return None
            if ev.kind in _CODE_KINDS and not self._begins(ev):
                held.append(ev)
                return iter([held.pop(0)]) if len(held) > _CODE_LINES else iter(())
        if ev.kind == "indented" and ev.ts is None and not self._begins(ev):
            out = self._release()
            self.code = [ev]
            return iter(out)
        return None

    def _start(self, ev: Event, source: str | None) -> _Traceback:
        tb = _Traceback(ev, source)
        tb.add_line(ev)
        self.open = tb
        return tb

    def _start_oom(self, ev: Event) -> None:
        rec = self._start(ev, None)
        rec.oom_record = True
        rec.what = ev.fields.get("what")
        rec.message = ev.fields.get("message") or ""

    @staticmethod
    def _wrapped_suffix(tb: _Traceback, ev: Event) -> Event | None:
        """Ray's ``[repeated 27x across cluster]`` hard-wrapped by a terminal over the end of the
        traceback's last line and the whole of ``ev`` (``[repeated 27x `` / ``across cluster]``):
        the part on the last line is cut off the piece it was read into (a frame's function, a
        source line, the message), and the suffix is the ``ray_dedup`` record it is when whole."""
        if not tb.lines or tb.lines[-1][0] != ev.line - 1:
            return None
        head = tb.lines[-1][1]
        m = RAY_SUFFIX.search(head + ev.text)  # (``segments`` cuts off a suffix a line holds whole)
        if m is None or m.start() >= len(head):  # the suffix begins on the last line
            return None
        cut = head[m.start():].rstrip()
        last = tb.frames[-1] if tb.frames else None
        if tb.exception is not None and tb.message is not None and tb.message.endswith(cut):
            tb.message = tb.message[:-len(cut)]
        elif last is not None and last["code"] is not None and last["code"].endswith(cut):
            last["code"] = last["code"][:-len(cut)]
        elif last is not None and last["code"] is None and last["log_line"] == tb.lines[-1][0] \
                and (last["func"] or "").endswith(cut):
            last["func"] = last["func"][:-len(cut)]
        return Event("ray_dedup", tb.lines[-1][0], ev.rank, ev.ts, {"count": int(m.group(1))},
                     head[m.start():] + "\n" + ev.text, ev.file, ev.line, ev.node)

    def step(self, ev: Event) -> Iterator[Event]:
        """Take one record event; yield the events that are complete."""
        kind = ev.kind
        if self.open is None:
            holding = self._hold_code(ev)
            if holding is not None:
                yield from holding
                return
            if self.code:  # no File line follows them: the held lines are what they were
                yield from self._release()
            if self.open is None and not self._begins(ev):  # (a code line the hold let go)
                yield ev
                return
        tb = self.open
        prefixed = ev.rank is not None or ev.ts is not None or _DATELESS.match(ev.text) is not None
        if kind in _TRANSPARENT:
            yield ev
            return
        if tb is not None and kind == "http_access" and _answers_it(tb, ev):
            tb.source = HTTP_REQUEST_SOURCE
        if tb is None and kind == "indented" and self._begins(ev):
            exc = _INDENTED_EXC.fullmatch(_body(ev))
            if exc is not None and exc.group("exception") not in _GENERIC_NAMES:
                # a window that a paste indented whole, opening on the exception line of a
                # traceback cut above it: that traceback's end, as an exception line there is
                tb = self._start(ev, None)
                tb.exception, tb.message = exc.group("exception"), (exc.group("message") or "").strip()
                tb.exc_at = {"line": ev.line, "text": ev.text}
                return
        if tb is None and kind == "other" and self._begins(ev) and ev.text.startswith(_EXTENSION_MODULES):
            # a window that opens on the list CPython prints only at the end of a fatal error's
            # dump: that error's record, its header and its process above the window
            tb = self._start(ev, FH_HEADERLESS)
            tb.fatal_header_cut()
            return
        if tb is None and self._begins(ev) and (kind in _LEAD or kind == "other"):
            tb = self._start(ev, None)
            tb.held = [ev]
            if kind == "tb_chain":  # the exception it follows is above the window
                tb.chain.append({"exception": None, "message": None, "frames": 0})
                tb.chained_wait = True
            return
        held = tb.held if tb is not None else None
        if held and ev.rank is not None and ev.rank == held[0].rank and ev.ts is None and kind in _PIECES:
            prefixed = False  # the held lines' prefix, on every line of theirs
        if tb is not None and held is not None:
            tail = held[0].kind == "other"  # a message's end, or text that is no traceback's
            if not prefixed and kind == "tb_chain" and tail:
                # the exception above the window was raised while handling the one these lines end
                tb.held = None
                for h in held[1:]:
                    tb.add_line(h)
                tb.chain.append({"exception": None, "message": "\n".join(_body(h) for h in held).strip(),
                                 "frames": 0})
                tb.chained_wait = True
                tb.add_line(ev)
                return
            # text under which Python printed its carets is a frame's code line: the traceback's
            # last frame, whose File line is above the window, then its exception
            carets = tail and len(held) >= 2 and held[-1].kind == "tb_caret" and kind == "exc_line"
            if (not tail or carets) and not prefixed and (kind in ("tb_frame", "exc_line") or kind == "exc_header"
                                                          and tb.chained_wait and ev.fields.get("source") is None):
                tb.held = None  # the traceback the held lines lead into
                for h in held[1:]:
                    tb.add_line(h)
            elif prefixed or kind not in _CONTINUATION or kind == "blank" and tb.blanks >= 2 \
                    or len(held) >= _MESSAGE_TAIL:
                code = _code_above(held) if tail and kind == "tb_frame" and not prefixed else []
                if code:  # the text held is no traceback's, but the code lines at its end are a frame's
                    del held[-len(code):]
                yield from self.close()
                tb = None
                if code:
                    tb = self._start(code[0], None)
                    for h in code[1:]:
                        tb.add_line(h)
            else:
                held.append(ev)  # (only the held lines keep it: it joins the traceback with them)
                return
        if tb is not None and tb.oom_record:
            if not prefixed and kind in ("other", "indented", "tb_fragment", "pool_check"):
                tb.message = (tb.message or "") + "\n" + _body(ev)  # a terminal's hard wrap
                tb.add_line(ev)
                return
            yield from self.close()
            tb = None
        if kind == "oom_message":
            if tb is not None and tb.exception is None and prefixed and ev.rank != tb.rank:
                rec = _Traceback(ev, None)  # another rank's message between the frames: this line alone
                rec.oom_record, rec.what, rec.message = True, ev.fields.get("what"), ev.fields.get("message") or ""
                rec.add_line(ev)
                yield rec.to_event()
                return
            yield from self.close()
            self._start_oom(ev)
            return
        if tb is not None and ev.rank is not None and kind in _PIECES and tb.owns(ev):
            prefixed = False  # a traceback line behind a prefix of every line
        elif tb is not None and kind == "tb_frame" and not tb.owns(ev):
            yield from self.close()  # another rank's traceback, each line behind its prefix
            tb = None

        lead = lead_header(ev)
        if lead is not None:  # a logger's record, its traceback's header at its end
            if tb is not None:
                yield from self.close()
            source = HTTP_REQUEST_SOURCE if str(ev.fields.get("message") or "").strip() == ASGI_EXCEPTION \
                else LEADS_INTO_TRACEBACK[kind]
            self._start(ev, source).header_cut = not lead
            return
        if kind == "exc_header":
            source = ev.fields.get("source")
            if tb is not None and source is None and (tb.chained_wait or not tb.frames) and tb.exception is None:
                tb.chained_wait = False  # "Traceback (most recent call last):" continuing a header
                tb.add_line(ev)
                return
            if tb is not None and tb.printed_newest_first() and tb.rank in (None, ev.rank):
                tb.take_header_below(ev, source)
                yield from self.close()
                return
            if tb is not None and tb.headers_only() and ev.rank is None and tb.rank is None \
                    and ev.fields.get("exception") is None:
                # children ended together print their headers before their bodies ("Process
                # Process-2:", "Process Process-1:", two "Traceback" lines, then each body): the
                # header waits with the first for a body, not a record without frames of its own
                if tb.source == PROCESS_SOURCE:  # (a header that names the process says more)
                    tb.source = source
                tb.add_line(ev)
                return
            if tb is not None:
                yield from self.close()
            tb = self._start(ev, source)
            if ev.fields.get("exception") is not None:
                # "Scheduler hit an exception: torch._dynamo.exc.Unsupported: ...": the traceback's
                # text begins at its exception (its frames not printed or not pasted); a chained
                # traceback may follow ("The above exception was the direct cause ...")
                tb.exception = ev.fields["exception"]
                tb.message = ev.fields.get("message") or ""
                tb.exc_at = {"line": ev.line, "text": ev.text}
            return
        if kind == "fh_timeout":  # a timed dump of every thread: its own record, never a crash
            if tb is not None:
                yield from self.close()
            self._start(ev, "faulthandler").thread_dump = True
            return
        if kind == "fatal_error":
            if tb is not None:
                yield from self.close()
            tb = self._start(ev, "faulthandler")
            tb.exception = "Fatal Python error"
            tb.message = ev.fields.get("message")
            tb.fatal = True
            return
        if kind == "segfault_banner" and tb is not None and tb.fatal:
            tb.add_line(ev)  # the native handler's report of the same fatal error (349): its stack joins it
            tb.blanks = 0
            return
        if kind == "segfault_banner":  # the native frames under it are the record's
            if tb is not None:
                yield from self.close()
            tb = self._start(ev, SEGFAULT_SOURCE)
            tb.message = "Segfault encountered"
            tb.fatal = True
            tb.fh_stack = True  # a native backtrace: the innermost call first
            return
        if kind == "tb_frame" and tb is not None and tb.user_code and not prefixed and tb.blanks < 2:
            tb.message = (tb.message + "\n" if tb.message else "") + _body(ev)  # torch.compile's user frames
            tb.add_line(ev)
            tb.blanks = 0
            return
        if kind in ("tb_frame", "fh_thread"):
            # faulthandler's dump after "Fatal Python error: ..." (a blank line, then "Thread
            # 0x.. (most recent call first):" and its frames, thread after thread) is the record's
            if tb is None or tb.exception is not None and not tb.chained_wait and not tb.fatal:
                if tb is not None:
                    yield from self.close()
                if kind == "fh_thread":  # faulthandler's dump with no fatal error above it: the
                    tb = self._start(ev, "faulthandler")  # process may go on
                    tb.thread_dump = True
                    tb.blocks.append((0, ev.text.lstrip().startswith("Current thread")))
                    return
                tb = self._start(ev, None)  # a traceback whose header was not in the log
                if kind == "tb_frame" and _NATIVE_FRAME.search(ev.text):  # a native handler's backtrace, its
                    tb.source, tb.fatal, tb.fh_stack = SEGFAULT_SOURCE, True, True  # banner above the window
                    tb.message = NATIVE_HEADERLESS
                elif kind == "tb_frame" and _FH_FRAME.search(ev.text):  # faulthandler's: no exception line
                    tb.fh_stack, tb.source = True, FH_HEADERLESS
            else:
                tb.add_line(ev)
            if kind == "fh_thread" and tb.fh_stack and not tb.blocks and tb.frames:
                tb.blocks.append((0, False))  # the frames above: another thread's, its header cut
            if kind == "fh_thread" and (tb.fatal or tb.thread_dump or tb.fh_stack):
                tb.blocks.append((len(tb.frames), ev.text.lstrip().startswith("Current thread")))
            if kind == "tb_frame":
                func, source, exc = _flattened(ev.fields.get("func"))
                tb.frames.append({"path": ev.fields.get("path"), "line": ev.fields.get("lineno"),
                                  "func": func, "code": source, "log_line": ev.line})
                if exc is not None and tb.exception is None:
                    tb.exception, tb.message = exc.group("exception"), (exc.group("message") or "").strip()
                    tb.exc_at = {"line": ev.line, "text": ev.text}
            tb.blanks = 0
            return
        if kind == "tb_chain" and tb is not None:
            tb.chain.append({"exception": tb.exception, "message": tb.message, "frames": len(tb.frames)})
            tb.exception = tb.message = None
            tb.chained_wait = True
            tb.blanks = 0  # the empty lines before it were the message's and Python's, not the record's end
            tb.add_line(ev)
            return
        if kind == "exc_line" and prefixed and not _generic(ev):
            # a rank's exception alone on its prefixed line ("[.. TP4] RuntimeError: ..."): the last
            # line of a traceback whose frames are not in the log; lines without a prefix may go on
            # with its message
            yield from self.close()
            tb = self._start(ev, None)
            tb.exception = ev.fields.get("exception")
            tb.message = ev.fields.get("message") or ""
            tb.exc_at = {"line": ev.line, "text": ev.text}
            return
        if kind == "exc_line" and not prefixed:
            if tb is None and _generic(ev):
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
            if kind in ("other", "indented") and ev.text.rstrip().endswith("]"):
                dedup = self._wrapped_suffix(tb, ev)
                if dedup is not None:  # the rest of Ray's suffix, which a terminal wrapped onto this line
                    tb.add_line(ev)
                    yield dedup
                    return
            if tb.exception is not None and (tb.blanks >= 2 or tb.blanks and kind == "other"
                                             and _LEVEL_TAG.match(ev.text)):
                # after the exception and an empty line, another logger's record ("[ERROR] TBE
                # Subprocess[task_distribute] raise error[], main process disappeared!"), or any
                # text after two empty lines (Python's own print ends with one, a message's last
                # newline may make a second: a third is another writer's): no message's
                yield from self.close()
                yield ev
                return
            if (tb.thread_dump or tb.fh_stack) and kind == "other" and ev.text.startswith(_EXTENSION_MODULES):
                tb.fatal_header_cut()  # only a fatal error's dump lists them: its header is above the window
                tb.add_line(ev)
                return
            if (tb.fatal or tb.thread_dump) and tb.frames and kind == "other" and not tb.blanks \
                    and tb.frames[-1]["log_line"] == ev.line - 1 and not ev.text.startswith(_EXTENSION_MODULES):
                # faulthandler ends a thread's frames with an empty line: a line of text right
                # after a frame is another writer's (a script's "--- End of error details ---"),
                # and ends the dump
                yield from self.close()
                yield ev
                return
            last = tb.frames[-1] if tb.frames else None
            exc = None
            if tb.exception is None and last is not None and last["code"] is not None \
                    and not (tb.fh_stack or tb.fatal or tb.thread_dump):
                if kind == "indented" and _indent(ev.text) < _indent(tb.line_text(last["log_line"] + 1) or ""):
                    # the traceback's exception, indented by a paste less than the source lines above it
                    exc = _INDENTED_EXC.fullmatch(_body(ev))
                elif kind == "other" and tb.last_line == ev.line - 1:
                    # the exception line, whatever its class's name, where Python prints it
                    exc = _ANY_EXC.fullmatch(ev.text.rstrip())
            if exc is not None:
                tb.exception, tb.message = exc.group("exception"), (exc.group("message") or "").strip()
                tb.exc_at = {"line": ev.line, "text": ev.text}
                tb.chained_wait = False
                tb.add_line(ev)
                tb.blanks = 0
                return
            if (tb.exception is None and kind == "other" and last is not None and last["code"] is None
                    and last["log_line"] == ev.line - 1 and _WRAPPED_WORD.fullmatch(ev.text)):
                last["func"] = (last["func"] or "") + ev.text  # "..., line 39, in R" / "untime"
            elif (tb.exception is None and last is not None and last["code"] is None and not tb.fh_stack
                  and (kind == "indented" or kind == "other" and not ev.text.startswith("["))
                  and ev.text.rstrip() != _GREP_GAP):
                tb.frames[-1]["code"] = _body(ev)  # the source line (its indentation may be stripped)
            elif tb.exception is not None and kind != "tb_caret" and not tb.fatal:
                # (a fatal error's message is its line: faulthandler's dump and the
                # "Extension modules: ..." list after it are not)
                tb.message = (tb.message + "\n" if tb.message else "") + _body(ev)
                tb.user_code = tb.user_code or _body(ev).strip() == _USER_CODE
            tb.add_line(ev)
            tb.blanks = 0
            return
        if kind == "capture_failed" and tb.exception is None and not prefixed:
            tb.add_line(ev)
            return
        if prefixed and tb.thread_dump and ev.line != tb.last_line:  # the dump went to stderr; a logged
            yield from self.close()  # line ends it (one torn into the dump's line is another process's write)
            yield ev
            return
        if prefixed and tb.exception is None and (ev.rank is None or ev.rank != tb.rank):
            yield ev  # another process wrote between the frames
            return
        yield from self.close()
        yield ev
