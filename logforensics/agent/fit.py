"""A tool's result cut to an output bound, every cut said.

An agent reads a result into a context of limited size; a summary of a long run (its
errors, its serving series) or a page of wide rows can be larger than it should ever take.
The largest list, mapping or text is halved until the result's JSON fits; each
cut is named in ``truncated`` (``summary.errors: 40 of 5120 items kept``), and a cut page
(``findings``, ``rows``) moves its ``next_offset`` back to the first item left out, so the
next page starts there. Nothing is dropped silently.
"""

from __future__ import annotations

import json
from typing import Any

#: Lists whose items are a page of the tool's own: a cut moves ``next_offset``.
PAGED = ("findings", "rows")
_NO_CUT = ("text", "truncated", "verdict")
#: Cuts named one by one; more are counted.
MOST_NOTES = 20


def size(doc: Any) -> int:
    return len(json.dumps(doc, default=str, ensure_ascii=False))


def fit(doc: dict[str, Any], most: int) -> dict[str, Any]:
    """``doc`` with ``truncated`` (the cuts made, in words; empty when it fitted), its JSON
    at most ``most`` characters where cutting lists and texts can get it there."""
    cuts: dict[str, tuple[int, int, str]] = {}
    doc = {**doc, "truncated": []}
    while size(doc) > most:
        found = _largest(doc, "")
        if found is None:
            break
        path, parent, key, value = found
        unit = "items" if isinstance(value, list) else "keys" if isinstance(value, dict) else "characters"
        kept = dict(list(value.items())[:len(value) // 2]) if isinstance(value, dict) else value[:len(value) // 2]
        cuts[path] = (cuts.get(path, (len(value),))[0], len(kept), unit)
        parent[key] = kept
    for name in PAGED:
        if name in cuts and doc.get("offset") is not None:
            doc["next_offset"] = doc["offset"] + len(doc[name])
    said = [f"{p}: {kept} of {was} {unit} kept" + (", the rest from next_offset" if p in PAGED else "")
            for p, (was, kept, unit) in cuts.items()]
    doc["truncated"] = said[:MOST_NOTES] + ([f"and {len(said) - MOST_NOTES} more cuts"] if len(said) > MOST_NOTES else [])
    if doc["truncated"] and isinstance(doc.get("text"), str):
        doc["text"] += f" (cut to fit {most} characters: see truncated)"
    return doc


def _largest(node: Any, path: str) -> tuple[str, Any, Any, Any] | None:
    """The list or mapping of two items or more, or the text of 200 characters or more, whose
    JSON is largest (the path to it, its container, its key there, itself). A record in a list
    (a finding, a row) keeps its keys: only mappings by name (ranks, nodes, series) lose some."""
    best: tuple[int, str, Any, Any, Any] | None = None
    stack: list[tuple[str, Any]] = [(path, node)]
    while stack:
        here, value = stack.pop()
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for k, v in items:
            if here == "" and k in _NO_CUT:
                continue
            p = f"{here}.{k}" if here and isinstance(k, str) else f"{here}[{k}]" if here else str(k)
            cand: tuple[int, str, Any, Any, Any] | None
            if (isinstance(v, list) or isinstance(v, dict) and not isinstance(value, list)) and len(v) >= 2:
                cand = (size(v), p, value, k, v)
            elif isinstance(v, str) and len(v) >= 200:
                cand = (len(v), p, value, k, v)
            else:
                cand = None
            if cand is not None and (best is None or cand[0] > best[0]):
                best = cand
            if isinstance(v, (dict, list)):
                stack.append((p, v))
    return None if best is None else best[1:]
