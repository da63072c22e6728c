"""SGLang's GPU memory budget, rebuilt per rank from what the log printed.

SGLang sizes the KV cache from two free-memory readings (section 3 of the formats
reference): ``P``, free GiB after distributed init (``Load weight begin. avail mem``
shows it per rank), and ``A``, free GiB after the weights are loaded (``Load weight
end. avail mem``). Both are MIN-reduced across ranks before use:

    rest = A_min - P_min * (1 - mem_fraction_static)        (v0.2.5 .. v0.5.23)
    max_total_num_tokens = rest * 2**30 // cell_size

``P_min * (1 - f)`` is the headroom the formula leaves for everything that is
allocated after the KV pool: CUDA graphs, activations, communication buffers. The KV
pool is allocated before CUDA-graph capture, so a capture OOM means that headroom was
too small, while ``Not enough memory`` means ``rest <= 0``. All figures are GiB.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..model.records import NO_MEMORY, Memory
from ..model.run import RunSummary
from ..model.summary import Crash
from ..units import gib
from .sides import setting

#: Safety margin used when proposing a setting that would have fit.
MARGIN_GIB = 0.5


@dataclass(frozen=True)
class RankBudget:
    """One rank's memory, as logged and as SGLang's formula sees it (GiB)."""

    rank: str
    free_before_load: float | None      # P (this rank)
    weights: float | None
    free_after_load: float | None       # A (this rank)
    kv_pool: float | None               # K + V as allocated
    other_pools: float | None           # taken at KV allocation beyond K+V (req_to_token, ...)
    free_after_pools: float | None
    graphs: float | None                # CUDA-graph capture mem usage
    free_after_graphs: float | None
    kv_tokens: int | None


@dataclass(frozen=True)
class Budget:
    """The run-level budget: the formula's inputs (MIN over ranks) and its outputs."""

    mem_fraction_static: float | None
    p_min: float | None
    a_min: float | None
    reserved_headroom: float | None     # P_min * (1 - f)
    kv_budget: float | None             # rest = A_min - P_min * (1 - f)
    kv_allocated: float | None          # max K+V over ranks
    cell_bytes: float | None            # bytes per token (from tokens and K+V)
    graphs_max: float | None
    capture_free_min: float | None      # free at capture begin, worst rank
    total_capacity: float | None        # from an OOM message, when one was printed
    cuda_graph_max_bs: int | None
    ranks: tuple[RankBudget, ...]

    def rank(self, label: str) -> RankBudget | None:
        return next((r for r in self.ranks if r.rank == label), None)


