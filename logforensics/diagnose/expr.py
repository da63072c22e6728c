r"""Safe expression language for the ``when:`` conditions of declarative diff rules.

Rules are YAML files, so their conditions are untrusted text.  They are parsed
with a Lark LALR grammar (``expr.lark`` in ``logforensics.grammars``), checked
once, and compiled into a tree of small closures.  Python's ``eval``/``exec``/
``compile`` are never used; an expression can only read the environment it is
given, call whitelisted functions, and read declared data fields.

Usage::

    rule = compile_expr("failing.crash.phase == 'kv_cache_alloc'",
                        names={"baseline", "failing", "facts"})
    rule.names_used          # frozenset({'failing.crash.phase'})
    rule.evaluate(env)       # True / False / None ...
    rule.holds(env)          # bool; null counts as false

Language
--------
* literals: ``12``, ``1.5``, ``1e-3``, ``'single'``, ``"double"``, ``true``,
  ``false``, ``null`` (also ``True``/``False``/``None``), lists ``[1, 2]``.
  String escapes: ``\\ \' \" \n \r \t \xHH \uHHHH \UHHHHHHHH``; any other
  backslash pair is kept verbatim, so regexes such as ``'\d+\b'`` need no
  doubling.
* access: ``a.b.c`` (mapping keys, or fields of objects, see Safety),
  ``x[0]`` (negative indexes count from the end), ``x['key']``.
* arithmetic ``+ - * / %`` and unary ``-``/``+``; ``+`` also joins two strings
  or two lists.  ``**`` is rejected.
* comparisons ``== != < <= > >=``, chained like Python (``0 < x <= 1``);
  ``in`` / ``not in`` on lists, strings (substring) and mappings (keys).
* ``and``, ``or``, ``not`` (short-circuit; they always return a bool),
  ``a if cond else b``, parentheses.
* functions: abs, min, max, len, round, sum, any, all, sorted, count(coll, x),
  lower, upper, startswith(s, prefix_or_list), contains(coll, x),
  matches(s, regex) (``re.search``), fmt_gib(gib) -> ``'12.34 GiB'``,
  pct(fraction) -> ``'12.3%'`` (``pct(0.123)``).

Null semantics (rules run over incomplete logs)
-----------------------------------------------
* an unknown root name, a missing key/attribute/index, and any access on null
  yield null -- never an exception;
* arithmetic, unary minus and ordering comparisons (``< <= > >=``) with a null
  operand yield null; division or modulo by zero yields null;
* ``null == null`` is true, ``null == x`` false for any other x;
* ``and``/``or``/``not`` and ``if`` treat null as false, so
  ``failing.crash.phase == 'kv_cache_alloc' and failing.memory.TP0.kv_gib > 0``
  is false, not an error, when the data is missing;
* ``x in null`` and ``contains(null, x)`` yield null; functions given a null
  where they need a value yield null (``len(null)``, ``lower(null)``, ...);
* min, max and sum skip null items (as SQL aggregates do); min/max of nothing
  is null, sum of nothing is 0; sorted puts nulls last.

Type errors are errors
----------------------
Operands of the wrong (non-null) type -- ``'a' + 1``, ``'a' < 1``, ``[1][
'k']``, ``lower(3)``, ``true + 1`` (bools are not numbers here) -- raise
:class:`ExprError` naming the operator, the types and the column.  A rule
that compares the wrong things is a bug worth surfacing, unlike missing data.

Safety and limits
-----------------
* names starting with ``_`` are rejected at compile time (root names,
  attributes, functions); so are Python keywords such as ``lambda`` or ``is``;
* attributes are only read from mappings (by key) and, on other objects,
  from dataclass fields, NamedTuple fields, or names listed in the class
  attribute ``__expr_fields__``; anything else reads as null, so methods,
  ``__class__`` and builtins are unreachable even through ``x['...']``;
* text <= 4000 characters, nesting depth <= 64, lists built by an expression
  <= 100000 items (strings <= 1000000 characters), regexes <= 500 characters
  (compiled once and cached; literal regexes are checked at compile time).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import numbers
import operator
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

__all__ = ["Expr", "ExprError", "compile_expr", "FUNCTIONS"]

MAX_SOURCE_LEN = 4000
MAX_DEPTH = 64
MAX_LIST_LEN = 100_000
MAX_STR_LEN = 1_000_000
MAX_REGEX_LEN = 500

Env = Mapping[str, Any]
Node = Callable[[Env], Any]
Where = tuple[int | None, int | None]  # (line, column), 1-based

_CONSTANTS: dict[str, Any] = {
    "true": True, "True": True, "false": False, "False": False, "null": None, "None": None,
}
# Python keywords a rule author might try; rejected with a clear message
# instead of a confusing parse error further along.
_RESERVED = frozenset({
    "lambda", "def", "class", "import", "from", "for", "while", "yield", "await",
    "async", "is", "del", "global", "nonlocal", "assert", "with", "return",
    "pass", "raise", "try", "except", "finally", "break", "continue", "elif",
})
_KEY_PATH_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


class ExprError(ValueError):
    """Invalid expression or failed evaluation; the message is one line with the column."""

    def __init__(self, message: str, column: int | None = None, *,
                 line: int | None = None, hint: str | None = None) -> None:
        text = message
        if column is not None:
            text += f" at line {line}, column {column}" if line and line > 1 else f" at column {column}"
        if hint:
            text += f" ({hint})"
        super().__init__(text.replace("\n", " "))
        self.column = column
        self.line = line


class _Fail(Exception):
    """Raised by runtime helpers; the enclosing node turns it into an ExprError with its position."""


def _error(message: str, where: Where, hint: str | None = None) -> ExprError:
    return ExprError(message, where[1], line=where[0], hint=hint)


# ----------------------------------------------------------------- values

def _is_num(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _tn(x: Any) -> str:
    """Type name for messages, in the language's own vocabulary."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, str):
        return "string"
    if isinstance(x, (list, tuple)):
        return "list"
    if isinstance(x, Mapping):
        return "mapping"
    if _is_num(x):
        return "int" if isinstance(x, numbers.Integral) else "float"
    return type(x).__name__


