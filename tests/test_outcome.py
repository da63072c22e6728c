"""What a run's outcome may say, on logs built from real SGLang text.

Each case is text from a real log (the excerpts of fixtures/real, or lines quoted from
real logs that are not in this repository), cut where pastes are cut. The outcome must
rest on what the lines show: a cut traceback's exception is not in the log, a watchdog
timeout is a hang, a rank that went on after an error did not crash, a rank is named
only when a line names it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logforensics import native
from logforensics.diagnose.crash import without_exception
from logforensics.ingest import LiveRun
from logforensics.model.run import RunSummary
from logforensics.model.stops import stop_place
from logforensics.pipeline import summarize_file

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real"


def summarize(text: str) -> RunSummary:
    run = LiveRun("case.log")
    run.feed(text.encode())
    run.close()
    return run.summary()


def test_a_traceback_cut_in_its_header_is_a_crash_whose_exception_is_not_in_the_log() -> None:
    s = summarize("[TP2 PP0] Scheduler hit an exception: Traceback (m\n")
    assert s.outcome == "crashed"
    assert s.crash is not None and s.crash.first_rank == "TP2 PP0" and s.crash.exception is None
    assert "not in this log" in s.outcome_reason and "sigquit" not in s.outcome_reason


@pytest.mark.parametrize("path", sorted(REAL.glob("*.log")), ids=lambda p: p.name[:3])
def test_no_crash_is_called_sigquit_unless_the_log_has_one(path: Path) -> None:
    from logforensics import summarize_file

    s = summarize_file(path)
    if "sigquit" in s.outcome_reason.lower():
        assert s.notices.get("sigquit"), s.outcome_reason


C10D_PREFIXED_ABORTS = (  # 019's lines, with the [rankN]: prefix torch puts on each rank's stderr
    "[19:01:01 TP0] Init nccl begin.\n"
    "[19:01:01 TP1] Init nccl begin.\n"
    "[rank0]: Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:307 'peer access is not supported between "
    "these two devices'\n"
    "[rank1]: Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:307 'peer access is not supported between "
    "these two devices'\n"
)


def test_native_aborts_under_torch_rank_prefixes_name_their_tp_ranks_and_phase() -> None:
    s = summarize(C10D_PREFIXED_ABORTS)
    assert s.outcome == "crashed"
    assert s.crash is not None and s.crash.ranks == ["TP0", "TP1"]
    assert s.crash.phase == "init_distributed"
    assert s.ranks == ["TP0", "TP1"]  # torch's rank0/rank1 are these ranks, not two more


def test_torch_rank_prefixes_alone_are_the_ranks() -> None:
    s = summarize(C10D_PREFIXED_ABORTS.split("\n", 2)[2])
    assert s.crash is not None and s.crash.ranks == ["rank0", "rank1"]


OVERLAP_THREAD = (
    "[2025-04-11 15:03:19 TP0] TpModelWorkerClient hit an exception: Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/tp_worker_overlap_thread.py", line 112, '
    "in forward_thread_func\n"
    "    self.forward_thread_func_()\n"
)


def test_the_overlap_threads_forward_loop_is_serving() -> None:
    s = summarize(OVERLAP_THREAD)
    assert s.crash is not None and s.crash.phase == "serving"


def test_an_oom_message_outside_a_traceback_is_an_error_not_a_crash() -> None:
    s = summarize("[TP1] Failed to initialize lk_moe: CUDA out of memory. Tried to allocate 24.00 MiB\n")
    assert s.outcome != "crashed" and s.crash is None
    assert [(e.rank, e.kind) for e in s.errors] == [("TP1", "oom_message")]
    assert s.errors[0].oom.tried_gib == pytest.approx(24 / 1024)


WENT_ON = (
    "[2026-03-02 08:41:17 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2651, in run_scheduler_process\n'
    "    scheduler.event_loop_overlap()\n"
    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    "[2026-03-02 08:41:18 TP0] Decode batch, #running-req: 9, #token: 30879, token usage: 0.02, cuda graph: True, "
    "gen throughput (token/s): 893.49, #queue-req: 0\n"
)


def test_a_rank_that_went_on_after_its_traceback_did_not_crash() -> None:
    s = summarize(WENT_ON)
    assert s.outcome == "ready" and s.crash is None
    assert [(e.rank, e.exception) for e in s.errors] == [("TP0", "RuntimeError")]
    stopped = summarize(WENT_ON.rsplit("[2026", 1)[0])
    assert stopped.outcome == "crashed" and not stopped.errors


def test_a_repeat_of_an_earlier_line_is_not_a_sign_of_life() -> None:
    """Ray prints a de-duplicated line after a traceback with its original stamp."""
    s = summarize(WENT_ON.rsplit("[2026", 1)[0]
                  + "[2026-03-02 08:41:17 TP0] Init torch distributed begin. [repeated 3x across cluster]\n")
    assert s.outcome == "crashed" and not s.errors


NEGATIVE_PROFILE = "".join(
    f"[2025-03-01 14:03:07 DP{i} TP0] max_total_tokens=100000 is larger than the profiled value -561981. "
    "Use the profiled value instead.\n" for i in range(8))


def test_a_negative_profiled_kv_budget_places_every_rank_and_is_kept() -> None:
    s = summarize(NEGATIVE_PROFILE)
    assert s.phase_reached == {f"DP{i} TP0": "kv_cache_alloc" for i in range(8)}
    assert {m.profiled_max_tokens for m in s.memory.values()} == {-561981}


def test_a_watchdog_timeout_is_a_hang() -> None:
    s = summarize((REAL / "101-2node-dp-attn-mtp-pyspy-dump-watchdog-timeout-exit-131.log").read_text())
    assert s.outcome == "hung" and s.hang is not None and s.hang.ranks == ["DP0 TP1"]


def test_the_median_of_a_few_values_is_one_of_them() -> None:
    from logforensics.model.stats import Sketch

    sk = Sketch()
    sk.extend([445.01, 446.45, 445.73])
    assert sk.to_dict()["median"] == 445.73 and sk.to_dict()["max"] == 446.45


def test_a_non_positive_kv_budget_is_a_finding_of_its_own() -> None:
    from logforensics.diagnose.engine import evaluate
    from logforensics.diagnose.rulespec import load_rules

    rules = load_rules([])
    found = evaluate(rules, summarize(NEGATIVE_PROFILE), None).findings
    mem05 = [f for f in found if f.rule == "MEM05"]
    assert mem05 and "cannot start" in mem05[0].title and "-561981" in mem05[0].title
    assert len(mem05[0].evidence) == 8
    positive = NEGATIVE_PROFILE.replace("-561981", "171552")
    assert not [f for f in evaluate(rules, summarize(positive), None).findings if f.rule == "MEM05"]


# -- a ready server stopped by its operator ------------------------------------------------
# The lines are SGLang's own strings: the tokenizer manager's SIGTERM handler and drain
# (``SignalHandler``), utils/watchdog.py's SubprocessWatchdog, the running-phase SIGQUIT
# handler, uvicorn's shutdown, and multiprocessing's resource tracker.
SERVING = (
    "[2026-09-20 15:20:01] The server is fired up and ready to roll!\n"
    "[2026-09-20 15:21:00 TP0] Decode batch, #running-req: 4, #token: 2048, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 310.55, #queue-req: 0\n"
)
SIGTERM = "[2026-09-20 15:33:22] SIGTERM received. signum=None frame=None. Draining requests and shutting down...\n"
DRAIN = ("[2026-09-20 15:33:26] Gracefully exiting... Remaining number of requests 0. "
         "Remaining requests remaining_rids=[].\n")
CHILD_TERM = ("[2026-09-20 15:33:22] Subprocess scheduler_0 (pid=168915) crashed with exit code -15. "
              "Triggering SIGQUIT for cleanup...\n")
PARENT_QUIT = "[2026-09-20 15:33:22] SIGQUIT received. signum=None, frame=None. It usually means one child failed.\n"
TRACKER = ("/usr/lib/python3.12/multiprocessing/resource_tracker.py:279: UserWarning: resource_tracker: There appear "
           "to be 1 leaked shared_memory objects to clean up at shutdown\n")
UVICORN_DOWN = ("[2026-09-20 15:33:22] INFO:     Shutting down\n"
                "[2026-09-20 15:33:22] INFO:     Waiting for application shutdown.\n"
                "[2026-09-20 15:33:22] INFO:     Application shutdown complete.\n"
                "[2026-09-20 15:33:22] INFO:     Finished server process [168800]\n")
CTRL_C = ("Traceback (most recent call last):\n"
          '  File "/usr/lib/python3.12/asyncio/runners.py", line 118, in run\n'
          "    return self._loop.run_until_complete(task)\n"
          "KeyboardInterrupt\n")
SCHEDULER_CRASH = ("[2026-09-20 15:30:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
                   '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2547, in run_scheduler_process\n'
                   "    scheduler.event_loop_overlap()\n"
                   "RuntimeError: CUDA error: an illegal memory access was encountered\n")


@pytest.mark.parametrize("stop", [SIGTERM + CHILD_TERM + PARENT_QUIT + DRAIN + TRACKER,
                                  UVICORN_DOWN + CHILD_TERM + PARENT_QUIT,
                                  CHILD_TERM + PARENT_QUIT,
                                  CTRL_C + UVICORN_DOWN],
                         ids=["sigterm-handler", "uvicorn", "child-sigterm", "ctrl-c"])
def test_a_ready_server_stopped_without_a_failure_before_it_is_ready_and_stopped(stop: str) -> None:
    s = summarize(SERVING + stop)
    assert s.outcome == "ready", s.outcome_reason
    assert s.crash is None
    first = len(SERVING.splitlines()) + 1
    assert s.stopped is not None and s.stopped.line == first
    assert f"stopped at line {first}" in s.outcome_reason
    assert [e.line for e in s.stopped.evidence] == sorted({e.line for e in s.stopped.evidence})
    assert "stopped" in s.to_dict() and RunSummary.from_dict(s.to_dict()) == s


def test_a_failure_before_the_stop_is_a_crash() -> None:
    s = summarize(SERVING + SCHEDULER_CRASH + SIGTERM + CHILD_TERM + PARENT_QUIT)
    assert s.outcome == "crashed" and s.stopped is None
    assert s.crash is not None and s.crash.exception == "RuntimeError" and s.crash.line == len(SERVING.splitlines()) + 1


@pytest.mark.parametrize("code", [-9, 1, -6])
def test_a_child_ended_by_another_signal_or_an_error_is_a_crash(code: int) -> None:
    child = CHILD_TERM.replace("-15", str(code))
    s = summarize(SERVING + child + PARENT_QUIT)
    assert s.outcome == "crashed" and s.stopped is None


LOADING = "[2026-09-20 15:20:01 TP0] Load weight begin. avail mem=78.50 GB\n"
#: engine.py's sigchld_handler from 2025: os.waitpid's status (15: ended by SIGTERM)
CHILD_STATUS = "[2026-09-20 15:33:22] Child process unexpectedly failed with exitcode={}. pid=212396\n"
WRAPPER_CUT = ("Traceback (most recent call last):\n"
               '  File "/opt/venv/lib/python3.12/site-packages/typer/main.py", line 341, in __call__\n'
               "    raise e\n")


@pytest.mark.parametrize("stop", [SIGTERM + CHILD_TERM, SIGTERM + CHILD_STATUS.format(15) + WRAPPER_CUT],
                         ids=["child-sigterm", "child-status-then-wrapper-traceback"])
def test_a_stop_before_the_server_was_ready_is_a_stop_not_a_crash(stop: str) -> None:
    """Stopped while it started (a pod deleted during loading): not ready, and what fails
    after the signal is the stop's, not a crash the log does not show."""
    s = summarize(LOADING + stop)
    assert s.outcome == "incomplete" and s.crash is None, s.outcome_reason
    assert s.stopped is not None and s.stopped.line == 2
    assert "stopped at line 2, with no readiness or failure before it in this log" in s.outcome_reason


def test_a_failure_before_a_stop_during_start_up_is_a_crash() -> None:
    s = summarize(LOADING + SCHEDULER_CRASH + SIGTERM + CHILD_TERM)
    assert s.outcome == "crashed" and s.stopped is None


@pytest.mark.parametrize("status,outcome", [(15, "ready"), (2, "ready"), (131, "crashed"), (256, "crashed")])
def test_the_launchers_wait_status_says_which_child_a_stop_signal_ended(status: int, outcome: str) -> None:
    s = summarize(SERVING + CHILD_STATUS.format(status))
    assert s.outcome == outcome, s.outcome_reason
    assert (s.stopped is not None) == (outcome == "ready")


def test_what_fails_after_the_stop_is_an_error_logged_during_it() -> None:
    s = summarize(SERVING + SIGTERM + SCHEDULER_CRASH.replace("15:30:00", "15:33:23") + PARENT_QUIT)
    assert s.outcome == "ready" and s.stopped is not None
    assert [e.line for e in s.errors] == [len(SERVING.splitlines()) + 2]


def test_a_stopped_baseline_is_a_baseline_that_reached_ready(tmp_path: Path) -> None:
    from logforensics.pipeline import diagnose_files

    base = tmp_path / "baseline.log"
    base.write_text(SERVING + SIGTERM + CHILD_TERM + PARENT_QUIT)
    fail = tmp_path / "failing.log"
    fail.write_text(SERVING + SCHEDULER_CRASH)
    report = diagnose_files(str(fail), str(base))
    assert report.baseline is not None and report.baseline.outcome == "ready"
    assert report.failing.outcome == "crashed"
    assert "did not reach ready" not in report.verdict and "RuntimeError" in report.verdict


# -- --debug-mode: a failed batch is aborted and the scheduler goes on (SGLang's debug-mode text)
DEBUG_FAILED = ("[2026-09-01 10:02:00] Batch forward failed with 3 request(s) in flight. --debug-mode is on; aborting "
                "the batch's requests and resuming the event loop instead of tearing down the process.\n"
                "Traceback (most recent call last):\n"
                '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1287, in event_loop_normal\n'
                "    result = self.run_batch(batch)\n"
                "RuntimeError: my bug\n"
                "\n")
DISCARDED = "[2026-09-01 10:02:00] Discarded the failed batch (aborted rids: ['abc', 'def']); resuming the event loop.\n"


def test_a_batch_discarded_by_debug_mode_is_an_error_not_a_crash() -> None:
    s = summarize(SERVING + DEBUG_FAILED + DISCARDED)
    assert s.outcome == "ready" and s.crash is None, s.outcome_reason
    assert [(e.line, e.exception) for e in s.errors] == [(len(SERVING.splitlines()) + 2, "RuntimeError")]
    assert s.notices["batch_discarded"][0].line == len((SERVING + DEBUG_FAILED).splitlines()) + 1


