"""Diagnose a failing run against a baseline: summaries -> facts -> rules -> findings."""

from __future__ import annotations

from collections.abc import Iterable

from ..model.run import RunSummary
from .engine import Diagnosis, evaluate
from .rulespec import load_rules


def diagnose(failing: RunSummary, baseline: RunSummary | None, *, rules_dirs: Iterable[str] = ()) -> Diagnosis:
    return evaluate(load_rules(rules_dirs), failing, baseline)
