"""One rank's record in the run model, and how two parts of a log merge it.

A scheduler rank is labelled as SGLang printed it (``TP5``, ``DP0 TP3 EP3``); a
single-GPU run prints no rank, and its scheduler is the rank ``-`` (:data:`NO_RANK`).
Each figure's merge rule is written beside the figure: the rank after ``later``'s
records followed this rank's is what one pass over both would have built.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..events import PHASES

NO_RANK = "-"
PHASE_INDEX = {p: i for i, p in enumerate(PHASES)}
#: Start-up records in order that every rank prints: a rank's furthest one says how far it got
#: inside a phase (a rank that printed "Load weight begin" but not "Load weight end" is behind).
#: Not the pool-size line ("max_total_num_tokens=..."), which the first rank alone prints in many
#: versions: the others are not behind for lacking it (real-pairs 049).
MILESTONES = ("init_dist_begin", "init_dist_end", "load_weight_begin", "load_weight_end", "kv_cache_alloc",
              "memory_pool_end", "capture_begin", "capture_end")
MILESTONE_INDEX = {k: i for i, k in enumerate(MILESTONES)}

#: Memory figures kept from the first record that gives them: (the key whose presence
#: marks the group as taken, the group's keys, the evidence key). Every other figure
#: is the last one printed.
FIRST_WINS = (
    ("kv_pools", ("kv_tokens", "k_gib", "v_gib", "kv_gib"), "kv_cache_alloc"),
    ("pool_end_avail_gib", ("pool_end_avail_gib",), "memory_pool_end"),
    ("capture_begin_avail_gib", ("capture_begin_avail_gib", "capture_bs"), "capture_begin"),
    ("capture_end_line", ("capture_end_line", "capture_end_avail_gib", "capture_mem_gib", "capture_elapsed_s"),
     "capture_end"),
    ("draft_capture_begin_avail_gib", ("draft_capture_begin_avail_gib",), "draft_capture_begin"),
    ("draft_capture_end_avail_gib", ("draft_capture_end_avail_gib", "draft_capture_mem_gib"), "draft_capture_end"),
    ("draft_weights_gib", ("draft_weights_gib", "draft_load_end_avail_gib", "draft_load_elapsed_s"),
     "draft_load_weight_end"),
)
#: Marks a rank's KV figures as its hybrid pools' total (``model.pools``): they replace the
#: first allocation line's, whichever part of the log each came from.
KV_HYBRID = "kv_hybrid_line"
#: A rank's ``Memory pool end`` lines in order, (line, free GiB): each KV pool's is the first
#: after it (``startup.pool_ends``); kept apart so that parts of a log merge by extending,
#: wherever a cut falls between a pool and its end.
POOL_ENDS = "pool_ends"
_LABEL_PART = re.compile(r"([A-Za-z_]+)(-?\d+)")


@dataclass
class RankState:
    """What one rank did, as far as the log shows it (mutable while observing)."""

    phase: str | None = None
    #: phase -> {first_line, first_ts, last_line, last_ts}
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: memory figures, unit-suffixed (GiB as SGLang printed them)
    memory: dict[str, Any] = field(default_factory=dict)
    #: figure group -> the record it came from {file, line, rank, text}
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)
    last_line: int = 0
    last_ts: str | None = None  # of the last record that had a stamp
    last_text: str = ""
    milestone: int = -1
    #: line of the last record that placed this rank in its phase
    phase_line: int = 0
    #: line and stamp of the last record of the rank's own course (a phase line, a batch)
    course_line: int = 0
    course_ts: str | None = None
    #: a second "Load weight begin" after the rank's weights loaded, until its end line says
    #: whose it is (another model class: a draft model's; the same: a reload) {avail_gib, file, line, text}
    pending_load: dict[str, Any] | None = None

    def touch(self, line: int, ts: str | None, text: str) -> None:
        """The rank printed a record: it was alive at ``line``."""
        self.last_line = line
        if ts:
            self.last_ts = ts
        self.last_text = text

    def enter(self, phase: str, line: int, ts: str | None, kind: str) -> None:
        """A record of ``kind`` places the rank in ``phase`` (already touched)."""
        m = MILESTONE_INDEX.get(kind)
        if m is not None and m > self.milestone:
            self.milestone = m
        info = self.phases.get(phase)
        if info is None:
            info = self.phases[phase] = {"first_line": line, "first_ts": ts}
        info["last_line"] = line
        info["last_ts"] = ts
        info["last_kind"] = kind
        self.phase = phase
        self.phase_line = self.course_line = line
        if ts:
            self.course_ts = ts

    def evidence_of(self, key: str, file: str | None, line: int, rank: str | None, text: str) -> None:
        self.evidence[key] = {"file": file, "line": line, "rank": rank, "text": text}

    def merge(self, later: RankState) -> None:
        """This rank after ``later``'s records followed its own (``later`` is consumed)."""
        if later.phase is not None:  # the phase is the last one entered
            self.phase = later.phase
            self.phase_line = later.phase_line
        if later.course_line:
            self.course_line = later.course_line
        if later.course_ts is not None:
            self.course_ts = later.course_ts
        if later.pending_load is not None:
            self.pending_load = later.pending_load
        for phase, info in later.phases.items():  # first seen kept, last seen taken
            kept = self.phases.get(phase)
            if kept is None:
                self.phases[phase] = info
            else:
                kept["last_line"] = info["last_line"]
                kept["last_ts"] = info["last_ts"]
                kept["last_kind"] = info.get("last_kind")
        skip_memory: set[str] = set()
        skip_evidence: set[str] = set()
        for marker, keys, evidence in FIRST_WINS:
            if marker in self.memory:
                skip_memory.update(keys)
                skip_evidence.add(evidence)
        if KV_HYBRID in self.memory:  # the total is kept; the later part's first line is not it
            skip_memory.update(("kv_gib", "kv_tokens", KV_HYBRID))
            skip_evidence.add("kv_cache_alloc")
        elif KV_HYBRID in later.memory:  # the later part's total replaces this part's first line
            skip_memory.difference_update(("kv_gib", "kv_tokens", KV_HYBRID))
            skip_evidence.discard("kv_cache_alloc")
        for key, value in later.memory.items():
            if key in ("kv_pools", POOL_ENDS) and key in self.memory:  # every pool and pool end, in order
                self.memory[key].extend(value)
            elif key not in skip_memory:
                self.memory[key] = value
        for key, value in later.evidence.items():
            if key not in skip_evidence:
                self.evidence[key] = value
        if later.last_line:  # last seen: the later part's, when it saw the rank
            self.last_line = later.last_line
            self.last_text = later.last_text
        if later.last_ts is not None:
            self.last_ts = later.last_ts
        self.milestone = max(self.milestone, later.milestone)


