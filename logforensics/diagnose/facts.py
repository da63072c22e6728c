"""Facts computed from two runs, exposed to rules by name (``facts.<name>``).

Rules stay declarative: anything that needs real computation (aligning phases across
runs, the memory budget, tolerances, grouping unknown lines) happens here, once, and
rules only compare the results. Every fact that points at log lines carries evidence
entries ``{file, line, rank, text}`` so findings can cite them.
"""

from __future__ import annotations

import re
from typing import Any

from ..events import PHASES
from ..model.run import RunSummary
from .budget import Budget, advice, arg, budget

_PHASE_INDEX = {p: i for i, p in enumerate(PHASES)}

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

#: server_args / env keys and the logged effects they are linked to.
EFFECTS: dict[str, str] = {
    "mem_fraction_static": "KV cache size (#tokens, K/V size) and the headroom left for CUDA graphs",
    "cuda_graph_max_bs": "CUDA-graph capture memory and time (Capture ... end: mem usage)",
    "disable_cuda_graph": "decode lines 'cuda graph: False' and decode throughput",
    "disable_custom_all_reduce": "custom allreduce buffers (IPC mappings) during init and capture",
    "tp_size": "ranks, weights per GPU, KV cell size",
    "chunked_prefill_size": "activation memory at prefill; the default mem_fraction_static",
    "max_running_requests": "request slots and KV usage",
    "kv_cache_dtype": "KV cell size and #tokens",
    "attention_backend": "decode throughput",
    "enable_torch_compile": "start-up time and decode throughput",
    "SGLANG_FORCE_CUSTOM_AR_PCIE": "custom allreduce enabled on PCIe-only GPUs: IPC buffers mapped "
                                   "to every peer, graph buffers registered during capture",
    "SGLANG_CUSTOM_ALLREDUCE_ALGO": "custom allreduce kernel choice (1stage/2stage)",
    "PYTORCH_CUDA_ALLOC_CONF": "allocator fragmentation (reserved but unallocated memory)",
}


def ev(run: RunSummary, line: int | None, rank: str | None, text: str | None) -> dict[str, Any]:
    return {"file": run.file, "line": line, "rank": rank, "text": (text or "")[:400]}


def compute(failing: RunSummary, baseline: RunSummary | None) -> dict[str, Any]:
    """All facts for one comparison (baseline may be None: single-run diagnosis)."""
    fb = budget(failing)
    bb = budget(baseline) if baseline else None
    terms = budget_terms(bb, fb, crash_facts(failing, fb)) if bb else []
    return {
        "budget_terms": terms,
        "budget_moved": any(t["changed"] for t in terms),
        "alignment": alignment(failing, baseline) if baseline else {},
        "memory": memory_deltas(failing, baseline) if baseline else {},
        "budget": {"failing": fb.to_dict(), "baseline": bb.to_dict() if bb else None,
                   "advice": advice(bb, fb, failing.crash)},
        "config": config_diff(failing, baseline) if baseline else {},
        "custom_ar": custom_ar(failing, baseline),
        "throughput": throughput(failing, baseline) if baseline else {},
        "crash": crash_facts(failing, fb),
        "baseline_crash": crash_facts(baseline, bb) if baseline else None,
        "novel": novel_lines(failing, baseline) if baseline else [],
        "novel_evidence": [ev(failing, n["first_line"], n["ranks"][0] if n.get("ranks") else None, n["example"])
                           for n in (novel_lines(failing, baseline) if baseline else []) if n.get("first_line")][:6],
        "hang": hang_facts(failing),
        "unbalanced": unbalanced(failing),
    }


#: The terms of SGLang's KV-cache budget, in the order the formula uses them.
BUDGET_TERMS = (
    ("p_min", "P_min: free before weights (min over ranks)"),
    ("a_min", "A_min: free after weights (min over ranks)"),
    ("mem_fraction_static", "mem_fraction_static"),
    ("reserved_headroom", "headroom P_min*(1-f) for graphs and activations"),
    ("kv_budget", "KV budget A_min - P_min*(1-f)"),
    ("kv_allocated", "KV pool allocated (K+V, max over ranks)"),
    ("capture_free_min", "free when CUDA-graph capture began (min over ranks)"),
    ("graphs_max", "CUDA-graph capture memory (max over ranks)"),
)


