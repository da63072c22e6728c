"""Declarative diff rules: one YAML file per rule, validated strictly when loaded.

A rule has a stable ``id`` (``CR01``), a dotted ``name``, a ``severity``, a ``when``
condition (a Jinja2 expression, see :mod:`.condition`), ``title`` and ``explanation``
templates (Jinja2's sandbox, both bounded by :mod:`.bounds`),
an ``evidence`` expression that yields evidence entries, and ``examples``: a failing
and a passing pair of log snippets that the test suite runs. Unknown keys, unknown
names and unparsable expressions fail at load time with the file name, never in the
middle of a diff.

Names a rule can read: ``baseline`` and ``failing`` (the run summaries, as
``summary --json`` prints them; ``baseline`` is null for a single-run diagnosis) and
``facts`` (computed in ``logforensics/diagnose/facts.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from os.path import commonprefix
from pathlib import Path
from typing import Any

import yaml
from jinja2 import StrictUndefined, Template, TemplateSyntaxError
from jinja2.sandbox import SandboxedEnvironment

from ..units import clip, gib
from .bounds import (
    MAX_RULE_BYTES,
    MAX_RULE_FILES,
    BoundedSandbox,
    BoundError,
    check_template,
    check_yaml_nesting,
    render_bounded,
)
from .compiled import template as cached_template
from .compiled import use_cache
from .condition import Condition, ConditionError, compile_condition

NAMES = frozenset({"baseline", "failing", "facts"})
SEVERITIES = ("error", "warning", "info")
_ID = re.compile(r"^[A-Z]{2,4}\d{2}$")
_KEYS = {"id", "name", "severity", "title", "when", "explanation", "evidence", "priority",
         "examples", "summary", "groups", "next_step"}
_REQUIRED = {"id", "name", "severity", "title", "when", "explanation", "examples"}


class RuleError(ValueError):
    """A rule file that cannot be used; the message names the file and the problem."""


def short(value: Any) -> str:
    """A setting's value for a title: long lists shortened to their ends and length."""
    if value is None:
        return "not set"
    if isinstance(value, list) and len(value) > 6:
        return f"[{value[0]}, {value[1]}, ..., {value[-1]}] ({len(value)} values)"
    return str(value)


def change(before: Any, after: Any, room: int = 64) -> str:
    """A setting's change for a title, ``before -> after``: values longer than ``room`` characters
    (a structured setting's repr, ``CudaGraphConfig(decode=PhaseConfig(...), ...)``) shown from a
    little before the first character where they differ, each cut alike, with "…" where cut."""
    a, b = short(before), short(after)
    if len(a) <= room and len(b) <= room:
        return f"{a} -> {b}"
    start = max(0, len(commonprefix([a, b])) - 16)

    def cut(text: str) -> str:
        return ("…" if start else "") + text[start:start + room] + ("…" if start + room < len(text) else "")
    return f"{cut(a)} -> {cut(b)}"


def who(rank: Any) -> str:
    """A rank label for prose: ``-`` is the process of lines that name no rank (SGLang's scheduler
    with one GPU, but also its launcher, other builds and logs whose prefixes were lost: which
    one the lines do not say), None an unknown process."""
    if rank is None:
        return "an unlabelled process"
    return "a process no line names" if rank == "-" else str(rank)


def _fmt_num(value: Any, digits: int = 2) -> str:
    return "?" if value is None else f"{float(value):.{digits}f}"


def _figure(value: Any, key_or_unit: str = "", digits: int = 2) -> str:
    """A figure by its key (``kv_gib``) or unit (``GiB``): memory through the GiB/MiB formatter."""
    if key_or_unit.endswith("_gib") or key_or_unit == "GiB":
        return gib(value)
    if value is None:
        return "?"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.{digits}f}" + (" s" if key_or_unit.endswith("_s") else "")
    return str(int(value) if isinstance(value, float) else value) + (" s" if key_or_unit.endswith("_s") else "")


def template_env() -> SandboxedEnvironment:
    env = BoundedSandbox(undefined=StrictUndefined, autoescape=False, trim_blocks=False, lstrip_blocks=True)
    env.add_filter("gib", gib)
    env.add_filter("num", _fmt_num)
    env.add_filter("fig", _figure)
    env.add_filter("ranks", lambda xs: ", ".join(str(x) for x in (xs or [])) or "none")
    env.add_filter("who", who)
    env.add_filter("short", short)
    env.add_filter("change", change)  # {{ d.baseline|change(d.failing) }}
    env.add_filter("clip", lambda text, limit: clip(str(text or ""), int(limit)))  # a quote cut says so ("…")
    use_cache(env, "rule")
    return env


_TEMPLATES = template_env()


@dataclass(frozen=True)
class RuleSpec:
    """A loaded, validated rule."""

    id: str
    name: str
    severity: str
    title: str
    explanation: str
    when: Condition
    evidence: Condition | None
    priority: int
    examples: dict[str, Any]
    source: str
    summary: str = ""
    groups: tuple[str, ...] = field(default_factory=tuple)
    compiled: dict[str, Template] = field(default_factory=dict, compare=False, repr=False)
    #: what to do first when this finding is the verdict's explanation (a template; "" for none:
    #: the verdict's next step then comes from the memory budget or the settings that changed)
    next_step: str = ""

    def render(self, template: str, env: dict[str, Any]) -> str:
        """Render the title or explanation (compiled once, at load: watch renders on a crash)."""
        compiled = self.compiled.get(template)
        if compiled is None:
            try:
                check_template(_TEMPLATES, template)
            except BoundError as exc:  # the rule file's text: refused, as at load
                raise RuleError(f"{self.source}: {exc}") from None
            compiled = self.compiled[template] = cached_template(_TEMPLATES, template)
        # a limit crossed while rendering is this data's: BoundError, for the engine to report
        return render_bounded(compiled, env, self.source).strip()


