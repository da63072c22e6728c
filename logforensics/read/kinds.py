"""The event kinds a log can yield, read from the grammar (the single source of truth)."""

from __future__ import annotations

from functools import cache

#: Grammar rules that structure a record but are never an event's kind.
_STRUCTURAL = frozenset({
    "record", "fallback", "message", "sglang_message", "prefix", "rank", "rank_only", "gpu_tag", "rank_tag", "level_tag", "items",
    "item", "eq_item", "colon_item", "elapsed_item", "value", "number_value", "warning_head", "line_prefix",
})
#: Kinds made after the grammar: assembled tracebacks, lines it does not know, and the kinds
#: the planner gives a record from its text (a c10d or ``what():`` line that is a timeout).
_ASSEMBLED = ("exception", "other", "tb_fragment", "collective_timeout", "collective_failure")


@cache
def event_kinds() -> frozenset[str]:
    """Every kind ``parse --kind`` can select."""
    from .grammar import parsers
    from .planner import KIND_RENAME

    names = {str(r.origin.name) for parser in parsers() for r in parser.rules}
    kinds = {KIND_RENAME.get(n, n) for n in names if not n.startswith("_") and n not in _STRUCTURAL}
    return frozenset(kinds | set(_ASSEMBLED))