def budget_terms(base: Budget, fail: Budget, crash: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each term of the budget in both runs, and by how much it moved.

    A capture that died has no "mem usage" line; what it had used when it failed stands
    in for its graph memory (a lower bound).
    """
    out = []
    for key, label in BUDGET_TERMS:
        b, f = getattr(base, key), getattr(fail, key)
        if key == "graphs_max" and f is None and crash and crash.get("capture_consumed_gib") is not None:
            f, label = crash["capture_consumed_gib"], label + "; failing: used when capture failed, at least"
        delta = round(f - b, 4) if isinstance(b, (int, float)) and isinstance(f, (int, float)) else None
        out.append({"term": key, "label": label, "baseline": b, "failing": f, "delta": delta,
                    "changed": (delta is not None and abs(delta) > 0.05) or (b is None) != (f is None)})
    return out


# ---------------------------------------------------------------------------- alignment
def alignment(fail: RunSummary, base: RunSummary) -> dict[str, Any]:
    """Per rank and phase: where the failing run stopped short of the baseline.

    Absences count: a rank that never printed a phase in the failing run is compared by
    the baseline's phase for it, not only by the lines the failing run has.
    """
    per_rank: dict[str, Any] = {}
    first_missing: dict[str, Any] | None = None
    for rank in base.ranks:
        b_phase = base.phase_reached.get(rank)
        f_phase = fail.phase_reached.get(rank)
        b_i = _PHASE_INDEX.get(b_phase or "", -1)
        f_i = _PHASE_INDEX.get(f_phase or "", -1)
        missing = [p for p in PHASES[f_i + 1:b_i + 1]]
        seen = fail.last_seen.get(rank, {})
        per_rank[rank] = {"baseline_phase": b_phase, "failing_phase": f_phase, "missing_phases": missing,
                          "last_line": seen.get("line"), "last_text": seen.get("text")}
    for phase in PHASES:
        behind = [r for r, info in per_rank.items() if phase in info["missing_phases"]]
        if behind:
            first_missing = {
                "phase": phase,
                "ranks": behind,
                "reached_by": [r for r in base.ranks if r not in behind and r in fail.ranks
                               and _PHASE_INDEX.get(fail.phase_reached.get(r) or "", -1) >= _PHASE_INDEX[phase]],
                "evidence": [ev(fail, per_rank[r]["last_line"], r, per_rank[r]["last_text"])
                             for r in behind if per_rank[r]["last_line"]][:16],
            }
            break
    return {"ranks": per_rank, "first_missing": first_missing,
            "baseline_ranks": base.ranks, "failing_ranks": fail.ranks,
            "ranks_only_in_baseline": [r for r in base.ranks if r not in fail.ranks]}


# ---------------------------------------------------------------------------- memory
def memory_deltas(fail: RunSummary, base: RunSummary) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    changed: list[dict[str, Any]] = []
    max_abs: dict[str, float] = {}
    for rank in sorted(set(base.memory) | set(fail.memory), key=lambda r: (r not in base.ranks, r)):
        bm, fm = base.memory.get(rank, {}), fail.memory.get(rank, {})
        row: dict[str, Any] = {}
        for key, tol in MEMORY_FIGURES.items():
            b, f = bm.get(key), fm.get(key)
            if b is None and f is None:
                continue
            delta = None if b is None or f is None else round(f - b, 4)
            row[key] = {"baseline": b, "failing": f, "delta": delta}
            if delta is not None:
                max_abs[key] = max(max_abs.get(key, 0.0), abs(delta))
                limit = abs(b) * KV_TOKENS_REL_TOL if key == "kv_tokens" else tol
                if abs(delta) > limit:
                    changed.append({"rank": rank, "figure": key, "baseline": b, "failing": f, "delta": delta,
                                    "evidence": _mem_evidence(fail, rank, key) + _mem_evidence(base, rank, key)})
        for key in TIME_FIGURES:
            b, f = bm.get(key), fm.get(key)
            if b is not None and f is not None:
                row[key] = {"baseline": b, "failing": f, "delta": round(f - b, 2)}
                if b > 0 and abs(f - b) / b > TIME_REL_TOL and abs(f - b) > 5:
                    changed.append({"rank": rank, "figure": key, "baseline": b, "failing": f,
                                    "delta": round(f - b, 2),
                                    "evidence": _mem_evidence(fail, rank, key) + _mem_evidence(base, rank, key)})
        rows[rank] = row
    return {"ranks": rows, "changed": changed, "max_abs_delta": max_abs,
            "evidence": [e for c in changed for e in c["evidence"]][:12],
            "load_end_avail_max_abs_delta_gib": max_abs.get("load_end_avail_gib")}


_FIGURE_EVIDENCE = {
    "load_begin_avail_gib": "load_weight_begin", "weights_gib": "load_weight_end",
    "load_end_avail_gib": "load_weight_end", "load_elapsed_s": "load_weight_end",
    "kv_tokens": "kv_cache_alloc", "kv_gib": "kv_cache_alloc", "pool_end_avail_gib": "memory_pool_end",
    "capture_begin_avail_gib": "capture_begin", "capture_mem_gib": "capture_end",
    "capture_end_avail_gib": "capture_end", "capture_elapsed_s": "capture_end",
}


def _mem_evidence(run: RunSummary, rank: str, key: str) -> list[dict[str, Any]]:
    e = run.memory.get(rank, {}).get("evidence", {}).get(_FIGURE_EVIDENCE.get(key, ""))
    return [dict(e)] if e else []


_UNBALANCED_NUMS = re.compile(r"(?:pre_model_load_memory|min_per_gpu_memory)=([\d.]+), local_gpu_memory=([\d.]+)")


def unbalanced(run: RunSummary) -> dict[str, Any]:
    """GPUs with much less free memory than the others (another process on them).

    SGLang MIN-reduces free memory across ranks and raises on every rank whose own free
    memory is over 1/0.9 of that minimum, so the ranks that raise are the healthy ones;
    the occupied GPU is the rank that did not raise, whose free memory is the minimum.
    """
    vals = {r: m.get("load_begin_avail_gib") for r, m in run.memory.items() if m.get("load_begin_avail_gib") is not None}
    notices = run.notices.get("unbalanced_memory", [])
    raised = [e for e in run.exceptions if "memory capacity is unbalanced" in (e.get("message") or "")]
    if not (vals or notices or raised):
        return {"unbalanced": False}
    min_gib = local_gib = None
    for e in raised:
        m = _UNBALANCED_NUMS.search(e.get("message") or "")
        if m:
            min_gib, local_gib = float(m.group(1)), float(m.group(2))
    raising = sorted({r for e in raised for r in e.get("ranks") or [] if r})
    top = max([v for v in vals.values()] + ([local_gib] if local_gib else []), default=None)
    low = {r: v for r, v in vals.items() if top and v < 0.9 * top}
    if raised and not low:  # the ranks that did not raise hold the minimum
        low = {r: (vals.get(r) if vals.get(r) is not None else min_gib) for r in run.ranks if r not in raising}
    evidence = [e for r in low for e in _mem_evidence(run, r, "load_begin_avail_gib")] + notices[:4]
    evidence += [{"file": run.file, "line": e["first_line"], "rank": (e.get("ranks") or [None])[0],
                  "text": (e.get("message") or "")[:300]} for e in raised[:2]]
    return {"unbalanced": bool(low or notices or raised), "max_gib": top, "min_gib": min_gib,
            "low_ranks": low, "raising_ranks": raising, "evidence": evidence}


# ---------------------------------------------------------------------------- config
def _norm(v: Any) -> Any:
    return v if not isinstance(v, str) else v.strip()


def config_diff(fail: RunSummary, base: RunSummary) -> dict[str, Any]:
    args = {}
    ignore = {"random_seed", "port", "host", "nccl_port", "dist_init_addr", "file_storage_path"}
    for key in sorted(set(base.server_args) | set(fail.server_args)):
        b, f = base.server_args.get(key), fail.server_args.get(key)
        if _norm(b) != _norm(f) and key not in ignore:
            args[key] = {"baseline": b, "failing": f, "effect": EFFECTS.get(key)}
    if not base.server_args and not fail.server_args:
        for key in sorted(set(base.launch_args) | set(fail.launch_args)):
            b, f = base.launch_args.get(key), fail.launch_args.get(key)
            if b != f and key not in ignore:
                args[key] = {"baseline": b, "failing": f, "effect": EFFECTS.get(key)}
    env = {}
    for key in sorted(set(base.env) | set(fail.env)):
        b, f = base.env.get(key), fail.env.get(key)
        if b != f:
            env[key] = {"baseline": b, "failing": f, "effect": EFFECTS.get(key)}
    linked = _linked(args, env, fail)
    evidence = (fail.notices.get("launch_command", []) + base.notices.get("launch_command", [])
                + fail.notices.get("server_args", []) + base.notices.get("server_args", []))
    return {"server_args": args, "env": env, "changed": bool(args or env), "linked": linked,
            "changed_keys": sorted(args) + sorted(env), "evidence": [dict(e, text=e["text"][:300]) for e in evidence]}


#: Which phase (or "throughput") each setting acts on, to link a difference to a failure.
ACTS_ON: dict[str, tuple[str, ...]] = {
    "mem_fraction_static": ("kv_cache_alloc", "cuda_graph_capture", "serving"),
    "cuda_graph_max_bs": ("cuda_graph_capture",),
    "cuda_graph_bs": ("cuda_graph_capture",),
    "disable_cuda_graph": ("throughput",),
    "disable_custom_all_reduce": ("init_distributed", "cuda_graph_capture"),
    "tp_size": ("load_weights", "kv_cache_alloc"),
    "kv_cache_dtype": ("kv_cache_alloc",),
    "max_total_tokens": ("kv_cache_alloc",),
    "chunked_prefill_size": ("cuda_graph_capture", "serving"),
    "attention_backend": ("throughput",),
    "enable_torch_compile": ("cuda_graph_capture", "throughput"),
    "SGLANG_FORCE_CUSTOM_AR_PCIE": ("init_distributed", "cuda_graph_capture", "serving"),
    "SGLANG_CUSTOM_ALLREDUCE_ALGO": ("cuda_graph_capture", "serving", "throughput"),
}


def _linked(args: dict[str, Any], env: dict[str, Any], fail: RunSummary) -> list[dict[str, Any]]:
    """Differences that act on the phase where the failing run failed (or on throughput)."""
    crash_phase = (fail.crash or {}).get("phase")
    out = []
    for source, diffs in (("server_args", args), ("env", env)):
        for key, d in diffs.items():
            acts = ACTS_ON.get(key, ())
            if crash_phase and crash_phase in acts:
                out.append({"key": key, "source": source, "baseline": d["baseline"], "failing": d["failing"],
                            "phase": crash_phase, "effect": d.get("effect")})
            elif not crash_phase and "throughput" in acts:
                out.append({"key": key, "source": source, "baseline": d["baseline"], "failing": d["failing"],
                            "phase": "throughput", "effect": d.get("effect")})
    order = list(ACTS_ON)
    out.sort(key=lambda x: order.index(x["key"]) if x["key"] in order else len(order))
    return out


def custom_ar(fail: RunSummary, base: RunSummary | None) -> dict[str, Any]:
    """Whether SGLang's custom allreduce was off in the baseline and on in the failing run."""
    def state(run: RunSummary) -> dict[str, Any]:
        notes = run.notices.get("custom_ar_disabled", [])
        forced = any(k.startswith("SGLANG_FORCE_CUSTOM_AR") and v not in ("0", "", "false") for k, v in run.env.items())
        disabled_arg = arg(run, "disable_custom_all_reduce")
        disabled = bool(notes) or disabled_arg is True
        reason = None
        if notes:
            m = re.search(r"because (.*?)(\. To silence|$)", notes[0]["text"])
            reason = m.group(1) if m else notes[0]["text"]
        return {"disabled": disabled and not forced, "forced": forced, "disabled_by_arg": disabled_arg is True,
                "reason": reason, "notices": len(notes), "evidence": notes[:8]}
    f = state(fail)
    b = state(base) if base else None
    enabled_now = bool(b and b["disabled"] and not f["disabled"])
    frames = (fail.crash or {}).get("frames") or []
    in_frames = [fr for fr in frames if "all_reduce" in (fr.get("path") or "") or "allreduce" in (fr.get("func") or "").lower()
                 or "all_reduce" in (fr.get("func") or "")]
    return {"failing": f, "baseline": b, "enabled_in_failing_only": enabled_now,
            "in_crash_frames": bool(in_frames),
            "crash_frames": in_frames,
            "world_size": len(fail.ranks)}


# ---------------------------------------------------------------------------- throughput
def throughput(fail: RunSummary, base: RunSummary) -> dict[str, Any]:
    b = base.throughput.get("decode_gen_tok_s", {})
    f = fail.throughput.get("decode_gen_tok_s", {})
    out: dict[str, Any] = {"baseline": b, "failing": f}
    if b.get("count", 0) >= 5 and f.get("count", 0) >= 5 and b.get("median"):
        ratio = f["median"] / b["median"]
        br = base.throughput.get("running_req", {}).get("median")
        fr = fail.throughput.get("running_req", {}).get("median")
        comparable = bool(br and fr and abs(fr - br) / max(br, 1) <= COMPARABLE_LOAD_REL)
        out.update({"ratio": round(ratio, 4), "drop_pct": round((1 - ratio) * 100, 1),
                    "comparable_load": comparable, "running_req_baseline": br, "running_req_failing": fr,
                    "regressed": ratio < 1 - THROUGHPUT_REL_TOL})
    ba = base.throughput.get("accept_len", {})
    fa = fail.throughput.get("accept_len", {})
    if ba.get("count") and fa.get("count"):
        out["accept_len"] = {"baseline": ba.get("median"), "failing": fa.get("median"),
                             "ratio": round(fa["median"] / ba["median"], 4) if ba.get("median") else None}
    return out


# ---------------------------------------------------------------------------- crash
def crash_facts(run: RunSummary, b: Budget | None) -> dict[str, Any] | None:
    crash = run.crash
    if not crash:
        return None
    frames = crash.get("frames") or []
    chain = crash.get("chain") or []
    if chain and "OutOfMemory" in (chain[0].get("exception") or "") and chain[0].get("frames"):
        # "During handling of the above exception": the allocation failed in the first part.
        frames = frames[:chain[0]["frames"]]
    sglang_frames = [fr for fr in frames if "sglang" in (fr.get("path") or "")]
    site = (sglang_frames or frames or [None])[-1]
    oom = crash.get("oom") or {}
    text_lines = (crash.get("text") or "").splitlines()
    evidence = [ev(run, crash.get("line"), crash.get("first_rank"), text_lines[0] if text_lines else crash.get("text"))]
    exc_at = crash.get("exception_line")
    if exc_at and exc_at.get("line") != crash.get("line"):
        evidence.append(ev(run, exc_at["line"], crash.get("first_rank"), exc_at["text"]))
    tried, free = oom.get("tried_gib"), oom.get("free_gib")
    reserved = oom.get("reserved_unallocated_gib")
    rank = crash.get("first_rank")
    begin = run.memory.get(rank or "", {}).get("capture_begin_avail_gib")
    consumed = round(begin - free, 4) if crash.get("phase") == "cuda_graph_capture" and begin is not None \
        and free is not None else None
    progress = run.progress.get(rank or "", {}).get("cuda_graph_capture") or next(
        (p["cuda_graph_capture"] for p in run.progress.values() if "cuda_graph_capture" in p), None)
    return {
        "first_rank": crash.get("first_rank"),
        "ranks": crash.get("ranks") or [],
        "phase": crash.get("phase"),
        "exception": crash.get("exception"),
        "message_head": _head(crash.get("message") or ""),
        "is_oom": bool(oom),
        "oom": oom or None,
        "shortfall_gib": round(tried - free, 4) if tried is not None and free is not None else None,
        "fragmentation": bool(reserved is not None and tried is not None and reserved >= tried),
        "alloc_site": site,
        "capture_consumed_gib": consumed,
        "capture_progress": f"{progress['n']}/{progress['total']}" if progress else None,
        "cause": next((c.get("exception") for c in crash.get("chain") or [] if c.get("exception")), None),
        "evidence": evidence,
        "not_enough_memory": "Not enough memory" in (crash.get("message") or ""),
        "capture_failed": "Capture cuda graph failed" in (crash.get("message") or "") or "Capture CUDA graph failed" in (crash.get("message") or ""),
    }


def _head(message: str) -> str:
    """The first line of an exception message without PyTorch's boilerplate advice."""
    first = message.split("\n")[0]
    first = first.split(" If reserved but unallocated memory is large")[0]
    return first[:500]


def hang_facts(run: RunSummary) -> dict[str, Any]:
    hang = run.hang
    if not hang:
        return {"hung": run.outcome == "hung"}
    silent = hang.get("silent_ranks") or []
    return {"hung": True, "silent_ranks": silent, "watchdog_ranks": hang.get("ranks") or [],
            "evidence": hang.get("evidence", [])[:8] + [ev(run, run.last_seen[r]["line"], r, run.last_seen[r]["text"])
                                                        for r in silent if r in run.last_seen]}


def novel_lines(fail: RunSummary, base: RunSummary) -> list[dict[str, Any]]:
    """Unknown line shapes (numbers and ids masked) that only the failing run has."""
    known = set(base.coverage.get("unrecognised_shapes", {}))
    out = []
    for item in fail.coverage.get("top_unrecognised", []):
        if item["shape"] not in known:
            out.append(item)
    extra = [(s, n) for s, n in fail.coverage.get("unrecognised_shapes", {}).items()
             if s not in known and s not in {o["shape"] for o in out}]
    for shape, count in sorted(extra, key=lambda kv: -kv[1])[: max(0, 10 - len(out))]:
        out.append({"shape": shape, "count": count, "first_line": None, "example": shape, "ranks": []})
    return out