def test_a_debug_mode_traceback_whose_batch_the_log_does_not_show_discarded_is_a_crash() -> None:
    s = summarize(SERVING + DEBUG_FAILED)
    assert s.outcome == "crashed" and s.crash is not None and s.crash.exception == "RuntimeError"


def test_a_kernel_library_s_cuda_error_print_ends_the_rank_without_a_traceback() -> None:
    """FlashInfer's FLASHINFER_CUDA_CALL prints "CUDA Error: <cudaGetErrorString> (<code>) <file>: line N at
    function <call>" and returns; the process then ends with no Python traceback."""
    text = ("[2026-01-01 10:00:10 TP0] Capture cuda graph begin. This can take up to several minutes. "
            "avail mem=20.00 GB\n"
            "CUDA Error: no kernel image is available for execution on the device (209) /opt/flashinfer/include/"
            "flashinfer/attention/prefill.cuh: line 2330 at function cudaFuncSetAttribute(kernel, "
            "cudaFuncAttributeMaxDynamicSharedMemorySize, smem_size)\n")
    s = summarize(text)
    assert s.outcome == "crashed" and s.crash is not None and s.crash.line == 2
    assert "no kernel image is available" in s.outcome_reason


def test_2024_batch_lines_without_lead_words_are_serving() -> None:
    """v0.1.x - v0.2.x printed "new fill batch. #seq: ..." and a decode line that starts with
    "#running-req:", without stamps: a log of them served."""
    s = summarize("GPU: 0 new fill batch. #seq: 7. #cached_token: 1541. #new_token: 4. #remaining_req: 0. "
                  "#running_req: 0. tree_cache_hit_rate: 12.50%.\n"
                  "#running-req: 1, #token: 38, token usage: 0.00, gen throughput (token/s): 22.81, #queue-req: 0\n")
    assert s.outcome == "ready" and "served batches" in s.outcome_reason
    assert s.throughput.decode_gen_tok_s.count == 1


def test_a_cann_error_takes_the_rank_of_the_torch_record_that_carried_its_code() -> None:
    """torch_npu logs "[rank0]:[W530 ...] Warning: EZ9999: Inner Error!" and then CANN's own
    "EZ9999: [PID: N] ..." lines, which name no rank."""
    text = ("[2025-05-30 17:44:00 TP0] Load weight begin. avail mem=60.50 GB\n"
            "[2025-05-30 17:44:00 TP1] Load weight begin. avail mem=60.50 GB\n"
            "[rank1]:[W530 17:44:20.013492199 compiler_depend.ts:57] Warning: EZ9999: Inner Error!\n"
            "EZ9999: [PID: 21632] 2025-05-30-17:44:16.563.100 The error from device(chipId:4, dieId:0), serial number "
            "is 625, there is an aivec error exception, core id is 34, error code = 0\n")
    s = summarize(text)
    assert s.outcome == "crashed" and s.crash is not None and s.crash.first_rank == "TP1"
    far = summarize(text.replace("Inner Error!\n", "Inner Error!\n" + "[2025-05-30 17:44:21 TP0] x\n" * 4))
    assert far.crash is not None and far.crash.first_rank is None  # too far from it to be its rank's


# A rank's start-up traceback cut before its frames name a phase, while the other ranks print
# their own init_distributed records (SGLang's text, as in sglang issue #3889).
CUT_INIT = """\
[2025-02-26 12:01:56 TP3] sglang is using nccl==2.21.5
[2025-02-26 12:01:56 TP5] sglang is using nccl==2.21.5
[2025-02-26 12:01:56 TP2] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1816, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 240, in __init__
    self.tp_worker = TpWorkerClass(
"""


def test_other_ranks_start_up_records_do_not_place_a_rank_that_printed_none() -> None:
    s = summarize(CUT_INIT)
    assert s.outcome == "crashed" and s.crash is not None and s.crash.first_rank == "TP2"
    assert s.crash.phase is None, "TP2 printed no start-up record; its frames stop before a phase"
    assert "TP2" not in s.phase_reached
    assert s.phase_reached == {"TP3": "init_distributed", "TP5": "init_distributed"}


def test_a_rank_that_printed_none_during_serving_is_placed_in_serving() -> None:
    """Serving is logged by one rank for all: another rank's cut traceback is still in it."""
    s = summarize("[2025-02-26 12:01:56 TP0] Decode batch. #running-req: 2, #token: 4078, token usage: 0.00, "
                  "gen throughput (token/s): 447.31, #queue-req: 0\n" + CUT_INIT.split("\n", 2)[2])
    assert s.crash is not None and s.crash.first_rank == "TP2" and s.crash.phase == "serving"


# torch's NCCL watchdog: the tail of one dump of the watchdog thread's C++ stack, then the
# terminate of the DistBackendError whose what() is the collective timeout (sglang issue #1693).
WATCHDOG_TERMINATE = """\
frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10c (0x7f3b6e7236fc in /usr/local/lib/python3.10/dist-packages/torch/lib/libtorch_cuda.so)
frame #4: <unknown function> + 0xd6df4 (0x7f3bca9d5df4 in /usr/lib/x86_64-linux-gnu/libstdc++.so.6)
frame #6: clone + 0x43 (0x7f3c750b0353 in /usr/lib/x86_64-linux-gnu/libc.so.6)

terminate called after throwing an instance of 'c10::DistBackendError'
  what():  [PG 3 Rank 5] Process group watchdog thread terminated with exception: [Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9141, OpType=_ALLGATHER_BASE, NumelIn=19008, NumelOut=152064, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.
Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3b6d41df86 in /usr/local/lib/python3.10/dist-packages/torch/lib/libc10.so)
"""


def test_the_watchdogs_own_cpp_report_of_a_collective_timeout_is_a_hang_of_the_rank_it_names() -> None:
    s = summarize(WATCHDOG_TERMINATE)
    assert s.outcome == "hung", s.outcome_reason
    assert s.hang is not None and s.hang.first_line == 6 and s.hang.ranks == ["rank5"]


def test_a_cpp_terminate_that_is_not_the_watchdogs_is_still_a_crash() -> None:
    text = WATCHDOG_TERMINATE.replace("c10d::ProcessGroupNCCL::ncclCommWatchdog()", "at::native::foo()")
    s = summarize(text.split("\n\nterminate")[0] + "\n\nterminate called after throwing an instance of "
                  "'c10::Error'\n  what():  CUDA error: an illegal memory access was encountered\n")
    assert s.outcome == "crashed", s.outcome_reason


_ASGI_TAIL = (
    '  File "/usr/local/lib/python3.10/dist-packages/starlette/responses.py", line 281, in __call__\n'
    "    await wrap(partial(self.listen_for_disconnect, receive))\n"
    '  File "/usr/local/lib/python3.10/dist-packages/uvicorn/protocols/http/h11_impl.py", line 537, in receive\n'
    "    await self.message_event.wait()\n"
    '  File "/usr/lib/python3.10/asyncio/locks.py", line 214, in wait\n'
    "    await fut\n"
    "asyncio.exceptions.CancelledError\n"
)


def test_a_traceback_wholly_inside_the_http_server_is_one_requests_error_not_a_crash() -> None:
    """Starlette's and uvicorn's frames only (uvicorn logs "Exception in ASGI application" and
    goes on): an error of one request, in ``errors``, not the server's end."""
    s = summarize(_ASGI_TAIL)
    assert s.outcome == "incomplete" and s.crash is None
    [err] = (e.to_dict() for e in s.errors)
    assert (err["line"], err["source"], err["exception"]) == (1, "http_request", "asyncio.exceptions.CancelledError")


def test_an_http_layer_traceback_cut_before_its_exception_in_an_environment_named_sglang_is_no_crash() -> None:
    """uvicorn's run_asgi down to starlette's middleware, cut before the exception line, from a
    conda environment named ``sglang``: the directory's name is not SGLang's package, and the
    traceback is still one request's (with its exception line it is an error, as above)."""
    env = "/home/user/miniconda3/envs/sglang/lib/python3.10/site-packages"
    text = ("Traceback (most recent call last):\n"
            f'  File "{env}/uvicorn/protocols/http/httptools_impl.py", line 409, in run_asgi\n'
            "    result = await app(  # type: ignore[func-returns-value]\n"
            f'  File "{env}/starlette/middleware/errors.py", line 165, in __call__\n'
            "    await self.app(scope, receive, _send)\n")
    s = summarize(text)
    assert s.outcome == "incomplete" and s.crash is None, s.outcome_reason
    [err] = (e.to_dict() for e in s.errors)
    assert (err["line"], err["source"], err["exception"]) == (1, "http_request", None)
    s = summarize(text.replace(f"{env}/starlette/middleware/errors.py",
                               f"{env}/sglang/srt/managers/tokenizer_manager.py").replace("in run_asgi", "in main"))
    assert s.outcome == "crashed" and s.crash is not None


def test_a_traceback_through_a_route_handler_is_one_requests_but_the_tokenizer_loop_is_a_crash() -> None:
    """A frame of SGLang's route handler (http_server.py's generate_request) below uvicorn's:
    one request's coroutine, which the HTTP server logs and goes on from (real-unseen 735); the
    tokenizer manager's own loop, which no request runs, is the server's."""
    text = ('  File "/sgl-workspace/sglang/python/sglang/srt/entrypoints/http_server.py", line 470, in generate_request\n'
            "    ret = await _global_state.tokenizer_manager.generate_request(obj, request).__anext__()\n") + _ASGI_TAIL
    s = summarize(text)
    assert s.outcome == "incomplete" and s.crash is None
    assert [e.source for e in s.errors] == ["http_request"]
    loop = ('  File "/sgl-workspace/sglang/python/sglang/srt/managers/tokenizer_manager.py", line 1388, in handle_loop\n'
            "    await self._result_dispatcher(recv_obj)\n") + _ASGI_TAIL
    s = summarize(loop)
    assert s.outcome == "crashed" and s.crash is not None


_PCG_ADVICE = ("Piecewise CUDA Graph is enabled by default as an experimental feature.\n"
               "To work around this error, add --disable-piecewise-cuda-graph to your launch command.\n"
               "Please report this issue at https://github.com/sgl-project/sglang/issues/new/choose\n")


def test_a_piecewise_graph_failure_at_start_up_is_its_ranks_first_fatal_record_in_capture() -> None:
    """The runner logs "Piecewise CUDA Graph failed with error: ..." and its advice, then the
    rank raises: the record names the rank, the line and (nothing else placing it) the phase."""
    s = summarize("[2026-06-10 13:08:34 TP7] Piecewise CUDA Graph failed with error: 'TcPiecewiseForwardContext' "
                  "object has no attribute 'num_tokens'\n" + _PCG_ADVICE)
    assert s.outcome == "crashed" and s.crash is not None
    assert (s.crash.line, s.crash.first_rank, s.crash.phase, s.crash.exception) == (1, "TP7", "cuda_graph_capture", None)
    assert "piecewise CUDA graph failed: 'TcPiecewiseForwardContext'" in s.outcome_reason
    assert s.coverage.lines_unrecognised == 0


def test_a_piecewise_graph_failure_while_serving_keeps_the_serving_phase_its_frames_show() -> None:
    s = summarize("[2026-05-22 04:54:32 TP6] Piecewise CUDA Graph failed with error: Tensor match failed\n" + _PCG_ADVICE
                  + "[2026-05-22 04:54:32 TP6] Scheduler hit an exception: Traceback (most recent call last):\n"
                  '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 3811, in run_scheduler_process\n'
                  "    scheduler.run_event_loop()\n"
                  '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1567, in event_loop_overlap\n')
    assert s.crash is not None and (s.crash.line, s.crash.phase, s.crash.ranks) == (1, "serving", ["TP6"])


def test_a_stamp_replaced_by_a_word_keeps_the_rank_and_the_record() -> None:
    s = summarize("[timestamp DP3 TP3] Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, token usage: 0.00, "
                  "#running-req: 0, #queue-req: 17, input throughput (token/s): 1118.05, \n")
    assert s.outcome == "ready" and s.phase_reached == {"DP3 TP3": "serving"}


# SGLang's alloc_token_slots: logger.error(msg), then raise RuntimeError(msg)
_KV_ALLOC = """[2026-01-05 06:12:40 TP0] Decode batch, #running-req: 167, #token: 3100, token usage: 0.97, gen throughput (token/s): 812.50, #queue-req: 88
[2026-01-05 06:12:41 TP0] Decode out of memory. Try to lower your batch size.
Try to allocate 168 tokens.
Available tokens: 3200 (available_size=3200 + evictable_size=0)

[2026-01-05 06:12:41 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/srt/managers/scheduler.py", line 2229, in run_scheduler_process
    scheduler.event_loop_overlap()
"""


@pytest.mark.parametrize("lead", ["Decode out of memory.", "Prefill out of memory.", "Out of memory."])
def test_the_kv_allocators_logged_error_is_the_crashs_first_record(lead: str) -> None:
    """Each form SGLang has printed (``Decode``/``Prefill`` before 2025, then one form)."""
    s = summarize(_KV_ALLOC.replace("Decode out of memory.", lead))
    assert s.outcome == "crashed" and s.crash is not None
    assert (s.crash.line, s.crash.first_rank, s.crash.phase) == (2, "TP0", "serving")
    assert s.outcome_reason == f"{lead} Try to lower your batch size. on TP0 at line 2"


def test_a_rank_that_serves_after_the_kv_allocators_error_did_not_crash() -> None:
    went_on = _KV_ALLOC.split("\n\n")[0] + "\n" + _KV_ALLOC.splitlines()[0].replace("06:12:40", "06:12:45") + "\n"
    s = summarize(went_on)
    assert s.outcome == "ready" and s.crash is None
    assert [(e.line, e.rank) for e in s.errors] == [(2, "TP0")]


_DRAINING = """[2026-07-02 14:10:00] The server is fired up and ready to roll!
[2026-07-02 14:16:14] SIGTERM received. signum=None frame=None. Draining requests and shutting down...
[2026-07-02 14:16:15 TP0] Decode batch, #running-req: 10, #token: 3048, token usage: 0.20, gen throughput (token/s): 644.66, #queue-req: 0
[2026-07-02 14:16:15] Gracefully exiting... Remaining number of requests 10. Remaining requests remaining_rids=['a0354f00'].
[2026-07-02 14:16:16 TP0] Decode batch, #running-req: 10, #token: 3060, token usage: 0.20, gen throughput (token/s): 1360.73, #queue-req: 0
"""


