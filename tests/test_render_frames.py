"""The crash panel's innermost frames are the cause's in a chained traceback."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from logforensics.model.summary import Crash
from logforensics.read.parser import IncrementalParser
from logforensics.render.terminal import render_crash

CHAINED = """[2025-03-01 14:03:07 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/model_executor/cuda_graph_runner.py", line 300, in capture
    self.capture_one_batch_size(bs, forward)
  File "/sgl/model_executor/cuda_graph_runner.py", line 380, in capture_one_batch_size
    out = run_once()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/sgl/managers/scheduler.py", line 1787, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
  File "/sgl/model_executor/cuda_graph_runner.py", line 310, in __init__
    raise Exception(f"Capture cuda graph failed: {e}")
Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 20.00 MiB.
"""


def test_chained_traceback_shows_the_cause_frames() -> None:
    parser = IncrementalParser("t.log")
    ev = [e for e in parser.feed(CHAINED.encode()) + parser.close() if e.kind == "exception"][0]
    crash = Crash.from_dict({**ev.fields, "file": "t.log", "line": ev.line, "end_line": ev.end_line, "text": ev.text})
    console = Console(width=200, record=True)
    console.print(render_crash(crash))
    out = console.export_text()
    assert "innermost frames of the cause (torch.OutOfMemoryError)" in out
    assert "capture_one_batch_size" in out and "run_scheduler_process" not in out


def test_a_native_failure_record_is_no_abort_unless_it_says_so(tmp_path: Path) -> None:
    """torch's watchdog detecting a collective's timeout (real-unseen 490) is a native failure
    record, not an abort: the panel says it has no Python exception and quotes what it says."""
    from logforensics import summarize_file
    log = tmp_path / "c10d.log"
    log.write_text("[rank4]:[E223 11:14:34.991860392 ProcessGroupNCCL.cpp:1785] [PG ID 2 PG GUID 3 Rank 4] "
                   "Exception (either an error or timeout) detected by watchdog at work: 91885, last enqueued "
                   "NCCL work: 91885, last completed NCCL work: 91884.\n")
    crash = summarize_file(log).crash
    assert crash is not None and crash.native
    console = Console(width=200, record=True)
    console.print(render_crash(crash))
    out = console.export_text()
    assert "exception: none (a native failure, no Python exception)" in out and "abort" not in out
    assert "collective failure detected by the watchdog" in out


def test_a_python_traceback_after_a_native_failure_is_no_native_crash(tmp_path: Path) -> None:
    """A device-side assertion, then the scheduler's traceback cut before its exception
    (real-unseen 516): the crash has a Python traceback, its exception not in the log; the
    assertion is what came first, and nothing says 'no Python exception' or 'abort'."""
    from logforensics import summarize_file
    log = tmp_path / "assert.log"
    log.write_text("/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1500: indexSelectSmallIndex: block: [32,0,0], "
                   "thread: [63,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n"
                   "[2025-06-13 09:59:00] Scheduler hit an exception: Traceback (most recent call last):\n"
                   '  File "/sgl/srt/managers/scheduler.py", line 2506, in run_scheduler_process\n'
                   "    scheduler.event_loop_normal()\n")
    s = summarize_file(log)
    crash = s.crash
    assert crash is not None and not crash.native and crash.line == 1 and crash.exception is None
    assert crash.first_message == "CUDA device-side assertion: srcIndex < srcSelectDimSize"
    assert s.outcome_reason.startswith("CUDA device-side assertion: srcIndex < srcSelectDimSize (then a traceback "
                                       "whose exception is not in this log (cut))")
    assert crash.fingerprint is not None and "abort" not in crash.fingerprint.exception
    console = Console(width=200, record=True)
    console.print(render_crash(crash))
    out = console.export_text()
    assert "first: CUDA device-side assertion" in out and "no Python exception" not in out


def test_a_crash_inside_an_optional_part_of_sglang_says_which(tmp_path: Path) -> None:
    """The innermost frame in one of SGLang's optional parts names it in CR01 (real-unseen 514:
    speculative decoding's grammar bitmask), with that frame; a crash in the scheduler's own
    code names none."""
    from logforensics.pipeline import diagnose_files
    head = "[2025-12-08 09:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    frames = ('  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1418, in run_event_loop\n'
              "    self.event_loop()\n"
              '  File "/sgl/python/sglang/srt/speculative/spec_utils.py", line 654, in generate_token_bitmask\n'
              "    bitmask = grammar.allocate()\n"
              '  File "/usr/lib/python3/site-packages/xgrammar/matcher.py", line 80, in allocate\n'
              "    return _alloc()\n"
              "RuntimeError: boom\n")
    for text, words in ((head + frames, ", in speculative decoding (spec_utils.py:654 in generate_token_bitmask): "),
                        (head + frames.split('  File "/sgl/python/sglang/srt/speculative')[0] + "RuntimeError: boom\n",
                         None)):
        log = tmp_path / "spec.log"
        log.write_text(text)
        cr01 = next(f for f in diagnose_files(str(log), None).findings if f.rule == "CR01")
        if words:
            assert words in cr01.title
        else:
            from logforensics.model.phases import COMPONENTS
            assert not any(words_of in cr01.title for _, words_of in COMPONENTS), cr01.title
