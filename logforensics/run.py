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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .events import PHASE_OF_KIND, PHASES, Event
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


class RunModel:
    """Incremental run model: ``observe`` every event, then ``summary``."""

    def __init__(self, file: str | None = None) -> None:
        self.file = file
        self.ranks: dict[str, _Rank] = {}
        self.events = 0
        self.kind_counts: dict[str, int] = {}
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

    # ------------------------------------------------------------------ observe
    def observe(self, ev: Event) -> None:
        self.events += 1
        kind = ev.kind
        counts = self.kind_counts
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "decode_batch":  # the bulk of a serving log: the shortest path
            self.last_line = ev.line
            self.on_decode_batch(ev)
            r = self.ranks.get(ev.rank or NO_RANK)
            if r is not None and r.phase == "serving":
                r.last_line = ev.line
                r.last_ts = ev.ts
                r.last_text = ev.text
                r.phases["serving"]["last_line"] = ev.line
                r.phases["serving"]["last_ts"] = ev.ts
            else:
                self._enter(ev, "serving")
            return
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

    def _notice(self, key: str, ev: Event, limit: int = 64) -> None:
        lst = self.notices.setdefault(key, [])
        if len(lst) < limit:
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
        if ev.fields.get("bs") and "capture_bs" not in r.memory:
            r.memory["capture_bs"] = ev.fields["bs"]

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
        label = next(iter(self.ranks), NO_RANK) if self.ranks else NO_RANK
        r = self._rank(label if label != NO_RANK else None)
        r.progress[phase] = {"n": prog["n"], "total": prog["total"], "desc": desc, "line": ev.line,
                             "bs": ev.fields.get("bs"), "num_tokens": ev.fields.get("num_tokens"),
                             "avail_gib": ev.fields.get("avail_gib")}
        if self.global_phase is None or _PHASE_INDEX[phase] > _PHASE_INDEX[self.global_phase]:
            self.global_phase = phase

    # -- serving ----------------------------------------------------------------------
    def on_decode_batch(self, ev: Event) -> None:
        f = ev.fields
        self.last_serving_line = ev.line
        if self.kind_counts["decode_batch"] <= 3:  # a few decode lines as evidence for throughput
            self._notice("decode", ev)
        tput = f.get("gen_throughput_tok_s")
        if tput is not None:
            key = ev.rank or NO_RANK
            sk = self.decode_by_rank.get(key)
            if sk is None:
                sk = self.decode_by_rank[key] = Sketch()
            sk.add(tput)
            self.decode_series.add(ev.ts or ev.line, tput)
        if f.get("accept_len") is not None:
            self.accept_len.add(f["accept_len"])
        if f.get("running_req") is not None:
            self.running_req.add(f["running_req"])

    def on_prefill_batch(self, ev: Event) -> None:
        self.last_serving_line = ev.line
        tput = ev.fields.get("input_throughput_tok_s")
        if tput is not None:
            self.prefill.add(tput)

    def on_server_ready(self, ev: Event) -> None:
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
            self._notice("server_args", ev, 1)

    def on_launch_command(self, ev: Event) -> None:
        cmd = ev.fields.get("command") or ev.text
        if self.launch_command is None:
            self.launch_command = cmd
            self._notice("launch_command", ev, 1)
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

    def on_cpp_abort(self, ev: Event) -> None:
        self.crash_events.append({
            "rank": ev.rank, "source": "native", "exception": None, "message": ev.fields.get("message"),
            "frames": [], "oom": None, "file": ev.file, "line": ev.line, "end_line": ev.line,
            "ts": ev.ts, "text": ev.text, "phase": self._phase_for(ev.rank, []), "native": True,
        })
        self._notice("native_abort", ev)

    on_cpp_terminate = on_cpp_abort

    def on_cpp_frame(self, ev: Event) -> None:
        """A C++ stack frame: a native crash. The rank may be in the process title."""
        m = _PROCTITLE.search(ev.text)
        rank = m.group(1).replace("_", " ") if m else ev.rank
        if not self.notices.get("cpp_frame"):
            self.crash_events.append({
                "rank": rank, "source": "native", "exception": None, "message": "C++ stack trace",
                "frames": [], "oom": None, "file": ev.file, "line": ev.line, "end_line": ev.line,
                "ts": ev.ts, "text": ev.text, "phase": self._phase_for(rank, []), "native": True,
            })
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
                shape = "(other shapes)"
                entry = self.unknown_shapes.setdefault(shape, [0, ev.line, ev.text[:200], set()])
            else:
                entry = self.unknown_shapes[shape] = [0, ev.line, ev.text[:200], set()]
        entry[0] += 1
        if ev.rank and len(entry[3]) < 64:
            entry[3].add(ev.rank)

    # ------------------------------------------------------------------ helpers
    def _single(self) -> bool:
        """A single-GPU run: scheduler records carry no rank."""
        return set(self.ranks) == {NO_RANK}

    def on_tb_fragment(self, ev: Event) -> None:
        self._notice("tb_fragment", ev, 256)

    def _resolve_ranks(self, events: list[dict[str, Any]]) -> None:
        """Give rank-less crash records a rank where the log allows it, saying how."""
        tp_labels = self._uses_tp_labels()
        unranked_native = [c for c in events if c.get("native") and c["rank"] is None]
        labelled = sorted((k for k in self.ranks if k != NO_RANK), key=_rank_sort_key)
        for c in events:
            if c["rank"] is not None:
                continue
            oom = c.get("oom")
            if oom and oom.get("gpu") is not None and tp_labels:
                c["rank"], c["rank_inferred_from"] = f"TP{oom['gpu']}", "oom_gpu_index"
            elif self._single():
                c["rank"], c["rank_inferred_from"] = NO_RANK, "single_rank_run"
        # One C++ abort per rank and no rank printed: every rank died the same way.
        if unranked_native and labelled and len(unranked_native) >= len(labelled):
            for c, label in zip(unranked_native, labelled):
                c["rank"], c["rank_inferred_from"] = label, "one_native_abort_per_rank"

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
            return self.ranks[key].phase
        return self.global_phase

    def _add_distinct(self, rec: dict[str, Any]) -> None:
        sig = (rec["exception"], _shape(rec["message"] or ""),
               tuple((fr.get("path"), fr.get("func")) for fr in rec["frames"][-6:]))
        for d in self.exceptions:
            if d["signature"] == sig:
                d["occurrences"].append(rec)
                return
        if len(self.exceptions) < _MAX_DISTINCT_EXCEPTIONS:
            self.exceptions.append({
                "signature": sig, "exception": rec["exception"], "message": rec["message"],
                "phase": rec["phase"], "frames": rec["frames"],
                "chain": rec["chain"], "oom": rec["oom"], "text": rec["text"],
                "first_line": rec["line"], "end_line": rec["end_line"], "file": rec["file"],
                "occurrences": [rec],  # the crash records themselves: ranks resolved later show
            })

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


def _distinct_view(d: dict[str, Any]) -> dict[str, Any]:
    """A distinct traceback with the ranks that share it (as resolved) and its occurrences."""
    out = {k: v for k, v in d.items() if k not in ("signature", "occurrences")}
    ranks: list[str | None] = []
    for occ in d["occurrences"]:
        if occ["rank"] not in ranks:
            ranks.append(occ["rank"])
    out["ranks"] = ranks
    out["occurrences"] = [{"rank": o["rank"], "line": o["line"], "end_line": o["end_line"], "oom": o["oom"]}
                          for o in d["occurrences"]]
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
