"""docs/rules.md lists every fact rules can read, and every fact a rule reads exists."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path

from logforensics.diagnose.factdoc import BEGIN, END, reference, rewrite
from logforensics.diagnose.facts import Facts

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
