"""Facts computed from two runs, exposed to rules by name (``facts.<name>``).

Rules stay declarative: anything that needs real computation (aligning phases across
runs, the memory budget, tolerances, what each log covers) happens here, once, in typed
frozen dataclasses, and rule templates only word the results. Every fact that points at
log lines carries :class:`Evidence` so findings can cite them. A comparison is made only
where both logs cover the thing compared (``sides``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model.rank import rank_sort_key
from ..model.records import NO_MEMORY, Keyed
from ..model.run import RunSummary
from .alignment import Alignment, alignment
from .budget import Advice, Budget, Capture, advice, budget, capture, kv_formula
from .crash import CrashFacts, HangFacts, crash_facts, hang_facts, same_crash
from .environment import EnvFacts, env_facts
from .kvbudget import KVBudgetFacts, kv_budget_facts
from .nodes import NodeFacts, PDFacts, node_facts, pd_facts
from .pools import PoolFacts, pool_facts
from .serving_facts import ServingFacts, TimerFacts, serving_facts, timer_facts
from .settings import ConfigDiff, CustomAllreduce, config_diff, custom_ar
from .sides import Coverage, Evidence, Setup, coverage, ev, ev_of, notice_ev, pair_ranks, setup
from .validity import Validity, validity
from .versions import VersionDelta, version_delta

#: Figures compared rank by rank, with the tolerance (absolute, in the figure's unit).
MEMORY_FIGURES: dict[str, float] = {
    "load_begin_avail_gib": 0.05,
    "weights_gib": 0.05,
    "load_end_avail_gib": 0.05,
    "kv_tokens": 0.0,  # relative tolerance handled below
    "kv_gib": 0.05,
    "pool_end_avail_gib": 0.05,
    "capture_begin_avail_gib": 0.05,
    "capture_mem_gib": 0.05,
    "capture_end_avail_gib": 0.05,
}
TIME_FIGURES = ("load_elapsed_s", "capture_elapsed_s")
KV_TOKENS_REL_TOL = 0.01
TIME_REL_TOL = 0.5
THROUGHPUT_REL_TOL = 0.10
COMPARABLE_LOAD_REL = 0.3


# ---------------------------------------------------------------------------- memory
@dataclass(frozen=True)
class FigureDelta:
    """One figure of one rank in both logs (only figures both print)."""

    rank: str
    figure: str
    baseline: float | None
    failing: float | None
    delta: float | None
    evidence: tuple[Evidence, ...] = ()


@dataclass(frozen=True)
class RankKV:
    """One rank's KV pool as its log printed it."""

    rank: str
    kv_gib: float
    kv_tokens: int | None
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class MemoryDeltas:
    """Per-rank figures both logs print, and those that moved beyond their tolerance."""

    ranks: Mapping[str, Mapping[str, FigureDelta]]
    changed: tuple[FigureDelta, ...]
    max_abs_delta: Mapping[str, float]
    evidence: tuple[Evidence, ...]
    load_end_avail_max_abs_delta_gib: float | None
    #: "Load weight end" lines of the crashed rank in both runs (MEM01 cites them).
    load_end_evidence: tuple[Evidence, ...]
    #: KV tokens that shift of free memory after loading is worth (by the failing run's cell size).
    load_end_shift_tokens: int | None
    #: The baseline's KV pool on the rank that failed first (paired by rank), when it logged one.
    baseline_kv: RankKV | None
    #: Ranks whose weights were not compared: a log printed a negative "mem usage" at "Load
    #: weight end" (free memory rose while the weights loaded, as when another process freed
    #: memory on the GPU): a difference of free memory, no size of the weights.
    weights_not_compared: tuple[str, ...] = ()

    @staticmethod
    def empty() -> MemoryDeltas:
        return MemoryDeltas({}, (), {}, (), None, (), None, None)


_FIGURE_EVIDENCE = {
    "load_begin_avail_gib": "load_weight_begin", "weights_gib": "load_weight_end",
    "load_end_avail_gib": "load_weight_end", "load_elapsed_s": "load_weight_end",
    "kv_tokens": "kv_cache_alloc", "kv_gib": "kv_cache_alloc", "pool_end_avail_gib": "memory_pool_end",
    "capture_begin_avail_gib": "capture_begin", "capture_mem_gib": "capture_end",
    "capture_end_avail_gib": "capture_end", "capture_elapsed_s": "capture_end",
}


def _mem_evidence(run: RunSummary, rank: str | None, key: str) -> tuple[Evidence, ...]:
    return ev_of(run.memory.get(rank or "", NO_MEMORY).evidence.get(_FIGURE_EVIDENCE.get(key, "")))


