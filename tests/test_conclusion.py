"""The verdict's contract (``diagnose/conclusion.py``): the same conclusion in the JSON, the
terminal, the HTML report and the bundle; the explanation's confidence; "cannot tell from
these logs" with what to collect; and what was compared between the runs.

The logs are the diff fixtures (``fixtures/diff``, written in SGLang's formats) and SGLang's
own lines.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from logforensics.pipeline import diagnose_files

DIFF = Path(__file__).resolve().parent.parent / "fixtures" / "diff"


def _case(name: str) -> tuple[str, str]:
    return str(DIFF / name / "baseline.log"), str(DIFF / name / "failing.log")


def test_the_named_cause_carries_its_confidence_and_the_checks() -> None:
    base, fail = _case("custom_ar_pcie_oom")
    d = diagnose_files(fail, base)
    c = d.conclusion
    assert c.outcomes == {"baseline": "ready", "failing": "crashed"}
    assert c.rule == "CFG01" and c.explanation is not None and c.explanation in d.verdict
    assert c.confidence == next(f.confidence for f in d.findings if f.rule == "CFG01")
    assert c.first is not None and c.first.startswith("TP5 failed first") and c.first.endswith(f"{fail}:80)")
    checks = {k.what: k.status for k in c.ruled_out}
    # both logs print the same NCCL and CUDA versions: the environment they show is equal, and checked first
    assert checks == {"environment": "equal", "setup": "equal", "settings": "differs", "memory budget": "differs",
                      "KV pool": "equal"}
    assert c.ruled_out[0].what == "environment"


def test_the_next_step_undoes_what_the_explanation_names_before_the_budget_advice() -> None:
    """The README's case: the failure is inside custom allreduce, which the failing run forced on
    (``SGLANG_FORCE_CUSTOM_AR_PCIE=1``); the first thing to do is to unset it, and a lower
    --mem-fraction-static only to keep it. A run whose explanation names no undo takes the budget's."""
    base, fail = _case("custom_ar_pcie_oom")
    step = diagnose_files(fail, base).conclusion.next_step
    assert step is not None and step.startswith("unset SGLANG_FORCE_CUSTOM_AR_PCIE, as the baseline ran")
    assert step.endswith("to keep custom allreduce, try --mem-fraction-static 0.78 (it may not be enough)")
    assert "SGLANG_CUSTOM_ALLREDUCE_ALGO" not in step  # it chooses a kernel; it forces nothing on
    base, fail = _case("capture_oom_max_bs")
    other = diagnose_files(fail, base).conclusion
    assert other.rule == "CFG03" and other.next_step is not None and not other.next_step.startswith("unset")


def test_a_cause_resting_on_a_changed_setting_alone_is_low_confidence() -> None:
    base, fail = _case("capture_oom_max_bs")
    d = diagnose_files(fail, base)
    cfg03 = next(f for f in d.findings if f.rule == "CFG03")
    assert cfg03.confidence == "low"
    assert d.conclusion.rule == "CFG03" and d.conclusion.confidence == "low"
    assert d.conclusion.collect, "a low-confidence explanation says what would tell more"
    crash = next(f for f in d.findings if f.rule == "CR01")
    assert crash.confidence == "high"  # two ranks' records of the failure


