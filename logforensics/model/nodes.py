"""One run over many files: the per-node (or per-server) summaries combined into one.

Each file of a run is read on its own, by the one parser and run model, into a
:class:`RunSummary`; :func:`combine` puts them together. Why not one model fed all
files: the files are separate streams with separate clocks and line numbers, and each
node's model must stay what ``summary`` of that file alone says.

How the parts combine:

* **Ranks** are global across nodes (node 1 of a TP8 launch over 2x4 GPUs prints
  TP4-TP7), so a rank keeps its label; a label that two files print (``TP0`` of a
  prefill and of a decode server, ``-`` of two single-GPU nodes) is qualified with the
  node, ``decode:TP0``. Every rank records its node and file.
* **Readiness** comes from node 0: other nodes of a multi-node launch run no HTTP
  server. A run is ready only if no node crashed or hung.
* **The first failure** is the earliest by timestamp across nodes. Clocks of two
  machines disagree by seconds and SGLang stamps to the second, so when another node
  failed within ``CLOCK_SKEW_S`` of it (or a failure has no stamp) the order is
  uncertain, and the summary says so. **The first hang** likewise, by its first record.
* **One clock**: a file of NVIDIA Dynamo's has UTC stamps beside SGLang's local ones;
  every order across files (the first failure, the first hang, each file's first and
  last stamps) puts them on one clock through :func:`on_one_clock`, with the offset the
  file derived and never without its anchor.
* **Missing ranks**: the parallel sizes in ``server_args`` (or the launch command) say
  which ranks should exist; the ones no file shows are named.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from .clock import seconds
from .dynamo import RANKS_WARNING, utc_instant
from .records import Coverage, LoggedError, Memory, NodeEntry, Notice
from .run import NO_RANK, RunSummary
from .summary import Crash, DistinctException, Hang, RankRecord

#: Seconds by which the clocks of two machines may disagree.
CLOCK_SKEW_S = 5.0
_FAILED = ("crashed", "hung")
_RANK_TOKEN = re.compile(r"([A-Z_]+)(\d+)")
#: Parallel dimensions whose size server_args give, with the label SGLang prints.
_DIMENSIONS = (("TP", ("tp_size", "tp", "tensor_parallel_size")),
               ("PP", ("pp_size", "pp", "pipeline_parallel_size")),
               ("DP", ("dp_size", "dp", "data_parallel_size")))


@dataclass(frozen=True)
class NodeSummary:
    """One file of a run, read alone: its node label, role and summary.

    ``rank_nodes`` maps ranks to the node a wrapper on their lines named (a Ray log that
    interleaves several machines); ``role`` is ``prefill``, ``decode``, ``router`` or None.
    """

    node: str | None
    file: str
    summary: RunSummary
    role: str | None = None
    rank_nodes: dict[str, str] = field(default_factory=dict)
    pd: dict[str, Any] = field(default_factory=dict)


def node_rank(s: RunSummary) -> int | None:
    """``node_rank`` from server_args or ``--node-rank`` from the launch command."""
    return _node_rank(s.server_args, s.launch_args)


def _node_rank(server_args: dict[str, Any] | None, launch_args: dict[str, Any] | None) -> int | None:
    for src in (server_args or {}, launch_args or {}):
        value = src.get("node_rank")
        if isinstance(value, int):
            return value
        if isinstance(value, str) and value.isdigit():
            return int(value)
    return None


def nnodes(s: RunSummary) -> int | None:
    """``nnodes`` from server_args or ``--nnodes`` from the launch command."""
    return _nnodes(s.server_args, s.launch_args)


def _nnodes(server_args: dict[str, Any] | None, launch_args: dict[str, Any] | None) -> int | None:
    for src in (server_args or {}, launch_args or {}):
        value = src.get("nnodes")
        if isinstance(value, int):
            return value
    return None


def node_label(part_node: str | None, s: RunSummary) -> str | None:
    """The node a file is: its name's label, else ``node<N>`` from ``node_rank`` in its text
    (only for a launch over several nodes: every single-node launch has ``node_rank=0``)."""
    return node_label_of_args(part_node, s.server_args, s.launch_args)


def node_label_of_args(part_node: str | None, server_args: dict[str, Any] | None,
                       launch_args: dict[str, Any] | None) -> str | None:
    """:func:`node_label` from the server args and launch arguments themselves."""
    if part_node:
        return part_node
    n = _node_rank(server_args, launch_args)
    if n is None or (n == 0 and (_nnodes(server_args, launch_args) or 1) <= 1):
        return None
    return f"node{n}"


def missing_ranks(s: RunSummary, ranks: Sequence[str] | None = None) -> list[str]:
    """Ranks the parallel sizes call for that no record shows (``TP4``... for a node-0 file
    of a TP8 launch over two nodes). Only dimensions the labels use are checked, and only
    where each label is of one dimension: a label of several (``DP4 PP0 TP4``) names a
    process by all its parts, which the sizes alone do not enumerate (DP attention, PP over
    nodes), so none is listed rather than parts that name no process."""
    ranks = list(s.ranks if ranks is None else ranks)
    labels = [r.split(":", 1)[-1] for r in ranks if r.split(":", 1)[-1] != NO_RANK]
    if not labels:
        return []
    seen: dict[str, set[int]] = {}
    for label in labels:
        parts = _RANK_TOKEN.findall(label)
        if len(parts) > 1:
            return []
        for dim, idx in parts:
            seen.setdefault(dim, set()).add(int(idx))
    out: list[str] = []
    for dim, keys in _DIMENSIONS:
        if dim not in seen:
            continue
        size = _size(s, keys)
        if size is None or size <= 1 or size > 4096:
            continue
        out += [f"{dim}{i}" for i in range(size) if i not in seen[dim]]
    return out


def _size(s: RunSummary, keys: Sequence[str]) -> int | None:
    for src in (s.server_args or {}, s.launch_args or {}):
        for k in keys:
            v = src.get(k)
            if isinstance(v, int):
                return v
    return None


#: A rank a file's name states in SGLang's own words (``tp_rank1``, ``dp-rank-0``,
#: ``moe_ep_rank2``), or torch's (``rank3``), and the label SGLang's prefix gives it. A bare
#: ``tp8`` is not one: names carry the TP size so (``llama-70b-tp8.log``); ``node_rank1`` is
#: a node (``ingest.runset``).
_NAME_RANK = re.compile(r"(?<![A-Za-z0-9])(?:(attn_cp|moe_dp|moe_ep|dp|pp|tp|ep|cp)[_-]?)?rank[_-]?(\d+)(?![0-9])",
                        re.IGNORECASE)
_NAME_LABEL = {"attn_cp": "ATTN_CP", "moe_dp": "MOE_DP", "moe_ep": "EP"}
#: The sizes a rank of each label must be under, where the log gives them.
_NAME_SIZES = {"TP": ("tp_size", "tp", "tensor_parallel_size"), "PP": ("pp_size", "pp", "pipeline_parallel_size"),
               "DP": ("dp_size", "dp", "data_parallel_size")}
#: Fields of a summary that hold rank labels (dict keys of ranks are relabelled too).
_RANK_FIELDS = frozenset({"rank", "ranks", "first_rank", "silent_ranks", "label"})


def rank_from_name(path: str, s: RunSummary) -> str | None:
    """The rank ``path``'s name states (``worker-tp_rank1.log`` -> ``TP1``, ``dp_rank0_tp_rank1``
    -> ``DP0 TP1``, ``rank3`` -> ``rank3``), or None: none stated, a ``node_rank``, or a rank
    the sizes the log gives cannot have (``tp_rank4`` of a TP 4 run)."""
    parts = []
    for m in _NAME_RANK.finditer(os.path.basename(path)):
        before = os.path.basename(path)[max(0, m.start() - 5):m.start()].lower()
        if m.group(1) is None and before.endswith(("node_", "node-", "node")):
            continue
        word = (m.group(1) or "").lower()
        label = _NAME_LABEL.get(word, word.upper()) if word else "rank"
        size = _size(s, _NAME_SIZES[label]) if label in _NAME_SIZES else None
        if size is not None and int(m.group(2)) >= size:
            return None
        parts.append(f"{label}{int(m.group(2))}")
    return " ".join(parts) or None


def _relabel(x: Any, new: str, name: str | None = None) -> Any:
    """``x`` with the rank ``-`` named ``new`` wherever a field of a rank (:data:`_RANK_FIELDS`)
    holds it or a mapping is keyed by it (node labels, ``nodes``, are left as they are)."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        changes = {}
        for f in dataclasses.fields(x):
            if f.init:
                old = getattr(x, f.name)
                got = _relabel(old, new, f.name)
                if got is not old:
                    changes[f.name] = got
        return replace(x, **changes) if changes else x
    if isinstance(x, dict):
        if name == "nodes":
            return x
        items = [(new if k == NO_RANK else k, _relabel(v, new, k if isinstance(k, str) else None)) for k, v in x.items()]
        return dict(items) if any(k2 is not k or v2 is not v for (k2, v2), (k, v) in zip(items, x.items())) else x
    if isinstance(x, (list, tuple)):
        got = [_relabel(v, new, name) for v in x]
        return type(x)(got) if any(a is not b for a, b in zip(got, x)) else x
    if x == NO_RANK and name in _RANK_FIELDS:
        return new
    return x


