"""The run model: what one SGLang launch did, rank by rank, built incrementally.

:class:`RunModel` takes events one at a time (from a file or a live stream) and keeps
only bounded state: per-rank phase and memory figures, distinct tracebacks, sketches
of throughput. :meth:`RunModel.summary` freezes it into a :class:`RunSummary`, the
stage boundary that ``summary``, ``diff``, ``watch`` and ``check`` all read.

Outcome rules (the first that applies, judged on the whole log):

* ``crashed``: a fatal error after the last time the server was ready: a traceback
  (``Scheduler hit an exception`` and kin, or a bare one), a C++ abort, a
  ``Fatal Python error``, or the parent's ``sigquit`` notice; unless the only fatal
  errors are the consequence of a hang (below);
* ``hung``: evidence of a hang: an NCCL/c10d watchdog timeout, SGLang's own watchdog
  timeout, or a scheduler that gave no sign of life while others died waiting for it;
* ``ready``: ``The server is fired up and ready to roll!`` or served batches;
* ``incomplete``: none of these; the log just stops.

Ranks are labelled as SGLang printed them (``TP5``, ``DP0 TP3 EP3``). A single-GPU
run prints no rank: its scheduler is reported as rank ``-``.

Models of consecutive parts of one log merge (:meth:`RunModel.merge`) into the model of
the whole, which is how a large file is read on several cores (``ingest/parallel.py``). A few
handlers read state that a model of a later part lacks (the phase a crash happened in,
when its frames do not tell; the ranks a server-ready line moves to serving); they mark
the model ``context_read``, and such a part is read again in order instead of merged.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from ..events import PHASE_OF_KIND, PHASES, Event
from ..read.grammar import Fields
from .serverargs import args_from_command, env_from_command, parse_server_args
from .stats import Series, Sketch

NO_RANK = "-"
_PHASE_INDEX = {p: i for i, p in enumerate(PHASES)}
_MAX_DISTINCT_EXCEPTIONS = 50
_MAX_UNKNOWN_SHAPES = 5000
_DIGITS = re.compile(r"\d+")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_PROCTITLE = re.compile(r"sglang::scheduler_((?:[A-Z_]+-?\d+_?)+)")
_CALL = re.compile(r"(\w+)\(")
_WORD = re.compile(r"[A-Za-z_]\w+")

#: Frame function names that place a traceback in a start-up phase (innermost wins).
_FRAME_PHASE = {
    "init_torch_distributed": "init_distributed",
    "init_distributed_environment": "init_distributed",
    "initialize_model_parallel": "init_distributed",
    "init_parallel_runtime": "init_distributed",
    "load_model": "load_weights",
    "get_model": "load_weights",
    "_initialize_model": "load_weights",
    "load_weights": "load_weights",
    "load_weights_and_postprocess": "load_weights",
    "init_memory_pool": "kv_cache_alloc",
    "init_memory_pools": "kv_cache_alloc",
    "profile_max_num_token": "kv_cache_alloc",
    "_create_buffers": "kv_cache_alloc",
    "_profile_available_bytes": "kv_cache_alloc",
    "init_cuda_graphs": "cuda_graph_capture",
    "init_device_graphs": "cuda_graph_capture",
    "init_piecewise_cuda_graphs": "cuda_graph_capture",
    "capture": "cuda_graph_capture",
    "capture_one_batch_size": "cuda_graph_capture",
    "_wait_and_warmup": "warmup",
}
_SERVING_FUNCS = {
    "event_loop_normal", "event_loop_overlap", "run_event_loop", "dispatch_event_loop",
    "process_batch_result", "run_batch", "forward_batch_generation", "forward_decode_batch",
    "forward_step", "forward_fill_batch", "resolve_batch_result", "event_loop_pp",
    "event_loop_pp_disagg_prefill", "exposed_step", "process_batch_result_decode", "on_idle",
}
#: Start-up records in order: a rank's furthest one says how far it got inside a phase
#: (a rank that printed "Load weight begin" but not "Load weight end" is behind).
MILESTONES = ("init_dist_begin", "init_dist_end", "load_weight_begin", "load_weight_end", "kv_cache_alloc",
              "memory_pool_end", "capture_begin", "capture_end", "max_total_tokens")
_MILESTONE_INDEX = {k: i for i, k in enumerate(MILESTONES)}
#: How many records of each kind ``notices`` keeps (the first ones); others keep _NOTICE_LIMIT.
_NOTICE_LIMITS = {"decode": 3, "server_args": 1, "launch_command": 1, "tb_fragment": 256}
_NOTICE_LIMIT = 64
_HANG_MARKERS = ("Watchdog caught collective operation timeout", "watchdog got stuck",
                 "Timeout(ms)=", "watchdog timeout")


@dataclass(frozen=True)
class RunSummary:
    """One run, as ``summary --json`` prints it. See ``docs/summary.md`` for every key."""

    file: str | None
    outcome: str
    outcome_reason: str
    ranks: list[str]
    phase_reached: dict[str, str]
    phases: dict[str, dict[str, Any]]
    last_seen: dict[str, dict[str, Any]]
    progress: dict[str, dict[str, Any]]
    crash: dict[str, Any] | None
    exceptions: list[dict[str, Any]]
    hang: dict[str, Any] | None
    ready: dict[str, Any] | None
    memory: dict[str, dict[str, Any]]
    throughput: dict[str, Any]
    server_args: dict[str, Any]
    server_args_form: str | None
    launch_command: str | None
    launch_args: dict[str, Any]
    env: dict[str, str]
    versions: dict[str, Any]
    notices: dict[str, list[dict[str, Any]]]
    coverage: dict[str, Any]
    warnings: list[str]
    #: A run of several files (``model.nodes``): each node's file, role and outcome; the
    #: node of each rank; ranks the parallel sizes call for that no file shows.
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    rank_nodes: dict[str, str] = field(default_factory=dict)
    missing_ranks: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass
class _Rank:
    phase: str | None = None
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)
    progress: dict[str, Any] = field(default_factory=dict)
    last_line: int = 0
    last_ts: str | None = None
    last_text: str = ""
    milestone: int = -1
    #: A decode record without a stamp set ``last_ts`` to None (the merge must keep that).
    ts_unset: bool = False


class RunModel:
    """Incremental run model: ``observe`` every event, then ``summary``."""

    def __init__(self, file: str | None = None) -> None:
        self.file = file
        self.ranks: dict[str, _Rank] = {}
        self.events = 0
        self.kind_counts: Counter[str] = Counter()
        self.ready: dict[str, Any] | None = None
        self.last_serving_line = 0
        self.exceptions: list[dict[str, Any]] = []  # distinct, with ranks
        self.crash_events: list[dict[str, Any]] = []  # fatal, in order
        self.hang_events: list[dict[str, Any]] = []
        self.server_args: dict[str, Any] = {}
        self.server_args_form: str | None = None
        self.launch_command: str | None = None
        self.launch_args: dict[str, Any] = {}
        self.env: dict[str, str] = {}
        self.versions: dict[str, Any] = {}
        self.notices: dict[str, list[dict[str, Any]]] = {}
        self.decode_by_rank: dict[str, Sketch] = {}
        self.decode_series = Series()
        self.prefill = Sketch()
        self.accept_len = Sketch()
        self.running_req = Sketch()
        self.unknown_shapes: dict[str, list[Any]] = {}
        self.other_lines: set[int] = set()
        self.global_phase: str | None = None
        self.last_line = 0
        self.last_ts: str | None = None
        #: Why this model's figures may depend on records before its first one (None if
        #: they cannot): set when a handler read state that a model of a later part of
        #: the log would lack. Such a part cannot be merged; see :meth:`merge`.
        self.context_read: str | None = None
        self._cpp_frame_crash: dict[str, Any] | None = None  # the crash record of the first C++ frame

    # ------------------------------------------------------------------ observe
    def observe(self, ev: Event) -> None:
        """Take one event; see :meth:`observe_all`."""
        self.observe_all((ev,))

    def observe_all(self, events: Sequence[Event]) -> None:
        """Take events in log order: the one implementation of observing.

        ``Decode batch``, ``Prefill batch`` and records without a handler (HTTP access
        lines) are nearly all of a serving log, so they are handled inline here; each
        inline path does exactly what the general path (:meth:`_observe_one`) does for
        that record. Kinds are counted, and throughput figures added to their sketches
        and series, a block at a time (no handler reads them while observing).
        """
        if not events:
            return
        self.events += len(events)
        self.kind_counts.update(map(_KIND, events))
        ranks = self.ranks
        decode_noticed = len(self.notices.get("decode", ()))
        tputs: dict[str, list[float]] = {}  # this block's figures, in order, added below
        points: list[tuple[Any, float]] = []
        accepts: list[float] = []
        running: list[float] = []
        prefills: list[float] = []
        for ev in events:
            kind = ev.kind
            if kind == "decode_batch":
                line = ev.line
                self.last_line = line
                self.last_serving_line = line
                if decode_noticed < _NOTICE_LIMITS["decode"]:  # a few decode lines as evidence for throughput
                    self._notice("decode", ev)
                    decode_noticed += 1
                label = ev.rank or NO_RANK
                f = ev.fields
                tput, accept, run = f.pick(_DECODE_FIGURES) if type(f) is Fields else map(f.get, _DECODE_FIGURES)
                if tput is not None:
                    found = tputs.get(label)
                    if found is None:
                        tputs[label] = [tput]
                    else:
                        found.append(tput)
                    points.append((ev.ts or line, tput))
                if accept is not None:
                    accepts.append(accept)
                if run is not None:
                    running.append(run)
                r = ranks.get(label)
                if r is not None and r.phase == "serving":
                    ts = ev.ts
                    r.last_line = line
                    r.last_ts = ts
                    if ts is None:
                        r.ts_unset = True
                    r.last_text = ev.text
                    info = r.phases["serving"]
                    info["last_line"] = line
                    info["last_ts"] = ts
                else:
                    if ev.ts is None and (r is None or r.phase is None):
                        # before us the rank may have been serving: then the stamp would be unset
                        self._needs_context("a decode record without a stamp on a rank not seen serving")
                    self._enter(ev, "serving")
            elif kind == "prefill_batch":
                line = ev.line
                r = ranks.get(ev.rank or NO_RANK)
                info = r.phases.get("serving") if r is not None else None
                if info is None:  # the general path adds to the sketch itself: keep the order
                    if prefills:
                        self.prefill.extend(prefills)
                        prefills.clear()
                    self._observe_one(ev)
                    continue
                # _observe_one: on_prefill_batch, then _enter(ev, "serving") on a known phase
                end = ev.end_line or line
                if end > self.last_line:
                    self.last_line = end
                ts = ev.ts
                if ts:
                    self.last_ts = ts
                self.last_serving_line = line
                tput = ev.fields.get("input_throughput_tok_s")
                if tput is not None:
                    prefills.append(tput)
                r.last_line = line
                if ts:
                    r.last_ts = ts
                r.last_text = ev.text
                info["last_line"] = line
                info["last_ts"] = ts
                r.phase = "serving"
                self.global_phase = "serving"
            elif kind not in _ACTIVE_KINDS:  # no handler, no phase: only "last seen"
                end = ev.end_line or ev.line
                if end > self.last_line:
                    self.last_line = end
                if ev.ts:
                    self.last_ts = ev.ts
                if ev.rank is not None:
                    self._touch(self._rank(ev.rank), ev)
            else:
                self._observe_one(ev)
        for label, values in tputs.items():
            sk = self.decode_by_rank.get(label)
            if sk is None:
                sk = self.decode_by_rank[label] = Sketch()
            sk.extend(values)
        if points:
            self.decode_series.extend(points)
        if accepts:
            self.accept_len.extend(accepts)
        if running:
            self.running_req.extend(running)
        if prefills:
            self.prefill.extend(prefills)

    def _observe_one(self, ev: Event) -> None:
        """The general path, for every kind but ``decode_batch``."""
        kind = ev.kind
        end = ev.end_line or ev.line
        if end > self.last_line:
            self.last_line = end
        if ev.ts:
            self.last_ts = ev.ts
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, ev)
        phase = PHASE_OF_KIND.get(kind)
        if phase is not None:
            self._enter(ev, phase)
        elif ev.rank is not None and kind != "exception":
            self._touch(self._rank(ev.rank), ev)

    def _needs_context(self, reason: str) -> None:
        if self.context_read is None:
            self.context_read = reason

    def _rank(self, label: str | None) -> _Rank:
        key = label or NO_RANK
        r = self.ranks.get(key)
        if r is None:
            r = self.ranks[key] = _Rank()
        return r

    def _touch(self, r: _Rank, ev: Event) -> None:
        r.last_line = ev.line
        if ev.ts:
            r.last_ts = ev.ts
        r.last_text = ev.text

    def _enter(self, ev: Event, phase: str) -> None:
        r = self._rank(ev.rank)
        self._touch(r, ev)
        m = _MILESTONE_INDEX.get(ev.kind)
        if m is not None and m > r.milestone:
            r.milestone = m
        info = r.phases.get(phase)
        if info is None:
            info = r.phases[phase] = {"first_line": ev.line, "first_ts": ev.ts}
        info["last_line"] = ev.line
        info["last_ts"] = ev.ts
        r.phase = phase
        if self.global_phase is None or _PHASE_INDEX[phase] >= _PHASE_INDEX[self.global_phase]:
            self.global_phase = phase

    def _evidence(self, r: _Rank, key: str, ev: Event) -> None:
        r.evidence[key] = {"file": ev.file, "line": ev.line, "rank": ev.rank, "text": ev.text}

    def _notice(self, key: str, ev: Event) -> None:
        lst = self.notices.setdefault(key, [])
        if len(lst) < _NOTICE_LIMITS.get(key, _NOTICE_LIMIT):
            lst.append({"file": ev.file, "line": ev.line, "rank": ev.rank, "text": ev.text})

    # -- start-up figures (GiB, as SGLang printed them) -------------------------------
    def on_init_dist_end(self, ev: Event) -> None:
        r = self._rank(ev.rank)
        f = ev.fields
        _put(r.memory, "init_mem_usage_gib", f.get("mem_usage_gib"))
        _put(r.memory, "init_elapsed_s", f.get("elapsed_s"))
        self._evidence(r, "init_dist_end", ev)

    def on_load_weight_begin(self, ev: Event) -> None:
        r = self._rank(ev.rank)
        _put(r.memory, "load_begin_avail_gib", ev.fields.get("avail_gib"))
        self._evidence(r, "load_weight_begin", ev)

    def on_load_weight_end(self, ev: Event) -> None:
        r = self._rank(ev.rank)
        f = ev.fields
        _put(r.memory, "load_end_avail_gib", f.get("avail_gib"))
        _put(r.memory, "weights_gib", f.get("mem_usage_gib"))
        _put(r.memory, "load_elapsed_s", f.get("elapsed_s"))
        for key in ("model_type", "dtype", "quant"):
            if f.get(key) is not None:
                self.versions.setdefault(key, f[key])
        self._evidence(r, "load_weight_end", ev)

    def on_kv_cache_alloc(self, ev: Event) -> None:
        r = self._rank(ev.rank)
        f = ev.fields
        pools = r.memory.setdefault("kv_pools", [])
        kv = f.get("kv_gib")
        if kv is None and f.get("k_gib") is not None:
            kv = round(f["k_gib"] + (f.get("v_gib") or 0.0), 4)
        pools.append({"tokens": f.get("tokens"), "k_gib": f.get("k_gib"), "v_gib": f.get("v_gib"),
                      "kv_gib": kv, "dtype": f.get("dtype"), "label": f.get("label"), "line": ev.line})
        if len(pools) == 1:  # the target model's pool; a draft model's pool comes second
            _put(r.memory, "kv_tokens", f.get("tokens"))
            _put(r.memory, "k_gib", f.get("k_gib"))
            _put(r.memory, "v_gib", f.get("v_gib"))
            _put(r.memory, "kv_gib", kv)
            self._evidence(r, "kv_cache_alloc", ev)

    def on_memory_pool_end(self, ev: Event) -> None:
        r = self._rank(ev.rank)
        if "pool_end_avail_gib" not in r.memory:
            _put(r.memory, "pool_end_avail_gib", ev.fields.get("avail_gib"))
            self._evidence(r, "memory_pool_end", ev)

    def on_capture_begin(self, ev: Event) -> None:
        r = self._rank(ev.rank)
        if "capture_begin_avail_gib" not in r.memory:
            _put(r.memory, "capture_begin_avail_gib", ev.fields.get("avail_gib"))
            if ev.fields.get("bs"):
                r.memory["capture_bs"] = ev.fields["bs"]
            self._evidence(r, "capture_begin", ev)

    def on_capture_bs(self, ev: Event) -> None:
        r = self._rank(ev.rank)
        bs = ev.fields.get("bs")
        if bs and "capture_bs" not in r.memory:
            self._needs_context("capture batch sizes, kept only if none were seen before")
            r.memory["capture_bs"] = bs

    def on_capture_end(self, ev: Event) -> None:
        r = self._rank(ev.rank)
        f = ev.fields
        if "capture_end_line" in r.memory:
            return  # draft / extend graphs: keep the first (target decode) capture
        r.memory["capture_end_line"] = ev.line
        _put(r.memory, "capture_end_avail_gib", f.get("avail_gib"))
        _put(r.memory, "capture_mem_gib", f.get("mem_usage_gib"))
        _put(r.memory, "capture_elapsed_s", f.get("elapsed_s"))
        self._evidence(r, "capture_end", ev)

    def on_max_total_tokens(self, ev: Event) -> None:
        r = self._rank(ev.rank)
        f = ev.fields
        for key in ("max_total_num_tokens", "chunked_prefill_size", "max_prefill_tokens",
                    "max_running_requests", "context_len"):
            _put(r.memory, key, f.get(key))
        _put(r.memory, "available_gpu_mem_gib", f.get("available_gpu_mem_gib"))
        self._evidence(r, "max_total_tokens", ev)

    def on_progress(self, ev: Event) -> None:
        prog = ev.fields.get("progress") or {}
        desc = ev.fields.get("desc") or ""
        if not prog:
            return
        if "Capturing" in desc or "Compiling" in desc:
            phase = "cuda_graph_capture"
        elif "checkpoint" in desc or "Loading" in desc:
            phase = "load_weights"
        else:
            return
        # Only global rank 0 draws bars; attribute them to the first rank seen.
        self._needs_context("a progress bar, attributed to the first rank seen")
        label = next(iter(self.ranks), NO_RANK) if self.ranks else NO_RANK
        r = self._rank(label if label != NO_RANK else None)
        r.progress[phase] = {"n": prog["n"], "total": prog["total"], "desc": desc, "line": ev.line,
                             "bs": ev.fields.get("bs"), "num_tokens": ev.fields.get("num_tokens"),
                             "avail_gib": ev.fields.get("avail_gib")}
        if self.global_phase is None or _PHASE_INDEX[phase] > _PHASE_INDEX[self.global_phase]:
            self.global_phase = phase

    # -- serving ----------------------------------------------------------------------
    def on_prefill_batch(self, ev: Event) -> None:
        self.last_serving_line = ev.line
        tput = ev.fields.get("input_throughput_tok_s")
        if tput is not None:
            self.prefill.add(tput)

    def on_server_ready(self, ev: Event) -> None:
        self._needs_context("server ready, which moves every rank seen so far to serving")
        self.ready = {"file": ev.file, "line": ev.line, "ts": ev.ts, "text": ev.text}
        self.last_serving_line = ev.line
        for r in self.ranks.values():
            if r.phase is not None and _PHASE_INDEX[r.phase] >= _PHASE_INDEX["kv_cache_alloc"]:
                r.phase = "serving"
                r.phases.setdefault("serving", {"first_line": ev.line, "first_ts": ev.ts,
                                                "last_line": ev.line, "last_ts": ev.ts})

    # -- configuration ------------------------------------------------------------------
    def on_server_args(self, ev: Event) -> None:
        if not self.server_args:
            self.server_args, self.server_args_form = parse_server_args(ev.fields.get("raw", ""))
            self._notice("server_args", ev)

    def on_launch_command(self, ev: Event) -> None:
        cmd = ev.fields.get("command") or ev.text
        if self.launch_command is None:
            self.launch_command = cmd
            self._notice("launch_command", ev)
        self.env.update(env_from_command(cmd))
        if not self.launch_args:
            self.launch_args = _flags(args_from_command(cmd))

    def on_env(self, ev: Event) -> None:
        if ev.fields.get("name"):
            self.env[ev.fields["name"]] = (ev.fields.get("value") or "").strip("'\"")

    def on_nccl_version(self, ev: Event) -> None:
        version = ev.fields.get("version")
        if version:
            self.versions.setdefault("nccl", version.split("+")[0])
            if "+cuda" in version:
                self.versions.setdefault("cuda", version.split("+cuda")[1])

    on_nccl_version_native = on_nccl_version

    def on_custom_ar_disabled(self, ev: Event) -> None:
        self._notice("custom_ar_disabled", ev)

    def on_unbalanced_memory(self, ev: Event) -> None:
        self._notice("unbalanced_memory", ev)

    def on_retract(self, ev: Event) -> None:
        self._notice("retract", ev)

    def on_max_total_tokens_cap(self, ev: Event) -> None:
        self._notice("max_total_tokens_cap", ev)

    # -- failures -----------------------------------------------------------------------
    def on_exception(self, ev: Event) -> None:
        f = ev.fields
        rank = ev.rank
        oom = f.get("oom")
        frames = f.get("frames") or []
        record = {
            "rank": rank,
            "rank_inferred_from": None,
            "source": f.get("source"),
            "exception": f.get("exception"),
            "message": f.get("message"),
            "frames": frames,
            "chain": f.get("chain") or [],
            "oom": oom,
            "fatal_signal": f.get("fatal_signal"),
            "exception_line": f.get("exception_line"),
            "file": ev.file,
            "line": ev.line,
            "end_line": ev.end_line,
            "ts": ev.ts,
            "text": ev.text,
            "phase": self._phase_for(rank, frames),
        }
        self._add_distinct(record)
        if _is_hang_consequence(record) and not self.hang_events:
            self.hang_events.append(_brief(record))
        self.crash_events.append(record)
        if rank is not None:
            r = self._rank(rank)
            exc_at = f.get("exception_line")
            r.last_line = exc_at["line"] if exc_at else (ev.end_line or ev.line)
            lines = [ln for ln in (ev.text or "").splitlines() if ln.strip()]
            r.last_text = exc_at["text"] if exc_at else (lines[-1] if lines else "")

    def _native_crash(self, ev: Event, rank: str | None, message: str | None) -> dict[str, Any]:
        """A crash without a Python exception (a C++ abort or stack dump), as a crash record."""
        rec = {"rank": rank, "source": "native", "exception": None, "message": message,
               "frames": [], "oom": None, "file": ev.file, "line": ev.line, "end_line": ev.line,
               "ts": ev.ts, "text": ev.text, "phase": self._phase_for(rank, []), "native": True}
        self.crash_events.append(rec)
        return rec

    def on_cpp_abort(self, ev: Event) -> None:
        self._native_crash(ev, ev.rank, ev.fields.get("message"))
        self._notice("native_abort", ev)

    on_cpp_terminate = on_cpp_abort

    def on_cpp_frame(self, ev: Event) -> None:
        """A C++ stack frame: a native crash. The rank may be in the process title."""
        m = _PROCTITLE.search(ev.text)
        rank = m.group(1).replace("_", " ") if m else ev.rank
        if not self.notices.get("cpp_frame"):
            self._cpp_frame_crash = self._native_crash(ev, rank, "C++ stack trace")
        self._notice("cpp_frame", ev)

    def on_sigquit(self, ev: Event) -> None:
        self._notice("sigquit", ev)

    def on_subprocess_crashed(self, ev: Event) -> None:
        self._notice("subprocess_crashed", ev)

    def on_c10d_log(self, ev: Event) -> None:
        msg = ev.fields.get("message") or ""
        head = ev.fields.get("head") or {}
        if any(m in msg for m in _HANG_MARKERS):
            self.hang_events.append({"file": ev.file, "line": ev.line, "rank": _c10d_rank(head),
                                     "text": ev.text, "kind": "nccl_watchdog"})
        self._notice("c10d", ev)

    # torch's watchdog and store timeouts are records of their own now (read/fatal.py)
    on_collective_timeout = on_c10d_log
    on_collective_failure = on_c10d_log

    def on_watchdog_timeout(self, ev: Event) -> None:
        self.hang_events.append({"file": ev.file, "line": ev.line, "rank": ev.rank, "text": ev.text,
                                 "kind": "sglang_watchdog"})

    def on_other(self, ev: Event) -> None:
        if len(self.other_lines) < 1_000_000:
            self.other_lines.add(ev.line)
        shape = _shape(ev.text)
        entry = self.unknown_shapes.get(shape)
        if entry is None:
            if len(self.unknown_shapes) >= _MAX_UNKNOWN_SHAPES:
                self._needs_context("too many unrecognised shapes: which are kept depends on those before")
                shape = "(other shapes)"
                entry = self.unknown_shapes.setdefault(shape, [0, ev.line, ev.text[:200], {}])
            else:
                entry = self.unknown_shapes[shape] = [0, ev.line, ev.text[:200], {}]
        entry[0] += 1
        if ev.rank and len(entry[3]) < 64:  # ranks as dict keys: kept in order, for merge
            entry[3][ev.rank] = None

    # ------------------------------------------------------------------ helpers
    def _single(self) -> bool:
        """A single-GPU run: scheduler records carry no rank."""
        return set(self.ranks) == {NO_RANK}

    def on_tb_fragment(self, ev: Event) -> None:
        self._notice("tb_fragment", ev)

    def _resolve_ranks(self, events: list[dict[str, Any]]) -> None:
        """Give rank-less crash records a rank where the log allows it, saying how."""
        tp_labels = self._uses_tp_labels()
        unranked_native = [c for c in events if c.get("native") and c["rank"] is None]
        labelled = sorted((k for k in self.ranks if k != NO_RANK), key=_rank_sort_key)
        for c in events:
            if c["rank"] is not None:
                continue
            oom = c.get("oom")
            rank = self._rank_of_gpu(oom.get("gpu"), events) if oom and oom.get("gpu") is not None and tp_labels \
                else None
            if rank is not None:
                c["rank"], c["rank_inferred_from"] = rank
            elif self._single():
                c["rank"], c["rank_inferred_from"] = NO_RANK, "single_rank_run"
        # One C++ abort per rank and no rank printed: every rank died the same way.
        if unranked_native and labelled and len(unranked_native) >= len(labelled):
            for c, label in zip(unranked_native, labelled):
                c["rank"], c["rank_inferred_from"] = label, "one_native_abort_per_rank"

    def _rank_of_gpu(self, gpu: int, fatal: list[dict[str, Any]]) -> tuple[str, str] | None:
        """The TP rank of PyTorch's ``GPU N``, which is the index on its own node: on one
        node (``nnodes`` 1; or this file shows TP0 and TPN; or every rank-labelled OOM of
        this log names its own index), or from ``node_rank`` and the GPUs per node when
        nothing remaps devices; never by the index alone."""
        args = {**self.launch_args, **self.server_args}
        nnodes, node_rank, tp = args.get("nnodes"), args.get("node_rank"), args.get("tp_size") or args.get("tp")
        remapped = "CUDA_VISIBLE_DEVICES" in self.env or args.get("base_gpu_id") not in (None, 0)
        if isinstance(nnodes, int) and nnodes > 1:
            if remapped or not isinstance(node_rank, int) or not isinstance(tp, int) or tp % nnodes:
                return None
            return f"TP{node_rank * (tp // nnodes) + gpu}", "oom_gpu_index_on_node"
        if nnodes == 1 and not remapped:
            return f"TP{gpu}", "oom_gpu_index"
        if remapped or nnodes is not None:
            return None
        pairs = [(c["rank"], (c.get("oom") or {}).get("gpu")) for c in fatal if c.get("rank")]
        pairs = [(r, g) for r, g in pairs if g is not None and re.fullmatch(r"TP\d+", r)]
        if (pairs and all(r == f"TP{g}" for r, g in pairs)) or (f"TP{gpu}" in self.ranks and "TP0" in self.ranks):
            return f"TP{gpu}", "oom_gpu_index"
        return None

    def _uses_tp_labels(self) -> bool:
        return any(re.fullmatch(r"TP\d+", k) for k in self.ranks)

    def _phase_for(self, rank: str | None, frames: list[dict[str, Any]]) -> str | None:
        for frame in reversed(frames):
            names = [frame.get("func") or ""] + _CALL.findall(frame.get("code") or "")
            for name in names:
                phase = _FRAME_PHASE.get(name)
                if phase:
                    return phase
        if any((fr.get("func") or "") in _SERVING_FUNCS for fr in frames):
            return "serving"
        key = rank or (NO_RANK if self._single() else None)
        if key in self.ranks and self.ranks[key].phase:
            if rank is None:  # "a single-rank run" may be false given ranks seen before us
                self._needs_context("the phase of a rank-less crash in a single-rank run")
            return self.ranks[key].phase
        # Without a rank of its own in this model: the rank's phase or the furthest phase
        # of the whole log decide, and records before us may change either; unless the
        # crash has no rank, ranks are labelled, and serving (the last phase) was reached.
        if rank is not None or not any(k != NO_RANK for k in self.ranks) or self.global_phase != "serving":
            self._needs_context("the phase of a crash, from what its rank did before")
        return self.global_phase

    def _add_distinct(self, rec: dict[str, Any]) -> None:
        sig = (rec["exception"], _shape(rec["message"] or ""),
               tuple((fr.get("path"), fr.get("func")) for fr in rec["frames"][-6:]))
        for d in self.exceptions:
            if d["signature"] == sig:
                d["occurrences"].append(rec)
                return
        if len(self.exceptions) >= _MAX_DISTINCT_EXCEPTIONS:
            self._needs_context("too many distinct exceptions: which are kept depends on those before")
        else:
            self.exceptions.append({
                "signature": sig, "exception": rec["exception"], "message": rec["message"],
                "phase": rec["phase"], "frames": rec["frames"],
                "chain": rec["chain"], "oom": rec["oom"], "text": rec["text"],
                "first_line": rec["line"], "end_line": rec["end_line"], "file": rec["file"],
                "occurrences": [rec],  # the crash records themselves: ranks resolved later show
            })

    # ------------------------------------------------------------------ merge
    def merge_problem(self, later: RunModel) -> str | None:
        """Why ``later`` cannot be merged into this model exactly, or None if it can."""
        if later.context_read is not None:
            return later.context_read
        new_shapes = sum(1 for shape in later.unknown_shapes if shape not in self.unknown_shapes)
        if new_shapes and len(self.unknown_shapes) + new_shapes > _MAX_UNKNOWN_SHAPES:
            return "too many unrecognised shapes to keep them all"
        return None

    def merge(self, later: RunModel) -> None:
        """Add ``later``, the model of the records that followed this model's, in place.

        The result is the model one pass over both parts would have built (the parallel
        reader relies on it), except the decode series, whose downsampling is approximated
        (``Series.merge``). ``later`` must not have read state it lacked
        (:meth:`merge_problem`); given that, each piece of state follows the rule of the
        handlers that write it: counts add up; "first" figures (a phase's first line, the
        first KV pool, the first capture, server_args, the launch command, versions) keep
        this model's when it has them; "last" figures (a phase's last line, what a rank
        printed last, ready) take ``later``'s when it has them; lists keep their limits.
        ``later`` is consumed (its objects move into this model).
        """
        problem = self.merge_problem(later)
        if problem is not None:
            raise ValueError(f"cannot merge: {problem}")
        for label, rank in later.ranks.items():
            mine = self.ranks.get(label)
            if mine is None:
                self.ranks[label] = rank
            else:
                _merge_rank(mine, rank)
        self.events += later.events
        self.kind_counts.update(later.kind_counts)
        self.ready = later.ready or self.ready
        self.last_serving_line = later.last_serving_line or self.last_serving_line
        for d in later.exceptions:
            mine_d = next((x for x in self.exceptions if x["signature"] == d["signature"]), None)
            if mine_d is not None:
                mine_d["occurrences"].extend(d["occurrences"])
            elif len(self.exceptions) < _MAX_DISTINCT_EXCEPTIONS:
                self.exceptions.append(d)
        crashes = later.crash_events
        if later._cpp_frame_crash is not None and self.notices.get("cpp_frame"):
            crashes = [c for c in crashes if c is not later._cpp_frame_crash]  # only the first C++ frame crashes
        self.crash_events.extend(crashes)
        self._cpp_frame_crash = self._cpp_frame_crash or later._cpp_frame_crash
        hangs = later.hang_events
        if self.hang_events and hangs and hangs[0].get("kind") == "exception":
            hangs = hangs[1:]  # a crash counts as hang evidence only when there is no other
        self.hang_events.extend(hangs)
        if not self.server_args and "server_args" in later.kind_counts:
            self.server_args, self.server_args_form = later.server_args, later.server_args_form
        if self.launch_command is None:
            self.launch_command = later.launch_command
        self.env.update(later.env)
        if not self.launch_args:
            self.launch_args = later.launch_args
        for key, value in later.versions.items():
            self.versions.setdefault(key, value)
        for key, found in later.notices.items():
            kept = self.notices.setdefault(key, [])
            kept.extend(found[:max(0, _NOTICE_LIMITS.get(key, _NOTICE_LIMIT) - len(kept))])
        for label, sketch in later.decode_by_rank.items():
            mine_sk = self.decode_by_rank.get(label)
            if mine_sk is None:
                self.decode_by_rank[label] = sketch
            else:
                mine_sk.merge(sketch)
        self.decode_series.merge(later.decode_series)
        self.prefill.merge(later.prefill)
        self.accept_len.merge(later.accept_len)
        self.running_req.merge(later.running_req)
        for shape, (count, first, example, ranks) in later.unknown_shapes.items():
            entry = self.unknown_shapes.get(shape)
            if entry is None:
                self.unknown_shapes[shape] = [count, first, example, ranks]
                continue
            entry[0] += count
            for label in ranks:
                if len(entry[3]) >= 64:
                    break
                entry[3][label] = None
        room = 1_000_000 - len(self.other_lines)
        if len(later.other_lines) <= room:
            self.other_lines |= later.other_lines
        else:  # only the count is read: any lines up to the limit will do
            self.other_lines.update(list(later.other_lines)[:room])
        if later.global_phase is not None and (
                self.global_phase is None or _PHASE_INDEX[later.global_phase] > _PHASE_INDEX[self.global_phase]):
            self.global_phase = later.global_phase
        self.last_line = max(self.last_line, later.last_line)
        self.last_ts = later.last_ts or self.last_ts

    # ------------------------------------------------------------------ summary
    def summary(self, stats: Any = None) -> RunSummary:
        outcome, reason, crash, hang = self._outcome()
        ranks = sorted((k for k in self.ranks if k != NO_RANK), key=_rank_sort_key)
        if NO_RANK in self.ranks and (not ranks or self.ranks[NO_RANK].phase):
            ranks = ([NO_RANK] if not ranks else ranks + [NO_RANK])
        phase_reached = {k: self.ranks[k].phase for k in ranks if self.ranks[k].phase}
        for c in self.crash_events:  # a traceback can place a rank further than its log lines did
            r, p = c.get("rank"), c.get("phase")
            if r in ranks and p and (r not in phase_reached or _PHASE_INDEX[p] > _PHASE_INDEX[phase_reached[r]]):
                phase_reached[r] = p
        memory = {}
        for k in ranks:
            mem = {key: v for key, v in self.ranks[k].memory.items() if key != "capture_end_line"}
            if mem:
                mem["evidence"] = self.ranks[k].evidence
                memory[k] = mem
        return RunSummary(
            file=self.file,
            outcome=outcome,
            outcome_reason=reason,
            ranks=ranks,
            phase_reached=phase_reached,
            phases={k: self.ranks[k].phases for k in ranks},
            last_seen={k: {"line": self.ranks[k].last_line, "ts": self.ranks[k].last_ts,
                           "text": self.ranks[k].last_text[:500],
                           "milestone": MILESTONES[self.ranks[k].milestone] if self.ranks[k].milestone >= 0 else None}
                       for k in ranks},
            progress={k: self.ranks[k].progress for k in ranks if self.ranks[k].progress},
            crash=crash,
            exceptions=[_distinct_view(d) for d in self.exceptions],
            hang=hang,
            ready=self.ready,
            memory=memory,
            throughput=self._throughput(),
            server_args=self.server_args,
            server_args_form=self.server_args_form,
            launch_command=self.launch_command,
            launch_args=self.launch_args,
            env=dict(sorted(self.env.items())),
            versions=dict(self.versions),
            notices=self.notices,
            coverage=self._coverage(stats),
            warnings=list(getattr(stats, "warnings", []) or []),
        )

    def _outcome(self) -> tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]:
        ready_line = self.last_serving_line if (self.ready or self.last_serving_line) else 0
        fatal = [c for c in self.crash_events if c["line"] > ready_line or not ready_line]
        fragments = [n for n in self.notices.get("tb_fragment", []) if n["line"] > ready_line]
        if fragments and not fatal:
            fatal = [self._garbled_crash(fragments)]
        self._resolve_ranks(fatal)
        for c in fatal:  # a traceback cut above its frames: place it by its twins on other ranks
            if c["phase"] is None and c.get("exception"):
                twin = next((d for d in fatal if d["phase"] and d.get("exception") == c["exception"]), None)
                c["phase"] = twin["phase"] if twin else None
        sigquits = [n for n in self.notices.get("sigquit", []) if n["line"] > ready_line]
        hang = None
        if self.hang_events:
            hang = {"evidence": self.hang_events[:16], "first_line": self.hang_events[0]["line"],
                    "ranks": sorted({h["rank"] for h in self.hang_events if h.get("rank")}, key=_rank_sort_key),
                    "silent_ranks": self._silent_ranks()}
        if hang:
            for h in hang["evidence"]:
                h["rank"] = self._global_rank_label(h.get("rank"))
            hang["ranks"] = sorted({h["rank"] for h in hang["evidence"] if h.get("rank")}, key=_rank_sort_key)
        crash = self._crash(fatal, sigquits) if (fatal or sigquits) else None
        first_hang = self.hang_events[0]["line"] if self.hang_events else None
        if hang and (not fatal or all(_is_hang_consequence(c, first_hang) for c in fatal)):
            return "hung", "hang evidence: " + self.hang_events[0]["text"][:160], crash, hang
        if crash:
            first = crash.get("exception") or ("native abort" if crash.get("native") else "sigquit")
            where = f" on {crash['first_rank']}" if crash.get("first_rank") else ""
            return "crashed", f"{first}{where} at line {crash['line']}", crash, hang
        if hang:
            return "hung", "hang evidence: " + self.hang_events[0]["text"][:160], None, hang
        if self.ready:
            return "ready", f"server ready at line {self.ready['line']}", None, None
        if self.last_serving_line:
            return "ready", f"served batches (last at line {self.last_serving_line})", None, None
        return "incomplete", f"the log stops at line {self.last_line} without readiness or failure", None, None

    def _crash(self, fatal: list[dict[str, Any]], sigquits: list[dict[str, Any]]) -> dict[str, Any]:
        if not fatal:
            n = sigquits[0]
            return {"first_rank": None, "ranks": [], "phase": self.global_phase, "exception": None,
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

    def _garbled_crash(self, fragments: list[dict[str, Any]]) -> dict[str, Any]:
        """Torn traceback text: no exception to read, but the functions still place it."""
        words = {w for n in fragments for w in _WORD.findall(n["text"])}
        phase = next((p for fn, p in _FRAME_PHASE.items() if fn in words), None)
        if phase is None and words & _SERVING_FUNCS:
            phase = "serving"
        first = fragments[0]
        return {"rank": None, "source": "garbled", "exception": None,
                "message": "traceback text torn by concurrent writers (unreadable)", "frames": [],
                "oom": None, "file": first["file"], "line": first["line"],
                "end_line": fragments[-1]["line"], "ts": None, "text": first["text"],
                "phase": phase or self.global_phase, "garbled": True}

    def _silent_ranks(self) -> list[str]:
        """Ranks that fell behind the others (the ones the others wait on in a collective).

        Compared by the furthest start-up record each rank printed, so a rank that began
        loading weights and never finished is behind ranks that finished.
        """
        reached = {k: r.milestone for k, r in self.ranks.items() if r.milestone >= 0}
        if len(reached) < 2:
            return []
        top = max(reached.values())
        return sorted((k for k, m in reached.items() if m < top), key=_rank_sort_key)

    def _global_rank_label(self, head_rank: str | None) -> str | None:
        """c10d's ``[rankN]`` is the global rank: TP rank N in a pure-TP run."""
        if head_rank and head_rank.startswith("rank") and self._uses_tp_labels() and \
                all(re.fullmatch(r"TP\d+", k) for k in self.ranks if k != NO_RANK):
            return "TP" + head_rank[4:]
        return head_rank

    def _throughput(self) -> dict[str, Any]:
        return {
            "decode_gen_tok_s": _merged(self.decode_by_rank.values()).to_dict(),
            "decode_by_rank": {k: v.to_dict() for k, v in sorted(self.decode_by_rank.items())},
            "decode_series": self.decode_series.to_list(),
            "prefill_input_tok_s": self.prefill.to_dict(),
            "accept_len": self.accept_len.to_dict(),
            "running_req": self.running_req.to_dict(),
        }

    def _coverage(self, stats: Any) -> dict[str, Any]:
        lines = getattr(stats, "lines", self.last_line) or self.last_line
        other = len(self.other_lines)
        top = sorted(self.unknown_shapes.items(), key=lambda kv: -kv[1][0])[:10]
        return {
            "lines_read": lines,
            "lines_recognised": max(lines - other, 0),
            "lines_unrecognised": other,
            "recognised_pct": round(100.0 * (lines - other) / lines, 2) if lines else 100.0,
            "events": self.events,
            "kinds": dict(sorted(self.kind_counts.items(), key=lambda kv: -kv[1])),
            "top_unrecognised": [
                {"shape": shape, "count": v[0], "first_line": v[1], "example": v[2],
                 "ranks": sorted(v[3], key=_rank_sort_key)}
                for shape, v in top
            ],
            "unrecognised_shapes": {shape: v[0] for shape, v in self.unknown_shapes.items()},
            "long_lines": getattr(stats, "long_lines", 0),
            "decode_errors": getattr(stats, "decode_errors", 0),
            "unterminated_last_line": getattr(stats, "unterminated_last_line", False),
            "bytes": getattr(stats, "bytes", None),
        }


