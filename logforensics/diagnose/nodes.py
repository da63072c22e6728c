"""Facts across the nodes of a run: which node failed, what the others were doing, which
node fell behind, which ranks no file shows, and each node against the baseline's same node.

Only what the files show: a node whose log stops in a phase while another node crashed
"was last seen in" that phase; that it waited there is what the collectives imply, and
the finding says which lines it rests on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model.nodes import missing_ranks, nnodes
from ..model.records import NO_MEMORY, NOT_SEEN
from ..model.run import MILESTONES, RunSummary
from ..units import clip
from .sides import Evidence, ev_of

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
    return Evidence(entry.get("file"), entry.get("line"), entry.get("rank"), clip(str(entry.get("text") or ""), 400))


def _ranks_of(s: RunSummary, node: str) -> list[str]:
    return [r for r in s.ranks if s.rank_nodes.get(r) == node]


def _evidence(s: RunSummary, rank: str) -> Evidence:
    seen = s.last_seen.get(rank, NOT_SEEN)
    return Evidence(seen.file or s.file, seen.line, rank, clip(str(seen.text or ""), 400))


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
        notices = failing.notices.get("server_args") or failing.notices.get("launch_command") or []
        notice = notices[0] if notices else None
        if notice:
            out["missing_evidence"] = [{"file": notice.file or failing.file, "line": notice.line,
                                        "rank": None, "node": notice.node, "text": clip(notice.text, 400)}]
    crash = failing.crash
    if len(failing.nodes) < 2:
        return out
    out["failed_node"] = crash.node if crash else None
    out["order_uncertain"] = crash.order_uncertain if crash else None
    if crash and crash.node and failing.outcome in ("crashed", "hung"):
        for node, info in failing.nodes.items():
            if node == crash.node or info.outcome in ("crashed", "hung"):
                continue
            ranks = _ranks_of(failing, node)
            phases = {failing.phase_reached.get(r) for r in ranks}
            if ranks and len(phases) == 1 and None not in phases:
                out["waiting"].append({"node": node, "phase": phases.pop(), "ranks": ranks,
                                       "file": info.file,
                                       "evidence": [_evidence(failing, r) for r in ranks[:8]]})
    furthest = {}
    for node in failing.nodes:
        ms = [_MILESTONE_INDEX.get(failing.last_seen.get(r, NOT_SEEN).milestone or "", -1)
              for r in _ranks_of(failing, node)]
        if ms:
            furthest[node] = min(ms)
    for role in sorted({failing.nodes[n].role for n in furthest}, key=str):
        # nodes of one role alone: a PD prefill server captures no decode graphs, so it is not
        # behind a decode server that did
        same = {n: m for n, m in furthest.items() if failing.nodes[n].role == role}
        top = max(same.values())
        for node, m in same.items():
            if m < top and top >= 0:
                ahead = [n for n, v in same.items() if v == top]
                ranks = [r for r in _ranks_of(failing, node)
                         if _MILESTONE_INDEX.get(failing.last_seen.get(r, NOT_SEEN).milestone or "", -1) < top]
                out["behind"].append({"node": node, "missing": MILESTONES[top],
                                      "furthest": MILESTONES[m] if m >= 0 else None, "ahead": ahead,
                                      "ranks": ranks, "evidence": [_evidence(failing, r) for r in ranks[:8]]})
    if baseline is not None and baseline.nodes:
        out["moved"] = _moved(failing, baseline)
    return out


def _node_figure(s: RunSummary, node: str, key: str) -> tuple[float | None, str | None]:
    pick = NODE_FIGURES[key]
    vals = [(s.memory.get(r, NO_MEMORY).figure(key), r) for r in _ranks_of(s, node)]
    vals = [(v, r) for v, r in vals if isinstance(v, (int, float))]
    if not vals:
        return None, None
    v, r = pick(vals)
    return float(v or 0.0), r


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
                e = s.memory.get(r or "", NO_MEMORY).evidence
                keys = sorted((k for k in e if key.startswith(k)), key=len)
                if keys:
                    ev.append(dict(e[keys[-1]].to_dict(), node=node))
            out.append({"node": node, "figure": key, "baseline": round(a, 2), "failing": round(b, 2),
                        "baseline_rank": ra, "failing_rank": rb, "evidence": ev})
    return out


@dataclass(frozen=True)
class PDFailure:
    """A KV-transfer failure (``Decode transfer failed ...``) or PD timeout on one side."""

    side: str
    node: str
    kind: str  # transfer, bootstrap, waiting_timeout, bootstrap_timeout
    rank: str | None
    rid: str | None
    room: str | None
    message: str
    timed_out_s: float | None
    ts: str | None
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class PDJoin:
    """One request (by ``bootstrap_room``, else ``rid``) that failed on both sides."""

    room: str | None
    rid: str | None
    sides: tuple[str, ...]
    first_side: str
    gap_s: float | None
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class PDFacts:
    """A disaggregated run: the role of each file, its failures, which side failed first."""

    roles: Mapping[str, str]
    failures: tuple[PDFailure, ...]
    #: The side whose failure came first by time stamp, and why that order is uncertain.
    first_side: str | None
    first: PDFailure | None
    order_uncertain: str | None
    joined: tuple[PDJoin, ...]
    #: Timers that fired, with the setting that controls each.
    timeouts: tuple[str, ...]
    settings: tuple[str, ...]
    router_errors: tuple[Evidence, ...]
    #: Requests (rooms) with a failure that is not a notice of an abort, and those whose
    #: every record is ("Aborted by AbortReq.": the request was aborted, its transfer with it)
    requests_failed: int
    requests_aborted: int
    #: The sides whose records of a failed transfer these logs hold, in order of their first.
    sides: tuple[str, ...] = ()
    #: Whether the logs order the sides: both logged a failure that is not a notice of the
    #: other's abort, far enough apart in time. One side alone orders nothing.
    order_known: bool = False


def pd_facts(s: RunSummary) -> PDFacts:
    """``facts.pd``: the KV-transfer story across the prefill, decode and router files."""
    roles = {n: info.role for n, info in s.nodes.items() if info.role}
    fails: list[PDFailure] = []
    timers: list[str] = []
    settings: list[str] = []
    router: list[Evidence] = []
    for node, info in s.nodes.items():
        pd = info.pd
        if pd is None:
            continue
        side = info.role or node
        for x in pd.kv_failures:
            kind = "waiting_timeout" if x.poll == "WaitingForInput" else \
                "bootstrap_timeout" if x.poll == "Bootstrapping" else x.stage or "transfer"
            fails.append(PDFailure(x.side or side, node, kind, x.rank, x.rid, x.room,
                                   x.message or "", x.timed_out_s, x.ts, ev_of(x)))
        for t in pd.timeouts:
            timers.append(t.timer)
            settings.append(t.setting)
        router += [e for r in pd.router_errors[:8] for e in ev_of(r)]
    # "Aborted by AbortReq" is one side being told of the other's abort: a consequence,
    # whatever the clocks say.
    fails.sort(key=lambda f: (f.ts or "9999", f.side))
    causes = [f for f in fails if not _is_abort_notice(f)]
    first = causes[0] if causes else (fails[0] if fails else None)
    uncertain = None
    earliest = fails[0] if fails else None
    if first and earliest is not None and earliest is not first and _is_abort_notice(earliest) \
            and earliest.side != first.side and _gap(earliest.ts, first.ts) not in (None, 0.0) \
            and not any(f.side != earliest.side and (f.room or f.rid) == (earliest.room or earliest.rid)
                        for f in fails):
        # the other side's records begin earlier, with aborts of requests no record of this side
        # shows: an abort is a consequence of one only where both sides name the request
        uncertain = (f"the {earliest.side} side's first records ({earliest.ts}) are aborts (AbortReq) of requests "
                     f"that no {first.side} record names, before the {first.side} side's first failure: which "
                     "side failed first is not in these logs")
    if first and uncertain is None:
        other = next((f for f in causes if f.side != first.side), None)
        if other is not None:
            gap = _gap(first.ts, other.ts)
            if gap is None or gap <= 5.0:
                uncertain = (f"the {first.side} and {other.side} failures are "
                             + ("not both stamped" if gap is None else f"{gap:.0f} s apart")
                             + ", within the clock skew of two machines: which came first is uncertain")
    joined: list[PDJoin] = []
    keys: dict[str, list[PDFailure]] = {}
    for f in fails:
        k = f.room or (f"rid:{f.rid}" if f.rid else None)
        if k:
            keys.setdefault(k, []).append(f)
    for fs in keys.values():
        fs.sort(key=lambda f: (_is_abort_notice(f), f.ts or "9999"))
        sides = tuple(dict.fromkeys(f.side for f in fs))
        if len(sides) > 1:
            joined.append(PDJoin(fs[0].room, fs[0].rid, sides, fs[0].side, _gap(fs[0].ts, next(
                f for f in fs if f.side != fs[0].side).ts), tuple(e for f in fs[:4] for e in f.evidence)))
    failed = {f.room or f.rid for f in fails if (f.room or f.rid) and not _is_abort_notice(f)}
    aborted = {f.room or f.rid for f in fails if f.room or f.rid} - failed
    sides = tuple(dict.fromkeys(f.side for f in fails))
    # (the other side's "Aborted by AbortReq" is its notice of this side's abort: an order)
    known = first is not None and not _is_abort_notice(first) and uncertain is None and any(
        f.side != first.side for f in fails)
    return PDFacts(roles, tuple(fails[:32]), first.side if first else None, first, uncertain, tuple(joined[:16]),
                   tuple(dict.fromkeys(timers)), tuple(dict.fromkeys(settings)), tuple(router[:8]), len(failed),
                   len(aborted), sides, known)


def _is_abort_notice(f: PDFailure) -> bool:
    return "Aborted by AbortReq" in f.message


def _gap(a: str | None, b: str | None) -> float | None:
    from datetime import datetime

    try:
        return abs((datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds())  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
