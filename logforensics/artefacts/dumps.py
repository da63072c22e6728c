"""SGLang's crash dumps, crash snapshots and incident bundles, summarised without running them.

``--crash-dump-folder`` makes SGLang pickle the requests of its last minutes before it dies
(``tokenizer_manager.py`` ``dump_requests_before_crash``: a dict of ``server_args``,
``requests`` and ``launch_command``). Loading a pickle runs whatever it names, and a dump is
often copied from a machine nobody here controls, so :func:`read_crash_dump` never unpickles:
it walks the opcodes (:func:`pickletools.genops`) through a small stack machine that builds
only plain values (str, bytes, numbers, None, lists, tuples, dicts, sets). A class, a call or
an object's state becomes an :class:`Opaque` placeholder that keeps the dotted name and, for a
dict state, that dict; nothing named in the file is imported or called.

The JSON beside a log (a ``SGLANG_DEBUG_CRASH_SNAPSHOT`` snapshot, a file of the maintainers'
incident bundle, one endpoint's answer) and the ``/metrics`` text are recognised by their own
keys and metric names, never by the file's name.
"""

from __future__ import annotations

import io
import math
import os
import pickletools
import re
import shlex
import stat
import warnings
from collections.abc import Callable, Container, Mapping
from typing import Any

from .types import Dump

#: A crash dump larger than this is refused: SGLang's own are megabytes.
MAX_BYTES = 1 << 30
#: So are pickles of more opcodes than this (each costs a step of the machine).
MAX_OPCODES = 50_000_000
#: Nesting deeper than this is refused; SGLang's dumps nest fewer than 20 levels.
MAX_DEPTH = 1000
_MAX_NAME = 200
#: At most this many distinct global names, notes and request classes are listed.
_MAX_LISTED = 50

_PRIMITIVE = (str, int, float, bool, type(None))
_KEY_TYPES = (str, int, float, bool, type(None), bytes)
#: copyreg's helpers that protocols 0-1 (and ``__reduce_ex__``) call with the class first.
_RECONSTRUCTORS = frozenset({"copyreg._reconstructor", "copy_reg._reconstructor",
                             "copyreg.__newobj__", "copyreg.__newobj_ex__"})
