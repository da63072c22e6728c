"""A KV-cache budget of zero or less: this launch cannot start.

SGLang sizes the KV pool from free memory before (P) and after (A) the weights load,
both the minimum over ranks (section 3.3 of the formats reference):

    rest = A_min - P_min * (1 - mem_fraction_static)        (GiB)
    max_total_num_tokens = rest * 2**30 // cell_size

When ``rest`` is zero or negative no token fits: the log then shows a non-positive
profiled value (``max_total_tokens=N is larger than the profiled value -561981``) or
``max_total_num_tokens`` <= 0, and SGLang raises "Not enough memory". ``rest`` is
positive exactly when ``mem_fraction_static > 1 - A_min / P_min`` (SGLang's own
"minimum viable" in v0.5.16+), which is the setting this fact proposes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.run import RunSummary
from .budget import Budget
from .sides import Evidence, ev_of

#: Keys of a rank's memory figures that hold a KV pool size in tokens, as the log printed them.
_TOKEN_FIGURES = ("profiled_max_tokens", "max_total_num_tokens")


@dataclass(frozen=True)
class KVBudgetFacts:
    """Whether the log shows a KV pool of zero tokens or fewer, and what would fit."""

    #: some rank printed a profiled KV pool size (or max_total_num_tokens) of zero or less
    not_positive: bool = False
    #: the ranks that printed it
    ranks: tuple[str, ...] = ()
    #: the smallest such value, in tokens
    tokens: int | None = None
    #: SGLang's rest = A_min - P_min*(1 - f), GiB, when the log shows A, P and f
    rest_gib: float | None = None
    mem_fraction_static: float | None = None
    #: 1 - A_min/P_min: rest is positive for any mem_fraction_static above it (when shown)
    min_viable_fraction: float | None = None
    evidence: tuple[Evidence, ...] = ()


def kv_budget_facts(run: RunSummary, budget: Budget) -> KVBudgetFacts:
    """The non-positive KV budget the run's own lines show, or ``not_positive`` False."""
    found: list[tuple[str, int, tuple[Evidence, ...]]] = []
    for rank, mem in run.memory.items():
        for key in _TOKEN_FIGURES:
            value = mem.figure(key)
            if isinstance(value, int) and value <= 0:
                source = mem.evidence.get("max_total_tokens_cap" if key == "profiled_max_tokens" else "max_total_tokens")
                found.append((rank, value, ev_of(source)))
                break
    if not found:
        return KVBudgetFacts()
    viable = None
    if budget.a_min is not None and budget.p_min:
        viable = round(1 - budget.a_min / budget.p_min, 4)
    return KVBudgetFacts(
        not_positive=True,
        ranks=tuple(r for r, _, _ in found),
        tokens=min(v for _, v, _ in found),
        rest_gib=budget.kv_budget,
        mem_fraction_static=budget.mem_fraction_static,
        min_viable_fraction=viable,
        evidence=tuple(e for _, _, evs in found[:8] for e in evs),
    )
