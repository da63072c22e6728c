"""Rules are untrusted input: the limits that keep a hostile rule's cost bounded.

A rule file comes from a user's ``--rules`` directory as easily as from the package, and
Jinja2's sandbox stops escapes but not cost: ``{{ 'x' * 2000000000 }}`` grew to 24 GB,
3000 nested ``{% if %}`` or YAML nested 100,000 deep raised RecursionError, a 100 MB file
ran for minutes. Here every way a rule spends memory or time has a limit, and crossing one
is a :class:`BoundError` (its use is said at the end):

* size: a rule file at most ``MAX_RULE_BYTES``; a template at most ``MAX_TEMPLATE_CHARS``;
* nesting: YAML, template blocks and brackets at most ``MAX_NESTING`` deep, counted on the
  token streams (which are not recursive) before anything recursive parses them;
* values: a string, list or mapping built while rendering at most ``MAX_VALUE_LEN`` long
  (``*``, ``+``, ``**``, every filter and method call, ``range`` at most ``MAX_RANGE``);
* output: a rendered template at most ``MAX_OUTPUT_CHARS``;
* time: a rule's evaluation at most ``MAX_SECONDS``, checked at every call, attribute
  and item access and operator of the template.

The limits of a rule file's text (size, nesting) refuse the file when it is loaded. Those of
its evaluation protect the one rule, not the command: an output over its bound is cut with a
marker, and the engine turns any other limit crossed on the data into a warning finding that
names the rule file and leaves the rule out; the rest of the diagnosis is written.
"""

from __future__ import annotations

import math
import operator
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import yaml
from jinja2 import lexer as jl
from jinja2.sandbox import SandboxedEnvironment

MAX_RULE_BYTES = 256 << 10
MAX_RULE_FILES = 2000
MAX_TEMPLATE_CHARS = 64 << 10
MAX_NESTING = 40
MAX_VALUE_LEN = 1 << 20
MAX_OUTPUT_CHARS = 256 << 10
MAX_RANGE = 10_000
MAX_SECONDS = 5.0


#: libyaml's scanner where PyYAML was built with it: the tokens of the pure-Python one, 30 times
#: faster (the rules are then loaded by libyaml too).
_SCAN_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class BoundError(Exception):
    """A rule crossed one of the limits; the message says which."""


def check_yaml_nesting(text: str) -> None:
    """Refuse YAML nested deeper than ``MAX_NESTING`` (PyYAML composes recursively)."""
    depth = 0
    opening = (yaml.FlowSequenceStartToken, yaml.FlowMappingStartToken, yaml.BlockSequenceStartToken,
               yaml.BlockMappingStartToken)
    closing = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)
    for token in yaml.scan(text, Loader=_SCAN_LOADER):
        if isinstance(token, opening):
            depth += 1
            if depth > MAX_NESTING:
                raise BoundError(f"YAML nested more than {MAX_NESTING} deep")
        elif isinstance(token, closing):
            depth -= 1


_BLOCK_OPENERS = frozenset({"if", "for", "macro", "call", "filter", "with", "block", "autoescape", "trans"})
_BRACKETS = {jl.TOKEN_LPAREN: 1, jl.TOKEN_LBRACKET: 1, jl.TOKEN_LBRACE: 1,
             jl.TOKEN_RPAREN: -1, jl.TOKEN_RBRACKET: -1, jl.TOKEN_RBRACE: -1}


def check_template(env: SandboxedEnvironment, source: str, what: str = "template") -> None:
    """Refuse a template (or expression) too long or nested deeper than ``MAX_NESTING``
    (Jinja's parser recurses once per level)."""
    if len(source) > MAX_TEMPLATE_CHARS:
        raise BoundError(f"{what} longer than {MAX_TEMPLATE_CHARS} characters")
    blocks = brackets = 0
    after_block_begin = False
    for _, kind, value in env.lex(source):
        if kind == jl.TOKEN_BLOCK_BEGIN:
            after_block_begin = True
            continue
        if after_block_begin and kind == jl.TOKEN_NAME:
            if value in _BLOCK_OPENERS:
                blocks += 1
            elif value.startswith("end"):
                blocks -= 1
        after_block_begin = False
        brackets += _BRACKETS.get(kind, 0)
        if kind == jl.TOKEN_OPERATOR and value in "([{":
            brackets += 1
        elif kind == jl.TOKEN_OPERATOR and value in ")]}":
            brackets -= 1
        if blocks > MAX_NESTING or brackets > MAX_NESTING:
            raise BoundError(f"{what} nested more than {MAX_NESTING} deep")


