"""Lines that no record can begin with, told without running Lark.

A line the grammar does not know costs two failed LALR parses (``record``, then
``fallback``): about 200 µs in CPython, almost all of it the contextual lexer trying
its start state's hundred-odd terminals at the first character. Unknown lines have no
shape in common, so the fast path's memo cannot help, and a log of unknown text read at
a few kilobytes a second.

Every terminal that can begin a record is analysed once, from its regular expression
(Python's own ``re`` parser): the characters it can begin with, and the literal texts of
which a line must contain at least one for it to match (``[^\\n]*? leaves no room for``
needs `` leaves no room for``; ``(CUDA|HIP) out of memory`` needs ``CUDA`` or ``HIP``).
A line that no start terminal of ``record`` can begin, and no start terminal of
``fallback`` but ``FREE_TEXT``, parses as ``fallback: FREE_TEXT`` and nothing else:
:func:`free_text` says so in about a microsecond, and ``grammar.plan_record`` plans
that tree without asking Lark. The analysis only ever over-approximates what a terminal
can match (a construct it does not read requires nothing and may begin with anything),
so a line it lets through is parsed as before, and ``tests/test_prefilter.py`` checks
both the requirements (on strings generated from each terminal's expression) and the
plans (against Lark's) on every fixture line.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from functools import cache
from typing import Any

if sys.version_info >= (3, 11):  # Python's own regular-expression parser
    import re._constants as _c
    import re._parser as _p
else:  # pragma: no cover
    import sre_constants as _c
    import sre_parse as _p

from lark import Lark

#: Every character (the first-character sets are over ASCII; any other first character
#: lets the line through).
_ASCII = frozenset(chr(i) for i in range(128))


def _ascii_of(pattern: str) -> frozenset[str]:
    return frozenset(ch for ch in _ASCII if re.match(pattern, ch))


#: The ASCII characters of each class, as ``re`` matches them in a str pattern (``\s`` is
#: more than " \t\n\r\f\v" there).
_CATEGORY = {
    _c.CATEGORY_DIGIT: _ascii_of(r"\d"), _c.CATEGORY_NOT_DIGIT: _ascii_of(r"\D"),
    _c.CATEGORY_SPACE: _ascii_of(r"\s"), _c.CATEGORY_NOT_SPACE: _ascii_of(r"\S"),
    _c.CATEGORY_WORD: _ascii_of(r"\w"), _c.CATEGORY_NOT_WORD: _ascii_of(r"\W"),
}

#: A requirement: None (none known), or texts of which a matching string contains one.
Need = frozenset[str] | None
_ATOMIC = getattr(_c, "ATOMIC_GROUP", object())
_REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", _c.MAX_REPEAT))


def _flags_fold(flags: int) -> bool:
    return bool(flags & (_c.SRE_FLAG_IGNORECASE | _c.SRE_FLAG_LOCALE))


def _need(items: Iterable[tuple[Any, Any]], fold: bool, every: list[frozenset[str]] | None = None) -> Need:
    """What any string matching the sequence ``items`` must contain (the most selective
    requirement of its parts; runs of literal characters are joined). ``every``, if given,
    receives each requirement of the sequence's own parts: a match meets all of them."""
    best: Need = None
    run: list[str] = []

    def consider(need: Need) -> None:
        nonlocal best
        if need and every is not None:
            every.append(need)
        if need and (best is None or min(map(len, need)) > min(map(len, best))):
            best = need

    def close_run() -> None:
        if run:
            consider(frozenset({"".join(run)}))
            run.clear()

    for op, av in items:
        if op is _c.LITERAL and not fold:
            run.append(chr(av))
            continue
        if op in (_c.AT, _c.ASSERT_NOT):  # zero-width: the run goes on across it
            continue
        close_run()
        if op is _c.SUBPATTERN:
            _group, add, _del, sub = av
            consider(_need(sub, fold or _flags_fold(add)))
        elif op in _REPEATS:
            low, _high, sub = av
            if low >= 1:
                consider(_need(sub, fold))
        elif op is _c.BRANCH:
            needs = [_need(alt, fold) for alt in av[1]]
            if all(needs):
                consider(frozenset().union(*needs))  # type: ignore[arg-type]
        elif op is _c.ASSERT:  # a lookaround's text is in the line too
            consider(_need(av[1], fold))
        elif op is _ATOMIC:
            consider(_need(av, fold))
    close_run()
    return best


