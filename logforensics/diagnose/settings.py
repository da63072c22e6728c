"""Settings that differ between two runs, and SGLang's custom allreduce in each.

A setting is compared only when both logs show it: both ``server_args`` dumps hold the
key, or both launch commands are in the logs (a flag on one command and not on the other
is then a real difference: one side runs SGLang's default). A log that shows neither says
nothing about its settings, so nothing about it "changed".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..events import PHASES
from ..model.phases import TORCH_COMPILE, components_of
from ..model.records import NO_MEMORY, Frame
from ..model.run import RunSummary
from .crash import hang_facts
from .sides import Evidence, ev_of, notice_ev, setting

#: server_args / env keys and the logged effects they are linked to.
EFFECTS: dict[str, str] = {
    "mem_fraction_static": "KV cache size (#tokens, K/V size) and the headroom left for CUDA graphs",
    "cuda_graph_max_bs": "CUDA-graph capture memory and time (Capture ... end: mem usage)",
    "disable_cuda_graph": "decode lines 'cuda graph: False' and decode throughput",
    "disable_piecewise_cuda_graph": "piecewise CUDA-graph compile and capture for prefill ('Capture piecewise CUDA graph')",
    "enable_piecewise_cuda_graph": "piecewise CUDA-graph compile and capture for prefill ('Capture piecewise CUDA graph')",
    "disable_custom_all_reduce": "custom allreduce buffers (IPC mappings) during init and capture",
    "tp_size": "ranks, weights per GPU, KV cell size",
    "chunked_prefill_size": "activation memory at prefill; the default mem_fraction_static",
    "max_running_requests": "request slots and KV usage",
    "max_prefill_tokens": "tokens in one prefill batch: activation memory at prefill",
    "context_len": "the longest request the server accepts",
    "kv_cache_dtype": "KV cell size and #tokens; the attention kernels' dtype for the cache",
    "attention_backend": "decode throughput",
    "enable_torch_compile": "start-up time and decode throughput",
    "SGLANG_FORCE_CUSTOM_AR_PCIE": "custom allreduce enabled on PCIe-only GPUs: IPC buffers mapped "
                                   "to every peer, graph buffers registered during capture",
    "SGLANG_CUSTOM_ALLREDUCE_ALGO": "custom allreduce kernel choice (1stage/2stage)",
    "PYTORCH_CUDA_ALLOC_CONF": "allocator fragmentation (reserved but unallocated memory)",
}

#: Settings SGLang derives from another where they are left unset: they change with it, one
#: change, not two (``cuda_graph_bs``, the batch sizes captured, from ``cuda_graph_max_bs``).
DERIVED_FROM: dict[str, str] = {"cuda_graph_bs": "cuda_graph_max_bs"}


#: Settings the server sets itself from others, where its log says so (the record's kind ->
#: the setting and what it is set from): under DP attention the launcher divides the chunked
#: prefill size by the DP size ("DP attention is enabled. The chunked prefill size is adjusted
#: to 4096 ..."), and the settings dump after it shows the value it set, not the command's.
SET_BY_SERVER: dict[str, tuple[str, tuple[str, ...]]] = {
    "dp_attention_adjust": ("chunked_prefill_size", ("dp_size", "enable_dp_attention")),
}


def independent_changes(keys: tuple[str, ...], set_by_server: tuple[str, ...] = ()) -> int:
    """How many changes the changed ``keys`` are: a setting that changed with the one SGLang
    derives it from is no change of its own, nor one the server set from another change."""
    return len({k for k in keys if DERIVED_FROM.get(k) not in keys and k not in set_by_server})


def _set_by_server(args: Mapping[str, SettingDiff], fail: RunSummary, base: RunSummary) -> tuple[str, ...]:
    """The changed settings whose values the server set itself (``SET_BY_SERVER``: a run's log
    says so) from a setting that changed too: they follow that change, and are no lead of their own."""
    return tuple(key for kind, (key, origins) in SET_BY_SERVER.items()
                 if key in args and any(o in args for o in origins)
                 and (fail.notices.get(kind) or base.notices.get(kind)))


#: The settings that bring in each optional part of SGLang (``model.phases.COMPONENTS``): a
#: failure whose frames are inside the part, after one of them changed, runs through what the
#: change switched on.
COMPONENT_SETTINGS: dict[str, tuple[str, ...]] = {
    "speculative decoding": ("speculative_algorithm", "speculative_draft_model_path"),
    "LoRA": ("enable_lora", "lora_paths"),
    "PD disaggregation": ("disaggregation_mode", "disaggregation_transfer_backend"),
    "constrained decoding (the grammar backend)": ("grammar_backend",),
    "the attention backend": ("attention_backend", "prefill_attention_backend", "decode_attention_backend",
                              "nsa_prefill_backend", "nsa_decode_backend", "nsa_prefill", "nsa_decode"),
    TORCH_COMPILE: ("enable_torch_compile", "enable_piecewise_cuda_graph"),
}
#: Of those, the settings that give a part its data (a draft model, adapters), not its code: a
#: change from one value to another leaves the part as it was (on in both runs); only one from
#: none brings it in (real-pairs 080: both runs ran EAGLE3, with another draft checkpoint).
COMPONENT_DATA = frozenset({"speculative_draft_model_path", "lora_paths"})


#: Which phase (or "throughput") each setting acts on, to link a difference to a failure.
ACTS_ON: dict[str, tuple[str, ...]] = {
    "mem_fraction_static": ("kv_cache_alloc", "cuda_graph_capture", "serving"),
    "cuda_graph_max_bs": ("cuda_graph_capture",),
    "cuda_graph_bs": ("cuda_graph_capture",),
    # (graph capture runs only with graphs on: a failure in it is in what the setting switches)
    "disable_cuda_graph": ("cuda_graph_capture", "throughput"),
    # (piecewise graphs are compiled and captured for prefill after the decode graphs)
    "disable_piecewise_cuda_graph": ("cuda_graph_capture", "throughput"),
    "enable_piecewise_cuda_graph": ("cuda_graph_capture", "throughput"),
    "disable_custom_all_reduce": ("init_distributed", "cuda_graph_capture"),
    "tp_size": ("load_weights", "kv_cache_alloc"),
    # (the attention kernels read the cache in its dtype: a capture or a batch runs them)
    "kv_cache_dtype": ("kv_cache_alloc", "cuda_graph_capture", "serving"),
    "max_total_tokens": ("kv_cache_alloc",),
    "chunked_prefill_size": ("cuda_graph_capture", "serving"),
    "max_prefill_tokens": ("serving",),
    "attention_backend": ("throughput",),
    "enable_torch_compile": ("cuda_graph_capture", "throughput"),
    # (speculative decoding captures the draft's and the verify pass's graphs, runs its draft
    # and verify passes in every decode step, and loads the draft model with the target's weights)
    "speculative_algorithm": ("cuda_graph_capture", "serving", "throughput"),
    "speculative_draft_model_path": ("load_weights", "cuda_graph_capture", "serving"),
    "speculative_num_steps": ("cuda_graph_capture", "serving", "throughput"),
    "speculative_eagle_topk": ("cuda_graph_capture", "serving", "throughput"),
    "speculative_num_draft_tokens": ("cuda_graph_capture", "serving", "throughput"),
    "SGLANG_FORCE_CUSTOM_AR_PCIE": ("init_distributed", "cuda_graph_capture", "serving"),
    "SGLANG_CUSTOM_ALLREDUCE_ALGO": ("cuda_graph_capture", "serving", "throughput"),
}

#: Settings that say where a run listens or met its peers on its machine (ports and addresses, the
#: PD bootstrap server's port among them), its seed and its scratch path: a launcher gives them
#: per run, and no failure follows from their values differing.
_IGNORE = frozenset({"random_seed", "port", "host", "nccl_port", "dist_init_addr", "file_storage_path",
                     "disaggregation_bootstrap_port"})

#: Lines where SGLang names an environment variable it acts on (``SGLANG_FORCE_CUSTOM_AR_PCIE=1:
#: forcing ...``): the run model keeps them as ``env`` notices and their values in ``env``.
FORCED_NOTICE = "env"


@dataclass(frozen=True)
class SettingDiff:
    """A setting both logs show, with different values (None: default, not on that command line)."""

    key: str
    source: str          # "server_args", "env" or "start-up line" (the values in effect SGLang prints)
    baseline: Any
    failing: Any
    effect: str | None


@dataclass(frozen=True)
class LinkedSetting:
    """A difference that acts on the phase where the failing run failed (or on throughput)."""

    key: str
    source: str
    baseline: Any
    failing: Any
    phase: str
    effect: str | None


@dataclass(frozen=True)
class ConfigDiff:
    """Settings both logs show that differ, and those acting on the failing phase."""

    server_args: Mapping[str, SettingDiff]
    env: Mapping[str, SettingDiff]
    changed: bool
    changed_keys: tuple[str, ...]
    linked: tuple[LinkedSetting, ...]
    #: Why settings were not compared (a log that shows no settings), empty when they were.
    not_compared: str | None
    evidence: tuple[Evidence, ...]
    #: Fields of one run's ``server_args`` dump that the other's lacks, each with the side that
    #: has it ("speculative_x (failing only)"): the two builds differ, whatever their settings.
    build_fields: tuple[str, ...] = ()
    #: Changed settings that switch on a part of SGLang the failing traceback's call ran through
    #: (``COMPONENT_SETTINGS``; the innermost such part whose settings changed): failing-side
    #: evidence, the frames, ties them to the failure; their ``phase`` is the part's name.
    in_component: tuple[LinkedSetting, ...] = ()
    #: That part with its innermost frame (``model.phases.components_of``), or None.
    in_component_at: str | None = None
    #: Changed settings the server set itself from another changed setting, as a run's log
    #: says (``SET_BY_SERVER``): they change with it, so they are not linked to the failure.
    set_by_server: tuple[str, ...] = ()

    @staticmethod
    def empty() -> ConfigDiff:
        return ConfigDiff({}, {}, False, (), (), None, ())


def _norm(v: Any) -> Any:
    return v.strip() if isinstance(v, str) else v


def _env(run: RunSummary) -> dict[str, str]:
    env = dict(run.env)
    for entry in run.notices.get(FORCED_NOTICE, []):
        m = re.search(r"\b(SGLANG_\w+)=(\S+?):", entry.text or "")
        if m:
            env.setdefault(m.group(1), m.group(2))
    return env


def _compare_args(base: RunSummary, fail: RunSummary) -> tuple[dict[str, SettingDiff], str | None]:
    def values(run: RunSummary) -> tuple[str | None, dict[str, Any]]:
        if run.server_args:
            return "server_args", dict(run.server_args)
        if run.launch_args:
            return "launch_command", dict(run.launch_args)
        return None, {}

    bs, bv = values(base)
    fs, fv = values(fail)
    if bs is None or fs is None:
        side = "the baseline's log" if bs is None else "the failing log"
        return {}, f"{side} shows neither a server_args dump nor a launch command"
    if bs == "launch_command" and fs == "launch_command":
        keys = set(bv) | set(fv)  # both command lines are in the logs: a missing flag is a default
    else:
        keys = set(bv) & set(fv)
    out = {}
    for key in sorted(keys - _IGNORE):
        b, f = bv.get(key), fv.get(key)
        if _norm(b) != _norm(f) and not _inert(key, bv, fv):
            out[key] = SettingDiff(key, "server_args", b, f, EFFECTS.get(key))
    return out, None


#: Settings of an optional part (by their names' prefix) and the switch that turns the part on,
#: with the values that leave it off: while it is off in both runs, they act on nothing.
_PART_SWITCHES = (("speculative_", "speculative_algorithm", (None, "None", "")),
                  ("lora_", "enable_lora", (None, False, "None", "False")),
                  ("hicache_", "enable_hierarchical_cache", (None, False, "False")))


def _inert(key: str, base: Mapping[str, Any], fail: Mapping[str, Any]) -> bool:
    """Whether ``key`` belongs to a part both runs leave off (``speculative_moe_runner_backend``
    with no speculative algorithm on either side, a build's default that moved, real-pairs 024)."""
    for prefix, switch, off in _PART_SWITCHES:
        if key.startswith(prefix) and key != switch and switch in base and switch in fail:
            return _norm(base[switch]) in off and _norm(fail[switch]) in off
    return False


def _compare_env(base: RunSummary, fail: RunSummary) -> dict[str, SettingDiff]:
    be, fe = _env(base), _env(fail)
    out = {}
    for key in sorted(set(be) | set(fe)):
        b, f = be.get(key), fe.get(key)
        # An unset variable is seen only where the log shows the launch command.
        if (b is None and not base.launch_command) or (f is None and not fail.launch_command) or b == f:
            continue
        out[key] = SettingDiff(key, "env", b, f, EFFECTS.get(key))
    return out


#: Settings in effect that SGLang prints once it has sized the KV cache, defaults resolved
#: ("max_total_num_tokens=..., chunked_prefill_size=..., max_prefill_tokens=...,
#: max_running_requests=..., context_len=..."): the run model keeps them with each rank's memory.
STARTUP_SETTINGS = ("chunked_prefill_size", "max_prefill_tokens", "max_running_requests", "context_len")


def _startup(run: RunSummary) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The start-up line's settings of the run's first rank that printed it, and that line."""
    for label in run.ranks:
        mem = run.memory.get(label, NO_MEMORY)
        line = mem.evidence.get("max_total_tokens")
        if line:
            return {k: mem.figure(k) for k in STARTUP_SETTINGS if mem.figure(k) is not None}, line.to_dict()
    return {}, None


def _compare_startup(base: RunSummary, fail: RunSummary, args: dict[str, SettingDiff]) -> tuple[
        dict[str, SettingDiff], list[Evidence]]:
    """Settings of the start-up line that differ, unless the settings dumps say otherwise: the
    values in effect where no dump is in the log. Where both dumps show the setting alike (a
    default both left to SGLang, ``max_running_requests=None``), the values SGLang derived
    (from the KV pool's size, the GPU's memory) are what other changes made of it: no change
    of its own (real-pairs 026)."""
    (bv, bline), (fv, fline) = _startup(base), _startup(fail)
    alike = {k for k in STARTUP_SETTINGS if k in base.server_args and k in fail.server_args}
    out = {k: SettingDiff(k, "start-up line", bv[k], fv[k], EFFECTS.get(k))
           for k in STARTUP_SETTINGS if k in bv and k in fv and bv[k] != fv[k] and k not in args and k not in alike}
    lines = [e for line in (fline, bline) if line and out for e in ev_of(line)]
    return out, lines


def config_diff(fail: RunSummary, base: RunSummary) -> ConfigDiff:
    args, not_compared = _compare_args(base, fail)
    startup, startup_lines = _compare_startup(base, fail, args)
    args = dict(sorted({**args, **startup}.items()))
    env = _compare_env(base, fail)
    evidence = [e for run in (fail, base) for kind in ("launch_command", "server_args", FORCED_NOTICE)
                for e in map(notice_ev, run.notices.get(kind, [])[:2])] + startup_lines
    build: tuple[str, ...] = ()
    if base.server_args and fail.server_args:
        build = tuple([f"{k} (failing only)" for k in sorted(set(fail.server_args) - set(base.server_args))]
                      + [f"{k} (baseline only)" for k in sorted(set(base.server_args) - set(fail.server_args))])
    derived = _set_by_server(args, fail, base)
    if derived:  # the lines where the server says it set them
        evidence += [notice_ev(n) for kind in SET_BY_SERVER for run in (fail, base) for n in run.notices.get(kind, [])[:1]]
    linked = tuple(x for x in _linked(args, env, fail) if x.key not in derived)
    return ConfigDiff(args, env, bool(args or env), tuple(sorted(args) + sorted(env)), linked,
                      not_compared, tuple(evidence), build, *_in_component(args, fail), set_by_server=derived)


def _in_component(args: dict[str, SettingDiff], fail: RunSummary) -> tuple[tuple[LinkedSetting, ...], str | None]:
    """The changed settings that bring in a part of SGLang the failing crash's call ran through
    (the innermost such part whose settings changed: a kernel of the attention backend that
    speculative decoding's draft pass called ties a changed speculative setting as well as a
    changed backend, and the backend first), with that part and its frame."""
    if fail.crash is None or fail.outcome != "crashed":
        return (), None
    for where in components_of(fail.crash.frames):
        part = next((name for name in COMPONENT_SETTINGS if where.startswith(name)), None)
        linked = tuple(LinkedSetting(k, args[k].source, args[k].baseline, args[k].failing, part, args[k].effect)
                       for k in COMPONENT_SETTINGS.get(part or "", ()) if part and k in args
                       and (k not in COMPONENT_DATA or _off(args[k].baseline)))
        if len(linked) > 1:
            # where several changed settings bring that part in, those whose new value the frames name
            # ('flashmla_kv' in '_forward_flashmla_kv') are the ones that ran
            named = tuple(x for x in linked if _named_in_frames(x.failing, fail.crash.frames))
            linked = named or linked
        if linked:
            return linked, where
    return (), None


def _off(value: Any) -> bool:
    """Whether a setting's value leaves what it configures out (unset, none, empty)."""
    return value is None or value is False or str(value).strip().lower() in ("", "none", "null", "[]", "false")


def _named_in_frames(value: Any, frames: Sequence[Frame]) -> bool:
    """Whether a setting's value (a backend's name, ``flashmla_kv``) is a word of a frame's
    function or file name."""
    word = str(value or "").strip().lower()
    if len(word) < 4 or not re.fullmatch(r"[\w.-]+", word):
        return False
    pattern = re.compile(rf"(?<![a-z0-9]){re.escape(word)}(?![a-z0-9])")
    for fr in frames:
        base = str(fr.path or "").replace("\\", "/").rsplit("/", 1)[-1]
        if pattern.search(f"{fr.func or ''} {base}".lower()):
            return True
    return False


def failed_in(fail: RunSummary) -> str | None:
    """The phase the failing run failed in (its crash's, its hang's), or where a log that just
    stops left its ranks (the furthest phase they reached); None where none is known."""
    if fail.crash:
        return fail.crash.phase
    if fail.outcome == "hung":
        return hang_facts(fail).phase
    if fail.outcome == "incomplete":
        reached = [r.phase_reached for r in fail.per_rank.values() if r.phase_reached in PHASES]
        return max(reached, key=PHASES.index) if reached else None
    return None


def acting_on(key: str, phase: str | None) -> bool:
    """Whether the setting ``key`` acts on ``phase`` (``ACTS_ON``; what acts on serving acts on
    the warm-up request too)."""
    acts = ACTS_ON.get(key, ())
    return phase is not None and (phase in acts or phase == "warmup" and "serving" in acts)


def acting_after(key: str, phase: str | None) -> bool:
    """Whether the setting ``key`` acts only on phases after ``phase`` (``ACTS_ON``; throughput is
    serving's): a run that failed in ``phase`` had not reached what it changes."""
    acts = [PHASES.index("serving" if p == "throughput" else p) for p in ACTS_ON.get(key, ())
            if p == "throughput" or p in PHASES]
    return phase in PHASES and bool(acts) and min(acts) > PHASES.index(phase)


def _linked(args: dict[str, SettingDiff], env: dict[str, SettingDiff], fail: RunSummary) -> tuple[LinkedSetting, ...]:
    # the phase the failing run failed in: its crash's, or the one its hang came in
    crash_phase = failed_in(fail) if fail.crash or fail.outcome == "hung" else None
    # a setting acts on throughput only where the failing run printed batches (it has some)
    batches = bool(fail.coverage.kinds.get("decode_batch") or fail.coverage.kinds.get("prefill_batch"))
    out = []
    for diffs in (args, env):
        for key, d in diffs.items():
            acts = ACTS_ON.get(key, ())
            if crash_phase and acting_on(key, crash_phase):
                out.append(LinkedSetting(key, d.source, d.baseline, d.failing, crash_phase, d.effect))
            elif not crash_phase and "throughput" in acts and batches:
                out.append(LinkedSetting(key, d.source, d.baseline, d.failing, "throughput", d.effect))
    order = list(ACTS_ON)
    out.sort(key=lambda x: order.index(x.key) if x.key in order else len(order))
    return tuple(out)


# ---------------------------------------------------------------------------- custom allreduce
@dataclass(frozen=True)
class AllreduceState:
    """Custom allreduce in one run, as far as its log shows it."""

    disabled: bool
    forced: bool
    disabled_by_arg: bool
    reason: str | None
    notices: int
    forced_by: Mapping[str, str]
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class CustomAllreduce:
    """SGLang's custom allreduce in both runs, with the failing log's evidence that it was in use."""

    failing: AllreduceState
    baseline: AllreduceState | None
    #: Off in the baseline (its log says so) and in use in the failing run (its log says so).
    enabled_in_failing_only: bool
    in_crash_frames: bool
    crash_frames: tuple[Frame, ...]
    #: The failing run's TP size as its settings show it (None: not in the log).
    world_size: int | None
    #: world_size - 1: the peers each rank maps buffers of.
    peers: int | None
    #: IPC buffers each rank maps: two 8 MiB buffers per peer (SGLang's default), in GiB.
    ipc_gib_per_rank: float | None
    #: The failing log's lines that show custom allreduce in use.
    failing_evidence: tuple[Evidence, ...]


_TRUE_OFF = ("0", "", "false", "False")


def allreduce_state(run: RunSummary) -> AllreduceState:
    notes = run.notices.get("custom_ar_disabled", [])
    forced_by = {k: v for k, v in _env(run).items() if k.startswith("SGLANG_FORCE_CUSTOM_AR") and v not in _TRUE_OFF}
    disabled_arg = setting(run, "disable_custom_all_reduce")
    reason = None
    if notes:
        m = re.search(r"because (.*?)(\. To silence|$)", notes[0].text)
        reason = m.group(1) if m else notes[0].text
    evidence = [notice_ev(n) for n in notes[:8]]
    if forced_by:
        notices = [n for n in run.notices.get(FORCED_NOTICE, []) if any(k in (n.text or "") for k in forced_by)]
        evidence += [notice_ev(n) for n in notices[:4] + run.notices.get("launch_command", [])[:1]]
    forced = bool(forced_by)
    return AllreduceState((bool(notes) or disabled_arg is True) and not forced, forced, disabled_arg is True,
                          reason, len(notes), forced_by, tuple(evidence))


def _in_custom_ar(text: str) -> bool:
    """A frame of SGLang's custom allreduce (not NCCL's all_reduce, which every TP run calls)."""
    t = text.lower()
    return "custom_all_reduce" in t or "custom_allreduce" in t or "custom_ar" in t


def custom_ar(fail: RunSummary, base: RunSummary | None) -> CustomAllreduce:
    f = allreduce_state(fail)
    b = allreduce_state(base) if base else None
    crash = fail.crash
    frames = tuple(fr for fr in (crash.frames if crash else [])
                   if _in_custom_ar(fr.path or "") or _in_custom_ar(fr.func or ""))
    in_message = crash is not None and ("custom_all_reduce" in (crash.message or "")
                                        or "custom_all_reduce" in (crash.text or ""))
    failing_evidence = list(f.evidence) if f.forced else []
    if crash and (frames or in_message):
        failing_evidence += [e for e in ev_of({"file": fail.file, "line": crash.line,
                                               "rank": crash.first_rank, "text": crash.text})]
    tp = setting(fail, "tp_size")
    world = int(tp) if isinstance(tp, (int, float)) and not isinstance(tp, bool) and tp >= 1 else None
    return CustomAllreduce(
        failing=f, baseline=b,
        enabled_in_failing_only=bool(b and b.disabled and not f.disabled and failing_evidence),
        in_crash_frames=bool(frames or in_message), crash_frames=frames, world_size=world,
        peers=world - 1 if world else None,
        ipc_gib_per_rank=(world - 1) * 2 * 8 / 1024 if world and world > 1 else None,
        failing_evidence=tuple(failing_evidence))