_deadline = threading.local()


@contextmanager
def time_limit(seconds: float = MAX_SECONDS) -> Iterator[None]:
    """Bound the evaluation inside: the sandbox checks the clock at every step it controls."""
    previous = getattr(_deadline, "at", None)
    _deadline.at = time.monotonic() + seconds
    try:
        yield
    except RecursionError:
        raise BoundError("recursion too deep") from None
    except MemoryError:
        raise BoundError("out of memory") from None
    finally:
        _deadline.at = previous


def _tick() -> None:
    at = getattr(_deadline, "at", None)
    if at is not None and time.monotonic() > at:
        raise BoundError(f"evaluation took longer than {MAX_SECONDS:g} s (time limit)")


def _size(value: Any) -> int:
    if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
        return len(value)
    return 0


def _check_value(value: Any) -> Any:
    if _size(value) > MAX_VALUE_LEN:
        raise BoundError(f"a value longer than {MAX_VALUE_LEN} (size limit)")
    return value


def _bounded_range(*args: Any) -> range:
    r = range(*args)
    if len(r) > MAX_RANGE:
        raise BoundError(f"range longer than {MAX_RANGE} (size limit)")
    return r


def _mul(a: Any, b: Any) -> Any:
    for seq, n in ((a, b), (b, a)):
        if _size(seq) and isinstance(n, int) and _size(seq) * max(n, 0) > MAX_VALUE_LEN:
            raise BoundError(f"a value longer than {MAX_VALUE_LEN} (size limit)")
    return operator.mul(a, b)


