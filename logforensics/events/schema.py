"""The event schema: for every kind, its fields and each field's type; one name, one type.

This is where a consumer learns what a batch of one kind's events holds (columns and
their Arrow types) before it has seen a value. The table itself (``declared.py``) is
derived from what the reader declares where it reads a field: a grammar rule's terminals
(``read/terminals.py``), the type each converter declares (``read/values.py``), the
grammar's sample records for the fields the generic walk names from the text, and the
records assembled after the grammar (``read/assemble.py``). ``tools/event_schema.py``
writes it; ``tests/test_schema.py`` fails while it is stale, and when any event or plan
has a field the schema lacks or a value of another type.

Every batch also carries its provenance (:data:`PROVENANCE`), the record's ``text``, and
``extra``: what the schema could not hold (a field it lacks, a value of another type) as
JSON, so that nothing read is lost.
"""

from __future__ import annotations

from functools import cache
from types import MappingProxyType
from typing import TYPE_CHECKING

from .declared import KINDS
from .types import INT, STR, Type, arrow, unify

if TYPE_CHECKING:
    import pyarrow as pa

#: Where each record came from, before its fields (``Event``'s own attributes).
PROVENANCE: tuple[tuple[str, Type], ...] = (
    ("kind", STR), ("file", STR), ("line", INT), ("end_line", INT), ("rank", STR), ("ts", STR), ("node", STR),
)
#: After the fields: the record's text, and what the schema could not hold (JSON; null if nothing).
TRAILER: tuple[tuple[str, Type], ...] = (("text", STR), ("extra", STR))
RESERVED = frozenset(name for name, _ in PROVENANCE + TRAILER)


def kinds() -> frozenset[str]:
    """Every kind the schema declares."""
    return frozenset(KINDS)


def fields_of(kind: str) -> MappingProxyType[str, Type]:
    """The declared fields of ``kind`` and their types (none for a kind the schema lacks)."""
    return MappingProxyType(KINDS.get(kind, {}))


def conflicts(table: dict[str, dict[str, Type]] = KINDS) -> dict[str, set[Type]]:
    """Names with two types across the kinds of ``table`` (none in a sound schema), and the
    names a field shares with a provenance column."""
    seen: dict[str, Type] = {}
    out: dict[str, set[Type]] = {}
    for fields in table.values():
        for name, t in fields.items():
            one = unify(seen.get(name, t), t)
            if one is None or name in RESERVED:
                out.setdefault(name, {seen.get(name, t)}).add(t)
            else:
                seen[name] = one
    return out


def field_types() -> MappingProxyType[str, Type]:
    """Every declared field's one type, by name, across the kinds."""
    return MappingProxyType(_by_name())


@cache
def _by_name() -> dict[str, Type]:
    return {name: t for fields in KINDS.values() for name, t in fields.items()}


@cache
def table_schema() -> pa.Schema:
    """The schema of a table of events of every kind (``parse --format parquet``): provenance,
    every declared field in name order, text, extra. Known before a line is read."""
    import pyarrow as pa

    columns = PROVENANCE + tuple(sorted(_by_name().items())) + TRAILER
    return pa.schema([(name, arrow(t)) for name, t in columns])


@cache
def arrow_schema(kind: str) -> pa.Schema:
    """The schema of a batch of ``kind``'s events: provenance, the fields in name order, text, extra."""
    import pyarrow as pa

    columns = PROVENANCE + tuple(sorted(fields_of(kind).items())) + TRAILER
    return pa.schema([(name, arrow(t)) for name, t in columns], metadata={"kind": kind})
