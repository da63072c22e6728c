"""The verdict's contract: what a diagnosis concludes, how sure it is, and what it ruled out.

Triage ends in a fixed form whatever the failure (SGLang's maintainers ask for the same):
the outcome of each run; what happened first (rank, phase, record); the best explanation
with its confidence, or "cannot tell from these logs" and what to collect next; what was
ruled out (each thing compared, and found equal, different, or not comparable because a
side lacks it); the next step. :func:`conclude` fills it from the facts and the findings,
so the terminal, the HTML report, the JSON and the bundle say the same.

A finding's confidence counts the independent lines of the failing log it rests on, the
settings dumps not counted: two or more is ``high``, one ``medium``, none ``low``. A
finding that rests on a changed setting alone (the group ``setting``: the phase it acts on
is where the run failed) is ``low`` whatever it cites, as nothing in the log ties the
setting to the failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..events import LAUNCH
from ..model.beside import END_RECORD, process_ended, stops_unexplained
from ..model.failures import CPP_RAISED_SOURCE, HEADERLESS_DUMP_COLLECT, RUNPY_SOURCE, headerless_dump
from ..model.nodes import nnodes
from ..model.phases import importing, launch_step, where_failed
from ..model.records import Cite
from ..model.run import RunSummary
from ..model.stops import stop_place
from ..units import clip
from .facts import Facts
from .settings import ACTS_ON, acting_after, failed_in
from .sides import same_checkpoint

if TYPE_CHECKING:
    from .engine import Finding

CONFIDENCES = ("high", "medium", "low")


@dataclass(frozen=True)
class Check:
    """One thing the diagnosis compared between the runs, and what it found."""

    what: str
    #: ``equal``, ``differs`` or ``not comparable`` (a side lacks what it takes)
    status: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"what": self.what, "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class Conclusion:
    """The verdict in its fixed form (see the module's docstring)."""

    #: each run's outcome, by side ("baseline", "failing")
    outcomes: Mapping[str, str]
    #: what happened first in the failing run, with its line; None when nothing failed
    first: str | None
    #: the best explanation (a finding's title), None: cannot tell from these logs
    explanation: str | None
    #: the explanation's confidence (``high``, ``medium``, ``low``), None without one
    confidence: str | None
    #: the rule of the explanation
    rule: str | None
    #: what to collect to tell more, when the logs do not
    collect: tuple[str, ...]
    ruled_out: tuple[Check, ...]
    next_step: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"outcomes": dict(self.outcomes), "first": self.first,
                "explanation": self.explanation or "cannot tell from these logs", "confidence": self.confidence,
                "rule": self.rule, "collect": list(self.collect), "ruled_out": [c.to_dict() for c in self.ruled_out],
                "next_step": self.next_step}

    def lines(self) -> list[str]:
        """The contract as short lines of text (terminal, bundle)."""
        out = ["outcome: " + ", ".join(f"{side} {o}" for side, o in self.outcomes.items())]
        if self.first:
            out.append(f"first: {self.first}")
        if self.explanation:
            out.append(f"best explanation ({self.confidence} confidence): {self.explanation}")
        else:
            out.append("best explanation: cannot tell from these logs")
        if self.collect:
            out.append("collect next: " + "; ".join(self.collect))
        for c in self.ruled_out:
            out.append(f"checked {c.what}: {c.status}" + (f" ({c.detail})" if c.detail else ""))
        if self.next_step:
            out.append(f"next step: {self.next_step}")
        return out


def confidence(finding: Finding, failing: RunSummary, settings_lines: Iterable[tuple[Any, Any]]) -> str:
    """How sure a finding is, from the lines of the failing log it cites (module docstring)."""
    if "setting" in finding.groups:
        return "low"
    skip = set(settings_lines)
    own = {e.get("line") for e in finding.evidence
           if e.get("file") == failing.file and (e.get("file"), e.get("line")) not in skip}
    return "high" if len(own) >= 2 else "medium" if own else "low"


def settings_lines(facts: Facts) -> set[tuple[Any, Any]]:
    """(file, line) of the settings dumps the comparison read: not evidence of a failure."""
    return {(e.file, e.line) for e in facts.config.evidence}


def conclude(failing: RunSummary, baseline: RunSummary | None, facts: Facts, findings: Sequence[Finding],
             explanation: Finding | None) -> Conclusion:
    """The verdict's contract for one diagnosis; ``explanation`` is the cause the verdict names."""
    outcomes = {"failing": failing.outcome} if baseline is None else {"baseline": baseline.outcome,
                                                                      "failing": failing.outcome}
    first = _first(failing, findings)
    conf = confidence(explanation, failing, settings_lines(facts)) if explanation is not None else None
    collect = () if explanation is not None and conf != "low" else _collect(failing, facts)
    checks = _checks(failing, baseline, facts) if baseline is not None else ()
    return Conclusion(outcomes, first, explanation.title if explanation else None, conf,
                      explanation.rule if explanation else None, collect, checks,
                      _next_step(failing, facts, explanation, collect))


