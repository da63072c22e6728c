"""Write the rows of ``parse --format jsonl`` for whole blocks of lines, in C, from the plans.

The fast path (``fastpath.py``) keeps one plan per digit-masked line shape, learned from
the grammar. :class:`JsonlEmitter` turns each plain plan (one record filling the line)
into a *template*: the literal JSON text of the event's object (``{"kind":
"decode_batch", "rank": "``...) interleaved with the spans of the line to insert, each
with the conversion its plan's converter stands for, the line number and the line's text.
The accelerator (``native/emit.c``) then walks a block: it looks each line's shape up,
fills the template and appends the row to one output buffer; it stops at the first line
it cannot take, which the caller reads on the exact path (in order, with its line
number) before scanning on (``IncrementalParser.feed_bulk``). Nothing here knows a log
format: kinds, spans and converters all come from the grammar's plans.

A template gives byte for byte what ``json.dumps(event.to_dict(), ensure_ascii=False)``
gives for the event ``build_event`` makes of the line: the keys in ``to_dict``'s order,
and values converted by ``int``, ``float``, ``str``, ``str.strip``, the grammar's bool
and word converters and ``strip_colon`` (the C converters refuse any text these would
read differently, and that line then goes the exact way), constants as ``json.dumps``
writes them. A plan with any other converter is not registered: its lines go the exact
way. ``LOGFORENSICS_PURE=1`` or a missing accelerator disables this path
(``native.available()``).

Lines of unrecognised text (``read.other``) have no plan a shape could hold, so they would
all go the exact way: the writers take their runs with :meth:`JsonlEmitter.others` instead,
the lines ``OtherWalker.texts`` takes filled into the template of the exact path's ``other``
plan, registered for lines of every shape (an empty line among them, once its shape is
registered, into its own: random bytes have one every 256 lines, and each ended a run). The
row writer decodes each line as it escapes it (random bytes: one pass, not a decoded copy read
again); the column writer takes the walker's decoded texts. The row writer hands a scan's rows
over without a copy (``Rows``, released once written).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .. import native
from ..events.schema import field_types
from . import other
from .fastpath import _OTHER, LineClassifier
from .plan import _DATE_TO_ISO, Plan, _no_stamp
from .values import strip_colon, to_bool, to_word


def _codes() -> dict[Any, int]:
    assert native.lib is not None
    return {int: native.lib.OP_INT, float: native.lib.OP_FLOAT, str: native.lib.OP_STR, str.strip: native.lib.OP_STRIP,
            to_bool: native.lib.OP_BOOL, to_word: native.lib.OP_WORD, strip_colon: native.lib.OP_RCOLON}


class _Writer:
    """What both C writers share: what they write rows for, counts, and the runs of
    unrecognised lines (``others``)."""

    def __init__(self, classifier: LineClassifier, file: str | None, node: str | None,
                 wanted: frozenset[str]) -> None:
        assert native.lib is not None
        self.classifier = classifier
        self.file = file
        self.node = node
        self.wanted = wanted
        self.emitter = native.lib.Emitter()
        self.codes = _codes()
        self.rank_names: list[str | None] = [None]
        self.kinds: dict[str, int] = {}
        self.refused = 0  # plain plans left to the exact path
        self.taken = 0  # lines taken (counted by the parser, and by ``others``)
        self.by_kind: dict[str, int] = {}
        self._seen = (0, 0)  # the classifier's plans taken so far (``plans_since``)
        self._walker: other.OtherWalker | None = None  # built at the first run of unrecognised lines
        self._tried = False
        self._blank = False  # whether the empty line's shape is registered

    def _register_other(self, code: int) -> bool:
        """Register the ``other`` plan's template for lines of every shape (kind ``code``)."""
        raise NotImplementedError

    #: Whether :meth:`_scan_other` takes the walker's decoded texts (else the lines themselves).
    DECODED = True

    def _scan_other(self, lines: bytes | memoryview, line: int) -> Any:
        """The segment of ``lines`` (whole lines of unrecognised text, the first numbered ``line``)."""
        raise NotImplementedError

    def others(self, buf: bytes, pos: int, end: int, line: int, binary: bool) -> tuple[int, int, int, Any]:
        """The rows of the unrecognised lines of ``buf[pos:end]`` from ``pos`` on (whole
        lines, the first numbered ``line``) that ``read.other`` takes: (where it stopped,
        lines taken, undecodable lines among them, and the segment as ``scan`` gives it, or
        None when none was taken)."""
        if self._walker is None and not self._tried:
            self._tried = True
            if (native.available() and (len(self.kinds) < 255 or "other" in self.kinds)
                    and self._register_other(self.kinds.setdefault("other", len(self.kinds)))):
                self._walker = other.OtherWalker(())
        walker = self._walker
        if walker is None:
            return pos, 0, 0, None
        if not self._blank:  # empty lines among them: taken once their shape has a row (``learn``)
            self._blank = self.emitter.known(b"")
        stop, n, bad, text = walker.texts(buf, pos, end, binary, self.DECODED, self._blank)
        if not n:
            return pos, 0, 0, None
        seg = self._scan_other(memoryview(buf)[pos:stop] if text is None else text, line)
        self.taken += n
        return stop, n, bad, seg

    def set_ready(self, table: bytes | bytearray) -> None:
        """Every line of a registered shape may be taken: nothing to declare."""

    def count(self, counts: dict[int, int]) -> None:
        """Add a segment's lines taken per kind code to ``by_kind``."""
        names = list(self.kinds)
        for code, n in counts.items():
            self.by_kind[names[code]] = self.by_kind.get(names[code], 0) + n


