"""Which terminal of a grammar rule becomes which field: the declarations the planner applies.

A record's fields are named here, rule by rule, by the terminal they come from (its
name in ``grammars/sglang.lark``), never by a child's position in the parse tree. The
``n``-th token of a terminal the rule repeats is named by ``nth``. A terminal the record
does not have (an optional part of the rule) gives no field. ``test_grammar`` checks that
every terminal named here is one its rule can produce, so a renamed terminal fails a test
instead of silently dropping a field.

What cannot be declared (a field whose name depends on the text, a constant set by a
word, a kind chosen by the message) is written as a handler in ``planner.py`` or
``plan_fatal.py``; it runs after the declared fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lark import Token, Tree

from . import fatal, jobend
from . import values as v
from .values import Conv

Tokens = dict[str, list[Token]]


def tokens(tree: Tree) -> Tokens:
    """A rule's direct tokens grouped by terminal name, in order."""
    out: Tokens = {}
    for child in tree.children:
        if isinstance(child, Token):
            out.setdefault(child.type, []).append(child)
    return out


def span(tok: Token) -> tuple[int, int]:
    """A token's offsets in the record (the lexer always sets them; Lark types them optional)."""
    start, end = tok.start_pos, tok.end_pos
    if start is None or end is None:
        raise TypeError(f"terminal {tok.type!r} without a position")
    return start, end


@dataclass(frozen=True, slots=True)
class Take:
    """The ``nth`` token of ``terminal`` becomes the field ``name``, read by ``conv``.

    ``conv`` None: an int or a float as the token is written (``number_conv``). ``to_end``:
    the field runs from the token's start to the end of the record (a message whose
    punctuation the grammar does not keep as tokens).
    """

    terminal: str
    name: str
    conv: Conv | None
    nth: int = 0
    to_end: bool = False


@dataclass(frozen=True, slots=True)
class Rule:
    """A rule's declared fields and constants; ``generic``: then read its key/value items
    and its ``TEXT`` as ``message`` (the planner's generic walk)."""

    takes: tuple[Take, ...] = ()
    const: tuple[tuple[str, Any], ...] = ()
    generic: bool = False


def _rule(*takes: Take | tuple[Take, ...], generic: bool = False, **const: Any) -> Rule:
    flat: list[Take] = []
    for t in takes:
        flat.extend(t if isinstance(t, tuple) else (t,))
    return Rule(tuple(flat), tuple(const.items()), generic)


def _seq(terminal: str, names: tuple[str, ...], conv: Conv | None = None) -> tuple[Take, ...]:
    """The tokens of a repeated terminal, named in order of appearance."""
    return tuple(Take(terminal, name, conv, nth) for nth, name in enumerate(names))


def _end(terminal: str, name: str, conv: Conv = v.to_strip) -> Take:
    return Take(terminal, name, conv, to_end=True)


T = Take
_TB_FRAME = _rule(T("FPATH", "path", v.to_str), T("INT", "lineno", v.to_int), T("TEXT", "func", v.to_strip))
_NCCL_LIBRARY = _rule(T("NONSPACE", "path", v.to_str), generic=True)
_VERSION = _rule(T("VERSION", "version", v.to_str))
_CAPTURE = ("role", v.capture_role), ("graph", v.capture_graph), ("device", v.capture_device)

