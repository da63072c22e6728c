"""What the record grammar makes of every template SGLang printed, v0.2.5 to v0.5.23.

The samples are data beside the grammar (``grammars/samples/*.yml``, read by
``grammar_samples``): one entry per template and wording (the reference is
``sglang-log-formats.md``, sections 1.4 and 2.1-2.6, plus the foreign formats found in
real logs). Each entry's record is parsed with :func:`plan_record` and its kind, rank
label, ISO timestamp and key fields checked, so a grammar change that loses a wording
fails here, by name, before the real-log tests notice. ``tests/test_fastpath.py`` uses
the same samples to check that the memoised fast path agrees with the grammar on the
same shapes with other digits.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from grammar_samples import CASES, GROUPS, SAMPLES, Case, load

from logforensics.read.assemble import TRACEBACK_OPENERS
from logforensics.read.grammar import parsers, plan_record
from logforensics.read.parser import IncrementalParser
from logforensics.read.plan import build_event
from logforensics.read.planner import Planner
from logforensics.read.terminals import RULES

GRAMMAR = Path(__file__).resolve().parent.parent / "grammars" / "sglang.lark"


TS = "2025-03-01T14:03:07"
IDS = [f"{name}-{i}-{c.kind}" for name, group in GROUPS.items() for i, c in enumerate(group)]


def parse(text: str) -> Any:
    return build_event(plan_record(text), text, 1, None)


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return got == pytest.approx(want)
    if isinstance(want, dict) and isinstance(got, dict):
        return all(k in got and _same(got[k], v) for k, v in want.items())
    return type(got) is type(want) and got == want


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_template(case: Case) -> None:
    ev = parse(case.text)
    assert (ev.kind, ev.rank, ev.ts) == (case.kind, case.rank, case.ts), ev.fields
    for key, want in case.fields.items():
        assert key in ev.fields, f"{key} missing from {ev.fields}"
        assert _same(ev.fields[key], want), (key, ev.fields[key], want)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_template_as_a_line_of_a_log(case: Case) -> None:
    """The sample as a line of a log file, through the whole reader (wrappers, cuts inside a
    line, traceback assembly): one record of its kind, or of an assembled traceback for the
    kinds that open one. The grammar alone (``test_template``) does not see a line cut
    before it reaches the grammar: SGLang's "Subprocess scheduler_0 (pid=N) crashed ..." was
    cut at its "(pid=N) " as if a Ray prefix began there."""
    parser = IncrementalParser("sample.log")
    kinds = [e.kind for e in parser.feed(case.text.encode() + b"\n") + parser.close()]
    # faulthandler's timed dump, and a thread's dump with no fatal error above it, are thread dumps
    assembled = "thread_dump" if case.kind in ("fh_timeout", "fh_thread") else "exception"
    want = {case.kind, assembled} if case.kind in TRACEBACK_OPENERS else {case.kind}
    assert len(kinds) == 1 and kinds[0] in want, kinds


def test_samples_are_read_strictly(tmp_path: Path) -> None:
    """A misspelt key in a sample file is an error, not a sample that checks nothing."""
    assert len(CASES) > 300 and set(GROUPS) == {p.stem for p in SAMPLES.glob("*.yml")}
    (tmp_path / "bad.yml").write_text('- line: "Init nccl begin."\n  kind: init_dist_begin\n  feilds: {a: 1}\n')
    with pytest.raises(ValueError, match="bad.yml entry 0"):
        load(tmp_path)


def test_header_samples_parse() -> None:
    """The sample records listed in the grammar's header comment mean what they say."""
    lines = GRAMMAR.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if "Sample records" in line) + 2
    end = lines.index("//", start)
    samples = [line[5:] for line in lines[start:end] if line.startswith("//   ")]
    assert len(samples) >= 8
    for text in samples:
        assert parse(text).kind not in ("other", "indented"), text


def test_digit_literals_absent() -> None:
    """The fast path masks digits, so the grammar may match digits only as ``\\d``."""
    text = GRAMMAR.read_text(encoding="utf-8")
    code = "\n".join(line.split("//")[0] for line in text.splitlines() if not line.lstrip().startswith("//"))
    literals = re.findall(r'"(?:[^"\\]|\\.)*"|/(?:[^/\\\n]|\\.)+/[imslux]*', code)
    offenders = []
    for lit in literals:
        body = re.sub(r"\\d|\{\d+(,\d*)?\}|\[\^?[^\]]*0-9[^\]]*\]", "", lit)
        if re.search(r"\d", body):
            offenders.append(lit)
    assert not offenders, offenders


