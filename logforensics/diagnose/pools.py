"""Facts about a hybrid model's pools for the rules: which pool bound admission, how the
pools differ between two runs, and the order of KV allocation and graph capture.

Why here: which knob helps depends on which pool filled. SGLang sizes the pools of one KV
budget against each other, so a knob that grows one pool shrinks another: the advice is
per pool, and always in the direction that gives the binding pool more room.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..model.records import Cite, Pool
from ..model.run import RunSummary
from .serving_facts import Step
from .sides import Evidence, ev_of

#: What a pool is, in a sentence's words.
POOL_NAMES = {"full": "full-attention KV", "swa": "sliding-window (SWA) KV", "mamba": "Mamba state",
              "hisparse_gpu": "HiSparse device", "hisparse_cpu": "HiSparse host", "kv": "KV",
              "c4": "DeepSeek V4 c4", "c128": "DeepSeek V4 c128"}

#: Per (binding pool, the pool that shares its budget), the knob that gives the binding pool
#: more room, and why (SGLang's server arguments: ``--swa-full-tokens-ratio`` is SWA tokens
#: per full token, so it moves room between the two attention pools;
#: ``--mamba-full-memory-ratio`` is the Mamba states' memory per unit of full KV memory).
_POOL_STEPS: dict[tuple[str, str], Step] = {
    ("swa", "full"): Step("--swa-full-tokens-ratio higher",
                          "the SWA pool gets more tokens of the same KV memory (the full pool fewer), and the "
                          "full pool still had room when the SWA pool was full"),
    ("full", "swa"): Step("--swa-full-tokens-ratio lower",
                          "the full-attention pool gets more tokens of the same KV memory (the SWA pool fewer), "
                          "and the SWA pool still had room when the full pool was full"),
    ("mamba", "full"): Step("--mamba-full-memory-ratio higher (or a larger --max-mamba-cache-size)",
                            "more Mamba states of the same memory (fewer full KV tokens): each running request "
                            "holds its own state, and the full pool still had room when the state pool was full"),
    ("full", "mamba"): Step("--mamba-full-memory-ratio lower",
                            "more full KV tokens of the same memory (fewer Mamba states), and the state pool "
                            "still had room when the full pool was full"),
}


#: The knob that moves memory between the full-attention pool and another of one KV budget.
SPLIT_KNOBS = {"swa": "--swa-full-tokens-ratio", "mamba": "--mamba-full-memory-ratio"}


def pool_advice(binding: str | None, others: Mapping[str, float]) -> tuple[Step, ...]:
    """The knob that moves room to the binding pool from a pool that still had some (usage
    below 0.9 at the retraction); nothing when no other pool had room to give."""
    if binding is None:
        return ()
    return tuple(step for (pool, other), step in _POOL_STEPS.items()
                 if pool == binding and other in others and others[other] < 0.9)


@dataclass(frozen=True)
class PoolDelta:
    """One pool in both runs: its size, memory and peak use (``None`` where not printed)."""

    pool: str
    name: str
    unit: str
    size_baseline: Any
    size_failing: Any
    gib_baseline: float | None
    gib_failing: float | None
    peak_baseline: float | None
    peak_failing: float | None
    changed: bool
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class PoolFacts:
    """A hybrid model's pools (``failing.pools``): what bound admission, what changed."""

    hybrid: bool = False
    #: the pool that was fullest at most retractions, its usage then, the others' usage
    binding: str | None = None
    binding_name: str | None = None
    binding_usage: float | None = None
    binding_count: int = 0
    others: Mapping[str, float] = field(default_factory=dict)
    binding_evidence: tuple[Evidence, ...] = ()
    #: knobs that give the binding pool room (serving_facts puts them first in its advice)
    advice: tuple[Step, ...] = ()
    #: "kv_before_graphs" | "graphs_before_kv" | None, and whether the environment asked for
    #: post-capture sizing that did not happen
    order: str | None = None
    env_set: bool = False
    fell_back: bool = False
    order_evidence: tuple[Evidence, ...] = ()
    #: the pools of both runs, pool by pool (diff); ``changed`` those whose size or memory moved
    deltas: tuple[PoolDelta, ...] = ()
    changed: tuple[str, ...] = ()
    #: a crashed run with several pools: each pool before the crash, the fullest of them on the
    #: last batch line before it (its name, usage, the others' usage), and the knob that gives it
    #: room when every pool shrinks (``pool_advice``)
    at_crash: tuple[PoolAtCrash, ...] = ()
    crash_pool: str | None = None
    crash_pool_name: str | None = None
    crash_pool_usage: float | None = None
    crash_others: Mapping[str, float] = field(default_factory=dict)
    crash_advice: tuple[Step, ...] = ()
    crash_evidence: tuple[Evidence, ...] = ()
    #: the knobs that split one KV budget between the run's pools (``SPLIT_KNOBS``)
    split_knobs: tuple[str, ...] = ()


@dataclass(frozen=True)
class PoolAtCrash:
    """One pool of a run with several, as the log showed it before the crash: its size, its use
    on the last batch line before the crash's line (``None``: no batch line before it printed
    the pool), and the evictable part SGLang's invariant checker printed (``None``: not printed)."""

    pool: str
    name: str
    unit: str
    size: Any
    gib: float | None
    usage: float | None
    used: Any
    available: int | None
    evictable: int | None
    evidence: tuple[Evidence, ...]


