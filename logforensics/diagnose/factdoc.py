"""The list of facts rules can read, generated from the dataclasses so it cannot drift.

``docs/rules.md`` holds it between two markers; ``python -m logforensics.diagnose.factdoc
docs/rules.md`` rewrites that part, and a test fails when it is out of date.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from pathlib import Path
from typing import Any

from ..model.records import Keyed
from .facts import Facts

#: A summary record's own fields, not the log's (``model.records.Keyed``).
_BOOKKEEPING = ("keys", "extra")
BEGIN, END = "<!-- facts: generated, do not edit -->", "<!-- facts: end -->"


def _dataclasses_in(hint: Any) -> list[type]:
    """The dataclasses a field's type names (through Optional, tuple[...], Mapping[..., ...])."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return [hint]
    out: list[type] = []
    for arg in typing.get_args(hint):
        out += _dataclasses_in(arg)
    return out


def _shape(hint: Any) -> str:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return " or ".join(_shape(a) for a in inner) + (" or null" if len(inner) < len(args) else "")
    if origin in (tuple, list):
        return f"list of {_shape(args[0])}" if args else "list"
    if origin is not None and args and getattr(origin, "__name__", "") == "Mapping":
        return f"mapping of {_shape(args[1])}"
    return getattr(hint, "__name__", str(hint))


def _doc(cls: type) -> str:
    doc = (cls.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(doc.split()) if not doc.startswith(cls.__name__ + "(") else ""


def reference() -> str:
    """Markdown: every ``facts.<name>`` with its type, and every field of each fact type."""
    lines = ["| name | type |", "|---|---|"]
    hints = typing.get_type_hints(Facts)
    for f in dataclasses.fields(Facts):
        lines.append(f"| `facts.{f.name}` | {_shape(hints[f.name])} |")
    seen: list[type] = []
    queue = [c for f in dataclasses.fields(Facts) for c in _dataclasses_in(hints[f.name])]
    while queue:
        cls = queue.pop(0)
        if cls in seen:
            continue
        seen.append(cls)
        queue += [c for h in typing.get_type_hints(cls).values() for c in _dataclasses_in(h)]
    lines.append("")
    for cls in seen:
        chints = typing.get_type_hints(cls)
        fields = ", ".join(f"`{f.name}` ({_shape(chints[f.name])})" for f in dataclasses.fields(cls)
                           if f.name not in _BOOKKEEPING or not issubclass(cls, Keyed))
        doc = _doc(cls)
        lines.append(f"- **{cls.__name__}**{': ' + doc if doc else ''} Fields: {fields}.")
    return "\n".join(lines) + "\n"


def rewrite(text: str) -> str:
    """``text`` with the generated part between the markers replaced by :func:`reference`."""
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{reference()}{END}{tail}"


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/rules.md")
    path.write_text(rewrite(path.read_text(encoding="utf-8")), encoding="utf-8")
