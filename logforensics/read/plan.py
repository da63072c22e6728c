"""Where a record's values lie and how to convert them (:class:`Plan`), read lazily (:class:`Fields`).

The planner (``planner.py``) interprets a parse tree as a :class:`Plan`: token offsets and
a converter per field. :func:`build_event` pairs a plan with a record's text; the event's
:class:`Fields` read and convert a value when it is asked for. The fast path
(``fastpath.py``) stores plans per line shape and applies them to later lines of the same
shape, so the grammar path and the fast path share one way of producing values and
cannot disagree on them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, ItemsView, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field
from operator import itemgetter, methodcaller
from typing import Any

from ..events import Event

Conv = Callable[[str], Any]

if sys.version_info >= (3, 11):
    from operator import call
else:  # operator.call is new in 3.11
    def call(obj: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return obj(*args, **kwargs)


@dataclass(frozen=True, slots=True)
class Plan:
    """Where a record's values lie in its text, and how to convert each one.

    Spans are offsets into the record (segment) text. ``memo_ok`` is false when the
    meaning depended on digits (a key containing a digit), so the plan must not be
    reused for other lines of the same digit-masked shape. ``spec`` maps every field
    name, in the order of the event's fields, to ``(slice, converter)`` or, for a
    constant, ``(None, value)``: :class:`Fields` reads values through it.
    ``rank_slice`` and ``ts_slice`` cut the rank and the stamp out of the text (the
    stamp then goes through ``ts_conv``); ``pickers`` caches :meth:`picker`.
    """

    kind: str
    rank: tuple[int, int] | None
    ts: tuple[int, int] | None
    fields: tuple[tuple[str, int, int, Conv], ...]
    const: tuple[tuple[str, Any], ...] = ()
    memo_ok: bool = True
    ts_conv: Conv = str
    keys: tuple[str, ...] = ()
    spec: dict[str, tuple[slice | None, Any]] = field(default_factory=dict, compare=False)
    rank_slice: slice | None = None
    ts_slice: slice | None = None
    pickers: dict[tuple[str, ...], Any] = field(default_factory=dict, compare=False)

    @classmethod
    def make(cls, kind: str, rank: tuple[int, int] | None, ts: tuple[int, int] | None,
             fields: tuple[tuple[str, int, int, Conv], ...], const: tuple[tuple[str, Any], ...] = (),
             memo_ok: bool = True, ts_conv: Conv = str) -> Plan:
        spec: dict[str, tuple[slice | None, Any]] = {name: (slice(a, b), conv) for name, a, b, conv in fields}
        for name, value in const:  # a constant wins over a span of the same name, in its place
            spec[name] = (None, value)
        return cls(kind, rank, ts, fields, const, memo_ok, ts_conv, tuple(spec), spec,
                   slice(*rank) if rank else None, slice(*ts) if ts else None)

    def fitted(self, text: str) -> Plan:
        """This plan with the rank span trimmed and the stamp converter chosen for ``text``.

        Both depend only on the line's shape, so the fast path can reuse them.
        """
        rank = self.rank
        if rank is not None:
            a, b = rank
            while a < b and text[a] == " ":
                a += 1
            while b > a and text[b - 1] == " ":
                b -= 1
            rank = (a, b)
        ts_conv: Conv = str
        if self.ts is not None:
            stamp = text[self.ts[0]:self.ts[1]]
            if len(stamp) >= 19 and stamp[4] == "-":
                ts_conv = _DATE_TO_ISO
            elif not (len(stamp) <= 12 and stamp[2:3] == ":"):
                ts_conv = _no_stamp  # a stamp cut at the start of a paste
        return Plan.make(self.kind, rank, self.ts, self.fields, self.const, self.memo_ok, ts_conv)

    def picker(self, names: tuple[str, ...]) -> tuple[Callable[[str], tuple[str, ...]], tuple[Conv, ...]]:
        """For :meth:`Fields.pick`: one C call that slices the values of ``names`` out of
        a text, and the converter of each (cached per plan)."""
        got = self.pickers.get(names)
        if got is None:
            slices: list[slice] = []
            convs: list[Conv] = []
            for name in names:
                where, conv = self.spec.get(name, (None, None))
                if where is None:  # a constant, or no such field: the same value for any text
                    slices.append(slice(0, 0))
                    convs.append({"": conv}.get)  # maps the empty slice to the value, in C
                else:
                    slices.append(where)
                    convs.append(conv)
            slices.append(slice(0, 0))  # two slices at least, so itemgetter returns a tuple
            got = self.pickers[names] = (itemgetter(*slices), tuple(convs))
        return got


_DATE_TO_ISO = methodcaller("replace", " ", "T", 1)


def _no_stamp(_: str) -> None:
    return None


try:  # the C accessor namedtuple uses: reads a tuple slot without calling __getitem__
    from _collections import _tuplegetter
except ImportError:  # pragma: no cover - other Pythons
    def _tuplegetter(index: int, doc: str) -> Any:
        return property(lambda self: tuple.__getitem__(self, index), doc=doc)


class Fields(tuple):
    """A record's values, converted when they are read: a read-only ``Mapping``.

    Why not a dict: a serving log is almost all ``Decode batch``, ``Prefill batch`` and
    HTTP access records, and the run model reads at most three of their values. Building
    a dict of every converted value was the largest cost of reading such a line. A
    ``Fields`` is the pair ``(plan, text)`` (a tuple, so it is built in C) and converts a
    value with the plan's converter each time it is read. It iterates, compares and
    prints like the dict of all values, and pickles as that dict.
    """

    __slots__ = ()
    _plan: Plan = _tuplegetter(0, "the record's plan")
    _text: str = _tuplegetter(1, "the record's text")

    # A tuple only so that it is built in C; it reads as a Mapping, keyed by field name.
    def __getitem__(self, key: str) -> Any:  # type: ignore[override]
        where, conv = self._plan.spec[key]
        return conv if where is None else conv(self._text[where])

    def get(self, key: str, default: Any = None) -> Any:
        spec = self._plan.spec.get(key)
        if spec is None:
            return default
        where, conv = spec
        return conv if where is None else conv(self._text[where])

    def pick(self, names: tuple[str, ...]) -> tuple[Any, ...]:
        """The values of ``names`` (None for a name the record lacks), in one call.

        For the run model's hot path: reading three values of a decode record this way
        costs about as much as one ``get``.
        """
        plan = self._plan
        getter, convs = plan.pickers.get(names) or plan.picker(names)
        return tuple(map(call, convs, getter(self._text)))

    def __contains__(self, key: object) -> bool:
        return key in self._plan.spec

    def __iter__(self) -> Iterator[str]:
        return iter(self._plan.keys)

    def __len__(self) -> int:
        return len(self._plan.keys)

    def keys(self) -> KeysView[str]:
        return KeysView(self)

    def items(self) -> ItemsView[str, Any]:
        return ItemsView(self)

    def values(self) -> ValuesView[Any]:
        return ValuesView(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return dict(self.items()) == dict(other.items())

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(dict(self.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (dict(self.items()),)


Mapping.register(Fields)

_new_tuple = tuple.__new__


def build_event(plan: Plan, text: str, line: int, file: str | None, node: str | None = None) -> Event:
    """The event of one record: the plan's kind, rank and stamp, and its lazy fields.

    The one value-producing step, shared by the grammar path and the fast path (which
    inlines the same expression for its commonest case, see ``LineClassifier``).
    """
    rank, ts = plan.rank_slice, plan.ts_slice
    return _new_tuple(Event, (plan.kind, line, None if rank is None else text[rank],
                              None if ts is None else plan.ts_conv(text[ts]),
                              _new_tuple(Fields, (plan, text)), text, file, None, node))
