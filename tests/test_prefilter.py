"""The prefilter of lines no record can begin with (read/prefilter.py).

Two things must hold: every requirement it derives from a terminal is one that every
match of that terminal meets (checked on strings generated from the terminal's own
expression), and a line it lets go past Lark gets the plan Lark would give it.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logforensics.read import grammar, prefilter
from logforensics.read.grammar import parse, parsers, plan_record
from logforensics.read.plan import Plan
from logforensics.read.planner import Planner

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

# st.from_regex imports hypothesis' regex module on its first use, which pytest's assertion
# rewriter then compiles; inside a running hypothesis test that compile can meet CPython 3.11.7's
# "AST constructor recursion depth mismatch" (a SystemError, once in several runs): the module is
# imported here, at collection, instead.
st.from_regex(r"x").validate()


def _lark_plan(text: str):
    """plan_record's result by Lark alone (both parses, no prefilter)."""
    record, fallback = parsers()
    tree = parse(record, text) or parse(fallback, text)
    if tree is None:
        return Plan.make("other", None, None, ())
    return Planner(len(text)).plan(tree).fitted(text)


def _terminals():
    record, fallback = parsers()
    flags = record.lexer_conf.g_regex_flags
    seen = {}
    for t in prefilter.start_terminals(record) + prefilter.start_terminals(fallback):
        seen.setdefault(t.name, t)
    return [(t.name, t.pattern.to_regexp(), flags | prefilter._pattern_flags(t.pattern)) for t in seen.values()]


@pytest.mark.parametrize(("name", "regexp", "flags"), _terminals(), ids=[t[0] for t in _terminals()])
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_requirements_hold_for_every_match(name, regexp, flags, data):
    """A string the terminal matches at its start begins with one of its first characters
    and contains one of its required texts."""
    first, need = prefilter.analyse(regexp, flags)
    rx = re.compile(regexp, flags)
    found = data.draw(st.from_regex(rx), label="containing a match")
    m = rx.search(found)
    text = found[m.start():] if m else ""
    if not text or rx.match(text) is None:
        return  # a lookbehind saw what was cut: nothing to check
    if text[0] in prefilter._ASCII:
        assert text[0] in first, (name, text)
    if need is not None:
        assert any(n in text for n in need), (name, text, need)
    for texts in prefilter.requirements_of(regexp, flags):  # each of them, not only the most selective
        assert any(t in text for t in texts), (name, text, texts)


def _fixture_lines(limit: int = 40_000) -> list[str]:
    lines: list[str] = []
    for path in sorted(FIXTURES.rglob("*.log")):
        for raw in path.read_bytes().split(b"\n"):
            lines.append(raw.decode("utf-8", "replace").replace("\r", ""))
    rng = random.Random(7)
    rng.shuffle(lines)
    return lines[:limit]


def _same_as_lark(text: str) -> bool:
    """Whether the prefilter takes ``text``; if it does, its plan must be Lark's."""
    if not text.strip() or not prefilter.free_text(*parsers(), text):
        return False  # plan_record asks Lark, as before
    assert plan_record(text) == _lark_plan(text), text
    return True


def test_plans_equal_lark_on_fixture_lines():
    """Every fixture line, and each with its first characters cut, that the prefilter
    takes gets Lark's plan; and it does take some."""
    taken = sum(_same_as_lark(text) for line in _fixture_lines(8000) for text in (line, line[1:], line[5:]))
    assert taken > 100


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=120))
def test_plans_equal_lark_on_any_text(text):
    _same_as_lark(text)