def test_a_server_draining_its_requests_after_sigterm_stopped_where_the_signal_came() -> None:
    """SGLang's SIGTERM handler drains the requests it holds: the scheduler goes on decoding
    after the notice, which is still the stop."""
    s = summarize(_DRAINING)
    assert s.outcome == "ready" and s.crash is None
    assert s.stopped is not None and s.stopped.line == 2
    assert s.outcome_reason.endswith("stopped at line 2, with no failure before it "
                                     "(draining its requests: batches go on to line 5)")


@pytest.mark.parametrize("values,p10,median,p90", [
    ([644.66, 1360.73], 644.66, 644.66, 1360.73),   # two records: p90 is the larger (the round-9 case)
    ([3.0, 1.0, 2.0], 1.0, 2.0, 3.0),
    ([float(v) for v in range(1, 31)], 3.0, 15.0, 27.0),  # 0.1 * 30 is 3.0000000000000004
])
def test_quantiles_are_the_nearest_rank_on_few_values_and_many(values: list[float], p10: float, median: float,
                                                               p90: float) -> None:
    """The value with at least q of the values at or below it, exact while the values are few
    and from the buckets (1% relative error) once they are many."""
    from logforensics.model.stats import Sketch

    few, many = Sketch(), Sketch()
    few.extend(values)
    many.extend(values * 600)  # more than the exact values kept: the buckets answer
    assert [few.quantile(q) for q in (0.1, 0.5, 0.9)] == [p10, median, p90]
    for q, want in ((0.1, p10), (0.5, median), (0.9, p90)):
        assert many.quantile(q) == pytest.approx(want, rel=0.011)


_TRACKER = ("/usr/lib/python3.10/multiprocessing/resource_tracker.py:224: UserWarning: resource_tracker: "
            "There appear to be 8 leaked semaphore objects to clean up at shutdown\n"
            "  warnings.warn('resource_tracker: There appear to be %d '\n")


def test_a_log_ending_in_the_resource_trackers_warning_says_its_process_ended_and_no_more() -> None:
    """Python's resource_tracker warns of leaked objects when the process that started it has
    ended: the process ended there; what ended it (a kill, the OOM killer) is not in the log."""
    ready = summarize(_DRAINING.splitlines(keepends=True)[0] + _DRAINING.splitlines(keepends=True)[2] + _TRACKER)
    assert ready.outcome == "ready" and ready.stopped is None and ready.crash is None
    assert ready.outcome_reason == ("server ready at line 1; its process ended at line 3 (Python's resource_tracker "
                                    "cleaning up at shutdown), with no stop signal or failure before it in this log")
    loading = summarize("[2026-05-17 10:00:00 TP0] Load weight begin. avail mem=78.50 GB\n" + _TRACKER)
    assert loading.outcome == "incomplete"
    assert loading.outcome_reason.startswith("the log stops at line 3 without readiness or failure; its process "
                                             "ended at line 2")
    stopped = summarize(_DRAINING + _TRACKER)  # a stop signal before it: the stop says it
    assert stopped.stopped is not None and "resource_tracker" not in stopped.outcome_reason


def test_a_rank_silent_for_minutes_before_its_traceback_is_said_so() -> None:
    """A rank that printed no stamped record for 60 s or more before its failure (a collective
    or a transfer timing out waits so): the crash keeps how long, and since which stamp."""
    batch = "[2025-05-29 02:40:36 TP0] Prefill batch, #new-seq: 1, #new-token: 6145, #cached-token: 0, token usage: 0.01, #running-req: 0, #queue-req: 0\n"
    crash = ("[2025-05-29 02:52:38 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
             '  File "/sgl/srt/managers/scheduler.py", line 2229, in run_scheduler_process\n'
             "RuntimeError: DeepEP error: CPU recv timeout\n")
    s = summarize(batch + crash)
    assert s.crash is not None and s.crash.quiet_before is not None
    assert (s.crash.quiet_before.seconds, s.crash.quiet_before.ts) == (722.0, "2025-05-29T02:40:36")
    soon = summarize(batch + crash.replace("02:52:38", "02:41:30"))
    assert soon.crash is not None and soon.crash.quiet_before is None


def test_the_scheduler_watchdog_places_its_rank_in_serving_the_tokenizers_does_not() -> None:
    """SGLang's scheduler watchdog fires only with a batch in flight (``cur_batch`` set), and
    its dump of that batch shows it: the rank was serving. The TokenizerManager's watchdog
    also fires while the server starts."""
    s = summarize("[2025-10-29 11:25:58 TP3] Watchdog timeout (self.watchdog_timeout=300)\n"
                  "[2025-07-11 17:40:14 DP1 TP5] self.cur_batch.batch_size()=1, self.cur_batch.reqs=[Req(rid=8159)], \n")
    assert s.outcome == "hung" and s.phase_reached == {"TP3": "serving", "DP1 TP5": "serving"}
    t = summarize("[2026-07-01 10:00:00] TokenizerManager watchdog timeout (self.watchdog_timeout=300)\n")
    assert "serving" not in t.phase_reached.values()


def test_a_threads_traceback_is_an_error_the_process_went_on_from() -> None:
    """Python reports an exception that ended a thread ("Exception in thread NAME:", then its
    traceback): the thread ended, not the process, so it is an error, not a crash."""
    s = summarize("Exception in thread Thread-4 (watchdog_thread):\n"
                  "Traceback (most recent call last):\n"
                  '  File "/usr/lib/python3.12/threading.py", line 1073, in _bootstrap_inner\n'
                  "    self.run()\n"
                  "KeyError: 'get_token_info'\n")
    assert s.outcome == "incomplete" and s.crash is None
    assert [(e.line, e.exception) for e in s.errors] == [(1, "KeyError")]


def test_an_npu_out_of_memory_is_said_of_the_npu() -> None:
    """torch_npu's 'NPU out of memory. Tried to allocate ... (NPU 0; ...)': the device is the
    NPU, never CUDA or 'GPU'; a message that names no device names none."""
    from logforensics.read.oom import decompose_oom

    npu = decompose_oom("RuntimeError", "NPU out of memory. Tried to allocate 98.71 GiB (NPU 0; 60.96 GiB total "
                                        "capacity; 25.03 GiB already allocated; 35.47 GiB free)")
    assert npu is not None and (npu["device"], npu["gpu"], npu["tried_gib"]) == ("NPU", 0, 98.71)
    hip = decompose_oom("torch.OutOfMemoryError", "HIP out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
                                                  "capacity of 191.98 GiB of which 1.00 GiB is free.")
    assert hip is not None and (hip["device"], hip["gpu"]) == ("HIP", 1)
    unnamed = decompose_oom("torch.OutOfMemoryError", "")
    assert unnamed is not None and unnamed["device"] is None


ALLOC_WARNING = ("[rank0]:[W916 21:56:50.616938528 CUDACachingAllocator.cpp:3933] memory allocation failed with OOM "
                 "on device 0 while trying to allocate 113246208 bytes (free: 16187392, total: 25296044032).\n")


def test_the_allocators_warning_of_a_failed_allocation_is_an_error_logged_with_its_figures() -> None:
    """c10's allocator warns when an allocation fails and its caller may recover (torch's
    ``[W...]`` record, sizes in bytes): an error the rank logged, with the figures in GiB,
    not the run's end; the server that serves after it is ready."""
    s = summarize(SERVING + ALLOC_WARNING + SERVING)
    assert s.outcome == "ready" and s.crash is None
    (err,) = [e for e in s.errors if e.oom]
    assert err.rank == "rank0" and err.oom is not None
    assert (err.oom.gpu, err.oom.tried_gib * 2**30, err.oom.free_gib * 2**30, err.oom.total_gib * 2**30) \
        == (0, 113246208, 16187392, 25296044032)


# A terminal's Ctrl-C echo glued to what the interrupted process printed next (real-unseen 359's
# first lines; the paste that follows is the DetokenizerManager's traceback, cut).
CTRL_C = (
    "^CProcess Process-2:\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap\n'
    "    self.run()\n"
)


def test_a_stop_says_the_requests_its_last_batch_line_shows_running() -> None:
    """A SIGTERM after a decode batch with requests running (#running-req: 4) cut them short,
    unless batches go on after it (the server drains them): the stop says so, with the line;
    a last batch with none running, nothing."""
    s = summarize(SERVING + SIGTERM)
    assert s.outcome == "ready" and s.stopped is not None
    assert s.outcome_reason.endswith("stopped at line 3, with no failure before it "
                                     "(4 requests running at the last batch line before it, line 2)")
    idle = summarize(SERVING.replace("#running-req: 4", "#running-req: 0") + SIGTERM)
    assert idle.outcome_reason.endswith("stopped at line 3, with no failure before it")


def test_a_processs_keyboardinterrupt_after_the_stop_is_the_stops_not_an_error() -> None:
    """uvicorn's 'Shutting down' after serving is the stop; the detokenizer's KeyboardInterrupt
    traceback after it is that process's report of the same interrupt (real-unseen 803), no
    error logged; another exception after the stop is one (what failed on the way down)."""
    shutdown = "[2026-09-20 15:33:22] INFO:     Shutting down\n"
    interrupt = ("Process Process-2:\nTraceback (most recent call last):\n"
                 '  File "/sgl/python/sglang/srt/managers/detokenizer_manager.py", line 117, in event_loop\n'
                 "    recv_obj = self.recv_from_scheduler.recv_pyobj()\n{}\n")
    s = summarize(SERVING + shutdown + interrupt.format("KeyboardInterrupt"))
    assert s.outcome == "ready" and s.stopped is not None and s.crash is None and s.errors == []
    failed = summarize(SERVING + shutdown + interrupt.format("RuntimeError: socket closed"))
    assert [e.exception for e in failed.errors] == ["RuntimeError"]


def test_a_terminals_ctrl_c_echo_is_the_stop_and_what_follows_it_is_the_stops() -> None:
    s = summarize(SERVING + CTRL_C)
    assert s.outcome == "ready" and s.crash is None
    assert s.stopped is not None and s.stopped.line == 3 and s.stopped.text == "^C"
    assert "stopped at line 3, with no failure before it" in s.outcome_reason
    never_ready = summarize(CTRL_C)
    assert never_ready.outcome == "incomplete" and never_ready.crash is None
    assert never_ready.outcome_reason == "stopped at line 1, with no readiness or failure before it in this log"
    # without the echo, the same traceback is a crash whose exception is cut
    assert summarize(SERVING + CTRL_C[2:]).outcome == "crashed"


def test_a_traceback_after_the_exception_lends_it_no_frames() -> None:
    """Python prints a traceback's frames before its exception: a paste that starts at an exception
    line has none of its frames, and the launcher's own traceback after it is another (360)."""
    s = summarize(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 150.00 MiB. GPU 0 has a total capacity "
        "of 23.52 GiB of which 125.38 MiB is free.\n"
        "[06-09 17:46:28] Rank 0 scheduler is dead. Please check if there are relevant logs.\n"
        "[06-09 17:46:30] Exit code: 1\n"
        "Traceback (most recent call last):\n"
        '  File "/root/sglang-env/lib/python3.12/site-packages/sglang/cli/serve.py", line 120, in serve\n'
        "    execute_serve_cmd(parsed_args, remaining_argv)\n")
    assert s.crash is not None and s.crash.exception == "torch.OutOfMemoryError"
    assert s.crash.frames == () or not s.crash.frames
    assert "Rank 0 scheduler" not in (s.crash.message or "")


def test_a_bar_rays_de_duplication_says_several_processes_drew_is_no_ranks() -> None:
    """real-unseen 374: a shard-loading bar behind '[repeated 5x across cluster]' was drawn by six
    processes; it is not given to the rank that draws bars. A bar without the suffix still is."""
    lines = ("[2025-08-05 12:15:15 TP0] Load weight begin. avail mem=21.27 GB\n"
             "Loading safetensors checkpoint shards: 100% Completed | 3/3 [00:01<00:00,  2.46it/s]{}\n")
    alone = summarize(lines.format(""))
    assert "load_weights" in alone.progress.get("TP0", {})
    several = summarize(lines.format(" [repeated 5x across cluster]"))
    assert "load_weights" not in several.progress.get("TP0", {})


def test_a_fatal_errors_dump_without_its_current_thread_lends_no_thread_its_frames() -> None:
    """real-unseen 380: 'Fatal Python error: Aborted', then a dump whose 'Current thread' block is
    not in the window: the first thread shown (the watchdog, waiting) is not the failure's; the
    threads still place the process (the overlap worker's forward thread runs only while serving)."""
    s = summarize(
        "Fatal Python error: Aborted\n"
        "\n"
        "Thread 0x00007ee43dfff640 (most recent call first):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1419 in watchdog_thread\n'
        '  File "/usr/lib/python3.10/threading.py", line 953 in run\n'
        "\n"
        "Thread 0x00007ee5a9fff640 (most recent call first):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker_overlap_thread.py", line 120 in '
        "forward_thread_func\n"
        '  File "/usr/lib/python3.10/threading.py", line 953 in run\n')
    assert s.outcome == "crashed" and s.crash is not None and s.crash.exception == "Fatal Python error"
    assert not s.crash.frames and s.crash.phase == "serving"


def test_a_log_that_stops_in_a_dump_with_a_current_thread_says_so() -> None:
    """real-unseen 385: a faulthandler dump of every thread, its 'Current thread' in the forward
    thread, the header above it cut: the log stops in it, and what wrote it is not in the log."""
    s = summarize(
        "Thread 0x00007f8025112640 (most recent call first):\n"
        '  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 1829 in watchdog_thread\n'
        "\n"
        "Current thread 0x00007f80908e0640 (most recent call first):\n"
        '  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/managers/tp_worker_overlap_thread.py", line 122 in '
        "forward_thread_func\n")
    assert s.outcome == "incomplete"
    assert s.outcome_reason.startswith("the log stops at line 5 in a faulthandler dump of every thread (from line 1; "
                                       "current thread at line 4, in forward_thread_func)")


