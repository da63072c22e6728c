"""The crash panel's innermost frames are the cause's in a chained traceback."""

from __future__ import annotations

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
