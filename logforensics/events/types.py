"""The types a field can have, written without pyarrow so that the reader can declare them.

A type is a plain value: one of the names in :data:`PRIMITIVES`, ``("list", item)`` or
``("struct", ((name, type), ...))``. The converters of ``read/values.py`` declare the type
of what they return in these terms; :func:`arrow` turns one into an Arrow type when a
batch is built (pyarrow is imported only then: reading a log does not need it).

``null`` is the type of a converter that only ever gives None (a word ``None``): it fits
any field, and :func:`unify` lets the field's other type win.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    import pyarrow as pa

#: A field's type: a primitive name, ("list", item) or ("struct", ((name, type), ...)).
Type: TypeAlias = str | tuple[Any, ...]

INT = "int64"
FLOAT = "float64"
STR = "string"
BOOL = "bool"
NULL = "null"
PRIMITIVES = (INT, FLOAT, STR, BOOL, NULL)


def list_of(item: Type) -> Type:
    return ("list", item)


def struct(**fields: Type) -> Type:
    """A mapping with these keys (each may be absent or None in a value)."""
    return ("struct", tuple(fields.items()))


def unify(a: Type, b: Type) -> Type | None:
    """The one type of two declarations of a field, or None when they disagree."""
    if a == b or b == NULL:
        return a
    if a == NULL:
        return b
    return None


def of_value(value: Any) -> Type:
    """The type of a constant that a plan sets (a flag, a word)."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return FLOAT
    if isinstance(value, str):
        return STR
    raise TypeError(f"no declared type for the constant {value!r}")


_INT64 = 1 << 63
_EXACT_FLOAT = 1 << 53


def fits(value: Any, t: Type) -> bool:
    """Whether ``value`` is one of ``t``'s values (None is every type's null), exactly: a
    bool is no integer, 1.5 is no integer, an integer fits a float while a double holds it
    exactly, a mapping fits a struct only with keys the struct names, a pair (such as a
    record's ``(line, text)``) a struct of two."""
    if value is None:
        return True
    if isinstance(t, str):
        if t == INT:
            return type(value) is int and -_INT64 <= value < _INT64
        if t == FLOAT:
            return type(value) is float or type(value) is int and -_EXACT_FLOAT <= value <= _EXACT_FLOAT
        if t == STR:
            return isinstance(value, str)
        if t == BOOL:
            return isinstance(value, bool)
        return False
    if t[0] == "list":
        return isinstance(value, (list, tuple)) and all(fits(item, t[1]) for item in value)
    fields = t[1]
    if isinstance(value, dict):
        types = dict(fields)
        return all(k in types and fits(v, types[k]) for k, v in value.items())
    if isinstance(value, tuple):
        return len(value) == len(fields) and all(fits(v, sub) for v, (_, sub) in zip(value, fields))
    return False


def arrow(t: Type) -> pa.DataType:
    """The Arrow type of a declared type."""
    import pyarrow as pa

    if isinstance(t, str):
        return {INT: pa.int64(), FLOAT: pa.float64(), STR: pa.string(), BOOL: pa.bool_(), NULL: pa.null()}[t]
    if t[0] == "list":
        return pa.list_(arrow(t[1]))
    if t[0] == "struct":
        return pa.struct([(name, arrow(sub)) for name, sub in t[1]])
    raise ValueError(f"not a declared type: {t!r}")