class JsonlEmitter(_Writer):
    """The C row writer, fed with the plain plans a :class:`LineClassifier` has learned.

    Every row names ``file`` and, when not None, ``node`` (the values the parser's
    events carry); ``wanted`` (kinds): lines of other kinds are taken and write nothing.
    ``encoding`` is the output's (ASCII-compatible). It has the scanner's interface that
    ``IncrementalParser.feed_bulk`` calls: ``learn``, ``set_ready``, ``rank_names``,
    ``scan`` and ``taken``.
    """

    def __init__(self, classifier: LineClassifier, file: str | None, node: str | None,
                 wanted: frozenset[str] = frozenset(), encoding: str = "utf-8", errors: str = "strict") -> None:
        super().__init__(classifier, file, node, wanted)
        self.encoding = encoding
        self.errors = errors

    def _lit(self, text: str) -> bytes:
        return text.encode(self.encoding, self.errors)

    def _json(self, value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, default=str)

    def learn(self) -> None:
        """Register the plain plans the classifier learned since the last call, and those of
        records after a wrapper (``LineClassifier.wrapped_log``: read from their offset)."""
        items, self._seen = self.classifier.plans_since(self._seen)
        for key, plan, offset in items:
            ops = self.template(plan, len(key), offset)
            if ops is None or len(self.kinds) >= 255 and plan.kind not in self.kinds:
                self.refused += 1
                continue
            code = self.kinds.setdefault(plan.kind, len(self.kinds))
            self.emitter.add(key, code, ops)

    def template(self, plan: Plan, n: int, offset: int = 0) -> list[Any] | None:
        """The ops of a plan's rows (for lines of ``n`` bytes, the record from ``offset``), or
        None if C cannot write them."""
        if self.wanted and plan.kind not in self.wanted:
            return []
        values: dict[str, Any] = {"kind": self._json(plan.kind)}
        values["rank"] = "null" if plan.rank_slice is None else self._span(plan.rank_slice, n, str, offset=offset)
        if plan.ts_slice is None or plan.ts_conv is _no_stamp:
            values["ts"] = "null"
        elif plan.ts_conv is str or plan.ts_conv is _DATE_TO_ISO:
            values["ts"] = self._span(plan.ts_slice, n, str, plan.ts_conv is _DATE_TO_ISO, offset)
        else:
            return None
        values["file"] = self._json(self.file)
        values["line"] = _emit_line()
        if self.node is not None:
            values["node"] = self._json(self.node)
        for name, (where, conv) in plan.spec.items():
            if name in values:
                continue
            values[name] = self._json(conv) if where is None else self._span(where, n, conv, offset=offset)
        values["text"] = _emit_text() if not offset else self._span(slice(0, None), n, str, offset=offset)
        if any(value is None for value in values.values()):
            return None
        ops: list[Any] = []
        lit = ["{"]
        for i, (name, value) in enumerate(values.items()):
            lit.append(("" if i == 0 else ", ") + self._json(name) + ": ")
            if isinstance(value, str):
                lit.append(value)
                continue
            ops.append(self._lit("".join(lit)))
            lit = []
            ops.append(value)
        lit.append("}\n")
        ops.append(self._lit("".join(lit)))
        return ops

    def _span(self, where: slice, n: int, conv: Callable[[str], Any], iso: bool = False, offset: int = 0) -> Any:
        a, b, step = where.indices(n - offset)
        code = self.codes.get(conv)
        if step != 1 or code is None:
            return None
        assert native.lib is not None
        return (native.lib.OP_ISO if iso else code, a + offset, max(a, b) + offset)

    def scan(self, buf: bytes, pos: int, line: int) -> tuple[int, int, Any, dict[int, int]]:
        """Write the rows of ``buf``'s lines (whole lines) from ``pos`` on, the first numbered
        ``line``: (stop, lines, rows, counts). ``rows`` holds the buffer written (bytes-like, not
        a copy: the rows of a block are several times its size); its ``release()`` lets the next
        scan write into the same pages."""
        return self.emitter.scan(buf, pos, line, False, True)

    def _register_other(self, code: int) -> bool:
        ops = self.template(_OTHER, 0)
        if ops is None:
            return False
        self.emitter.add(None, code, ops)
        return True

    DECODED = False  # put_text decodes each line as it writes it

    def _scan_other(self, lines: bytes | memoryview, line: int) -> tuple[int, int, Any, dict[int, int]]:
        return self.emitter.scan(lines, 0, line, True, True)


