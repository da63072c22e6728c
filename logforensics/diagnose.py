"""Diagnose a failing run against a baseline: summaries -> facts -> rules -> findings."""

from __future__ import annotations

from typing import Any, Iterable

from .engine import Diagnosis, evaluate
from .pipeline import summarize_file
from .rulespec import load_rules
from .run import RunSummary


def diagnose(failing: RunSummary, baseline: RunSummary | None, *, rules_dirs: Iterable[str] = ()) -> Diagnosis:
    return evaluate(load_rules(rules_dirs), failing, baseline)


def diagnose_files(failing: str, baseline: str | None, *, rules_dirs: Iterable[str] = (),
                   progress: Any = None) -> Diagnosis:
    rules = load_rules(rules_dirs)  # load rules first: a bad rule file fails before any parsing
    base = summarize_file(baseline, progress=progress) if baseline else None
    return evaluate(rules, summarize_file(failing, progress=progress), base)