def with_rank_from_name(p: NodeSummary) -> NodeSummary:
    """A file whose SGLang records Dynamo wrote without their rank (:data:`RANKS_WARNING`),
    all of them (its one rank is ``-``), with the rank its name states (:func:`rank_from_name`)
    and a warning that says where the rank came from; unchanged when the name states none
    (the rank is never guessed) or the file names ranks of its own (its ``-`` records are
    then of any of them)."""
    s = p.summary
    if RANKS_WARNING not in s.warnings or s.ranks != [NO_RANK]:
        return p
    label = rank_from_name(p.file, s)
    if label is None:
        return p
    said = (f"ranks not printed: Dynamo drops SGLang's rank prefix unless DYN_SKIP_SGLANG_LOG_FORMATTING=1; "
            f"records without a rank are {label}, the rank the file name {os.path.basename(p.file)} states")
    reason = s.outcome_reason
    at = f" at line {s.crash.line}" if s.crash is not None else ""
    if s.outcome == "crashed" and s.crash is not None and s.crash.first_rank == NO_RANK and reason.endswith(at):
        reason = f"{reason[:-len(at)]} on {label}{at}"  # the verdict names no rank for "-": now it has one
    s = _relabel(replace(s, outcome_reason=reason, warnings=[said if w == RANKS_WARNING else w for w in s.warnings]),
                 label)
    if s.crash is not None and s.crash.rank_inferred_from is not None:
        s = replace(s, crash=replace(s.crash, rank_inferred_from="file_name"))
    return replace(p, summary=s, rank_nodes={label if k == NO_RANK else k: v for k, v in p.rank_nodes.items()})