def test_unknown_records_keep_prefix() -> None:
    ev = parse("[2025-03-01 14:03:07 DP0 TP1 EP1] Some message nobody catalogued yet: 42")
    assert (ev.kind, ev.rank, ev.ts) == ("other", "DP0 TP1 EP1", TS)
    assert parse("completely unknown words").kind == "other"


def _terminals_of(parser: Any, rule: str) -> set[str]:
    """The named terminals a rule's tree can hold directly (through the rules Lark inlines)."""
    by_origin: dict[str, list[Any]] = {}
    for r in parser.rules:
        by_origin.setdefault(str(r.origin.name), []).append(r)
    out: set[str] = set()
    todo, seen = [rule], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for r in by_origin.get(name, ()):
            for sym in r.expansion:
                if sym.is_term:
                    out.add(str(sym.name))
                elif str(sym.name).startswith("_"):  # inlined into its parent's children
                    todo.append(str(sym.name))
    return out


def test_declared_terminals_are_the_rules_own() -> None:
    """Every field declaration names a terminal its rule can produce, and every rule with a
    declaration or a handler exists: a renamed terminal or rule fails here, not silently."""
    record, _ = parsers()
    rules = {str(r.origin.name) for r in record.rules}
    handlers = {name[3:] for name in dir(Planner) if name.startswith("on_")}
    assert not (set(RULES) | handlers) - rules, (set(RULES) | handlers) - rules
    wrong = [(rule, t.terminal) for rule, decl in RULES.items() for t in decl.takes
             if t.terminal not in _terminals_of(record, rule)]
    assert not wrong, wrong


@pytest.mark.parametrize(("handler", "text"), [
    ("on_capture_bs", "[2025-03-01 14:03:07 TP0] Capture cuda graph bs [1, 2, 4, 8]"),
    ("on_cpp_what", "  what():  CUDA error: an illegal memory access was encountered"),
    ("fields_of", "[2025-03-01 14:03:07 TP0] Load weight begin. avail mem=70.00 GB"),
])
def test_a_broken_handler_raises(monkeypatch: pytest.MonkeyPatch, handler: str, text: str) -> None:
    """A planner bug is an error in strict mode (the suite's), never a known record read as ``other``."""
    assert plan_record(text).kind != "other"

    def broken(self: Planner, tree: Any, *_: Any) -> None:
        raise IndexError("a handler bug")

    monkeypatch.setattr(Planner, handler, broken)
    with pytest.raises(IndexError, match="a handler bug"):
        plan_record(text)


def test_a_broken_handler_is_reported_to_a_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside strict mode the run still gives its result: the record is ``unplanned``
    (prefix kept), counted as unrecognised, and the summary's warnings name the line and
    the error; the other lines are read as before."""
    from logforensics.ingest.live import LiveRun

    lines = ["[2025-03-01 14:03:07 TP0] Load weight begin. avail mem=70.00 GB",
             "[2025-03-01 14:03:08 TP0] Capture cuda graph bs [1, 2, 4, 8]",
             "[2025-03-01 14:03:09 TP0] Capture cuda graph end. Time elapsed: 3.10 s"]

    def broken(self: Planner, tree: Any, *_: Any) -> None:
        raise IndexError("a handler bug")

    monkeypatch.setattr(Planner, "on_capture_bs", broken)
    monkeypatch.setenv("LOGFORENSICS_STRICT", "0")
    plan = plan_record(lines[1])
    assert plan.kind == "unplanned"
    ev = build_event(plan, lines[1], 2, None, None)
    assert (ev.rank, ev.ts) == ("TP0", TS[:-1] + "8")
    assert "IndexError in the handler of 'capture_bs': a handler bug" in ev.fields["error"]
    run = LiveRun("broken.log")
    run.feed(("\n".join(lines) + "\n").encode())
    s = run.summary()
    assert s.coverage.kinds["unplanned"] == 1
    assert s.coverage.lines_unrecognised == 1
    assert s.coverage.kinds["load_weight_begin"] == 1
    assert any("first at line 2: IndexError in the handler of 'capture_bs'" in w for w in s.warnings)
