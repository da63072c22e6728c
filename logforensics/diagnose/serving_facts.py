"""Facts about a hang's timer and about the serving phase over time, for the HG/SV rules.

Why here and not in the templates: which diagnostic to switch on next, and in which
direction a memory knob should move, are decisions with reasons; rules only word them.
The direction rule: a device's out-of-memory error while serving means the static pool left
too little for activations, so ``--mem-fraction-static`` goes down; a KV pool that is
merely full (retractions, a growing queue) with no such error may go up, when the
start-up figures show free memory. Never both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model.hang import TIMERS
from ..model.rank import rank_sort_key
from ..model.records import NO_MEMORY, Cite, PyspyDump
from ..model.run import RunSummary
from ..model.serving import FIGURES
from ..model.serving_records import Health, KvPressure, ServingChange, Storm, Thresholds
from ..model.summary import Hang
from .sides import Evidence, ev

#: A throughput change counts as a collapse at or below this ratio.
COLLAPSE_RATIO = 0.5


@dataclass(frozen=True)
class Step:
    """One thing to switch on or change next, and why."""

    setting: str
    why: str


@dataclass(frozen=True)
class TimerFacts:
    """The timer that fired (``failing.hang``), its knob, who is behind, and what to run next."""

    fired: bool
    failure_not_timeout: bool
    timer: str | None = None
    what: str | None = None
    setting: str | None = None
    default_s: float | None = None
    timeout_s: float | None = None
    note: str | None = None
    ranks: tuple[str, ...] = ()
    collective: str | None = None
    behind: str | None = None
    behind_completed: int | None = None
    others_completed: int | None = None
    main_functions: tuple[Mapping[str, Any], ...] = ()
    watchdog_timeout_set: Any = None
    next_steps: tuple[Step, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    #: where the timer is the HTTP server's (its records name no rank) and a rank's timer fired
    #: after it: that one, in words; ``ranks`` are then its ranks, not the first timer's
    then_timer: str | None = None
    #: the ranks whose py-spy dump shows the main thread waiting on a JIT build's file lock, when
    #: every other dumped scheduler is building, and that wait with the build above it (``_jit_lock``)
    jit_lock_ranks: tuple[str, ...] = ()
    jit_lock_frames: str | None = None
    #: the dumped schedulers that were building then (the lock's holder), and the build's frame
    jit_build_ranks: tuple[str, ...] = ()
    jit_build_frame: str | None = None


#: A main thread waiting on a kernel build's file lock: one process builds a JIT module (aiter's
#: ``build_module``, torch's cpp_extension) while the others wait on its lock file
#: (``FileBaton.wait``); a build that hangs, or a lock its process left behind, keeps them waiting.
JIT_LOCK_WAIT = re.compile(r"^(?:wait|acquire) \((?:[\w./-]*/)?(?:file_baton|filelock[\w/]*)\.py:\d+\)$")
#: The frames of the build itself: its lock, its module build, the compiler it runs (ninja).
JIT_BUILD = re.compile(r"^(?:mp_lock|build_module|_jit_compile|_run_ninja_build|_write_ninja_file_and_compile_objects|"
                       r"build_extension)\b")


def _jit_lock(hang: Hang) -> tuple[tuple[str, ...], str | None, tuple[str, ...], str | None]:
    """The dumped schedulers waiting on a JIT build's lock (``TimerFacts.jit_lock_ranks``) and the
    wait with the build frame above it; those building (a build frame in the first frames of their
    main stack, no lock wait: the one holding the lock) and where. Only where every dumped
    scheduler with a main stack is one or the other, and one waits."""
    dumped = [d for d in hang.pyspy if d.main_stack]
    waiting = [d for d in dumped if JIT_LOCK_WAIT.match(d.main_stack[0])
               and any(JIT_BUILD.match(f) for f in d.main_stack[1:6])]
    building = [d for d in dumped if d not in waiting and any(JIT_BUILD.match(f) for f in d.main_stack[:8])]
    if not waiting or len(waiting) + len(building) < len(dumped):
        return (), None, (), None
    first = waiting[0].main_stack
    build = next(f for f in first[1:6] if JIT_BUILD.match(f))
    at = next((f for f in building[0].main_stack[:8] if JIT_BUILD.match(f)), None) if building else None

    def names(dumps: list[PyspyDump]) -> tuple[str, ...]:
        return tuple(sorted((d.rank or f"pid {d.pid}" for d in dumps), key=rank_sort_key))
    return names(waiting), f"{first[0]}, under {build}", names(building), at


def timer_facts(run: RunSummary) -> TimerFacts:
    hang = run.hang
    if not hang or not hang.timer:
        return TimerFacts(False, False)
    c10d = hang.timer.startswith("c10d")
    coll = next((c for c in hang.collectives if c.op), None) or next(iter(hang.collectives), None)
    collective = None
    if coll:
        collective = " ".join(x for x in (coll.op, f"SeqNum={coll.seq}" if coll.seq is not None else None) if x)
    behind = hang.behind
    mains = tuple({"rank": d.rank, "function": d.main_function, "location": d.main_location,
                   "line": d.line} for d in hang.pyspy if d.main_function)
    env = dict(run.env or {})
    steps: list[Step] = []
    if c10d and str(env.get("NCCL_DEBUG", "")).upper() != "INFO":
        steps.append(Step("NCCL_DEBUG=INFO NCCL_DEBUG_FILE=/tmp/nccl.%h.%p.log",
                          "NCCL's own log of every rank (one file per host and process): which peer and "
                          "channel the stuck collective waits on"))
    flight_off = any("FlightRecorder is disabled" in (n.text or "") for n in run.notices.get("c10d", []))
    if c10d and (flight_off or "TORCH_NCCL_TRACE_BUFFER_SIZE" not in env):
        steps.append(Step("TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1",
                          "PyTorch's flight recorder: the last collectives of every rank, dumped when the "
                          "watchdog fires, so the rank that never entered the collective shows"
                          + (" (the log says it is disabled)" if flight_off else "")))
    serving = any(p == "serving" for p in (run.phase_reached or {}).values())
    if not mains and serving and "soft_watchdog_timeout" not in (run.launch_args or {}):
        limit = min(hang.timeout_s or 300, 300)
        # the log may show py-spy missing where the scheduler runs: then it must be installed first
        missing = next((f for f in (hang.stacks.pyspy_failures if hang.stacks else []) if f.reason == "not_installed"),
                       None)
        then = (f"; the log shows py-spy is not installed where the scheduler runs (line {missing.line}): install "
                "it there first" if missing is not None and missing.line else "")
        steps.append(Step(f"--soft-watchdog-timeout {int(limit // 2)}",
                          "SGLang dumps every scheduler's Python stack with py-spy (installed in the container) "
                          f"before the hard timer fires, naming the function each rank is stuck in{then}"))
    elif not mains:
        steps.append(Step("py-spy dump --native --pid PID, for each sglang::scheduler process, while it hangs",
                          "the Python and native stack of every rank: the one that is not in the collective "
                          "is the one the others wait for (SGLang's watchdogs watch serving, not start-up)"))
    if hang.timer == "no_progress":  # no timer fired: whether the schedulers still live is not in the log
        steps.append(Step("ps -eo pid,ppid,stat,etime,cmd | grep -i sglang, while it stalls",
                          "whether the schedulers are alive: a defunct one (stat Z) died without a record and "
                          "the server waits on it; live ones are stuck, and the py-spy dump shows where"))
    evidence = tuple(ev(run, e.line, e.rank, e.text) for e in hang.evidence[:8])
    jit = _jit_lock(hang)
    rankless = bool(TIMERS.get(hang.timer, {}).get("rankless"))
    after = next((f for f in hang.families or () if f != hang.timer and not TIMERS.get(f, {}).get("rankless")), None) \
        if rankless else None
    return TimerFacts(
        fired=bool(hang.timed_out),
        failure_not_timeout=hang.timer == "c10d_failure",
        timer=hang.timer, what=hang.what, setting=hang.setting, default_s=hang.default_s,
        timeout_s=hang.timeout_s, note=hang.note, ranks=tuple(hang.ranks or ()),
        collective=collective, behind=behind.rank if behind else None,
        behind_completed=behind.last_completed if behind else None,
        others_completed=behind.others_completed if behind else None, main_functions=mains,
        watchdog_timeout_set=(run.launch_args or {}).get("watchdog_timeout") if c10d else None,
        next_steps=tuple(steps), evidence=evidence,
        then_timer=TIMERS.get(after, {}).get("what") if after else None,
        jit_lock_ranks=jit[0], jit_lock_frames=jit[1], jit_build_ranks=jit[2], jit_build_frame=jit[3])


@dataclass(frozen=True)
class Change:
    """A serving figure that moved to a new level (``failing.serving.changes``)."""

    metric: str
    label: str
    at: str
    line: int
    before: float
    after: float
    ratio: float | None
    recovered: bool
    before_it: tuple[str, ...]
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class Stall:
    """Decode windows below a quarter of the running median of decode throughput while a
    prefill batch ran in them (``failing.serving.health.stalls``)."""

    start: str
    end: str
    line: int
    prefill_line: int
    windows: int
    tok_s: float
    median_tok_s: float
    running_req: float | None
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class Seesaw:
    """Windows alternating between prefill starving decode and decode starving prefill."""

    start: str
    end: str
    line: int
    windows: int
    switches: int
    prefill_windows: int
    decode_windows: int
    stretches: int
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class Signal:
    """One figure of the attention-DP groups: the heaviest group's median share of their mean."""

    figure: str
    label: str
    windows: int
    heaviest: str
    heaviest_share: float
    lightest: str
    lightest_share: float
    heaviest_value: float
    lightest_value: float
    at: str
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class Imbalance:
    """Attention-DP groups loaded unevenly: the signals that name the same heaviest group."""

    heaviest: str
    groups: int
    signals: tuple[Signal, ...]
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class ServingFacts:
    """The serving phase over time: collapse, a full KV pool, retraction storms, cache hits,
    and which way the memory knobs should move."""

    has_series: bool
    collapse: Change | None = None
    load_fell_too: bool = False
    cache_collapse: Change | None = None
    kv_full: KvPressure | None = None
    storm: Storm | None = None
    runtime_oom: bool = False
    kv_advice: tuple[Step, ...] = ()
    baseline_collapse: Change | None = None
    kv_evidence: tuple[Evidence, ...] = ()
    storm_evidence: tuple[Evidence, ...] = ()
    stalls: tuple[Stall, ...] = ()
    stall_count: int = 0
    seesaw: Seesaw | None = None
    imbalance: Imbalance | None = None
    idle_gaps: int = 0
    thresholds: Thresholds | None = None


