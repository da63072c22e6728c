"""What each log shows at all, which ranks of two logs are the same GPU, and whether two
runs are the same setup.

A diff compares only what both logs cover: a phase, a setting or a figure that one
excerpt does not show is "not in this log", never a change. These facts say, per side,
what is covered, so the comparisons in ``facts`` can ask before they speak.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..events import PHASES
from ..model.records import Notice
from ..model.run import RunSummary
from ..units import clip

_PHASE_INDEX = {p: i for i, p in enumerate(PHASES)}

#: SGLang's argparse aliases of the settings the setup is judged by (``--tp`` = ``--tp-size``
#: = ``--tensor-parallel-size``); the launch command keeps the spelling that was typed.
ALIASES: dict[str, tuple[str, ...]] = {
    "tp_size": ("tp_size", "tensor_parallel_size", "tp"),
    "dp_size": ("dp_size", "data_parallel_size", "dp"),
    "pp_size": ("pp_size", "pipeline_parallel_size", "pp"),
    "model_path": ("model_path", "model"),
}


@dataclass(frozen=True)
class Evidence:
    """One log line a statement rests on."""

    file: str | None
    line: int | None
    rank: str | None
    text: str


def ev(run: RunSummary, line: int | None, rank: str | None, text: str | None) -> Evidence:
    return Evidence(run.file, line, rank, clip(text or "", 400))


class Cited(Protocol):
    """A record of a run summary that cites a line: a :class:`.records.Cite`, or a batch
    record of the serving phase (``model.serving_records``)."""

    @property
    def file(self) -> str | None: ...
    @property
    def line(self) -> int | None: ...
    @property
    def rank(self) -> str | None: ...
    @property
    def text(self) -> str | None: ...


def ev_of(entry: Mapping[str, Any] | Cited | None) -> tuple[Evidence, ...]:
    """A run summary's evidence entry (a mapping, or a record that cites a line) as an Evidence, or nothing."""
    if entry is None:
        return ()
    if not isinstance(entry, Mapping):
        return () if entry.line is None else (Evidence(entry.file, entry.line, entry.rank, clip(entry.text or "", 400)),)
    if not entry or entry.get("line") is None:
        return ()
    return (Evidence(entry.get("file"), entry.get("line"), entry.get("rank"), clip(str(entry.get("text") or ""), 400)),)


def notice_ev(n: Notice) -> Evidence:
    """A notice of a run summary (``RunSummary.notices``) as an Evidence."""
    return Evidence(n.file, n.line, n.rank, clip(n.text, 400))


def phase_index(phase: str | None) -> int:
    return _PHASE_INDEX.get(phase or "", -1)


def setting(run: RunSummary, name: str) -> Any:
    """A setting as the log shows it: the ``server_args`` dump, else the launch command (aliases read)."""
    for key in ALIASES.get(name, (name,)):
        if key in run.server_args:
            return run.server_args[key]
    for key in ALIASES.get(name, (name,)):
        if key in run.launch_args:
            return run.launch_args[key]
    return None


# ---------------------------------------------------------------------------- ranks
_PART = re.compile(r"\b(DP|PP|TP)(\d+)\b")


def _rank_key(label: str) -> tuple[int, int, int] | None:
    """(DP, PP, TP) of a rank label; an absent part is 0 (one DP group, one PP stage)."""
    parts = dict((k, int(v)) for k, v in _PART.findall(label))
    if "TP" not in parts:
        return None
    return parts.get("DP", 0), parts.get("PP", 0), parts["TP"]


def pair_ranks(base: list[str], fail: list[str]) -> dict[str, str]:
    """Baseline rank label -> the failing run's label for the same GPU.

    Labels are compared by their DP/PP/TP numbers, so ``DP0 TP0 EP0`` and ``TP0`` are the
    same rank; ``-`` (a scheduler that printed no rank, as SGLang on one GPU) is TP0 when the
    other log names TP0 and this one has no other rank that could be it.
    """
    def keyed(labels: list[str]) -> dict[tuple[int, int, int], str]:
        out: dict[tuple[int, int, int], str] = {}
        for label in labels:
            key = _rank_key(label)
            if key is not None:
                out.setdefault(key, label)
        if "-" in labels and (0, 0, 0) not in out:
            out[(0, 0, 0)] = "-"
        return out

    fk = keyed(fail)
    pairs = {b: b for b in base if b in fail}
    taken = set(pairs.values())
    for key, label in keyed(base).items():
        if label in pairs:
            continue
        other = fk.get(key)
        if other is not None and other not in taken:
            pairs[label] = other
            taken.add(other)
    return pairs