def _charset(items: Iterable[tuple[Any, Any]], fold: bool) -> frozenset[str]:
    """The characters of an ``[...]`` class (over ASCII)."""
    out: set[str] = set()
    negate = False
    for op, av in items:
        if op is _c.NEGATE:
            negate = True
        elif op is _c.LITERAL:
            out.add(chr(av))
        elif op is _c.RANGE:
            out.update(chr(i) for i in range(av[0], min(av[1], 127) + 1))
        elif op is _c.CATEGORY:
            out |= _CATEGORY.get(av, _ASCII)
        else:
            return _ASCII
    if fold:
        out |= {ch.swapcase() for ch in out}
    return _ASCII - out if negate else frozenset(out)


def _first(items: list[tuple[Any, Any]], fold: bool) -> tuple[frozenset[str], bool]:
    """(the characters a match of the sequence can begin with, whether it can be empty)."""
    first: set[str] = set()
    for op, av in items:
        if op in (_c.AT, _c.ASSERT, _c.ASSERT_NOT):
            continue  # zero-width: leaving its constraint out only lets more through
        if op is _c.LITERAL:
            ch = chr(av)
            first |= {ch, ch.swapcase()} if fold else {ch}
            return frozenset(first), False
        if op is _c.NOT_LITERAL:
            return frozenset(first) | (_ASCII - {chr(av)}), False
        if op is _c.IN:
            return frozenset(first) | _charset(av, fold), False
        if op is _c.CATEGORY:
            return frozenset(first) | _CATEGORY.get(av, _ASCII), False
        if op is _c.SUBPATTERN:
            _group, add, _del, sub = av
            f, empty = _first(sub, fold or _flags_fold(add))
        elif op in _REPEATS:
            low, _high, sub = av
            f, empty = _first(sub, fold)
            empty = empty or low == 0
        elif op is _c.BRANCH:
            f, empty = frozenset(), False
            for alt in av[1]:
                fa, ea = _first(alt, fold)
                f, empty = f | fa, empty or ea
        else:  # ANY, a group reference, anything else: every character
            return _ASCII, False
        first |= f
        if not empty:
            return frozenset(first), False
    return frozenset(first), True


def analyse(regexp: str, flags: int = 0,
            every: list[frozenset[str]] | None = None) -> tuple[frozenset[str], Need]:
    """(first characters, requirement) of a terminal's expression; an expression that can
    match the empty string may begin with anything. ``every``, if given, receives each
    requirement of the expression's parts (a match meets all of them)."""
    items: list[tuple[Any, Any]] = list(_p.parse(regexp, flags))  # type: ignore[call-overload]
    fold = _flags_fold(flags)
    first, empty = _first(items, fold)
    return (_ASCII if empty else first), _need(items, fold, every)


def requirements_of(regexp: str, flags: int = 0) -> tuple[tuple[str, ...], ...]:
    """Every requirement of ``regexp``'s parts: a string it matches contains one text of each,
    the most selective first (the longest shortest text)."""
    every: list[frozenset[str]] = []
    analyse(regexp, flags, every)
    return _ordered(every)


def _ordered(every: list[frozenset[str]]) -> tuple[tuple[str, ...], ...]:
    return tuple(sorted({_fewest(need) for need in every}, key=lambda t: (-min(map(len, t)), t)))


def needs(regexp: str, flags: int = 0) -> tuple[str, ...] | None:
    """Texts of which a string must contain one for ``regexp`` to match anywhere in it
    (None: none known)."""
    need = analyse(regexp, flags)[1]
    return None if need is None else _fewest(need)


#: first character -> the requirements of the expressions that can begin with it; None
#: where one of them has no requirement
ByChar = dict[str, tuple[str, ...] | None]