#: Memory figures kept from the first record that gives them (the handlers check the
#: first key before writing the group); every other figure is the last one printed.
_FIRST_WINS = (
    ("kv_pools", ("kv_tokens", "k_gib", "v_gib", "kv_gib"), "kv_cache_alloc"),
    ("pool_end_avail_gib", ("pool_end_avail_gib",), "memory_pool_end"),
    ("capture_begin_avail_gib", ("capture_begin_avail_gib", "capture_bs"), "capture_begin"),
    ("capture_end_line", ("capture_end_line", "capture_end_avail_gib", "capture_mem_gib", "capture_elapsed_s"),
     "capture_end"),
)


def _merge_rank(mine: _Rank, later: _Rank) -> None:
    """A rank's state after ``later``'s records followed ``mine``'s (see RunModel.merge)."""
    if later.phase is not None:
        mine.phase = later.phase
    for phase, info in later.phases.items():
        kept = mine.phases.get(phase)
        if kept is None:
            mine.phases[phase] = info
        else:
            kept["last_line"] = info["last_line"]
            kept["last_ts"] = info["last_ts"]
    skip_memory: set[str] = set()
    skip_evidence: set[str] = set()
    for marker, keys, evidence in _FIRST_WINS:
        if marker in mine.memory:
            skip_memory.update(keys)
            skip_evidence.add(evidence)
    for key, value in later.memory.items():
        if key == "kv_pools" and key in mine.memory:
            mine.memory[key].extend(value)
        elif key not in skip_memory:
            mine.memory[key] = value
    for key, value in later.evidence.items():
        if key not in skip_evidence:
            mine.evidence[key] = value
    mine.progress.update(later.progress)
    if later.last_line:
        mine.last_line = later.last_line
        mine.last_text = later.last_text
    if later.last_ts is not None or later.ts_unset:
        mine.last_ts = later.last_ts
        mine.ts_unset = mine.ts_unset or later.ts_unset
    mine.milestone = max(mine.milestone, later.milestone)