def _first(failing: RunSummary, findings: Sequence[Finding]) -> str | None:
    crash = failing.crash
    top = next((f for f in findings if f.severity == "error"), None)
    if failing.outcome == "crashed" and crash is not None and top is not None and "failed first" in top.title:
        return f"{top.title} ({crash.file}:{crash.line})"  # the crash rule's words: rank, phase, what
    if failing.outcome == "crashed" and crash is not None:
        who = "the launcher" if crash.phase == LAUNCH else crash.first_rank or "an unknown rank"
        where = f" {where_failed(crash.phase, crash.frames)}" if crash.phase else ""
        what = crash.exception or (crash.message or "a failure whose record is not in this log")
        return f"{who} failed first{where}: {clip(str(what), 160)} ({crash.file}:{crash.line})"
    if failing.outcome == "hung" and failing.hang is not None:
        ev = failing.hang.evidence[0] if failing.hang.evidence else Cite()
        where = f" ({ev.file}:{ev.line})" if ev.line else ""
        return "hang: " + clip(str(ev.text or failing.outcome_reason), 160) + where
    return top.title if top is not None else None


#: Aspects of the setup that ``python -m sglang.check_env`` prints and a log may not, with
#: the environment fact (``diagnose.environment``) that shows each beside the logs.
ENVIRONMENT_ASPECTS = {"GPU": "GPU", "SGLang version": "SGLang"}


def _collect(failing: RunSummary, facts: Facts) -> tuple[str, ...]:
    """What would tell more than these logs: by what the failing log lacks, and only what
    its phase allows. A launcher that failed parsing its arguments started nothing: its
    command line is what tells more. SGLang writes a crash dump (the requests of the last
    minutes, ``--crash-dump-folder``) only once it serves, so it is asked for a failure
    while serving only."""
    out: list[str] = []
    crash = failing.crash
    routers = [n for n in failing.nodes.values() if n.role == "router"]
    if failing.outcome == "incomplete" and routers and len(failing.nodes) == 1 and not failing.ranks:
        out.append("the logs of the servers behind the router: this one is the router's alone")
    elif failing.outcome == "incomplete" and failing.stopped is None:  # (a stopped run ended: no rest to collect)
        place = stop_place(failing, cite_file=True)
        if process_ended(failing) is None:  # (a process that ended in the log: only why is missing)
            out.append(f"the rest of the log (it stops at line {failing.coverage.lines_read or '?'} "
                       "without readiness or failure" + (f", {place}" if place else "") + ")")
        if stops_unexplained(failing):  # a log that just stops: killed?
            out.append(END_RECORD)
    if failing.outcome == "crashed" and crash is not None and headerless_dump(crash.source, crash.exception):
        out.append(HEADERLESS_DUMP_COLLECT)
    elif failing.outcome == "crashed" and crash is not None and crash.source == CPP_RAISED_SOURCE \
            and not crash.exception:  # (a Python exception after it is what became of it)
        out.append("the full log: what became of the C++ exception (a Python exception line, the process's end) "
                   "is not in this one")
    elif failing.outcome == "crashed" and crash is not None and not crash.exception and not crash.native:
        out.append("the full log: the failure's own record (the traceback's exception) is not in this one")
    if (failing.missing_ranks or facts.nodes.missing_ranks) and nnodes(failing) != 1:
        # (one node: its ranks write to this log; those it does not show printed nothing here)
        ranks = list(failing.missing_ranks or facts.nodes.missing_ranks)
        out.append("the logs of the ranks this one does not show (" + ", ".join(ranks[:6])
                   + (", ..." if len(ranks) > 6 else "") + "): the other node's log")
    if failing.outcome == "hung":
        out += [s.setting + (f" ({s.why})" if s.why else "") for s in facts.timer.next_steps[:3]]
        if not facts.timer.next_steps:
            out.append("NCCL_DEBUG=INFO")
            if not (failing.hang and failing.hang.pyspy):  # not what the log already has
                out.append("a py-spy dump of every scheduler (py-spy dump --pid N)")
    elif failing.outcome == "crashed" and crash is not None and crash.source == RUNPY_SOURCE:
        out.append("the Python the command ran and what it has installed (which python; python -m pip show "
                   "sglang, in the environment the command ran in): it could not find the module to run")
    elif failing.outcome == "crashed" and crash is not None and crash.phase == LAUNCH:
        # nothing had started: no rank's log, no server_args line, no crash dump
        out.append(f"the launch command: the launcher failed {launch_step(crash.frames)}, "
                   "before it printed the server arguments (server_args) or started any rank")
    elif failing.outcome == "crashed" and crash is not None and crash.phase == "serving":
        # SGLang writes a crash dump (the requests of its last minutes) only once it serves
        out.append("the crash dump folder, where --crash-dump-folder was set")
    # a launcher that failed parsing its arguments or importing its code printed no settings yet
    launched = crash is None or crash.phase != LAUNCH and not importing(crash.frames)
    if launched and not failing.server_args and not failing.launch_command:
        out.append("the start of the log (server_args): the settings are not in this one")
    env = facts.environment
    shown = {*env.same, *(d.label for d in env.differs)}  # by the files beside both runs' logs
    unseen = [u for u in facts.setup.unknown if u in ENVIRONMENT_ASPECTS and ENVIRONMENT_ASPECTS[u] not in shown]
    if unseen:  # what SGLang's bug reports ask for, and the comparison lacks
        out.append("the output of python -m sglang.check_env on each run's machine: not both logs show the "
                   + " or the ".join(unseen))
    return tuple(dict.fromkeys(out))


