"""Evidence lists: the first records of each notable kind, with provenance."""

from __future__ import annotations

from typing import Any

from ..events import Event

#: How many records of each kind are kept (the first ones); other kinds keep LIMIT.
LIMITS = {"decode": 3, "server_args": 1, "launch_command": 1, "tb_fragment": 256}
LIMIT = 64


def limit(key: str) -> int:
    return LIMITS.get(key, LIMIT)


class Notices(dict[str, list[dict[str, Any]]]):
    """key -> the first records noticed under it, each {file, line, rank, text}."""

    def add(self, key: str, ev: Event, **facts: Any) -> None:
        """Keep ``ev`` under ``key`` (up to its limit), with ``facts`` the record gave (not None)."""
        found = self.setdefault(key, [])
        if len(found) < limit(key):
            found.append({"file": ev.file, "line": ev.line, "rank": ev.rank, "text": ev.text,
                          **{k: v for k, v in facts.items() if v is not None}})

    def merge(self, later: Notices) -> None:
        """Lists keep their first records up to their limits."""
        for key, found in later.items():
            kept = self.setdefault(key, [])
            kept.extend(found[:max(0, limit(key) - len(kept))])
