"""Facts across the nodes of a run: which node failed, what the others were doing, which
node fell behind, which ranks no file shows, and each node against the baseline's same node.

Only what the files show: a node whose log stops in a phase while another node crashed
"was last seen in" that phase; that it waited there is what the collectives imply, and
the finding says which lines it rests on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model.nodes import missing_ranks, nnodes
from ..model.run import MILESTONES, RunSummary
from .sides import Evidence

_MILESTONE_INDEX = {m: i for i, m in enumerate(MILESTONES)}
#: Per-rank figures compared node by node with the baseline (worst rank of the node).
NODE_FIGURES = {"load_elapsed_s": max, "capture_elapsed_s": max, "load_end_avail_gib": min,
                "capture_begin_avail_gib": min, "pool_end_avail_gib": min}
_TOL = {"load_elapsed_s": 0.5, "capture_elapsed_s": 0.5}  # relative for times
_GIB_TOL = 0.25


@dataclass(frozen=True)
class NodeWait:
    """A node whose every rank was last seen in one phase, logging no error, while another failed."""

    node: str
    phase: str
    ranks: tuple[str, ...]
    file: str | None
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class NodeBehind:
    """A node whose ranks never printed a start-up record (``missing``) that other nodes did."""

    node: str
    missing: str
    furthest: str | None
    ahead: tuple[str, ...]
    ranks: tuple[str, ...]
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class NodeMoved:
    """A node's worst-rank figure against the baseline's node of the same name (GiB, s)."""

    node: str
    figure: str
    baseline: float
    failing: float
    baseline_rank: str | None
    failing_rank: str | None
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class NodeFacts:
    """Facts across the nodes of a run (``count`` files; empty lists for one file)."""

    count: int
    missing_ranks: tuple[str, ...]
    missing_evidence: tuple[Evidence, ...]
    waiting: tuple[NodeWait, ...]
    behind: tuple[NodeBehind, ...]
    moved: tuple[NodeMoved, ...]
    #: The node of the first failure, and why the order across nodes is uncertain (or null).
    failed_node: str | None
    order_uncertain: str | None


def _ev(entry: dict[str, Any]) -> Evidence:
    return Evidence(entry.get("file"), entry.get("line"), entry.get("rank"), str(entry.get("text") or "")[:400])


def _ranks_of(s: RunSummary, node: str) -> list[str]:
    return [r for r in s.ranks if s.rank_nodes.get(r) == node]


def _evidence(s: RunSummary, rank: str) -> Evidence:
    seen = s.last_seen.get(rank) or {}
    return Evidence(seen.get("file") or s.file, seen.get("line"), rank, str(seen.get("text") or "")[:400])


def node_facts(failing: RunSummary, baseline: RunSummary | None) -> NodeFacts:
    """The ``facts.nodes`` the node rules read."""
    d = _node_facts(failing, baseline)
    return NodeFacts(
        count=d["count"], missing_ranks=tuple(d["missing_ranks"]),
        missing_evidence=tuple(_ev(e) for e in d["missing_evidence"]),
        waiting=tuple(NodeWait(w["node"], w["phase"], tuple(w["ranks"]), w["file"], tuple(w["evidence"]))
                      for w in d["waiting"]),
        behind=tuple(NodeBehind(b["node"], b["missing"], b["furthest"], tuple(b["ahead"]), tuple(b["ranks"]),
                                tuple(b["evidence"])) for b in d["behind"]),
        moved=tuple(NodeMoved(m["node"], m["figure"], m["baseline"], m["failing"], m["baseline_rank"],
                              m["failing_rank"], tuple(_ev(e) for e in m["evidence"])) for m in d["moved"]),
        failed_node=d["failed_node"], order_uncertain=d["order_uncertain"])


def _node_facts(failing: RunSummary, baseline: RunSummary | None) -> dict[str, Any]:
    """The ``facts.nodes`` the node rules read."""
    # A node's ranks missing from one file matter in a launch over several nodes; a cut
    # excerpt of a single-node launch lacking ranks is what ``summary`` reports.
    multi = len(failing.nodes) > 1 or (nnodes(failing) or 1) > 1
    missing = (list(failing.missing_ranks) or missing_ranks(failing)) if multi else []
    out: dict[str, Any] = {"count": len(failing.nodes), "missing_ranks": missing,
                           "missing_evidence": [], "waiting": [], "behind": [], "moved": [],
                           "failed_node": None, "order_uncertain": None}
    if missing:
        notice = (failing.notices.get("server_args") or [None])[0]
        if notice:
            out["missing_evidence"] = [{"file": notice.get("file") or failing.file, "line": notice.get("line"),
                                        "rank": None, "node": notice.get("node"), "text": notice.get("text", "")[:400]}]
    crash = failing.crash or {}
    if len(failing.nodes) < 2:
        return out
    out["failed_node"] = crash.get("node")
    out["order_uncertain"] = crash.get("order_uncertain")
    if crash.get("node") and failing.outcome in ("crashed", "hung"):
        for node, info in failing.nodes.items():
            if node == crash["node"] or info.get("outcome") in ("crashed", "hung"):
                continue
            ranks = _ranks_of(failing, node)
            phases = {failing.phase_reached.get(r) for r in ranks}
            if ranks and len(phases) == 1 and None not in phases:
                out["waiting"].append({"node": node, "phase": phases.pop(), "ranks": ranks,
                                       "file": info.get("file"),
                                       "evidence": [_evidence(failing, r) for r in ranks[:8]]})
    furthest = {}
    for node in failing.nodes:
        ms = [_MILESTONE_INDEX.get(failing.last_seen.get(r, {}).get("milestone") or "", -1)
              for r in _ranks_of(failing, node)]
        if ms:
            furthest[node] = min(ms)
    if furthest:
        top = max(furthest.values())
        for node, m in furthest.items():
            if m < top and top >= 0:
                ahead = [n for n, v in furthest.items() if v == top]
                ranks = [r for r in _ranks_of(failing, node)
                         if _MILESTONE_INDEX.get(failing.last_seen.get(r, {}).get("milestone") or "", -1) < top]
                out["behind"].append({"node": node, "missing": MILESTONES[top],
                                      "furthest": MILESTONES[m] if m >= 0 else None, "ahead": ahead,
                                      "ranks": ranks, "evidence": [_evidence(failing, r) for r in ranks[:8]]})
    if baseline is not None and baseline.nodes:
        out["moved"] = _moved(failing, baseline)
    return out


def _node_figure(s: RunSummary, node: str, key: str) -> tuple[float | None, str | None]:
    pick = NODE_FIGURES[key]
    vals = [(s.memory.get(r, {}).get(key), r) for r in _ranks_of(s, node)]
    vals = [(v, r) for v, r in vals if isinstance(v, (int, float))]
    if not vals:
        return None, None
    v, r = pick(vals)
    return float(v), r


def _moved(failing: RunSummary, baseline: RunSummary) -> list[dict[str, Any]]:
    """Each node's worst-rank figures against the baseline's node of the same name."""
    out = []
    for node in failing.nodes:
        if node not in baseline.nodes:
            continue
        for key in NODE_FIGURES:
            a, ra = _node_figure(baseline, node, key)
            b, rb = _node_figure(failing, node, key)
            if a is None or b is None:
                continue
            tol = _TOL[key] * max(abs(a), 1.0) if key in _TOL else _GIB_TOL
            if abs(b - a) <= tol:
                continue
            ev = []
            for s, r in ((failing, rb), (baseline, ra)):
                e = (s.memory.get(r or "", {}).get("evidence") or {})
                keys = sorted((k for k in e if key.startswith(k)), key=len) if isinstance(e, dict) else []
                if keys:
                    ev.append(dict(e[keys[-1]], node=node))
            out.append({"node": node, "figure": key, "baseline": round(a, 2), "failing": round(b, 2),
                        "baseline_rank": ra, "failing_rank": rb, "evidence": ev})
    return out