def _distinct_view(d: dict[str, Any]) -> dict[str, Any]:
    """A distinct traceback with the ranks that share it (as resolved) and its occurrences."""
    out = {k: v for k, v in d.items() if k not in ("signature", "occurrences")}
    ranks: list[str | None] = []
    for occ in d["occurrences"]:
        if occ["rank"] not in ranks:
            ranks.append(occ["rank"])
    out["ranks"] = ranks
    out["occurrences"] = [{"rank": o["rank"], "line": o["line"], "end_line": o["end_line"], "ts": o.get("ts"),
                           "oom": o["oom"]} for o in d["occurrences"]]
    return out


def _flags(words: list[str]) -> dict[str, Any]:
    """``--tp 8 --enable-x`` -> {"tp": 8, "enable_x": True}: the launch command's options."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--") and len(word) > 2:
            key, eq, value = word[2:].partition("=")
            key = key.replace("-", "_")
            if eq:
                out[key] = _scalar(value)
            elif i + 1 < len(words) and not words[i + 1].startswith("--"):
                out[key] = _scalar(words[i + 1])
                i += 1
            else:
                out[key] = True
        i += 1
    return out


def _scalar(text: str) -> Any:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _merged(sketches: Any) -> Sketch:
    out = Sketch()
    for sk in sketches:
        out.merge(sk)
    return out


def _put(d: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        d[key] = value


def _shape(text: str) -> str:
    """A line's shape for grouping unknown lines: numbers and hex ids masked."""
    return _DIGITS.sub("N", _HEX.sub("0xH", text.strip()))[:160]