def combine(parts: Sequence[NodeSummary], source: str | None = None) -> RunSummary:
    """The summary of a run made of ``parts`` (one per file). One part: its own summary,
    with its node and the ranks it lacks. A file whose records Dynamo wrote without their
    rank takes the rank its name states (:func:`with_rank_from_name`)."""
    if not parts:
        raise ValueError("a run needs at least one file")
    parts = [with_rank_from_name(p) for p in parts]
    found = [node_label(p.node, p.summary) for p in parts]
    if len(parts) == 1:
        p, only = parts[0], found[0]
        s = p.summary
        nodes = {only or "-": _node_entry(p, only)} if (only or p.role) else {}
        rank_nodes: dict[str, str] = {}
        for r in s.ranks:
            n = p.rank_nodes.get(r) or only
            if n:
                rank_nodes[r] = n
        return replace(s, missing_ranks=missing_ranks(s), nodes=nodes, rank_nodes=rank_nodes,
                       outcome_reason=router_only_reason(p) or s.outcome_reason)
    labels: list[str] = [lab or f"file{i}" for i, lab in enumerate(found)]
    order = sorted(range(len(parts)), key=lambda i: _lead_key(parts[i], labels[i]))
    parts = [parts[i] for i in order]
    labels = [labels[i] for i in order]
    lead = _lead(parts)
    count: dict[str, int] = {}
    for p in parts:
        for r in p.summary.ranks:
            count[r] = count.get(r, 0) + 1

    def key(i: int, r: str) -> str:
        # a crash or exception may name a rank that wrote no line of its own (a traceback's "[rank1]:")
        return f"{labels[i]}:{r}" if count.get(r, 0) > 1 else r

    # each file's stamps on one clock, where a file has stamps on two (NVIDIA Dynamo's UTC head)
    spans = _spans(parts, labels) if any(p.summary.clock and p.summary.clock.utc_records for p in parts) else None
    ranks: list[str] = []
    rank_nodes = {}
    rank_files: dict[str, str] = {}
    per_rank: dict[str, RankRecord] = {}
    exceptions: list[DistinctException] = []
    errors: list[LoggedError] = []
    notices: dict[str, list[Notice]] = {}
    warnings: list[str] = []
    for i, p in enumerate(parts):
        s = p.summary
        for r in s.ranks:
            k = key(i, r)
            ranks.append(k)
            rank_nodes[k] = p.rank_nodes.get(r) or labels[i]
            rank_files[k] = p.file
            rec = s.per_rank.get(r) or RankRecord(label=r)
            on_clock = {"clock": spans[i].last_seen[r]} if spans is not None and r in spans[i].last_seen else {}
            per_rank[k] = replace(rec, label=k,  # with its stamp on the run's one clock, if moved
                                  last_seen=rec.last_seen.put(node=rank_nodes[k], file=p.file, **on_clock),
                                  memory=_tag_evidence(rec.memory, rank_nodes[k]))
        errors.extend(e.put(node=labels[i]) for e in s.errors)
        for e in s.exceptions:
            exceptions.append(DistinctException.from_dict(dict(e.to_dict(), node=labels[i],
                                                               ranks=[key(i, r) if r else r for r in e.ranks])))
        for kind, items in s.notices.items():
            notices.setdefault(kind, []).extend(n.put(node=labels[i]) for n in items[:64])
        warnings += [f"{p.file}: {w}" for w in s.warnings]
    crash, crash_note = _first_failure(parts, labels, key)
    hang = _hang(parts, labels, key)
    outcome, reason = _outcome(parts, labels, lead, crash, crash_note, hang)
    ls = lead.summary
    nodes = {labels[i]: _node_entry(p, labels[i], spans[i] if spans else None) for i, p in enumerate(parts)}
    ready = ls.ready.put(node=labels[parts.index(lead)], file=lead.file) if ls.ready and outcome == "ready" else None
    base = replace(
        ls,
        file=source or " ".join(p.file for p in parts),
        outcome=outcome,
        outcome_reason=reason,
        ranks=ranks,
        per_rank=per_rank,
        crash=crash,
        exceptions=exceptions,
        errors=errors,
        hang=hang,
        ready=ready,
        stopped=ls.stopped.put(node=labels[parts.index(lead)]) if ls.stopped and outcome == "ready" else None,
        throughput=max(parts, key=lambda p: p.summary.throughput.decode_gen_tok_s.count
                       ).summary.throughput,
        notices=notices,
        coverage=_coverage([p.summary for p in parts]),
        warnings=warnings,
        nodes=nodes,
        rank_nodes=rank_nodes,
    )
    return replace(base, missing_ranks=missing_ranks(base, ranks))


