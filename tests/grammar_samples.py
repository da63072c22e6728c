"""The grammar's sample records, read from ``grammars/samples/*.yml`` (data beside the grammar).

Each file is one group of templates (prefixes, startup, KV cache, ...), each entry a
record and what it must mean: its kind, rank label, ISO stamp and some of its fields.
``test_grammar.py`` checks each against the grammar, ``test_fastpath.py`` checks that the
memoised fast path agrees with the grammar on the same shapes with other digits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import yaml

SAMPLES = Path(__file__).resolve().parent.parent / "grammars" / "samples"
_KEYS = frozenset({"line", "kind", "rank", "ts", "fields"})


class Case(NamedTuple):
    text: str
    kind: str
    rank: str | None
    ts: str | None
    fields: dict[str, Any]


def _case(path: Path, i: int, entry: Any) -> Case:
    where = f"{path.name} entry {i}"
    if not isinstance(entry, dict) or not {"line", "kind"} <= set(entry) or set(entry) - _KEYS:
        raise ValueError(f"{where}: expected the keys line, kind and optionally rank, ts, fields; got {entry!r}")
    if not isinstance(entry["line"], str) or not isinstance(entry.get("fields", {}), dict):
        raise ValueError(f"{where}: line must be text and fields a mapping")
    return Case(entry["line"], entry["kind"], entry.get("rank"), entry.get("ts"), entry.get("fields", {}))


def load(directory: Path = SAMPLES) -> dict[str, list[Case]]:
    """Every group of samples, by file name, in the files' order."""
    groups: dict[str, list[Case]] = {}
    for path in sorted(directory.glob("*.yml")):
        entries = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(entries, list) or not entries:
            raise ValueError(f"{path.name}: expected a list of samples")
        groups[path.stem] = [_case(path, i, e) for i, e in enumerate(entries)]
    if not groups:
        raise ValueError(f"no samples in {directory}")
    return groups


GROUPS = load()
CASES: list[Case] = [c for group in GROUPS.values() for c in group]
