"""`diff` on pairs of real excerpts: the verdict and every finding must be true of the two files.

Each test names a statement that used to be wrong and asserts the specific statement the two
files do support, never a snapshot. The pairs mix setups, partial windows and rank forms on
purpose: a short excerpt that lacks a line shows nothing, it does not show a change.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from logforensics.diagnose.engine import Diagnosis
from logforensics.pipeline import diagnose_files
from logforensics.units import gib

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "fixtures" / "real"
CASE = ROOT / "fixtures" / "diff" / "custom_ar_pcie_oom"


def real(prefix: str) -> str:
    (path,) = REAL.glob(f"{prefix}-*.log")
    return str(path)


def diff(baseline: str, failing: str) -> Diagnosis:
    return diagnose_files(failing, baseline)


def text(d: Diagnosis) -> str:
    """Everything the diagnosis says, verdict and findings."""
    return "\n".join([d.verdict, *(f"{f.title}\n{f.explanation}" for f in d.findings)])


def finding(d: Diagnosis, rule: str):
    found = [f for f in d.findings if f.rule == rule]
    return found[0] if found else None


def rules(d: Diagnosis) -> set[str]:
    return {f.rule for f in d.findings}


@pytest.mark.parametrize("failing", ["032", "041", "019"])
def test_absent_settings_are_not_changes(failing: str) -> None:
    """052 (TP4, ready, full server_args) against excerpts that print no server_args."""
    d = diff(real("052"), real(failing))
    said = text(d)
    assert "-> unset" not in said and "-> None" not in said and "-> not set" not in said
    assert not re.search(r"\d+ settings? differ", said)
    assert {"CFG02", "CFG03"}.isdisjoint(rules(d))
    assert "1 ranks" not in said and "0 peers" not in said
    assert not d.facts.config.changed and d.facts.config.not_compared


@pytest.mark.parametrize("failing", ["032", "041"])
def test_no_custom_allreduce_cause_without_failing_side_evidence(failing: str) -> None:
    d = diff(real("052"), real(failing))
    assert "custom allreduce" not in d.verdict
    assert "CFG01" not in rules(d)


@pytest.mark.parametrize("failing,least", [("032", 5), ("041", 8)])
def test_another_tp_size_is_said_first(failing: str, least: int) -> None:
    """052 runs TP4 (server_args tp_size=4); 032 names TP4 and 041 TP7, so they run more ranks."""
    d = diff(real("052"), real(failing))
    head = d.verdict.split(": ", 1)[1]
    assert head.startswith(f"not the same setup (TP size 4 vs at least {least}")
    su = finding(d, "SU01")
    assert su is not None and f"at least {least}" in su.title
    assert "likely cause" not in d.verdict


def test_custom_allreduce_in_use_is_not_called_forced() -> None:
    """019's crash is in custom_all_reduce.cuh; nothing in it forces custom allreduce on."""
    d = diff(real("052"), real("019"))
    cfg = finding(d, "CFG01")
    assert cfg is not None
    assert "forced" not in cfg.title and "in use in the failing run" in cfg.title
    failing_file = real("019")
    assert any(e["file"] == failing_file and "custom_all_reduce" in e["text"] for e in cfg.evidence)
    assert "mem-fraction-static" not in cfg.explanation  # not an OOM: no headroom advice
    assert "likely cause: custom allreduce" in d.verdict


def test_partial_windows_are_not_ranks_that_stopped() -> None:
    """002 and 055 are both excerpts that end mid-start-up: neither shows a rank stopping."""
    d = diff(real("002"), real("055"))
    assert "AL01" not in rules(d)
    assert not [f for f in d.findings if f.severity == "error"]
    assert "the baseline itself did not reach ready (incomplete)" in d.verdict
    assert "could not be evaluated" not in text(d)


def test_unlabelled_rank_and_tp0_are_one_rank() -> None:
    """004 prints no rank prefix (single GPU); 014 prints TP0."""
    d = diff(real("004"), real("014"))
    al = finding(d, "AL01")
    assert al is not None
    assert al.title.startswith("TP0 stopped before warmup")
    assert "init_distributed" not in al.title
    assert d.facts.alignment.ranks["-"].failing_rank == "TP0"
    assert "The baseline reached incomplete" not in text(d)
    cr = finding(d, "CR01")
    assert cr is not None and "does not show a working run" in cr.explanation


def test_single_gpu_scheduler_against_tp0_baseline() -> None:
    """020 names TP0; 007's scheduler prints no rank and crashed while serving."""
    d = diff(real("020"), real("007"))
    assert "never reached init_distributed" not in text(d)
    assert "AL01" not in rules(d)
    cr = finding(d, "CR01")
    assert cr is not None and "during serving" in cr.title