#: Grammar rule -> its declared fields. A rule not listed (and without a handler) is read
#: by the generic walk alone.
RULES: dict[str, Rule] = {
    # -- SGLang's own records (2.1 - 2.6 of sglang-log-formats.md)
    "server_args": _rule(T("TEXT", "raw", v.to_strip)),
    "warmup_skipped": _rule(_end("WARMUP_SKIPPED", "reason")),
    "warmup_begin": _rule(T("WARMUP_BEGIN", "mode", v.word(2))),
    "pd_warmup_answer": _rule(T("INT", "status", v.to_int)),  # 200: completed; any other: failed
    "dp_launch": _rule(_seq("INT", ("dp_rank", "base_gpu_id"), v.to_int)),
    "nccl_warmup": _rule(T("NCCL_WARMUP", "group", v.to_str), T("NUMBER", "elapsed_s", v.to_float), generic=True),
    "unbalanced_memory": _rule(_seq("SIGNED", ("min_avail_gib", "local_avail_gib", "threshold_gib"), v.to_float),
                               T("NUMBER", "factor", v.to_float)),
    "nccl_version": _VERSION,
    "nccl_version_native": _VERSION,
    "sglang_version_banner": _VERSION,
    "nccl_library": _NCCL_LIBRARY,
    "nccl_load_failed": _NCCL_LIBRARY,
    "custom_ar_disabled": _rule(T("CUSTOM_AR_DISABLED", "component", v.before(" is disabled")),
                                T("TEXT", "reason", v.to_strip)),
    "load_weight_end": _rule(_seq("NUMBER", ("elapsed_s", "capture_overlap_s", "startup_overlap_s")), generic=True),
    "kv_cache_alloc": _rule(T("KV_LABEL", "label", v.to_strip), generic=True),
    "swa_pool": _rule(generic=True),
    "swa_kv_pool": _rule(generic=True),
    "post_capture_kv": _rule(generic=True),
    "not_enough_memory": _rule(T("NUMBER", "mem_fraction_static", v.to_float)),
    "weights_no_room": _rule(_seq("NUMBER", ("mem_fraction_static", "min_mem_fraction_static", "minimum_viable")),
                             generic=True),
    "pool_no_room": _rule(T("POOL_NO_ROOM", "pool", v.before(" leaves no room")),
                          T("POOL_NO_ROOM", "cap_tokens", v.pool_cap(1)), T("POOL_NO_ROOM", "cap_gib", v.pool_cap(2))),
    "capture_begin": _rule(*(T("CAPTURE_BEGIN", n, c) for n, c in _CAPTURE), T("CAPTURE_STEP", "step", v.paren_int),
                           generic=True),
    "capture_end": _rule(*(T("CAPTURE_END", n, c) for n, c in _CAPTURE), T("CAPTURE_STEP", "step", v.paren_int),
                         generic=True),
    "capture_registered": _rule(T("INT", "addresses", v.to_int)),
    "deepgemm_warmup_memory": _rule(_seq("NUMBER", ("required_gib", "available_gib"), v.to_float)),
    "deepep_sms": _rule(T("INT", "sms", v.to_int)),
    "param_not_loaded": _rule(T("PARAM_NOT_LOADED", "param", v.param_name)),
    "host_kv_pool": _rule(T("NUMBER", "host_gb", v.to_float)),  # decimal GB (bytes / 1e9), as printed
    "dp_attention_adjust": _rule(T("CHUNK_SIZE", "chunked_prefill_size", v.to_int)),
    "attention_backend_default": _rule(T("ATTN_BACKEND", "backend", v.to_str)),
    "graph_disabled": _rule(T("GRAPH_DISABLED", "graph", v.word(1)), T("TEXT", "reason", v.to_strip)),
    "torch_compile": _rule(T("SHAPE", "shape", v.to_str), T("NUMBER", "elapsed_s", v.to_float),
                           T("INT", "graph_index", v.to_int), generic=True),
    "max_total_tokens_cap": _rule(T("INT", "max_total_tokens", v.to_int), T("SIGNED", "profiled_tokens", v.to_int)),
    "decode_batch": _rule(T("ITER", "iter", v.bracket_int), T("INT", "running_req", v.to_int), generic=True),
    "prefill_batch": _rule(T("ITER", "iter", v.bracket_int), T("INT", "mixed_running_req", v.to_int), generic=True),
    "retract": _rule(generic=True),
    "cache_flush": _rule(generic=True),
    "leak_message": _rule(T("LEAK_POOL", "pool", v.before(" memory leak")), generic=True),
    "warning_head": _rule(T("WARN_FILE", "path", v.to_str), T("INT", "lineno", v.to_int),
                          T("WARN_CATEGORY", "category", v.to_str)),
    "py_warning": _rule(generic=True),
    "tracker_exit": _rule(T("TRACKER_EXIT", "message", v.to_strip)),
    "basic_log": _rule(T("BASIC_LOG", "level", v.basic_log_level), T("BASIC_LOG", "logger", v.basic_log_name),
                       T("PY_LOG", "level", v.py_log_level), T("PY_LOG", "logger", v.py_log_name),
                       T("TEXT", "message", v.to_strip)),
    "exc_header": _rule(T("EXC_SOURCE", "source", v.exc_source), T("EXC_IN", "source", v.exc_source),
                        T("EXC_THREAD", "source", v.thread_source), T("EXC_CAUGHT", "source", v.caught_source),
                        T("EXC_PROCESS", "source", v.process_source), T("EXC_INIT_STATE", "source", v.init_state_source),
                        T("EXC_RAY_TASK", "source", v.ray_task_source),
                        T("EXC_NAME", "exception", v.to_str), T("TEXT", "message", v.to_strip)),
    "subprocess_crashed": _rule(T("PROC_NAME", "name", v.to_str), T("INT", "pid", v.to_int),
                                T("SIGNED", "exit_code", v.to_int), generic=True),
    "child_terminated": _rule(T("INT", "pid", v.to_int), T("SIGNED", "exit_code", v.to_int)),
    "crash_dump": _rule(T("TEXT", "folder", v.to_strip)),
    "shutdown": _rule(T("INT", "remaining_requests", v.to_int)),
    "bench_requests": _rule(T("INT", "successful_requests", v.to_int)),
    "bench_tokens": _rule(T("INT", "generated_tokens", v.to_int)),
    "batch_failed": _rule(T("INT", "requests", v.to_int)),
    "watchdog_timeout": _rule(T("WATCHDOG", "component", v.watchdog_component),
                              T("NUMBER", "watchdog_timeout_s", None), T("WORD", "soft", v.to_bool),
                              generic=True, family="sglang_watchdog"),
    "watchdog_debug": _rule(T("WATCHDOG_DEBUG", "component", v.word(0)), generic=True),
    "watchdog_detail": _rule(_end("WATCHDOG_DETAIL", "message")),
    "watchdog_body": _rule(_end("WATCHDOG_BODY", "message")),
    "pool_check": _rule(T("POOL_CHECK", "pool", v.pool_check_name), _seq("INT", ("total", "available", "evictable"),
                                                                      v.to_int)),
    "pyspy_dump": _rule(T("INT", "pid", v.to_int)),
    "pyspy_failed": _rule(T("INT", "pid", v.to_int), T("TEXT", "error", v.to_strip)),
    "slow_pass": _rule(T("SLOW_LABEL", "label", v.to_str), T("NUMBER", "took_ms", v.to_float),
                       T("NUMBER", "threshold_ms", v.to_float, nth=1)),
    "rank_divergence": _rule(T("INT", "events", v.to_int), T("HEX", "local_hash", v.to_str),
                             T("TEXT", "divergent_events", v.to_strip)),
    "consensus_enabled": _rule(),
    "kv_transfer_failed": _rule(T("KV_XFER_FAILED", "side", v.kv_side), T("KV_XFER_FAILED", "stage", v.kv_stage)),
    "pd_timeout": _rule(T("SIGNED", "bootstrap_room", v.to_int), generic=True),
    "health_check_failed": _rule(T("NUMBER", "timeout_s", None), _seq("CLOCK", ("tic_start", "last_heartbeat"), v.to_str),
                                 generic=True),
    "weights_ready": _rule(T("NUMBER", "elapsed_s", v.to_float)),
    "group_init_failed": _rule(T("TEXT", "message", v.to_strip)),
    "weights_not_ready": _rule(T("NUMBER", "timeout_s", None), T("WORD", "initial_weights_loaded", v.to_bool)),
    "device_mismatch": _rule(T("LEVEL_COLON", "level", v.strip_colon), _seq("INT", ("expected_gpu", "current_gpu"), v.to_int),
                             _end("CURRENT_DEVICE", "message")),
    # -- uvicorn and other loggers behind an SGLang prefix
    "http_access": _rule(T("LEVEL_COLON", "level", v.strip_colon), T("ADDR", "client", v.to_str),
                         T("CLIENT_ADDR", "client", v.to_str),
                         T("METHOD", "method", v.to_str), T("PATH", "path", v.to_str), T("INT", "status", v.to_int),
                         T("TEXT", "reason", v.to_strip)),
    "http_probe": _rule(T("LEVEL_COLON", "level", v.strip_colon), T("ADDR", "client", v.to_str),
                        T("CLIENT_ADDR", "client", v.to_str),
                        T("METHOD", "method", v.to_str), T("PROBE_PATH", "path", v.to_str), T("INT", "status", v.to_int),
                        T("TEXT", "reason", v.to_strip)),
    "web_access": _rule(T("CLF_HEAD", "client", v.first_word), T("METHOD", "method", v.to_str),
                        T("PATH", "path", v.to_str), T("INT", "status", v.to_int)),
    # the message starts at the first token after the level: a field keeps its first value
    "uvicorn_msg": _rule(T("LEVEL_COLON", "level", v.strip_colon), _end("UVICORN_PROCESS", "message"),
                         _end("UVICORN_RUNNING", "message"), _end("TEXT", "message"),
                         T("INT", "pid", v.to_int), T("NONSPACE", "url", v.to_str)),
    "level_message": _rule(T("LEVEL_WORD", "level", v.to_str), T("SRC_LOC", "source_loc", v.to_str),
                           T("LEVEL_TEXT", "message", v.to_strip)),
    # -- lines with no SGLang prefix
    "tb_frame": _TB_FRAME,
    "fh_frame": _TB_FRAME,
    "tb_chain": _rule(T("CHAIN", "chain_text", v.to_strip)),  # an exception's "chain" is the list of links
    "exc_line": _rule(T("EXC_NAME", "exception", v.to_str), T("TEXT", "message", v.to_strip)),
    "tqdm_bar": _rule(T("TQDM_DESC", "desc", v.tqdm_desc), T("TQDM_DESC", "bs", v.desc_number("bs")),
                      T("TQDM_DESC", "num_tokens", v.desc_number("num_tokens")),
                      T("TQDM_DESC", "avail_gib", v.desc_avail), T("TQDM_BODY", "progress", v.tqdm_progress)),
    "c10d_log": _rule(T("C10D_HEAD", "head", v.c10d_head)),  # "[rank1]:" is head["global_rank"], not the rank
    "pyspy_process": _rule(T("PYSPY_PROCESS", "pid", v.word_int(1)), T("TEXT", "title", v.to_strip)),
    "pyspy_python": _rule(T("PYSPY_PYTHON", "python", v.word(1))),
    "fh_timeout": _rule(),
    "nccl_debug": _rule(T("NCCL_HOST", "host", v.to_str), _seq("INT", ("pid", "tid", "gpu"), v.to_int),
                        T("NCCL_LEVEL", "level", v.to_str), T("NCCL_SRC", "source_loc", v.to_str), generic=True),
    "vllm_log": _rule(T("VLLM_HEAD", "level", v.word(0)), T("SRC_LOC", "source_loc", v.to_str), generic=True),
    "glog": _rule(T("GLOG_HEAD", "level", v.first_char), T("ANY_LOC", "source_loc", v.to_str), generic=True),
    "std_log": _rule(T("STD_LEVEL", "level", v.word(0)), generic=True),
    "router_log": _rule(T("ROUTER_HEAD", "level", v.router_level), T("ROUTER_HEAD", "module", v.router_module),
                       T("RS_LOC", "source_loc", v.to_str), generic=True),
    "launch_command": _rule(T("LAUNCH", "command", v.to_strip)),
    "export_env": _rule(T("ENV_NAME", "name", v.to_str), T("TEXT", "value", v.to_strip)),
    "blank": _rule(),
    "ctrl_c": _rule(),
    "indented": _rule(),
    "tb_caret": _rule(),
    # -- fatal records, timeouts and launchers (handlers in plan_fatal.py)
    "child_failed": _rule(T("SIGNED", "exit_code", v.to_int), T("INT", "pid", v.to_int)),
    "cpp_frame": _rule(generic=True),
    "cpp_raised": _rule(T("CPP_RAISED", "message", v.to_strip)),
    "scheduler_died": _rule(T("INT", "died_rank", v.to_int), T("SIGNED", "exit_code", v.to_int)),
    # the figures are decomposed once the record is whole (assemble.py)
    "oom_message": _rule(_end("OOM_LEAD", "what", v.oom_what), _end("OOM_LEAD", "message")),
    "device_assert": _rule(*(_end("DEVICE_ASSERT", n, fatal.device_assert(n))
                             for n in ("source_loc", "kernel", "block", "thread", "assertion"))),
    "hsa_error": _rule(T("HSA_STATUS", "hsa_status", v.to_str), T("TEXT", "message", v.after_colon)),
    "hsa_fault": _rule(*(_end("HSA_FAULT", n, fatal.hsa(n)) for n in ("hsa_node", "agent_handle", "address", "reason"))),
    "cann_error": _rule(T("CANN_CODE", "code", v.to_str), T("TEXT", "message", v.after_colon)),
    "kernel_launch_failed": _rule(T("KERNEL_LAUNCH", "kernel", v.first_word), T("TEXT", "message", v.to_strip)),
    "cuda_error": _rule(T("CUDA_ERROR", "api", v.first_word), T("TEXT", "message", v.to_strip)),
    "jax_weights_loaded": _rule(),
    "kv_budget_reserve": _rule(T("NUMBER", "reserve_gib", v.to_float), T("TEXT", "purpose", v.to_strip)),
    "jax_kv_tokens": _rule(T("INT", "max_total_num_tokens", v.to_int)),
    "jax_kv_buffers": _rule(T("INT", "layers", v.to_int)),
    "jax_precompile": _rule(T("JAX_PRECOMPILE", "stage", v.strip_brackets), T("TEXT", "message", v.to_strip)),
    "viewer_stamp": _rule(),
    "glibc_abort": _rule(T("GLIBC_ABORT", "message", v.to_strip)),
    "runpy_error": _rule(T("RUNPY_PROG", "prog", v.runpy_prog), T("TEXT", "message", v.to_strip)),
    "argparse_error": _rule(T("ARGPARSE_PROG", "prog", v.argparse_prog), T("TEXT", "message", v.to_strip)),
    "native_signal": _rule(T("INT", "signal", v.to_int), T("TEXT", "message", v.to_strip)),
    "nvshmem_exit": _rule(T("TEXT", "message", v.to_strip)),
    "pcg_failed": _rule(T("TEXT", "message", v.to_strip)),
    "job_end": _rule(*(_end("JOB_END", n, jobend.field(n)) for n in ("source", "cause", "exit_code", "job", "host"))),
    "shell_time": _rule(T("SHELL_TIME", "clock", v.word(0)), T("SHELL_TIME", "seconds", v.shell_seconds)),
    "model_import_ignored": _rule(T("MODEL_MODULE", "module", v.to_str), T("TEXT", "message", v.to_strip)),
    "kv_cache_dtype": _rule(T("KV_DTYPE", "dtype", v.to_str)),
    "sampling_defaults": _rule(T("TEXT", "message", v.to_strip)),
    "crash_diagnostics": _rule(T("CRASH_DIAG", "message", v.to_strip)),
    "kill_tree": _rule(_seq("INT", ("parent_pid", "pid"), v.to_int), T("WORD", "include_parent", v.to_bool)),
    "gloo_connected": _rule(_seq("INT", ("group_rank", "peers"), v.to_int)),
    "gloo_not_connected": _rule(T("INT", "group_rank", v.to_int), T("TEXT", "message", v.to_strip)),
    "lib_log": _rule(T("LIB_TAG", "lib", v.strip_brackets), T("TEXT", "message", v.to_strip)),
    "ray_dedup": _rule(T("RAY_DEDUP", "count", v.dedup_count)),
    "pyspy_thread": _rule(T("PYSPY_THREAD", "thread_id", v.pyspy_thread_id),
                          T("PYSPY_THREAD", "state", v.pyspy_state), T("TEXT", "name", v.strip_quotes)),
    "pyspy_frame": _rule(T("PYSPY_FRAME", "func", v.word(0)), T("PYSPY_FRAME", "path", v.pyspy_path),
                         T("PYSPY_FRAME", "lineno", v.pyspy_lineno)),
    "kv_pool_init": _rule(T("KV_POOL_INIT", "pool", v.word(1)), generic=True),
    "gpustack_log": _rule(T("GPUSTACK_HEAD", "level", v.gpustack_level), T("TEXT", "message", v.to_strip)),
    "env_notice": _rule(T("ENV_NOTICE", "name", v.env_name), T("ENV_NOTICE", "value", v.env_value),
                        T("TEXT", "message", v.after_colon)),
}