def memory_deltas(fail: RunSummary, base: RunSummary, cell_bytes: float | None) -> MemoryDeltas:
    pairs = pair_ranks(list(base.memory), list(fail.memory))
    rows: dict[str, dict[str, FigureDelta]] = {}
    changed: list[FigureDelta] = []
    max_abs: dict[str, float] = {}
    unweighed: list[str] = []
    for rank, frank in pairs.items():
        bm, fm = base.memory.get(rank, NO_MEMORY), fail.memory.get(frank, NO_MEMORY)
        row: dict[str, FigureDelta] = {}
        for key, tol in MEMORY_FIGURES.items():
            b, f = bm.figure(key), fm.figure(key)
            if b is None or f is None:
                continue  # a figure one log does not print is not a change
            if key == "weights_gib" and min(b, f) < 0:
                unweighed.append(rank)
                continue
            d = FigureDelta(rank, key, b, f, round(f - b, 4), _mem_evidence(fail, frank, key) + _mem_evidence(base, rank, key))
            row[key] = d
            max_abs[key] = max(max_abs.get(key, 0.0), abs(f - b))
            if abs(f - b) > (abs(b) * KV_TOKENS_REL_TOL if key == "kv_tokens" else tol):
                changed.append(d)
        for key in TIME_FIGURES:
            b, f = bm.figure(key), fm.figure(key)
            if b is not None and f is not None:
                d = FigureDelta(rank, key, b, f, round(f - b, 2), _mem_evidence(fail, frank, key) + _mem_evidence(base, rank, key))
                row[key] = d
                if b > 0 and abs(f - b) / b > TIME_REL_TOL and abs(f - b) > 5:
                    changed.append(d)
        rows[rank] = row
    crash_rank = fail.crash.first_rank if fail.crash else None
    base_rank = next((b for b, f in pairs.items() if f == crash_rank), None)
    load_end = _mem_evidence(fail, crash_rank, "load_end_avail_gib") + _mem_evidence(base, base_rank, "load_end_avail_gib")
    bm = base.memory.get(base_rank or "", NO_MEMORY)
    baseline_kv = (RankKV(base_rank, bm.kv_gib, bm.kv_tokens, _mem_evidence(base, base_rank, "kv_gib"))
                   if base_rank and bm.kv_gib is not None else None)
    shift = max_abs.get("load_end_avail_gib")
    tokens = int(shift * 2**30 / cell_bytes) if shift is not None and cell_bytes else None
    return MemoryDeltas(rows, tuple(changed), {k: round(v, 4) for k, v in max_abs.items()},
                        tuple(e for c in changed for e in c.evidence)[:12], _round(shift), load_end, tokens, baseline_kv,
                        tuple(unweighed))