@pytest.mark.parametrize("baseline,failing", [("038", "041"), ("038", "031")])
def test_alignment_agrees_with_the_crash(baseline: str, failing: str) -> None:
    """Two MI355X GLM-5 excerpts of one setup: a rank that crashed in a phase reached it."""
    d = diff(real(baseline), real(failing))
    crash = d.facts.crash
    assert crash is not None
    al = finding(d, "AL01")
    if crash.phase is None:
        assert al is None  # where a rank stopped is unknown: nothing to align
        return
    assert al is not None
    first = d.facts.alignment.first_missing
    assert first is not None
    for row in first.rows:
        if row.failing_rank in crash.ranks:
            assert row.failing_phase == crash.phase
    assert PHASES.index(first.phase) > PHASES.index(crash.phase)
    assert "never reached init_distributed" not in text(d)
    assert "The baseline reached incomplete" not in text(d)


@pytest.mark.parametrize("log", [str(CASE / "failing.log"), real("041"), real("014")])
def test_a_crashed_log_against_itself_reports_no_change(log: str) -> None:
    d = diff(log, log)
    assert "both runs crashed the same way (no change between them)" in d.verdict
    assert "CR01" not in rules(d) and "MEM01" not in rules(d)
    mem04 = finding(d, "MEM04")
    assert mem04 is None or "no term moved" in mem04.title
    assert not d.facts.budget_moved and not d.facts.config.changed and not d.facts.memory.changed


def test_readme_case() -> None:
    d = diff(str(CASE / "baseline.log"), str(CASE / "failing.log"))
    assert d.verdict.startswith("baseline ready, failing crashed: TP5 failed first, during cuda_graph_capture")
    assert "likely cause: custom allreduce: off in the baseline" in d.verdict
    al = finding(d, "AL01")
    assert al is not None and al.title.startswith("TP0 stopped before warmup")  # only TP0 has warmup
    cfg = finding(d, "CFG01")
    assert cfg is not None and "forced on" in cfg.title
    assert "SGLANG_FORCE_CUSTOM_AR_PCIE=1" in cfg.explanation
    assert "7 peers at TP 8" in cfg.explanation


def test_capture_excess_is_one_figure() -> None:
    """OM01 and MEM01 speak of the same quantity: how much more the capture needed."""
    d = diff(str(CASE / "baseline.log"), str(CASE / "failing.log"))
    om01, mem01 = finding(d, "OM01"), finding(d, "MEM01")
    assert om01 is not None and mem01 is not None
    cap = d.facts.capture
    assert cap is not None and cap.excess_gib is not None
    said = f"at least {gib(cap.excess_gib)} more than the baseline's capture"
    assert said in om01.explanation and said in mem01.explanation
    assert len(set(re.findall(r"at least ([\d.]+ [GM]iB) more", om01.explanation + mem01.explanation))) == 1


def test_a_capture_that_failed_promises_no_fit() -> None:
    """Without a baseline capture the failing one is a lower bound: no setting can be promised."""
    log = str(CASE / "failing.log")
    d = diff(log, log)
    om01 = finding(d, "OM01")
    assert om01 is not None
    assert "would fit" not in om01.explanation.lower()
    assert "No setting can be promised to fit" in om01.explanation
    assert d.facts.budget.advice.lower_bound and not d.facts.budget.advice.settings


def test_figures_below_one_gib_are_in_mib() -> None:
    assert gib(896 / 2**20) == "0.88 MiB"
    assert gib(1.94 / 1024) == "1.94 MiB"
    assert gib(21.7) == "21.70 GiB" and gib(21.7, unit=False) == "21.70" and gib(None) == "?"
    d = diff(str(CASE / "baseline.log"), str(CASE / "failing.log"))
    om04 = finding(d, "OM04")
    assert om04 is not None and om04.title.startswith("OOM breakdown: tried 0.88 MiB, free 1.94 MiB")
    assert "0.00 GiB" not in text(d)


def test_summary_panel_writes_small_oom_figures_in_mib() -> None:
    from rich.console import Console

    from logforensics.pipeline import summarize_file
    from logforensics.render.terminal import render_crash

    crash = summarize_file(str(CASE / "failing.log")).crash
    assert crash is not None
    console = Console(width=400, record=True)
    console.print(render_crash(crash))
    out = console.export_text()
    assert "OOM: tried 0.88 MiB; total 94.97 GiB; free 1.94 MiB" in out
    assert "0.00" not in out


PHASES = ("init_distributed", "load_weights", "kv_cache_alloc", "cuda_graph_capture", "warmup", "serving")


def test_readme_example_is_what_diff_prints() -> None:
    """Every finding head in the README's example appears in diff's output (``...`` elides)."""
    from rich.console import Console

    from logforensics.render.diff import render_diagnosis

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("$ logforensics diff fixtures/diff/custom_ar_pcie_oom/baseline.log", 1)[1].split("```", 1)[0]
    heads = [line for line in block.splitlines() if re.match(r"\[(error|warning|info)\] ", line)]
    assert len(heads) >= 4
    console = Console(width=1000, record=True)
    render_diagnosis(diff(str(CASE / "baseline.log"), str(CASE / "failing.log")), console)
    out = console.export_text()
    for head in heads:
        pos = 0
        for part in re.split(r"\s*\(?\.\.\.\)?\s*", head):
            if part:
                found = out.find(part, pos)
                assert found >= 0, f"README says {head!r}; diff prints no {part!r}"
                pos = found + len(part)
