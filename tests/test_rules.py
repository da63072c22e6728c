"""Every rule file: valid, self-documenting, and its examples behave (fail fires, pass does not)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from jinja2 import TemplateSyntaxError

from logforensics.diagnose.engine import env_for, evaluate, fire
from logforensics.diagnose.facts import compute
from logforensics.diagnose.rulespec import RuleError, load_rule_text, load_rules
from logforensics.ingest import LiveRun
from logforensics.ingest.runset import node_from_name, node_summary
from logforensics.model.nodes import combine

RULES = load_rules()


def _run(text: str | dict[str, str] | None, name: str):
    """One log's summary, or (a mapping of file names to texts) a run of several files."""
    if text is None:
        return None
    if isinstance(text, dict):
        parts = []
        for f, t in text.items():
            live = LiveRun(f"{name}/{f}")
            live.feed(t.encode())
            live.close()
            parts.append(node_summary(live, node_from_name(f) or f.split(".")[0], f"{name}/{f}"))
        return combine(parts, source=name)
    run = LiveRun(name)
    run.feed(text.encode())
    run.close()
    return run.summary()


def _findings(rule, case: str):
    example = rule.examples[case]
    failing = _run(example["failing"], f"{rule.id}-{case}-failing.log")
    baseline = _run(example.get("baseline"), f"{rule.id}-{case}-baseline.log")
    return evaluate(RULES, failing, baseline)


def test_rules_load_and_ids_are_unique() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids)) >= 10
    for r in RULES:
        assert Path(r.source).name.startswith(r.id + "_"), "a rule file is named after its id"
        assert r.summary, f"{r.id} needs a one-line summary"


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_fail_example_fires(rule) -> None:
    d = _findings(rule, "fail")
    mine = [f for f in d.findings if f.rule == rule.id]
    assert mine, f"{rule.id} did not fire on its failing example"
    finding = mine[0]
    assert finding.severity == rule.severity, finding.explanation
    assert "could not be evaluated" not in finding.title
    assert finding.evidence, f"{rule.id} cites no evidence lines"
    for e in finding.evidence:
        assert e["file"] and isinstance(e["line"], int) and e["line"] >= 1


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_pass_example_is_quiet(rule) -> None:
    d = _findings(rule, "pass")
    assert rule.id not in [f.rule for f in d.findings]
    assert not [f for f in d.findings if "could not be evaluated" in f.title]


def test_bad_rules_are_refused_at_load_time(tmp_path: Path) -> None:
    good = """
id: XX01
name: test.rule
severity: warning
title: t
when: failing.outcome == 'crashed'
explanation: e
examples: {fail: {failing: "x"}, pass: {failing: "y"}}
"""
    load_rule_text(good, "good.yml")
    cases = {
        "unknown key": good + "colour: red\n",
        "bad id": good.replace("XX01", "x1"),
        "unknown name": good.replace("failing.outcome", "failng.outcome"),
        "bad expression": good.replace("== 'crashed'", "== "),
        "bad template": good.replace("title: t", "title: '{{ x'"),
        "bad severity": good.replace("warning", "fatal"),
        "no examples": good.split("examples")[0],
    }
    for what, text in cases.items():
        with pytest.raises(RuleError) as err:
            load_rule_text(text, f"{what}.yml")
        assert f"{what}.yml" in str(err.value)


def test_lazy_builtin_rules_are_the_rules_and_compile_on_first_render() -> None:
    """``diff`` loads the built-in rules without compiling their templates: the same rules,
    whose title and explanation compile (and are checked) when first rendered; a bad
    template still fails then, and a user's rule is checked whole at load either way."""
    eager, lazy = load_rules(), load_rules(eager=False)
    assert lazy == eager
    assert all(r.compiled for r in eager) and not any(r.compiled for r in lazy)
    bad = load_rule_text("id: XX02\nname: t\nseverity: info\ntitle: '{{ x'\nwhen: 'true'\nexplanation: e\n"
                         "examples: {fail: {failing: x}, pass: {failing: y}}\n", "bad.yml", templates=False)
    with pytest.raises(TemplateSyntaxError):
        bad.render(bad.title, {})
    rule = lazy[0]
    assert rule.render("n={{ 2 + 3 }}", {}) == "n=5" and "n={{ 2 + 3 }}" in rule.compiled


