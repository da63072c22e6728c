"""Evaluate rules over two runs and produce findings and a verdict. No I/O here."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from jinja2 import TemplateError

from ..model.run import RunSummary
from ..model.stops import stop_place
from ..units import clip
from .bounds import BoundError
from .conclusion import Conclusion, conclude, confidence, settings_lines
from .facts import Facts, compute, plain
from .rulespec import SEVERITIES, RuleError, RuleSpec, change
from .settings import acting_after, acting_on, failed_in, independent_changes

_SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class Finding:
    """One rule that fired: what it says, why, and the log lines it rests on."""

    rule: str
    name: str
    severity: str
    title: str
    explanation: str
    evidence: tuple[dict[str, Any], ...]
    facts: dict[str, Any] = field(default_factory=dict)
    groups: tuple[str, ...] = ()
    #: ``high``, ``medium`` or ``low`` (``conclusion.confidence``: the failing log's lines it rests on)
    confidence: str = "low"
    #: a stable name for this finding (:func:`finding_id`): the same for the same input in every
    #: output and every run of the tool
    id: str = ""
    #: what to do first when this finding is the verdict's explanation (its rule's ``next_step``)
    next_step: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "rule": self.rule, "name": self.name, "severity": self.severity,
                "confidence": self.confidence,
                "title": self.title, "explanation": self.explanation, "evidence": list(self.evidence),
                "facts": self.facts, "groups": list(self.groups)}


@dataclass(frozen=True)
class Diagnosis:
    """Everything ``diff`` reports: both runs, the computed facts, the findings, a verdict."""

    baseline: RunSummary | None
    failing: RunSummary
    facts: Facts
    findings: tuple[Finding, ...]
    verdict: str
    #: the verdict in its fixed form: outcomes, what happened first, the best explanation and
    #: its confidence, what to collect, what was ruled out, the next step
    conclusion: Conclusion

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "conclusion": self.conclusion.to_dict(),
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "failing": self.failing.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "facts": plain(self.facts),
        }

    def worst(self) -> str | None:
        return min((f.severity for f in self.findings), key=_SEVERITY_RANK.__getitem__, default=None)


def env_for(failing: RunSummary, baseline: RunSummary | None, facts: Facts) -> dict[str, Any]:
    """What rules read: each summary with every record's every key (a key a record was made
    without is None, not missing: 227's logged traceback has no ``what``)."""
    return {"baseline": baseline.to_dict(full=True) if baseline else None, "failing": failing.to_dict(full=True),
            "facts": facts}


def evaluate(rules: Sequence[RuleSpec], failing: RunSummary, baseline: RunSummary | None) -> Diagnosis:
    facts = compute(failing, baseline)
    env = env_for(failing, baseline, facts)
    findings = [_located(f, failing, baseline) for f in (fire(rule, env) for rule in rules) if f is not None]
    settings = settings_lines(facts)
    findings = [replace(f, confidence=confidence(f, failing, settings), id=finding_id(f, failing, baseline))
                for f in findings]
    findings.sort(key=lambda f: _SEVERITY_RANK[f.severity])
    text = verdict(failing, baseline, facts, findings)
    return Diagnosis(baseline, failing, facts, tuple(findings), text,
                     conclude(failing, baseline, facts, findings, likely_cause(failing, baseline, facts, findings)))


def fire(rule: RuleSpec, env: dict[str, Any]) -> Finding | None:
    """The rule's finding when its condition holds, else None."""
    try:
        if not rule.when.holds(env):
            return None
        evidence = rule.evidence.evaluate(env) if rule.evidence else []
        title, explanation = rule.render(rule.title, env), rule.render(rule.explanation, env)
    except RuleError:  # the rule file itself is at fault (a template that cannot be used)
        raise
    except BoundError as exc:
        # A limit protects the command from one rule: crossed on this data, the rule is
        # left out with a warning that names it, and the rest of the diagnosis stands.
        return Finding(rule.id, rule.name, "warning", f"rule {rule.id} could not be evaluated",
                       f"{rule.source}: {exc}; the rule is left out of this diagnosis", ())
    except (TemplateError, TypeError, ValueError, AttributeError, KeyError, ArithmeticError) as exc:
        # A rule that breaks on unusual data must not take the whole diagnosis down.
        return Finding(rule.id, rule.name, "warning", f"rule {rule.id} could not be evaluated",
                       f"{rule.source}: {exc.__class__.__name__}: {exc}", ())
    try:
        step = " ".join(rule.render(rule.next_step, env).split()) if rule.next_step else None
    except RuleError:
        raise
    except (BoundError, TemplateError, TypeError, ValueError, AttributeError, KeyError, ArithmeticError):
        step = None  # the finding stands; the verdict's next step comes from elsewhere
    used = {path: _lookup(env, path) for path in sorted(rule.when.names_used)}
    return Finding(rule.id, rule.name, rule.severity, title, explanation, tuple(_evidence(evidence)), plain(used),
                   rule.groups, next_step=step or None)