#: A pool one run lacks (its figures all None).
NO_POOL = Pool(keys=())


def _pools(run: RunSummary | None) -> dict[str, Pool]:
    return run.pools.pools if run is not None and run.pools is not None else {}


def pool_facts(run: RunSummary, baseline: RunSummary | None = None) -> PoolFacts:
    p = run.pools
    pools = _pools(run)
    bound = p.bound_by if p is not None else {}
    binding = max(bound, key=lambda k: bound[k]) if bound else None
    rec = [r for r in (p.retractions if p is not None else []) if r.pool == binding]
    first = rec[0] if rec else None
    evidence: list[Evidence] = []
    for r in rec[:2]:
        evidence += ev_of(r.usage_at) + ev_of(r.at)
    order = p.order if p is not None else None
    order_ev: list[Evidence] = []
    if order is not None:
        for e in order.env_at:
            order_ev += ev_of(e)
        for at in (order.va_at, order.kv_at, order.capture_at):
            order_ev += ev_of(at)
        for e in order.post_capture_at[:2]:
            order_ev += ev_of(e)
    others = dict(first.others) if first is not None else {}
    deltas, changed = _deltas(run, baseline) if baseline is not None else ((), ())
    at_crash = _at_crash(run) if len(pools) > 1 else ()
    used = {a.pool: a.usage for a in at_crash if a.usage is not None}
    crash_pool = max(used, key=lambda k: (used[k], k)) if used else None
    crash_others = {k: v for k, v in used.items() if k != crash_pool}
    return PoolFacts(
        hybrid=len(pools) > 1, binding=binding, binding_name=POOL_NAMES.get(binding or "", binding),
        binding_usage=first.usage if first is not None else None, binding_count=bound.get(binding, 0) if binding else 0,
        others=others, binding_evidence=tuple(dict.fromkeys(evidence)),
        advice=pool_advice(binding, dict(others)), order=order.order if order is not None else None,
        env_set=bool(order is not None and order.env_set),
        fell_back=bool(order is not None and order.fell_back), order_evidence=_by_line(order_ev),
        deltas=deltas, changed=changed, at_crash=at_crash, crash_pool=crash_pool,
        crash_pool_name=POOL_NAMES.get(crash_pool or "", crash_pool), crash_pool_usage=used.get(crash_pool or ""),
        crash_others=crash_others, crash_advice=pool_advice(crash_pool, crash_others),
        crash_evidence=_by_line([e for a in at_crash for e in a.evidence]),
        split_knobs=tuple(SPLIT_KNOBS[a.pool] for a in at_crash if a.pool in SPLIT_KNOBS))


def _before(where: Cite | None, crash_file: str | None, crash_line: int) -> bool:
    """Whether a record was printed before the crash's line, in the crash's file."""
    if where is None or where.line is None:
        return False
    return bool(where.line < crash_line and (crash_file is None or where.file in (None, crash_file)))


def _at_crash(run: RunSummary) -> tuple[PoolAtCrash, ...]:
    """Each pool as the log showed it before the crash: the size it was given, its use on the
    last batch line that printed it when that line came before the crash (a later one, of a rank
    that went on, is not the use at the crash), and the invariant checker's evictable part."""
    crash = run.crash
    if crash is None:
        return ()
    out = []
    for pool, rec in _pools(run).items():
        state = rec.state
        before = _before(rec.last_at, crash.file, crash.line)
        evidence = ev_of(rec.size_at) + (ev_of(rec.last_at) if before else ()) + ev_of(state.at if state else None)
        out.append(PoolAtCrash(pool, POOL_NAMES.get(pool, pool), rec.unit or "tokens", rec.size,
                               rec.gib, rec.last_usage if before else None,
                               rec.last_used if before else None, state.available if state else None,
                               state.evictable if state else None, evidence))
    return tuple(out)


def _by_line(evidence: list[Evidence]) -> tuple[Evidence, ...]:
    return tuple(sorted(dict.fromkeys(evidence), key=lambda e: (e.file or "", e.line or 0)))


def _deltas(run: RunSummary, baseline: RunSummary) -> tuple[tuple[PoolDelta, ...], tuple[str, ...]]:
    """The pools of both runs, pool by pool, in the failing run's order then the baseline's."""
    f, b = _pools(run), _pools(baseline)
    out: list[PoolDelta] = []
    for pool in dict.fromkeys([*f, *b]):
        fp, bp = f.get(pool, NO_POOL), b.get(pool, NO_POOL)
        size_moved = fp.size is not None and bp.size is not None and fp.size != bp.size
        gib_moved = fp.gib is not None and bp.gib is not None and abs(fp.gib - bp.gib) > 0.05
        only_one = (pool in f) != (pool in b)
        evidence = ev_of(fp.size_at) + ev_of(bp.size_at.put(file=baseline.file) if bp.size_at else None)
        out.append(PoolDelta(pool, POOL_NAMES.get(pool, pool), (fp.unit if pool in f else None)
                             or (bp.unit if pool in b else None) or "tokens",
                             bp.size, fp.size, bp.gib, fp.gib,
                             bp.peak_usage, fp.peak_usage, size_moved or gib_moved or only_one,
                             evidence))
    return tuple(out), tuple(d.pool for d in out if d.changed)