def test_without_a_cause_the_conclusion_says_it_cannot_tell_and_what_to_collect(tmp_path: Path) -> None:
    args = "server_args=ServerArgs(model_path='/models/m', tp_size=1, mem_fraction_static=0.88)\n"
    ready = "[2026-03-01 10:00:40] The server is fired up and ready to roll!\n"
    base = tmp_path / "baseline.log"
    base.write_text("[2026-03-01 10:00:00] " + args + ready)
    fail = tmp_path / "failing.log"
    fail.write_text("[2026-03-02 10:00:00] " + args + "[2026-03-02 10:00:20 TP0] Scheduler hit an exception: "
                    "Traceback (most recent call last):\n"
                    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2547, in run_scheduler_process\n')
    d = diagnose_files(str(fail), str(base))
    c = d.conclusion
    assert c.explanation is None and c.confidence is None
    assert c.to_dict()["explanation"] == "cannot tell from these logs"
    assert any("the full log" in item for item in c.collect)
    checks = {k.what: (k.status, k.detail) for k in c.ruled_out}
    assert checks["settings"][0] == "equal"
    assert checks["KV pool"] == ("not comparable", "a log lacks the KV cache lines")
    assert checks["memory budget"][0] == "not comparable"
    assert c.next_step is not None and c.next_step.startswith("collect the full log")


def test_every_output_shows_the_conclusion(tmp_path: Path) -> None:
    base, fail = _case("capture_oom_max_bs")
    cli = [sys.executable, "-m", "logforensics"]
    out = tmp_path / "d.json"
    html = tmp_path / "r.html"
    term = subprocess.run(cli + ["diff", base, fail, "--json", str(out), "-o", str(html)],
                          capture_output=True, text=True, env={"COLUMNS": "200", "PATH": ""})
    assert term.returncode == 1, term.stderr
    doc = json.loads(out.read_text())
    c = doc["conclusion"]
    assert set(c) == {"outcomes", "first", "explanation", "confidence", "rule", "collect", "ruled_out", "next_step"}
    assert all(f["confidence"] in ("high", "medium", "low") for f in doc["findings"])
    assert "best explanation (low confidence)" in term.stdout and "checked memory budget: differs" in term.stdout
    page = html.read_text()
    assert 'id="ruled-out"' in page and "low confidence" in page and "memory budget" in page
    bundle = subprocess.run(cli + ["bundle", "--baseline", base, fail], capture_output=True, text=True)
    assert "best explanation (low confidence)" in bundle.stdout and "checked KV pool: equal" in bundle.stdout


def test_finding_ids_are_stable_across_places_runs_and_outputs(tmp_path: Path) -> None:
    """RULE:RANK:PHASE:HASH, the same for the same input wherever it lies and in every output;
    another evidence line gives another id."""
    import shutil

    base, fail = _case("custom_ar_pcie_oom")
    moved = tmp_path / "elsewhere"
    shutil.copytree(Path(base).parent, moved)
    first = diagnose_files(fail, base)
    again = diagnose_files(str(moved / "failing.log"), str(moved / "baseline.log"))
    ids = [f.id for f in first.findings]
    assert ids == [f.id for f in again.findings] and len(set(ids)) == len(ids)
    cr01 = next(f.id for f in first.findings if f.rule == "CR01")
    assert cr01.startswith("CR01:TP5:cuda_graph_capture:") and len(cr01.rsplit(":", 1)[1]) == 8
    cli = [sys.executable, "-m", "logforensics"]
    out = tmp_path / "d.json"
    html = tmp_path / "r.html"
    subprocess.run(cli + ["diff", base, fail, "--json", str(out), "-o", str(html)], capture_output=True)
    assert [f["id"] for f in json.loads(out.read_text())["findings"]] == ids
    bundle = subprocess.run(cli + ["bundle", "--baseline", base, fail], capture_output=True, text=True).stdout
    page = html.read_text()
    assert all(i in bundle and i in page for i in ids)
    text = (moved / "failing.log").read_text().replace("Capture cuda graph begin", "Capture cuda graph  begin")
    (moved / "failing.log").write_text(text)
    changed = diagnose_files(str(moved / "failing.log"), str(moved / "baseline.log"))
    assert {f.id for f in changed.findings} != set(ids)


def test_the_worked_cases_of_the_agent_skill_say_what_the_tool_says() -> None:
    """docs/agent-skill.md's three cases: their explanations' confidence and what to collect."""
    doc = (DIFF.parent.parent / "docs" / "agent-skill.md").read_text()
    got = {}
    for name in ("custom_ar_pcie_oom", "capture_oom_max_bs", "rank_hang"):
        base, fail = _case(name)
        got[name] = diagnose_files(fail, base).conclusion
        assert f"(`{name}`)" in doc
    assert (got["custom_ar_pcie_oom"].rule, got["custom_ar_pcie_oom"].confidence) == ("CFG01", "medium")
    assert (got["capture_oom_max_bs"].rule, got["capture_oom_max_bs"].confidence) == ("CFG03", "low")
    assert got["rank_hang"].explanation is None
    assert any(item.startswith("NCCL_DEBUG=INFO") for item in got["rank_hang"].collect)
    assert "`medium`" in doc and "`low` confidence" in doc and "`cannot tell from\nthese logs`" in doc
