"""The run's outcome, judged from the model's records without changing them.

Outcome rules (the first that applies, judged on the whole log):

* ``crashed``: a fatal error after the last time the server was ready: a traceback
  (``Scheduler hit an exception`` and kin, or a bare one), a C++ abort, a
  ``Fatal Python error``, or the parent's ``sigquit`` notice; unless the only fatal
  errors are the consequence of a hang (below);
* ``hung``: evidence of a hang: an NCCL/c10d watchdog timeout, SGLang's own watchdog
  timeout, or a scheduler that gave no sign of life while others died waiting for it;
* ``ready``: ``The server is fired up and ready to roll!`` or served batches;
* ``incomplete``: none of these; the log just stops.

Everything here is a pure function of the model: rank-less crash records get a rank
where the log allows it in *copies* (:func:`resolve`), so that summarising mid-stream
cannot change what a later summary says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .failures import is_hang_consequence
from .phases import phase_of_words
from .rank import MILESTONES, NO_RANK, rank_sort_key

if TYPE_CHECKING:
    from .run import RunModel

_TP = re.compile(r"TP\d+")


@dataclass(frozen=True)
class Verdict:
    """What :func:`judge` finds: the outcome and the records it rests on."""

    outcome: str
    reason: str
    crash: dict[str, Any] | None
    hang: dict[str, Any] | None
    #: id(original crash record) -> its copy with rank and phase resolved
    resolved: dict[int, dict[str, Any]]


def judge(m: RunModel) -> Verdict:
    t, fl = m.timeline, m.failures
    ready_line = t.last_serving_line if (t.ready or t.last_serving_line) else 0
    fatal_src = [c for c in fl.crash_events if c["line"] > ready_line or not ready_line]
    fatal = [dict(c) for c in fatal_src]
    resolved = {id(src): c for src, c in zip(fatal_src, fatal)}
    fragments = [n for n in m.notices.get("tb_fragment", []) if n["line"] > ready_line]
    if fragments and not fatal:
        fatal = [_garbled_crash(m, fragments)]
    resolve(m, fatal)
    for c in fatal:  # a traceback cut above its frames: place it by its twins on other ranks
        if c["phase"] is None and c.get("exception"):
            twin = next((d for d in fatal if d["phase"] and d.get("exception") == c["exception"]), None)
            c["phase"] = twin["phase"] if twin else None
    sigquits = [n for n in m.notices.get("sigquit", []) if n["line"] > ready_line]
    hang = None
    if fl.hang_events:
        evidence = [dict(h, rank=_global_rank_label(m, h.get("rank"))) for h in fl.hang_events[:16]]
        hang = {"evidence": evidence, "first_line": fl.hang_events[0]["line"],
                "ranks": sorted({h["rank"] for h in evidence if h.get("rank")}, key=rank_sort_key),
                "silent_ranks": silent_ranks(m)}
    crash = _crash(m, fatal, sigquits) if (fatal or sigquits) else None
    first_hang = fl.hang_events[0]["line"] if fl.hang_events else None
    if hang and (not fatal or all(is_hang_consequence(c, first_hang) for c in fatal)):
        return Verdict("hung", "hang evidence: " + fl.hang_events[0]["text"][:160], crash, hang, resolved)
    if crash:
        first = crash.get("exception") or ("native abort" if crash.get("native") else "sigquit")
        where = f" on {crash['first_rank']}" if crash.get("first_rank") else ""
        return Verdict("crashed", f"{first}{where} at line {crash['line']}", crash, hang, resolved)
    if hang:
        return Verdict("hung", "hang evidence: " + fl.hang_events[0]["text"][:160], None, hang, resolved)
    if t.ready:
        return Verdict("ready", f"server ready at line {t.ready['line']}", None, None, resolved)
    if t.last_serving_line:
        return Verdict("ready", f"served batches (last at line {t.last_serving_line})", None, None, resolved)
    return Verdict("incomplete", f"the log stops at line {m.last_line} without readiness or failure",
                   None, None, resolved)


def resolve(m: RunModel, records: list[dict[str, Any]]) -> None:
    """Give rank-less crash records (copies) a rank where the log allows it, saying how."""
    labels = m.timeline.ranks
    tp_labels = any(_TP.fullmatch(k) for k in labels)
    # a log whose only records of a scheduler are progress bars is a single-rank run too
    single = set(labels) == {NO_RANK} or (not labels and bool(m.timeline.bars))
    unranked_native = [c for c in records if c.get("native") and c["rank"] is None]
    labelled = sorted((k for k in labels if k != NO_RANK), key=rank_sort_key)
    for c in records:
        if c["rank"] is not None:
            continue
        oom = c.get("oom")
        rank = _rank_of_gpu(m, oom["gpu"], records) if oom and oom.get("gpu") is not None and tp_labels else None
        if rank is not None:
            c["rank"], c["rank_inferred_from"] = rank
        elif single:
            c["rank"], c["rank_inferred_from"] = NO_RANK, "single_rank_run"
    # One C++ abort per rank and no rank printed: every rank died the same way.
    if unranked_native and labelled and len(unranked_native) >= len(labelled):
        for c, label in zip(unranked_native, labelled):
            c["rank"], c["rank_inferred_from"] = label, "one_native_abort_per_rank"


def _rank_of_gpu(m: RunModel, gpu: int, fatal: list[dict[str, Any]]) -> tuple[str, str] | None:
    """The TP rank of PyTorch's ``GPU N``, which is the index on its own node: on one
    node (``nnodes`` 1; or this file shows TP0 and TPN; or every rank-labelled OOM of
    this log names its own index), or from ``node_rank`` and the GPUs per node when
    nothing remaps devices; never by the index alone."""
    c = m.config
    args = {**c.launch_args, **c.server_args}
    nnodes, node_rank, tp = args.get("nnodes"), args.get("node_rank"), args.get("tp_size") or args.get("tp")
    remapped = "CUDA_VISIBLE_DEVICES" in c.env or args.get("base_gpu_id") not in (None, 0)
    if isinstance(nnodes, int) and nnodes > 1:
        if remapped or not isinstance(node_rank, int) or not isinstance(tp, int) or tp % nnodes:
            return None
        return f"TP{node_rank * (tp // nnodes) + gpu}", "oom_gpu_index_on_node"
    if nnodes == 1 and not remapped:
        return f"TP{gpu}", "oom_gpu_index"
    if remapped or nnodes is not None:
        return None
    pairs = [(rec["rank"], (rec.get("oom") or {}).get("gpu")) for rec in fatal if rec.get("rank")]
    pairs = [(r, g) for r, g in pairs if g is not None and _TP.fullmatch(r)]
    ranks = m.timeline.ranks
    if (pairs and all(r == f"TP{g}" for r, g in pairs)) or (f"TP{gpu}" in ranks and "TP0" in ranks):
        return f"TP{gpu}", "oom_gpu_index"
    return None


def _crash(m: RunModel, fatal: list[dict[str, Any]], sigquits: list[dict[str, Any]]) -> dict[str, Any]:
    if not fatal:
        n = sigquits[0]
        return {"first_rank": None, "ranks": [], "phase": m.timeline.global_phase, "exception": None,
                "message": None, "frames": [], "oom": None, "line": n["line"], "file": n["file"],
                "text": n["text"], "evidence": sigquits[:8], "native": False}
    # A paste often starts or ends inside a traceback: each field comes from the first
    # fatal record that shows it, and `line` is the first record's.
    first = fatal[0]
    ranks: list[str] = []
    for c in fatal:
        if c["rank"] and c["rank"] not in ranks:
            ranks.append(c["rank"])
    with_exc = next((c for c in fatal if c.get("exception")), first)
    return {
        "first_rank": ranks[0] if ranks else None,
        "ranks": ranks,
        "phase": next((c["phase"] for c in fatal if c.get("phase")), None),
        "exception": with_exc["exception"],
        "message": with_exc["message"],
        "frames": next((c["frames"] for c in fatal if c.get("frames")), []),
        "chain": with_exc.get("chain") or [],
        "oom": with_exc["oom"],
        "exception_line": with_exc.get("exception_line"),
        "source": first.get("source"),
        "native": bool(first.get("native")),
        "rank_inferred_from": first.get("rank_inferred_from"),
        "file": first["file"],
        "line": first["line"],
        "end_line": first["end_line"],
        "ts": first["ts"],
        "text": first["text"],
        "count": len(fatal),
        "sigquit_lines": [n["line"] for n in sigquits[:8]],
    }


def _garbled_crash(m: RunModel, fragments: list[dict[str, Any]]) -> dict[str, Any]:
    """Torn traceback text: no exception to read, but the functions still place it."""
    first = fragments[0]
    return {"rank": None, "source": "garbled", "exception": None,
            "message": "traceback text torn by concurrent writers (unreadable)", "frames": [],
            "oom": None, "file": first["file"], "line": first["line"],
            "end_line": fragments[-1]["line"], "ts": None, "text": first["text"],
            "phase": phase_of_words(n["text"] for n in fragments) or m.timeline.global_phase, "garbled": True}


def silent_ranks(m: RunModel) -> list[str]:
    """Ranks that fell behind the others (the ones the others wait on in a collective).

    Compared by the furthest start-up record each rank printed, so a rank that began
    loading weights and never finished is behind ranks that finished.
    """
    reached = {k: r.milestone for k, r in m.timeline.ranks.items() if r.milestone >= 0}
    if len(reached) < 2:
        return []
    top = max(reached.values())
    return sorted((k for k, v in reached.items() if v < top), key=rank_sort_key)


def _global_rank_label(m: RunModel, head_rank: str | None) -> str | None:
    """c10d's ``[rankN]`` is the global rank: TP rank N in a pure-TP run."""
    ranks = m.timeline.ranks
    if head_rank and head_rank.startswith("rank") and any(_TP.fullmatch(k) for k in ranks) and \
            all(_TP.fullmatch(k) for k in ranks if k != NO_RANK):
        return "TP" + head_rank[4:]
    return head_rank


def milestone_name(index: int) -> str | None:
    return MILESTONES[index] if index >= 0 else None