def _change(run: RunSummary, c: ServingChange) -> Change:
    lines = []
    for x in c.context:
        if x.what == "change":
            lines.append(f"{FIGURES.get(x.metric or '', x.metric)} {_n(x.before or 0.0)} -> {_n(x.after or 0.0)} "
                         f"at {x.at} (line {x.line})")
        elif x.what == "retraction":
            lines.append(f"the first retraction at {x.ts} (line {x.line}, {x.rank or '-'})")
        elif x.what == "cuda_graph_off":
            lines.append(f"decode batches stopped running as CUDA graphs at line {x.line}")
    evidence = [ev(run, x.line, x.rank, x.text) for x in c.context if x.text]
    at = c.evidence
    if at and at.text:
        evidence.insert(0, ev(run, at.line, at.rank, at.text))
    return Change(c.metric, FIGURES.get(c.metric, c.metric), c.at, c.line, c.before, c.after,
                  c.ratio, bool(c.recovered), tuple(lines), tuple(evidence))


def _n(x: float) -> str:
    return f"{x:.2f}" if abs(x) < 10 else f"{x:.0f}"


def _first(run: RunSummary | None, metric: str) -> ServingChange | None:
    """The first change of ``metric`` to COLLAPSE_RATIO or less of its level; a change that
    idle time opens (``after_idle_s``) is a new load after it, not a collapse."""
    if run is None or not run.serving:
        return None
    return next((c for c in run.serving.changes if c.metric == metric
                 and c.ratio is not None and c.ratio <= COLLAPSE_RATIO and not c.after_idle_s), None)