#: Column types as the C writer codes them, and the kind of value each holds.
KIND_OF_TYPE = {"s": "str", "q": "int", "d": "float", "b": "bool"}


class ColumnEmitter(_Writer):
    """The C column writer for ``parse --format parquet``: like :class:`JsonlEmitter`, but
    a segment's rows come back as Arrow buffers, one column per field name and type.

    ``columns[(name, type)]`` is the C column of a name holding values of a type (``s``
    str, ``q`` int, ``d`` float, ``b`` bool): a name whose plans convert it differently has
    one column per type, at most one of them filled in a row. ``plan_keys[plan_id]``: a
    registered plan's keys in ``Event.to_dict`` order (for the output's column order).
    The keys ``CONSTANT`` (``file``, ``node``: the same in every row of a file) have no
    column: the caller gives their values, without a copy a row.
    """

    #: Keys whose value is this writer's in every row (``file``, ``node``), not written per row.
    CONSTANT = ("file", "node")

    def __init__(self, classifier: LineClassifier, file: str | None, node: str | None,
                 wanted: frozenset[str] = frozenset(), columns: dict[tuple[str, str], int] | None = None) -> None:
        super().__init__(classifier, file, node, wanted)
        self.columns: dict[tuple[str, str], int] = {} if columns is None else columns
        for (_, type_), col in self.columns.items():
            self.emitter.set_column(col, type_)
        self.plan_keys: list[tuple[str, ...]] = []

    def learn(self) -> None:
        """Register the plain plans the classifier learned since the last call, and those of
        records after a wrapper (``LineClassifier.wrapped_log``: read from their offset)."""
        items, self._seen = self.classifier.plans_since(self._seen)
        for key, plan, offset in items:
            got = self.ops(plan, len(key), offset)
            if got is None or len(self.kinds) >= 255 and plan.kind not in self.kinds:
                self.refused += 1
                continue
            keys, ops = got
            code = self.kinds.setdefault(plan.kind, len(self.kinds))
            skip = bool(self.wanted) and plan.kind not in self.wanted
            if self.emitter.add_columns(key, code, len(self.plan_keys), skip, ops):
                self.plan_keys.append(keys)

    def _col(self, name: str, type_: str) -> int | None:
        col = self.columns.get((name, type_))
        if col is None:
            if len(self.columns) >= 1024:
                return None
            col = self.columns[(name, type_)] = len(self.columns)
            self.emitter.set_column(col, type_)
        return col

    def ops(self, plan: Plan, n: int, offset: int = 0) -> tuple[tuple[str, ...], list[Any]] | None:
        """A plan's keys and column ops (for lines of ``n`` bytes, the record from ``offset``),
        or None if C cannot fill them."""
        assert native.lib is not None
        e = native.lib
        values: dict[str, Any] = {"kind": ("s", e.OP_CSTR, plan.kind.encode())}
        values["rank"] = None if plan.rank_slice is None else self._span(plan.rank_slice, n, str, offset=offset)
        if plan.ts_slice is None or plan.ts_conv is _no_stamp:
            values["ts"] = None
        elif plan.ts_conv is str or plan.ts_conv is _DATE_TO_ISO:
            values["ts"] = self._span(plan.ts_slice, n, str, plan.ts_conv is _DATE_TO_ISO, offset)
        else:
            return None
        values["file"] = None  # the same in every row: given by the caller (``CONSTANT``)
        values["line"] = ("q", e.OP_LINE)
        if self.node is not None:
            values["node"] = None
        declared = field_types()
        for name, (where, conv) in plan.spec.items():
            if name in values:
                continue
            if name not in declared:  # a column the file's schema lacks: read the exact way, into ``extra``
                return None
            op = self._const(conv) if where is None else self._span(where, n, conv, offset=offset)
            if op is False:
                return None
            values[name] = op
        values["text"] = ("s", e.OP_TEXT) if not offset else self._span(slice(0, None), n, str, offset=offset)
        ops: list[Any] = []
        for name, op in values.items():
            if op is None:
                continue  # a null: the key alone
            if op is False:
                return None
            col = self._col(name, op[0])
            if col is None:
                return None
            ops.append((col, *op[1:]))
        return tuple(values), ops

    def _span(self, where: slice, n: int, conv: Callable[[str], Any], iso: bool = False, offset: int = 0) -> Any:
        assert native.lib is not None
        a, b, step = where.indices(n - offset)
        code = self.codes.get(conv)
        if step != 1 or code is None or code == native.lib.OP_WORD:
            return False
        type_ = {native.lib.OP_INT: "q", native.lib.OP_FLOAT: "d", native.lib.OP_BOOL: "b"}.get(code, "s")
        return (type_, native.lib.OP_ISO if iso else code, a + offset, max(a, b) + offset)

    def _const(self, value: Any) -> Any:
        assert native.lib is not None
        if value is None:
            return None
        if isinstance(value, bool):
            return ("b", native.lib.OP_CBOOL, int(value))
        if isinstance(value, int):
            return ("q", native.lib.OP_CINT, value) if -(1 << 63) <= value < (1 << 63) else False
        if isinstance(value, float):
            return ("d", native.lib.OP_CFLOAT, value)
        if isinstance(value, (dict, list)):
            value = json.dumps(value, default=str)
        return ("s", native.lib.OP_CSTR, str(value).encode("utf-8", "surrogatepass"))

    def scan(self, buf: bytes, pos: int, line: int) -> Any:
        """The rows of ``buf``'s lines (whole lines) from ``pos`` on, the first numbered
        ``line``, held in C after those before (``_emit.Emitter.scan_columns`` with ``hold``:
        the segment's plans and columns are None) until :meth:`take`."""
        return self.emitter.scan_columns(buf, pos, line, False, True)

    def take(self) -> tuple[int, list[int], list[Any]]:
        """The rows held since the last call, as columns: (rows, plans, cols) as a segment
        has them (``_emit.Emitter.take_columns``)."""
        return self.emitter.take_columns()

    def _register_other(self, code: int) -> bool:
        got = self.ops(_OTHER, 0)
        if got is None:
            return False
        keys, ops = got
        skip = bool(self.wanted) and "other" not in self.wanted
        self.emitter.add_columns(None, code, len(self.plan_keys), skip, ops)
        self.plan_keys.append(keys)
        return True

    def _scan_other(self, lines: bytes | memoryview, line: int) -> Any:
        return self.emitter.scan_columns(lines, 0, line, True, True)


def _emit_line() -> int:
    assert native.lib is not None
    return int(native.lib.OP_LINE)


def _emit_text() -> int:
    assert native.lib is not None
    return int(native.lib.OP_TEXT)