def _by_char(analysed: Iterable[tuple[frozenset[str], Need]]) -> ByChar:
    by_char: dict[str, list[Need]] = {}
    for first, need in analysed:
        for ch in first:
            by_char.setdefault(ch, []).append(need)
    return {ch: None if any(n is None for n in needs) else _fewest(frozenset().union(*needs))  # type: ignore[arg-type]
            for ch, needs in by_char.items()}


#: Terminals grouped by their requirements: (the requirements, each as the texts of which a
#: match contains one, the most selective first; the terminals' indices).
_Groups = tuple[tuple[tuple[tuple[str, ...], ...], tuple[int, ...]], ...]


def _groups(firsts: list[frozenset[str]], reqs: list[tuple[tuple[str, ...], ...]], ch: str | None) -> _Groups:
    """The terminals that can begin with ``ch`` (None: a character beyond ASCII, any of them),
    grouped by their requirements, those with fewest first."""
    by_reqs: dict[tuple[tuple[str, ...], ...], list[int]] = {}
    for i, (first, req) in enumerate(zip(firsts, reqs)):
        if ch is None or ch in first:
            by_reqs.setdefault(req, []).append(i)
    return tuple((req, tuple(terms)) for req, terms in sorted(by_reqs.items(), key=lambda kv: len(kv[0])))


def _holds(text: str, req: tuple[tuple[str, ...], ...]) -> bool:
    """Whether ``text`` contains one text of each requirement (``in``: a C search per text,
    several times faster than an expression of alternatives)."""
    for texts in req:
        for t in texts:
            if t in text:
                break
        else:
            return False
    return True


class Prefilter:
    """The start terminals of a parser, by first character, with their requirements."""

    def __init__(self, terminals: Iterable[Any], flags: int = 0, skip: frozenset[str] = frozenset()) -> None:
        self.names: list[str] = []
        self._expressions: list[tuple[str, int]] = []
        analysed = []
        self._reqs: list[tuple[tuple[str, ...], ...]] = []
        for term in terminals:
            if term.name in skip:
                continue
            self.names.append(term.name)
            regexp, term_flags = term.pattern.to_regexp(), flags | _pattern_flags(term.pattern)
            every: list[frozenset[str]] = []
            analysed.append(analyse(regexp, term_flags, every))
            self._reqs.append(_ordered(every))
            self._expressions.append((regexp, term_flags))
        #: first character -> the requirements of the terminals that can begin with it;
        #: None where one of them has no requirement (the line goes through)
        self.by_char: ByChar = _by_char(analysed)
        self._firsts = [first for first, _ in analysed]
        #: first character (None: beyond ASCII) -> the terminals that can begin with it, grouped
        #: by their requirements (``_groups``; made when first needed)
        self._terms: dict[str | None, _Groups] = {}
        self._compiled: dict[int, re.Pattern[str]] = {}

    def may_begin(self, text: str) -> bool:
        """False when no terminal can match at the start of ``text``: told by its first
        character and the texts a match must contain where it is ASCII, and where these let
        it through (any other first character, a terminal that needs no text), by matching
        there only the terminals that may begin with that character and whose own texts the
        line holds, each by its own expression: a few microseconds. Lark's start lexer tries
        all its terminals (about 37 µs on a line of another program's log; 150 µs to fail on
        a short line of text between random bytes, a character beyond ASCII first)."""
        if not text:
            return True
        first: str | None = text[0]
        if first in _ASCII:
            if first not in self.by_char:
                return False
            needs = self.by_char[first]
            if needs is not None:
                for n in needs:
                    if n in text:
                        break
                else:
                    return False
        else:
            first = None
        groups = self._terms.get(first)
        if groups is None:
            groups = self._terms[first] = _groups(self._firsts, self._reqs, first)
        compiled = self._compiled
        for req, terms in groups:  # the terminals that may begin so and whose texts are in the line
            if req:
                for t in req[0]:  # the most selective requirement, inline: most groups fail on it
                    if t in text:
                        break
                else:
                    continue
                if len(req) > 1 and not _holds(text, req[1:]):
                    continue
            for i in terms:
                pattern = compiled.get(i)
                if pattern is None:  # compiled when first needed
                    regexp, flags = self._expressions[i]
                    pattern = compiled[i] = re.compile(regexp, flags)
                if pattern.match(text):
                    return True
        return False