def _checks(failing: RunSummary, baseline: RunSummary, facts: Facts) -> tuple[Check, ...]:
    """Each thing compared between the runs, and what was found."""
    s, c, m = facts.setup, facts.config, facts.memory
    checks = [_environment_check(facts), *_defaults_check(facts)]
    if s.differs:
        checks.append(Check("setup", "differs", "; ".join(f"{d.label} {d.baseline} vs {d.failing}" for d in s.differs)))
    elif s.same:
        checks.append(Check("setup", "equal", ", ".join(s.same)
                            + (f"; not in both logs: {', '.join(s.unknown)}" if s.unknown else "")))
    else:
        checks.append(Check("setup", "not comparable", "not in both logs: " + ", ".join(s.unknown)))
    if c.not_compared and not c.changed:
        checks.append(Check("settings", "not comparable", c.not_compared))
    elif c.changed:
        checks.append(Check("settings", "differs", ", ".join(c.changed_keys[:8])
                            + (", ..." if len(c.changed_keys) > 8 else "")))
    else:
        checks.append(Check("settings", "equal", "every setting both logs show"))
    if c.build_fields:
        checks.append(Check("build", "differs", "server_args fields one build has and the other lacks: "
                            + ", ".join(c.build_fields[:6]) + (", ..." if len(c.build_fields) > 6 else "")))
    # the figures the logs measured (a setting among the terms is compared with the settings)
    both = [t for t in facts.budget_terms if t.baseline is not None and t.failing is not None
            and t.term not in ACTS_ON]
    if not both:
        checks.append(Check("memory budget", "not comparable", "a log lacks the memory lines of the start-up"))
    elif facts.budget_moved:
        checks.append(Check("memory budget", "differs", "moved: " + ", ".join(facts.budget_moved_terms)))
    else:
        checks.append(Check("memory budget", "equal", "no term both logs show moved: "
                            + ", ".join(t.term for t in both)))
    kv = [d for row in m.ranks.values() for k, d in row.items() if k in ("kv_tokens", "kv_gib")]
    if not kv:
        checks.append(Check("KV pool", "not comparable", "a log lacks the KV cache lines"))
    else:
        moved = [d for d in m.changed if d.figure in ("kv_tokens", "kv_gib")]
        checks.append(Check("KV pool", "differs" if moved else "equal",
                            "; ".join(f"{d.rank} {d.figure} {d.baseline} -> {d.failing}" for d in moved[:4])
                            or "same size on every rank both logs show"))
    n = facts.nodes
    if n.count > 1:
        odd = len(n.behind) + len(n.moved) + len(n.missing_ranks)
        checks.append(Check("nodes", "differs" if odd else "equal",
                            f"{n.count} files" + (f"; ranks missing: {', '.join(n.missing_ranks[:6])}"
                                                   if n.missing_ranks else "")))
    return tuple(checks)


def _environment_check(facts: Facts) -> Check:
    e = facts.environment
    if e.differs:
        return Check("environment", "differs", e.words(8))
    if e.compared:
        return Check("environment", "equal", ", ".join(e.same) + (f"; shown by one side only: {', '.join(e.one_side)}"
                                                                  if e.one_side else ""))
    return Check("environment", "not comparable", "a run has no environment beside its logs (check_env, "
                 "nvidia-smi, pip freeze) and its log prints no version"
                 + (f"; the other shows {', '.join(e.one_side)}" if e.one_side else ""))


