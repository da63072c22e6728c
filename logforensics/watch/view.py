"""What ``watch`` shows: a live rich table on a terminal, plain status lines otherwise."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..diagnose.engine import Diagnosis
from ..model.run import rank_sort_key
from ..model.summary import Crash
from ..render.console import plain
from ..render.diff import render_diagnosis
from ..render.terminal import table_box
from ..units import fmt
from .state import WatchState, baseline_phase_seconds


def rank_table(state: WatchState, now: float, console: Console) -> Table:
    t = Table(title=plain(f"{state.run.name}  ({state.bytes_read / 1e6:.1f} MB read)"), box=table_box(console))
    for col in ("rank", "phase", "progress", "avail GiB", "in phase", "silent"):
        t.add_column(col, justify="left" if col in ("rank", "phase", "progress") else "right")
    if state.baseline is not None:
        t.add_column("baseline phase", justify="right")
    silent = {r for r, _, _ in state.silent_ranks(now)}
    for label in sorted(state.ranks, key=rank_sort_key):
        r = state.ranks[label]
        progress = r.progress[1] if r.progress and r.progress[0] == r.phase else ""
        row = [plain(label, "bold red" if label in silent else ""), plain(r.phase or "-"), plain(progress),
               Text(fmt(r.avail_gib, key="avail_gib")), Text(f"{now - r.phase_since_wall:.0f}s"),
               Text(f"{now - r.last_wall:.0f}s")]
        if state.baseline is not None:
            secs = baseline_phase_seconds(state.baseline, label, r.phase)
            row.append(Text(f"{secs:.0f}s" if secs is not None else "-"))
        t.add_row(*row)
    return t


def live_renderable(state: WatchState, now: float, console: Console) -> Any:
    parts: list[Any] = [rank_table(state, now, console)]
    for label, secs, expected in state.silent_ranks(now):
        parts.append(plain(f"warning: {label} silent for {secs:.0f}s; the baseline needed {expected:.0f}s "
                           f"for this phase: a hang?", "yellow"))
    if state.ready_at is not None:
        parts.append(Text("server ready", style="bold green"))
    for alert in state.alerts[-3:]:
        parts.append(plain(f"serving: {alert}", "yellow"))
    for note in state.notices[-3:]:
        parts.append(plain(note, "dim"))
    return Group(*parts)


class PlainStatus:
    """Status lines for pipes and CI logs: one line per change, nothing redrawn."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.seen: dict[str, tuple[Any, ...]] = {}
        self.warned: set[str] = set()
        self.alerts = 0  # serving-health alerts printed

    def update(self, state: WatchState, now: float) -> None:
        for label in sorted(state.ranks, key=rank_sort_key):
            r = state.ranks[label]
            key = (r.phase,)
            if self.seen.get(label) != key:
                self.seen[label] = key
                self.console.print(plain(f"[watch] {label}: {r.phase or '-'} (line {r.last_line})"))
        for label, secs, expected in state.silent_ranks(now):
            if label not in self.warned:
                self.warned.add(label)
                self.console.print(plain(f"[watch] warning: {label} silent for {secs:.0f}s; the baseline needed "
                                         f"{expected:.0f}s for this phase: a hang?"))
        if state.ready_at is not None and "ready" not in self.warned:
            self.warned.add("ready")
            self.console.print(Text("[watch] server ready"))
        for alert in state.alerts[self.alerts:]:
            self.console.print(plain(f"[watch] serving: {alert}"))
        self.alerts = len(state.alerts)


def crash_line(crash: Crash | None, node: str | None = None) -> str:
    """The one-line crash notice both watch modes print: what failed (and the exception it
    was raised while handling), the rank, the phase, the node of a multi-node run, and
    where in which file."""
    if crash is None:
        return "[watch] crash diagnosed: fatal error (not in the summary)"
    cause = next((c.exception for c in crash.chain if c.exception), None)
    what = (crash.exception or "fatal error") + (f" (while handling {cause})" if cause else "")
    on = crash.node or node
    where = f"{crash.file}, line {crash.line}" if crash.file else f"line {crash.line}"
    return (f"[watch] crash diagnosed{f' on {on}' if on else ''}: {what} on "
            f"{crash.first_rank or 'unknown rank'} in {crash.phase or 'unknown phase'} ({where})")


def print_crash(d: Diagnosis, console: Console) -> None:
    """The full traceback(s), deduplicated across ranks, then the diagnosis."""
    for exc in d.failing.exceptions:
        ranks = ", ".join(r or "?" for r in exc.ranks)
        title = f"{exc.exception or 'crash'} on {ranks} (line {exc.first_line})"
        console.print(Panel(plain(exc.text, lines=True), title=plain(title), border_style="red", expand=False))
    if not d.failing.exceptions and d.failing.crash:
        console.print(Panel(plain(d.failing.crash.text or "", lines=True), title=Text("crash"),
                            border_style="red", expand=False))
    render_diagnosis(d, console)