def begin_table(regexp: str, flags: int = 0) -> ByChar:
    """What a text must contain, by its first character, for ``regexp`` to match at its
    start: each alternative of a top-level ``|`` analysed on its own (a first character
    no alternative can begin with is absent)."""
    items: list[tuple[Any, Any]] = list(_p.parse(regexp, flags))  # type: ignore[call-overload]
    fold = _flags_fold(flags)
    alternatives = av[1] if len(items) == 1 and (av := items[0][1]) and items[0][0] is _c.BRANCH else [items]
    analysed = []
    for alt in alternatives:
        first, empty = _first(list(alt), fold)
        analysed.append((_ASCII if empty else first, _need(alt, fold)))
    return _by_char(analysed)


def lookahead_only(regexp: str, flags: int = 0) -> frozenset[str] | None:
    """The first characters of a text that ``regexp`` may fail to match whole, when it is
    negative lookaheads followed by ``.+`` (it matches every other non-empty line whole);
    None for any other expression."""
    items: list[tuple[Any, Any]] = list(_p.parse(regexp, flags))  # type: ignore[call-overload]
    fold = _flags_fold(flags)
    while len(items) == 1 and items[0][0] is _c.SUBPATTERN:
        _group, add, _del, sub = items[0][1]
        fold = fold or _flags_fold(add)
        items = list(sub)
    blocked: set[str] = set()
    for op, av in items[:-1]:
        if op is not _c.ASSERT_NOT or av[0] != 1:
            return None
        first, empty = _first(list(av[1]), fold)
        if empty:
            return None
        blocked |= first
    if not items or items[-1][0] not in _REPEATS:
        return None
    low, high, sub = items[-1][1]
    if low != 1 or high != _c.MAXREPEAT or list(sub) != [(_c.ANY, None)]:
        return None
    return frozenset(blocked)


def _fewest(texts: frozenset[str]) -> tuple[str, ...]:
    """``texts`` without those that contain another (a line without ``:`` has no ``Warning: ``)."""
    return tuple(sorted(t for t in texts if not any(o != t and o in t for o in texts)))


def _pattern_flags(pattern: Any) -> int:
    flags = 0
    for f in getattr(pattern, "flags", ()):
        flags |= {"i": re.I, "m": re.M, "s": re.S, "x": re.X, "u": re.U, "l": re.L}.get(f, 0)
    return flags


def start_lexer(parser: Lark) -> Any:
    """The lexer that the parser's contextual lexer uses at the start of a text."""
    table = parser.parser.parser.parser.parse_table
    (state,) = table.start_states.values()
    return parser.parser.lexer.lexers[state]


def start_terminals(parser: Lark) -> list[Any]:
    """The terminals that the parser's contextual lexer tries at the start of a text."""
    return list(start_lexer(parser).terminals)


@cache
def filters(record: Lark, fallback: Lark) -> tuple[Prefilter, Prefilter, re.Pattern[str]]:
    """The prefilters of the two start symbols (``fallback``'s without ``FREE_TEXT``) and
    ``FREE_TEXT``'s own expression."""
    flags = record.lexer_conf.g_regex_flags
    free = next(t for t in fallback.terminals if t.name == "FREE_TEXT")
    return (Prefilter(start_terminals(record), flags),
            Prefilter(start_terminals(fallback), flags, frozenset({"FREE_TEXT"})),
            re.compile(free.pattern.to_regexp(), flags | _pattern_flags(free.pattern)))


def free_text(record: Lark, fallback: Lark, text: str) -> bool:
    """Whether ``text`` can only parse as ``fallback: FREE_TEXT`` (the whole text one token)."""
    rec, fb, free = filters(record, fallback)
    if rec.may_begin(text) or fb.may_begin(text):
        return False
    m = free.match(text)
    return m is not None and m.end() == len(text)
