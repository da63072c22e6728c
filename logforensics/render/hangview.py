"""The hang as both renderers show it: per-rank progress rows and the sentences around them.

One pure function of the summary's ``hang`` (``model/hang.py``), so the terminal and the
HTML report say the same thing: each rank's last sequence numbers and last phase with the
lines they rest on, the rank that differs, what the ranks are stuck on, why stack dumps
are missing and what to turn on next time.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..model.records import Cite, Stacks
from ..model.summary import Hang
from ..units import clip


@dataclass(frozen=True)
class ProgressRow:
    rank: str
    last_completed: str
    last_enqueued: str
    waiting_on: str
    last_phase: str
    evidence: str           # "file:line" of each line the row rests on


@dataclass(frozen=True)
class HangView:
    rows: tuple[ProgressRow, ...]
    initiator: str | None   # the rank that differs, why, where
    stuck_on: tuple[str, ...]
    stacks: str | None      # why stack dumps are missing, as the log says
    next_time: tuple[str, ...]
    pools: tuple[str, ...] = ()  # per rank, each pool as the watchdog's debug info printed it


def where(ev: Cite | None, file: str | None = None) -> str:
    """``file:line`` of an evidence line (the file's name only)."""
    if ev is None or ev.line is None:
        return ""
    name = ev.file or file
    return f"{os.path.basename(name)}:{ev.line}" if name else f"line {ev.line}"


def _num(value: Any) -> str:
    return "" if value is None else str(value)


def _evidence(items: Sequence[Cite], file: str | None) -> str:
    return ", ".join(where(e, file) for e in items if e.line is not None)


def hang_view(h: Hang, file: str | None = None) -> HangView:
    """What to show of ``h``; ``file`` names lines whose record lacks it."""
    rows = []
    for p in h.progress:
        w = p.waiting_on
        waiting = f"{w.op or 'collective'} seq {w.seq}" + (f" (PG {w.pg})" if w.pg is not None
                                                             else "") if w else ""
        rows.append(ProgressRow(p.rank, _num(p.last_completed), _num(p.last_enqueued), waiting,
                                p.last_phase or "", _evidence(p.evidence, file)))
    init = h.initiator
    initiator = None
    if init:
        who = init.rank or "one of " + ", ".join(init.candidates or [])
        initiator = f"{who}: {init.why} ({_evidence(init.evidence, file)})"
    stuck = []
    for s in h.stuck_on:
        at = _evidence(s.evidence, file)
        if s.what == "collective":
            stuck.append(f"collective {s.op or ''} seq {s.seq} (PG {s.pg}) on "
                         f"{', '.join(r or '' for r in s.ranks)} ({at})")
        elif s.what == "batch":
            size = f"{s.batch_size} requests" if s.batch_size is not None else "a batch"
            rids = f", first rid {', '.join(s.rids[:3])}" if s.rids else ""
            # the scheduler's watchdog printed it: a line that names no rank is still the scheduler's
            on = ", ".join(r if r and r != "-" else "the scheduler" for r in s.ranks or [s.rank])
            stuck.append(f"batch of {size} on {on}{rids} ({at})")
        else:
            rids = f" (rids {', '.join(s.rids[:3])})" if s.rids else ""
            stuck.append(f"events the checker compared on {s.rank or '-'}{rids}: {clip(s.events or '', 160)} "
                         f"({at})")
    pools = []
    for b in h.debug_info:
        said = "; ".join(f"{name} {p.total} total, {p.available} available, "
                         f"{p.evictable} evictable" for name, p in b.pools.items())
        if said:
            at = _evidence([Cite(line=p.line) for p in b.pools.values()], file)
            pools.append(f"{b.rank or '-'}: {said} ({at})")
    stacks = h.stacks or Stacks()
    why = stacks.missing_why
    next_time = tuple(f"{k.setting}: {k.status}" + (f" ({where(k.evidence, file)})"
                                                    if k.evidence and k.evidence.line else
                                                    f" ({k.evidence.text})" if k.evidence else "")
                      + ("" if k.status == "on" else f"; {k.gives}")
                      for k in stacks.next_time)
    return HangView(tuple(rows), initiator, tuple(stuck), f"stack dumps: {why}" if why else None, next_time,
                    tuple(pools))