def _evs(run: RunSummary, entries: list[Cite]) -> tuple[Evidence, ...]:
    return tuple(ev(run, e.line, e.rank, e.text) for e in entries if e.line is not None)


def _health(run: RunSummary, h: Health | None) -> dict[str, Any]:
    """The ServingFacts fields of ``serving.health``."""
    if h is None:
        return {}
    stalls = tuple(Stall(x.start, x.end, x.line, x.prefill_line, x.windows, x.tok_s,
                         x.median_tok_s, x.running_req, _evs(run, x.evidence))
                   for x in h.stalls.first)
    s = h.seesaw
    seesaw = Seesaw(s.start, s.end, s.line, s.windows, s.switches, s.prefill_windows,
                    s.decode_windows, s.stretches, _evs(run, s.evidence)) if s else None
    imb = h.imbalance
    imbalance = None
    if imb and imb.found:
        signals = tuple(Signal(x.figure, FIGURES.get(x.figure, x.figure), x.windows, x.heaviest,
                               x.heaviest_share, x.lightest, x.lightest_share, x.heaviest_value,
                               x.lightest_value, x.at, _evs(run, x.evidence))
                        for x in imb.signals if x.figure in imb.agreeing)
        imbalance = Imbalance(imb.heaviest or "", imb.groups or 0, signals,
                              tuple(e for x in signals for e in x.evidence))
    return {"stalls": stalls, "stall_count": h.stalls.count or 0, "seesaw": seesaw,
            "imbalance": imbalance, "idle_gaps": h.idle.count or 0, "thresholds": h.thresholds}


