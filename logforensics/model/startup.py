"""Ranks through start-up: phases entered, memory figures, progress bars, readiness.

Handlers here feed :class:`Timeline`, the per-rank records of one run and the few
run-wide facts of its course (the furthest phase, the last progress bar of each phase,
the server-ready line). Figures are GiB as SGLang printed them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..events import PHASE_OF_KIND, PLACE_IF_NOT_PAST, Event
from . import pools
from .rank import NO_RANK, PHASE_INDEX, POOL_ENDS, RankState
from .registry import handles

if TYPE_CHECKING:
    from .run import RunModel


@dataclass
class Timeline:
    """The ranks of one run and how far the run got."""

    ranks: dict[str, RankState] = field(default_factory=dict)
    #: the furthest phase any rank (or a progress bar) reached
    global_phase: str | None = None
    #: phase -> the last tqdm bar of that phase (only TP rank 0 draws them: see rank.bar_rank)
    bars: dict[str, dict[str, Any]] = field(default_factory=dict)
    ready: dict[str, Any] | None = None
    last_serving_line: int = 0
    #: the last tqdm bar without a description: the capture's, if drawn during it (:meth:`drawn_bars`)
    bare_bar: dict[str, Any] | None = None
    #: the first request the HTTP server answered (``on_http_access``): the server was
    #: ready by then, whether or not the log holds its readiness line
    answered: dict[str, Any] | None = None
    #: the line of uvicorn's "Uvicorn running on ...": SGLang starts its HTTP server once every
    #: scheduler is ready, before its warm-up request (the first such line)
    http_up: int | None = None

    def rank(self, label: str | None) -> RankState:
        key = label or NO_RANK
        r = self.ranks.get(key)
        if r is None:
            r = self.ranks[key] = RankState()
        return r

    def reach(self, phase: str) -> None:
        if self.global_phase is None or PHASE_INDEX[phase] >= PHASE_INDEX[self.global_phase]:
            self.global_phase = phase

    def enter(self, ev: Event, phase: str) -> None:
        """``ev`` places its rank in ``phase``."""
        r = self.rank(ev.rank)
        r.touch(ev.line, ev.ts, ev.text)
        if ev.kind in PLACE_IF_NOT_PAST and r.phase is not None and PHASE_INDEX[r.phase] > PHASE_INDEX[phase]:
            return
        r.enter(phase, ev.line, ev.ts, ev.kind)
        self.reach(phase)

    def last_bar(self) -> tuple[str, dict[str, Any]] | None:
        """(phase, bar) of the progress bar printed last."""
        if not self.bars:
            return None
        return max(self.bars.items(), key=lambda kv: kv[1]["line"])

    def drawn_bars(self) -> dict[str, dict[str, Any]]:
        """``bars``, and the bar without a description as the capture's where it is CudaGraphRunner's
        before the bar had one: drawn after a rank entered the capture, in a run that reached no
        later phase and drew no capture bar with the description (a bare bar beside one is
        another loop's). Decided once the whole log is read, so that a part read alone agrees."""
        bare, capture = self.bare_bar, "cuda_graph_capture"
        if bare is None or capture in self.bars or self.global_phase != capture or not any(
                r.phases.get(capture, {}).get("first_line", bare["line"]) < bare["line"] for r in self.ranks.values()):
            return self.bars
        return {**self.bars, capture: bare}

    def merge(self, later: Timeline) -> None:
        """Ranks merge rank by rank; the furthest phase is the further; bars and ready
        are the last ones printed."""
        for label, rank in later.ranks.items():
            mine = self.ranks.get(label)
            if mine is None:
                self.ranks[label] = rank
            else:
                mine.merge(rank)
        if later.global_phase is not None and (
                self.global_phase is None or PHASE_INDEX[later.global_phase] > PHASE_INDEX[self.global_phase]):
            self.global_phase = later.global_phase
        self.bars.update(later.bars)
        self.bare_bar = later.bare_bar or self.bare_bar
        self.ready = later.ready or self.ready
        if self.answered is None or self.answered.get("probe") and later.answered and not later.answered.get("probe"):
            self.answered = later.answered or self.answered  # a request served outranks a probe answered
        self.last_serving_line = later.last_serving_line or self.last_serving_line
        self.http_up = self.http_up or later.http_up


def pool_ends(memory: dict[str, Any]) -> dict[str, Any]:
    """``memory`` (a rank's figures) with each KV pool's ``pool_end_avail_gib``: the free memory of
    the first ``Memory pool end`` after the pool's line (not one after a later pool), and
    without the list of ends."""
    ends = memory.pop(POOL_ENDS, [])
    kv_pools = memory.get("kv_pools") or []
    for line, avail in ends:
        before = [p for p in kv_pools if (p.get("line") or 0) < line]
        if before and "pool_end_avail_gib" not in before[-1]:
            before[-1]["pool_end_avail_gib"] = avail  # what was free once this pool was made
    return memory


def _put(d: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        d[key] = value


def _evidence(r: RankState, key: str, ev: Event) -> None:
    r.evidence_of(key, ev.file, ev.line, ev.rank, ev.text)


# -- start-up figures -------------------------------------------------------------------
@handles("init_dist_end")
def on_init_dist_end(m: RunModel, ev: Event) -> None:
    r = m.timeline.rank(ev.rank)
    f = ev.fields
    _put(r.memory, "init_mem_usage_gib", f.get("mem_usage_gib"))
    _put(r.memory, "init_elapsed_s", f.get("elapsed_s"))
    _evidence(r, "init_dist_end", ev)


def _past_weights(m: RunModel, r: RankState) -> bool:
    """Whether the rank is past loading its weights: a load now is a draft model's (speculative
    decoding loads it after the target's KV pool and graphs), whose figures are not the target's.
    Past them by its phase, or, where the settings name a speculative algorithm, by the KV pool
    it has already: the draft's worker logs its own "Init torch distributed begin" first
    (real-pairs 020-022), which steps the rank back as a restart's would."""
    if r.phase is not None and PHASE_INDEX[r.phase] > PHASE_INDEX["load_weights"]:
        return True
    return bool(r.memory.get("kv_pools")) and m.config.server_args.get("speculative_algorithm") not in (None, "None", "")


@handles("load_weight_begin", reads_earlier=True)
def on_load_weight_begin(m: RunModel, ev: Event) -> None:
    r = m.timeline.rank(ev.rank)
    if _past_weights(m, r):
        return
    if "load_end_avail_gib" in r.memory:  # a second load after the first ended: whose, its end line says
        r.pending_load = {"avail_gib": ev.fields.get("avail_gib"), "file": ev.file, "line": ev.line, "text": ev.text}
        return
    _put(r.memory, "load_begin_avail_gib", ev.fields.get("avail_gib"))
    _evidence(r, "load_weight_begin", ev)


@handles("load_weight_end", reads_earlier=True)
def on_load_weight_end(m: RunModel, ev: Event) -> None:
    r = m.timeline.rank(ev.rank)
    f = ev.fields
    pending, r.pending_load = r.pending_load, None
    first = m.config.versions.get("model_type")
    # a second load of another model class than the first (DFlash's, EAGLE's draft before the
    # target's KV pool, real-unseen 1290) is a draft model's; of the same class, a reload
    another = pending is not None and first is not None and f.get("model_type") not in (None, first)
    if _past_weights(m, r) or another:  # a draft model's: its first load apart, as its first graphs are
        if "draft_weights_gib" not in r.memory and f.get("mem_usage_gib") is not None:
            _put(r.memory, "draft_weights_gib", f.get("mem_usage_gib"))
            _put(r.memory, "draft_load_end_avail_gib", f.get("avail_gib"))
            _put(r.memory, "draft_load_elapsed_s", f.get("elapsed_s"))
            _evidence(r, "draft_load_weight_end", ev)
        return
    if pending is not None:  # the same model loaded again: its figures anew
        _put(r.memory, "load_begin_avail_gib", pending["avail_gib"])
        r.evidence_of("load_weight_begin", pending["file"], pending["line"], ev.rank, pending["text"])
    _put(r.memory, "load_end_avail_gib", f.get("avail_gib"))
    _put(r.memory, "weights_gib", f.get("mem_usage_gib"))
    _put(r.memory, "load_elapsed_s", f.get("elapsed_s"))
    for key in ("model_type", "dtype", "quant"):
        if f.get(key) is not None:
            m.config.versions.setdefault(key, f[key])
    _evidence(r, "load_weight_end", ev)


@handles("kv_cache_alloc")
def on_kv_cache_alloc(m: RunModel, ev: Event) -> None:
    r = m.timeline.rank(ev.rank)
    f = ev.fields
    pools.on_kv_alloc(m, ev)
    kv_pools = r.memory.setdefault("kv_pools", [])
    kv = f.get("kv_gib")
    if kv is None and f.get("k_gib") is not None:
        kv = round(f["k_gib"] + (f.get("v_gib") or 0.0), 4)
    kv_pools.append({"tokens": f.get("tokens"), "k_gib": f.get("k_gib"), "v_gib": f.get("v_gib"),
                     "kv_gib": kv, "dtype": f.get("dtype"), "label": f.get("label"), "line": ev.line})
    if len(kv_pools) == 1:  # the target model's pool; a draft model's pool comes second
        _put(r.memory, "kv_tokens", f.get("tokens"))
        _put(r.memory, "k_gib", f.get("k_gib"))
        _put(r.memory, "v_gib", f.get("v_gib"))
        _put(r.memory, "kv_gib", kv)
        _evidence(r, "kv_cache_alloc", ev)


@handles("memory_pool_end")
def on_memory_pool_end(m: RunModel, ev: Event) -> None:
    r = m.timeline.rank(ev.rank)
    if ev.fields.get("avail_gib") is not None:  # each pool's own, paired at the summary (``pool_ends``)
        r.memory.setdefault(POOL_ENDS, []).append((ev.line, ev.fields["avail_gib"]))
    if "pool_end_avail_gib" not in r.memory:
        _put(r.memory, "pool_end_avail_gib", ev.fields.get("avail_gib"))
        _evidence(r, "memory_pool_end", ev)


def _draft(ev: Event) -> bool:
    """Whether a capture record is a speculative draft model's (its ``role``: "Capture draft cuda
    graph end", "Capture draft extend npu graph begin"): SGLang captures the target model's first."""
    return ev.fields.get("role") == "draft"


@handles("capture_begin", reads_earlier=True)
def on_capture_begin(m: RunModel, ev: Event) -> None:
    pools.on_capture(m, ev)
    r = m.timeline.rank(ev.rank)
    # the first capture's begin; a begin after the rank's first capture ended is another
    # capture's (piecewise, draft), as its end is (``on_capture_end``), even when the window
    # starts after the first one began; a draft model's is never the rank's own
    if _draft(ev):  # a draft model's: kept apart, the first
        if "draft_capture_begin_avail_gib" not in r.memory and ev.fields.get("avail_gib") is not None:
            _put(r.memory, "draft_capture_begin_avail_gib", ev.fields.get("avail_gib"))
            _evidence(r, "draft_capture_begin", ev)
    elif "capture_begin_avail_gib" not in r.memory and "capture_end_line" not in r.memory:
        _put(r.memory, "capture_begin_avail_gib", ev.fields.get("avail_gib"))
        if ev.fields.get("bs_list"):
            r.memory["capture_bs"] = ev.fields["bs_list"]
        _evidence(r, "capture_begin", ev)


@handles("capture_bs", reads_earlier=True)
def on_capture_bs(m: RunModel, ev: Event) -> None:
    r = m.timeline.rank(ev.rank)
    bs = ev.fields.get("bs_list")
    if bs and "capture_bs" not in r.memory:
        m.needs_context("capture batch sizes, kept only if none were seen before")
        r.memory["capture_bs"] = bs


@handles("capture_end", reads_earlier=True)
def on_capture_end(m: RunModel, ev: Event) -> None:
    r = m.timeline.rank(ev.rank)
    f = ev.fields
    if _draft(ev):  # a draft model's graphs, which are not the rank's own: its first kept apart
        if "draft_capture_end_avail_gib" not in r.memory and "draft_capture_mem_gib" not in r.memory \
                and (f.get("avail_gib") is not None or f.get("mem_usage_gib") is not None):
            _put(r.memory, "draft_capture_end_avail_gib", f.get("avail_gib"))
            _put(r.memory, "draft_capture_mem_gib", f.get("mem_usage_gib"))
            _evidence(r, "draft_capture_end", ev)
        return
    if "capture_end_line" in r.memory:
        return  # piecewise / extend graphs: keep the first (target decode) capture
    r.memory["capture_end_line"] = ev.line
    _put(r.memory, "capture_end_avail_gib", f.get("avail_gib"))
    _put(r.memory, "capture_mem_gib", f.get("mem_usage_gib"))
    _put(r.memory, "capture_elapsed_s", f.get("elapsed_s"))
    _evidence(r, "capture_end", ev)


@handles("jax_kv_tokens")
def on_jax_kv_tokens(m: RunModel, ev: Event) -> None:
    """sglang-jax's KV cache size in tokens, as its model runner sized it."""
    r = m.timeline.rank(ev.rank)
    _put(r.memory, "max_total_num_tokens", ev.fields.get("max_total_num_tokens"))
    _evidence(r, "max_total_tokens", ev)


#: The rank that alone prints bench_one_batch's bare "max_total_num_tokens=N" (its ``rank_print``
#: prints on TP rank 0 only, without the logger's stamp and rank).
_PRINTING_RANK = "TP0"


@handles("max_total_tokens", reads_earlier=True)
def on_max_total_tokens(m: RunModel, ev: Event) -> None:
    """SGLang's pool-size line ("max_total_num_tokens=N, chunked_prefill_size=..., ..."), or
    bench_one_batch's bare print of the size alone: TP0's, where the log names TP0."""
    f = ev.fields
    rank = ev.rank
    if rank is None and set(f) == {"max_total_num_tokens"} and _PRINTING_RANK in m.timeline.ranks:
        rank = _PRINTING_RANK
    r = m.timeline.rank(rank)
    for key in ("max_total_num_tokens", "chunked_prefill_size", "max_prefill_tokens",
                "max_running_requests", "context_len"):
        _put(r.memory, key, f.get(key))
    _put(r.memory, "available_gpu_mem_gib", f.get("available_gpu_mem_gib"))
    _evidence(r, "max_total_tokens", ev)


#: Words of a tqdm bar's description (in any case: "Loading safetensors checkpoint shards",
#: "Multi-thread loading shards", "[LOADING] MODEL WEIGHTS") and the phase such a bar belongs to.
BAR_PHASES = (("capturing", "cuda_graph_capture"), ("compiling", "cuda_graph_capture"),
              ("precompile", "cuda_graph_capture"),  # sglang-jax's "[EXTEND] PRECOMPILE"
              ("checkpoint", "load_weights"), ("loading", "load_weights"), ("model weights", "load_weights"))


def bar_phase(desc: str) -> str | None:
    """The start-up phase a progress bar with description ``desc`` shows, if any."""
    words = desc.lower()
    return next((phase for word, phase in BAR_PHASES if word in words), None)


@handles("weights_update_begin", "weights_update_end", "weights_update_failed", "weights_rollback")
def on_weights_update(m: RunModel, ev: Event) -> None:
    """Weights updated on a running server ("Update weights begin/end.", "Failed to update weights:
    ...", "Rolling back to original weights."): an API call only a serving scheduler takes, so its
    rank is serving; a line that names no rank places no process (it does not say whose it is)."""
    if ev.rank is not None:
        m.timeline.enter(ev, "serving")


@handles("progress")
def on_progress(m: RunModel, ev: Event) -> None:
    """A tqdm bar. Only TP rank 0 draws bars and they carry no rank: the bar is kept for
    the run, and the summary gives it to the rank that draws them (``rank.bar_rank``)."""
    prog = ev.fields.get("progress") or {}
    desc = ev.fields.get("desc") or ""
    phase = bar_phase(desc) if prog else None
    if not prog or phase is None and desc.strip():
        return
    bar = {"n": prog["n"], "total": prog["total"], "desc": desc, "line": ev.line,
           "bs": ev.fields.get("bs"), "num_tokens": ev.fields.get("num_tokens"), "avail_gib": ev.fields.get("avail_gib")}
    if phase is None:  # no description: CudaGraphRunner's before it had one, or another loop's
        m.timeline.bare_bar = bar
        return
    m.timeline.bars[phase] = bar
    if m.timeline.global_phase is None or PHASE_INDEX[phase] > PHASE_INDEX[m.timeline.global_phase]:
        m.timeline.global_phase = phase


@handles("server_ready", reads_earlier=True)
def on_server_ready(m: RunModel, ev: Event) -> None:
    m.needs_context("server ready, which moves every rank seen so far to serving")
    t = m.timeline
    t.ready = {"file": ev.file, "line": ev.line, "ts": ev.ts, "text": ev.text}
    t.last_serving_line = ev.line
    for r in t.ranks.values():
        if r.phase is not None and PHASE_INDEX[r.phase] >= PHASE_INDEX["kv_cache_alloc"]:
            r.phase = "serving"
            r.phase_line = ev.line
            r.phases.setdefault("serving", {"first_line": ev.line, "first_ts": ev.ts,
                                            "last_line": ev.line, "last_ts": ev.ts})


@handles("warmup_begin")
def on_warmup_begin(m: RunModel, ev: Event) -> None:
    """The HTTP server sent its warm-up request: where a start-up that never finishes stalls
    (``outcome.stalled``); kept as a notice."""
    m.notices.add(ev.kind, ev, ts=ev.ts, **ev.fields)


#: What SGLang's launcher asks before its warm-up request (``_execute_server_warmup``).
LAUNCHER_PROBES = frozenset({"/get_model_info", "/model_info"})


@handles("http_access")
def on_http_access(m: RunModel, ev: Event) -> None:
    """A request the HTTP server answered. SGLang starts its HTTP server only once every
    scheduler is ready, so the run is past start-up (warm-up requests count as serving).
    The first request served is kept as the evidence that the server was ready (the bulk
    reader takes the later ones as counts): a success, on a path other than the model-info
    probe SGLang's launcher polls before its warm-up request (an answer there shows the HTTP
    server up, not a request served)."""
    m.coverage.observe_answer(ev)
    answered(m, ev)
    if m.timeline.global_phase != "serving":
        m.timeline.reach("serving")


def launcher_probe_answered(ev: Event) -> bool:
    """Whether ``ev`` is a success of the model-info probe SGLang's launcher polls (the HTTP server up)."""
    status = ev.fields.get("status")
    return isinstance(status, int) and 200 <= status < 300 \
        and str(ev.fields.get("path") or "").split("?", 1)[0] in LAUNCHER_PROBES


def answered(m: RunModel, ev: Event, probe: bool = False) -> bool:
    """Keep ``ev`` (an answer of the HTTP server) as the evidence that the server was ready,
    where it is the first success on a path other than the launcher's model-info probe;
    a probe's (``/health``, ``/metrics``: the HTTP server up, no request served) until a
    request is served. Whether it was a success there."""
    t = m.timeline
    status = ev.fields.get("status")
    if not (isinstance(status, int) and 200 <= status < 300
            and str(ev.fields.get("path") or "").split("?", 1)[0] not in LAUNCHER_PROBES):
        return False
    if t.answered is None or t.answered.get("probe") and not probe:
        t.answered = {"file": ev.file, "line": ev.line, "ts": ev.ts, "text": ev.text,
                      "request": f"{ev.fields.get('method')} {ev.fields.get('path')} {status}", "probe": probe}
    return True


@handles("max_total_tokens_cap")
def on_max_total_tokens_cap(m: RunModel, ev: Event) -> None:
    """``max_total_tokens=N is larger than the profiled value P``: P is the KV pool size
    SGLang's formula gave (``init_memory_pool``), which may be zero or negative."""
    r = m.timeline.rank(ev.rank)
    _put(r.memory, "profiled_max_tokens", ev.fields.get("profiled_tokens"))
    _evidence(r, "max_total_tokens_cap", ev)
    m.notices.add("max_total_tokens_cap", ev)


def phase_kinds() -> dict[str, str]:
    """Kinds that place their rank in a phase (``events.PHASE_OF_KIND``)."""
    return PHASE_OF_KIND