# ---------------------------------------------------------------------------- coverage
@dataclass(frozen=True)
class Coverage:
    """What one log shows: a statement about anything else is "not in this log"."""

    outcome: str
    ranks: tuple[str, ...]
    #: Per rank, the phases it printed lines in, plus the phase it crashed in (pipeline order).
    rank_phases: Mapping[str, tuple[str, ...]]
    #: Per rank, the furthest of those phases (None: the rank printed no phase line).
    rank_reached: Mapping[str, str | None]
    phases: tuple[str, ...]
    #: Where the settings come from: "server_args" (the full dump), "launch_command", or None.
    settings_source: str | None
    launch_command: bool
    figures: tuple[str, ...]
    #: The log shows where the run stopped (a crash or a hang), so an absence after it is real.
    stopped: bool
    reached_ready: bool


def crash_phases(run: RunSummary) -> dict[str, str]:
    """Rank -> the phase its fatal error happened in, from the crash and each traceback."""
    out: dict[str, str] = {}
    for exc in run.exceptions:
        if exc.phase:
            for r in exc.ranks:
                if r and phase_index(exc.phase) > phase_index(out.get(r)):
                    out[r] = exc.phase
    crash = run.crash
    if crash and crash.phase:
        for r in crash.ranks:
            if r and r not in out:
                out[r] = crash.phase
    return out


def coverage(run: RunSummary) -> Coverage:
    crashed = crash_phases(run)
    ranks = list(dict.fromkeys([*run.ranks, *crashed]))
    rank_phases: dict[str, tuple[str, ...]] = {}
    reached: dict[str, str | None] = {}
    for r in ranks:
        seen = set(run.phases.get(r, {})) | ({crashed[r]} if r in crashed else set())
        if run.phase_reached.get(r):
            seen.add(run.phase_reached[r])
        ordered = tuple(p for p in PHASES if p in seen)
        rank_phases[r] = ordered
        reached[r] = ordered[-1] if ordered else None
    source = "server_args" if run.server_args else "launch_command" if run.launch_args else None
    figures = sorted({k for m in run.memory.values() for k in m.figures()})
    return Coverage(
        outcome=run.outcome, ranks=tuple(ranks), rank_phases=rank_phases, rank_reached=reached,
        phases=tuple(p for p in PHASES if any(p in ph for ph in rank_phases.values())),
        settings_source=source, launch_command=bool(run.launch_command), figures=tuple(figures),
        stopped=run.outcome in ("crashed", "hung"), reached_ready=run.outcome == "ready",
    )


# ---------------------------------------------------------------------------- setup
#: What makes two runs the same setup, in the order the verdict names differences.
#: The setup's parts that are the parallel layout of one deployment.
LAYOUT_KEYS = frozenset({"tp_size", "dp_size", "pp_size", "rank_parts"})
SETUP_KEYS = (
    ("model_path", "model"),
    ("architecture", "model architecture"),
    ("tp_size", "TP size"),
    ("dp_size", "DP size"),
    ("pp_size", "PP size"),
    ("gpu", "GPU"),
    ("sglang", "SGLang version"),
    ("rank_parts", "rank labels' parallel parts"),
)


@dataclass(frozen=True)
class SetupItem:
    """One aspect of the setup as both logs show it (None: not in that log)."""

    key: str
    label: str
    baseline: Any
    failing: Any


def _set_both(d: SetupItem) -> bool:
    """Whether both runs' settings give this part of the layout (named then by the setting that
    sets it, "dp_size 8 vs 4"; a size read from the ranks a log shows is not a setting's value)."""
    return d.key in LAYOUT_KEYS and all(isinstance(x, int) for x in (d.baseline, d.failing))


@dataclass(frozen=True)
class Setup:
    """Whether the two runs are the same setup, judged only on what both logs show."""

    differs: tuple[SetupItem, ...]
    #: Labels ("TP size", ...) of the aspects both logs show alike.
    same: tuple[str, ...]
    #: Labels of the aspects one log or both do not show (so sameness is not established for them).
    unknown: tuple[str, ...]
    comparable: bool
    evidence: tuple[Evidence, ...]
    #: only the parallel layout differs (TP, DP, PP sizes) and both logs show the same model: the
    #: same deployment launched with another split of it, whose ranks each hold another share (a
    #: model one log does not show leaves that unknown: another setup)
    layout_only: bool = False

    def words(self) -> str:
        """The difference as the verdict says it: another parallel layout of the same deployment,
        or another setup."""
        listed = "; ".join(f"{d.key if _set_both(d) else d.label} {d.baseline} vs {d.failing}" for d in self.differs)
        return f"another parallel layout ({listed})" if self.layout_only else f"not the same setup ({listed})"

    @staticmethod
    def empty() -> Setup:
        return Setup((), (), (), True, ())


