"""Diagnose a failing run against a baseline: summaries -> facts -> rules -> findings."""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable

from .engine import Diagnosis, evaluate
from .pipeline import LiveRun, feed_file
from .rulespec import load_rules
from .run import RunSummary


def summarize(path: str | os.PathLike[str], progress: Callable[[int], None] | None = None) -> RunSummary:
    run = LiveRun(os.fspath(path))
    feed_file(run, path, progress=progress)
    return run.summary()


def diagnose(failing: RunSummary, baseline: RunSummary | None, *, rules_dirs: Iterable[str] = ()) -> Diagnosis:
    return evaluate(load_rules(rules_dirs), failing, baseline)


def diagnose_files(failing: str, baseline: str | None, *, rules_dirs: Iterable[str] = (),
                   progress: Any = None) -> Diagnosis:
    rules = load_rules(rules_dirs)  # load rules first: a bad rule file fails before any parsing
    base = summarize(baseline, progress) if baseline else None
    return evaluate(rules, summarize(failing, progress), base)