def _truthy(x: Any) -> bool:
    if x is None:
        return False
    try:
        return bool(x)
    except Exception:  # e.g. array-like values with ambiguous truth
        raise _Fail(f"{_tn(x)} value has no truth value") from None


def _check_len(xs: list[Any]) -> list[Any]:
    if len(xs) > MAX_LIST_LEN:
        raise _Fail(f"list result longer than {MAX_LIST_LEN} items")
    return xs


@functools.cache
def _exposed_fields(cls: type) -> frozenset[str]:
    """Attribute names readable on instances of ``cls``: data fields only, never methods."""
    names: set[str] = set()
    declared = getattr(cls, "__expr_fields__", None)
    if isinstance(declared, str):
        declared = (declared,)
    if declared:
        names.update(n for n in declared if isinstance(n, str))
    if dataclasses.is_dataclass(cls):
        names.update(f.name for f in dataclasses.fields(cls))
    tuple_fields = getattr(cls, "_fields", None) if issubclass(cls, tuple) else None
    if isinstance(tuple_fields, tuple):
        names.update(n for n in tuple_fields if isinstance(n, str))
    return frozenset(n for n in names if not n.startswith("_"))


def _get_attr(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        try:
            return obj.get(name)
        except Exception:
            return None
    if isinstance(obj, type) or name.startswith("_"):
        return None
    cls: type = type(obj)
    return getattr(obj, name, None) if name in _exposed_fields(cls) else None


def _get_item(obj: Any, key: Any) -> Any:
    if obj is None or key is None:
        return None
    if isinstance(obj, Mapping):
        try:
            return obj.get(key)
        except TypeError:
            raise _Fail(f"cannot use {_tn(key)} as a mapping key") from None
    if isinstance(obj, (list, tuple, str)):
        if not isinstance(key, numbers.Integral) or isinstance(key, bool):
            raise _Fail(f"cannot index {_tn(obj)} with {_tn(key)}")
        try:
            return obj[key]
        except IndexError:
            return None
    if isinstance(key, str):
        return _get_attr(obj, key)
    raise _Fail(f"cannot index {_tn(obj)} with {_tn(key)}")


# ---------------------------------------------------------- operators

def _arith_error(op: str, a: Any, b: Any) -> _Fail:
    return _Fail(f"cannot apply '{op}' to {_tn(a)} and {_tn(b)}")


def _add(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    if _is_num(a) and _is_num(b):
        return a + b
    if isinstance(a, str) and isinstance(b, str):
        if len(a) + len(b) > MAX_STR_LEN:
            raise _Fail(f"string result longer than {MAX_STR_LEN} characters")
        return a + b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return _check_len([*a, *b])
    raise _arith_error("+", a, b)


def _numeric(op: str, fn: Callable[[Any, Any], Any], zero_is_null: bool) -> Callable[[Any, Any], Any]:
    def apply(a: Any, b: Any) -> Any:
        if a is None or b is None:
            return None
        if not (_is_num(a) and _is_num(b)):
            raise _arith_error(op, a, b)
        if zero_is_null and b == 0:
            return None
        return fn(a, b)
    return apply


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": _add,
    "-": _numeric("-", operator.sub, False),
    "*": _numeric("*", operator.mul, False),
    "/": _numeric("/", operator.truediv, True),
    "%": _numeric("%", operator.mod, True),
}


def _eq(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    try:
        return bool(a == b)
    except Exception:
        raise _Fail(f"cannot compare {_tn(a)} == {_tn(b)}") from None


def _order_kind(x: Any) -> str | None:
    if _is_num(x):
        return "number"
    if isinstance(x, str):
        return "string"
    if isinstance(x, (list, tuple)):
        return "list"
    return None


def _ordering(op: str, fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], bool | None]:
    def compare(a: Any, b: Any) -> bool | None:
        if a is None or b is None:
            return None
        kind = _order_kind(a)
        if kind is None or kind != _order_kind(b):
            raise _Fail(f"cannot compare {_tn(a)} {op} {_tn(b)}")
        try:
            return bool(fn(a, b))
        except TypeError:
            raise _Fail(f"cannot compare {_tn(a)} {op} {_tn(b)} (items differ in type)") from None
    return compare


def _contains(container: Any, x: Any) -> bool | None:
    if container is None:
        return None
    if isinstance(container, str):
        if x is None:
            return None
        if not isinstance(x, str):
            raise _Fail(f"cannot look for {_tn(x)} in a string")
        return x in container
    if isinstance(container, (list, tuple)):
        return any(_eq(item, x) for item in container)
    if isinstance(container, (Mapping, set, frozenset)):
        try:
            return x in container
        except TypeError:  # unhashable probe: cannot be a key
            return False
    raise _Fail(f"'in' needs a list, string or mapping, got {_tn(container)}")


def _not_in(x: Any, container: Any) -> bool | None:
    found = _contains(container, x)
    return None if found is None else not found


_COMPARE: dict[str, Callable[[Any, Any], bool | None]] = {
    "==": _eq,
    "!=": lambda a, b: not _eq(a, b),
    "<": _ordering("<", operator.lt),
    "<=": _ordering("<=", operator.le),
    ">": _ordering(">", operator.gt),
    ">=": _ordering(">=", operator.ge),
    "in": lambda x, c: _contains(c, x),
    "not in": _not_in,
}


# ---------------------------------------------------------- functions

def _items(x: Any, fname: str) -> Sequence[Any] | None:
    """The items of a collection argument (mapping -> its keys), or None for null."""
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return x
    if isinstance(x, (set, frozenset, Mapping)):
        return list(x)
    raise _Fail(f"{fname}() needs a list, got {_tn(x)}")


def _homogeneous(xs: Sequence[Any], fname: str) -> None:
    kinds = {_order_kind(x) for x in xs}
    if None in kinds or len(kinds) > 1:
        raise _Fail(f"{fname}() cannot order {', '.join(sorted({_tn(x) for x in xs}))} together")


def _extreme(fname: str, pick: Callable[..., Any]) -> Callable[..., Any]:
    def impl(*args: Any) -> Any:
        items = _items(args[0], fname) if len(args) == 1 else args
        if items is None:
            return None
        present = [x for x in items if x is not None]
        if not present:
            return None
        _homogeneous(present, fname)
        try:
            return pick(present)
        except TypeError:
            raise _Fail(f"{fname}() cannot order these items") from None
    return impl


def _num_arg(fname: str, x: Any) -> None:
    if not _is_num(x):
        raise _Fail(f"{fname}() needs a number, got {_tn(x)}")


def _str_arg(fname: str, x: Any) -> None:
    if not isinstance(x, str):
        raise _Fail(f"{fname}() needs a string, got {_tn(x)}")


def _fn_abs(x: Any) -> Any:
    if x is None:
        return None
    _num_arg("abs", x)
    return abs(x)


def _fn_len(x: Any) -> int | None:
    if x is None:
        return None
    if isinstance(x, (str, list, tuple, set, frozenset, Mapping)):
        return len(x)
    raise _Fail(f"len() needs a string, list or mapping, got {_tn(x)}")


def _fn_round(x: Any, ndigits: Any = None) -> Any:
    if x is None:
        return None
    _num_arg("round", x)
    if ndigits is not None and not (isinstance(ndigits, numbers.Integral) and not isinstance(ndigits, bool)):
        raise _Fail(f"round() needs an int digit count, got {_tn(ndigits)}")
    try:
        return round(x) if ndigits is None else round(x, ndigits)
    except (OverflowError, ValueError) as exc:
        raise _Fail(f"round() failed: {exc}") from None


def _fn_sum(xs: Any) -> Any:
    items = _items(xs, "sum")
    if items is None:
        return None
    total: Any = 0
    for x in items:
        if x is None:
            continue
        _num_arg("sum", x)
        total += x
    return total


def _fn_any(xs: Any) -> bool | None:
    items = _items(xs, "any")
    return None if items is None else any(_truthy(x) for x in items)


def _fn_all(xs: Any) -> bool | None:
    items = _items(xs, "all")
    return None if items is None else all(_truthy(x) for x in items)


def _fn_sorted(xs: Any) -> list[Any] | None:
    items = _items(xs, "sorted")
    if items is None:
        return None
    present = [x for x in items if x is not None]
    _homogeneous(present, "sorted")
    try:
        out = sorted(present)
    except TypeError:
        raise _Fail("sorted() cannot order these items") from None
    out.extend([None] * (len(items) - len(present)))
    return _check_len(out)


def _fn_count(xs: Any, value: Any) -> int | None:
    if xs is None:
        return None
    if isinstance(xs, str):
        if value is None:
            return None
        _str_arg("count", value)
        return xs.count(value)
    if isinstance(xs, (list, tuple)):
        return sum(1 for x in xs if _eq(x, value))
    raise _Fail(f"count() needs a list or string, got {_tn(xs)}")


def _fn_lower(s: Any) -> str | None:
    if s is None:
        return None
    _str_arg("lower", s)
    return s.lower()


def _fn_upper(s: Any) -> str | None:
    if s is None:
        return None
    _str_arg("upper", s)
    return s.upper()


def _fn_startswith(s: Any, prefix: Any) -> bool | None:
    if s is None or prefix is None:
        return None
    _str_arg("startswith", s)
    if isinstance(prefix, (list, tuple)):
        for p in prefix:
            _str_arg("startswith", p)
        return s.startswith(tuple(prefix))
    _str_arg("startswith", prefix)
    return s.startswith(prefix)


@functools.lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str]:
    if len(pattern) > MAX_REGEX_LEN:
        raise _Fail(f"regex longer than {MAX_REGEX_LEN} characters")
    try:
        return re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise _Fail(f"invalid regex {pattern!r}: {exc}") from None