def _brief(rec: dict[str, Any]) -> dict[str, Any]:
    return {"file": rec["file"], "line": rec["line"], "rank": rec["rank"],
            "text": (rec.get("message") or rec["text"])[:300], "kind": "exception"}


def _is_hang_consequence(rec: dict[str, Any], first_hang_line: int | None = None) -> bool:
    """A fatal error that a hang explains: a watchdog's own message, or, after a watchdog
    fired, an abort, a fatal signal, a collective error or the parent noticing a dead child."""
    text = f"{rec.get('exception') or ''} {rec.get('message') or ''}"
    if any(m in text for m in _HANG_MARKERS):
        return True
    if first_hang_line is None or rec["line"] < first_hang_line:
        return False
    return bool(rec.get("native") or rec.get("fatal_signal") or rec.get("rank") is None
                or "DistBackendError" in text or "NCCL" in text)


def _c10d_rank(head: dict[str, Any]) -> str | None:
    return f"rank{head['global_rank']}" if "global_rank" in head else None


def _rank_sort_key(label: str | None) -> tuple[Any, ...]:
    if not label:
        return ((),)
    parts = []
    for token in label.split():
        m = re.fullmatch(r"([A-Za-z_]+)(-?\d+)", token)
        parts.append((m.group(1), int(m.group(2))) if m else (token, 0))
    return (tuple(parts),)


_HANDLERS = {name[3:]: fn for name, fn in vars(RunModel).items() if name.startswith("on_") and callable(fn)}
#: Kinds whose observation does more than update "last seen" (see observe_all).
_ACTIVE_KINDS = frozenset(_HANDLERS) | frozenset(PHASE_OF_KIND) | {"decode_batch"}
_KIND = itemgetter(0)  # Event.kind
_DECODE_FIGURES = ("gen_throughput_tok_s", "accept_len", "running_req")
