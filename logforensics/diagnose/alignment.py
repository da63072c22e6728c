"""Per rank and phase: where the failing run stopped short of the baseline."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..events import PHASES
from ..model.records import NOT_SEEN
from ..model.run import RunSummary
from ..model.stops import graphs_disabled, left_phase
from .sides import Coverage, Evidence, ev, pair_ranks, phase_index


@dataclass(frozen=True)
class RankAlignment:
    """One rank in both runs (``failing_rank``: its label in the failing log, None if absent)."""

    rank: str
    failing_rank: str | None
    baseline_phase: str | None
    failing_phase: str | None
    #: ``after cuda_graph_capture (Capture cuda graph end, line 257)``: the failing rank's last
    #: phase record is the line that ends its phase (``stops.left_phase``), so it had left it.
    failing_left: str | None
    missing_phases: tuple[str, ...]
    last_line: int | None
    last_text: str | None
    #: the failing rank printed lines after its last phase record (lines no phase is read from:
    #: a kernel's choices in a forward pass), so where it stopped is not its last phase record
    went_on: bool = False


@dataclass(frozen=True)
class FirstMissing:
    """The first phase some ranks stopped before; ``ranks`` as the failing log labels them."""

    phase: str
    ranks: tuple[str, ...]
    rows: tuple[RankAlignment, ...]
    reached_by: tuple[str, ...]
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class Alignment:
    """Per rank and phase: where the failing run stopped short of the baseline.

    A phase is missing on a rank only when the baseline's log shows that rank in it and
    the failing log shows the rank stopping before it (the run crashed or hung). A rank the
    failing excerpt never mentions is not in this log, not behind.
    """

    ranks: Mapping[str, RankAlignment]
    first_missing: FirstMissing | None
    baseline_ranks: tuple[str, ...]
    failing_ranks: tuple[str, ...]
    #: Baseline ranks the failing log does not mention at all.
    not_in_failing_log: tuple[str, ...]
    #: False when the failing log does not show the run stopping (an excerpt that ends).
    failing_stopped: bool

    @staticmethod
    def empty() -> Alignment:
        return Alignment({}, None, (), (), (), False)


def alignment(fail: RunSummary, base: RunSummary, fc: Coverage, bc: Coverage) -> Alignment:
    pairs = pair_ranks(list(bc.ranks), list(fc.ranks))
    per_rank: dict[str, RankAlignment] = {}
    # a phase the failing run's own settings leave out is not one its ranks stopped before
    skipped = ("cuda_graph_capture",) if graphs_disabled(fail) else ()
    for rank in bc.ranks:
        frank = pairs.get(rank)
        f_phase = fc.rank_reached.get(frank) if frank else None
        missing: tuple[str, ...] = ()
        if frank is not None and fc.stopped and f_phase is not None:
            # Where a rank stopped is known only from its own lines or its crash's phase.
            missing = tuple(p for p in bc.rank_phases.get(rank, ())
                            if phase_index(p) > phase_index(f_phase) and p not in skipped)
        seen = fail.last_seen.get(frank or "", NOT_SEEN)
        left = left_phase(fail, frank) if frank is not None and f_phase is not None else None
        record = fail.per_rank.get(frank or "")
        span = record.phases.get(f_phase or "") if record is not None else None
        went_on = span is not None and seen.line is not None and seen.line > span.last_line
        per_rank[rank] = RankAlignment(rank, frank, bc.rank_reached.get(rank), f_phase, left, missing,
                                       seen.line, seen.text, went_on)
    first: FirstMissing | None = None
    for phase in PHASES:
        behind = [r for r, a in per_rank.items() if phase in a.missing_phases]
        if behind:
            reached_by = tuple(r for r, a in per_rank.items() if r not in behind and a.failing_rank
                               and phase_index(a.failing_phase) >= phase_index(phase))
            evidence = tuple(ev(fail, per_rank[r].last_line, per_rank[r].failing_rank, per_rank[r].last_text)
                             for r in behind if per_rank[r].last_line)[:16]
            rows = tuple(per_rank[r] for r in behind)
            first = FirstMissing(phase, tuple(a.failing_rank or a.rank for a in rows), rows, reached_by, evidence)
            break
    return Alignment(per_rank, first, bc.ranks, fc.ranks,
                     tuple(r for r in bc.ranks if r not in pairs), fc.stopped)