def _fn_matches(s: Any, pattern: Any) -> bool | None:
    if s is None or pattern is None:
        return None
    _str_arg("matches", s)
    _str_arg("matches", pattern)
    return _regex(pattern).search(s) is not None


def _fn_fmt_gib(x: Any) -> str | None:
    if x is None:
        return None
    _num_arg("fmt_gib", x)
    return f"{float(x):.2f} GiB"


def _fn_pct(x: Any) -> str | None:
    if x is None:
        return None
    _num_arg("pct", x)
    return f"{float(x) * 100:.1f}%"


@dataclass(frozen=True)
class _Function:
    impl: Callable[..., Any]
    min_args: int
    max_args: int | None  # None: variadic


FUNCTIONS: Mapping[str, _Function] = {
    "abs": _Function(_fn_abs, 1, 1),
    "min": _Function(_extreme("min", min), 1, None),
    "max": _Function(_extreme("max", max), 1, None),
    "len": _Function(_fn_len, 1, 1),
    "round": _Function(_fn_round, 1, 2),
    "sum": _Function(_fn_sum, 1, 1),
    "any": _Function(_fn_any, 1, 1),
    "all": _Function(_fn_all, 1, 1),
    "sorted": _Function(_fn_sorted, 1, 1),
    "count": _Function(_fn_count, 2, 2),
    "lower": _Function(_fn_lower, 1, 1),
    "upper": _Function(_fn_upper, 1, 1),
    "startswith": _Function(_fn_startswith, 2, 2),
    "contains": _Function(_contains, 2, 2),
    "matches": _Function(_fn_matches, 2, 2),
    "fmt_gib": _Function(_fn_fmt_gib, 1, 1),
    "pct": _Function(_fn_pct, 1, 1),
}