def serving_facts(run: RunSummary, baseline: RunSummary | None = None) -> ServingFacts:
    crash = run.crash
    runtime_oom = crash is not None and bool(crash.oom) and crash.phase == "serving"
    s = run.serving
    if not s:
        return ServingFacts(False, runtime_oom=runtime_oom)
    collapse = _first(run, "gen_tok_s")
    running = _first(run, "running_req")
    cache = _first(run, "cache_hit")
    kv = s.kv_full
    storms = s.retractions.storms if s.retractions else []
    advice: list[Step] = []
    if kv or storms or runtime_oom:
        args = dict(run.server_args or {})
        free = next(iter(run.memory.values()), NO_MEMORY).available_gpu_mem_gib
        peak = max((v for _, v, _ in s.series.get("running_req", [])), default=None)
        advice.append(Step("--max-running-requests " + (f"below {int(peak)}" if peak else "lower"),
                           "fewer requests decoding at once need fewer KV tokens, so the scheduler stops "
                           "admitting more than the pool holds and retracting them"
                           + (f" (up to {int(peak)} were running)" if peak else "")))
        advice.append(Step(f"--schedule-conservativeness above {args.get('schedule_conservativeness', 1.0)}",
                           "the scheduler reserves more of the pool for the tokens running requests will "
                           "still generate before it admits new ones"))
        if runtime_oom:
            advice.append(Step("--mem-fraction-static lower",
                               "an out-of-memory error while serving means the static pool (weights + KV) "
                               "left too little for activations: a lower fraction gives them room"))
        elif free is not None and free >= 2.0:
            advice.append(Step("--mem-fraction-static higher",
                               f"a larger KV pool; the GPU still had {free:.2f} GiB free after start-up "
                               f"(available_gpu_mem), and no out-of-memory error is in this log"))
        advice.append(Step("--chunked-prefill-size lower",
                           "long prompts are admitted in smaller pieces, so a prefill takes less of the pool at once"))
    kv_evidence = (ev(run, kv.line, None, kv.text),) if kv and kv.text else ()
    storm_evidence = tuple(ev(run, r.line, r.rank, r.text)
                           for r in s.retractions.first[:3]) if s.retractions and storms else ()
    return ServingFacts(
        has_series=bool(s.series),
        collapse=_change(run, collapse) if collapse else None,
        load_fell_too=bool(collapse and running and running.line == collapse.line),
        cache_collapse=_change(run, cache) if cache else None,
        kv_full=kv, storm=storms[0] if storms else None, runtime_oom=runtime_oom,
        kv_advice=tuple(advice),
        baseline_collapse=_change(baseline, b) if baseline and (b := _first(baseline, "gen_tok_s")) else None,
        kv_evidence=kv_evidence, storm_evidence=storm_evidence, **_health(run, s.health))