def rank_sort_key(label: str | None) -> tuple[Any, ...]:
    """Order ranks as a person reads them: TP2 before TP10, DP0 TP1 before DP1 TP0."""
    if not label:
        return ((),)
    parts = []
    for token in label.split():
        m = _LABEL_PART.fullmatch(token)
        parts.append((m.group(1), int(m.group(2))) if m else (token, 0))
    return (tuple(parts),)


def draws_bars(label: str) -> bool:
    """Whether a rank can be the one that draws tqdm bars: SGLang shows them on TP rank 0
    only (a label without a TP part, such as ``PP0`` or ``-``, may be that rank)."""
    tp = next((m.group(2) for m in map(_LABEL_PART.fullmatch, label.split()) if m and m.group(1) == "TP"), None)
    return tp is None or tp == "0"


def bar_rank(labels: Any) -> str:
    """The rank tqdm bars belong to, given the ranks a log names: the first, in rank
    order, that can draw them; ``-`` (an unnamed process) when the log names none that can
    (an excerpt of TP1's lines under TP rank 0's bars)."""
    named = sorted((k for k in labels if k != NO_RANK), key=rank_sort_key)
    return next((k for k in named if draws_bars(k)), NO_RANK)


#: Label parts that name a rank inside one attention-DP group: every such rank prints the
#: same batch statistics when it prints them at all (``--enable-metrics-for-all-schedulers``).
_INSIDE_GROUP = frozenset(("TP", "EP", "ATTN_CP", "MOE_DP", "PP"))


def dp_group(label: str) -> str:
    """The attention-DP group of a rank label: the label without its TP, EP, ATTN_CP, MOE_DP
    and PP parts (``DP1 TP9 EP9`` -> ``DP1``; ``TP3`` -> ``""``: one group; every pipeline stage
    logs the same batches, real-unseen 1264)."""
    return " ".join(t for t in label.split()
                    if not ((m := _LABEL_PART.fullmatch(t)) and m.group(1) in _INSIDE_GROUP))


def stats_ranks(labels: Any) -> dict[str, str]:
    """One rank per attention-DP group, the group's first in rank order (the one SGLang has
    print batch statistics: ``attn_tp_rank == 0``), by group: figures sum over these only,
    so a log in which every TP rank prints them counts each group once."""
    out: dict[str, str] = {}
    for label in sorted(labels, key=rank_sort_key):
        out.setdefault(dp_group(label), label)
    return out


#: torch's global rank, as its c10d records and ``[rankN]:`` prefixes name it.
TORCH_RANK = re.compile(r"rank\d+")
#: A rank label of a pure tensor-parallel run (``TP3``).
PURE_TP = re.compile(r"TP\d+")


def torch_rank_label(ranks: Iterable[str], torch_rank: str) -> str | None:
    """The SGLang rank that torch's global ``rankN`` is, or None where the log cannot tell: with
    one pipeline stage torch's global rank is the TP rank (DP attention's and EP's parts share
    it: ``DP15 TP15 EP15`` is rank15), so it is the one label whose TP part is N; a later stage
    (``PP1``) or several labels with that TP part (data-parallel replicas) leave it open."""
    n = torch_rank[4:]
    labels = [k for k in ranks if k != NO_RANK and not TORCH_RANK.fullmatch(k)]
    if not labels or any(tp_part(k) is None or _LATER_STAGE.search(k) for k in labels):
        return None
    found = [k for k in labels if tp_part(k) == n]
    return found[0] if len(found) == 1 else (f"TP{n}" if all(PURE_TP.fullmatch(k) for k in labels) else None)


def tp_part(label: str) -> str | None:
    """The TP rank's number in a rank label (``15`` of ``DP15 TP15 EP15``), or None."""
    m = _TP_PART.search(label)
    return m.group(1) if m else None


_TP_PART = re.compile(r"(?<![A-Z_])TP(\d+)\b")
_LATER_STAGE = re.compile(r"(?<![A-Z_])PP[1-9]\d*\b")