# ------------------------------------------------------------ parsing

@functools.cache
def _parser() -> Lark:
    return Lark.open_from_package(
        "logforensics.grammars", "expr.lark", ("",),
        # The basic lexer keeps keywords reserved everywhere; the contextual one
        # would lex `not` as a NAME where the keyword cannot appear.
        parser="lalr", lexer="basic", propagate_positions=True, maybe_placeholders=False,
    )


def _where_of(t: Tree | Token) -> Where:
    if isinstance(t, Token):
        return (t.line, t.column)
    meta = t.meta
    return (None, None) if meta.empty else (meta.line, meta.column)


def _end_where(text: str) -> Where:
    lines = text.split("\n")
    return (len(lines), len(lines[-1]) + 1)


def _describe_terminals(names: Collection[str]) -> str:
    parser, shown = _parser(), set()
    for name in names:
        try:
            pattern = parser.get_terminal(name).pattern
        except KeyError:
            continue
        if pattern.value != "**":  # parsed only to be rejected; do not advertise it
            shown.add(repr(pattern.value) if pattern.type == "str" else name.lower())
    listed = sorted(shown)
    return ", ".join(listed[:10]) + (", ..." if len(listed) > 10 else "")


def _syntax_error(text: str, exc: LarkError) -> ExprError:
    if isinstance(exc, UnexpectedCharacters):
        pos = exc.pos_in_stream
        char = text[pos] if pos is not None and pos < len(text) else ""
        what = "unterminated string" if char in ("'", '"') else f"unexpected character {char!r}"
        return ExprError(what, exc.column, line=exc.line)
    if isinstance(exc, UnexpectedEOF) or (
            isinstance(exc, UnexpectedToken) and exc.token.type == "$END"):
        expected = _describe_terminals(getattr(exc, "expected", ()) or ())
        return _error("unexpected end of expression", _end_where(text),
                      f"expected {expected}" if expected else None)
    if isinstance(exc, UnexpectedToken):
        expected = _describe_terminals(exc.accepts or exc.expected)
        return ExprError(f"unexpected {str(exc.token)!r}", exc.token.column, line=exc.token.line,
                         hint=f"expected {expected}" if expected else None)
    return ExprError(f"syntax error: {exc}".splitlines()[0])