def _defaults_check(facts: Facts) -> list[Check]:
    """The declared defaults that changed between the two runs' SGLang versions, when they differ."""
    v = facts.versions
    if v.status == "not in the table":
        return [Check("version defaults", "not comparable", f"SGLang {v.names}: {', '.join(v.missing)} not in the "
                      f"table of declared defaults (it has {', '.join(v.known)})")]
    if v.status != "compared":
        return []
    if not v.changed:
        return [Check("version defaults", "equal", f"SGLang {v.names}: no declared default differs")]
    cleared = len(v.changed) - len(v.suspects)
    said = (f"{len(v.suspects)} the failing run took: {v.words(8)}" if v.suspects
            else "the failing run took none of them")
    return [Check("version defaults", "differs", f"SGLang {v.names}: {len(v.changed)} declared default(s) changed; "
                  + said + (f"; {cleared} set on its command line or equal in both logs" if cleared else ""))]


def _next_step(failing: RunSummary, facts: Facts, explanation: Finding | None, collect: Sequence[str]) -> str | None:
    if explanation is not None and explanation.next_step:  # the explanation says what to undo first
        return explanation.next_step
    advice = facts.budget.advice
    if explanation is not None and failing.outcome == "crashed" and advice.settings:
        return "try " + " or ".join(f"--{k.replace('_', '-')} {v}" for k, v in advice.settings.items())
    if failing.outcome == "hung" and facts.timer.next_steps:
        return facts.timer.next_steps[0].setting
    if facts.config.changed and (explanation is None or "setting" in explanation.groups):
        if facts.setup.differs:
            return _other_setup_step(facts)
        keys = [k for k in facts.config.changed_keys if not _moved_checkpoint(facts, k)]
        if not keys:  # the same checkpoint read from another directory: no setting to set back
            return "collect " + collect[0] if collect else None
        listed = ", ".join(keys[:6]) + (", ..." if len(keys) > 6 else "")
        phase = failed_in(failing)
        if explanation is None and all(acting_after(k, phase) for k in keys):
            return (f"the changed settings ({listed}) act only after {phase}, where the failing run "
                    f"{'stops' if failing.outcome == 'incomplete' else 'failed'}: look for what else differs between "
                    "the runs (the build and its patches, the environment: pip freeze, python -m sglang.check_env)")
        if explanation is None and _builds_differ(facts):
            return ("the builds differ and nothing in the failing log ties a changed setting to the failure (a build "
                    f"may change its defaults): run the failing build with the baseline's values of {listed}, or the "
                    "baseline's build with the failing run's, to tell the build from the settings")
        return "set back the changed settings one at a time to find the one that matters: " + listed
    if collect:
        return "collect " + collect[0]
    return None


def _moved_checkpoint(facts: Facts, key: str) -> bool:
    """Whether a changed setting is the same checkpoint's path under another directory (its last
    part the same: ``model_path``, and ``tokenizer_path`` and ``served_model_name`` that follow
    it): the same model read from elsewhere, no value to set back."""
    d = facts.config.server_args.get(key)
    if d is None or not isinstance(d.baseline, str) or not isinstance(d.failing, str) \
            or "/" not in d.baseline or "/" not in d.failing:
        return False
    return same_checkpoint(d.baseline, d.failing)


def _builds_differ(facts: Facts) -> bool:
    """Whether the two runs ran different SGLang builds: their versions differ, or one's
    server_args has fields the other's lacks."""
    return bool(facts.config.build_fields) or facts.versions.status in ("compared", "not in the table")


def _other_setup_step(facts: Facts) -> str:
    """The next step when the runs are not the same setup (another model, TP size, ...): that
    is no setting to set back, and a difference between the runs may come from it, so the
    failing setup is compared with a working run of its own; the settings that changed
    besides it (not those that changed with it, as ``tokenizer_path`` follows ``model_path``)
    are what to try on the failing setup."""
    differs = facts.setup.differs
    moved = {(str(d.baseline), str(d.failing)) for d in differs}
    follows = {d.key for d in differs} | {k for k, d in facts.config.server_args.items()
                                          if (str(d.baseline), str(d.failing)) in moved}
    others = [k for k in facts.config.changed_keys if k not in follows and k not in facts.config.set_by_server]
    what = " and the ".join(d.label for d in differs)
    step = (f"the runs differ in the {what}, so no setting difference can be compared as the cause: "
            f"compare the failing run with a working run of the same {what}")
    if others:
        step += ("; on the failing setup, try the baseline's value of the other changed settings: "
                 + ", ".join(others[:6]) + (", ..." if len(others) > 6 else ""))
    return step
