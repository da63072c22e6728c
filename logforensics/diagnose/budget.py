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
from dataclasses import asdict, dataclass
from typing import Any

from ..model.run import RunSummary
from ..units import gib

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

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ranks"] = {r["rank"]: r for r in d["ranks"]}
        return d


def _min(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return min(vals) if vals else None


def _max(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def arg(run: RunSummary, name: str) -> Any:
    """A server argument from the ``server_args`` dump, else from the launch command."""
    if name in run.server_args:
        return run.server_args[name]
    return run.launch_args.get(name)


def rank_budget(rank: str, m: dict[str, Any]) -> RankBudget:
    a, kv, pool_end = m.get("load_end_avail_gib"), m.get("kv_gib"), m.get("pool_end_avail_gib")
    other = None
    if a is not None and kv is not None and pool_end is not None:
        other = max(a - kv - pool_end, 0.0)
    return RankBudget(rank, m.get("load_begin_avail_gib"), m.get("weights_gib"), a, kv, _r(other),
                      pool_end, m.get("capture_mem_gib"), m.get("capture_end_avail_gib"), m.get("kv_tokens"))


def budget(run: RunSummary) -> Budget:
    ranks = tuple(rank_budget(k, run.memory.get(k, {})) for k in run.ranks if k in run.memory)
    f = arg(run, "mem_fraction_static")
    f = float(f) if isinstance(f, (int, float)) else None
    p_min = _min([r.free_before_load for r in ranks])
    a_min = _min([r.free_after_load for r in ranks])
    reserved = p_min * (1 - f) if p_min is not None and f is not None else None
    rest = a_min - reserved if a_min is not None and reserved is not None else None
    cells = [r.kv_pool * 2**30 / r.kv_tokens for r in ranks if r.kv_pool and r.kv_tokens]
    oom = (run.crash or {}).get("oom") or {}
    bs = arg(run, "cuda_graph_max_bs")
    bs_list = next((m.get("capture_bs") for m in run.memory.values() if m.get("capture_bs")), None)
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
        capture_free_min=_min([run.memory.get(r.rank, {}).get("capture_begin_avail_gib") for r in ranks]),
        total_capacity=oom.get("total_gib"),
        cuda_graph_max_bs=bs if isinstance(bs, int) else None,
        ranks=ranks,
    )


def advice(base: Budget | None, fail: Budget, crash: dict[str, Any] | None) -> dict[str, Any]:
    """What setting would have fit, consistent with itself (never raise and lower one knob).

    Returns ``{"kind": ..., "settings": {...}, "reasoning": [...]}``; kind is None when
    there is nothing to advise.
    """
    out = _advice(base, fail, crash)
    return {"kind": out.get("kind"), "settings": out.get("settings", {}), "reasoning": out.get("reasoning", [])}


def _advice(base: Budget | None, fail: Budget, crash: dict[str, Any] | None) -> dict[str, Any]:
    if not crash or fail.p_min is None or fail.mem_fraction_static is None:
        return {}
    f, p = fail.mem_fraction_static, fail.p_min
    phase = crash.get("phase")
    oom = crash.get("oom") or {}
    msg = crash.get("message") or ""
    reasoning: list[str] = []
    if phase == "kv_cache_alloc" and ("Not enough memory" in msg or "leave no GPU memory" in msg
                                     or (fail.kv_budget is not None and fail.kv_budget <= 0)):
        # rest <= 0: the static fraction must grow until rest covers a useful pool.
        if fail.a_min is None:
            return {}
        need_rest = MARGIN_GIB
        f_min = 1 - (fail.a_min - need_rest) / p
        reasoning.append(f"rest = A_min - P_min*(1-f) = {fail.a_min:.2f} - {p:.2f}*(1-{f}) = "
                         f"{fail.kv_budget:.2f} GiB" if fail.kv_budget is not None else "rest unknown")
        graphs = (base.graphs_max if base else None) or 0.0
        headroom_after = p * (1 - f_min)
        ok = headroom_after >= graphs + MARGIN_GIB
        reasoning.append(f"with f={_ceil(f_min)} the headroom P_min*(1-f) is {headroom_after:.2f} GiB; "
                         f"CUDA graphs need {graphs:.2f} GiB (baseline)")
        if not ok:
            return {"kind": "no_fraction_fits", "settings": {}, "reasoning": reasoning + [
                "no --mem-fraction-static leaves room for both the KV pool and the CUDA graphs: "
                "the weights are too large for this GPU at this parallelism (raise --tp, quantise, "
                "or lower --cuda-graph-max-bs)"]}
        return {"kind": "raise_mem_fraction_static", "settings": {"mem_fraction_static": _ceil(f_min)},
                "reasoning": reasoning}
    if phase == "cuda_graph_capture" and oom:
        free = oom.get("free_gib")
        tried = oom.get("tried_gib") or 0.0
        have = fail.capture_free_min
        expected = None
        if base is not None and base.graphs_max is not None and base.cuda_graph_max_bs and fail.cuda_graph_max_bs:
            # Capture memory grows roughly with the largest captured batch size.
            expected = base.graphs_max * fail.cuda_graph_max_bs / base.cuda_graph_max_bs
            reasoning.append(f"the baseline's capture took {base.graphs_max:.2f} GiB at max bs {base.cuda_graph_max_bs}; "
                             f"at max bs {fail.cuda_graph_max_bs} expect ~{expected:.2f} GiB")
        settings: dict[str, Any] = {}
        if have is not None and free is not None:
            consumed = max(have - free, 0.0)
            reasoning.append(f"the failing capture started with {have:.2f} GiB free and had used {consumed:.2f} GiB "
                             f"when an allocation of {gib(tried)} failed with {gib(free)} free")
            if expected is not None and consumed > expected + MARGIN_GIB:
                # It used more than a whole baseline capture and was not done: something else grew.
                extra = consumed + tried - expected
                reasoning.append(f"that is at least {extra:.2f} GiB more than the baseline's whole capture: something "
                                 "the baseline did not have allocates during capture; undo that change first")
                f_new = f - (extra + MARGIN_GIB) / p
                if f_new > 0.3:
                    settings["mem_fraction_static"] = _floor(f_new)
                    reasoning.append(f"to keep it, headroom must grow by at least {extra + MARGIN_GIB:.2f} GiB: "
                                     f"--mem-fraction-static {_floor(f_new)} or lower (a lower bound: the capture "
                                     "had not finished)")
                return {"kind": "capture_grew", "settings": settings, "reasoning": reasoning}
            need = expected if expected is not None else consumed + tried
            shortfall = max(need - have, tried - free, 0.0) + MARGIN_GIB
            f_new = f - shortfall / p
            reasoning.append(f"shortfall ~{shortfall:.2f} GiB incl. {MARGIN_GIB} GiB margin")
            if f_new > 0.3:
                settings["mem_fraction_static"] = _floor(f_new)
            if base is not None and base.graphs_max and base.cuda_graph_max_bs:
                per_bs = base.graphs_max / base.cuda_graph_max_bs
                fit_bs = int(max(have - MARGIN_GIB, 0) / per_bs) // 8 * 8 if per_bs > 0 else 0
                if fail.cuda_graph_max_bs and 0 < fit_bs < fail.cuda_graph_max_bs:
                    settings["cuda_graph_max_bs"] = fit_bs
        if settings:
            return {"kind": "more_headroom", "settings": settings, "reasoning": reasoning}
    return {}


def _floor(x: float) -> float:
    return math.floor(x * 100) / 100


def _ceil(x: float) -> float:
    return math.ceil(x * 100) / 100
