"""One commit's answer for ``git bisect run``: good (0), bad (1) or cannot tell (125).

A bisection over SGLang commits runs the user's command (which starts the server, sends it
work and leaves a log), then asks of the log one question: does the failure under search
show, a rule (``CR01``) or a finding id or its prefix (``CR01:TP5``,
``OM01:TP3:cuda_graph_capture``)? Bad when a finding matches. Good only when none does and the
run reached ready: a run that stopped early (the log just stops) or failed another way has not
shown whether this commit has the failure, and ``git bisect`` skips a commit that says 125.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .diagnose.engine import evaluate
from .diagnose.rulespec import RuleSpec
from .pipeline import InputError, summarize_run

GOOD, BAD, SKIP = 0, 1, 125


@dataclass(frozen=True)
class Answer:
    """The exit code for ``git bisect run`` and the line that says why."""

    code: int
    reason: str


def matches(finding_id: str, wanted: str) -> bool:
    """Whether a finding's id is ``wanted``: a rule, or the id's first parts."""
    parts, want = finding_id.split(":"), wanted.split(":")
    return parts[:len(want)] == want


def judge(logs: Sequence[str], wanted: str, rules: Sequence[RuleSpec]) -> Answer:
    """The answer for the run in ``logs`` (files, a directory or globs) to the failure ``wanted``."""
    try:
        summary = summarize_run(list(logs))
    except InputError as e:
        return Answer(SKIP, f"cannot tell: {e}")
    d = evaluate(list(rules), summary, None)
    hit = next((f for f in d.findings if matches(f.id, wanted)), None)
    if hit is not None:
        where = next((f"{e.get('file')}:{e.get('line')}" for e in hit.evidence if e.get("line")), "")
        return Answer(BAD, f"bad: {hit.id}: {hit.title}" + (f" ({where})" if where else ""))
    if summary.outcome == "ready":
        return Answer(GOOD, f"good: no {wanted} finding, and the run reached ready ({summary.outcome_reason})")
    return Answer(SKIP, f"cannot tell: no {wanted} finding, but the run is {summary.outcome} "
                        f"({summary.outcome_reason})")
