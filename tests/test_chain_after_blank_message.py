"""A chained traceback whose first exception's message ends in a newline.

``RuntimeError("\\n".join(msg))`` with an empty last item (tvm_ffi's ninja build error, a
compiler's output) prints its message and an empty line; Python then prints its own empty
line, ``During handling of the above exception, another exception occurred:``, an empty
line and the next ``Traceback (most recent call last):``. The two empty lines before the
chain line are the message's and Python's, not the end of the record: the second traceback
is the same record's (the same rank's), and the first has its exception line.
"""

from __future__ import annotations

from logforensics import summarize_file
from logforensics.read.parser import IncrementalParser

# Python's traceback.format_exception for a chain, the first message ending in "\n"
CHAINED = """[2026-03-05 10:24:01 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/srt/model_executor/cuda_graph_runner.py", line 370, in __init__
    self.capture()
  File "/sgl/jit_kernel/utils.py", line 162, in load_jit
    return load_inline(
  File "/site-packages/tvm_ffi/cpp/extension.py", line 542, in build_ninja
    raise RuntimeError("\\n".join(msg))
RuntimeError: ninja exited with status 1
stdout:
ninja: build stopped: subcommand failed.


During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/sgl/srt/managers/scheduler.py", line 3130, in run_scheduler_process
    scheduler = Scheduler(
  File "/sgl/srt/model_executor/model_runner.py", line 2156, in init_device_graphs
    self.graph_runner = graph_runners[self.device](self)
  File "/sgl/srt/model_executor/cuda_graph_runner.py", line 372, in __init__
    raise Exception(
Exception: Capture cuda graph failed: ninja exited with status 1
stdout:
ninja: build stopped: subcommand failed.

[2026-03-05 10:24:01] Received sigquit from a child process. It usually means the child failed.
"""


def _exceptions(text: str) -> list:
    parser = IncrementalParser("t.log")
    return [e for e in parser.feed(text.encode()) + parser.close() if e.kind == "exception"]


def test_the_chain_after_two_empty_lines_continues_the_record() -> None:
    excs = _exceptions(CHAINED)
    assert len(excs) == 1, [(e.line, e.rank, e.fields["exception"]) for e in excs]
    ev = excs[0]
    assert (ev.line, ev.rank, ev.fields["exception"]) == (1, "TP1", "Exception")
    assert [link["exception"] for link in ev.fields["chain"]] == ["RuntimeError"]


def test_the_summary_names_one_traceback_with_its_exception(tmp_path) -> None:
    log = tmp_path / "chain.log"
    log.write_text(CHAINED)
    s = summarize_file(log)
    assert s.crash is not None and (s.crash.exception, s.crash.first_rank, s.crash.line) == ("Exception", "TP1", 1)
    assert [(x.exception, x.ranks) for x in s.exceptions] == [("Exception", ["TP1"])]
