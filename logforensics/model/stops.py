"""Where a log that just stops (``incomplete``) leaves its ranks, in words.

A rank whose last phase record is the end line SGLang prints for its phase ("Memory pool
end" after the KV pool) had left that phase's own records behind: the log stops after it
and before the first line of the next phase, not during it. The next phase is the one after
it in :data:`~logforensics.events.PHASES` that the rank had not been in yet (the KV pool can
be sized after graph capture), without CUDA-graph capture when ``disable_cuda_graph`` is
set. Graph capture's is 'Capture cuda graph end', printed once the runner has captured
every batch size.
"""

from __future__ import annotations

import os
from typing import Any

from ..events import PHASES
from .phases import PHASE_END
from .summary import RunSummary

#: phase -> (the record that ends it, as SGLang words it)
END_OF = PHASE_END


def graphs_disabled(run: RunSummary) -> bool | None:
    """``disable_cuda_graph`` as the log shows it; None when it shows no setting."""
    for args in (run.server_args, run.launch_args):
        if "disable_cuda_graph" in args:
            return str(args["disable_cuda_graph"]).strip().lower() in ("true", "1")
    return None if not (run.server_args or run.launch_args) else False


def _next_phase(run: RunSummary, phase: str, seen: set[str]) -> str | None:
    later = [p for p in PHASES[PHASES.index(phase) + 1:] if p not in seen]
    disabled = graphs_disabled(run)
    if disabled:
        later = [p for p in later if p != "cuda_graph_capture"]
    if not later:
        return None
    if later[0] == "cuda_graph_capture" and disabled is None and len(later) > 1:
        return f"{later[0]} or {later[1]}"  # with --disable-cuda-graph, warmup comes next
    return later[0]


def stop_place(run: RunSummary, cite_file: bool = False) -> str | None:
    """For an incomplete run: ``during <phase>`` (the furthest phase its ranks reached), or
    ``after <phase> (<end line>, line N), before <next phase>`` when every rank in that phase
    printed its end line last; None when no rank reached a phase. ``cite_file`` names the
    file with the line (``failing.log:83``)."""
    reached = {k: r.phase_reached for k, r in run.per_rank.items() if r.phase_reached in PHASES}
    if not reached:
        return None
    phase = max(reached.values(), key=PHASES.index)
    end = END_OF.get(phase)
    lines: list[dict[str, Any]] = []
    for label, p in reached.items():
        if p != phase or end is None:
            continue
        rank = run.per_rank[label]
        notice = rank.memory.evidence.get(end[0])
        at = notice.to_dict() if notice is not None else None
        span = rank.phases.get(phase)
        if not at or at.get("line") != (span.last_line if span else None):
            lines = []
            break
        lines.append(at)
    if not lines or end is None:
        return _bar_done(run, phase, reached, cite_file) or f"during {phase}"
    last = max(lines, key=lambda e: e.get("line") or 0)
    where = f"{os.path.basename(str(last.get('file') or run.file or ''))}:{last['line']}" if cite_file \
        else f"line {last['line']}"
    return _after(run, phase, f"{end[1]}, {where}")


def _after(run: RunSummary, phase: str, why: str, at: str = "after", bar_line: int | None = None) -> str:
    """``after <phase> (<why>), before <next phase>`` (the next phase the run would have reached).
    A phase only a progress bar shows (``bar_line``: any "Loading ..." bar, SGLang's diffusion
    runtime's too) is no start-up the next phase follows where lines the grammar does not read
    come after the bar: what came next is in them, unread (``...; lines after it not read``)."""
    after = f"{at} {phase} ({why})"
    if bar_line is not None and any(u.first_line is not None and u.first_line > bar_line
                                    for u in run.coverage.top_unrecognised):
        return f"{after}; lines after it not read"
    nxt = _next_phase(run, phase, {p for r in run.per_rank.values() for p in r.phases})
    return f"{after}, before {nxt}" if nxt else after


def _bar_done(run: RunSummary, phase: str, reached: dict[str, str], cite_file: bool) -> str | None:
    """``at the end of <phase> (its progress bar at 8/8, line N; 'Load weight end' not in the
    log), before <next phase>`` where the phase's last progress bar is complete and no rank
    printed a record of the phase after it; None otherwise. Not "after" it: the step goes on
    past its bar until the end line (weights are processed after the last shard is read, a
    kernel may be built then), and that line is not in the log."""
    bar = next((r.progress[phase] for r in run.per_rank.values() if phase in r.progress), None)
    if bar is None or bar.total <= 0 or bar.n < bar.total:
        return None
    spans = [run.per_rank[k].phases.get(phase) for k, p in reached.items() if p == phase]
    if any(span is not None and span.last_line > bar.line for span in spans):
        return None
    where = f"{os.path.basename(str(run.file or ''))}:{bar.line}" if cite_file else f"line {bar.line}"
    end = END_OF.get(phase)
    missing = f"; '{end[1]}' not in the log" if end else ""
    return _after(run, phase, f"its progress bar at {bar.n}/{bar.total}, {where}{missing}", "at the end of", bar.line)


def left_phase(run: RunSummary, label: str | None) -> str | None:
    """``after load_weights (Load weight end, line 12)`` when the rank's last phase record is
    the line that ends its phase (so a failure after it is in no phase its lines name); None
    otherwise."""
    rank = run.per_rank.get(label or "-")
    phase = rank.phase_reached if rank is not None else None
    end = END_OF.get(phase or "")
    if rank is None or end is None:
        return None
    notice = rank.memory.evidence.get(end[0])
    span = rank.phases.get(phase or "")
    if notice is None or span is None or notice.line != span.last_line:
        return None
    return f"after {phase} ({end[1]}, line {notice.line})"