_LITERALS = frozenset({"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "STRING", "BINSTRING",
                       "SHORT_BINSTRING", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "UNICODE",
                       "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "FLOAT", "BINFLOAT"})


class Opaque:
    """What an object in the pickle would have been: the dotted name of its class (or of
    what would have been called), the arguments, and its state when that was a dict.

    Hashed by identity, so it can be a dict key without anyone looking inside it."""

    __slots__ = ("name", "called", "args", "state", "slots", "items", "mapping")

    def __init__(self, name: str, called: bool = False, args: object = None) -> None:
        self.name = name[:_MAX_NAME]
        self.called = called
        self.args = args
        #: the BUILD state when it was a dict, and the slot state of a (dict, slots) pair
        self.state: dict[Any, Any] | None = None
        self.slots: dict[Any, Any] | None = None
        #: values appended (a deque, a list subclass) or set (an OrderedDict) on the object
        self.items: list[Any] | None = None
        self.mapping: dict[Any, Any] | None = None

    def fields(self) -> dict[Any, Any]:
        """The state as one dict (slots over ``__dict__``, as ``pickle`` applies them)."""
        return {**(self.state or {}), **(self.slots or {})}


class _Stop(Exception):
    """The pickle cannot be read on from here; the message says why."""


class _Refuse(Exception):
    """Over a bound: the whole file is refused."""


class _Machine:
    """The stack machine: ``pickle``'s own, with every call replaced by a placeholder.

    Beside each stack and memo value it keeps the value's nesting depth, so a deep pickle is
    refused at :data:`MAX_DEPTH` instead of read. Nothing here recurses into a value, and
    only str, numbers, bytes, None and placeholders become dict keys or set members, so no
    hash or comparison ever walks a nested value either."""

    def __init__(self) -> None:
        self.stack: list[Any] = []
        self.depths: list[int] = []
        self.marks: list[int] = []
        self.memo: dict[Any, tuple[Any, int]] = {}
        self.globals: dict[str, None] = {}
        self.more_globals = 0
        self.notes: dict[str, int] = {}
        self.more_notes = 0
        self.protocol: int | None = None
        #: the opcode being run, for the handlers that serve several
        self.current = ""

    # -- the stack -----------------------------------------------------------------------------
    def note(self, text: str) -> None:
        if text in self.notes or len(self.notes) < _MAX_LISTED:
            self.notes[text] = self.notes.get(text, 0) + 1
        else:
            self.more_notes += 1

    def push(self, value: Any, depth: int = 0) -> None:
        if depth > MAX_DEPTH:
            raise _Refuse(f"values nest deeper than {MAX_DEPTH} levels")
        self.stack.append(value)
        self.depths.append(depth)

    def _floor(self) -> int:
        return self.marks[-1] if self.marks else 0

    def pop(self) -> tuple[Any, int]:
        if len(self.stack) <= self._floor():
            raise _Stop("a value is taken from an empty stack")
        return self.stack.pop(), self.depths.pop()

    def top(self) -> Any:
        if len(self.stack) <= self._floor():
            raise _Stop("a value is used from an empty stack")
        return self.stack[-1]

    def deepen(self, depth: int) -> None:
        """The top value now holds something ``depth`` deep."""
        if depth + 1 > self.depths[-1]:
            if depth + 1 > MAX_DEPTH:
                raise _Refuse(f"values nest deeper than {MAX_DEPTH} levels")
            self.depths[-1] = depth + 1

    def pop_mark(self) -> tuple[list[Any], int]:
        if not self.marks:
            raise _Stop("a MARK is expected and there is none")
        at = self.marks.pop()
        items, depths = self.stack[at:], self.depths[at:]
        del self.stack[at:], self.depths[at:]
        return items, max(depths, default=0)

    # -- values --------------------------------------------------------------------------------
    def key(self, value: Any) -> Any:
        """A dict key or set member: anything but a str, number, bytes, None or placeholder
        (a tuple, say) becomes a placeholder, so inserting it never hashes a nested value."""
        if isinstance(value, _KEY_TYPES) or isinstance(value, Opaque):
            return value
        self.note(f"a {type(value).__name__} used as a dict key or set member was replaced by a placeholder")
        return Opaque(type(value).__name__)

    def set_pairs(self, target: Any, items: list[Any]) -> None:
        if len(items) % 2:
            self.note("a dict was given an odd number of keys and values; the last was dropped")
        if isinstance(target, Opaque):
            if target.mapping is None:
                target.mapping = {}
            target = target.mapping
        if not isinstance(target, dict):
            self.note(f"items set on a {type(target).__name__} were dropped")
            return
        for i in range(0, len(items) - 1, 2):
            target[self.key(items[i])] = items[i + 1]

    def add_items(self, target: Any, items: list[Any]) -> None:
        if isinstance(target, Opaque):
            if target.items is None:
                target.items = []
            target = target.items
        if isinstance(target, list):
            target.extend(items)
        elif isinstance(target, set):
            target.update(self.key(v) for v in items)
        else:
            self.note(f"items added to a {type(target).__name__} were dropped")

    def global_(self, module: Any, name: Any) -> Opaque:
        if not isinstance(module, str) or not isinstance(name, str):
            raise _Stop("a global is named by something other than two strings")
        dotted = f"{module}.{name}"[:_MAX_NAME]
        if dotted not in self.globals:
            if len(self.globals) < _MAX_LISTED:
                self.globals[dotted] = None
            else:
                self.more_globals += 1
        return Opaque(dotted)

    def call(self, func: Any, args: Any) -> Opaque:
        """What calling ``func(*args)`` would have made, without making it."""
        if not isinstance(func, Opaque):
            self.note(f"a call of a {type(func).__name__} is kept as a placeholder")
            return Opaque(type(func).__name__, called=True, args=args)
        name = f"{func.name}(...)" if func.called else func.name
        if name in _RECONSTRUCTORS and isinstance(args, tuple) and args and isinstance(args[0], Opaque):
            name = args[0].name   # copyreg rebuilds an instance of its first argument
        return Opaque(name, called=True, args=args)

    # -- the opcodes: one small method each, looked up by name ---------------------------------
    def handlers(self) -> dict[str, Callable[[Any], None]]:
        table: dict[str, Callable[[Any], None]] = dict.fromkeys(_LITERALS, self.literal)
        table.update({
            "NONE": lambda _: self.literal(None), "NEWTRUE": lambda _: self.literal(True),
            "NEWFALSE": lambda _: self.literal(False), "BYTEARRAY8": lambda arg: self.literal(bytes(arg)),
            "BINPUT": self.put, "LONG_BINPUT": self.put, "PUT": self.put,
            "MEMOIZE": lambda _: self.put(len(self.memo)),
            "BINGET": self.get, "LONG_BINGET": self.get, "GET": self.get,
            "MARK": lambda _: self.marks.append(len(self.stack)),
            "EMPTY_DICT": lambda _: self.push({}, 1), "EMPTY_LIST": lambda _: self.push([], 1),
            "EMPTY_TUPLE": lambda _: self.push((), 1), "EMPTY_SET": lambda _: self.push(set(), 1),
            "APPEND": self.append, "APPENDS": self.appends, "ADDITEMS": self.appends,
            "SETITEM": self.setitem, "SETITEMS": self.setitems,
            "LIST": self.from_mark, "TUPLE": self.from_mark, "DICT": self.from_mark, "FROZENSET": self.from_mark,
            "TUPLE1": lambda _: self.small_tuple(1), "TUPLE2": lambda _: self.small_tuple(2),
            "TUPLE3": lambda _: self.small_tuple(3),
            "POP": self.pop_op, "POP_MARK": self.pop_op,
            "DUP": lambda _: self.push(self.top(), self.depths[-1]),
            "GLOBAL": lambda arg: self.push(self.global_(*str(arg).partition(" ")[::2]), 1),
            "STACK_GLOBAL": self.stack_global,
            "REDUCE": self.reduce, "NEWOBJ": self.reduce, "NEWOBJ_EX": self.newobj_ex,
            "INST": self.inst, "OBJ": self.obj, "BUILD": self.build_op,
            "PERSID": lambda _: self.push(Opaque("a persistent id"), 1), "BINPERSID": self.binpersid,
            "EXT1": self.ext, "EXT2": self.ext, "EXT4": self.ext,
            "NEXT_BUFFER": lambda _: self.push(Opaque("an out-of-band buffer"), 1),
            "READONLY_BUFFER": lambda _: None, "FRAME": lambda _: None, "PROTO": self.proto,
        })
        return table

    def literal(self, arg: Any) -> None:
        self.stack.append(arg)
        self.depths.append(0)

    def put(self, index: Any) -> None:
        self.memo[index] = (self.top(), self.depths[-1])

    def get(self, index: Any) -> None:
        if index not in self.memo:
            raise _Stop(f"memo entry {index} is read before it is written")
        self.push(*self.memo[index])

    def append(self, _: Any) -> None:
        value, depth = self.pop()
        self.add_items(self.top(), [value])
        self.deepen(depth)

    def appends(self, _: Any) -> None:
        items, depth = self.pop_mark()
        self.add_items(self.top(), items)
        self.deepen(depth)

    def setitem(self, _: Any) -> None:
        (value, dv), (key, dk) = self.pop(), self.pop()
        self.set_pairs(self.top(), [key, value])
        self.deepen(max(dv, dk))

    def setitems(self, _: Any) -> None:
        items, depth = self.pop_mark()
        self.set_pairs(self.top(), items)
        self.deepen(depth)

    def from_mark(self, _: Any) -> None:
        items, depth = self.pop_mark()
        name = self.current
        if name == "LIST":
            self.push(items, depth + 1)
        elif name == "TUPLE":
            self.push(tuple(items), depth + 1)
        elif name == "FROZENSET":
            self.push(frozenset(self.key(v) for v in items), depth + 1)
        else:
            made: dict[Any, Any] = {}
            self.set_pairs(made, items)
            self.push(made, depth + 1)

    def small_tuple(self, n: int) -> None:
        popped = [self.pop() for _ in range(n)][::-1]
        self.push(tuple(v for v, _ in popped), 1 + max(d for _, d in popped))

    def pop_op(self, _: Any) -> None:
        if self.current == "POP" and len(self.stack) > self._floor():
            self.pop()
        else:
            self.pop_mark()   # as pickle does: POP right after a MARK drops the mark

    def stack_global(self, _: Any) -> None:
        (attr, _), (module, _) = self.pop(), self.pop()
        self.push(self.global_(module, attr), 1)

    def reduce(self, _: Any) -> None:
        (args, da), (func, df) = self.pop(), self.pop()
        self.push(self.call(func, args), 1 + max(da, df))

    def newobj_ex(self, _: Any) -> None:
        (_, dk), (args, da), (func, df) = self.pop(), self.pop(), self.pop()
        self.push(self.call(func, args), 1 + max(dk, da, df))

    def inst(self, arg: Any) -> None:
        items, depth = self.pop_mark()
        module, _, attr = str(arg).partition(" ")
        self.push(self.call(self.global_(module, attr), tuple(items)), depth + 2)

    def obj(self, _: Any) -> None:
        items, depth = self.pop_mark()
        if not items:
            raise _Stop("OBJ without a class")
        self.push(self.call(items[0], tuple(items[1:])), depth + 2)

    def build_op(self, _: Any) -> None:
        state, depth = self.pop()
        self.build(self.top(), state)
        self.deepen(depth)

    def binpersid(self, _: Any) -> None:
        self.pop()
        self.push(Opaque("a persistent id"), 1)

    def ext(self, code: Any) -> None:
        self.push(Opaque(f"extension code {code}"), 1)

    def proto(self, version: Any) -> None:
        self.protocol = version

    def build(self, obj: Any, state: Any) -> None:
        if not isinstance(obj, Opaque):
            self.note(f"a state set on a {type(obj).__name__} was dropped")
            return
        slots = None
        if (isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict)
                and (state[0] is None or isinstance(state[0], dict))):
            state, slots = state
        if isinstance(state, dict) or (state is None and slots is not None):
            obj.state, obj.slots = state, slots
        else:
            self.note(f"the state of {obj.name} is a {type(state).__name__}, not a dict")

    def salvage(self) -> Any:
        """After the pickle broke off: close what is open (items go to the dict or list
        they were being added to, a half-built tuple or call is dropped) and return the
        outermost value."""
        while self.marks and self.stack:
            items, _ = self.pop_mark()
            if not self.stack:
                break
            target = self.stack[-1]
            if isinstance(target, dict):
                self.set_pairs(target, items[: len(items) // 2 * 2])
            elif isinstance(target, list):
                target.extend(items)
        return self.stack[0] if self.stack else None


def _run(data: bytes) -> tuple[_Machine, Any, str | None]:
    """Walk ``data``'s opcodes; the top-level value (whole or salvaged) and why the walk
    stopped early, if it did."""
    machine = _Machine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # genops warns of odd escapes in protocol-0 strings
        return _walk(machine, data)


def _walk(machine: _Machine, data: bytes) -> tuple[_Machine, Any, str | None]:
    handlers = machine.handlers()
    stream = io.BytesIO(data)   # a BytesIO never allocates a length the file only claims
    where: int | None = 0
    try:
        for count, (opcode, arg, at) in enumerate(pickletools.genops(stream), 1):
            where = at
            if count > MAX_OPCODES:
                raise _Refuse(f"more than {MAX_OPCODES} pickle opcodes")
            name = opcode.name
            handler = handlers.get(name)
            if handler is not None:
                machine.current = name
                handler(arg)
            elif name == "STOP":
                return machine, machine.pop()[0], None
            else:
                raise _Stop(f"opcode {name} is not read here")
    except _Stop as e:
        return machine, machine.salvage(), f"byte {where}: {e}"
    except _Refuse:
        raise
    except Exception as e:   # genops parses untrusted bytes: whatever it raises ends the walk
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        if stream.tell() >= len(data):
            return machine, machine.salvage(), f"the file ends before the pickle does ({len(data)} bytes; {reason})"
        return machine, machine.salvage(), f"unreadable from byte {stream.tell()}: {reason}"
    return machine, machine.salvage(), "the pickle ends without a STOP opcode"


def read_crash_dump(path: str) -> Dump:
    """Summarise SGLang's ``crash_dump_<ts>.pkl`` (or a request dump of its
    ``dump_requests_folder``, the same shape) without unpickling it.

    Figures: ``requests``, ``first_start`` and ``last_end`` (unix seconds as the file has
    them), ``span_s``, ``unfinished``, ``finish_reasons``, ``request_class``, ``protocol``
    and ``globals`` (every class or function the file names, so a crafted dump shows what it
    would have run). ``replay`` is the ``replay_request_dump.py`` command for this file.

    Raises :class:`ValueError` (one line, without the path: the caller keys it by the file)
    when nothing can be read: the file is missing, not a regular file, empty, over
    :data:`MAX_BYTES`, over :data:`MAX_OPCODES` opcodes, nests deeper than :data:`MAX_DEPTH`,
    or is not a pickle (nothing of it reads). A pickle that reads only in part (truncated, an unknown opcode, a state that is not a dict, a shape
    that is not SGLang's) gives a Dump whose ``unread`` says what was missed."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):   # a pipe or device could block or never end
            raise ValueError("not a regular file")
        size = info.st_size
        if size > MAX_BYTES:
            raise ValueError(f"{size} bytes, over the {MAX_BYTES}-byte limit for a crash dump")
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ValueError(f"cannot read ({e.strerror or e})") from None
    if not data:
        raise ValueError("empty file, not a pickle")
    try:
        machine, top, stopped = _run(data)
    except _Refuse as e:
        raise ValueError(str(e)) from None
    if top is None and stopped is not None and not machine.globals:
        raise ValueError(f"not a pickle, or none of it readable ({stopped})")
    return _summarise(path, top, machine, stopped)


def _number(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return x


def _as_dict(x: object) -> dict[Any, Any] | None:
    if isinstance(x, dict):
        return x
    if isinstance(x, Opaque) and x.mapping is not None:
        return x.mapping
    return None


def _as_list(x: object) -> list[Any] | None:
    if isinstance(x, list):
        return x
    if isinstance(x, Opaque) and x.items is not None:   # a deque pickles as deque() + appends
        return x.items
    return None


def _describe(x: object) -> str:
    if isinstance(x, Opaque):
        return f"a {x.name}(...) call" if x.called else f"a reference to {x.name}"
    return f"a {type(x).__name__}"


def _primitives(d: Mapping[Any, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if isinstance(k, str) and isinstance(v, _PRIMITIVE)}


def _finish_reason(output: object) -> object:
    """``meta_info.finish_reason`` of a request's output, None when it has none.

    That is how ``dump_requests_before_crash`` tells a request still in flight: its output
    is ``{}`` (v0.4), its last streamed chunk, or ``get_crash_dump_output()``'s partial text,
    none of which carries a finish reason; a finished request's output does. (An output of
    None, or an end time of None or 0, is counted unfinished too.)"""
    out = _as_dict(output)
    meta = _as_dict(out.get("meta_info")) if out is not None else None
    return meta.get("finish_reason") if meta is not None else None


def _request_figures(records: list[Any], unread: list[str]) -> dict[str, Any]:
    """Count, time span, unfinished requests, finish reasons and classes of the records
    ``(request, output, start, end)``."""
    starts: list[float] = []
    ends: list[float] = []
    classes: dict[str, int] = {}
    reasons: dict[str, int] = {}
    unfinished = malformed = 0
    for record in records:
        if not isinstance(record, (tuple, list)) or len(record) < 4:
            malformed += 1
            continue
        req, output, start, end = record[0], record[1], record[2], record[3]
        cls = req.name if isinstance(req, Opaque) else type(req).__name__
        classes[cls] = classes.get(cls, 0) + 1
        if (s := _number(start)) is not None:
            starts.append(s)
        if (e := _number(end)) is not None:
            ends.append(e)
        reason = _finish_reason(output)
        if output is None or not end or reason is None:
            unfinished += 1
            continue
        kind = reason if isinstance(reason, str) else (_as_dict(reason) or {}).get("type")
        kind = kind[:50] if isinstance(kind, str) else "other"
        reasons[kind] = reasons.get(kind, 0) + 1
    figures: dict[str, Any] = {"requests": len(records) - malformed, "unfinished": unfinished}
    if reasons:
        figures["finish_reasons"] = reasons
    if classes:
        names = list(classes)
        figures["request_class"] = ", ".join(names[:10]) + (f", and {len(names) - 10} more" if len(names) > 10 else "")
    if starts:
        figures["first_start"] = min(starts)
    if ends:
        figures["last_end"] = max(ends)
    if starts and ends:
        figures["span_s"] = max(ends) - min(starts)
    if malformed:
        unread.append(f"{malformed} request record(s) are not (request, output, start, end) tuples")
    return figures


def _summarise(path: str, top: Any, machine: _Machine, stopped: str | None) -> Dump:
    unread: list[str] = [stopped] if stopped else []
    figures: dict[str, Any] = {}
    server_args: dict[str, Any] = {}
    launch: str | None = None

    payload = _as_dict(top)
    if payload is None and _as_list(top) is not None:
        payload = {"requests": top}   # early request dumps were a bare list of records
    if payload is None:
        unread.append(f"the pickle holds {_describe(top)}, not a dict of requests")
        payload = {}

    records = _as_list(payload.get("requests"))
    if records is None and "requests" in payload:
        unread.append(f"requests is {_describe(payload['requests'])}, not a list")
    if records is not None:
        figures.update(_request_figures(records, unread))

    if "server_args" in payload:
        sa = payload["server_args"]
        if sa is None:
            unread.append("server_args is None (SGLang writes None when ServerArgs does not pickle)")
        elif isinstance(sa, Opaque) and (sa.state is not None or sa.slots is not None):
            server_args = _primitives(sa.fields())
            figures["server_args_class"] = sa.name
        elif (plain := _as_dict(sa)) is not None:
            server_args = _primitives(plain)
        else:
            unread.append(f"server_args is {_describe(sa)} without a dict state")

    command = payload.get("launch_command")
    if isinstance(command, str):
        launch = command
    elif isinstance(command, (list, tuple)) and all(isinstance(a, str) for a in command):
        launch = " ".join(command)
    elif command is not None:
        unread.append(f"launch_command is {_describe(command)}, not a string")

    if machine.protocol is not None:
        figures["protocol"] = machine.protocol
    if machine.globals:
        figures["globals"] = list(machine.globals)
    if machine.more_globals:
        unread.append(f"{machine.more_globals} more reference(s) to global names beyond the {_MAX_LISTED} listed")
    unread.extend(f"{text} ({n} times)" if n > 1 else text for text, n in machine.notes.items())
    if machine.more_notes:
        unread.append(f"{machine.more_notes} more thing(s) unread, of other kinds than those above")

    replay = None
    if records:
        replay = f"python3 scripts/playground/replay_request_dump.py --input-file {shlex.quote(path)}"
        host, port = server_args.get("host"), server_args.get("port")
        if isinstance(host, str) and host and host not in ("0.0.0.0", "::"):
            replay += f" --host {shlex.quote(host)}"   # a wildcard bind is reached at the default localhost
        if isinstance(port, int) and not isinstance(port, bool):
            replay += f" --port {port}"
    return Dump("crash_dump", path, figures, launch, server_args, replay, unread)


# ---------------------------------------------------------------------------------------------
# JSON: crash snapshots, incident bundles, endpoint answers
# ---------------------------------------------------------------------------------------------

#: What ``/server_info`` takes from the scheduler rather than from ServerArgs.
_SCHEDULER_INFO = ("max_total_num_tokens", "max_req_input_len")


def read_json_artefact(path: str, data: object) -> Dump | None:
    """Recognise SGLang JSON by its own keys (never the file name) and summarise it; None
    for any other JSON.

    * a crash snapshot (``crash_snapshot.py`` ``dump_crash_snapshot``: ``reason``,
      ``recent_host_pool_io``, ``scheduler``, ...): kind ``crash_snapshot``;
    * kind ``incident``: ``/server_info`` (``version``, ``max_total_num_tokens``, per-DP
      ``internal_states``), ``/v1/loads`` (per-rank ``loads``; requests, tokens and
      throughput summed over ranks, ratios the highest rank's), ``/model_info``, and the
      files of the incident bundle (``incident_artifact_tool.py collect-bundle``): an
      endpoint result ``{ok, status, path, json|error}`` (a failed ``/health_generate``),
      ``metadata.json`` and the ``summarize-bundle`` report.

    Figures carry the JSON's own key names; only what the JSON shows is taken."""
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("reason"), str) and isinstance(data.get("recent_host_pool_io"), list):
        return _crash_snapshot(path, data)
    if _endpoint_result(data):
        figures = _primitives({k: data[k] for k in ("path", "ok", "status", "decode_error") if k in data})
        if data.get("error") is not None:
            figures["error"] = _first_line(str(data["error"]))
        inner = data.get("json")
        found = _endpoint(path, inner) if isinstance(inner, dict) else None
        if found is None:
            return Dump("incident", path, figures)
        return Dump("incident", path, {**found.figures, **figures}, server_args=found.server_args)
    if data.get("artifact_type") == "incident_bundle":
        return _bundle(path, data)
    return _endpoint(path, data)


def _endpoint_result(data: dict[str, Any]) -> bool:
    """``collect-bundle``'s record of one request: ``ok``, ``status``, the endpoint's
    ``path`` and its ``json``, ``text`` or ``error``."""
    path = data.get("path")
    return (isinstance(path, str) and path.startswith("/") and isinstance(data.get("ok"), bool)
            and isinstance(data.get("status"), int) and any(k in data for k in ("json", "text", "error")))


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def _crash_snapshot(path: str, data: dict[str, Any]) -> Dump:
    figures = _primitives({k: data.get(k) for k in ("reason", "timestamp", "hostname", "pid") if k in data})
    scheduler = data.get("scheduler")
    if isinstance(scheduler, dict):
        figures.update(_primitives(scheduler))
    io_records = data["recent_host_pool_io"]
    figures["recent_host_pool_io"] = len(io_records)
    if io_records and isinstance(io_records[-1], dict):
        figures["last_host_pool_io"] = _primitives(io_records[-1])   # what was in flight last
    extra = data.get("extra")
    if isinstance(extra, dict) and extra:
        figures["extra"] = _primitives(extra)
    traceback = data.get("traceback")
    if isinstance(traceback, str) and traceback.strip():
        figures["traceback"] = [line for line in traceback.splitlines() if line.strip()][-1].strip()[:300]
    return Dump("crash_snapshot", path, figures)


def _bundle(path: str, data: dict[str, Any]) -> Dump:
    """``metadata.json`` of a collected bundle, or its ``SUMMARY_REPORT.json``."""
    figures = _primitives({k: v for k, v in data.items() if k != "bundle_dir"})
    server_args: dict[str, Any] = {}
    for section in ("health", "capacity", "point_in_time_load", "metrics"):
        part = data.get(section)
        if isinstance(part, dict):
            for k, v in part.items():
                if isinstance(v, _PRIMITIVE) or (isinstance(v, dict) and all(isinstance(x, _PRIMITIVE) for x in v.values())):
                    figures[k if k not in figures else f"{section}.{k}"] = v
    for section in ("model", "topology"):   # server arguments under their own names
        part = data.get(section)
        if isinstance(part, dict):
            server_args.update({k: v for k, v in _primitives(part).items() if v is not None})
    signals = data.get("signals")
    if isinstance(signals, list) and signals:
        figures["signals"] = [s for s in signals if isinstance(s, str)]
    return Dump("incident", path, figures, server_args=server_args)


def _endpoint(path: str, data: dict[str, Any]) -> Dump | None:
    states = data.get("internal_states")
    if isinstance(states, dict):   # one scheduler's state, not yet a list per DP rank
        states = [states]
    if isinstance(states, list) and ("version" in data or "model_path" in data):
        return _server_info(path, data, states)
    loads = data.get("loads")
    if (isinstance(loads, list) and loads and all(isinstance(x, dict) for x in loads)
            and any("num_running_reqs" in x for x in loads)):
        return _loads(path, data, loads)
    if "model_path" in data and "is_generation" in data:   # /model_info
        return Dump("incident", path, _primitives(data))
    return None


def _shallow(d: Mapping[str, Any], skip: Container[str] = ()) -> dict[str, Any]:
    """Primitive values and dicts of only primitives (a memory split); lists and deeper
    values left out."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if k in skip or not isinstance(k, str):
            continue
        if isinstance(v, _PRIMITIVE):
            out[k] = v
        elif isinstance(v, dict) and v and all(isinstance(x, _PRIMITIVE) for x in v.values()):
            out[k] = _primitives(v)
    return out


def _server_info(path: str, data: dict[str, Any], states: list[Any]) -> Dump:
    """Server args, the scheduler's capacity, the version, and each DP rank's own state
    (the keys an internal state adds to the server args it repeats)."""
    figures = _primitives({k: data[k] for k in ("version", *_SCHEDULER_INFO) if k in data})
    figures["internal_states"] = [_shallow(s, skip=data) for s in states if isinstance(s, dict)]
    server_args = {k: v for k, v in _primitives(data).items()
                   if k not in figures and k not in ("status", "version")}
    return Dump("incident", path, figures, server_args=server_args)


def _loads(path: str, data: dict[str, Any], loads: list[dict[str, Any]]) -> Dump:
    figures = _primitives({k: v for k, v in data.items() if k not in ("loads", "aggregate")})
    per_rank = [_shallow(x) for x in loads]
    figures["loads"] = per_rank
    values: dict[str, list[float]] = {}
    for rank in per_rank:
        for k, v in rank.items():
            if k not in ("dp_rank", "timestamp") and (n := _number(v)) is not None:
                values.setdefault(k, []).append(n)
    combined: dict[str, str] = {}
    for k, vs in values.items():
        figures[k], how = _combine(k, vs)
        if len(vs) > 1:
            combined[k] = how
    if combined:
        figures["combined"] = combined
    aggregate = data.get("aggregate")
    if isinstance(aggregate, dict):   # the 2025 form: the server's own totals
        figures["aggregate"] = _primitives(aggregate)
    return Dump("incident", path, figures)


# ---------------------------------------------------------------------------------------------
# /metrics
# ---------------------------------------------------------------------------------------------

#: Gauges that are one rank's constant or capacity, whatever their name says.
_PER_RANK = frozenset({"num_pages", "lora_pool_slots_total", "hicache_host_total_tokens", "page_size",
                       "context_len", "is_cuda_graph"})
#: Labels that tell apart copies of one scheduler's figures: every TP/PP/EP rank of a DP rank
#: reports the same requests under ``--enable-metrics-for-all-schedulers``, each process under
#: its own ``pid`` where prometheus_client's multiprocess mode keeps them all.
_REPLICA_LABELS = ("tp_rank", "pp_rank", "moe_ep_rank", "pid")
#: Labels a figure is summed (or maxed) across; any other label keeps its own figure.
#: (``name`` is the model's label in the first /metrics of late 2024.)
_POOLED_LABELS = frozenset({"dp_rank", "model_name", "name", "engine_type", "priority", "is_streaming"})
#: The figures that tell a server's load at a glance, first in a metrics Dump.
_HEADLINE = ("num_running_reqs", "num_queue_reqs", "token_usage", "gen_throughput", "cache_hit_rate",
             "num_retracted_requests_total", "num_used_tokens", "max_total_num_tokens")
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,?)')
_ESCAPE = re.compile(r"\\(.)")


def _how(name: str) -> str:
    """``sum`` for what adds up over DP ranks (requests, tokens, throughput, counters,
    histogram sums and counts), ``max`` for ratios, speculative figures and constants."""
    if name in _PER_RANK:
        return "max"
    if name.endswith(("_total", "_sum", "_count", "_gsum", "_gcount")):   # counters, histograms
        return "sum"
    if name.startswith(("max_", "spec_")):
        return "max"
    if (name.endswith(("_reqs", "_tokens", "_throughput")) or name.startswith(("num_", "queues_"))
            or name == "decode_sum_seq_lens"):
        return "sum"
    return "max"


def _combine(name: str, values: list[float]) -> tuple[float, str]:
    how = _how(name)
    return (sum(values) if how == "sum" else max(values)), how


def _sample(line: str) -> tuple[str, dict[str, str], float] | None:
    """One exposition line ``name{label="v",...} value [timestamp]``, or None."""
    m = _NAME.match(line)
    if m is None:
        return None
    name, pos, labels = m.group(), m.end(), {}
    if line.startswith("{", pos):
        pos += 1
        while (lm := _LABEL.match(line, pos)) is not None:
            labels[lm.group(1)] = _ESCAPE.sub(lambda e: "\n" if e.group(1) == "n" else e.group(1), lm.group(2))
            pos = lm.end()
            if not lm.group(3):
                break
        rest = line[pos:].lstrip()
        if not rest.startswith("}"):
            return None
        pos = len(line) - len(rest) + 1
    parts = line[pos:].split()
    if not 1 <= len(parts) <= 2:
        return None
    try:
        return name, labels, float(parts[0])
    except ValueError:
        return None


def _rank(value: str | None) -> tuple[int, int, str]:
    if value is None:
        return (0, 0, "")
    return (0, int(value), "") if value.isdigit() else (1, 0, value)


def read_metrics_text(path: str, text: str) -> Dump | None:
    """SGLang's ``/metrics`` (``sglang:name``, or ``sglang_name`` under Ray and in
    ``/v1/loads?format=prometheus``) as figures named without the prefix; None when the
    text has no SGLang metric.

    Each figure pools the label sets that differ only in DP rank, model, engine type,
    priority, streaming or process: summed for requests, tokens, throughput, counters and histogram
    sums and counts, the highest value for ratios (``token_usage``, ``cache_hit_rate``,
    ``utilization``), speculative figures and per-rank constants. ``combined`` names every
    figure pooled from more than one label set and how. The copies of one scheduler's
    figures that every TP/PP/EP rank (or process) reports count once (the lowest rank's); per-priority
    breakdowns are left out where their total (``priority=""``) is there; any other label
    (``mode``, ``stage``, ``phase``) keeps its own figure, named ``name{label="value"}``.
    Histogram buckets, ``_created`` stamps and NaN values are left out."""
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    bad = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        sample = _sample(line)
        if sample is None:
            bad += 1
            continue
        name, labels, value = sample
        if not name.startswith(("sglang:", "sglang_")):
            continue
        short = name[len("sglang:"):]
        if short.endswith(("_bucket", "_created")) or not math.isfinite(value):
            continue
        series.setdefault(short, []).append((labels, value))
    if not series:
        return None

    figures: dict[str, Any] = {}
    combined: dict[str, str] = {}
    for short, samples in series.items():
        if any(labels.get("priority") == "" for labels, _ in samples):
            samples = [(labels, v) for labels, v in samples if labels.get("priority", "") == ""]
        lowest: dict[tuple[tuple[str, str], ...], tuple[tuple[tuple[int, int, str], ...], float]] = {}
        for labels, v in samples:
            key = tuple(sorted((k, x) for k, x in labels.items() if k not in _REPLICA_LABELS))
            rank = tuple(_rank(labels.get(k)) for k in _REPLICA_LABELS)
            if key not in lowest or rank < lowest[key][0]:
                lowest[key] = (rank, v)
        groups: dict[str, list[float]] = {}
        for key, (_, v) in lowest.items():
            own = [f'{k}="{x}"' for k, x in key if k not in _POOLED_LABELS]
            groups.setdefault(short + ("{" + ",".join(own) + "}" if own else ""), []).append(v)
        for fname, values in groups.items():
            figures[fname], how = _combine(short, values)
            if len(values) > 1:
                combined[fname] = how
    ordered = {k: figures[k] for k in _HEADLINE if k in figures}   # what a summary line shows first
    ordered.update(figures)
    if combined:
        ordered["combined"] = combined
    unread = [f"{bad} line(s) are not Prometheus samples"] if bad else []
    return Dump("incident", path, ordered, unread=unread)
