"""What the files beside a run's logs say, as lines of text: one wording for the terminal,
the bundle and the HTML report."""

from __future__ import annotations

from dataclasses import dataclass

from ..artefacts.environment import KEYS
from ..artefacts.types import CAUSES, Artefacts
from ..model.beside import SOURCES
from ..units import fmt


@dataclass(frozen=True)
class Line:
    """One statement and where it was read; ``level`` ``bad`` (a kill), ``warn`` (not read) or ``""``."""

    text: str
    where: str
    level: str = ""


def beside_lines(a: Artefacts) -> list[Line]:
    """The environment in :data:`KEYS` order, each record of the end, each dump with its replay
    command and what could not be read, and the files of no known form."""
    out: list[Line] = []
    facts = a.environment.facts if a.environment else {}
    for key in sorted(facts, key=lambda k: list(KEYS).index(k) if k in KEYS else len(KEYS)):
        c = facts[key]
        out.append(Line(f"{KEYS.get(key, key)}: {c.value}", c.where))
    for t in a.terminations:
        shown = t.text[:160]
        extra = t.code_words(shown) + (f", {t.detail['restarts']} restarts" if t.detail.get("restarts") else "") \
            + (f", repeated {t.detail['repeated']}x across the cluster" if t.detail.get("repeated") else "")
        out.append(Line(f"{SOURCES.get(t.source, t.source)}: {CAUSES.get(t.cause, t.cause)}{extra}: {shown}",
                        t.where, "" if t.cause in ("cancelled", "time_limit") else "bad"))
    for d in a.dumps:
        figures = ", ".join(f"{k} {fmt(v, key=k)}" for k, v in list(d.figures.items())[:10])
        out.append(Line(f"{d.kind.replace('_', ' ')}: {figures or 'no figures read'}", d.file))
        if d.launch_command:
            out.append(Line(f"  launch command: {d.launch_command[:300]}", d.file))
        if d.replay:
            out.append(Line(f"  replay: {d.replay}", d.file))
        out += [Line(f"  not read: {what}", d.file, "warn") for what in d.unread[:3]]
    out += [Line(why, path, "warn") for path, why in a.unknown.items()]
    return out
