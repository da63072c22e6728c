"""The Lark grammar of a log record, and the entry that turns one record into a :class:`~.plan.Plan`.

``grammars/sglang.lark`` decides what a record means. Interpreting a parse tree does not
produce values directly: it produces a plan, which says where in the record's text each
value lies (token offsets) and how to convert it (``plan.py`` pairs a plan with a text).
The stages: parse here, name fields by terminal (``terminals.py``), walk the tree
(``planner.py``), convert values when read (``values.py``).
"""

from __future__ import annotations

import hashlib
import os
import sys
from functools import cache, lru_cache
from importlib import resources

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedInput

from ..cachedir import private_dir
from .plan import Plan
from .planner import Planner
from .prefilter import free_text


@cache
def parsers() -> tuple[Lark, Lark]:
    """The record parser and the fallback parser (prefix + free text), built once.

    Lark's analysis of the grammar (about 0.3 s) is kept between runs in the user's private
    cache directory (``cachedir.py``), never in Lark's default file of the shared temporary
    directory: Lark loads the file with ``pickle``, so whoever could write it could run code.
    The file's name holds the grammar's digest: two installed versions of the package keep a
    file each, instead of rebuilding and rewriting one file in turn."""
    text = resources.files("logforensics.grammars").joinpath("sglang.lark").read_bytes()
    digest = hashlib.sha256(text).hexdigest()[:16]

    def build(start: str) -> Lark:
        directory = private_dir()
        cached: str | bool = False if directory is None else os.path.join(
            directory, f"lark-{start}-py{sys.version_info[0]}{sys.version_info[1]}-{digest}.pickle")
        return Lark.open_from_package("logforensics.grammars", "sglang.lark", ("",), start=start, parser="lalr",
                                      lexer="contextual", propagate_positions=False, maybe_placeholders=False,
                                      cache=cached)

    return build("record"), build("fallback")


def warm_up() -> None:
    """Build the parsers ahead of time (a live follower must not pay for it on a crash)."""
    parsers()


def parse(parser: Lark, text: str) -> Tree | None:
    """``text``'s parse tree, or None when it is not of the parser's language.

    Not matching is the one expected outcome besides a tree; only Lark's
    ``UnexpectedInput`` says it, so nothing else is caught.
    """
    try:
        tree = parser.parse(text)
    except UnexpectedInput:
        return None
    if not isinstance(tree, Tree):  # pragma: no cover - every start alternative is a rule
        raise TypeError(f"a bare terminal {tree!r} as a record")
    return tree


#: The event kind of a record the grammar matched but whose handler failed.
UNPLANNED = "unplanned"


def strict() -> bool:
    """``LOGFORENSICS_STRICT=1``: a failing handler raises (the test suite runs this way)."""
    return os.environ.get("LOGFORENSICS_STRICT", "").strip() in ("1", "yes", "true")


def plan_record(text: str) -> Plan:
    """Parse one record with the grammar; an unknown record still keeps prefix and text.

    A record the grammar matches is planned by its rule. A failing handler is a bug of
    this program, never a record read as ``other``: in strict mode it raises; otherwise
    the record becomes an ``unplanned`` event, with the error as its one field, which the
    run model counts among the unrecognised lines and reports in the summary's warnings
    (a user's run still gives its result).
    """
    if not text.strip():
        return Plan.make("blank", None, None, ())
    plan = free_text_plan(text)
    if plan is not None:
        return plan
    record, fallback = parsers()
    tree = parse(record, text)
    if tree is None:
        tree = parse(fallback, text)
    if tree is None:
        return Plan.make("other", None, None, ())
    try:
        return Planner(len(text)).plan(tree).fitted(text)
    except Exception as exc:
        if strict():
            raise
        return _unplanned(text, tree, exc)


def free_text_plan(text: str) -> Plan | None:
    """The plan of a text that no record can begin (``prefilter.py``): what Lark would
    find, without its two failed passes; None for any other text."""
    return _free_text_plan(len(text)) if text.strip() and free_text(*parsers(), text) else None


@lru_cache(maxsize=1024)
def _free_text_plan(length: int) -> Plan:
    """The plan of ``fallback: FREE_TEXT`` for a text of ``length`` characters (it depends
    on nothing else: no prefix, no fields)."""
    text = " " * length
    tree = Tree("fallback", [Token("FREE_TEXT", text, 0, 1, 1, 1, length + 1, length)])
    return Planner(length).plan(tree).fitted(text)


def _unplanned(text: str, tree: Tree, exc: Exception) -> Plan:
    """The failed record's prefix (from the fallback rule, when that plans) and the error."""
    rules = [str(c.data) for c in tree.children if isinstance(c, Tree) and c.data != "prefix"] or [str(tree.data)]
    error = (("error", f"{type(exc).__name__} in the handler of '{rules[-1]}': {exc}"[:300]),)
    _, fallback = parsers()
    prefix = parse(fallback, text)
    try:
        plan = Planner(len(text)).plan(prefix).fitted(text) if prefix is not None else None
    except Exception:  # the prefix rules' handlers failed too: keep the text alone
        plan = None
    if plan is None:
        return Plan.make(UNPLANNED, None, None, (), error)
    return Plan.make(UNPLANNED, plan.rank, plan.ts, (), error, True, plan.ts_conv)