def _lead_key(p: NodeSummary, label: str) -> tuple[int, int, str]:
    n = node_rank(p.summary)
    m = re.fullmatch(r"node(\d+)", label)
    num = n if n is not None else (int(m.group(1)) if m else 1 << 20)
    role = {"router": 0, "prefill": 1, "decode": 2}.get(p.role or "", 3)
    return (role if p.role else 3, num, label)


def _lead(parts: Sequence[NodeSummary]) -> NodeSummary:
    """The part whose readiness speaks for the run: node 0, the one with the HTTP server
    (parts are in node order), or in a disaggregated run the router when there is one."""
    return parts[0]


def router_only_reason(p: NodeSummary) -> str | None:
    """What an incomplete log that is a router's alone is: not a server that did not get
    ready (a router has no readiness of a server; its own ``Router ready`` is cited)."""
    s = p.summary
    if p.role != "router" or s.outcome != "incomplete" or s.crash or s.hang or s.ranks:
        return None
    ready = p.pd.get("router_ready")
    return (f"the router's log, with no SGLang server record: the log stops at line {s.coverage.lines_read}"
            + (f"; the router logged its readiness at line {ready['line']}" if ready else ""))


def _node_entry(p: NodeSummary, label: str | None, span: _Span | None = None) -> NodeEntry:
    s = p.summary
    first, last = _span(s) if span is None else (span.first, span.last)
    entry: dict[str, Any] = {
        "node": label,
        "file": p.file,
        "role": p.role,
        "node_rank": node_rank(s),
        "outcome": s.outcome,
        "outcome_reason": s.outcome_reason,
        "ranks": list(s.ranks),
        "first_ts": first,
        "last_ts": last,
        "lines": s.coverage.lines_read,
        "furthest": _furthest(s),
        "crash": {k: getattr(s.crash, k) for k in ("first_rank", "phase", "exception", "line", "ts", "file")}
        if s.crash else None,
        "ready_line": s.ready.line if s.ready else None,
    }
    if p.pd:
        entry["pd"] = p.pd
    if span is not None and span.moved:
        entry["clock"] = span.moved
    if span is not None and span.uncertain:
        entry["order_uncertain"] = span.uncertain
    return NodeEntry.from_dict(entry)