def test_a_crash_after_torch_names_another_rank_faulty_is_first_only_in_this_log() -> None:
    """real-unseen 388: torch's barrier on rank 3 names rank 0 as the faulty rank (line 2), then
    TP3's traceback: TP3 is the first failure in this log, not shown to be the first of the run."""
    from logforensics.diagnose.engine import evaluate
    from logforensics.diagnose.rulespec import load_rules

    text = ("[2025-04-21 04:13:43] Received sigquit from a child process. It usually means the child failed.\n"
            "[rank3]:[E421 04:13:43.426633564 ProcessGroupGloo.cpp:143] Rank 3 successfully reached monitoredBarrier, "
            "but received errors while waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.\n"
            "[2025-04-21 04:13:43 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/sglang/srt/managers/scheduler.py", line 2056, in run_scheduler_process\n')
    found = evaluate(load_rules([]), summarize(text), None).findings
    cr01 = next(f for f in found if f.rule == "CR01")
    assert cr01.title.startswith("TP3 failed first in this log,")
    assert cr01.title.endswith("torch named rank0 the faulty rank before it (line 2)")
    own = text.replace("from rank 0. Please check rank 0 logs", "from rank 3. Please check rank 3 logs")
    plain = next(f for f in evaluate(load_rules([]), summarize(own), None).findings if f.rule == "CR01")
    assert not plain.title.startswith("TP3 failed first in this log") and "faulty" not in plain.title


def test_a_crash_after_a_phases_end_line_is_after_that_phase_not_in_it() -> None:
    """real-unseen 404: 'Load weight end.' then a traceback whose frames name no phase: the rank
    had left load_weights, and no line says what it did next."""
    from logforensics.diagnose.engine import evaluate
    from logforensics.diagnose.rulespec import load_rules

    s = summarize("[2025-10-01 10:00:00] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, "
                  "avail mem=163.13 GB, mem usage=15.27 GB.\n"
                  "[2025-10-01 10:00:05] Scheduler hit an exception: Traceback (most recent call last):\n"
                  '  File "/sglang/srt/managers/scheduler.py", line 2941, in run_scheduler_process\n')
    assert s.crash is not None and s.crash.phase is None
    cr01 = next(f for f in evaluate(load_rules([]), s, None).findings if f.rule == "CR01")
    assert "failed first, after load_weights (Load weight end, line 1)" in cr01.title


def test_a_failure_no_line_names_takes_the_process_the_launcher_says_died_right_after() -> None:
    """real-unseen 360: an OOM's exception line names no process; the launcher's 'Rank 0 scheduler
    is dead.' on the next line does. Three lines later would be another record's business."""
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 150.00 MiB. GPU 0 has a total "
           "capacity of 23.52 GiB of which 125.38 MiB is free.\n")
    dead = "[06-09 17:46:28] Rank 0 scheduler is dead. Please check if there are relevant logs.\n"
    s = summarize(oom + dead)
    assert s.crash is not None and s.crash.source == "Rank 0 scheduler"
    health = '[2025-06-09 17:46:2{}] INFO:     127.0.0.1:5000{} - "GET /health HTTP/1.1" 200 OK\n'
    far = summarize(oom + "".join(health.format(i, i) for i in range(4)) + dead)
    assert far.crash is not None and far.crash.source is None


def test_the_launchers_record_of_a_dead_scheduler_with_no_failure_above_is_the_first_fatal_record() -> None:
    """real-unseen 850: the multimodal launcher's 'Rank 0 scheduler is dead.' and 'Exit code: -9',
    then its own traceback: the scheduler's end (killed, -9) came first, and its line is the
    crash's; with the scheduler's own failure above it, that failure stays the crash."""
    dead = ("[12-16 14:27:08] Rank 0 scheduler is dead. Please check if there are relevant logs.\n"
            "[12-16 14:27:10] Exit code: -9\n")
    tb = ("Traceback (most recent call last):\n"
          '  File "/envs/sglang/lib/python3.12/site-packages/sglang/cli/main.py", line 26, in main\n'
          "    args.func(args, extra_argv)\n")
    s = summarize(dead + tb)
    assert s.outcome == "crashed" and s.crash is not None and (s.crash.line, s.crash.exit_code) == (1, -9)
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 150.00 MiB.\n"
    s = summarize(oom + dead + tb)
    assert s.crash is not None and s.crash.line == 1 and s.crash.exception == "torch.OutOfMemoryError"


def test_a_traceback_another_programs_logger_logged_is_its_error_not_the_servers_crash() -> None:
    """real-unseen 409: Xinference's 'ERROR:xoscar.api:Destroy generator ... due to an error
    encountered.' (Python's default logging format), then the traceback it logged: an error the
    serving process logged and went on from. Without the line above, the same traceback is a crash."""
    tb = ("Traceback (most recent call last):\n"
          '  File "/envs/xinf/lib/python3.10/site-packages/xoscar/api.py", line 419, in __xoscar_next__\n'
          "    r = await asyncio.create_task(_async_wrapper(gen))\n")
    serving = ("[2025-04-23 20:31:56 TP0] Decode batch. #running-req: 1, #token: 469, token usage: 0.02, "
               "gen throughput (token/s): 36.08, #queue-req: 0\n")
    logged = summarize(serving + "ERROR:xoscar.api:Destroy generator eab6f4f0 due to an error encountered.\n" + tb)
    assert logged.outcome == "ready" and logged.crash is None
    assert [e.line for e in logged.errors] == [3]
    assert summarize(serving + tb).outcome == "crashed"


_WARMUP = ("[2025-03-01 14:03:07] Initialization failed. warmup error: Traceback (most recent call last):\n"
           '  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/entrypoints/http_server.py", line 548, '
           "in _wait_and_warmup\n"
           '    assert res.status_code == 200, f"{res=}, {res.text=}"\n'
           "AssertionError: res=<Response [502]>, res.text=''\n")


def test_the_launchers_warmup_failure_opens_the_traceback_it_logs() -> None:
    """"Initialization failed. warmup error: Traceback (most recent call last):": the launcher's
    warm-up logs the traceback of what failed after it, so the failure starts at that line,
    and it is the warm-up's, also when the window ends before its frames."""
    s = summarize(_WARMUP)
    assert s.outcome == "crashed" and s.crash is not None
    assert (s.crash.line, s.crash.phase, s.crash.exception) == (1, "warmup", "AssertionError")
    assert s.crash.message == "res=<Response [502]>, res.text=''"
    cut = summarize("[2025-03-01 14:03:07] Initialization failed. warmup error: Traceback (most rec\n")
    assert cut.crash is not None and (cut.crash.line, cut.crash.phase, cut.crash.exception) == (1, "warmup", None)
    other = summarize("[2025-03-01 14:03:07] Initialization failed. warmup error: Connection refused\n")
    assert other.crash is None  # a message, not a traceback's header: no record opens


def test_the_launchers_warmup_failure_is_no_unnamed_schedulers_crash() -> None:
    """real-unseen 852: a log that names no rank, its scheduler's progress bar above the warm-up's
    failure: the failure is the launcher's, not the unnamed scheduler's (which it shows ready)."""
    bar = "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:03<00:00,  1.10it/s]\n"
    s = summarize(bar + _WARMUP)
    assert s.crash is not None and s.crash.ranks == [] and s.crash.phase == "warmup"
    assert s.per_rank["-"].phase_reached == "warmup"


def test_a_shells_killed_is_a_record_of_its_own_never_the_exceptions_message() -> None:
    """bash's "Killed" after a traceback (the job died of SIGKILL): the shell's notice, read
    as such and told after the failure, not a line of the AssertionError's message."""
    s = summarize(_WARMUP + "\nKilled\n")
    assert s.crash is not None and s.crash.message == "res=<Response [502]>, res.text=''"
    assert s.crash.end_line == 5
    assert s.outcome_reason == ("AssertionError at line 1; then killed by SIGKILL (no OOM kill recorded) "
                                "(a shell: Killed; case.log:6)")
    [notice] = s.notices["job_end"]
    assert notice.line == 6
    # alone in a log that just stops: the process was killed, and that is its end
    alone = summarize("[2025-03-01 14:03:07 TP0] Load weight begin. avail mem=78.50 GB\nKilled\n")
    assert alone.outcome == "crashed" and alone.crash is not None and alone.crash.source == "shell"
    assert alone.crash.line == 2 and alone.crash.message == "killed by SIGKILL (no OOM kill recorded)"

def test_a_faulthandler_stack_without_its_header_is_innermost_first_and_has_no_exception_to_cut() -> None:
    """real-unseen 425: frames in faulthandler's form ('line 508 in __init__', no comma), most
    recent call first, with no header above them: the first frame printed is the innermost, no
    line after a frame is its source, and what the log lacks is the header, not an exception."""
    from logforensics.diagnose.engine import evaluate
    from logforensics.diagnose.rulespec import load_rules

    s = summarize(
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 508 in __init__\n'
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 4025 in run_scheduler_process\n'
        '  File "/usr/lib/python3.12/multiprocessing/spawn.py", line 122 in spawn_main\n'
        '  File "<string>", line 1 in <module>\n'
        "Extension modules: numpy._core._multiarray_umath, psutil._psutil_linux\n")
    assert s.outcome == "crashed" and s.crash is not None and s.crash.exception is None
    frames = s.crash.frames
    assert [(f.func, f.log_line, f.code) for f in (frames[0], frames[-1])] == [("<module>", 4, None), ("__init__", 1, None)]
    assert "faulthandler stack dump" in s.outcome_reason and "cut" not in s.outcome_reason
    cr01 = next(f for f in evaluate(load_rules([]), s, None).findings if f.rule == "CR01")
    assert "whose header is not in this log" in cr01.title and "traceback" not in cr01.title
    # Python's own traceback form, cut before its exception, is still called so
    cut = summarize('  File "/sglang/srt/managers/scheduler.py", line 2056, in run_scheduler_process\n'
                    "    self.event_loop()\n")
    assert cut.crash is not None and cut.crash.frames[0].code == "self.event_loop()"
    assert "not in this log (cut)" in cut.outcome_reason


def test_c10s_exception_header_after_a_torch_record_is_that_ranks_logged_cpp_exception_not_an_abort() -> None:
    """real-unseen 427: torch's '[rank1]:[W... TCPStore.cpp:125] [c10d] recvValue failed ...', then
    c10's 'Exception raised from recvBytes at .../Utils.hpp:682 (most recent call first):': the
    record logged a thrown C++ exception with its stack; the failure starts at the record, on
    rank1, raised in recvBytes, and nothing in it is an abort."""
    from logforensics.diagnose.engine import evaluate
    from logforensics.diagnose.rulespec import load_rules

    record = ("[rank1]:[W1119 17:59:26.271588084 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=61, "
              "addr=[localhost]:33850, remote=[localhost]:30005): Failed to recv, got 0 bytes. Connection was likely "
              "closed. Did the remote server shutdown or crash?\n")
    raised = ("Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:682 (most recent "
              "call first):\n"
              "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x80 (0x7090b977eeb0 in libc10.so)\n"
              "frame #1: <unknown function> + 0x5d694d1 (0x70909d7ef4d1 in libtorch_cpu.so)\n")
    s = summarize(record + raised)
    assert s.outcome == "crashed" and s.crash is not None
    c = s.crash
    assert (c.line, c.first_rank, c.ranks, c.exception, c.native) == (1, "rank1", ["rank1"], None, False)
    assert "C++ exception raised in recvBytes (Utils.hpp:682), logged at TCPStore.cpp:125" in s.outcome_reason
    assert "abort" not in s.outcome_reason
    # torch's other spelling of the head (real-unseen 440: '[Rank7]:[T506 ...]') names its place too
    other = summarize(record.replace("[rank1]:[W1119", "[Rank1]:[T1119") + raised)
    assert "logged at TCPStore.cpp:125" in other.outcome_reason
    cr01 = next(f for f in evaluate(load_rules([]), s, None).findings if f.rule == "CR01")
    assert cr01.title.startswith("rank1 failed first") and "native abort" not in cr01.title
    # the same rank logging again after it (real 125: the heartbeat monitor's next warning) caught it
    went_on = summarize(record + raised + "[rank1]:[W1119 17:59:26.292446889 ProcessGroupNCCL.cpp:1662] [PG ID 0 PG "
                        'GUID 0(default_pg) Rank 1] Failed to check the "should dump" flag on TCPStore\n')
    assert went_on.crash is None and [(e.line, e.rank) for e in went_on.errors] == [(1, "rank1")]
    assert went_on.errors[0].what == "C++ exception raised in recvBytes (Utils.hpp:682), logged at TCPStore.cpp:125"
    # c10's header with no torch record right above it is a C++ stack trace of a process no line names
    alone = summarize("[2025-11-19 17:59:26] some other line\n" + raised)
    assert alone.crash is not None and alone.crash.line == 2 and alone.crash.native and alone.crash.first_rank is None


def test_a_ready_server_killed_after_its_last_record_says_so() -> None:
    """A ready server, then a shell's "Killed" after every rank's last record: still ready (no
    failure of its own in the log), and the kill is said after its readiness; a "Killed" of an
    earlier launch, before a record of the server, is not its end."""
    ready = ("[2026-01-01 10:00:00] The server is fired up and ready to roll!\n"
             "[2026-01-01 10:00:05 TP0] Decode batch. #running-req: 1, #token: 100, token usage: 0.01, "
             "gen throughput (token/s): 50.00, #queue-req: 0\n")
    s = summarize(ready + "Killed\n")
    assert s.outcome == "ready" and s.crash is None and s.stopped is None
    assert s.outcome_reason == ("server ready at line 1; then killed by SIGKILL (no OOM kill recorded) (a shell: "
                                "Killed; case.log:3), with no failure before it in this log")
    earlier = summarize("Killed\n" + ready)
    assert earlier.outcome == "ready" and "killed" not in earlier.outcome_reason


@pytest.mark.parametrize("exception,logged", [
    ("ValueError: not enough values to unpack (expected 3, got 1)", True),  # the text the record ends with
    (None, True),  # the traceback cut before its exception
    ("RuntimeError: CUDA error: an illegal memory access was encountered", False),  # another exception
])
def test_a_traceback_under_a_record_that_logged_it_is_an_error_not_the_end(exception: str | None,
                                                                        logged: bool) -> None:
    """Python's logging prints ``exc_info``'s traceback on the lines after the record, whose
    message ends with the exception's text (``logger.error(f"...: {e}", exc_info=True)``; SGLang's
    multimodal generation scheduler, real-unseen 495): the code that logged it goes on. A
    traceback whose exception is another than the record's text is not the one it logged."""
    text = ("[01-28 08:52:44] Error receiving requests in scheduler event loop (attempt 1/3): "
            "not enough values to unpack (expected 3, got 1)\n"
            "Traceback (most recent call last):\n"
            '  File "/sgl-workspace/sglang/python/sglang/multimodal_gen/runtime/managers/scheduler.py", '
            "line 342, in event_loop\n"
            "    new_reqs = self.recv_reqs()\n" + (exception + "\n" if exception else ""))
    s = summarize(text)
    if logged:
        assert s.crash is None and s.outcome != "crashed"
        assert [(e.line, e.source) for e in s.errors] == [(2, "logged")]
    else:
        assert s.outcome == "crashed" and s.crash is not None and s.crash.line == 2


