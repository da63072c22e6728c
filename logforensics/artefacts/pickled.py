"""A pickle read without unpickling it: its opcodes walked through a small stack machine.

Loading a pickle runs whatever it names, and a crash dump is often copied from a machine
nobody here controls. :func:`walk_pickle` walks the opcodes (:func:`pickletools.genops`)
and builds only plain values (str, bytes, numbers, None, lists, tuples, dicts, sets); a
class, a call or an object's state becomes an :class:`Opaque` placeholder that keeps the
dotted name and, for a dict state, that dict. Nothing named in the file is imported or
called. Bounded: :data:`MAX_BYTES`, :data:`MAX_OPCODES`, :data:`MAX_DEPTH`.
"""

from __future__ import annotations

import io
import math
import pickletools
import warnings
from collections.abc import Callable, Mapping
from typing import Any

#: A crash dump larger than this is refused: SGLang's own are megabytes.
MAX_BYTES = 1 << 30
#: So are pickles of more opcodes than this (each costs a step of the machine, a few µs):
#: a dump of thousands of requests is a few hundred thousand.
MAX_OPCODES = 10_000_000
#: Nesting deeper than this is refused; SGLang's dumps nest fewer than 20 levels.
MAX_DEPTH = 1000
_MAX_NAME = 200
#: At most this many distinct global names, notes and request classes are listed.
MAX_LISTED = 50

PRIMITIVE = (str, int, float, bool, type(None))
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


class Refused(Exception):
    """Over a bound: the whole file is refused."""


class Machine:
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
        if text in self.notes or len(self.notes) < MAX_LISTED:
            self.notes[text] = self.notes.get(text, 0) + 1
        else:
            self.more_notes += 1

    def push(self, value: Any, depth: int = 0) -> None:
        if depth > MAX_DEPTH:
            raise Refused(f"values nest deeper than {MAX_DEPTH} levels")
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
                raise Refused(f"values nest deeper than {MAX_DEPTH} levels")
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
            if len(self.globals) < MAX_LISTED:
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


def walk_pickle(data: bytes) -> tuple[Machine, Any, str | None]:
    """Walk ``data``'s opcodes; the top-level value (whole or salvaged) and why the walk
    stopped early, if it did."""
    machine = Machine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # genops warns of odd escapes in protocol-0 strings
        return _walk(machine, data)


def _walk(machine: Machine, data: bytes) -> tuple[Machine, Any, str | None]:
    handlers = machine.handlers()
    stream = io.BytesIO(data)   # a BytesIO never allocates a length the file only claims
    where: int | None = 0
    try:
        for count, (opcode, arg, at) in enumerate(pickletools.genops(stream), 1):
            where = at
            if count > MAX_OPCODES:
                raise Refused(f"more than {MAX_OPCODES} pickle opcodes")
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
    except Refused:
        raise
    except Exception as e:   # genops parses untrusted bytes: whatever it raises ends the walk
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        if stream.tell() >= len(data):
            return machine, machine.salvage(), f"the file ends before the pickle does ({len(data)} bytes; {reason})"
        return machine, machine.salvage(), f"unreadable from byte {stream.tell()}: {reason}"
    return machine, machine.salvage(), "the pickle ends without a STOP opcode"


def number(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return x


def primitives(d: Mapping[Any, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if isinstance(k, str) and isinstance(v, PRIMITIVE)}