def _furthest(s: RunSummary) -> dict[str, Any]:
    """Each rank's furthest start-up record (``load_weight_end``...): what a node reached."""
    return {r: v.milestone for r, v in s.last_seen.items()}


def _span(s: RunSummary) -> tuple[str | None, str | None]:
    stamps = [v.first_ts for ph in s.phases.values() for v in ph.values() if v.first_ts]
    stamps += [t for t in (s.coverage.first_ts, s.coverage.last_ts) if t]
    stamps += [v.ts for v in s.last_seen.values() if v.ts]
    if s.crash and s.crash.ts:
        stamps.append(s.crash.ts)
    if s.ready and s.ready.ts:
        stamps.append(s.ready.ts)
    texts = [t for t in stamps if isinstance(t, str) and seconds(t) is not None]  # (no misread "2026-84-18")
    return (min(texts), max(texts)) if texts else (None, None)


@dataclass(frozen=True)
class _Span:
    """A file's first and last stamps (as printed) chosen on the run's one clock; ``moved``
    those of them put on it from the other clock; ``uncertain`` why the file's stamps cannot
    be compared with the others'; ``last_seen`` rank -> how its last stamp was moved."""

    first: str | None
    last: str | None
    moved: list[dict[str, Any]]
    uncertain: str | None
    last_seen: dict[str, dict[str, Any]]


def _file_stamps(i: int, s: RunSummary) -> list[tuple[_Stamp, str | None]]:
    """The stamps of part ``i`` that :func:`_span` reads, and its first hang record's, each
    with the rank whose last stamp it is. A rank's last stamp is kept with the text of its last record, which may be
    another (unstamped) record: that text says which clock the stamp is on only when it
    shows the stamp."""
    out: list[tuple[_Stamp, str | None]] = [
        ((i, v.first_line, v.first_ts, None), None)
        for ph in s.phases.values() for v in ph.values() if v.first_ts]
    for r, v in s.last_seen.items():
        ts, text = v.ts, v.text
        if isinstance(ts, str) and ts:
            shows = isinstance(text, str) and ts[:10] in text[:64] and ts[11:19] in text[:64]
            out.append(((i, v.line if shows else None, ts, text if shows else None), r))
    if s.crash and s.crash.ts:
        out.append(((i, s.crash.line, s.crash.ts, s.crash.text), None))
    if s.ready and s.ready.ts:
        out.append(((i, s.ready.line, s.ready.ts, s.ready.text), None))
    if s.hang and s.hang.first_ts:
        out.append(((i, *_hang_stamp(s.hang)), None))
    out += [((i, None, t, None), None) for t in (s.coverage.first_ts, s.coverage.last_ts) if t]
    return out


def _spans(parts: Sequence[NodeSummary], labels: Sequence[str]) -> list[_Span]:
    """Each file's first and last stamps on the run's one clock (:func:`on_one_clock`)."""
    stamps = [st for i, p in enumerate(parts) for st in _file_stamps(i, p.summary)]
    one = on_one_clock(parts, labels, [st for st, _ in stamps])
    out: list[_Span] = []
    for i, p in enumerate(parts):
        mine = [k for k, (st, _) in enumerate(stamps) if st[0] == i]
        timed = sorted((k for k in mine if one.at[k] is not None), key=lambda k: (one.at[k], k))
        if not timed:
            first, last = _span(p.summary)
            ends: list[int] = []
        else:
            ends = [timed[0], timed[-1]] if timed[0] != timed[-1] else [timed[0]]
            first, last = stamps[timed[0]][0][2], stamps[timed[-1]][0][2]
        uncertain = None
        if one.clock is None:
            utc = next((k for k in mine if one.moments[k].utc_stamped and one.moments[k].local is None), None)
            if utc is not None:
                other = one.partner(utc, range(len(stamps)))
                uncertain = (f"{labels[i]}'s stamps are in UTC (NVIDIA Dynamo's head), {labels[stamps[other][0][0]]}'s "
                             "in local time, and no file shows a moment on both clocks to relate them: "
                             "its times are not comparable with theirs")
        seen = {r: one.moved[k] for k in mine if (r := stamps[k][1]) is not None and k in one.moved}
        out.append(_Span(first, last, [one.moved[k] for k in ends if k in one.moved], uncertain, seen))
    return out


