"""What the files beside a run's logs say, as lines of text: one wording for the terminal,
the bundle and the HTML report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..artefacts.environment import KEYS
from ..artefacts.types import CAUSES, EPOCH_FIGURES, GIB_RECORDS, Artefacts
from ..model.beside import SOURCES
from ..model.clock import utc_stamp
from ..units import clip, fmt, gib


@dataclass(frozen=True)
class Line:
    """One statement and where it was read; ``level`` ``bad`` (a kill), ``warn`` (not read) or ``""``."""

    text: str
    where: str
    level: str = ""


def _figure(key: str, value: Any, *, in_gib: bool = False) -> str:
    """A dump's figure for people: a ``*_gb`` figure (SGLang's GB is GiB), a ``*_gib`` one
    and one of a record of GiB figures (:data:`GIB_RECORDS`, ``in_gib``) by the one formatter
    (MiB under 1 GiB), seconds since the epoch (:data:`EPOCH_FIGURES`) as a UTC stamp, a
    record's figures each so, a list of several records (one per rank) by its count: each
    record is in ``--json``."""
    if isinstance(value, dict):
        counts = GIB_RECORDS.get(key)
        return "{" + ", ".join(f"{k} {_figure(str(k), v, in_gib=counts is not None and k not in counts)}"
                               for k, v in value.items()) + "}"
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        return _figure(key, value[0])
    if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        return f"({len(value)} records, in --json)"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if key.endswith("_gb") or in_gib:
            return gib(value)
        if key in EPOCH_FIGURES and (stamp := utc_stamp(value)) is not None:
            return stamp
    return fmt(value, key=key)


def beside_lines(a: Artefacts) -> list[Line]:
    """The environment in :data:`KEYS` order, each record of the end, each dump with its replay
    command and what could not be read, and the files of no known form."""
    out: list[Line] = []
    facts = a.environment.facts if a.environment else {}
    for key in sorted(facts, key=lambda k: list(KEYS).index(k) if k in KEYS else len(KEYS)):
        c = facts[key]
        out.append(Line(f"{KEYS.get(key, key)}: {c.value}", c.where))
    for t in a.terminations:
        shown = clip(t.text, 160)
        extra = t.code_words(shown) + (f", {t.detail['restarts']} restarts" if t.detail.get("restarts") else "") \
            + (f", repeated {t.detail['repeated']}x across the cluster" if t.detail.get("repeated") else "")
        out.append(Line(f"{SOURCES.get(t.source, t.source)}: {CAUSES.get(t.cause, t.cause)}{extra}: {shown}",
                        t.where, "" if t.cause in ("cancelled", "time_limit") else "bad"))
    for d in a.dumps:
        ordered = sorted(d.figures.items(), key=lambda kv: isinstance(kv[1], (dict, list)))  # plain figures first
        figures = ", ".join(f"{k} {_figure(k, v)}" for k, v in ordered[:14])
        out.append(Line(f"{d.kind.replace('_', ' ')}: {figures or 'no figures read'}", d.file))
        if d.launch_command:
            out.append(Line(f"  launch command: {clip(d.launch_command, 300)}", d.file))
        if d.replay:
            out.append(Line(f"  replay: {d.replay}", d.file))
        out += [Line(f"  not read: {what}", d.file, "warn") for what in d.unread[:3]]
    out += [Line(why, path, "warn") for path, why in a.unknown.items()]
    return out