#: libyaml's loader where PyYAML was built with it (the same safe constructors, ten times faster).
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_rule_text(text: str, source: str, *, templates: bool = True) -> RuleSpec:
    """One rule from its YAML text, validated. ``templates=False`` leaves checking and
    compiling its title and explanation to their first rendering (``RuleSpec.render``):
    for the built-in rules, whose templates the tests render, when few rules will fire."""
    if len(text) > MAX_RULE_BYTES:
        raise RuleError(f"{source}: too large ({len(text)} characters; a rule file holds at most {MAX_RULE_BYTES})")
    try:
        check_yaml_nesting(text)
        data = yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 - a safe loader
    except BoundError as exc:
        raise RuleError(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        raise RuleError(f"{source}: not valid YAML ({exc.__class__.__name__})") from None
    if not isinstance(data, dict):
        raise RuleError(f"{source}: a rule file holds one mapping")
    unknown = set(data) - _KEYS
    if unknown:
        raise RuleError(f"{source}: unknown key(s) {', '.join(sorted(unknown))}")
    missing = _REQUIRED - set(data)
    if missing:
        raise RuleError(f"{source}: missing key(s) {', '.join(sorted(missing))}")
    rid = str(data["id"])
    if not _ID.match(rid):
        raise RuleError(f"{source}: id {rid!r} must look like CR01 (2-4 capitals, 2 digits)")
    if data["severity"] not in SEVERITIES:
        raise RuleError(f"{source}: severity must be one of {', '.join(SEVERITIES)}")
    try:
        key = "when"
        when = compile_condition(str(data["when"]), names=NAMES)
        key = "evidence"
        evidence = compile_condition(str(data["evidence"]), names=NAMES) if data.get("evidence") else None
    except ConditionError as exc:
        raise RuleError(f"{source}: {key}: {exc}") from None
    compiled: dict[str, Template] = {}
    for key in ("title", "explanation", *(("next_step",) if data.get("next_step") else ())) if templates else ():
        try:
            check_template(_TEMPLATES, str(data[key]), f"{key} template")
            compiled[str(data[key])] = cached_template(_TEMPLATES, str(data[key]))
        except BoundError as exc:
            raise RuleError(f"{source}: {exc}") from None
        except TemplateSyntaxError as exc:
            raise RuleError(f"{source}: {key} template: {exc.message} (line {exc.lineno})") from None
    examples = data["examples"]
    if not isinstance(examples, dict) or not {"fail", "pass"} <= set(examples):
        raise RuleError(f"{source}: examples needs a 'fail' and a 'pass' case")
    for case in ("fail", "pass"):
        if not isinstance(examples[case], dict) or "failing" not in examples[case]:
            raise RuleError(f"{source}: examples.{case} needs a 'failing' log (and optionally 'baseline')")
    return RuleSpec(rid, str(data["name"]), data["severity"], str(data["title"]), str(data["explanation"]),
                    when, evidence, int(data.get("priority", 50)), examples, source,
                    str(data.get("summary", "")), tuple(data.get("groups") or ()), compiled,
                    str(data.get("next_step") or ""))


def _read_rule_file(f: Path) -> str:
    """A user's rule file, refused by its size before it is read."""
    try:
        size = f.stat().st_size
        if size > MAX_RULE_BYTES:
            raise RuleError(f"{f}: too large ({size} bytes; a rule file holds at most {MAX_RULE_BYTES})")
        with f.open(encoding="utf-8") as fh:
            return fh.read(MAX_RULE_BYTES + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"{f}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None


def _builtin_files() -> Iterable[tuple[str, str]]:
    root = resources.files("logforensics.rules")
    stack = [root]
    while stack:
        node = stack.pop()
        for child in node.iterdir():
            if child.is_dir():
                stack.append(child)
            elif child.name.endswith((".yml", ".yaml")):
                yield f"rules/{child.name}", child.read_text(encoding="utf-8")


def load_rules(extra_dirs: Iterable[str | Path] = (), *, builtin: bool = True,
               eager: bool = True) -> list[RuleSpec]:
    """Built-in rules plus every ``*.yml`` under ``extra_dirs`` (a user's own rules).

    ``eager=False``: the built-in rules' templates are compiled when first rendered (a
    one-shot ``diff`` renders a few); a user's rules are always checked whole at load."""
    rules: list[RuleSpec] = []
    if builtin:
        rules += [load_rule_text(text, src, templates=eager) for src, text in _builtin_files()]
    for d in extra_dirs:
        path = Path(d)
        if not path.is_dir():
            raise RuleError(f"{path}: --rules needs a directory of *.yml rule files")
        files = sorted(path.rglob("*.y*ml"))
        if len(files) > MAX_RULE_FILES:
            raise RuleError(f"{path}: {len(files)} rule files; at most {MAX_RULE_FILES} are read")
        for f in files:
            rules.append(load_rule_text(_read_rule_file(f), str(f)))
    seen: dict[str, str] = {}
    for r in rules:
        if r.id in seen:
            raise RuleError(f"{r.source}: rule id {r.id} is already used by {seen[r.id]}")
        seen[r.id] = r.source
    return sorted(rules, key=lambda r: (r.priority, r.id))
