"""Text other programs put before SGLang's lines is a wrapper, removed before the grammar
reads the record; a library's own tag before its own message is that library's record."""

from __future__ import annotations

import pytest

from logforensics.read.parser import IncrementalParser


def _events(text: str) -> list[tuple[str, str | None]]:
    parser = IncrementalParser("wrapped.log")
    return [(e.kind, e.rank) for e in parser.feed(text.encode() + b"\n") + parser.close()]


@pytest.mark.parametrize(("line", "want"), [
    # a test script quoting the server's log under its tag, indented or before a prefix
    ("[pd-test]   Memory access fault by GPU node-6 (Agent handle: 0x56267ff28070) on address "
     "0x7f321b3f1000. Reason: Unknown.", ("hsa_fault", None)),
    ("[pd-test]   [2025-12-04 16:26:09 TP3] Watchdog timeout (self.watchdog_timeout=180.0)",
     ("watchdog_timeout", "TP3")),
    ("[nightly] [2025-12-04 16:26:09 TP3] Watchdog timeout (self.watchdog_timeout=180.0)",
     ("watchdog_timeout", "TP3")),
    # a Markdown code fence glued to the first line of a paste; an inline code span's stray backtick,
    # a space after it (real-unseen 1120)
    ("` [2025-05-28 04:24:31] Child process unexpectedly failed with an exit code 131. pid=247",
     ("child_failed", None)),
    ("```[2025-12-04 16:26:09 TP3] Watchdog timeout (self.watchdog_timeout=180.0)", ("watchdog_timeout", "TP3")),
    # a paste indented as a whole (a Markdown list's code block): a rank's prefix alone, a pool's check
    ("  [TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", ("watchdog_timeout", "TP0")),
    ("  [swa]  total=193792,  available=768, evictable=188928,  protected=0, session_held=0, uncached=0",
     ("pool_check", None)),
    # a kernel library's own logger: its tag is its record's, not a wrapper
    ("[aiter] import [module_quant] under /sgl-workspace/aiter/aiter/jit/module_quant.so", ("lib_log", None)),
])
def test_a_tag_before_quoted_lines_is_a_wrapper(line: str, want: tuple[str, str | None]) -> None:
    assert _events(line) == [want]


def test_a_parent_logging_its_childs_traceback_line_by_line() -> None:
    """Python logging's default format before each line of a child's traceback (a parent that logs
    its child's output): the traceback is read behind it; the parent's own record is its own."""
    prefix = "2025-04-03 12:06:29,949 - __main__ - INFO - "
    text = "\n".join(prefix + line for line in (
        "Traceback (most recent call last):",
        '  File "/x/sglang/srt/model_executor/model_runner.py", line 306, in load_model',
        "    self.model = get_model(",
        "                 ^^^^^^^^^^",
        "RuntimeError: CUDA error: out of memory",
    ))
    (event,) = [e for e in _events(text) if e[0] != "blank"]
    assert event == ("exception", None)
    assert _events(prefix + "Starting the server at port 30000") == [("std_log", None)]


@pytest.mark.parametrize("tag", ["Thu Jan 23 11:55:50 2025[1,1]<stderr>:", "[1,0]<stdout>:"])
def test_open_mpis_output_tag_before_each_line_of_a_traceback(tag: str) -> None:
    """mpirun --tag-output ("[job,rank]<stderr>:"), after --timestamp-output's date: one traceback
    is read behind it, and MPI's rank names no scheduler rank."""
    text = "\n".join(tag + line for line in (
        "Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1796, in run_scheduler_process',
        "    scheduler.event_loop_overlap()",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ))
    assert [e for e in _events(text) if e[0] != "blank"] == [("exception", None)]


def test_the_container_runtimes_prefix_on_an_empty_line_is_no_text_of_the_record() -> None:
    """CRI's "<stamp> stderr F" with nothing after it (an empty line of the container's output) is
    the wrapper alone: it ends an exception's message as an empty line does (real-unseen 1083)."""
    from logforensics.read.parser import IncrementalParser

    parser = IncrementalParser("pod.log")
    text = ("2026-06-24T17:38:03.765654176+02:00 stderr F Traceback (most recent call last):\n"
            '2026-06-24T17:38:03.765654176+02:00 stderr F   File "/x/sglang/srt/models/qwen3.py", line 9, in f\n'
            "2026-06-24T17:38:03.765654176+02:00 stderr F RuntimeError: shape is invalid\n"
            "2026-06-24T17:38:03.765655491+02:00 stderr F\n")
    [ev] = [e for e in parser.feed(text.encode()) + parser.close() if e.kind == "exception"]
    assert ev.fields["message"] == "shape is invalid"


def test_a_drivers_stamp_before_rays_wrapper_and_a_node_name_for_its_address() -> None:
    """real-unseen 1093: '[2025-05-10 00:18:21] (WorkerDict pid=1230, ip=train-...-worker-0) [rank15]:[E510 ...]':
    the stamp and Ray's wrapper are the wrapper; the node is the name Ray gives for the address."""
    from logforensics.read.parser import IncrementalParser

    parser = IncrementalParser("driver.log")
    line = ("[2025-05-10 00:18:21] (WorkerDict pid=1230, ip=train-9zzm714v3bpc-worker-0) [rank15]:[E510 "
            "00:18:19.328053719 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=3, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800001 "
            "milliseconds before timing out.\n")
    events = parser.feed(line.encode()) + parser.close()
    assert [(e.kind, e.node) for e in events] == [("collective_timeout", "train-9zzm714v3bpc-worker-0")]


def test_a_log_collectors_stamp_and_program_path_before_each_line_of_a_traceback() -> None:
    """A collector's own stamp and the program whose output it took ("[stamp] [/bin/sh]: ") before
    every line: the rank's traceback is read behind it, frames and all (real-unseen 1770)."""
    tag = "[2026-06-29 17:44:04] [/bin/sh]: "
    text = "\n".join(tag + line for line in (
        "[2026-06-29 09:44:04 PP1 TP3] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3170, in run_scheduler_process',
        "    scheduler.event_loop_pp()",
        "RuntimeError: boom",
    ))
    parser = IncrementalParser("wrapped.log")
    events = [e for e in parser.feed(text.encode() + b"\n") + parser.close() if e.kind != "blank"]
    assert [(e.kind, e.rank) for e in events] == [("exception", "PP1 TP3")]
    assert [f["func"] for f in events[0].fields["frames"]] == ["run_scheduler_process"]
