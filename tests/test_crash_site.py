"""Where a start-up crash is placed and how the ranks that raised are worded, from SGLang's text.

ModelRunner.initialize sets up the attention backend right after the KV pool ("Init memory pool
and attention backends"), before graph capture: a failure there is neither graph capture nor the
KV cache. Ranks that each print the same traceback failed alike: none of them followed another.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logforensics.pipeline import diagnose_files, summarize_run

BASELINE = """\
[2026-06-11 05:00:00] server_args=ServerArgs(model_path='zai-org/GLM-4.5-Air', tp_size=2, mem_fraction_static=0.85)
[2026-06-11 05:00:10 TP0] Load weight begin. avail mem=23.20 GB
[2026-06-11 05:00:10 TP1] Load weight begin. avail mem=23.20 GB
[2026-06-11 05:01:10 TP0] Load weight end. type=Glm4MoeForCausalLM, dtype=torch.float16, avail mem=4.10 GB, mem usage=19.10 GB.
[2026-06-11 05:01:10 TP1] Load weight end. type=Glm4MoeForCausalLM, dtype=torch.float16, avail mem=4.10 GB, mem usage=19.10 GB.
[2026-06-11 05:01:11 TP0] KV Cache is allocated. #tokens: 40000, K size: 1.40 GB, V size: 1.40 GB
[2026-06-11 05:01:11 TP1] KV Cache is allocated. #tokens: 40000, K size: 1.40 GB, V size: 1.40 GB
[2026-06-11 05:01:11 TP0] Memory pool end. avail mem=1.20 GB
[2026-06-11 05:01:11 TP1] Memory pool end. avail mem=1.20 GB
[2026-06-11 05:01:12 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=0.80 GB
[2026-06-11 05:01:12 TP1] Capture cuda graph begin. This can take up to several minutes. avail mem=0.80 GB
[2026-06-11 05:01:30 TP0] Capture cuda graph end. Time elapsed: 18.00 s. mem usage=0.30 GB. avail mem=0.50 GB.
[2026-06-11 05:01:30 TP1] Capture cuda graph end. Time elapsed: 18.00 s. mem usage=0.30 GB. avail mem=0.50 GB.
[2026-06-11 05:01:40] The server is fired up and ready to roll!
"""

START = """\
[2026-06-11 05:10:00] server_args=ServerArgs(model_path='zai-org/GLM-4.5-Air', tp_size=2, mem_fraction_static=0.85)
[2026-06-11 05:10:10 TP0] Load weight begin. avail mem=23.20 GB
[2026-06-11 05:10:10 TP1] Load weight begin. avail mem=23.20 GB
[2026-06-11 05:11:10 TP0] Load weight end. type=Glm4MoeForCausalLM, dtype=torch.float16, avail mem=4.10 GB, mem usage=19.10 GB.
[2026-06-11 05:11:10 TP1] Load weight end. type=Glm4MoeForCausalLM, dtype=torch.float16, avail mem=4.10 GB, mem usage=19.10 GB.
[2026-06-11 05:11:11 TP0] KV Cache is allocated. #tokens: 60000, K size: 1.80 GB, V size: 1.80 GB
[2026-06-11 05:11:11 TP1] KV Cache is allocated. #tokens: 60000, K size: 1.80 GB, V size: 1.80 GB
[2026-06-11 05:11:11 TP0] Memory pool end. avail mem=0.34 GB
"""

# What a log's tail keeps: TP1 went on to graph capture, TP0's last lines are its traceback.
TAIL = """\
[2026-06-11 05:11:58 TP1] Memory pool end. avail mem=0.49 GB
[2026-06-11 05:11:58 TP1] Capture cuda graph begin. This can take up to several minutes. avail mem=0.08 GB
"""

ATTENTION_OOM = """\
[2026-06-11 05:11:58 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 4025, in run_scheduler_process
    scheduler = Scheduler(
                ^^^^^^^^^^
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 535, in __init__
    self.initialize(pre_model_load_memory)
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 766, in initialize
    self.init_attention_backend()
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 2408, in init_attention_backend
    self.attn_backend = self._get_attention_backend()
                        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/sgl-workspace/sglang/python/sglang/srt/layers/attention/flashinfer_backend.py", line 202, in __init__
    global_workspace_buffer = torch.empty(
                              ^^^^^^^^^^^^
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 384.00 MiB. GPU 0 has a total capacity of 23.56 GiB of which 338.75 MiB is free. Including non-PyTorch memory, this process has 23.06 GiB memory in use. Of the allocated memory 22.33 GiB is allocated by PyTorch, and 210.78 MiB is reserved by PyTorch but unallocated.

[2026-06-11 05:11:58] Received sigquit from a child process. It usually means the child failed.
"""


def _diagnose(tmp_path: Path, failing: str):
    (tmp_path / "baseline.log").write_text(BASELINE, encoding="utf-8")
    (tmp_path / "failing.log").write_text(failing, encoding="utf-8")
    return diagnose_files(str(tmp_path / "failing.log"), str(tmp_path / "baseline.log"))


@pytest.mark.parametrize("before", [START, TAIL], ids=["whole-start-up", "tail"])
def test_an_attention_backend_failure_is_after_the_kv_pool_not_in_it(tmp_path: Path, before: str) -> None:
    d = _diagnose(tmp_path, before + ATTENTION_OOM)
    assert d.failing.crash is not None
    assert (d.failing.crash.first_rank, d.failing.crash.phase) == ("TP0", "kv_cache_alloc")
    # where the log shows TP0's 'Memory pool end', the failure came after it (real-pairs 037)
    where = "after kv_cache_alloc (Memory pool end, line 8), in init_attention_backend" if before == START \
        else "during kv_cache_alloc"
    assert f"{where}, in the attention backend (flashinfer_backend.py:202 in __init__): out of GPU memory" in d.verdict
    rules = {f.rule for f in d.findings}
    assert "OM01" not in rules, "no CUDA graph was being captured on TP0"
    assert "OM02" not in rules, "the KV pool was allocated; the attention backend's buffer was not"
    breakdown = next(f for f in d.findings if f.rule == "OM04")
    assert "flashinfer_backend.py:202 in __init__" in breakdown.explanation


KV_MANAGER = """\
[2026-06-11 05:11:58 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3160, in run_scheduler_process
    scheduler = Scheduler(
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 415, in __init__
    self.{step}()
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 980, in {step}
    {call}
  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/mooncake/conn.py", line 229, in init_engine
    self.engine = MooncakeTransferEngine(
RuntimeError: open: Address family not supported by protocol
"""


@pytest.mark.parametrize("step,call,where", [
    ("init_disaggregation", "self.disagg_prefill_bootstrap_queue = PrefillBootstrapQueue(",
     "in the scheduler's own start-up (init_disaggregation), after kv_cache_alloc"),
    # the constructor's call into its model worker: the worker's steps, not the scheduler's own
    ("init_model_worker", "self.tp_worker = TpModelWorker(", "after kv_cache_alloc (Memory pool end, line 8)"),
])
def test_a_failure_in_the_scheduler_s_own_set_up_is_after_the_phase_its_rank_reached(
        tmp_path: Path, step: str, call: str, where: str) -> None:
    """Scheduler.__init__ builds its model worker (weights, KV pool, graphs), then its own
    parts (PD's KV manager, ...): a traceback into one of those, after the rank's 'Memory pool
    end', is placed after the phase that rank reached, and is not the KV cache's failure."""
    d = _diagnose(tmp_path, START + KV_MANAGER.format(step=step, call=call))
    assert d.failing.crash is not None
    assert d.failing.crash.phase == ("kv_cache_alloc" if step == "init_disaggregation" else None)
    assert f"TP0 failed first, {where}" in d.verdict
    assert "OM02" not in {f.rule for f in d.findings}


def _keyerror(rank: str, line: int) -> str:
    return f"""\
[2026-05-25 17:42:26 {rank}] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3918, in run_scheduler_process
    scheduler = Scheduler(
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line {line}, in load_model
    self.model = self.loader.load_model(
  File "/sgl-workspace/sglang/python/sglang/srt/model_loader/loader.py", line 680, in load_weights_and_postprocess
    model.load_weights(weights)
  File "/sgl-workspace/sglang/python/sglang/srt/models/qwen3_5.py", line 1958, in load_weights
    param = params_dict[name_mapped]
            ~~~~~~~~~~~^^^^^^^^^^^^^
KeyError: 'model.layers.0.mlp.experts.w2_qweight'

"""


NCCL_AFTER = """\
[2026-05-25 17:42:27 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3918, in run_scheduler_process
    scheduler = Scheduler(
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 770, in load_model
    self.model = self.loader.load_model(
  File "/usr/local/lib/python3.12/dist-packages/torch/distributed/distributed_c10d.py", line 2806, in all_reduce
    work = group.allreduce([tensor], opts)
torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, remote process exited or there was a network error

"""

LOADING = """\
[2026-05-25 17:42:03] server_args=ServerArgs(model_path='mattbucci/Qwen3.5-28B-A3B-REAP-AWQ', tp_size=2, mem_fraction_static=0.85)
[2026-05-25 17:42:16 TP0] Load weight begin. avail mem=31.46 GB
[2026-05-25 17:42:16 TP1] Load weight begin. avail mem=31.46 GB
"""


def test_ranks_that_print_the_same_traceback_are_not_said_to_follow_the_first(tmp_path: Path) -> None:
    alike = _diagnose(tmp_path, LOADING + _keyerror("TP0", 770) + _keyerror("TP1", 770)
                      + "[2026-05-25 17:42:26] Received sigquit from a child process. It usually means the child failed.\n")
    first = next(f for f in alike.findings if f.rule == "CR01")
    assert "Ranks that failed, in order: TP0, TP1." in first.explanation
    assert "left the collective" not in first.explanation
    assert "Each printed the same KeyError traceback" in first.explanation
    # A rank that raised something else after the first keeps the usual reading.
    follows = _diagnose(tmp_path, LOADING + _keyerror("TP0", 770) + NCCL_AFTER)
    first = next(f for f in follows.findings if f.rule == "CR01")
    assert "Ranks that failed, in order: TP0, TP1." in first.explanation
    assert "The later ones usually fail because the first one left the collective." in first.explanation


TRACEBACK = """\
[2026-07-14 09:05:27 DP1 TP5 EP5] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/python/sglang/srt/managers/scheduler.py", line 5092, in run_scheduler_process
    scheduler.run_event_loop()
  File "/sgl/python/sglang/srt/disaggregation/prefill.py", line 521, in event_loop_normal_disagg_prefill
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
  File "/sgl/python/sglang/srt/mem_cache/memory_pool.py", line 85, in transfer
    raise RuntimeError(f"bad {x}")
torch.AcceleratorError: CUDA error: an illegal memory access was encountered
"""


@pytest.mark.parametrize("cut", [None, 240])
def test_a_traceback_flattened_onto_one_line_reads_as_the_traceback(tmp_path: Path, cut: int | None) -> None:
    """A traceback pasted into a thread with its line breaks lost (one line, frames and code
    run together) is the same crash as its lines: rank, phase from the frames, each frame
    with its code, the exception; cut short, the frames it has and no exception."""
    flat = " ".join(line.strip() for line in TRACEBACK.splitlines())
    paths = {}
    for name, text in (("lines", TRACEBACK), ("flat", "> " + flat[:cut] + "\n")):
        paths[name] = tmp_path / f"{name}.log"
        paths[name].write_text(text)
    whole = summarize_run([str(paths["lines"])]).crash
    one = summarize_run([str(paths["flat"])]).crash
    assert whole is not None and one is not None
    assert (one.first_rank, one.phase, one.line) == (whole.first_rank, whole.phase, 1) == ("DP1 TP5 EP5", "serving", 1)
    n = len(one.frames)
    assert [(f.path, f.line, f.func, f.code) for f in one.frames] == \
        [(f.path, f.line, f.func, f.code) for f in whole.frames][:n]
    if cut is None:
        assert n == 3 and (one.exception, one.message) == (whole.exception, whole.message) \
            == ("torch.AcceleratorError", "CUDA error: an illegal memory access was encountered")
    else:
        assert 0 < n < 3 and one.exception is None


def test_a_thread_dump_cited_as_the_crash_does_not_take_a_later_tracebacks_frames(tmp_path: Path) -> None:
    """faulthandler's threads with their header above the window, then a scheduler's traceback
    cut before its exception: the crash cited at the dump shows no frames of the other record
    (its own failing thread is not in the log); the traceback's own frames are its own."""
    dump = (
        'Thread 0x000075b8b5ffe6c0 (most recent call first):\n'
        '  File "/usr/lib/python3.12/threading.py", line 359 in wait\n'
        '  File "/usr/lib/python3.12/threading.py", line 1030 in _bootstrap\n'
        '\n'
        'Extension modules: numpy._core._multiarray_umath\n'
        '\n'
    )
    scheduler = (
        'Scheduler hit an exception:\n'
        'Traceback (most recent call last):\n'
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 3162, in run_scheduler_process\n'
        '    scheduler.event_loop_normal()\n'
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1111, in event_loop_normal\n'
        '    result = self.run_batch(batch)\n'
    )
    both, alone = tmp_path / "both.log", tmp_path / "alone.log"
    both.write_text(dump + scheduler)
    alone.write_text(scheduler)
    crash = summarize_run([str(both)]).crash
    assert crash is not None and (crash.line, crash.frames) == (1, [])
    own = summarize_run([str(alone)]).crash
    assert own is not None and [f.func for f in own.frames] == ["run_scheduler_process", "event_loop_normal"]


def test_a_segfault_handlers_banner_is_a_native_crash_with_its_stack(tmp_path: Path) -> None:
    """A fatal-signal handler's "!!!!!!! Segfault encountered !!!!!!!" and the native stack under it
    (innermost first, as frames of ``<unknown>``) are one native failure, cited at the banner; the
    parent's notice of the dead child right after it gives the exit code, and is no SIGQUIT."""
    log = tmp_path / "segv.log"
    log.write_text(
        "!!!!!!! Segfault encountered !!!!!!!\n"
        '  File "<unknown>", line 0, in ibv_destroy_qp\n'
        '  File "<unknown>", line 0, in mooncake::RdmaEndPoint::deconstruct()\n'
        "[2026-05-14 16:49:46] Subprocess scheduler_0 (pid=922727) crashed with exit code -11.\n")
    crash = summarize_run([str(log)]).crash
    assert crash is not None
    assert (crash.line, crash.end_line, crash.native, crash.exception, crash.exit_code, crash.sigquit_lines) \
        == (1, 3, True, None, -11, [])
    assert [f.func for f in crash.frames] == ["mooncake::RdmaEndPoint::deconstruct()", "ibv_destroy_qp"]


def test_a_schedulers_event_loop_in_a_parts_module_names_no_part() -> None:
    """PD disaggregation keeps its event loops in its own module; a loop only calls the batch that
    failed, so a failure deeper in the model is not said to be in PD disaggregation, while a
    failure in PD's own code is."""
    from logforensics.model.phases import component_of
    from logforensics.model.summary import Frame

    loop = Frame(path="/sgl/python/sglang/srt/disaggregation/decode.py", line=943,
                 func="event_loop_overlap_disagg_decode", code="result = self.run_batch(batch)")
    model = Frame(path="/sgl/python/sglang/srt/models/deepseek_v2.py", line=1200, func="forward_absorb_prepare",
                  code="q, k = fused_qk_rope_cat_and_cache_mla(")
    queue = Frame(path="/sgl/python/sglang/srt/disaggregation/decode.py", line=610, func="pop_transferred",
                  code="poll = poll_and_all_reduce(")
    assert component_of([loop, model]) is None
    assert component_of([loop, queue]) == "PD disaggregation (decode.py:610 in pop_transferred)"


WARMUP_FAILED = """\
[2026-05-20 08:46:41] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
[2026-05-20 08:46:42] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2826, in event_loop_overlap
    batch_result = self.run_batch(batch)
RuntimeError: BatchPrefillWithPagedKVCache failed
[2026-05-20 08:46:50] Initialization failed. warmup error: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/entrypoints/http_server.py", line 1200, in _execute_server_warmup
    res = requests.post(url + request_name, json=json_data, timeout=600)
requests.exceptions.ReadTimeout: HTTPConnectionPool(host='127.0.0.1', port=30000): Read timed out.
"""


def test_a_failure_in_the_event_loop_before_readiness_is_the_warmup_request_s(tmp_path: Path) -> None:
    """The launcher's warm-up request is the first batch the event loop serves: a failure there,
    in a server that never said it was ready, whose launcher then reports the warm-up failed, is
    said to be in that request (real-pairs 026); after readiness it is not."""
    d = _diagnose(tmp_path, WARMUP_FAILED)
    assert "failed first, in the launcher's warmup request (the event loop serving it; the server never said it " \
           "was ready)" in d.verdict
    ready = WARMUP_FAILED.replace("INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
                                  "The server is fired up and ready to roll!")
    assert "warmup request" not in _diagnose(tmp_path, ready).verdict
    # the launcher's report not in the log (real-pairs 031): no request answered yet, before readiness
    cut = WARMUP_FAILED.split("[2026-05-20 08:46:50] Initialization failed")[0]
    assert "failed first, before readiness, in the event loop with no generation request answered yet" \
        in _diagnose(tmp_path, cut).verdict


def test_a_request_handler_places_a_traceback_in_serving_whatever_it_runs() -> None:
    """A weight update (``update_weights_from_disk``) loads weights on a server that serves
    (real-unseen 1331): its traceback is in serving, though load_weights' frames are inside it,
    and a weight load at start-up stays in load_weights."""
    from logforensics.model.phases import phase_of_frames, phase_of_words

    update = [{"func": "update_weights_from_disk", "code": "model = model_load_weights(self.model, iter)"},
              {"func": "load_weights_and_postprocess", "code": "model.load_weights(weights)"},
              {"func": "load_weights", "code": "return InternLM2ForCausalLM.load_weights(self, weights)"}]
    assert phase_of_frames(update) == "serving"
    assert phase_of_frames(update[1:]) == "load_weights"
    assert phase_of_frames([{"func": "event_loop_normal", "code": ""}, *update[1:]]) == "load_weights"
    assert phase_of_words(["in update_weights_from_tensor", "load_weights"]) == "serving"


@pytest.mark.parametrize("runpy", ["/usr/lib/python3.10/runpy.py", "<frozen runpy>"])
def test_a_traceback_through_an_import_of_the_launcher_is_at_import(runpy: str) -> None:
    """Python's runpy frames (a file before 3.11, '<frozen runpy>' after) come before the
    launcher's module-level import: the failure happened importing, before any setting was
    printed; a call at module level after the imports is no import."""
    from logforensics.model.phases import importing
    from logforensics.model.records import Frame

    run = [Frame(path=runpy, line=196, func="_run_module_as_main", code=None),
           Frame(path=runpy, line=86, func="_run_code", code="exec(code, run_globals)")]
    launcher = "/sgl-workspace/sglang/python/sglang/launch_server.py"
    assert importing([*run, Frame(path=launcher, line=6, func="<module>",
                                  code="from sglang.srt.entrypoints.http_server import launch_server")])
    assert not importing([*run, Frame(path=launcher, line=27, func="<module>", code="run_server(server_args)")])


@pytest.mark.parametrize("path", ["sglang/python/sglang/srt/models/minicpm.py",
                                  "/usr/local/lib/python3.12/dist-packages/sglang/srt/models/qwen3.py"])
def test_a_headerless_frame_with_its_code_and_exception_on_its_line_is_the_crash(tmp_path: Path, path: str) -> None:
    """One frame pasted with its line breaks lost and no header above it (an inline code span:
    the frame, its source line and the exception line run together): the frame's function is
    its one word, the rest its code, and the exception line after it is the crash's; a model
    class's constructor runs where the loader builds the model, so the crash is in weight
    loading. The frame on its lines reads the same."""
    frame = f'  File "{path}", line 145, in __init__'
    code = "    self.rotary_emb.cos_sin_cache = self.rotary_emb._compute_cos_sin_cache()"
    exc = ("TypeError: Phi3LongRoPEScaledRotaryEmbedding._compute_cos_sin_cache() missing 3 required positional "
           "arguments: 'max_position_embeddings', 'rescale_factors', and 'mscale'")
    flat, lines = tmp_path / "flat.log", tmp_path / "lines.log"
    flat.write_text(f"{frame} {code.strip()} {exc}\n")
    lines.write_text(f"{frame}\n{code}\n{exc}\n")
    for log in (flat, lines):
        crash = summarize_run([str(log)]).crash
        assert crash is not None
        assert (crash.exception, crash.phase, crash.line) == ("TypeError", "load_weights", 1)
        assert crash.message.startswith("Phi3LongRoPEScaledRotaryEmbedding._compute_cos_sin_cache() missing 3")
        assert [(f.func, f.code) for f in crash.frames] == [("__init__", code.strip())]


def test_a_frame_whose_rest_is_code_alone_names_no_exception(tmp_path: Path) -> None:
    """A flattened frame with code and no exception line after it (``raise ValueError``: the
    class alone may be the code's) keeps the crash's exception unknown (cut), and the frame as
    it was read."""
    log = tmp_path / "f.log"
    log.write_text('  File "/sgl/python/sglang/srt/models/llama.py", line 9, in __init__ raise ValueError\n')
    crash = summarize_run([str(log)]).crash
    assert crash is not None and crash.exception is None
    assert [(f.func, f.code) for f in crash.frames] == [("__init__ raise ValueError", None)]


def test_the_tokenizer_managers_output_path_is_serving(tmp_path: Path) -> None:
    """TokenizerManager's loop over the detokenizer's outputs (handle_loop, _handle_batch_output,
    a request's logprobs in convert_logprob_style) runs only for served requests (real-unseen 1631)."""
    log = tmp_path / "t.log"
    log.write_text(
        "[2026-05-25 08:26:58] TokenizerManager hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl/python/sglang/srt/managers/tokenizer_manager.py", line 2055, in convert_logprob_style\n'
        "    self.add_logprob_to_meta_info(\n"
        "IndexError: list index out of range\n")
    crash = summarize_run([str(log)]).crash
    assert crash is not None and (crash.exception, crash.phase) == ("IndexError", "serving")


def test_a_kernel_launch_refused_before_the_exception_that_reports_it_is_the_first_fatal_record(tmp_path: Path) -> None:
    """Triton on an Ascend NPU prints the refused launch, then raises 'The Inner error is
    reported as above' (real-unseen 1632): the crash is cited at the launch's line, in its words,
    the exception after it kept."""
    log = tmp_path / "k.log"
    log.write_text(
        "_fused_gate_sigmoid_mul_add_kernel launch failed: because value 70218 for parameter coreDim is invalid. "
        "Expected value: less than or equal to 65535.\n\n"
        "RuntimeError: The Inner error is reported as above. The process exits for this inner error, and the "
        "current working operator name is _fused_gate_sigmoid_mul_add_kernel.\n")
    crash = summarize_run([str(log)]).crash
    assert crash is not None and crash.line == 1 and crash.exception == "RuntimeError"
    assert crash.first_message is not None
    assert crash.first_message.startswith("kernel _fused_gate_sigmoid_mul_add_kernel launch failed: because value 70218")


POOL_BUFFERS = """\
[2026-06-11 05:11:11 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 914, in initialize
    self.init_memory_pool(pre_model_load_memory)
  File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/memory_pool.py", line 1129, in _create_buffers
    torch.zeros(
{exception}
"""


@pytest.mark.parametrize("exception,om02", [
    # real-pairs 076: the pool sized, its buffers' fill has no kernel for the FP4 dtype
    ("NotImplementedError: \"fill_cuda\" not implemented for 'Float4_e2m1fn_x2'", False),
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", True),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
     "23.56 GiB of which 338.75 MiB is free.", True),
])
def test_only_a_failure_about_memory_where_the_pool_is_made_is_the_kv_cache_s_allocation(
        tmp_path: Path, exception: str, om02: bool) -> None:
    """OM02 frames a failure in kv_cache_alloc as SGLang's KV budget; an error of another kind there
    (a kernel the cache's dtype lacks) is not one: the verdict names the exception alone."""
    d = _diagnose(tmp_path, START + POOL_BUFFERS.format(exception=exception))
    assert d.failing.crash is not None and d.failing.crash.phase == "kv_cache_alloc"
    assert ("OM02" in {f.rule for f in d.findings}) == om02


CALLED_FROM_BACKEND = """\
[2026-06-11 05:11:20 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 1021, in run_once
    logits_output = forward(input_ids, forward_batch.positions, forward_batch)
  File "/sgl-workspace/sglang/python/sglang/srt/layers/attention/flashinfer_backend.py", line 989, in forward_decode
    forward_batch.token_to_kv_pool.set_kv_buffer(
  File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/memory_pool.py", line 1534, in _maybe_calibrate_global_scales
    raise RuntimeError(
RuntimeError: NVFP4 KV cache global scales must be calibrated before CUDA graph capture.
"""


def test_a_failure_in_code_an_optional_part_called_names_that_code_then_the_part(tmp_path: Path) -> None:
    """real-pairs 078: the attention backend wrote the KV pool, whose own check raised: the verdict
    says the failure was in the pool's code, called from the backend, not in the backend."""
    d = _diagnose(tmp_path, START + CALLED_FROM_BACKEND)
    assert ("in memory_pool.py:1534 in _maybe_calibrate_global_scales, called from the attention backend "
            "(flashinfer_backend.py:989 in forward_decode): RuntimeError") in d.verdict


def test_the_code_a_part_called_is_looked_for_in_that_part_s_link_of_a_chain() -> None:
    """A chain's later link (the scheduler's constructor raising its own exception) is not where the
    link that ran through the part failed: its innermost frame is the part's own there."""
    from logforensics.model.phases import failed_outside_part
    from logforensics.model.records import Frame

    def fr(path: str, func: str) -> Frame:
        return Frame(path=f"/x/python/sglang/srt/{path}", line=1, func=func, code=None)

    frames = [fr("layers/attention/flashinfer_backend.py", "call_begin_forward"),
              fr("managers/scheduler.py", "run_scheduler_process"), fr("managers/scheduler.py", "__init__")]
    assert failed_outside_part(frames, [1]) is None
    assert failed_outside_part(frames) == "scheduler.py:1 in __init__"  # read as one traceback
    assert failed_outside_part(frames[:1] + [fr("mem_cache/memory_pool.py", "set_kv_buffer")], [2]) \
        == "memory_pool.py:1 in set_kv_buffer"