@pytest.mark.parametrize("after,stop", [
    ("", True),  # the echo is the log's last record
    ("Traceback (most recent call last):\n  File \"/sgl/srt/entrypoints/http_server.py\", line 9, in launch\n"
     "KeyboardInterrupt\n", True),  # what a Ctrl-C ends prints
    ("2025-07-08 19:58:04  INFO sglang_router_rs::router: src/router.rs:354: Worker is not ready yet\n" * 3,
     False),  # the process goes on logging: the echo stopped nothing the log shows
])
def test_a_terminals_ctrl_c_echo_is_a_stop_only_where_what_follows_shows_one(after: str, stop: bool) -> None:
    """real-unseen 510: '^C^C^C' glued to a router line, then the router logs on."""
    s = summarize("[2025-07-08 19:57:01] The server is fired up and ready to roll!\n^C\n" + after)
    assert (s.stopped is not None) == stop


def test_a_rankless_traceback_of_another_programs_script_has_no_phase_of_sglangs() -> None:
    """A training driver's traceback (its script's '<module>', no SGLang frame, no rank) after
    the server served (real-unseen 526): the crash is no SGLang process's, so no SGLang phase is
    given to it; a rank-less traceback through SGLang's code still takes the run's phase."""
    serving = ("[2025-12-11 06:23:21 TP0 EP0] Decode batch, #running-req: 2, #token: 37707, token usage: 0.01, "
               "cuda graph: True, gen throughput (token/s): 200.40, #queue-req: 0, \n")
    driver = summarize(serving + "Traceback (most recent call last):\n"
                       '  File "/tmp/ray/session_x/working_dir_files/train.py", line 106, in <module>\n'
                       "    ray.get(handles)\n"
                       '  File "/usr/lib/python3/site-packages/ray/_private/worker.py", line 2882, in get\n'
                       "    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)\n"
                       "ray.exceptions.RayTaskError: boom\n")
    assert driver.crash is not None and driver.crash.phase is None
    ours = summarize(serving + "Traceback (most recent call last):\n"
                     '  File "/sgl/python/sglang/srt/utils.py", line 10, in helper\n'
                     "    x()\n"
                     "RuntimeError: boom\n")
    assert ours.crash is not None and ours.crash.phase == "serving"


def test_the_weight_update_groups_failure_is_a_logged_error_with_its_nccl_version() -> None:
    """SGLang logs the weight-update group's failure and answers the caller (real-unseen 527): an
    error the server logged, not its end, and the NCCL version torch's error names is read."""
    s = summarize("[2025-07-15 02:18:13] Failed to initialize custom process group: NCCL error in: "
                  "/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, unhandled cuda error (run with "
                  "NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
                  "ncclUnhandledCudaError: Call to CUDA function failed.\n")
    assert s.crash is None and s.outcome != "crashed"
    assert [(e.line, e.kind, e.what) for e in s.errors] == [(1, "group_init_failed",
                                                              "Failed to initialize custom process group")]
    assert s.versions["nccl"] == "2.21.5"


def test_a_scheduler_that_a_controller_saw_end_with_a_failure_code_is_the_first_failure() -> None:
    """A node's launcher or the DP controller logs each scheduler it joined (real-unseen 541):
    exit code 255 is a process that failed, the first failure where what failed in it is in no
    line; a later traceback is what came after; 0 is a scheduler that returned."""
    s = summarize("[2026-02-25 15:04:37] Scheduler or DataParallelController 848532 terminated with 255\n"
                  "[2026-02-25 15:04:39] Scheduler or DataParallelController 848334 terminated with 0\n"
                  "Traceback (most recent call last):\n"
                  '  File "/sgl/python/sglang/srt/entrypoints/http_server.py", line 270, in lifespan\n'
                  "    x = global_state.tokenizer_manager.server_args\n"
                  "AttributeError: 'NoneType' object has no attribute 'server_args'\n")
    assert s.outcome == "crashed" and s.crash is not None and s.crash.line == 1
    assert (s.crash.exception, s.crash.first_message, s.crash.exit_code) == \
        ("AttributeError", "Scheduler or DataParallelController 848532 terminated with 255", 255)
    clean = summarize("[2026-02-25 15:04:39] Scheduler or DataParallelController 848334 terminated with 0\n")
    assert clean.crash is None


def test_the_launchers_own_traceback_takes_no_schedulers_phase() -> None:
    """SGLang's launcher waiting for its schedulers raises EOFError when one dies (real-unseen
    540): its traceback (launch_server.py's '<module>', no scheduler entry) is its own process's,
    not placed in the phase the schedulers were in."""
    s = summarize("[2026-02-20 11:13:40 TP0] Load weight begin. avail mem=78.00 GB\n"
                  "Traceback (most recent call last):\n"
                  '  File "/sgl/python/sglang/launch_server.py", line 32, in <module>\n'
                  "    run_server(server_args)\n"
                  '  File "/sgl/python/sglang/srt/entrypoints/engine.py", line 847, in _wait_for_scheduler_ready\n'
                  "    data = scheduler_pipe_readers[i].recv()\n"
                  "EOFError\n")
    [exc] = s.exceptions
    assert exc.exception == "EOFError" and exc.phase is None