def _tag_evidence(mem: Memory, node: str | None) -> Memory:
    """A rank's figures with its node on each record behind them."""
    if "evidence" not in (mem.keys or ()):
        return mem
    return mem.put(evidence={k: v.put(node=node) for k, v in mem.evidence.items()})


def _when(ts: Any) -> datetime | None:
    if not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).replace(tzinfo=None)
    except ValueError:
        return None


@dataclass(frozen=True)
class _Moment:
    """A stamp on the clocks it can be put on: ``local`` (SGLang's own stamps, local time)
    and ``utc``; ``stamp`` as printed; ``utc_stamped`` when it is Dynamo's, None when the
    summary does not say which clock it is on (see :func:`_moment`)."""

    local: datetime | None
    utc: datetime | None
    stamp: str | None
    utc_stamped: bool | None


def _moment(p: NodeSummary, ts: str | None, text: str | None) -> _Moment:
    """A stamp of part ``p`` on both clocks where its file derived the offset between them
    (``model.dynamo``: from records of one moment, with a UTC anchor); never guessed.

    Which clock a stamp is on is read from its record's text (Dynamo's head or SGLang's
    prefix). A stamp kept without its text (``text`` None: a phase's first and last stamps)
    is local time when the file has no record of Dynamo's; in a file that has, its clock is
    not known, and it is put on neither."""
    clock = p.summary.clock
    offset = clock.offset if clock is not None else None
    if text is None:
        if clock is not None and clock.utc_records:
            return _Moment(None, None, ts, None)
        text = ""
    utc = utc_instant(text, ts)
    if utc is not None:
        return _Moment(utc + offset if offset is not None else None, utc, ts, True)
    local = _when(ts)
    return _Moment(local, local - offset if local is not None and offset is not None else None, ts, False)


def _moved(p: NodeSummary, label: str, line: int | None, m: _Moment, on: datetime, clock: str) -> dict[str, Any]:
    """How one stamp was put on the clock of the others: the offset its file derived, that
    offset's anchor (the records of one moment, file:line) and residual."""
    c = p.summary.clock
    anchor = c.anchor if c is not None else None
    return {"node": label, "file": p.file, "line": line, "stamp": m.stamp, "as": on.isoformat(),
            "clock": clock, "local_offset_h": c.local_offset_h if c is not None else None,
            "anchor": {"utc": f"{p.file}:{anchor.utc_line if anchor else None}",
                       "local": f"{p.file}:{anchor.local_line if anchor else None}"},
            "residual_s": c.residual_s if c is not None else None}


#: A stamp of a run's file to put on one clock: the part's index, the line, the stamp as
#: printed and its record's text (None when the summary keeps no text for it).
_Stamp = tuple[int, int | None, str | None, str | None]


@dataclass(frozen=True)
class _OneClock:
    """Stamps of several files on one clock (:func:`on_one_clock`): ``clock`` is ``local``,
    ``utc`` or None (the files' clocks cannot be related); ``at`` each stamp on it (as
    printed when ``clock`` is None, None for a stamp that cannot be put on it); ``moved``
    the stamps put on the other clock, index -> how (``_moved``)."""

    clock: str | None
    at: list[datetime | None]
    moments: list[_Moment]
    moved: dict[int, dict[str, Any]]

    def partner(self, k: int, order: Sequence[int]) -> int:
        """When ``clock`` is None: the first stamp in ``order`` on the other clock than
        stamp ``k`` (a UTC stamp for a local one, and the reverse)."""
        placed = [j for j in order if self.moments[j].local is not None or self.moments[j].utc is not None]
        return next(j for j in placed if bool(self.moments[j].utc_stamped) != bool(self.moments[k].utc_stamped))


