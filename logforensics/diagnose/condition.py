"""A rule's ``when`` and ``evidence``: Jinja2 expressions in the bounded sandbox.

The rule templates already speak Jinja2, so the conditions do too (``compile_expression``,
no second language). Rules run over incomplete logs, so a missing value is not an error:
``facts.crash.phase`` on a run without a crash is an undefined that is falsy, equals
``none``, and yields undefined again on any further ``.x`` or ``[k]``. The sandbox of
:mod:`.bounds` applies (values, operators and time are bounded); on top of it an expression
is checked once, when its rule loads: only the names ``baseline``, ``failing``, ``facts``,
no name, attribute or key starting with ``_``, and no call but the functions in
``FUNCTIONS`` (methods of values included); filters are the sandbox's allowed ones.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from jinja2 import ChainableUndefined, TemplateError, Undefined, nodes
from jinja2.environment import TemplateExpression
from jinja2.parser import Parser

from .bounds import BoundedSandbox, BoundError, check_template, time_limit
from .compiled import expression, use_cache


class ConditionError(ValueError):
    """An expression that cannot be used; the message is one line."""


class NullUndefined(ChainableUndefined):
    """A missing value: falsy, equal to ``none`` (and to another missing value), chainable."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return other is None or isinstance(other, Undefined)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = Undefined.__hash__


def _len(value: Any) -> int:
    """``len`` of a missing value (none or undefined) is 0, so ``len(x) > 0`` needs no guard."""
    if value is None or isinstance(value, Undefined):
        return 0
    return len(value)


#: The functions an expression may call.
FUNCTIONS: dict[str, Any] = {"len": _len}


def _environment() -> BoundedSandbox:
    env = BoundedSandbox(undefined=NullUndefined, autoescape=False)
    env.globals = dict(FUNCTIONS)
    use_cache(env, "condition")
    return env


_ENV = _environment()


def _dotted(node: nodes.Node) -> str | None:
    """``a.b['c'].d`` as ``a.b.c.d``; None for anything not a constant path."""
    if isinstance(node, nodes.Name):
        return node.name
    if isinstance(node, nodes.Getattr):
        head = _dotted(node.node)
        return None if head is None else f"{head}.{node.attr}"
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) \
            and isinstance(node.arg.value, (str, int)):
        head = _dotted(node.node)
        return None if head is None else f"{head}.{node.arg.value}"
    return None


def _paths(node: nodes.Node, roots: Collection[str]) -> Iterator[str]:
    path = _dotted(node)
    if path is not None:
        if path.split(".")[0] in roots:
            yield path
        return
    for child in node.iter_child_nodes():
        yield from _paths(child, roots)


def _check(tree: nodes.Node, names: frozenset[str] | None) -> None:
    for node in (tree, *tree.find_all(nodes.Node)):  # find_all leaves out the root itself
        if isinstance(node, nodes.Name):
            if node.name.startswith("_"):
                raise ConditionError(f"name {node.name!r} is not allowed")
            if names is not None and node.name not in names and node.name not in FUNCTIONS:
                hint = " (write none, true, false)" if node.name in ("null", "nil") else ""
                raise ConditionError(f"unknown name {node.name!r}{hint}; the names are {', '.join(sorted(names))}")
        elif isinstance(node, nodes.Getattr) and node.attr.startswith("_"):
            raise ConditionError(f"attribute {node.attr!r} is not allowed")
        elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) \
                and isinstance(node.arg.value, str) and node.arg.value.startswith("_"):
            raise ConditionError(f"key {node.arg.value!r} is not allowed")
        elif isinstance(node, nodes.Call) and not (isinstance(node.node, nodes.Name) and node.node.name in FUNCTIONS):
            raise ConditionError(f"only the functions {', '.join(sorted(FUNCTIONS))} can be called "
                                 "(and the filters after |)")


@dataclass(frozen=True)
class Condition:
    """A compiled expression; ``names_used`` are the dotted paths it reads (for a finding's facts)."""

    source: str
    names_used: frozenset[str]
    _compiled: TemplateExpression = field(repr=False, compare=False)

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        """The expression's value (a missing one as None), within the sandbox's limits."""
        with time_limit():
            value = self._compiled(**env)
        return None if isinstance(value, Undefined) else value

    def holds(self, env: Mapping[str, Any]) -> bool:
        """Truth as a rule condition: a missing value is false."""
        return bool(self.evaluate(env))

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return compile_condition, (self.source,)


def compile_condition(text: str, *, names: Collection[str] | None = None) -> Condition:
    """Parse and check ``text`` once; a syntax error, an unknown name or a call fails here.

    ``names``, when given, are the allowed root names; without it any name is read
    (a missing one is undefined).
    """
    if not isinstance(text, str):
        raise ConditionError(f"expression must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ConditionError("empty expression")
    roots = None if names is None else frozenset(names)
    try:
        check_template(_ENV, "{{ " + text + " }}", "expression")
        parser = Parser(_ENV, text, state="variable")
        tree = parser.parse_expression()
        if not parser.stream.eos:
            raise ConditionError("not a valid expression: text after the expression")
        _check(tree, roots)
        compiled = expression(_ENV, text)
    except BoundError as exc:
        raise ConditionError(str(exc)) from None
    except TemplateError as exc:
        raise ConditionError(f"not a valid expression: {exc.message or exc}".replace("\n", " ")) from None
    used = frozenset(_paths(tree, roots if roots is not None else _all_names(tree)))
    return Condition(text, used, compiled)


def _all_names(tree: nodes.Node) -> frozenset[str]:
    return frozenset(n.name for n in (tree, *tree.find_all(nodes.Name))
                     if isinstance(n, nodes.Name) and n.name not in FUNCTIONS)