def test_user_rules_directory(tmp_path: Path) -> None:
    (tmp_path / "US01_my_rule.yml").write_text("""
id: US01
name: user.crashed_in_capture
severity: error
summary: mine
title: "crashed in capture on {{ failing.crash.first_rank }}"
when: failing.crash != none and failing.crash.phase == 'cuda_graph_capture'
explanation: "see {{ failing.file }}"
evidence: facts.crash.evidence
examples: {fail: {failing: "x"}, pass: {failing: "y"}}
""")
    rules = load_rules([tmp_path])
    assert "US01" in [r.id for r in rules]
    with pytest.raises(RuleError):
        load_rules([tmp_path / "missing"])


def test_a_rule_that_breaks_on_data_becomes_a_warning() -> None:
    rule = load_rule_text("""
id: XX02
name: test.broken
severity: error
title: "{{ failing.nothing.here }}"
when: "true"
explanation: x
examples: {fail: {failing: "x"}, pass: {failing: "y"}}
""", "broken.yml")
    failing = _run("[2025-01-01 00:00:00] hello\n", "f.log")
    finding = fire(rule, env_for(failing, None, compute(failing, None)))
    assert finding is not None and finding.severity == "warning"
    assert re.search(r"could not be evaluated", finding.title)


def test_kv_cache_title_names_no_fraction_the_log_lacks() -> None:
    """OM02's title quotes mem_fraction_static only where the log printed it."""
    start = ("[2025-06-02 10:00:00 TP0] Load weight begin. avail mem=23.10 GB\n"
             "[2025-06-02 10:00:30 TP0] Load weight end. type=Gemma3ForConditionalGeneration, dtype=torch.bfloat16, "
             "avail mem=5.20 GB, mem usage=17.90 GB.\n")
    crash = ("[2025-06-02 10:00:31 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
             '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 900, '
             "in init_memory_pool\n    raise RuntimeError(\n"
             "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n")
    args = "[2025-06-02 09:59:59] server_args=ServerArgs(model_path='m', mem_fraction_static=0.91, tp_size=1)\n"
    without = [f for f in evaluate(RULES, _run(start + crash, "om02-a.log"), None).findings if f.id.startswith("OM02:")]
    with_args = [f for f in evaluate(RULES, _run(args + start + crash, "om02-b.log"), None).findings if f.id.startswith("OM02:")]
    assert without and "None" not in without[0].title and "not in this log" in without[0].title
    assert with_args and "mem_fraction_static 0.91 leaves no room" in with_args[0].title


@pytest.mark.parametrize("folder", ["real", "real-unseen"])
def test_every_rule_evaluates_on_every_real_log(folder: str) -> None:
    """A rule reads every record's every key (None where the record was made without it): on
    real text no rule is left out as 'could not be evaluated' (real-unseen 227's and 359's
    logged tracebacks had no 'what', and ER01 was)."""
    from logforensics import summarize_file
    from logforensics.diagnose.engine import evaluate

    left_out = []
    for log in sorted((Path(__file__).resolve().parent.parent / "fixtures" / folder).glob("*.log")):
        d = evaluate(RULES, summarize_file(log), None)
        left_out += [f"{log.name[:3]} {f.rule}: {f.explanation[:120]}" for f in d.findings
                     if "could not be evaluated" in f.title]
    assert not left_out, left_out


def test_a_quote_a_rule_cuts_says_it_was_cut() -> None:
    """Rules quote a log's words cut to a length with ``clip``, which marks the cut (real-unseen
    523: PD01 quoted '... remote mooncake session 10.0.0.1:16324 is no' for '... is not alive')."""
    from logforensics.diagnose.rulespec import template_env
    t = template_env().from_string("{{ m|clip(60) }}")
    cut = t.render(m="Decode instance could be dead, remote mooncake session 10.0.0.1:16324 is not alive")
    assert cut.endswith("…") and len(cut) <= 60 and "is no" not in cut
    assert t.render(m="short") == "short"