def _evidence(value: Any, seen: set[tuple[Any, Any]] | None = None) -> list[dict[str, Any]]:
    """The lines a rule's evidence names, each once (its nested lists share what was seen)."""
    items = value if isinstance(value, (list, tuple)) else [value]
    out: list[dict[str, Any]] = []
    seen = set() if seen is None else seen
    for item in items:
        if isinstance(item, (list, tuple)):
            out += _evidence(item, seen)
            continue
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            item = plain(item)
        if not isinstance(item, Mapping) or item.get("line") is None:
            continue
        key = (item.get("file"), item.get("line"))
        if key in seen:
            continue
        seen.add(key)
        entry = {"file": item.get("file"), "line": item.get("line"), "rank": item.get("rank"),
                 "text": clip(item.get("text") or "", 400)}
        if item.get("node"):
            entry["node"] = item["node"]
        out.append(entry)
    return out[:24]


def finding_id(f: Finding, failing: RunSummary, baseline: RunSummary | None = None) -> str:
    """``RULE:RANK:PHASE:HASH`` (``CR01:TP5:cuda_graph_capture:3f9a1c2e``): the rule, the rank of
    the finding's first failing-side line that names one, the phase the failing run crashed in, and a hash
    of its evidence (each line's file name, number and text), so that an agent, a CI system and
    a person name the same finding alike, whatever the output and wherever the logs lie."""
    base = {baseline.file, *(n.file for n in baseline.nodes.values())} if baseline is not None else set()
    own = [e["rank"] for e in f.evidence if e.get("rank") and e.get("file") not in base]
    phase = (failing.crash.phase if failing.crash else None) or "-"
    digest = hashlib.sha256()
    for e in f.evidence:
        digest.update(f"{os.path.basename(str(e.get('file') or ''))}\0{e.get('line')}\0{e.get('text')}\n".encode())
    return f"{f.rule}:{own[0] if own else '-'}:{phase}:{digest.hexdigest()[:8]}"


def _located(f: Finding, failing: RunSummary, baseline: RunSummary | None) -> Finding:
    """Evidence of a run of several files names the node and the file each line is in
    (facts cite lines by the run, whose name is its directory)."""
    if not f.evidence or not (failing.nodes or (baseline and baseline.nodes)):
        return f
    out = []
    for e in f.evidence:
        run = baseline if baseline is not None and e.get("file") == baseline.file and e.get("file") != failing.file \
            else failing
        node = e.get("node") or next((n for n, info in run.nodes.items() if info.file == e.get("file")), None) \
            or run.rank_nodes.get(e.get("rank") or "")
        e = dict(e)
        if node:
            e["node"] = node
            info = run.nodes.get(node)
            if e.get("file") == run.file and info and info.file:
                e["file"] = info.file
        out.append(e)
    return replace(f, evidence=tuple(out))


def _lookup(env: dict[str, Any], path: str) -> Any:
    node: Any = env
    for part in path.split("."):
        if isinstance(node, Mapping):
            node = node.get(part)
        elif dataclasses.is_dataclass(node) and not isinstance(node, type) and not part.startswith("_"):
            node = getattr(node, part, None)
        else:
            return None
    node = plain(node)
    if isinstance(node, (dict, list)) and len(json.dumps(node, default=str)) > 2000:
        return "(large value omitted)"
    return node


def _comparable(baseline: RunSummary | None, facts: Facts) -> bool:
    """Whether a difference from the baseline may explain the failure: the same setup, and a
    baseline that worked."""
    return baseline is not None and not facts.setup.differs and baseline.outcome == "ready"


def _among_others(facts: Facts) -> bool:
    """Whether more than one setting changed (one SGLang derives from another is no change of
    its own): then that a setting acts on the failing phase does not tell which change matters
    (two that both act on it are two candidates, real-pairs 022)."""
    return independent_changes(facts.config.changed_keys, facts.config.set_by_server) > 1


def likely_cause(failing: RunSummary, baseline: RunSummary | None, facts: Facts,
                 findings: Sequence[Finding]) -> Finding | None:
    """The finding the verdict names as the likely cause (``verdict``'s rules), or None."""
    comparable = _comparable(baseline, facts)
    several = _among_others(facts)
    first_error = next((f for f in findings if "scope" not in f.groups and f.severity == "error"), None)
    if first_error is None:
        return None
    return next((f for f in findings if "cause" in f.groups and f.severity in ("error", "warning")
                 and f is not first_error and any(e.get("file") == failing.file for e in f.evidence)
                 and (comparable or "compares" not in f.groups) and not (several and "setting" in f.groups)), None)


def _where_it_stops(run: RunSummary) -> str:
    """For a log that just stops: the line, and the furthest phase a rank reached there, or
    after which phase's end line and before which phase it stops (``model.stops``)."""
    if run.outcome != "incomplete":
        return ""
    if run.stopped is not None:  # it did not just stop: it was stopped
        place = stop_place(run, cite_file=True)
        return f" (stopped at line {run.stopped.line}, before readiness" + (f", {place}" if place else "") + ")"
    last = run.coverage.lines_read
    where = f"at line {last}" if last else ""
    said = ", ".join(x for x in (where, stop_place(run, cite_file=True)) if x)
    return f" (the log stops {said})" if said else ""


