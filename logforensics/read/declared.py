"""The event schema as the reader declares it: kind -> field -> type, derived, never written by hand.

``events/declared.py`` holds the result (the events package may import nothing of the
reader); ``tools/event_schema.py`` writes it and ``tests/test_schema.py`` fails while it is
stale. The sources, in order:

* each rule's declared terminals and constants (``terminals.RULES``), a field's type being
  its converter's (``values.typed``); a number without a converter holds a float;
* the plan of every sample record of the grammar (``grammars/samples``): the fields that
  the generic walk names from the text (``#running-req: 4`` -> ``running_req``) and the
  handlers' fields, each typed by the converter the plan chose;
* the handlers' tables (request payloads, collective figures) and the text after a
  prefix of every line (``body``);
* the records assembled after the grammar (``assemble.FIELDS``).

Two declarations of one field must agree (:func:`~logforensics.events.types.unify`): an
integer and a float make a float (SGLang prints some figures with or without a point), a
converter that only gives None fits any type; anything else is a conflict, reported with
where each side was declared.
"""

from __future__ import annotations

import pprint
from collections.abc import Iterable

from ..events.types import FLOAT, INT, STR, Type, of_value, unify
from . import fatal
from .assemble import FIELDS as ASSEMBLED
from .grammar import UNPLANNED, parsers, plan_record
from .kinds import event_kinds
from .plan import Plan
from .plan_fatal import _BODY_KINDS
from .planner import KIND_RENAME, Planner
from .requests import FIELDS as REQUEST_FIELDS
from .terminals import RULES
from .values import type_of

#: One declaration of a field: its kind, name, type and where it was declared.
Decl = tuple[str, str, Type, str]


class Conflict(ValueError):
    """A field declared with two types."""


def widen(a: Type, b: Type) -> Type | None:
    """:func:`unify`, and an integer with a float makes a float."""
    if {a, b} == {INT, FLOAT}:
        return FLOAT
    return unify(a, b)


def _parents() -> dict[str, set[str]]:
    """Rules that are never a kind, by the kinds whose rules hold them (``warning_head`` is
    read as part of ``py_warning`` and ``pool_leak``)."""
    record, _ = parsers()
    kinds = event_kinds()
    out: dict[str, set[str]] = {}
    for r in record.rules:
        parent = KIND_RENAME.get(str(r.origin.name), str(r.origin.name))
        for sym in r.expansion:
            if not sym.is_term and parent in kinds:
                out.setdefault(str(sym.name), set()).add(parent)
    return out


def _generic_reach() -> dict[str, set[str]]:
    """What the generic walk can meet in a rule's tree: every terminal and rule below it."""
    record, _ = parsers()
    below: dict[str, set[str]] = {}
    for r in record.rules:
        below.setdefault(str(r.origin.name), set()).update(str(sym.name) for sym in r.expansion)
    out: dict[str, set[str]] = {}
    for rule in below:
        seen: set[str] = set()
        todo = [rule]
        while todo:
            for name in below.get(todo.pop(), ()):
                if name not in seen:
                    seen.add(name)
                    todo.append(name)
        out[rule] = seen
    return out


def plan_fields(plan: Plan) -> Iterable[tuple[str, Type]]:
    """The fields of a plan and the types its converters and constants declare."""
    for name, _, _, conv in plan.fields:
        if name not in dict(plan.const):
            yield name, type_of(conv)
    for name, value in plan.const:
        yield name, of_value(value)


def declarations(samples: Iterable[str]) -> Iterable[Decl]:
    """Every declaration of a field, from the sources in the module docstring."""
    kinds = event_kinds()
    parents = _parents()
    for rule, decl in RULES.items():
        kind = KIND_RENAME.get(rule, rule)
        for owner in [kind] if kind in kinds else sorted(parents.get(rule, ())):
            for take in decl.takes:
                yield owner, take.name, FLOAT if take.conv is None else type_of(take.conv), f"terminals.RULES[{rule!r}]"
            for name, value in decl.const:
                yield owner, name, of_value(value), f"terminals.RULES[{rule!r}]"
    reach = _generic_reach()
    for rule, names in reach.items():  # the generic walk's own names: a TEXT, "Time elapsed: 1.2 s"
        kind = KIND_RENAME.get(rule, rule)
        declared = RULES.get(rule)
        if kind in kinds and (declared.generic if declared is not None else not hasattr(Planner, "on_" + rule)):
            if "TEXT" in names:
                yield kind, "message", STR, f"the generic walk of {rule!r} (TEXT)"
            if "elapsed_item" in names:
                yield kind, "elapsed_s", FLOAT, f"the generic walk of {rule!r} (elapsed_item)"
    for text in samples:
        plan = plan_record(text)
        if plan.kind == UNPLANNED:
            raise ValueError(f"a sample record that the planner fails on: {text!r}")
        for name, t in plan_fields(plan):
            yield plan.kind, name, t, f"the sample {text!r}"
    for kind, convs in REQUEST_FIELDS.items():
        for name, conv in convs.items():
            yield kind, name, type_of(conv), "requests.FIELDS"
    for kind in ("collective_timeout", "collective_failure"):
        yield kind, "message", STR, "plan_fatal._collective_or"
        for name in fatal.COLLECTIVE_FIELDS:
            yield kind, name, type_of(fatal.field(name)), "fatal.COLLECTIVE_FIELDS"
    for kind in sorted(_BODY_KINDS):
        yield kind, "body", STR, "plan_fatal.body"
    yield UNPLANNED, "error", STR, "grammar._unplanned"
    for kind, fields in ASSEMBLED.items():
        for name, t in fields.items():
            yield kind, name, t, "assemble.FIELDS"


def derive(samples: Iterable[str]) -> dict[str, dict[str, Type]]:
    """kind -> field -> type, every kind of the grammar included; :class:`Conflict` when one
    name has two types (in one kind or across kinds)."""
    out: dict[str, dict[str, Type]] = {kind: {} for kind in sorted(event_kinds())}
    by_name: dict[str, tuple[Type, str]] = {}
    for kind, name, t, where in declarations(samples):
        seen = by_name.get(name)
        if seen is not None:
            one = widen(seen[0], t)
            if one is None:
                raise Conflict(f"the field {name!r} is {seen[0]!r} in {seen[1]} and {t!r} in {kind!r} ({where})")
            t = one
        by_name[name] = (t, seen[1] if seen is not None else f"{kind!r} ({where})")
        fields = out.setdefault(kind, {})
        fields[name] = widen(fields.get(name, t), t) or t
    # one name, one type: a field that widened in one kind widens in all
    return {kind: {name: by_name[name][0] for name in fields} for kind, fields in out.items()}


def module_text(kinds: dict[str, dict[str, Type]]) -> str:
    """The text of ``events/declared.py``."""
    body = pprint.pformat(kinds, width=116, sort_dicts=True)
    return (
        '"""Every event kind\'s fields and their types, derived from what the reader declares.\n\n'
        "Written by ``python tools/event_schema.py`` (``read/declared.py``); do not edit: declare a\n"
        "field where it is read, and write this again. ``events/schema.py`` reads it.\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "from .types import Type\n\n"
        f"KINDS: dict[str, dict[str, Type]] = {body}\n"
    )