def test_short_lines_of_random_bytes_are_told_by_the_terminals_expressions():
    """The short lines of text between random bytes (a character beyond ASCII, a control
    character or a bracket first) that the first-character table lets through are told by
    matching the start terminals' own expressions: most are planned without Lark, every
    plan is Lark's, and those a terminal does begin (a Unicode space before text is
    indented text) still go to Lark."""
    rng = random.Random(21)
    texts = []
    for _ in range(3000):
        data = rng.randbytes(rng.randrange(1, 8)).replace(b"\n", b"")
        try:
            texts.append(data.decode("utf-8"))
        except UnicodeDecodeError:
            continue
    wide = [t for t in texts if t.strip() and not t[0].isascii()]
    texts += [c + rest for c in ("\u3000", "\x85", "\xa0", "\u2003", "é", "[", "\x1c")
              for rest in ("", "x", "  y", "2025-01-01 00:00:00] z", "TP0] Decode batch")]
    taken = [text for text in texts if _same_as_lark(text)]
    assert sum(t in taken for t in wide) > 0.8 * len(wide)
    assert "\u3000x" not in taken and "\xa0  y" not in taken  # indented: the grammar's, not free text


def test_unknown_text_skips_lark(monkeypatch):
    """Lines of words the grammar does not know are planned without Lark: the prefilter is
    not one that lets everything through."""
    rng = random.Random(3)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(300)]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 20))) for _ in range(500)]
    calls = 0
    real = grammar.parse

    def counting(parser, text):
        nonlocal calls
        calls += 1
        return real(parser, text)

    monkeypatch.setattr(grammar, "parse", counting)
    plans = [plan_record(line) for line in lines]
    assert all(p.kind == "other" and p.rank is None and p.ts is None for p in plans)
    assert calls < len(lines) // 10


def test_split_needs_hold_on_fixture_lines():
    """A line that segments.py's record splitter cuts contains one of the texts it is said
    to need, so skipping the splitter on the others changes nothing."""
    from logforensics.read.segments import _SPLIT_NEEDS, _SPLIT_RE

    assert _SPLIT_NEEDS
    cut = 0
    for line in _fixture_lines(40_000):
        if any(m.start() > 0 for m in _SPLIT_RE.finditer(line)):
            cut += 1
            assert any(n in line for n in _SPLIT_NEEDS), line
    assert cut > 10


@settings(max_examples=200, deadline=None)
@given(st.from_regex(r"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d( TP\d)?\] |\(pid=\d+\) |it/s\]|  |x| \| |\w+)+"))
def test_split_needs_hold_on_generated_text(text):
    from logforensics.read.segments import _SPLIT_NEEDS, _SPLIT_RE

    if any(True for _ in _SPLIT_RE.finditer(text)):
        assert any(n in text for n in _SPLIT_NEEDS), text


def test_lines_of_other_programs_logs_are_told_without_lark():
    """Lines of other programs' logs beside SGLang's (Python's logging, syslog, an access
    log, a stamped application line: each line a new shape, so the memo cannot help) that no
    record can begin are planned as Lark would plan them, without Lark."""
    rng = random.Random(5)
    words = ["alpha", "request", "user", "session", "error", "value", "GET", "/api/v1/x", "took", "ms", "id="]

    def words_(n: int) -> str:
        return " ".join(rng.choice(words) + str(rng.randrange(10 ** rng.randrange(1, 6))) for _ in range(n))

    forms = [
        lambda: f"2026-01-0{rng.randrange(1, 10)} 12:{rng.randrange(10, 60)}:{rng.randrange(10, 60)},"
                f"{rng.randrange(100, 1000)} host{rng.randrange(9)} app[{rng.randrange(9999)}]: {words_(6)}",
        lambda: f"Jan  {rng.randrange(1, 10)} 10:0{rng.randrange(10)}:11 node{rng.randrange(9)} kernel: {words_(4)}",
        lambda: f"10.0.{rng.randrange(255)}.{rng.randrange(255)} - - [05/Dec/2026:10:00:0{rng.randrange(10)} +0000] "
                f"\"GET /v{rng.randrange(9)} HTTP/1.1\" 200 {rng.randrange(9999)} {words_(2)}",
        lambda: f"12:{rng.randrange(10, 60)}:{rng.randrange(10, 60)} | step {rng.randrange(999)} | {words_(5)}",
    ]
    lines = [rng.choice(forms)() for _ in range(400)]
    taken = sum(_same_as_lark(text) for text in lines)
    assert taken >= 300, taken
