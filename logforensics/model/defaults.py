"""SGLang's declared ``ServerArgs`` defaults by version (``serverargs_defaults.tsv``).

The table is read from each released wheel's ``python/sglang/srt/server_args.py`` by
``tools/serverargs_defaults.py``; a default is the field's declared value as Python writes
it (``'auto'``, ``8192``, ``None``: resolved at start-up). ``bundle`` uses it for the
settings a run changed from its version's defaults, ``diff`` for the defaults that changed
between two runs' versions.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=1)
def defaults_table() -> dict[str, dict[str, str]]:
    """version -> field -> default (repr), from ``model/serverargs_defaults.tsv``."""
    text = resources.files("logforensics.model").joinpath("serverargs_defaults.tsv").read_text(encoding="utf-8")
    out: dict[str, dict[str, str]] = {}
    for row in text.splitlines()[1:]:
        version, name, value, _ = row.split("\t")
        out.setdefault(version, {})[name] = value
    return out


def version_key(v: str) -> tuple[int, ...]:
    """A version's release numbers for ordering and matching (``v0.4.6`` -> (0, 4, 6);
    ``0.4.6.post1`` -> (0, 4, 6, 1), another release)."""
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:4])


def table_version(logged: str) -> str | None:
    """The table's version that is exactly ``logged`` (a leading ``v`` and a local
    ``+...`` suffix aside), or None: the nearest release is not the same defaults."""
    key = version_key(logged)
    return next((v for v in defaults_table() if version_key(v) == key), None) if key else None
