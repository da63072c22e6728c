"""What a diff concludes must stay inside what the runs allow: a different model is no setting
to set back; a launcher that failed parsing its arguments started nothing, so it has no crash
dump and no rank, and its phase is the launch; a log that ends after a phase's end line is past
that phase, not in it. The logs are SGLang's own lines (launch_server.py, server_args.py,
model_runner.py, scheduler.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from logforensics.model.stops import stop_place
from logforensics.pipeline import diagnose_files, summarize_file


def _args(model: str, mem: float = 0.85, graphs_off: bool = False) -> str:
    return (f"[2026-05-25 17:29:48] server_args=ServerArgs(model_path='{model}', tokenizer_path='{model}', "
            f"tokenizer_mode='auto', served_model_name='{model}', tp_size=2, mem_fraction_static={mem}, "
            f"context_length=262144, disable_cuda_graph={graphs_off}, random_seed=1)\n")


START = """\
[2026-05-25 17:29:51 TP0] Init torch distributed begin.
[2026-05-25 17:29:51 TP1] Init torch distributed begin.
[2026-05-25 17:29:53 TP0] Init torch distributed ends. elapsed=2.80 s, mem usage=0.30 GB
[2026-05-25 17:29:53 TP1] Init torch distributed ends. elapsed=2.81 s, mem usage=0.30 GB
[2026-05-25 17:29:54 TP0] Load weight begin. avail mem=31.49 GB
[2026-05-25 17:29:54 TP1] Load weight begin. avail mem=31.49 GB
"""

LOADED = """\
[2026-05-25 17:30:00 TP1] Load weight end. elapsed=6.09 s, type=MistralForCausalLM, quant=awq, bits=4, avail mem=18.66 GB, mem usage=12.83 GB.
[2026-05-25 17:30:00 TP0] Load weight end. elapsed=6.15 s, type=MistralForCausalLM, quant=awq, bits=4, avail mem=18.65 GB, mem usage=12.84 GB.
[2026-05-25 17:30:00 TP1] KV Cache is allocated. #tokens: 365084, K size: 6.96 GB, V size: 6.96 GB
[2026-05-25 17:30:00 TP1] Memory pool end. avail mem=3.65 GB
[2026-05-25 17:30:00 TP0] KV Cache is allocated. #tokens: 365084, K size: 6.96 GB, V size: 6.96 GB
[2026-05-25 17:30:00 TP0] Memory pool end. avail mem=3.64 GB
[2026-05-25 17:30:01 TP0] Loading tokenizer for /models/m directly as TokenizersBackend
[2026-05-25 17:30:01 TP1] Loading tokenizer for /models/m directly as TokenizersBackend
"""

READY = """\
[2026-05-25 17:30:05 TP0] max_total_num_tokens=365084, chunked_prefill_size=2048, max_prefill_tokens=16384, max_running_requests=2048, context_len=131072, available_gpu_mem=3.51 GB
[2026-05-25 17:30:06] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
[2026-05-25 17:30:09] The server is fired up and ready to roll!
"""

KEYERROR = """\
[2026-05-25 17:42:26 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2547, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 470, in load_model
    self.model = get_model(
  File "/sgl/python/sglang/srt/models/qwen3_5.py", line 1958, in load_weights
    param = params_dict[name]
KeyError: 'model.layers.0.mlp.experts.w2_qweight'

[2026-05-25 17:42:27] Received sigquit from a child process. It usually means the child failed.
"""

#: the launcher's own traceback: no stamp, no rank, nothing started (launch_server.py -> server_args.py)
LAUNCHER_VALUEERROR = """\
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "<frozen runpy>", line 88, in _run_code
  File "/sgl/python/sglang/launch_server.py", line 66, in <module>
    server_args = prepare_server_args(sys.argv[1:])
                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/sgl/python/sglang/srt/server_args.py", line 7757, in prepare_server_args
    return ServerArgs.from_cli_args(raw_args)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/sgl/python/sglang/srt/server_args.py", line 7141, in from_cli_args
    return cls(**{attr: getattr(args, attr) for attr in attrs})
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "<string>", line 384, in __init__
  File "/sgl/python/sglang/srt/server_args.py", line 929, in __post_init__
    self._handle_model_specific_adjustments()
  File "/sgl/python/sglang/srt/server_args.py", line 2568, in _handle_mamba_radix_cache
    raise ValueError(
ValueError: Speculative decoding for Qwen3_5ForConditionalGeneration is not compatible with radix cache when using --mamba-scheduler-strategy no_buffer.
"""

SERVING_ERROR = """\
[2026-05-25 17:31:00 TP0] Decode batch, #running-req: 4, #token: 2048, token usage: 0.01, cuda graph: False, gen throughput (token/s): 80.00, #queue-req: 0
[2026-05-25 17:31:01 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2547, in run_scheduler_process
    scheduler.event_loop_normal()
  File "/sgl/python/sglang/srt/managers/scheduler.py", line 770, in event_loop_normal
    result = self.run_batch(batch)
RuntimeError: CUDA error: an illegal memory access was encountered

[2026-05-25 17:31:02] Received sigquit from a child process. It usually means the child failed.
"""


#: the line of TP0's "Memory pool end" (the last rank to print it) in args + START + LOADED
LOADED_POOL_END = 1 + len(START.splitlines()) + 6


def _diff(tmp_path: Path, baseline: str, failing: str):
    (tmp_path / "baseline.log").write_text(baseline, encoding="utf-8")
    (tmp_path / "failing.log").write_text(failing, encoding="utf-8")
    return diagnose_files(str(tmp_path / "failing.log"), str(tmp_path / "baseline.log"))


@pytest.mark.parametrize("mem", [0.85, 0.80], ids=["model-only", "model-and-mem-fraction"])
def test_another_model_is_no_setting_to_set_back(tmp_path: Path, mem: float) -> None:
    d = _diff(tmp_path, _args("/models/Qwen3.5-27B-AWQ") + START + LOADED + READY,
              _args("/models/Qwen3.5-28B-A3B-REAP-AWQ", mem) + START + KEYERROR)
    assert d.failing.outcome == "crashed" and d.facts.setup.differs
    step = d.conclusion.next_step or ""
    assert not step.startswith("set back"), step
    assert "differ in the model" in step and "no setting difference can be compared as the cause" in step
    assert "a working run of the same model" in step
    # the paths that follow the model changed with it: they are the model, not other settings to try
    assert not any(k in step for k in ("model_path", "tokenizer_path", "served_model_name")), step
    assert ("mem_fraction_static" in step) == (mem != 0.85), step


def test_a_launcher_failure_is_in_the_launch_phase_before_any_rank(tmp_path: Path) -> None:
    (tmp_path / "launch.log").write_text(LAUNCHER_VALUEERROR, encoding="utf-8")
    s = summarize_file(tmp_path / "launch.log")
    assert s.crash is not None and s.crash.exception == "ValueError"
    assert (s.crash.phase, s.crash.first_rank) == ("launch", None)
    assert s.phase_reached == {}, "no rank went through the launch"
    d = _diff(tmp_path, _args("/models/m") + START + LOADED + READY, LAUNCHER_VALUEERROR)
    assert "unknown phase" not in d.verdict
    assert ("the launcher failed first, before init_distributed (while parsing the server arguments: "
            "server_args.py:7141 in from_cli_args): ValueError") in d.verdict, d.verdict


def test_a_crash_dump_is_asked_for_only_when_the_server_served(tmp_path: Path) -> None:
    base = _args("/models/m") + START + LOADED + READY
    launcher = _diff(tmp_path, base, LAUNCHER_VALUEERROR).conclusion
    assert not any("crash dump" in c for c in launcher.collect), launcher.collect
    assert launcher.collect[0].startswith("the launch command"), launcher.collect
    # it failed before printing server_args: the start of its log holds none
    assert not any("server_args): the settings are not in this one" in c for c in launcher.collect)
    assert launcher.next_step is not None and launcher.next_step.startswith("collect the launch command")
    startup = _diff(tmp_path, base, _args("/models/m") + START + KEYERROR).conclusion
    assert not any("crash dump" in c for c in startup.collect), startup.collect
    serving = _diff(tmp_path, base, _args("/models/m") + START + LOADED + READY + SERVING_ERROR).conclusion
    assert any("crash dump" in c for c in serving.collect), serving.collect


@pytest.mark.parametrize(("graphs_off", "then"), [(True, "warmup"), (False, "cuda_graph_capture")])
def test_a_log_that_ends_after_memory_pool_end_stops_after_the_kv_pool(tmp_path: Path, graphs_off: bool,
                                                                       then: str) -> None:
    args = _args("/models/m", graphs_off=graphs_off)
    d = _diff(tmp_path, args + START + LOADED + READY, args + START + LOADED)
    assert d.failing.outcome == "incomplete"
    place = f"after kv_cache_alloc (Memory pool end, failing.log:{LOADED_POOL_END}), before {then}"
    assert f"(the log stops at line {len((args + START + LOADED).splitlines())}, {place})" in d.verdict, d.verdict
    assert "during kv_cache_alloc" not in d.verdict
    assert any(place in c for c in d.conclusion.collect), d.conclusion.collect



def test_a_run_stopped_before_readiness_is_said_stopped_and_no_rest_of_its_log_is_asked_for(tmp_path: Path) -> None:
    """SIGTERM during the start-up: the log did not just stop, the server was stopped, so the
    verdict says where, and the rest of the log is not what would tell more."""
    args = _args("/models/m")
    stop = "[2026-05-25 17:35:00] SIGTERM received. signum=None frame=None. Draining requests and shutting down...\n"
    failing = args + START + stop
    d = _diff(tmp_path, args + START + LOADED + READY, failing)
    assert d.failing.outcome == "incomplete" and d.failing.stopped is not None
    assert f"(stopped at line {len(failing.splitlines())}, before readiness, during load_weights)" in d.verdict, d.verdict
    assert not any("rest of the log" in c for c in d.conclusion.collect), d.conclusion.collect


def test_a_log_that_ends_inside_a_phase_stops_during_it(tmp_path: Path) -> None:
    (tmp_path / "run.log").write_text(_args("/models/m") + START, encoding="utf-8")
    s = summarize_file(tmp_path / "run.log")
    assert s.outcome == "incomplete"
    assert stop_place(s) == "during load_weights"
    # a rank that printed its end line, beside one that did not, is not past the phase
    (tmp_path / "run.log").write_text(_args("/models/m") + START + LOADED.splitlines(keepends=True)[0],
                                      encoding="utf-8")
    assert stop_place(summarize_file(tmp_path / "run.log")) == "during load_weights"
    (tmp_path / "run.log").write_text(_args("/models/m") + START + "".join(LOADED.splitlines(keepends=True)[:2]),
                                      encoding="utf-8")
    assert stop_place(summarize_file(tmp_path / "run.log")) == "after load_weights (Load weight end, line 9), " \
                                                               "before kv_cache_alloc"


def test_a_budget_with_terms_only_one_log_shows_says_how_many_were_compared(tmp_path: Path) -> None:
    """The failing run died loading weights: it has no free memory after weights, no KV pool and
    no capture, so 'no term moved' is about the terms both logs show, and the title says so."""
    d = _diff(tmp_path, _args("/models/Qwen3.5-27B-AWQ") + START + LOADED + READY,
              _args("/models/Qwen3.5-28B-A3B-REAP-AWQ") + START + KEYERROR)
    mem04 = next(f for f in d.findings if f.rule == "MEM04")
    assert "no term moved by more than 0.05 GiB (both logs show 3 of its 8 terms)" in mem04.title, mem04.title


CUT_TRACEBACK = """\
[2024-10-22 06:31:49 TP0] Memory pool end. avail mem=8.38 GB
[2024-10-22 06:31:49 TP0] Capture cuda graph begin. This can take up to several minutes.
[2024-10-22 06:31:49 TP0] Traceback (most recent call last):
  File "/usr/lib/python3.10/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 162, in __init__
    self.capture()
  File "/usr/lib/python3.10/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 212, in capture
"""


def test_a_traceback_cut_before_its_exception_line_is_not_said_to_have_none(tmp_path: Path) -> None:
    """A paste that stops inside a Python traceback had an exception: the log does not show
    it, which is not 'no Python exception'; a C++ abort still has none."""
    (tmp_path / "cut.log").write_text(CUT_TRACEBACK, encoding="utf-8")
    d = diagnose_files(str(tmp_path / "cut.log"), None)
    assert "a traceback whose exception is not in this log (cut)" in d.verdict, d.verdict
    assert "no Python exception" not in d.verdict
    cr01 = next(f for f in d.findings if f.rule == "CR01")
    assert "no Python exception" not in cr01.title, cr01.title
    (tmp_path / "abort.log").write_text(
        "[19:01:01 TP0] Init nccl begin.\n[19:01:01 TP0] Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:307 "
        "'peer access is not supported between these two devices'\n", encoding="utf-8")
    d = diagnose_files(str(tmp_path / "abort.log"), None)
    assert "a traceback whose exception is not in this log" not in d.verdict, d.verdict