@pytest.mark.parametrize("pure", ["1", ""])
def test_an_unrecognised_lines_example_cut_to_its_length_says_so(tmp_path: Path, pure: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The coverage's example of an unrecognised shape is at most 200 characters, and a longer
    line's ends with '…' (real-unseen 541: a 217-character line quoted as its first 200), on the
    pure reader and the compiled one alike."""
    from logforensics import summarize_file
    from logforensics.model.coverage import EXAMPLE_KEPT

    monkeypatch.setenv("LOGFORENSICS_PURE", pure)
    log = tmp_path / "long.log"
    long_line = "nvshmem bootstrap note " + " ".join(f"word{i}" for i in range(60))
    log.write_text("".join(f"{long_line} {i}\n" for i in range(3)) + "short unknown words here\n")
    examples = {u.example for u in summarize_file(log).coverage.top_unrecognised}
    assert all(len(e) <= 200 for e in examples)
    assert any(e.endswith("…") and long_line.startswith(e[:-1].rstrip()) for e in examples)
    assert "short unknown words here" in examples
    if native.available():
        assert native.lib is not None and native.lib.EXAMPLE_MAX == EXAMPLE_KEPT


def test_a_line_that_says_an_error_holds_a_text_the_bulk_reader_hands_over() -> None:
    """Every line ``on_other`` keeps as a logged error holds one of the texts for which the bulk
    reader hands an unrecognised line over as an event, so both readers see it (and the
    traceback under it reads alike)."""
    from logforensics.model.coverage import _SAYS_AN_ERROR, SAYS_AN_ERROR_NEEDS
    for text in ("Error receiving requests (attempt 1/3): x", "[Stage] Error during execution after 1 ms: y",
                 "Failed to generate output for prompt: z", "worker ERROR during step: w", "an Exception in x: v",
                 "FAILED: u", "request failed: t", "an error: s", "exception raised: r"):
        assert _SAYS_AN_ERROR.search(text), text
        assert any(n in text for n in SAYS_AN_ERROR_NEEDS), text


def test_a_cpp_stacks_tail_at_the_top_then_a_schedulers_traceback_starts_at_the_traceback() -> None:
    """A window that begins inside a C++ stack (its header and first frames above it; real-unseen
    565), then a scheduler's own traceback: the traceback is the first failure, the tail says
    nothing of what failed. The same tail before a fatal abort stays the abort's first line."""
    tail = ("frame #43: sglang::scheduler_TP1() [0x540284]\n"
            "frame #44: _PyObject_MakeTpCall + 0x233 (0x503fd3 in sglang::scheduler_TP1)\n\n")
    tb = ("[2025-11-20 22:03:17 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
          '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2534, in run_scheduler_process\n'
          "    scheduler = Scheduler(\n"
          "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms\n")
    s = summarize(tail + tb)
    assert s.crash is not None and s.crash.line == 4 and s.crash.first_message is None
    aborted = summarize(tail + "Fatal Python error: Aborted\n")
    assert aborted.crash is not None and aborted.crash.line == 1


@pytest.mark.parametrize("later,outcome", [("", "incomplete"), ("health", "ready"), ("request", "ready")])
def test_a_probe_answered_while_the_health_check_is_refused_is_not_readiness(later: str, outcome: str) -> None:
    """/metrics answers once the HTTP server is up; /health answers 503 until the warm-up is
    done (real-unseen 672, a PD decode server of 2026): with the health check refused and never
    answered with success, and no request served, the server was up, not ready. A health check
    answered with success, or a request served, is readiness."""
    text = ('[2026-07-22 04:11:22] INFO:     10.32.194.36:37758 - "GET /metrics HTTP/1.1" 200 OK\n'
            '[2026-07-22 04:11:25] INFO:     10.25.0.43:47774 - "GET /health HTTP/1.1" 503 Service Unavailable\n'
            '[2026-07-22 04:11:38] INFO:     10.32.194.35:35564 - "GET /metrics HTTP/1.1" 200 OK\n')
    if later == "health":
        text += '[2026-07-22 04:11:55] INFO:     10.25.0.43:47780 - "GET /health HTTP/1.1" 200 OK\n'
    elif later == "request":
        text += '[2026-07-22 04:11:55] INFO:     10.25.0.43:47781 - "POST /generate HTTP/1.1" 200 OK\n'
    s = summarize(text)
    assert s.outcome == outcome, s.outcome_reason
    if outcome == "incomplete":
        assert "health check was refused (GET /health 503 at line 2)" in s.outcome_reason


@pytest.mark.parametrize("rank,drawer", [("TP1", "-"), ("DP3 TP3 EP3", "-"), ("TP0", "TP0"), ("DP0 TP0", "DP0 TP0")])
def test_bars_belong_to_a_rank_that_can_draw_them_else_to_an_unnamed_process(rank: str, drawer: str) -> None:
    """SGLang draws tqdm bars on TP rank 0 only: an excerpt of TP1's lines under the bars
    (real-unseen 504, 682) shows an unnamed process that reached the bar's phase, and TP1
    placed by nothing; a log that names TP rank 0 gives it the bars."""
    s = summarize("Multi-thread loading shards: 100% Completed | 142/142 [00:25<00:00,  5.66it/s]\n"
                  f"[2026-04-16 01:02:09 {rank}] Failed to initialize lk_moe: something\n")
    assert drawer in s.ranks and s.per_rank[drawer].phase_reached == "load_weights"
    assert set(s.per_rank[drawer].progress) == {"load_weights"}
    assert all(not r.progress for k, r in s.per_rank.items() if k != drawer)


@pytest.mark.parametrize("n,place", [(8, "at the end of cuda_graph_capture (its progress bar at 8/8, line 2; "
                                         "'Capture cuda graph end' not in the log)"),
                                     (5, "during cuda_graph_capture")])
def test_an_incomplete_log_whose_phase_bar_is_complete_stops_at_that_phase_s_end(n: int, place: str) -> None:
    """A log that stops once the capture bar reached 8/8 (real-unseen 724) stopped at the end of
    the capture, its end line not in the log (not "after" it: a step goes on past its bar, as
    weights are processed after the last shard, real-pairs 019); a bar still short of its
    total is during it."""
    s = summarize("[2025-11-23 23:34:20 TP0] Capture cuda graph begin. This can take up to several minutes. "
                  "avail mem=10.00 GB\n"
                  f"Capturing batches (bs=1 avail_mem=9.50 GB): 100%|██████████| {n}/8 [00:02<00:00,  3.2it/s]\n")
    from logforensics.model.stops import stop_place
    assert s.outcome == "incomplete" and place in (stop_place(s) or ""), stop_place(s)


def test_another_web_servers_access_line_is_no_request_sglang_served() -> None:
    """aiohttp's access line (Common Log Format; SGLang's PD bootstrap server, Mooncake's metadata
    server; real-unseen 358, 702) is read, but it is not SGLang's HTTP server answering: no readiness."""
    s = summarize('[2025-04-14 03:55:53] 10.6.131.6 [14/Apr/2025:03:55:53 +0000] "PUT /metadata?key=mooncake HTTP/1.1" '
                  '200 176 "-" "-"\n')
    assert s.outcome == "incomplete" and s.coverage.lines_unrecognised == 0


def test_a_segfault_in_a_kv_senders_transfer_is_in_serving() -> None:
    """A PD prefill server's KV transfer runs for requests only (real-unseen 702: faulthandler's
    dump of Mooncake's send_kvcache worker, process_layer, in its thread pool)."""
    s = summarize("Fatal Python error: Segmentation fault\n\n"
                  "Thread 0x00007f4d75ffd640 (most recent call first):\n"
                  '  File "/x/sglang/srt/disaggregation/mooncake/transfer_engine.py", line 102 in batch_transfer_sync\n'
                  '  File "/x/sglang/srt/disaggregation/mooncake/conn.py", line 272 in process_layer\n'
                  '  File "/x/concurrent/futures/thread.py", line 59 in run\n')
    assert s.crash is not None and s.crash.phase == "serving"


def test_rays_wrapper_of_a_tasks_exception_reports_the_exception_the_task_raised() -> None:
    """Ray's 'ray.exceptions.RayTaskError(RuntimeError): ray::Actor.method() (pid=...)' carries the
    remote traceback, which ends with the task's own 'RuntimeError: ...' (real-unseen 882): that
    is the exception; with the remote traceback cut before it (662), the wrapper's is all there is."""
    head = ("ray.exceptions.RayTaskError(RuntimeError): ray::WorkerDict.actor_rollout_init_model() (pid=150267, "
            "ip=100.96.252.211)\n"
            '  File "/x/sglang/srt/utils.py", line 868, in broadcast_pyobj\n'
            "    dist.broadcast(tensor_size, src=src, group=dist_group)\n")
    s = summarize(head + "RuntimeError: No backend type associated with device type cpu\n")
    assert s.crash is not None and (s.crash.line, s.crash.exception) == (1, "RuntimeError")
    cut = summarize(head)
    assert cut.crash is not None and cut.crash.exception == "ray.exceptions.RayTaskError(RuntimeError)"


def test_a_chain_cut_before_its_last_exception_names_the_one_it_was_handling() -> None:
    """real-unseen 881: 'During handling of the above exception, another exception occurred:', the
    second traceback cut: its exception is not in the log (the summary says so) but the one it was
    raised while handling is, and the verdict names it."""
    s = summarize("Traceback (most recent call last):\n"
                  '  File "/x/aiter/jit/utils/chip_info.py", line 63, in get_gfx_custom_op_core\n'
                  "    return gfx_mapping[gfx]\n"
                  "KeyError: 'gfx1101'\n\n"
                  "During handling of the above exception, another exception occurred:\n\n"
                  "Traceback (most recent call last):\n"
                  '  File "/x/sglang/srt/server_args.py", line 4310, in prepare_server_args\n'
                  "    return ServerArgs.from_cli_args(raw_args)\n")
    assert s.crash is not None and s.crash.exception is None
    assert s.outcome_reason.startswith("a traceback whose exception is not in this log (cut), raised while "
                                       "handling KeyError")
    assert without_exception(s.crash) == ("a traceback whose exception is not in this log (cut), raised while "
                                          "handling KeyError")


def test_a_native_handlers_frames_without_their_banner_are_a_native_stack_not_a_cut_traceback() -> None:
    """real-unseen 880: 'File "<unknown>", line 0, in _start' is SGLang's segfault handler's native
    frame (its banner above the window): a native record, innermost first, then the Python traceback."""
    s = summarize('  File "<unknown>", line 0, in Py_RunMain\n'
                  '  File "<unknown>", line 0, in _start\n'
                  "Traceback (most recent call last):\n"
                  '  File "/x/sglang/srt/entrypoints/engine.py", line 1340, in _wait_for_scheduler_ready\n'
                  "    data = scheduler_pipe_readers[i].recv()\n"
                  "EOFError\n")
    assert s.crash is not None and s.crash.line == 1 and s.crash.exception == "EOFError"
    assert s.crash.first_message == "a native stack dump (its banner is not in this log)"


def test_a_shells_notice_of_a_fatal_signal_ends_a_log_that_just_stops() -> None:
    """bash's job-control notice, alone on its line: 'Segmentation fault (core dumped)' ends the
    job's log as a crash by that signal; 'Quit (core dumped)' (real-unseen 940) says SIGQUIT ended
    it, which is Ctrl-\\ at a terminal or a failing child's signal: said, no outcome made of it."""
    start = "[2025-03-01 14:03:07 TP0] Load weight begin. avail mem=70.00 GB\n"
    s = summarize(start + "Segmentation fault (core dumped)\n")
    assert s.outcome == "crashed" and s.crash is not None and s.crash.line == 2
    assert s.outcome_reason.startswith("ended by SIGSEGV (a segmentation fault) (a shell: Segmentation fault")
    q = summarize(start + "Quit (core dumped)\n")
    assert q.outcome == "incomplete" and q.crash is None and "ended by SIGQUIT" in q.outcome_reason


def test_torchs_global_rank_that_no_sglang_line_names_takes_no_phase_from_other_ranks_batches() -> None:
    """real-unseen 673: DP ranks' prefill batches, then torch's '[rank2]:' watchdog record of a
    CUDA error: rank 2 is a process no SGLang line names, so the others' serving does not place it."""
    batch = ("[2025-02-18 06:32:23 DP{0} TP{0}] Prefill batch. #new-seq: 8, #new-token: 4096, #cached-token: 8, "
             "token usage: 0.00, #running-req: 2, #queue-req: 0\n")
    s = summarize(batch.format(7) + batch.format(6) +
                  "[rank2]:[E218 06:32:24.828983440 ProcessGroupNCCL.cpp:1595] [PG ID 2 PG GUID 3 Rank 2] Process "
                  "group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered\n"
                  "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
                  "might be incorrect.\n\n"
                  "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43 (most recent "
                  "call first):\n"
                  "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3545f6c446 in "
                  "/usr/local/lib/python3.10/dist-packages/torch/lib/libc10.so)\n")
    assert s.crash is not None and s.crash.first_rank == "rank2" and s.crash.phase is None


def test_torchs_watchdog_message_without_its_c10d_head_is_the_collective_timeout_it_reports() -> None:
    """real-unseen 990: 'Process group watchdog thread terminated with exception: [Rank 1] Watchdog
    caught collective operation timeout: ...' alone, the c10d record's head left out: a hang on rank 1."""
    s = summarize("Process group watchdog thread terminated with exception: [Rank 1] Watchdog caught collective "
                  "operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
                  "ran for 600049 milliseconds before timing out.\n")
    assert s.outcome == "hung" and s.hang is not None and s.hang.first_line == 1 and s.hang.ranks == ["rank1"]


# SGLang's own start-up errors (the format reference's "Errors raised along this path"): their
# words name the step that raised them when no frame is in the log.
_CAPTURE_FAILED = ("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 7.00 MiB. "
                   "GPU 3 has a total capacity of 79.19 GiB of which 13.94 MiB is free.\n"
                   "Possible solutions:\n")


def test_sglangs_capture_failure_alone_on_its_line_is_a_crash_in_graph_capture() -> None:
    s = summarize(_CAPTURE_FAILED)
    assert s.outcome == "crashed"
    assert s.crash is not None and s.crash.exception == "Exception" and s.crash.line == 1
    assert s.crash.phase == "cuda_graph_capture"


def test_another_bare_exception_line_alone_is_no_crash() -> None:
    s = summarize("Exception: the request was cancelled by the client\n")
    assert s.outcome != "crashed" and s.crash is None


def test_sglangs_error_names_its_step_when_the_frames_are_cut() -> None:
    s = summarize("[2025-06-01 10:00:00 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
                  "avail mem=10.25 GB, mem usage=60.00 GB.\n"
                  "[2025-06-01 10:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
                  "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                  "Current value: mem_fraction_static=0.5\n")
    assert s.crash is not None and s.crash.exception == "RuntimeError"
    assert s.crash.phase == "kv_cache_alloc"


@pytest.mark.parametrize("indent", ["", "  "])
def test_a_hybrid_model_s_state_pool_that_does_not_fit_is_a_crash_in_kv_sizing(indent: str) -> None:
    # its exception alone (a paste in a list item indents it), no frame: the words name the step
    s = summarize(f"{indent}RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache.\n"
                  f"{indent}Computed max_mamba_cache_size=-28 (total_rest_memory=-7.96 GB, "
                  "mamba_cache_per_req=146.81 MB).\n")
    assert s.outcome == "crashed" and s.crash is not None and s.crash.line == 1
    assert (s.crash.exception, s.crash.phase) == ("RuntimeError", "kv_cache_alloc")


def test_rays_report_of_a_task_that_raised_heads_its_remote_traceback() -> None:
    # RayTaskError's text without the exception's name before it, as pasted from a driver's log
    s = summarize("ray::SGLangEngine.init() (pid=2817, ip=10.0.0.3, actor_id=9736b1, repr=<SGLangEngine>)\n"
                  '  File "/root/slime/backends/sglang_utils/sglang_engine.py", line 95, in _wait_server_healthy\n'
                  '    raise Exception("Server process terminated unexpectedly.")\n'
                  "Exception: Server process terminated unexpectedly.\n")
    assert s.crash is not None and s.crash.line == 1 and s.crash.exception == "Exception"
    assert s.coverage.lines_unrecognised == 0


def test_a_header_whose_traceback_text_begins_at_its_exception_names_the_rank_and_the_chain() -> None:
    # SGLang's f"Scheduler hit an exception: {get_exception_traceback()}" with the chain's first
    # exception on the header's line, then Python's chaining and the next traceback, cut
    s = summarize("[2026-02-28 15:04:30 TP0] Scheduler hit an exception: torch._dynamo.exc.Unsupported: "
                  "Logger not supported for non-export cases.\n"
                  "\n"
                  "The above exception was the direct cause of the following exception:\n"
                  "\n"
                  "Traceback (most recent call last):\n"
                  '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3118, in '
                  "run_scheduler_process\n"
                  "    scheduler = Scheduler(\n")
    assert s.crash is not None and s.crash.line == 1 and s.crash.first_rank == "TP0"
    assert s.crash.exception is None  # the chain's last exception is cut
    assert "torch._dynamo.exc.Unsupported" in s.outcome_reason


def test_a_frames_code_line_under_a_job_managers_text_begins_the_traceback() -> None:
    # Ray's job report, then the driver's log tail: its first traceback line is a frame's code line
    # whose File line is above the tail (Ray's de-duplication of a traceback repeated in the cluster)
    s = summarize("---------------------------------------\n"
                  "Job 'raysubmit_58TRJUbPYiZ4YT36' failed\n"
                  "---------------------------------------\n"
                  "\n"
                  "Status message: Job entrypoint command failed with exit code 1, last available logs:\n"
                  "    from sglang.srt.managers.scheduler import run_scheduler_process\n"
                  '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 37, in <module>\n'
                  "    from sglang.srt.configs.model_config import ModelConfig\n")
    assert s.crash is not None and s.crash.line == 6


def test_a_window_cut_at_a_frames_code_and_caret_lines_quotes_each_line_once() -> None:
    s = summarize("    return get_tp_group().all_gather(input_, dim)\n"
                  "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
                  '  File "/x/vllm/distributed/parallel_state.py", line 444, in all_gather\n'
                  "    torch.distributed.all_gather_into_tensor(output_tensor,\n")
    assert s.crash is not None and s.crash.line == 1
    lines = s.crash.text.splitlines()
    assert len(lines) == 4 and sum(line.strip().startswith("^") for line in lines) == 1


def test_a_log_that_stops_after_graph_capture_ended_says_so() -> None:
    # bench_one_batch's run after capture: no server, so no readiness; the capture had ended
    s = summarize("[2025-12-29 18:33:03 TP0] Capture cuda graph begin. This can take up to several minutes. "
                  "avail mem=2.42 GB\n"
                  "[2025-12-29 18:33:04 TP0] Capture cuda graph end. Time elapsed: 1.01 s. mem usage=0.03 GB. "
                  "avail mem=2.39 GB.\n"
                  "Prefill. latency: 0.27105 s, throughput:  30222.82 token/s\n")
    from logforensics.model.stops import stop_place

    assert s.outcome == "incomplete"
    assert stop_place(s) == "after cuda_graph_capture (Capture cuda graph end, line 2), before warmup"


def test_a_failure_in_bench_one_batchs_own_batches_is_in_no_server_phase() -> None:
    # bench_one_batch builds its model runner (the ranks' capture records), then runs its batches
    s = summarize("[2025-03-20 10:00:00 TP0] Registering 3936 cuda graph addresses\n"
                  "Process Process-1:\n"
                  "Traceback (most recent call last):\n"
                  '  File "/usr/lib/python3.10/multiprocessing/process.py", line 314, in _bootstrap\n'
                  "    self.run()\n"
                  '  File "/sgl-workspace/sglang/python/sglang/bench_one_batch.py", line 432, in latency_test\n'
                  "    latency_test_run_once(\n"
                  '  File "/sgl-workspace/sglang/python/sglang/bench_one_batch.py", line 365, in latency_test_run_once\n'
                  "    next_token_ids, _ = decode(next_token_ids, batch, model_runner)\n"
                  "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert s.crash is not None and s.crash.exception == "RuntimeError" and s.crash.phase is None


def test_the_shells_time_report_after_an_exception_is_not_its_message() -> None:
    s = summarize("Traceback (most recent call last):\n"
                  '  File "/x/sglang/cli/utils.py", line 83, in _maybe_download_model\n'
                  "    raise ValueError(\n"
                  "ValueError: Could not find model locally at Wan-AI/Wan2.2-T2V-A14B-Diffusers\n"
                  "\n"
                  "real\t0m49.402s\n"
                  "user\t0m1.618s\n"
                  "sys\t0m1.433s\n")
    assert s.crash is not None and s.crash.message == "Could not find model locally at Wan-AI/Wan2.2-T2V-A14B-Diffusers"


def test_zshs_notice_of_a_fatal_signal_ends_a_log_as_bashs_does() -> None:
    """zsh words its job-control notice otherwise, the command after it ('zsh: killed     python ...')."""
    start = "[2025-03-01 14:03:07 TP0] Load weight begin. avail mem=70.00 GB\n"
    s = summarize(start + "zsh: segmentation fault (core dumped)  python -m sglang.launch_server --model-path m\n")
    assert s.outcome == "crashed" and s.crash is not None and s.crash.line == 2
    assert s.outcome_reason.startswith("ended by SIGSEGV (a segmentation fault) (a shell: zsh: segmentation fault")
    k = summarize(start + "zsh: killed     python -m sglang.launch_server --model-path m\n")
    assert k.outcome == "crashed" and "SIGKILL" in k.outcome_reason


def test_the_launchers_crash_diagnostics_and_tree_kill_are_read_not_left_unrecognised() -> None:
    s = summarize("[2026-06-29 14:45:57] SIGQUIT received. signum=None, frame=None. It usually means one child failed.\n"
                  "[2026-06-29 14:45:57] Sleeping 5 seconds before crash diagnostics to let GPU activity settle.\n"
                  "[2026-06-29 14:46:02] No live scheduler processes found; skipping py-spy and CUDA coredump.\n"
                  "[2026-06-29 14:46:02] kill_process_tree called: parent_pid=71581, include_parent=True, pid=71581\n")
    assert s.coverage.lines_unrecognised == 0 and s.outcome == "crashed"


def test_a_process_title_of_several_parts_names_the_rank_as_its_prefix_writes_it() -> None:
    """real-unseen 1103: C++ frames '(0x5d543b in sglang::scheduler_PP1_ATTN_CP4_TP4)', then an abort."""
    s = summarize("frame #21: PyEval_EvalCode + 0x15b (0x5d543b in sglang::scheduler_PP1_ATTN_CP4_TP4)\n"
                  "frame #28: _start + 0x25 (0x6576c5 in sglang::scheduler_PP1_ATTN_CP4_TP4)\n"
                  "\n"
                  "Fatal Python error: Aborted\n")
    assert s.crash is not None and s.crash.first_rank == "PP1 ATTN_CP4 TP4"
    assert not any("_" in label.replace("ATTN_CP", "") for label in s.per_rank)


def test_torchs_logged_cuda_error_in_a_paste_with_an_empty_line_after_every_line() -> None:
    """real-unseen 1107: the watchdog's record, c10's advice lines and the stack's header, each
    followed by an empty line: still the record's C++ exception, on the rank it names."""
    lines = ["[rank6]:[E1113 23:24:11.476061221 ProcessGroupNCCL.cpp:2068] [PG ID 2 PG GUID 3 Rank 6] Process group "
             "watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered",
             "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
             "might be incorrect.",
             "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
             "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
             "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:42 (most "
             "recent call first):"]
    s = summarize("\n\n".join(lines) + "\n")
    assert s.crash is not None and s.crash.line == 1 and s.crash.first_rank == "rank6"


def test_torchs_global_rank_takes_no_phase_from_the_servers_answers() -> None:
    """real-unseen 1160: a probe answered, then torch's '[rank4]:' watchdog record of a CUDA error:
    nothing ties rank 4 to the server's answers or to any SGLang process's phase."""
    s = summarize('[2025-02-20 06:32:20] INFO:     127.0.0.1:40220 - "GET /health HTTP/1.1" 200 OK\n'
                  "[rank4]:[E220 06:32:24.828983440 ProcessGroupNCCL.cpp:1595] [PG ID 2 PG GUID 3 Rank 4] Process "
                  "group watchdog thread terminated with exception: CUDA error: an illegal memory access was "
                  "encountered\n"
                  "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43 (most "
                  "recent call first):\n")
    assert s.crash is not None and s.crash.first_rank == "rank4" and s.crash.phase is None


@pytest.mark.parametrize("frame,phase", [("event_loop_overlap", "serving"), ("load_model", "kv_cache_alloc")])
def test_a_rank_that_fails_in_its_event_loop_shows_its_peers_serving(frame: str, phase: str) -> None:
    """TP ranks run each batch together (its collectives): TP1's failure in its event loop shows
    TP0, whose lines end at its KV pool (SGLang logs batches on one rank), serving too, not
    stopped before serving (real-pairs 017); a failure in start-up moves no other rank."""
    s = summarize("[2025-11-22 16:19:56 TP1] Memory pool end. avail mem=31.82 GB\n"
                  "[2025-11-22 16:19:56 TP0] Memory pool end. avail mem=31.83 GB\n"
                  "[2025-11-22 16:20:03 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
                  '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2826, in '
                  f"{frame}\n"
                  "    batch_result = self.run_batch(batch)\n"
                  "AttributeError: 'tuple' object has no attribute 'shape'\n")
    assert s.crash is not None and s.crash.first_rank == "TP1"
    assert s.per_rank["TP0"].phase_reached == phase


def test_the_kv_allocator_s_logged_error_is_a_failure_while_serving() -> None:
    """SGLang's KV allocator logs 'Out of memory. Try to lower your batch size.' as it gives a
    batch its token slots, then raises it: the first fatal record is in serving, whatever the
    process's last record was (a weight-loading bar, real-unseen 1234)."""
    s = summarize("Multi-thread loading shards: 100% Completed | 1/1 [00:00<00:00,  1.70it/s]\n"
                  "[2026-07-27 11:09:06] Out of memory. Try to lower your batch size.\n"
                  "Try to allocate 1024 tokens.\n"
                  "Available tokens: 0 (available_size=0 + evictable_size=0)\n")
    assert s.crash is not None and s.crash.line == 2 and s.crash.phase == "serving"


def test_a_request_an_offline_engine_rejects_fails_its_script_while_serving() -> None:
    """Engine.generate hands the request to TokenizerManager.generate_request, which validates
    it: a ValueError there ends the script (real-unseen 1235), in serving, not in no phase."""
    s = summarize("Traceback (most recent call last):\n"
                  '  File "/w/bench.py", line 632, in <module>\n    main()\n'
                  '  File "/w/sglang/srt/entrypoints/engine.py", line 347, in generate\n'
                  "    ret = self.loop.run_until_complete(generator.__anext__())\n"
                  '  File "/w/sglang/srt/managers/tokenizer_manager.py", line 527, in generate_request\n'
                  "    async for response in self._handle_batch_request(obj, request):\n"
                  '  File "/w/sglang/srt/managers/tokenizer_manager.py", line 808, in _validate_one_request\n'
                  "    raise ValueError(\n"
                  "ValueError: The input (965526 tokens) is longer than the model's context length (102400 tokens).\n")
    assert s.crash is not None and (s.crash.exception, s.crash.phase) == ("ValueError", "serving")


@pytest.mark.parametrize("labels,torch_rank,label", [
    (["TP0", "TP1"], "rank1", "TP1"),
    (["TP0", "TP1"], "rank5", "TP5"),  # a pure-TP run: TP rank N, shown or not
    (["DP0 TP0 EP0", "DP15 TP15 EP15"], "rank15", "DP15 TP15 EP15"),  # DP attention shares the TP group
    (["PP0 TP0", "PP1 TP0"], "rank1", None),  # a later stage: its global rank needs the TP size
    (["DP0 TP1", "DP1 TP1"], "rank1", None),  # data-parallel replicas: two processes are TP1
    (["-"], "rank0", None),
])
def test_torch_s_global_rank_is_the_label_whose_tp_part_it_is(labels: list[str], torch_rank: str,
                                                                label: str | None) -> None:
    from logforensics.model.rank import torch_rank_label
    assert torch_rank_label(labels, torch_rank) == label


def test_a_c10d_record_of_a_dp_attention_rank_is_that_rank_not_another() -> None:
    """torch's '[rank15]:' C++ record in a DP-attention run is DP15 TP15 EP15's, not a 17th
    process beside the 16 the log names (real-pairs 021)."""
    s = summarize("".join(f"[2025-12-24 01:08:54 DP{i} TP{i} EP{i}] Load weight begin. avail mem=60.80 GB\n"
                          for i in range(16))
                  + "[rank15]:[E1224 01:10:13.123 ProcessGroupNCCL.cpp:1234] [PG 0 Rank 15] Process group watchdog "
                    "thread terminated with exception: CUDA error: an illegal memory access was encountered\n")
    assert "rank15" not in s.ranks and len(s.ranks) == 16


@pytest.mark.parametrize("algorithm,second,begin", [("'EAGLE3'", "Qwen3MoeForCausalLM", 60.8),
                                                     ("None", "LlamaForCausalLMEagle3", 60.8),
                                                     ("None", "Qwen3MoeForCausalLM", 8.98)])
def test_a_draft_worker_s_own_init_does_not_make_its_load_the_target_s(algorithm: str, second: str,
                                                                       begin: float) -> None:
    """An EAGLE draft worker logs its own 'Init torch distributed begin' before its weights load
    (real-pairs 020-022): where the settings name a speculative algorithm, a load after the
    rank's KV pool is the draft's, kept apart, as a load of another model class is; without
    either it is a restart's, read anew."""
    s = summarize(f"[2025-12-26 23:04:18] server_args=ServerArgs(model_path='Qwen/Qwen3-235B', "
                  f"speculative_algorithm={algorithm}, tp_size=1)\n"
                  "[2025-12-26 23:04:43 TP0] Load weight begin. avail mem=60.80 GB\n"
                  "[2025-12-26 23:09:00 TP0] Load weight end. type=Qwen3MoeForCausalLM, dtype=torch.bfloat16, "
                  "avail mem=37.02 GB, mem usage=23.78 GB.\n"
                  "[2025-12-26 23:09:00 TP0] KV Cache is allocated. #tokens: 135296, K size: 12.14 GB, V size: 12.14 GB\n"
                  "[2025-12-26 23:09:00 TP0] Memory pool end. avail mem=12.72 GB\n"
                  "[2025-12-26 23:09:37 TP0] Init torch distributed begin.\n"
                  "[2025-12-26 23:09:37 TP0] Load weight begin. avail mem=8.98 GB\n"
                  f"[2025-12-26 23:09:39 TP0] Load weight end. type={second}, dtype=torch.bfloat16, "
                  "avail mem=6.31 GB, mem usage=2.68 GB.\n")
    mem = s.per_rank["TP0"].memory
    assert mem.load_begin_avail_gib == begin


def test_what_to_collect_after_a_logged_cpp_exception_asks_for_its_end_only_when_it_is_missing() -> None:
    """A rank's logged C++ exception, then its Python traceback (real-pairs 021): what became of
    the C++ exception is in the log, so the full log is not asked for it; alone, it is."""
    from logforensics.diagnose.conclusion import _collect
    from logforensics.diagnose.facts import compute

    record = ("[rank1]:[W1119 17:59:26.271588084 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=61): "
              "Failed to recv, got 0 bytes.\n"
              "Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:682 (most recent "
              "call first):\n"
              "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x80 (0x7090b977eeb0 in libc10.so)\n")
    python = ("[2025-11-19 17:59:27 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
              '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2547, in run_scheduler_process\n'
              "    scheduler.event_loop_overlap()\n"
              "torch.distributed.DistBackendError: Failed to recv, got 0 bytes.\n")
    for text, asked in ((record, True), (record + python, False)):
        s = summarize(text)
        assert s.crash is not None and s.crash.source == "cpp_exception"
        asks = any("what became of the C++ exception" in c for c in _collect(s, compute(s, None)))
        assert asks is asked


def test_a_container_banner_s_sglang_version_is_the_run_s() -> None:
    """NVIDIA's SGLang container prints 'SGLang Version 0.5.11+05fb6a52' in its banner (real-pairs
    025-027): the log shows the version."""
    s = summarize("============\n== SGLang ==\n============\n\nNVIDIA Release 26.05 (build 320256704)\n"
                  "SGLang Version 0.5.11+05fb6a52\n")
    assert s.versions.get("sglang") == "0.5.11+05fb6a52"


def test_a_failure_after_a_phase_s_last_end_line_is_in_no_phase_its_lines_name() -> None:
    """A rank whose last phase record is the phase's end line had left the phase, whichever of
    its pools that line ends (a draft model's second 'Memory pool end', real-pairs 025), and a
    weight-loading bar drawn before it does not keep it there."""
    s = summarize("Multi-thread loading shards: 100% Completed | 1/1 [00:00<00:00,  1.19it/s]\n"
                  "[2026-06-12 04:58:29] Load weight end. elapsed=1.76 s, type=Gemma4ForCausalLM, avail mem=63.18 GB, "
                  "mem usage=0.17 GB.\n"
                  "[2026-06-12 04:58:29] KV Cache is allocated. #tokens: 64, K size: 0.00 GB, V size: 0.00 GB\n"
                  "[2026-06-12 04:58:29] Memory pool end. avail mem=63.18 GB\n"
                  "[2026-06-12 04:58:29] KV Cache is allocated. #tokens: 64, K size: 0.00 GB, V size: 0.00 GB\n"
                  "[2026-06-12 04:58:29] Memory pool end. avail mem=63.10 GB\n"
                  "/opt/pytorch/aten/src/ATen/native/cuda/IndexKernelUtils.cu:16: vectorized_gather_kernel: block: "
                  "[34,0,0], thread: [0,0,0] Assertion `ind >=0 && ind < ind_dim_size` failed.\n")
    assert s.crash is not None and s.crash.phase is None


WATCHDOG_DEATH = ("[rank14]:[E319 05:16:21.789822241 ProcessGroupNCCL.cpp:1595] [PG ID 2 PG GUID 3 Rank 14] Process "
                  "group watchdog thread terminated with exception: CUDA error: an illegal memory access was "
                  "encountered\n"
                  "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
                  "below might be incorrect.\n")


def test_the_nccl_watchdog_s_death_of_another_error_is_the_rank_s_crash() -> None:
    """torch's record of its NCCL watchdog thread dying of a CUDA error ends the process (real-unseen
    1282): the first fatal record, on torch's rank, in no phase its record names; the C++ stack it
    logs after it, when the log holds it, is the same record, not a second."""
    s = summarize(WATCHDOG_DEATH)
    assert s.outcome == "crashed" and s.crash is not None
    assert (s.crash.line, s.crash.first_rank, s.crash.phase) == (1, "rank14", None)
    assert "illegal memory access" in s.outcome_reason
    stack = ("Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 (most "
             "recent call first):\n"
             "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f in libc10.so)\n")
    whole = summarize(WATCHDOG_DEATH + stack)
    assert whole.crash is not None and whole.crash.line == 1 and whole.crash.count == 1


@pytest.mark.parametrize("second,begin,weights", [("DFlashLagunaForCausalLM", 114.99, 92.96),
                                                  ("LagunaForCausalLM", 21.89, 2.75)])
def test_a_second_load_of_another_model_class_is_a_draft_s(second: str, begin: float, weights: float) -> None:
    """A second load before any KV pool (DFlash's draft, real-unseen 1290) whose end line names
    another model class is a draft model's: the target's figures stay; the same class is a reload,
    read anew."""
    s = summarize("[2026-08-01 22:06:28] Load weight begin. avail mem=114.99 GB\n"
                  "[2026-08-01 22:15:37] Load weight end. elapsed=548.90 s, type=LagunaForCausalLM, avail mem=22.03 GB, "
                  "mem usage=92.96 GB.\n"
                  "[2026-08-01 22:15:41] Init torch distributed begin.\n"
                  "[2026-08-01 22:15:41] Load weight begin. avail mem=21.89 GB\n"
                  f"[2026-08-01 22:15:54] Load weight end. elapsed=12.63 s, type={second}, avail mem=19.14 GB, "
                  "mem usage=2.75 GB.\n")
    mem = s.per_rank["-"].memory
    assert (mem.load_begin_avail_gib, mem.weights_gib) == (begin, weights)


def test_a_loading_bar_then_lines_not_read_names_no_next_phase(tmp_path: Path) -> None:
    """A 'Loading ...' bar complete, then stamped lines the grammar does not read (SGLang's
    diffusion runtime: its pipeline, its scheduler loop, a prompt; real-unseen 1462): what came
    after the bar is in those lines, so no next phase (kv_cache_alloc) is said to follow it."""
    bar = ("[12-31 12:00:32] Loaded scheduler: UniPCMultistepScheduler from customized. model size: 0.00 GB, "
           "avail mem: 181.00 GB\nLoading required modules: 100%|██████████| 5/5 [01:40<00:00, 20.13s/it]\n")
    after = "[12-31 12:00:32] Pipeline instantiated\n[12-31 12:00:32] Worker 0: Scheduler loop started.\n"
    log = tmp_path / "run.log"
    log.write_text(bar + after, encoding="utf-8")
    place = stop_place(summarize_file(str(log))) or ""
    assert place.startswith("at the end of load_weights (its progress bar at 5/5, line 2")
    assert place.endswith("; lines after it not read") and "before kv_cache_alloc" not in place
    log.write_text(bar, encoding="utf-8")
    assert (stop_place(summarize_file(str(log))) or "").endswith(", before kv_cache_alloc")


def test_the_http_server_s_bind_error_is_no_scheduler_s_and_no_native_failure(tmp_path: Path) -> None:
    """uvicorn logs its OSError ('[Errno 98] error while attempting to bind ...: address already in
    use') in a single-process log (real-unseen 1510): the HTTP server's record, not the unnamed
    scheduler's ('-'), and what it raised is said as uvicorn's logged error, not a native failure."""
    from logforensics.model.failures import native_exception_words
    from logforensics.render.terminal import render_crash

    log = tmp_path / "run.log"
    log.write_text("[2026-09-12 12:29:03] Prefill batch, #new-seq: 1, #new-token: 4, #cached-token: 0, token usage: 0.02, "
                   "#running-req: 0, #queue-req: 0\n[2026-09-12 12:29:03] INFO:     Application startup complete.\n"
                   "[2026-09-12 12:29:03] ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', "
                   "39321): address already in use\n", encoding="utf-8")
    s = summarize_file(str(log))
    assert s.crash is not None and s.crash.first_rank is None and s.crash.ranks == []
    # (SGLang starts its HTTP server before the warm-up request: a custom warm-up's batch before it
    # puts the run in no serving phase the failure is in)
    assert s.crash.phase == "warmup"
    assert "uvicorn logged its OSError" in native_exception_words(s.crash.source)
    from rich.console import Console
    console = Console(width=200, record=True)
    console.print(render_crash(s.crash))
    text = console.export_text()
    assert "a native failure" not in text and "uvicorn logged its OSError" in text


def test_a_frames_code_line_and_its_carets_under_a_wrappers_text_begin_the_traceback() -> None:
    # a wrapper's words, then the tail of a traceback: a frame's code line with the carets Python
    # 3.11+ prints under it, its File line above the tail, then the frames below it
    s = summarize("waiting for die 0 to come back to idle...\n"
                  "FAILED:\n"
                  "    decode = capture_decode_graph(model_runner=model_runner)\n"
                  "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
                  '  File "/sgl/python/sglang/srt/model_executor/cuda_graph_runner.py", line 478, in capture\n'
                  "    runner = CudaGraphRunner(model_runner)\n"
                  "RuntimeError: capture failed\n")
    assert s.crash is not None and s.crash.line == 3 and s.crash.exception == "RuntimeError"


def _stalled_warmup(minutes: int, rank_line_after: bool = False) -> str:
    """A decode server up to its PD warm-up request, then only the health check refused, once a
    minute for ``minutes`` minutes (SGLang's /health answers 503 until the warm-up is answered)."""
    lines = ["[2026-07-28 09:40:00 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
             "avail mem=60.00 GB, mem usage=20.00 GB.",
             "[2026-07-28 09:46:00 TP0] Capture cuda graph end. Time elapsed: 30.00 s. mem usage=2.00 GB. "
             "avail mem=30.00 GB.",
             "[2026-07-28 09:47:22] INFO:     Uvicorn running on http://10.0.0.1:30001 (Press CTRL+C to quit)",
             '[2026-07-28 09:47:23] INFO:     10.0.0.2:48000 - "GET /model_info HTTP/1.1" 200 OK',
             "[2026-07-28 09:47:23] Start of pd disaggregation warmup ..."]
    for i in range(minutes):
        lines.append(f'[2026-07-28 {9 + (48 + i) // 60:02d}:{(48 + i) % 60:02d}:17] INFO:     10.0.0.3:3756{i % 10} - '
                     '"GET /health HTTP/1.1" 503 Service Unavailable')
        if rank_line_after and i == 1:
            lines.append("[2026-07-28 09:49:30 TP0] Try DeepGEMM JIT Compiling for <GEMM_NT_F8F8BF16> N=1024, "
                         "K=4096, num_groups=1 with all Ms. It only takes a little time (typically 1 sec) if you have "
                         "run `python3 -m sglang.compile_deep_gemm`.")
    return "\n".join(lines) + "\n"


def test_a_warm_up_that_never_ends_while_health_is_refused_is_a_hang_without_a_timer() -> None:
    s = summarize(_stalled_warmup(8))
    assert s.outcome == "hung" and s.crash is None
    assert s.hang is not None and s.hang.timer == "no_progress" and s.hang.phase == "warmup"
    assert s.hang.first_line == 6 and [e.line for e in s.hang.evidence] == [5, 6]
    assert "no progress after 'Start of pd disaggregation warmup ...' (line 5)" in s.outcome_reason
    assert "GET /health 503, 8 times" in s.outcome_reason and "7 min 00 s" in s.outcome_reason


@pytest.mark.parametrize("text", [_stalled_warmup(4), _stalled_warmup(8, rank_line_after=True)])
def test_refusals_for_less_than_the_watchdog_s_wait_or_with_a_rank_going_on_are_no_hang(text: str) -> None:
    s = summarize(text)
    assert s.outcome == "incomplete" and s.hang is None


def test_a_stall_asks_whether_the_schedulers_still_live() -> None:
    from logforensics.diagnose.serving_facts import timer_facts

    steps = [s.setting for s in timer_facts(summarize(_stalled_warmup(8))).next_steps]
    assert steps[0].startswith("py-spy dump") and steps[1].startswith("ps -eo pid,ppid,stat")


def test_the_verdict_names_the_exception_right_before_the_last_of_a_chain(tmp_path: Path) -> None:
    """A build error's chain (real-pairs 077, FlashInfer's JIT): CalledProcessError is the direct
    cause of a RuntimeError, during whose handling the scheduler raised Exception. The last was
    raised while handling the RuntimeError, not the CalledProcessError two links up."""
    from logforensics.pipeline import diagnose_files

    crash = ("[2026-06-07 18:49:51] Scheduler hit an exception: Traceback (most recent call last):\n"
             '  File "/x/flashinfer/jit/cpp_ext.py", line 342, in run_ninja\n'
             "    subprocess.run(\n"
             "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.\n\n"
             "The above exception was the direct cause of the following exception:\n\n"
             "Traceback (most recent call last):\n"
             '  File "/x/flashinfer/jit/cpp_ext.py", line 354, in run_ninja\n'
             "    raise RuntimeError(msg) from e\n"
             "RuntimeError: Ninja build failed. Ninja output:\n\n"
             "During handling of the above exception, another exception occurred:\n\n"
             "Traceback (most recent call last):\n"
             '  File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 716, in __init__\n'
             "    raise Exception(\n"
             "Exception: Capture cuda graph failed: Ninja build failed. Ninja output:\n")
    base = tmp_path / "baseline.log"
    base.write_text(SERVING)
    fail = tmp_path / "failing.log"
    fail.write_text(crash)
    report = diagnose_files(str(fail), str(base))
    assert "Exception (raised while handling RuntimeError)" in report.verdict
    assert "CalledProcessError" not in report.verdict


def test_what_fails_after_a_crash_and_the_launchers_notice_is_no_error_of_its_own() -> None:
    """real-pairs 085: the scheduler's exception, the launcher's 'SIGQUIT received ... one child
    failed', then the HTTP server's tasks cancelled as the server goes down (asyncio's
    CancelledError traceback): no error logged beside the crash, nothing that 'explains what fails later'."""
    cancelled = ("[2026-09-20 15:33:27] ERROR:    Exception in ASGI application\n"
                 "Traceback (most recent call last):\n"
                 '  File "/usr/lib/python3.12/asyncio/runners.py", line 118, in run\n'
                 "    return self._loop.run_until_complete(task)\n"
                 "asyncio.exceptions.CancelledError\n")
    s = summarize(SERVING + SCHEDULER_CRASH + PARENT_QUIT + cancelled)
    assert s.outcome == "crashed" and s.errors == []
    logged = "[2026-09-20 15:29:00 TP0] Failed to initialize lk_moe: CUDA out of memory. Tried to allocate 24.00 MiB.\n"
    before = summarize(SERVING + logged + SCHEDULER_CRASH + PARENT_QUIT + cancelled)
    assert [e.line for e in before.errors] == [len(SERVING.splitlines()) + 1]  # logged before the failure: kept


def test_a_soft_watchdog_during_start_up_that_goes_on_is_no_hang() -> None:
    """SGLang's soft watchdog dumps and the server goes on: start-up records after it (weights,
    graph capture) show the run did not end there (real-unseen 1751)."""
    text = ("[2026-03-27 20:52:54] TokenizerManager watchdog timeout (self.watchdog_timeout=300, self.soft=True)\n"
            "[2026-03-27 20:54:20] Load weight begin. avail mem=78.50 GB\n"
            "[2026-03-27 20:54:25] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, "
            "avail mem=70.10 GB, mem usage=8.40 GB.\n")
    s = summarize(text)
    assert s.outcome == "incomplete", s.outcome_reason


def test_a_health_check_failed_then_only_probes_answered_is_still_a_hang() -> None:
    """The HTTP server answers /v1/models whatever the schedulers do: answered probes after a
    failed health check are no progress of the run (real-unseen 431)."""
    text = ('[2025-08-29 11:56:24] INFO:     10.0.0.1:61226 - "GET /v1/models HTTP/1.1" 200 OK\n'
            "[2025-08-29 11:56:28] Health check failed. Server couldn't get a response from detokenizer for last "
            "20 seconds. tic start time: 11:56:08. last_heartbeat time: 11:55:40\n"
            '[2025-08-29 11:56:34] INFO:     10.0.0.1:23880 - "GET /v1/models HTTP/1.1" 200 OK\n')
    assert summarize(text).outcome == "hung"


_READ_TIMEOUT = ("Traceback (most recent call last):\n"
                 '  File "/usr/local/lib/python3.10/dist-packages/httpx/_transports/default.py", line 69, in map\n'
                 "    yield\n"
                 "httpx.ReadTimeout: The read operation timed out\n")


@pytest.mark.parametrize("after", [
    # SGLang's retry() after the exception it printed (utils/common.py)
    "retry() failed once (0th try, maximum 2 retries). Will delay 0.85s and retry. Error: The read operation timed out\n",
    # a request answered with an error (the traceback was that request's)
    "[2026-02-19 19:28:07] Error in request: An exception occurred while loading IMAGE data at index 0: timed out\n",
])
def test_a_traceback_its_code_caught_and_went_on_from_is_no_crash(after: str) -> None:
    s = summarize("[2026-02-19 19:28:00] Load weight begin. avail mem=78.50 GB\n" + _READ_TIMEOUT + after)
    assert s.outcome != "crashed" and s.crash is None, s.outcome_reason
    assert any(e.exception == "httpx.ReadTimeout" for e in s.errors)


def test_a_record_logging_could_not_write_is_no_crash_of_the_process() -> None:
    """Python logging's handleError: '--- Logging error ---', the failed write's traceback, then the
    call that logged under 'Call stack:'. The child's failure the parent reported is the crash
    (real-unseen 1755)."""
    text = ("[2025-05-30 08:01:05] Child process unexpectedly failed with an exit code 9. pid=3381688\n"
            "--- Logging error ---\n"
            "Traceback (most recent call last):\n"
            '  File "/usr/lib/python3.10/logging/__init__.py", line 1103, in emit\n'
            "    stream.write(msg + self.terminator)\n"
            "RuntimeError: reentrant call inside <_io.BufferedWriter name='<stderr>'>\n"
            "Call stack:\n"
            '  File "/sglang/python/sglang/srt/entrypoints/engine.py", line 516, in sigchld_handler\n'
            "    logger.warning(\n"
            "Message: 'Child process unexpectedly failed with an exit code %d. pid=%d'\n"
            "Arguments: (9, 3381688)\n")
    s = summarize(text)
    assert s.outcome == "crashed" and s.crash is not None
    assert s.crash.exception is None and s.crash.line == 1


def test_logging_s_traceback_with_another_writer_s_lines_between_is_no_crash() -> None:
    """The write failed because another writer held stderr, whose lines come between logging's
    '--- Logging error ---' and its traceback (real-unseen 1765)."""
    text = ("--- Logging error ---\n"
            "[2025-03-30 21:08:08] Child process unexpectedly failed with an exit code 9. pid=1915825\n"
            "Traceback (most recent call last):\n"
            '  File "/usr/lib/python3.9/logging/__init__.py", line 1086, in emit\n'
            "    stream.write(msg + self.terminator)\n"
            "RuntimeError: reentrant call inside <_io.BufferedWriter name='<stderr>'>\n")
    s = summarize(text)
    assert s.crash is None or s.crash.exception != "RuntimeError", s.outcome_reason


def test_a_weight_update_places_its_rank_in_serving_and_a_rankless_one_none() -> None:
    """'Update weights begin.' and 'Failed to update weights: ...' are a running server's: the
    bars of the reload are no weight loading of a start-up (real-unseen 1761, 1769); a line that
    names no rank places no process (766)."""
    text = ("[2024-11-08 06:16:50 TP0] Update weights begin. avail mem=4.97 GB\n"
            "Loading safetensors checkpoint shards:   0% Completed | 0/2 [00:00<?, ?it/s]\n"
            "[2024-11-08 06:16:51 TP0] Failed to update weights: The size of tensor a (2048) must match the size "
            "of tensor b (3072) at non-singleton dimension 1.\n"
            "Rolling back to original weights.\n")
    assert summarize(text).phase_reached == {"TP0": "serving"}
    rankless = summarize("Failed to update parameter online: start (256) + length (256) exceeds dimension size (256)..\n")
    assert rankless.phase_reached == {}


def test_the_stack_of_a_store_check_torch_logged_as_a_warning_is_no_crash() -> None:
    """torch's heartbeat monitor checks the rendezvous store and logs a failed check as a warning
    with its stack: the launcher's traceback after it is the first failure (real-unseen 1772)."""
    text = ("frame #2: c10d::TCPStore::check(std::vector<std::string> const&) + 0x2b5 (0x7cdedf3 in libtorch_cpu.so)\n"
            "frame #3: c10d::ProcessGroupNCCL::HeartbeatMonitor::runLoop() + 0x4a5 (0x7cdedf552935 in libtorch_hip.so)\n"
            "frame #4: <unknown function> + 0xecdb4 (0x7ce57d0c6db4 in /lib/x86_64-linux-gnu/libstdc++.so.6)\n"
            "\n"
            "[2026-08-25 10:26:44] kill_process_tree called: parent_pid=8114, include_parent=False, pid=8114\n"
            "Traceback (most recent call last):\n"
            '  File "/sgl-workspace/sglang/python/sglang/srt/entrypoints/engine.py", line 1787, in '
            "_wait_for_scheduler_ready\n"
            "    data = scheduler_pipe_readers[i].recv()\n"
            "EOFError\n")
    s = summarize(text)
    assert s.outcome == "crashed" and s.crash is not None and s.crash.line == 6, s.outcome_reason