def _min(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return min(vals) if vals else None


def _max(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def kv_formula(p_min: float | None, a_min: float | None, f: float | None) -> tuple[float | None, float | None]:
    """SGLang's KV budget from its terms: the headroom ``P_min*(1-f)`` left for graphs and
    activations, and ``rest = A_min - P_min*(1-f)`` for the pool (None where a term is missing)."""
    reserved = p_min * (1 - f) if p_min is not None and f is not None else None
    return reserved, (a_min - reserved if a_min is not None and reserved is not None else None)


def rank_budget(rank: str, m: Memory) -> RankBudget:
    a, kv, pool_end = m.load_end_avail_gib, m.kv_gib, m.pool_end_avail_gib
    other = None
    if a is not None and kv is not None and pool_end is not None:
        other = max(a - kv - pool_end, 0.0)
    return RankBudget(rank, m.load_begin_avail_gib, m.weights_gib, a, kv, _r(other),
                      pool_end, m.capture_mem_gib, m.capture_end_avail_gib, m.kv_tokens)


def budget(run: RunSummary) -> Budget:
    ranks = tuple(rank_budget(k, run.memory[k]) for k in run.ranks if k in run.memory)
    f = setting(run, "mem_fraction_static")
    f = float(f) if isinstance(f, (int, float)) else None
    p_min = _min([r.free_before_load for r in ranks])
    a_min = _min([r.free_after_load for r in ranks])
    reserved, rest = kv_formula(p_min, a_min, f)
    cells = [r.kv_pool * 2**30 / r.kv_tokens for r in ranks if r.kv_pool and r.kv_tokens]
    oom = run.crash.oom if run.crash else None
    bs = setting(run, "cuda_graph_max_bs")
    bs_list = next((m.capture_bs for m in run.memory.values() if m.capture_bs), None)
    if not isinstance(bs, int) and bs_list:
        bs = max(bs_list)
    return Budget(
        mem_fraction_static=f,
        p_min=p_min,
        a_min=a_min,
        reserved_headroom=_r(reserved),
        kv_budget=_r(rest),
        kv_allocated=_max([r.kv_pool for r in ranks]),
        cell_bytes=_r(sum(cells) / len(cells), 1) if cells else None,
        graphs_max=_max([r.graphs for r in ranks]),
        capture_free_min=_min([run.memory.get(r.rank, NO_MEMORY).capture_begin_avail_gib for r in ranks]),
        total_capacity=oom.total_gib if oom else None,
        cuda_graph_max_bs=bs if isinstance(bs, int) else None,
        ranks=ranks,
    )


@dataclass(frozen=True)
class Capture:
    """How far a CUDA-graph capture that ran out of memory got, computed once for every rule.

    A capture that failed never printed its "mem usage": what it had used when the
    allocation failed (free at capture begin minus free in the OOM message) plus the failed
    allocation is a lower bound of what the whole capture needs, not its size.
    """

    rank: str | None
    began_free_gib: float | None
    used_gib: float | None
    tried_gib: float | None
    needed_gib: float | None             # used + tried: at least this much
    progress: str | None                 # "10/20": graphs captured when it failed
    #: The baseline's whole capture, scaled to the failing run's max batch size when both are logged.
    expected_gib: float | None
    baseline_graphs_gib: float | None
    baseline_max_bs: int | None
    failing_max_bs: int | None
    #: needed - expected: at least this much more than the baseline's capture would take.
    excess_gib: float | None


def capture(run: RunSummary, base: Budget | None, fail: Budget) -> Capture | None:
    crash = run.crash
    oom = crash.oom if crash else None
    if crash is None or crash.phase != "cuda_graph_capture" or not oom:
        return None
    rank = crash.first_rank
    began = run.memory.get(rank or "", NO_MEMORY).capture_begin_avail_gib
    free, tried = oom.free_gib, oom.tried_gib
    used = round(max(began - free, 0.0), 4) if began is not None and free is not None else None
    needed = round(used + (tried or 0.0), 4) if used is not None else None
    prog = run.progress.get(rank or "", {}).get("cuda_graph_capture") or next(
        (p["cuda_graph_capture"] for p in run.progress.values() if "cuda_graph_capture" in p), None)
    graphs = base.graphs_max if base else None
    expected = graphs
    if graphs is not None and base and base.cuda_graph_max_bs and fail.cuda_graph_max_bs \
            and base.cuda_graph_max_bs != fail.cuda_graph_max_bs:
        # Capture memory grows roughly with the largest captured batch size.
        expected = graphs * fail.cuda_graph_max_bs / base.cuda_graph_max_bs
    return Capture(
        rank=rank, began_free_gib=began, used_gib=used, tried_gib=tried, needed_gib=needed,
        progress=f"{prog.n}/{prog.total}" if prog else None,
        expected_gib=_r(expected, 4), baseline_graphs_gib=graphs,
        baseline_max_bs=base.cuda_graph_max_bs if base else None, failing_max_bs=fail.cuda_graph_max_bs,
        excess_gib=round(needed - expected, 4) if needed is not None and expected is not None else None)


@dataclass(frozen=True)
class Advice:
    """A setting that would have fit, consistent with itself (never raise and lower one knob).

    ``kind`` is None when there is nothing to advise. ``estimate`` says the figures rest on
    the baseline's capture scaled to another batch size; ``lower_bound`` that the failing
    capture had not finished, so no setting can be promised to fit.
    """

    kind: str | None
    settings: Mapping[str, float | int]
    reasoning: tuple[str, ...]
    estimate: bool = False
    lower_bound: bool = False

    @staticmethod
    def none() -> Advice:
        return Advice(None, {}, ())


def advice(base: Budget | None, fail: Budget, crash: Crash | None, cap: Capture | None) -> Advice:
    if not crash or fail.p_min is None or fail.mem_fraction_static is None:
        return Advice.none()
    if crash.phase == "kv_cache_alloc":
        return _kv_advice(base, fail, crash)
    if cap is not None:
        return _capture_advice(base, fail, cap)
    return Advice.none()


def _kv_advice(base: Budget | None, fail: Budget, crash: Crash) -> Advice:
    f, p = fail.mem_fraction_static, fail.p_min
    assert f is not None and p is not None
    msg = crash.message or ""
    if not ("Not enough memory" in msg or "leave no GPU memory" in msg
            or (fail.kv_budget is not None and fail.kv_budget <= 0)) or fail.a_min is None:
        return Advice.none()
    # rest <= 0: the static fraction must grow until rest covers a useful pool.
    f_min = 1 - (fail.a_min - MARGIN_GIB) / p
    reasoning = [f"rest = A_min - P_min*(1-f) = {fail.a_min:.2f} - {p:.2f}*(1-{f}) = {gib(fail.kv_budget)}"
                 if fail.kv_budget is not None else "rest unknown"]
    graphs = (base.graphs_max if base else None) or 0.0
    headroom_after = p * (1 - f_min)
    reasoning.append(f"with f={_ceil(f_min)} the headroom P_min*(1-f) is {gib(headroom_after)}; "
                     f"CUDA graphs need {gib(graphs)} (baseline)" if base and base.graphs_max is not None else
                     f"with f={_ceil(f_min)} the headroom P_min*(1-f) is {gib(headroom_after)}")
    if headroom_after < graphs + MARGIN_GIB:
        return Advice("no_fraction_fits", {}, tuple(reasoning + [
            "no --mem-fraction-static leaves room for both the KV pool and the CUDA graphs: "
            "the weights are too large for this GPU at this parallelism (raise --tp, quantise, "
            "or lower --cuda-graph-max-bs)"]))
    return Advice("raise_mem_fraction_static", {"mem_fraction_static": _ceil(f_min)}, tuple(reasoning))


def _capture_advice(base: Budget | None, fail: Budget, cap: Capture) -> Advice:
    f, p = fail.mem_fraction_static, fail.p_min
    assert f is not None and p is not None
    have, used, needed = cap.began_free_gib, cap.used_gib, cap.needed_gib
    if have is None or used is None or needed is None:
        return Advice.none()
    reasoning = []
    if cap.expected_gib is not None:
        scaled = (f" at max bs {cap.baseline_max_bs}; at max bs {cap.failing_max_bs} expect ~{gib(cap.expected_gib)}"
                  if cap.expected_gib != cap.baseline_graphs_gib else "")
        reasoning.append(f"the baseline's whole capture took {gib(cap.baseline_graphs_gib)}{scaled}")
    where = f" at graph {cap.progress}" if cap.progress else ""
    reasoning.append(f"the failing capture started with {gib(have)} free and had used {gib(used)}{where} "
                     f"when an allocation of {gib(cap.tried_gib)} failed: it needs at least {gib(needed)}")
    settings: dict[str, float | int] = {}
    if cap.excess_gib is not None and cap.excess_gib > MARGIN_GIB and used > (cap.expected_gib or 0) + MARGIN_GIB:
        # It used more than a whole baseline capture and was not done: something else grew.
        reasoning.append(f"that is at least {gib(cap.excess_gib)} more than the baseline's capture: something "
                         "the baseline did not have allocates during capture; undo that change first")
        f_new = f - (cap.excess_gib + MARGIN_GIB) / p
        if f_new > 0.3:
            settings["mem_fraction_static"] = _floor(f_new)
            reasoning.append(f"to keep it, headroom must grow by at least {gib(cap.excess_gib + MARGIN_GIB)}: "
                             f"--mem-fraction-static {_floor(f_new)} or lower is needed, and may not be enough "
                             "(a lower bound: the capture had not finished)")
        return Advice("capture_grew", settings, tuple(reasoning), lower_bound=True)
    if cap.expected_gib is None:
        # Nothing tells how much the graphs not yet captured need: a setting can only be necessary.
        shortfall = max(needed - have, 0.0) + MARGIN_GIB
        f_new = f - shortfall / p
        if f_new > 0.3:
            reasoning.append(f"--mem-fraction-static {_floor(f_new)} or lower gives {gib(shortfall)} more headroom, "
                             "enough for what the capture had used but not known to be enough for the graphs "
                             "it had not captured yet: no setting can be promised to fit")
        return Advice("lower_bound", {}, tuple(reasoning), lower_bound=True)
    need = max(cap.expected_gib, needed)
    shortfall = max(need - have, 0.0) + MARGIN_GIB
    f_new = f - shortfall / p
    reasoning.append(f"shortfall ~{gib(shortfall)} incl. {MARGIN_GIB} GiB margin (an estimate from the "
                     "baseline's capture)")
    if f_new > 0.3:
        settings["mem_fraction_static"] = _floor(f_new)
    if base is not None and base.graphs_max and base.cuda_graph_max_bs:
        per_bs = base.graphs_max / base.cuda_graph_max_bs
        fit_bs = int(max(have - MARGIN_GIB, 0) / per_bs) // 8 * 8 if per_bs > 0 else 0
        if fail.cuda_graph_max_bs and 0 < fit_bs < fail.cuda_graph_max_bs:
            settings["cuda_graph_max_bs"] = fit_bs
    if not settings:
        return Advice.none()
    return Advice("more_headroom", settings, tuple(reasoning), estimate=True)


def _floor(x: float) -> float:
    return math.floor(x * 100) / 100


def _ceil(x: float) -> float:
    return math.ceil(x * 100) / 100