def on_one_clock(parts: Sequence[NodeSummary], labels: Sequence[str], stamps: Sequence[_Stamp]) -> _OneClock:
    """Stamps of several files of a run on one clock: the one function every order across
    files (the first failure, the first hang, each file's first and last stamps) goes through.

    SGLang's local time, as the stamps of most logs are: a stamp in UTC (NVIDIA Dynamo's
    head) is put on its file's local time with the offset that file derived
    (``model.dynamo``); where a file derived none, on UTC if every stamp can be, else on
    none: a local stamp and a UTC one are never compared as if of one clock, and
    ``unrelated`` says which two could not be."""
    moments = [_moment(parts[i], ts, text) for i, _, ts, text in stamps]
    placed = [m for m in moments if m.local is not None or m.utc is not None]
    clock = ("local" if all(m.local is not None for m in placed)
             else "utc" if all(m.utc is not None for m in placed) else None)
    at = [m.local if clock == "local" else m.utc if clock == "utc" else _when(m.stamp) for m in moments]
    moved: dict[int, dict[str, Any]] = {}
    for k, ((i, line, _, _), m, on) in enumerate(zip(stamps, moments, at, strict=True)):
        if clock is not None and on is not None and m.utc_stamped is (clock == "local"):  # put on the other clock
            moved[k] = _moved(parts[i], labels[i], line, m, on, clock)
    return _OneClock(clock, at, moments, moved)


def _unrelated_note(what: str, labels: Sequence[str], u: int, loc: int) -> str:
    """Why an order across files is uncertain: ``u``'s stamp is UTC, ``loc``'s local time."""
    return (f"the order of the {what} on {labels[u]} and {labels[loc]} is uncertain: {labels[u]}'s is stamped "
            f"in UTC (NVIDIA Dynamo's head), {labels[loc]}'s in local time, and no file shows a moment on both "
            "clocks to relate them")


def _first_failure(parts: Sequence[NodeSummary], labels: Sequence[str], key: Any
                   ) -> tuple[Crash | None, str | None]:
    """The crash of the node that failed first, tagged with its node, and a note when the
    order across nodes is uncertain.

    The failures are compared on one clock (:func:`on_one_clock`), and the crash's
    ``clock`` lists the failures whose stamps were put on it from the other."""
    failed = [(i, p, p.summary.crash) for i, p in enumerate(parts) if p.summary.crash and p.summary.outcome in _FAILED]
    if not failed:
        return None, None
    one = on_one_clock(parts, labels, [(i, q.line, q.ts, q.text) for i, _, q in failed])
    order = sorted(range(len(failed)), key=lambda k: (one.at[k] or datetime.max, failed[k][0]))
    i, p, first = failed[order[0]]
    c = first.to_dict()
    c["node"] = labels[i]
    c["file"] = first.file or p.file
    if first.first_rank:
        c["first_rank"] = key(i, first.first_rank)
    c["ranks"] = [key(j, r) for j, _, q in (failed[k] for k in order) for r in q.ranks]
    c["nodes"] = [labels[failed[k][0]] for k in order]
    note = None
    if one.clock is None:
        k = one.partner(order[0], order)
        u, loc = (order[0], k) if one.moments[order[0]].utc_stamped else (k, order[0])
        note = _unrelated_note("failures", labels, failed[u][0], failed[loc][0])
    t0 = one.at[order[0]]
    for k in order[1:] if note is None else ():
        t, j = one.at[k], failed[k][0]
        if t0 is None or t is None:
            note = f"the order of the failures on {labels[i]} and {labels[j]} is uncertain: one has no time stamp"
            break
        gap = (t - t0).total_seconds()
        if gap <= CLOCK_SKEW_S:
            note = (f"{labels[i]} and {labels[j]} failed {gap:.0f} s apart, within the {CLOCK_SKEW_S:.0f} s "
                    "by which two machines' clocks may disagree: which failed first is uncertain")
            break
    c["order_uncertain"] = note
    if one.moved:
        c["clock"] = [one.moved[k] for k in order if k in one.moved]
    return Crash.from_dict(c), note