_HELPER_RULES = frozenset({"args", "add_op", "mul_op", "comp_op", "attr", "index"})


def _check_depth(tree: Tree) -> None:
    """Iterative, so absurd nesting is refused before anything recurses over it."""
    stack: list[tuple[Tree, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _error(f"expression nested too deeply (limit {MAX_DEPTH})", _where_of(node))
        for child in node.children:
            if isinstance(child, Tree):  # helper nodes (args, operators, trailers) are not nesting
                stack.append((child, depth if child.data in _HELPER_RULES else depth + 1))


def _reserved_error(name: str, where: Where) -> ExprError:
    return _error(f"'{name}' is not supported", where, "compare with == null" if name == "is" else None)


def _hint(name: str, known: Collection[str], what: str) -> str:
    ordered = sorted(known)
    near = difflib.get_close_matches(name, ordered, n=3, cutoff=0.6)
    listed = ", ".join(ordered[:12]) + (", ..." if len(ordered) > 12 else "")
    prefix = f"did you mean {' or '.join(repr(n) for n in near)}? " if near else ""
    return f"{prefix}{what}: {listed}"


# ---------------------------------------------------------- compiling

class _Compiler:
    """Turns a Lark tree into closures once; evaluation never touches Lark again."""

    def __init__(self, names: frozenset[str] | None) -> None:
        self.names = names
        self.used: set[str] = set()
        self.rules: dict[str, Callable[[Tree], Node]] = {
            "conditional": self._conditional, "or_test": self._or, "and_test": self._and,
            "not_": self._not, "comparison": self._comparison, "sum": self._chain,
            "product": self._chain, "neg": self._neg, "pos": self._pos, "pow": self._pow,
            "postfix": self._postfix, "number": self._number, "string": self._string,
            "var": self._var, "call": self._call, "list": self._list,
        }

    def build(self, t: Tree | Token) -> Node:
        if isinstance(t, Tree):
            rule = self.rules.get(str(t.data))
            if rule is not None:
                return rule(t)
        # the grammar and this table disagree
        raise _error(f"unsupported construct {str(getattr(t, 'data', t))!r}", _where_of(t))

    # literals and names
    def _number(self, t: Tree) -> Node:
        text = str(t.children[0])
        try:
            value: Any = int(text) if text.isdigit() else float(text)
        except ValueError:
            raise _error(f"invalid number {text[:20]!r}", _where_of(t)) from None
        return lambda env: value

    def _string(self, t: Tree) -> Node:
        value = _unquote(t.children[0])
        return lambda env: value

    def _check_name(self, name: str, where: Where, kind: str) -> None:
        if name.startswith("_"):
            raise _error(f"{kind} '{name}' is not allowed", where, "names starting with '_' are private")

    def _root(self, t: Tree) -> tuple[Node, str | None]:
        """Compile a bare name; returns the node and its path root (None for constants)."""
        tok = t.children[0]
        name, where = str(tok), _where_of(tok)
        if name in _CONSTANTS:
            value = _CONSTANTS[name]
            return (lambda env: value), None
        if name in _RESERVED:
            raise _reserved_error(name, where)
        self._check_name(name, where, "name")
        if self.names is not None and name not in self.names:
            raise _error(f"unknown name '{name}'", where, _hint(name, self.names, "known"))
        return (lambda env: env.get(name)), name

    def _var(self, t: Tree) -> Node:
        node, root = self._root(t)
        if root is not None:
            self.used.add(root)
        return node

    def _postfix(self, t: Tree) -> Node:
        head, *trailers = t.children
        if isinstance(head, Tree) and head.data == "var":
            base, root = self._root(head)
            path: list[str] | None = [root] if root is not None else None
        else:
            base, path = self.build(head), None
        steps: list[tuple[Callable[[Any, Env], Any], Where]] = []
        for tr in trailers:
            where = _where_of(tr)
            if tr.data == "attr":
                name = str(tr.children[0])
                where = _where_of(tr.children[0])
                if name in _RESERVED:
                    raise _reserved_error(name, where)
                self._check_name(name, where, "attribute")
                steps.append((_attr_step(name), where))
                if path is not None:
                    path.append(name)
            else:
                key_tree = tr.children[0]
                key = self.build(key_tree)
                steps.append((_item_step(key), where))
                if path is not None:
                    literal = _unquote(key_tree.children[0]) if key_tree.data == "string" else None
                    if literal is not None and _KEY_PATH_RE.fullmatch(literal):
                        path.append(literal)
                    else:
                        self.used.add(".".join(path))
                        path = None
        if path is not None:
            self.used.add(".".join(path))

        def node(env: Env) -> Any:
            value = base(env)
            for step, where in steps:
                if value is None:
                    return None
                try:
                    value = step(value, env)
                except _Fail as exc:
                    raise _error(str(exc), where) from None
            return value
        return node

    # operators
    def _chain(self, t: Tree) -> Node:
        first = self.build(t.children[0])
        rest = [(_BINARY[str(op.children[0])], self.build(rhs), _where_of(op))
                for op, rhs in zip(t.children[1::2], t.children[2::2])]

        def node(env: Env) -> Any:
            acc = first(env)
            for apply, rhs, where in rest:
                if acc is None:
                    return None
                try:
                    acc = apply(acc, rhs(env))
                except _Fail as exc:
                    raise _error(str(exc), where) from None
                except ArithmeticError as exc:  # e.g. int too large for float
                    raise _error(f"arithmetic failed: {exc}", where) from None
            return acc
        return node

    def _neg(self, t: Tree) -> Node:
        return self._unary(t, "-", operator.neg)

    def _pos(self, t: Tree) -> Node:
        return self._unary(t, "+", operator.pos)

    def _unary(self, t: Tree, op: str, fn: Callable[[Any], Any]) -> Node:
        operand, where = self.build(t.children[0]), _where_of(t)

        def node(env: Env) -> Any:
            value = operand(env)
            if value is None:
                return None
            if not _is_num(value):
                raise _error(f"cannot apply unary '{op}' to {_tn(value)}", where)
            return fn(value)
        return node

    def _pow(self, t: Tree) -> Node:
        raise _error("exponentiation '**' is not supported", _where_of(t), "use '*'")

    def _comparison(self, t: Tree) -> Node:
        first = self.build(t.children[0])
        rest = [(_COMPARE[" ".join(str(c) for c in op.children)], self.build(rhs), _where_of(op))
                for op, rhs in zip(t.children[1::2], t.children[2::2])]

        def node(env: Env) -> Any:
            left = first(env)
            for compare, rhs, where in rest:
                right = rhs(env)
                try:
                    result = compare(left, right)
                except _Fail as exc:
                    raise _error(str(exc), where) from None
                if result is not True:
                    return result
                left = right
            return True
        return node

    def _truth(self, t: Tree) -> Callable[[Env], bool]:
        operand, where = self.build(t), _where_of(t)

        def truth(env: Env) -> bool:
            try:
                return _truthy(operand(env))
            except _Fail as exc:
                raise _error(str(exc), where) from None
        return truth

    def _and(self, t: Tree) -> Node:
        parts = [self._truth(c) for c in t.children]
        return lambda env: all(p(env) for p in parts)

    def _or(self, t: Tree) -> Node:
        parts = [self._truth(c) for c in t.children]
        return lambda env: any(p(env) for p in parts)

    def _not(self, t: Tree) -> Node:
        operand = self._truth(t.children[0])
        return lambda env: not operand(env)

    def _conditional(self, t: Tree) -> Node:
        then, cond, otherwise = self.build(t.children[0]), self._truth(t.children[1]), self.build(t.children[2])
        return lambda env: then(env) if cond(env) else otherwise(env)

    # collections and calls
    def _args(self, t: Tree) -> list[Node]:
        return [self.build(c) for c in t.children[0].children] if t.children else []

    def _list(self, t: Tree) -> Node:
        items = self._args(t)
        return lambda env: [item(env) for item in items]

    def _call(self, t: Tree) -> Node:
        tok, where = t.children[0], _where_of(t.children[0])
        name = str(tok)
        self._check_name(name, where, "function")
        fn = FUNCTIONS.get(name)
        if fn is None:
            raise _error(f"unknown function '{name}'", where, _hint(name, FUNCTIONS, "allowed"))
        arg_trees = t.children[1].children if len(t.children) > 1 else []
        n = len(arg_trees)
        if n < fn.min_args or (fn.max_args is not None and n > fn.max_args):
            want = (f"{fn.min_args}" if fn.min_args == fn.max_args else
                    f"{fn.min_args} or more" if fn.max_args is None else f"{fn.min_args} to {fn.max_args}")
            raise _error(f"{name}() takes {want} argument{'s' if want != '1' else ''}, got {n}", where)
        if name == "matches" and arg_trees[1].data == "string":
            try:  # literal regexes fail at compile time, not on the first log that reaches them
                _regex(_unquote(arg_trees[1].children[0]))
            except _Fail as exc:
                raise _error(str(exc), _where_of(arg_trees[1])) from None
        args = [self.build(a) for a in arg_trees]
        impl = fn.impl

        def node(env: Env) -> Any:
            values = [a(env) for a in args]
            try:
                return impl(*values)
            except _Fail as exc:
                raise _error(str(exc), where) from None
            except ArithmeticError as exc:
                raise _error(f"{name}() failed: {exc}", where) from None
        return node


_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "r": "\r", "t": "\t"}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


def _attr_step(name: str) -> Callable[[Any, Env], Any]:
    return lambda v, env: _get_attr(v, name)


def _item_step(key: Node) -> Callable[[Any, Env], Any]:
    return lambda v, env: _get_item(v, key(env))


def _unquote(tok: Tree | Token) -> str:
    if not isinstance(tok, Token):  # the grammar makes a string literal one terminal
        raise _error("expected a string literal", _where_of(tok))
    body, out, i = str(tok)[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]  # the STRING terminal guarantees a character after '\'
        width = _HEX_ESCAPES.get(nxt)
        digits = body[i + 2:i + 2 + width] if width else ""
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
        elif width and len(digits) == width and all(c in "0123456789abcdefABCDEF" for c in digits):
            code = int(digits, 16)
            if code > 0x10FFFF:
                raise _error(f"invalid escape '\\{nxt}{digits}'", _where_of(tok))
            out.append(chr(code))
            i += width
        else:  # unknown escapes stay verbatim, so regexes like '\d+\b' read naturally
            out.append("\\" + nxt)
        i += 2
    return "".join(out)


# ------------------------------------------------------------- public

@dataclass(frozen=True)
class Expr:
    """A compiled, immutable expression; cheap to evaluate many times."""

    source: str
    names_used: frozenset[str]
    _node: Node = field(repr=False, compare=False)

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        """Value of the expression in ``env``; raises only ExprError."""
        if not isinstance(env, Mapping):
            raise ExprError(f"environment must be a mapping, got {type(env).__name__}")
        try:
            return self._node(env)
        except ExprError:
            raise
        except (_Fail, ArithmeticError, LookupError, TypeError, ValueError, RecursionError) as exc:
            # Safety net for exotic values in env (e.g. objects whose == raises).
            raise ExprError(f"evaluation failed: {type(exc).__name__}: {exc}") from None

    def holds(self, env: Mapping[str, Any]) -> bool:
        """Truth of the expression as a rule condition: null counts as false."""
        try:
            return _truthy(self.evaluate(env))
        except _Fail as exc:
            raise ExprError(str(exc)) from None

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return compile_expr, (self.source,)


def compile_expr(text: str, *, names: Collection[str] | None = None) -> Expr:
    """Parse and check ``text`` once; unknown names/functions fail here, not at evaluation.

    ``names``, when given, is the set of allowed root names (e.g. baseline,
    failing, facts); without it any root name is accepted and a missing one
    evaluates to null.
    """
    if not isinstance(text, str):
        raise ExprError(f"expression must be a string, got {type(text).__name__}")
    return _compile(text, None if names is None else frozenset(names))


@functools.lru_cache(maxsize=1024)
def _compile(text: str, names: frozenset[str] | None) -> Expr:
    if len(text) > MAX_SOURCE_LEN:
        raise ExprError(f"expression too long ({len(text)} characters, limit {MAX_SOURCE_LEN})")
    if not text.strip():
        raise ExprError("empty expression")
    parser = _parser()
    try:
        tree = parser.parse(text)
    except LarkError as exc:
        raise _reserved_word_error(parser, text) or _syntax_error(text, exc) from None
    _check_depth(tree)
    compiler = _Compiler(names)
    node = compiler.build(tree)
    return Expr(text, frozenset(compiler.used), node)


def _reserved_word_error(parser: Lark, text: str) -> ExprError | None:
    """After a parse failure, prefer "'lambda' is not supported" over a token-level complaint."""
    try:
        for tok in parser.lex(text):
            if tok.type == "NAME" and str(tok) in _RESERVED:
                return _reserved_error(str(tok), _where_of(tok))
    except LarkError:
        pass
    return None