def _gpu(run: RunSummary) -> str | None:
    """The GPU as an OOM message describes it: device API and total capacity."""
    for oom in [run.crash.oom if run.crash else None, *(e.oom for e in run.exceptions)]:
        if oom and oom.total_gib:
            return f"{oom.device or 'GPU'} {oom.total_gib:.1f} GiB"
    return None


def setup_values(run: RunSummary) -> dict[str, Any]:
    values: dict[str, Any] = {k: setting(run, k) for k in ("model_path", "tp_size", "dp_size", "pp_size")}
    values["architecture"] = (run.versions or {}).get("model_type")
    values["gpu"] = _gpu(run)
    values["sglang"] = (run.versions or {}).get("sglang")
    return values


def same_checkpoint(a: str, b: str) -> bool:
    """Whether two paths name the same checkpoint, perhaps under another directory (their last part)."""
    return a.strip().rstrip("/").rsplit("/", 1)[-1] == b.strip().rstrip("/").rsplit("/", 1)[-1]


def _same(key: str, a: Any, b: Any) -> bool:
    if key == "model_path" and isinstance(a, str) and isinstance(b, str):
        return same_checkpoint(a, b)  # the same checkpoint under another directory is the same model
    if isinstance(a, str) and isinstance(b, str):
        return a.strip() == b.strip()
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return bool(a == b)


def tp_at_least(run: RunSummary) -> int | None:
    """The TP size the rank labels imply at least: a log that names TP7 has eight TP ranks or more."""
    labels = [*run.ranks, *(run.crash.ranks if run.crash else [])]
    tps = [k[2] for k in (_rank_key(r) for r in labels if r) if k is not None]
    return max(tps) + 1 if tps else None


#: The parts of a rank label in the order SGLang writes them.
_PART_ORDER = ("DP", "PP", "ATTN_CP", "TP", "EP")
_PARTS = re.compile(r"\b(DP|PP|ATTN_CP|TP|EP)\d+\b")


def rank_parts(run: RunSummary) -> str | None:
    """The parallel parts a run's rank labels name ("TP", "DP TP EP"), in SGLang's order, or
    None without a labelled rank: SGLang names a DP part under DP attention, a PP part with
    pipeline stages and an EP part with expert parallelism (in the versions that print them), so
    two runs whose labels name other parts were most likely launched with another layout."""
    found = {k for label in run.ranks if _rank_key(label) is not None for k in _PARTS.findall(label)}
    return " ".join(p for p in _PART_ORDER if p in found) or None


def setup(base: RunSummary, fail: RunSummary) -> Setup:
    bv, fv = setup_values(base), setup_values(fail)
    if bv.get("dp_size") is None or fv.get("dp_size") is None:
        # where a settings dump does not say it, the rank labels show the parallel layout's parts
        bv["rank_parts"], fv["rank_parts"] = rank_parts(base), rank_parts(fail)
    # A TP size one log does not print may still be bounded by the ranks it names.
    for values, other, run in ((bv, fv, base), (fv, bv, fail)):
        least = tp_at_least(run)
        if values.get("tp_size") is None and other.get("tp_size") is not None and least \
                and least > int(other["tp_size"]):
            values["tp_size"] = f"at least {least} (its ranks go up to TP{least - 1})"
    differs, same, unknown = [], [], []
    for key, label in SETUP_KEYS:
        if key not in bv:  # (the rank labels' parts: compared only where a dump lacks the DP size)
            continue
        b, f = bv.get(key), fv.get(key)
        if b is None or f is None:
            unknown.append(label)
        elif _same(key, b, f):
            same.append(label)
        else:
            differs.append(SetupItem(key, label, b, f))
    evidence: list[Evidence] = []
    if differs:
        for run in (fail, base):
            for kind in ("server_args", "launch_command"):
                evidence += [notice_ev(n) for n in run.notices.get(kind, [])[:1]]
    # only the layout differs: of one deployment where both logs show the model alike; where a log
    # does not show it, of runs the rank labels show split another way, the model unknown
    layout = bool(differs) and all(d.key in LAYOUT_KEYS for d in differs) and (
        "model" in same or "model" in unknown and any(d.key == "rank_parts" for d in differs))
    return Setup(tuple(differs), tuple(same), tuple(unknown), not differs, tuple(evidence), layout)