def _pow(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and abs(a) > 1 and b > 0 \
            and b * math.log2(abs(a)) > 4096:
        raise BoundError("a number too large (size limit)")
    return operator.pow(a, b)


def _add(a: Any, b: Any) -> Any:
    if _size(a) + _size(b) > MAX_VALUE_LEN:
        raise BoundError(f"a value longer than {MAX_VALUE_LEN} (size limit)")
    return operator.add(a, b)


_BINOPS: dict[str, Callable[[Any, Any], Any]] = {"*": _mul, "**": _pow, "+": _add}
#: Filters a rule may use; the others (center, indent, wordwrap, ...) are not needed and
#: some build strings as long as an argument says.
ALLOWED_FILTERS = frozenset({
    "abs", "attr", "batch", "capitalize", "count", "default", "d", "dictsort", "e", "escape", "first", "float",
    "format", "groupby", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject",
    "rejectattr", "replace", "reverse", "round", "select", "selectattr", "sort", "string", "sum", "title", "tojson",
    "trim", "truncate", "unique", "upper",
})
#: Methods of built-in values a template may call (no ljust/zfill-like size arguments).
_SAFE_METHODS = {
    str: frozenset({"startswith", "endswith", "lower", "upper", "strip", "lstrip", "rstrip", "split", "splitlines",
                    "replace", "count", "find", "rfind", "title", "capitalize", "isdigit", "join", "removeprefix",
                    "removesuffix"}),
    list: frozenset({"append", "count", "index"}),
    dict: frozenset({"items", "keys", "values", "get"}),
}


def _guard_filter(fn: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _tick()
        for arg in args:
            if isinstance(arg, (list, tuple)) and sum(_size(x) for x in arg[:MAX_RANGE]) > MAX_VALUE_LEN:
                raise BoundError(f"a value longer than {MAX_VALUE_LEN} (size limit)")
        return _check_value(fn(*args, **kwargs))

    for attr in ("jinja_pass_arg",):  # keep Jinja's pass_context/pass_environment marks
        if hasattr(fn, attr):
            setattr(guarded, attr, getattr(fn, attr))
    return guarded


_WIDE = re.compile(r"%[-+ #0]*\d{5,}|%[-+ #0]*\*|\{[^}]*:[^}]*\d{5,}")


def _format(value: Any, *args: Any, **kwargs: Any) -> str:
    """The ``format`` filter without a field width that builds a huge string (``%2000000000s``)."""
    if _WIDE.search(str(value)):
        raise BoundError("a format width too large (size limit)")
    return str(value) % (kwargs or args)


def _replace(value: Any, old: str, new: str, count: int | None = None) -> str:
    s = str(value)
    if len(s) * max(1, len(str(new))) > MAX_VALUE_LEN and str(old) in s:
        raise BoundError(f"a value longer than {MAX_VALUE_LEN} (size limit)")
    return s.replace(str(old), str(new), -1 if count is None else count)


class BoundedSandbox(SandboxedEnvironment):
    """Jinja2's sandbox with the limits above on values, calls and time."""

    intercepted_binops = frozenset(_BINOPS)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.filters = {name: _guard_filter(fn) for name, fn in self.filters.items() if name in ALLOWED_FILTERS}
        self.filters["format"] = _guard_filter(_format)
        self.filters["replace"] = _guard_filter(_replace)
        self.globals = {"range": _bounded_range, "dict": dict}

    def add_filter(self, name: str, fn: Callable[..., Any]) -> None:
        self.filters[name] = _guard_filter(fn)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _tick()
        fn = _BINOPS.get(operator)
        if fn is None:
            return super().call_binop(context, operator, left, right)
        return _check_value(fn(left, right))

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if not super().is_safe_attribute(obj, attr, value):
            return False
        for kind, names in _SAFE_METHODS.items():
            if isinstance(obj, kind) and callable(value):
                return attr in names
        return True

    def getattr(self, obj: Any, attribute: str) -> Any:
        _tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _tick()
        return super().getitem(obj, argument)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - Jinja's signature
        _tick()
        for arg in (*args, *kwargs.values()):
            _check_value(arg)
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str) and getattr(__obj, "__name__", "") == "replace" and len(args) >= 2:
            if len(owner) * max(1, _size(args[1])) > MAX_VALUE_LEN:
                raise BoundError(f"a value longer than {MAX_VALUE_LEN} (size limit)")
        if isinstance(owner, str) and getattr(__obj, "__name__", "") == "join" and args \
                and isinstance(args[0], (list, tuple)) and sum(_size(x) for x in args[0]) > MAX_VALUE_LEN:
            raise BoundError(f"a value longer than {MAX_VALUE_LEN} (size limit)")
        result = SandboxedEnvironment.call(__self, __context, __obj, *args, **kwargs)
        if owner is not None:
            _check_value(owner)  # a list grown in place (append)
        return _check_value(result)


def cut_marker(who: str = "the rule") -> str:
    """What ends an output cut at ``MAX_OUTPUT_CHARS``."""
    return f"[... cut: {who} wrote more than {MAX_OUTPUT_CHARS} characters; the rest is left out]"


def render_bounded(template: Any, env: dict[str, Any], who: str = "the rule") -> str:
    """Render ``template`` within the value and time limits; an output longer than
    ``MAX_OUTPUT_CHARS`` is cut there and ends with :func:`cut_marker` naming ``who`` (a
    rule that lists every node of a run of thousands is long, not hostile: its finding
    stands, and the rest of the diagnosis with it)."""
    out: list[str] = []
    total = 0
    with time_limit():
        pieces = template.generate(**env)
        try:
            for piece in pieces:
                if total + len(piece) > MAX_OUTPUT_CHARS:
                    out += [piece[:MAX_OUTPUT_CHARS - total], "\n", cut_marker(who)]
                    break
                total += len(piece)
                out.append(piece)
                _tick()
        finally:
            pieces.close()
    return "".join(out)
