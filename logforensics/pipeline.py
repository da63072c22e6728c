"""The small public facade: a log file to events, to a run summary, to a diagnosis.

Each call goes through the one pipeline (``ingest.LiveRun``): the same parser and run
model that ``watch`` feeds chunk by chunk.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .diagnose.engine import Diagnosis, evaluate
from .diagnose.rulespec import load_rules
from .events import Event
from .ingest import InputError, LiveRun, blocks, read_file
from .model.run import RunSummary
from .read.parser import IncrementalParser

__all__ = ["InputError", "LiveRun", "diagnose_files", "iter_events", "summarize_file"]


def summarize_file(path: str | os.PathLike[str], *, name: str | None = None,
                   progress: Callable[[int], None] | None = None) -> RunSummary:
    """Parse a whole log and return its run summary."""
    return read_file(path, name=name, progress=progress).summary()


def iter_events(path: str | os.PathLike[str], *, name: str | None = None,
                progress: Callable[[int], None] | None = None) -> Iterator[Event]:
    """Every event of a log, in order (a generator: constant memory)."""
    parser = IncrementalParser(name or os.fspath(path))
    for block in blocks(path, progress):
        yield from parser.feed(block)
    yield from parser.close()


def diagnose_files(failing: str, baseline: str | None, *, rules_dirs: Iterable[str] = (),
                   progress: Any = None) -> Diagnosis:
    """Summarise both logs and evaluate the rules: the findings ``diff`` reports."""
    rules = load_rules(rules_dirs)  # load rules first: a bad rule file fails before any parsing
    base = summarize_file(baseline, progress=progress) if baseline else None
    return evaluate(rules, summarize_file(failing, progress=progress), base)