def _round(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


# ---------------------------------------------------------------------------- budget terms
#: The terms of SGLang's KV-cache budget, in the order the formula uses them, and their unit.
BUDGET_TERMS = (
    ("p_min", "P_min: free before weights (min over ranks)", "GiB"),
    ("a_min", "A_min: free after weights (min over ranks)", "GiB"),
    ("mem_fraction_static", "mem_fraction_static", ""),
    ("reserved_headroom", "headroom P_min*(1-f) for graphs and activations", "GiB"),
    ("kv_budget", "KV budget A_min - P_min*(1-f)", "GiB"),
    ("kv_allocated", "KV pool allocated (K+V, max over ranks)", "GiB"),
    ("capture_free_min", "free when CUDA-graph capture began (min over ranks)", "GiB"),
    ("graphs_max", "CUDA-graph capture memory (max over ranks)", "GiB"),
)


@dataclass(frozen=True)
class BudgetTerm:
    """One term of SGLang's KV-cache budget in both runs."""

    term: str
    label: str
    unit: str
    baseline: float | None
    failing: float | None
    delta: float | None
    #: Moved by more than 0.05 (both logs print it); a term one log lacks is not a move.
    changed: bool
    #: "at least": a capture that failed stands in with what it had used (a lower bound).
    note: str = ""


#: Terms that are the least or the most of one figure over the ranks (``RankBudget`` fields).
_OVER_RANKS = {"p_min": ("free_before_load", min), "a_min": ("free_after_load", min),
               "kv_allocated": ("kv_pool", max), "graphs_max": ("graphs", max)}


def _over_shared_ranks(base: Budget, fail: Budget) -> tuple[dict[str, tuple[float, float]], list[str]]:
    """The per-rank terms taken over the ranks both logs show the figure for, where one log
    shows it for ranks the other does not (a build that prints 'Load weight begin' on TP0
    only, a window that starts late): one rank's figure is never set against eight ranks'
    least. Also the headroom and the KV budget, from those. The ranks used, for the note."""
    out: dict[str, tuple[float, float]] = {}
    used: set[str] = set()
    for key, (attr, pick) in _OVER_RANKS.items():
        b = {r.rank: getattr(r, attr) for r in base.ranks if getattr(r, attr) is not None}
        f = {r.rank: getattr(r, attr) for r in fail.ranks if getattr(r, attr) is not None}
        both = b.keys() & f.keys()
        if both and not b.keys() == f.keys() == both:
            out[key] = (pick(b[k] for k in both), pick(f[k] for k in both))
            used |= both
    if "p_min" in out or "a_min" in out:
        sides = [kv_formula(out["p_min"][j] if "p_min" in out else run.p_min,
                            out["a_min"][j] if "a_min" in out else run.a_min, run.mem_fraction_static)
                 for j, run in enumerate((base, fail))]
        for i, key in enumerate(("reserved_headroom", "kv_budget")):
            x, y = sides[0][i], sides[1][i]
            if x is not None and y is not None:
                out[key] = (round(x, 3), round(y, 3))
    return out, sorted(used, key=rank_sort_key)


def budget_terms(base: Budget, fail: Budget, bcap: Capture | None, fcap: Capture | None) -> tuple[BudgetTerm, ...]:
    out = []
    shared, used = _over_shared_ranks(base, fail)
    for key, label, unit in BUDGET_TERMS:
        b, f = getattr(base, key), getattr(fail, key)
        note = ""
        if key in shared:
            (b, f), note = shared[key], "over " + ", ".join(used[:4]) + (", ..." if len(used) > 4 else "") \
                + ": the ranks both logs show it for"
        if key == "graphs_max":
            # Both sides alike: a capture that died stands in with what it had used, at least.
            if b is None and bcap is not None and bcap.needed_gib is not None:
                b, note = bcap.needed_gib, "baseline: at least, its capture failed"
            if f is None and fcap is not None and fcap.needed_gib is not None:
                f, note = fcap.needed_gib, (note + "; " if note else "") + "failing: at least, its capture failed"
        delta = round(f - b, 4) if b is not None and f is not None else None
        out.append(BudgetTerm(key, label, unit, b, f, delta, delta is not None and abs(delta) > 0.05, note))
    return tuple(out)


@dataclass(frozen=True)
class BudgetFacts:
    """SGLang's memory budget rebuilt for each run, and the setting that would have fit."""

    failing: Budget
    baseline: Budget | None
    advice: Advice


# ---------------------------------------------------------------------------- throughput
@dataclass(frozen=True)
class AcceptLength:
    """Median speculative accept length in both runs."""

    baseline: float | None
    failing: float | None
    ratio: float | None


@dataclass(frozen=True)
class Throughput:
    """Decode throughput in both runs; a ratio only when both have five records or more."""

    baseline: Mapping[str, Any]
    failing: Mapping[str, Any]
    ratio: float | None = None
    drop_pct: float | None = None
    comparable_load: bool = False
    running_req_baseline: float | None = None
    running_req_failing: float | None = None
    regressed: bool = False
    accept_len: AcceptLength | None = None


def throughput(fail: RunSummary, base: RunSummary) -> Throughput:
    bq, fq = base.throughput.decode_gen_tok_s, fail.throughput.decode_gen_tok_s
    b, f = bq.to_dict(), fq.to_dict()
    ba, fa = base.throughput.accept_len, fail.throughput.accept_len
    accept = None
    if ba.count and fa.count:
        accept = AcceptLength(ba.median, fa.median,
                              round(fa.median / ba.median, 4) if ba.median and fa.median is not None else None)
    if not (bq.count >= 5 and fq.count >= 5 and bq.median and fq.median is not None):
        return Throughput(b, f, accept_len=accept)
    ratio = fq.median / bq.median
    br = base.throughput.running_req.median
    fr = fail.throughput.running_req.median
    comparable = bool(br and fr and abs(fr - br) / max(br, 1) <= COMPARABLE_LOAD_REL)
    return Throughput(b, f, round(ratio, 4), round((1 - ratio) * 100, 1), comparable, br, fr,
                      ratio < 1 - THROUGHPUT_REL_TOL, accept)


# ---------------------------------------------------------------------------- hang, unbalanced, novelty
@dataclass(frozen=True)
class Unbalanced:
    """GPUs with much less free memory than the others, and the ranks that raised."""

    unbalanced: bool
    max_gib: float | None = None
    min_gib: float | None = None
    low_ranks: Mapping[str, float | None] = dataclasses.field(default_factory=dict)
    #: Per low rank, how much less free memory it had than the best rank (GiB).
    short_of_best: Mapping[str, float] = dataclasses.field(default_factory=dict)
    raising_ranks: tuple[str, ...] = ()
    evidence: tuple[Evidence, ...] = ()


_UNBALANCED_NUMS = re.compile(r"(?:pre_model_load_memory|min_per_gpu_memory)=([\d.]+), local_gpu_memory=([\d.]+)")


def unbalanced(run: RunSummary) -> Unbalanced:
    """GPUs with much less free memory than the others (another process on them).

    SGLang MIN-reduces free memory across ranks and raises on every rank whose own free
    memory is over 1/0.9 of that minimum, so the ranks that raise are the healthy ones;
    the occupied GPU is the rank that did not raise, whose free memory is the minimum.
    """
    vals = {r: m.load_begin_avail_gib for r, m in run.memory.items() if m.load_begin_avail_gib is not None}
    notices = run.notices.get("unbalanced_memory", [])
    raised = [e for e in run.exceptions if "memory capacity is unbalanced" in (e.message or "")]
    if not (vals or notices or raised):
        return Unbalanced(False)
    min_gib = local_gib = None
    for e in raised:
        m = _UNBALANCED_NUMS.search(e.message or "")
        if m:
            min_gib, local_gib = float(m.group(1)), float(m.group(2))
    raising = tuple(sorted({r for e in raised for r in e.ranks if r}))
    top = max([*vals.values(), *([local_gib] if local_gib else [])], default=None)
    low: dict[str, float | None] = {r: v for r, v in vals.items() if top and v < 0.9 * top}
    if raised and not low:  # the ranks that did not raise hold the minimum
        low = {r: (vals.get(r) if vals.get(r) is not None else min_gib) for r in run.ranks if r not in raising}
    evidence = [e for r in low for e in _mem_evidence(run, r, "load_begin_avail_gib")]
    evidence += [notice_ev(n) for n in notices[:4]]
    evidence += [ev(run, e.first_line, (e.ranks or [None])[0], (e.message or "")[:300]) for e in raised[:2]]
    short = {r: round(top - v, 4) for r, v in low.items() if top is not None and v is not None}
    return Unbalanced(bool(low or notices or raised), top, min_gib, low, short, raising, tuple(evidence))


@dataclass(frozen=True)
class NovelShape:
    """An unknown line shape (numbers and ids masked) that only the failing run has."""

    shape: str
    count: int
    first_line: int | None
    example: str
    #: The rank of the shape's first line (None when that line names no rank).
    rank: str | None


#: A bare hexadecimal id in a shape, its digits masked ('0ed52c95...' reads 'NedNcN...'): a request's
#: uuid4().hex differs from run to run, so two runs' shapes are compared with it masked too.
_BARE_HEX = re.compile(r"(?<![\w])(?=[a-fN]*N[a-fN]*N)(?=[a-fN]*[a-f])[a-fN]{12,}(?![\w])")


def _id_free(shape: str) -> str:
    """``shape`` with bare hex ids masked; a shape cut at its 160 characters is compared on its
    first 120 after that (the ids masked to one letter moved its cut)."""
    free = _BARE_HEX.sub("H", shape)
    return free[:120] if len(shape) >= 160 and free != shape else free


def novel_lines(fail: RunSummary, base: RunSummary) -> tuple[NovelShape, ...]:
    known = {_id_free(s) for s in base.coverage.unrecognised_shapes}
    out = [NovelShape(i.shape, i.count, i.first_line, i.example or i.shape, i.first_rank)
           for i in fail.coverage.top_unrecognised if _id_free(i.shape) not in known]
    listed = {o.shape for o in out}
    extra = [(s, n) for s, n in fail.coverage.unrecognised_shapes.items()
             if _id_free(s) not in known and s not in listed]
    for shape, count in sorted(extra, key=lambda kv: -kv[1])[: max(0, 10 - len(out))]:
        out.append(NovelShape(shape, count, None, shape, None))
    return tuple(out)


# ---------------------------------------------------------------------------- all facts
@dataclass(frozen=True)
class Sides:
    """What each log covers (``baseline`` null for a single-run diagnosis)."""

    failing: Coverage
    baseline: Coverage | None


@dataclass(frozen=True)
class Facts:
    """Everything rules can read as ``facts.<name>`` (docs/rules.md lists each field)."""

    coverage: Sides
    setup: Setup
    crash: CrashFacts | None
    baseline_crash: CrashFacts | None
    #: The baseline died the same way as the failing run (same exception, phase, message).
    same_crash: bool
    capture: Capture | None
    budget: BudgetFacts
    budget_terms: tuple[BudgetTerm, ...]
    budget_moved: bool
    #: The names of the terms that moved (MEM04's title).
    budget_moved_terms: tuple[str, ...]
    alignment: Alignment
    memory: MemoryDeltas
    config: ConfigDiff
    custom_ar: CustomAllreduce
    throughput: Throughput
    novel: tuple[NovelShape, ...]
    novel_evidence: tuple[Evidence, ...]
    hang: HangFacts
    unbalanced: Unbalanced
    #: A KV pool of zero tokens or fewer: this launch cannot start (MEM05).
    kv_budget: KVBudgetFacts
    nodes: NodeFacts
    pd: PDFacts
    #: The timer of a hang, its knob, who is behind, what to switch on next (diagnose/serving_facts.py).
    timer: TimerFacts
    #: The serving phase over time: collapse, full KV pool, retraction storms, cache hits.
    serving: ServingFacts
    #: Success that did no work: a benchmark with no generated token, requests that ran and
    #: generated nothing (diagnose/validity.py).
    validity: Validity
    #: What differs besides the settings: versions, GPUs, topology, allocation (diagnose/environment.py).
    environment: EnvFacts = EnvFacts.empty()
    #: The two runs' SGLang versions (and commits) and the declared defaults that changed
    #: between them (diagnose/versions.py, model/serverargs_defaults.tsv).
    versions: VersionDelta = VersionDelta.empty()
    #: A hybrid model's pools: the pool that bound admission, the pools of both runs, the
    #: order of KV allocation and graph capture (diagnose/pools.py).
    pools: PoolFacts = PoolFacts()


def compute(failing: RunSummary, baseline: RunSummary | None) -> Facts:
    """All facts for one comparison (baseline may be None: single-run diagnosis)."""
    fb = budget(failing)
    bb = budget(baseline) if baseline else None
    fcap = capture(failing, bb, fb)
    bcap = capture(baseline, None, bb) if baseline and bb else None
    fc = coverage(failing)
    bc = coverage(baseline) if baseline else None
    crash, base_crash = crash_facts(failing), crash_facts(baseline) if baseline else None
    terms = budget_terms(bb, fb, bcap, fcap) if bb else ()
    novel = novel_lines(failing, baseline) if baseline else ()
    pf = pool_facts(failing, baseline)
    sf = serving_facts(failing, baseline)
    if sf.kv_advice and pf.advice:  # the binding pool's own knob first
        sf = dataclasses.replace(sf, kv_advice=pf.advice + sf.kv_advice)
    return Facts(
        coverage=Sides(fc, bc),
        setup=setup(baseline, failing) if baseline else Setup.empty(),
        crash=crash, baseline_crash=base_crash, same_crash=same_crash(crash, base_crash),
        capture=fcap,
        budget=BudgetFacts(fb, bb, advice(bb, fb, failing.crash, fcap)),
        budget_terms=terms, budget_moved=any(t.changed for t in terms),
        budget_moved_terms=tuple(t.term for t in terms if t.changed),
        alignment=alignment(failing, baseline, fc, bc) if baseline and bc else Alignment.empty(),
        memory=memory_deltas(failing, baseline, fb.cell_bytes) if baseline else MemoryDeltas.empty(),
        config=config_diff(failing, baseline) if baseline else ConfigDiff.empty(),
        custom_ar=custom_ar(failing, baseline),
        throughput=throughput(failing, baseline) if baseline else Throughput({}, {}),
        novel=novel,
        novel_evidence=tuple(ev(failing, n.first_line, n.rank, n.example) for n in novel if n.first_line)[:6],
        hang=hang_facts(failing),
        unbalanced=unbalanced(failing),
        kv_budget=kv_budget_facts(failing, fb),
        nodes=node_facts(failing, baseline),
        pd=pd_facts(failing),
        timer=timer_facts(failing),
        serving=sf,
        validity=validity(failing),
        environment=env_facts(failing, baseline) if baseline else EnvFacts.empty(),
        versions=version_delta(failing, baseline) if baseline else VersionDelta.empty(),
        pools=pf,
    )


def plain(value: Any) -> Any:
    """A JSON-ready copy of facts (dataclasses as mappings, tuples and sets as lists; the
    summary's records as ``summary --json`` writes them)."""
    if isinstance(value, Keyed):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(plain(v) for v in value)
    return value
