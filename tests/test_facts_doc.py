"""docs/rules.md lists every fact rules can read, and every fact and summary key a rule reads exists."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path

from logforensics.diagnose.factdoc import BEGIN, END, reference, rewrite
from logforensics.diagnose.facts import Facts
from logforensics.model.records import Keyed, record_fields
from logforensics.model.summary import JSON_KEYS, RunSummary

ROOT = Path(__file__).resolve().parent.parent


def test_docs_list_every_fact_of_the_dataclasses() -> None:
    text = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    assert BEGIN in text and END in text
    assert rewrite(text) == text, "docs/rules.md is out of date: python -m logforensics.diagnose.factdoc docs/rules.md"
    for f in dataclasses.fields(Facts):
        assert f"`facts.{f.name}`" in reference()


def _resolves(path: list[str]) -> bool:
    """Whether ``facts.a.b.c`` names fields all the way (a mapping or a list ends the check)."""
    hint: typing.Any = Facts
    for name in path:
        while typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        if not (isinstance(hint, type) and dataclasses.is_dataclass(hint)):
            return True  # a mapping, a list or a plain value: keys and methods are not fields
        hints = typing.get_type_hints(hint)
        if name not in hints:
            return False
        hint = hints[name]
    return True


def test_every_fact_a_rule_reads_exists() -> None:
    used = set()
    for rule in (ROOT / "rules").rglob("*.yml"):
        text = rule.read_text(encoding="utf-8").split("\nexamples:")[0]
        used |= {m for m in re.findall(r"\bfacts\.([A-Za-z_][\w.]*)", text)}
    assert used
    missing = sorted(u for u in used if not _resolves(u.rstrip(".").split(".")))
    assert not missing, f"rules read facts that do not exist: {missing}"


def _summary_hint(key: str) -> typing.Any:
    """The type of a key of ``summary --json``: a field of :class:`RunSummary`, or one of its
    per-rank views (``phases``, ``last_seen``: properties)."""
    if key in {f.name for f in dataclasses.fields(RunSummary)}:
        return typing.get_type_hints(RunSummary)[key]
    view = getattr(RunSummary, key)
    assert isinstance(view, property), key
    return typing.get_type_hints(view.fget)["return"]


def _summary_path_exists(path: list[str]) -> bool:
    """Whether ``failing.a.b.c`` names a key of ``summary --json`` (``JSON_KEYS``) and, inside
    its typed records (the crash, its frames and OOM figures, the hang, ...), a field at each
    step; a mapping or a list whose keys are the log's (ranks, settings) ends the check."""
    if not path or path[0] not in JSON_KEYS:
        return False
    hint = _summary_hint(path[0])
    for name in path[1:]:
        while typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        if not (isinstance(hint, type) and issubclass(hint, Keyed)):
            return True
        hints = record_fields(hint)
        if name not in hints:
            return False
        hint = hints[name]
    return True


def test_the_summary_path_check_reads_into_records() -> None:
    """The check can fail: a field a record lacks, at any depth, is refused."""
    assert _summary_path_exists(["crash", "order_uncertain"]) and _summary_path_exists(["pools", "order", "kv_at"])
    assert not _summary_path_exists(["crash", "no_such_field"])
    assert _summary_path_exists(["serving", "health", "stalls", "first"]) and _summary_path_exists(["serving", "window_s"])
    assert not _summary_path_exists(["serving", "health", "no_such_field"])
    assert not _summary_path_exists(["no_such_key"])
    for key in JSON_KEYS:
        assert _summary_hint(key) is not None


def test_every_summary_key_a_rule_reads_exists() -> None:
    """The runs' side of a rule's environment is the summary's JSON (``failing``,
    ``baseline``): a key renamed or dropped there must fail here, not leave a rule silent
    (a missing key reads as none, and a condition on it is simply false)."""
    used = set()
    for rule in (ROOT / "rules").rglob("*.yml"):
        text = rule.read_text(encoding="utf-8").split("\nexamples:")[0]
        used |= set(re.findall(r"(?<![\w.])(?:failing|baseline)\.([A-Za-z_][\w.]*)", text))
    assert {"crash.order_uncertain", "outcome"} <= used
    missing = sorted(u for u in used if not _summary_path_exists(u.rstrip(".").split(".")))
    assert not missing, f"rules read summary keys that do not exist: {missing}"