def _hang(parts: Sequence[NodeSummary], labels: Sequence[str], key: Any) -> Hang | None:
    """The hang of the node whose first hang record (the timer that fired) came first, on
    one clock (:func:`on_one_clock`), tagged with its node; ``clock`` and
    ``order_uncertain`` as a crash's, when a stamp was moved or the clocks cannot be related."""
    hung = [(i, p.summary.hang) for i, p in enumerate(parts) if p.summary.hang]
    if not hung:
        return None
    one = on_one_clock(parts, labels, [(i, *_hang_stamp(h)) for i, h in hung])
    order = sorted(range(len(hung)), key=lambda k: (one.at[k] or datetime.max, hung[k][0]))
    i, first = hung[order[0]]
    h = first.to_dict()
    h["node"] = labels[i]
    h["ranks"] = [key(j, r) for j, q in hung for r in q.ranks]
    h["nodes"] = [labels[j] for j, _ in hung]
    if one.clock is None:
        k = one.partner(order[0], order)
        u, loc = (order[0], k) if one.moments[order[0]].utc_stamped else (k, order[0])
        h["order_uncertain"] = _unrelated_note("hangs", labels, hung[u][0], hung[loc][0])
    if one.moved:
        h["clock"] = [one.moved[k] for k in order if k in one.moved]
    return Hang.from_dict(h)


def _hang_stamp(h: Hang) -> tuple[int | None, str | None, str | None]:
    """The line, stamp and text of a hang's first record (the evidence keeps its text)."""
    ev = next((e for e in h.evidence if e.line == h.first_line), None)
    return h.first_line, h.first_ts, ev.text if ev else None


def _outcome(parts: Sequence[NodeSummary], labels: Sequence[str], lead: NodeSummary,
             crash: Crash | None, note: str | None, hang: Hang | None) -> tuple[str, str]:
    failed = [labels[i] for i, p in enumerate(parts) if p.summary.outcome in _FAILED]
    if failed:
        first = crash.node if crash and crash.node in failed else hang.node if hang and hang.node in failed else None
        i = labels.index(first or failed[0])
        if first is not None and crash is None and hang is not None:
            note = hang.order_uncertain
        s = parts[i].summary
        others = [n for n in labels if n != labels[i]]
        reason = f"{labels[i]} ({parts[i].file}): {s.outcome_reason}"
        if len(failed) > 1:
            reason += f"; also failed: {', '.join(n for n in failed if n != labels[i])}"
        elif others:
            reason += f"; {', '.join(others)} did not fail"
        if note:
            reason += f" ({note})"
        return s.outcome, reason
    ls = lead.summary
    lead_label = labels[parts.index(lead)]
    servers = [p for p in parts if p.role in ("prefill", "decode")]
    if servers:  # disaggregated: the router has no readiness of its own; every server must be ready
        waiting = [labels[parts.index(p)] for p in servers if p.summary.outcome != "ready"]
        if not waiting:
            return "ready", "every prefill and decode server is ready; no node failed"
        return "incomplete", f"no server failed; not ready: {', '.join(waiting)}"
    if ls.outcome == "ready":
        return "ready", f"{lead_label} ({lead.file}): {ls.outcome_reason}; no node failed"
    return "incomplete", (f"no node failed and none reached readiness; {lead_label} ({lead.file}): "
                          f"{ls.outcome_reason}")


def _coverage(summaries: Sequence[RunSummary]) -> Coverage:
    covs = [s.coverage for s in summaries]
    lines = sum(c.lines_read or 0 for c in covs)
    unrec = sum(c.lines_unrecognised or 0 for c in covs)
    kinds: dict[str, int] = {}
    shapes: dict[str, int] = {}
    for c in covs:
        for k, v in c.kinds.items():
            kinds[k] = kinds.get(k, 0) + v
        for k, v in c.unrecognised_shapes.items():
            shapes[k] = shapes.get(k, 0) + v
    top = sorted((t for c in covs for t in c.top_unrecognised), key=lambda t: -(t.count or 0))[:10]
    return Coverage.from_dict({
        "lines_read": lines,
        "lines_recognised": max(lines - unrec, 0),
        "lines_unrecognised": unrec,
        "recognised_pct": round(100.0 * (lines - unrec) / lines, 2) if lines else 100.0,
        "events": sum(c.events or 0 for c in covs),
        "kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
        "top_unrecognised": [t.to_dict() for t in top],
        "unrecognised_shapes": shapes,
        "long_lines": sum(c.long_lines or 0 for c in covs),
        "partial_lines": sum(c.partial_lines or 0 for c in covs),
        "decode_errors": sum(c.decode_errors or 0 for c in covs),
        "unterminated_last_line": any(c.unterminated_last_line for c in covs),
        "bytes": sum(c.bytes or 0 for c in covs),
        "files": len(covs),
    })