def _and(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c`` (four at most, then "and others")."""
    shown = list(names[:4])
    if len(names) > 4:
        return ", ".join(shown) + " and others"
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _may_matter(failing: RunSummary, facts: Facts) -> str:
    """The changed settings, none named a cause: with where the failing run failed (or its log
    stops) where some act on that phase, else that nothing in the failing log ties them to it."""
    keys = facts.config.changed_keys
    diffs = {**facts.config.server_args, **facts.config.env}
    listed = [f"{k} {change(diffs[k].baseline, diffs[k].failing)}" for k in keys[:6] if k in diffs]
    more = f" and {len(keys) - 6} more" if len(keys) > 6 else ""
    phase = failed_in(failing)
    acting = [k for k in keys if acting_on(k, phase)]
    where = "stops" if failing.outcome == "incomplete" else "failed"
    if acting:
        names = _and(acting)
        why = (f"the failing run {where} in {phase}, which {names} {'acts' if len(acting) == 1 else 'act'} on; "
               "its log says no more")
    elif all(acting_after(k, phase) for k in keys):
        return (f"changed, acting only after {phase}, where the failing run {where}: " + ", ".join(listed) + more)
    else:
        why = f"nothing in the failing log ties {'it' if len(keys) == 1 else 'one of them'} to the failure"
    return f"changed, and may matter ({why}): " + ", ".join(listed) + more


def verdict(failing: RunSummary, baseline: RunSummary | None, facts: Facts, findings: list[Finding]) -> str:
    """One sentence: the outcomes, what limits the comparison, the first error, its likely cause.

    What differs besides the settings comes first (the environment: versions, GPUs,
    topology, allocation, from the files beside the logs), then the comparison's limits
    (not the same setup; a baseline that never reached ready). A likely cause is only a "cause" finding that cites a line of the failing log;
    one that rests on a difference from the baseline ("compares") is not named when the
    baseline is another setup or did not work itself, and one that rests on a changed
    setting alone ("setting": it acts on the phase that failed) only when it is the one setting
    that changed: among other changes, nothing on the failing side tells one from the others,
    so they are listed with equal weight ("changed, and may matter").
    """
    stops = _where_it_stops(failing)
    head = f"run {failing.outcome}{stops}"  # one log: nothing says it failed
    limits: list[str] = []
    if baseline is not None:
        head = f"baseline {baseline.outcome}, failing {failing.outcome}{stops}"
        if facts.environment.differs:  # what differs besides the settings, first
            limits.append("the environment differs (" + facts.environment.words() + ")")
        if facts.versions.suspects:  # settings nobody changed, whose defaults did
            limits.append(f"SGLang's declared defaults changed ({facts.versions.names}) for "
                          f"{len(facts.versions.suspects)} setting(s) the failing run left at its default: "
                          + facts.versions.words(4))
        if facts.setup.differs:
            limits.append(facts.setup.words())
        if facts.same_crash:
            limits.append("both runs crashed the same way (no change between them)")
        elif baseline.outcome != "ready":
            limits.append(f"the baseline itself did not reach ready ({baseline.outcome})")
    comparable = _comparable(baseline, facts)
    headline = [f for f in findings if "scope" not in f.groups]  # the limits are said above
    errors = [f for f in headline if f.severity == "error"]
    warnings = [f for f in headline if f.severity == "warning"]
    several = _among_others(facts)
    cause = likely_cause(failing, baseline, facts, findings)
    may_matter = ""
    if comparable and cause is None and facts.config.changed_keys and failing.outcome != "ready":
        # changes that nothing names the cause of the failure: said with equal weight, each one
        may_matter = "; " + _may_matter(failing, facts)
    if limits:
        head += ": " + "; ".join(limits)
    sep = "; " if limits else ": "
    builds = ""
    if comparable and not facts.config.changed and facts.config.build_fields and failing.outcome != "ready":
        fields = facts.config.build_fields
        builds = ("; no setting differs; the builds differ (server_args fields one build has and the other lacks: "
                  + ", ".join(fields[:4]) + (f" and {len(fields) - 4} more" if len(fields) > 4 else "") + ")")
    if errors:
        return f"{head}{sep}{errors[0].title}" + (f"; likely cause: {cause.title}" if cause else may_matter or builds)
    if warnings:
        first = next((w for w in warnings if not (several and "setting" in w.groups)), None)
        if first is None:
            return f"{head}{sep}{may_matter[2:]}"
        return f"{head}{sep}{first.title}" + may_matter
    notes = len(findings)
    return f"{head}{sep}no differences that a rule flags" + (f" ({notes} note{'s' * (notes > 1)})" if notes else "")
