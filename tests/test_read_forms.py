"""Whole lines as real logs carry them: wrappers, prefixes of every line, fatal records.

``test_grammar.py`` checks what one record means; here a few physical lines go through
the parser (segmentation, grammar, fast path, traceback assembly) and the events must
say what the lines say: the rank, the frames and the exception of a traceback whose
every line carries a launcher's prefix, an out-of-memory message a terminal hard-wrapped,
a Ray de-duplication mark inside a traceback. The texts are shaped after the real
excerpts in ``fixtures/real`` (set 2) and ``sglang-log-formats.md`` section 6.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from logforensics import native
from logforensics.events import Event
from logforensics.read.parser import IncrementalParser

FRAME = '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1827, in run_scheduler_process'
CODE = "    scheduler.event_loop_normal()"


def read(text: str, chunk: int | None = None) -> list[Event]:
    """Events of ``text`` as the parser emits them (fed whole, or in chunks)."""
    parser = IncrementalParser("t.log")
    data = text.encode("utf-8")
    out: list[Event] = []
    step = chunk or len(data) or 1
    for i in range(0, len(data), step):
        out.extend(parser.feed(data[i:i + step]))
    return out + parser.close()


def kinds(events: list[Event]) -> list[str]:
    return [e.kind for e in events]


def only(events: list[Event], kind: str) -> Event:
    found = [e for e in events if e.kind == kind]
    assert len(found) == 1, kinds(events)
    return found[0]


def frames(ev: Event) -> list[Any]:
    return [f["func"] for f in ev.fields["frames"]]


# ---------------------------------------------------------------- wrappers
TRACEBACK = ["[2025-02-18 14:31:01 TP3] Scheduler hit an exception: Traceback (most recent call last):", FRAME, CODE,
             "RuntimeError: boom"]

WRAPPED = {
    "pm2": "3|qwen  | {}",
    "fastchat": "2024-06-02 00:26:10 | ERROR | stderr | {}",
    "docker-timestamps": "2025-03-08T12:29:13.123456789Z {}",
    "docker-timestamps-offset": "2025-03-08T12:29:13.123456789+00:00 {}",
    "k8s-cri": "2025-03-08T12:29:13.8443515Z stdout F {}",
    "kubectl-prefix": "[pod/sglang-0/sglang] {}",
    "docker-desktop": "2025-03-08 13:29:13 {}",
    "caret-ansi-ray": "^[[36m(WorkerDict pid=38869)^[[0m {}",
    "esc-less-ansi-ray": "[36m(WorkerDict pid=38869)[0m {}",
    "esc-ansi": "\x1b[36m(WorkerDict pid=38869)\x1b[0m {}",
    "skypilot": "(worker1, rank=1, pid=2345, ip=10.0.0.2) {}",
    # a Ray actor's name with a slash (AReaL's "model_worker/1")
    "ray-actor-slash": "(model_worker/1 pid=8551) {}",
    # a paste indented as a whole (outside a code fence), the Ray wrapper behind the indentation
    "indented-ray": "  (SGLangEngine pid=69916) {}",
    "literal-caret-M": "{}^M",
    "backtick": "`{}",
    # a cloud log export: severity and UTC time before every line of the record
    "cloud-logging-severity": "ERROR 2026-06-15T14:10:59.392125190Z {}",
    "cloud-logging-severity-ms": "INFO 2026-06-15T14:10:59.392Z {}",
    # the same export with the entry's severity field after the time (real-unseen 552)
    "cloud-logging-severity-field": "ERROR 2026-02-18T14:43:05.821451064Z [severity: ERROR] {}",
    # a log console's time column (Kibana's Discover export), the console's padding after it
    "console-time-column": "May 16, 2026 @ 20:44:54.728    {}",
    # journald, as journalctl prints a unit's lines (short, short-iso)
    "journald": "Aug 17 18:42:18 gpu-node-3 sglang[8052]: {}",
    "journald-day-padded": "Aug  7 18:42:18 gpu-node-3 python3[8052]: {}",
    "journald-short-iso": "2025-08-17T18:42:18+0000 gpu-node-3 sglang[8052]: {}",
    # Slurm's srun --label: the task's number, right-aligned to the widest
    "slurm-label": "0: {}",
    "slurm-label-padded": " 3: {}",
}


@pytest.mark.parametrize("name", WRAPPED)
def test_a_wrapped_traceback_reads_as_the_bare_one(name: str) -> None:
    """Every wrapper leaves the traceback's rank, frames and exception as without it."""
    bare = only(read("\n".join(TRACEBACK) + "\n"), "exception")
    fmt = WRAPPED[name]
    if name == "backtick":  # a stray inline-code backtick only ever starts the paste
        text = fmt.format(TRACEBACK[0]) + "\n" + "\n".join(TRACEBACK[1:]) + "\n"
    else:
        text = "\n".join(fmt.format(line) for line in TRACEBACK) + "\n"
    ev = only(read(text), "exception")
    assert (ev.rank, ev.ts, ev.fields["exception"], ev.fields["message"]) == \
        (bare.rank, bare.ts, "RuntimeError", "boom")
    assert ev.fields["frames"][0]["func"] == "run_scheduler_process"
    assert ev.fields["frames"][0]["code"] == "scheduler.event_loop_normal()"
    assert (ev.line, ev.end_line) == (1, 4)


def test_a_traceback_copied_out_of_a_json_string_keeps_its_frames() -> None:
    """A traceback copied from a JSON export keeps a backslash before each quote of its File
    lines (``File \\"/a.py\\", line 3, in f``): the frames are still frames, their paths
    without the backslash, so the scheduler's event loop places the crash while serving."""
    lines = [TRACEBACK[0], FRAME.replace('"', '\\"').strip(), "  " + CODE.strip(), TRACEBACK[3]]
    ev = only(read("\n".join(lines) + "\n"), "exception")
    assert ev.rank == "TP3" and ev.fields["exception"] == "RuntimeError"
    [frame] = ev.fields["frames"]
    assert (frame["path"], frame["line"], frame["func"]) == \
        ("/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", 1827, "run_scheduler_process")
    assert frame["code"] == "scheduler.event_loop_normal()"


def test_docker_logs_with_indentation_stripped() -> None:
    """``docker logs --timestamps`` pasted with the indentation lost: the source line still
    belongs to its frame."""
    lines = [TRACEBACK[0], FRAME.strip(), CODE.strip(), TRACEBACK[3]]
    ev = only(read("".join(f"2025-03-08T12:29:13.123456789Z {line}\n" for line in lines)), "exception")
    assert ev.rank == "TP3" and ev.fields["exception"] == "RuntimeError"
    assert ev.fields["frames"][0]["code"] == "scheduler.event_loop_normal()"


def test_fastchat_records_fused_by_padding_and_a_frame_wrapped_mid_word() -> None:
    """Two FastChat records on one physical line (padding spaces between them), and a
    frame line that a terminal broke inside the function name."""
    w = "2024-06-02 00:26:10 | ERROR | stderr | "
    text = (w + "Traceback (most recent call last):\n"
            + w + '  File "<frozen runpy>", line 88, in _run_code' + " " * 58
            + w + '  File "/x/FastChat/fastchat/serve/sglang_worker.py", line 298, in <module>\n'
            + w + "    runtime = sgl.Runtime(\n"
            + w + '  File "/x/site-packages/sglang/api.py", line 39, in R\n'
            + "untime\n"
            + w + "    return Runtime(*args, **kwargs)\n"
            + w + "ValueError: multiple log values\n")
    ev = only(read(text), "exception")
    assert frames(ev) == ["_run_code", "<module>", "Runtime"]
    assert ev.fields["frames"][1]["code"] == "runtime = sgl.Runtime("
    assert ev.fields["exception"] == "ValueError"


def test_log_viewer_stamp_glued_to_the_text() -> None:
    """``04-20 13:32:25.784  File ...``: the viewer's stamp, then the traceback's own indent."""
    lines = ['  File "/app/sglang/python/sglang/srt/managers/scheduler.py", line 3770, in run_scheduler_process',
             "    scheduler = Scheduler(", "                ^^^^^^^^^^",
             '  File "/app/sglang/python/sglang/srt/model_executor/model_runner.py", line 479, in __init__',
             "RuntimeError: x"]
    ev = only(read("".join(f"04-20 13:32:25.784{line}\n" for line in lines)), "exception")
    assert frames(ev) == ["run_scheduler_process", "__init__"]
    assert ev.fields["frames"][0]["code"] == "scheduler = Scheduler("
    assert ev.fields["exception"] == "RuntimeError"


def test_docker_desktop_stamp_keeps_sglang_prefix() -> None:
    evs = read("2025-03-08 13:29:13 [2025-03-08 12:29:13 TP2] Load weight begin. avail mem=21.63 GB\n")
    assert [(e.kind, e.rank, e.ts) for e in evs] == [("load_weight_begin", "TP2", "2025-03-08T12:29:13")]


# ---------------------------------------------------------------- prefixes of every line
def test_torch_rank_prefix_on_every_traceback_line() -> None:
    text = ("[rank1]: Traceback (most recent call last):\n"
            f"[rank1]: {FRAME}\n[rank1]: {CODE}\n"
            "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
            "[rank0]: Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:307 'invalid argument'\n")
    evs = read(text)
    ev = only(evs, "exception")
    assert ev.rank == "rank1" and ev.fields["exception"] == "RuntimeError" and (ev.line, ev.end_line) == (1, 4)
    assert ev.fields["frames"][0]["code"] == "scheduler.event_loop_normal()"
    abort = only(evs, "cpp_abort")
    assert abort.rank == "rank0" and abort.line == 5


def test_two_ranks_tracebacks_each_line_prefixed() -> None:
    """rank0's traceback, then rank1's: each keeps its own lines."""
    one = ["[rank{r}]: Traceback (most recent call last):", "[rank{r}]: " + FRAME, "[rank{r}]: " + CODE,
           "[rank{r}]: ValueError: bad {r}"]
    evs = read("\n".join([line.format(r=0) for line in one] + [line.format(r=1) for line in one]) + "\n")
    exc = [e for e in evs if e.kind == "exception"]
    assert [(e.rank, e.fields["message"], e.line, e.end_line) for e in exc] == \
        [("rank0", "bad 0", 1, 4), ("rank1", "bad 1", 5, 8)]


def test_custom_formatter_on_every_line() -> None:
    """``SGLANG_LOGGING_CONFIG_PATH`` formatter with the rank and source on each line, and a
    literal ``^M`` at each line end: one traceback, the rank and stamp of its lines."""
    h = "2025-06-18 13:43:34 ERROR 31423 [ TP6 PP0 scheduler.py:2547] "
    lines = ["Scheduler hit an exception: Traceback (most recent call last):",
             '  File "/home/SGLang/python/sglang/srt/managers/scheduler.py", line 2528, in run_scheduler_process',
             "    scheduler.event_loop_pp()",
             '  File "/home/SGLang/python/sglang/srt/managers/scheduler.py", line 735, in event_loop_pp',
             "    result = self.run_batch(self.cur_batch)", "RuntimeError: Prefill out of memory. Try to lower your batch size."]
    evs = read("".join(f"{h}{line}^M\n" for line in lines))
    ev = only(evs, "exception")
    assert (ev.rank, ev.ts, ev.line, ev.end_line) == ("TP6 PP0", "2025-06-18T13:43:34", 1, 6)
    assert frames(ev) == ["run_scheduler_process", "event_loop_pp"]
    assert ev.fields["exception"] == "RuntimeError" and ev.fields["message"].startswith("Prefill out of memory")


# ---------------------------------------------------------------- traceback shapes
def test_header_cut_mid_word_is_a_traceback_with_no_exception() -> None:
    ev = only(read("[2026-06-30 10:41:04 TP13 EP13] Scheduler hit an exception: Traceback (most recent call\n"),
              "exception")
    assert (ev.rank, ev.fields["source"], ev.fields["exception"], ev.fields["header_cut"]) == \
        ("TP13 EP13", "Scheduler", None, True)


def test_ray_dedup_mark_inside_a_traceback() -> None:
    """``[repeated 2x across cluster]`` counts the dropped lines and leaves the traceback whole."""
    r = "(WorkerDict pid=26103) "
    text = (f"{r}[2025-11-20 01:13:05 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
            f"{r}{FRAME} [repeated 2x across cluster]\n{r}{CODE}\n"
            f"{r}RuntimeError: nonce == returnedNonce INTERNAL ASSERT FAILED [repeated 3x across cluster]\n")
    evs = read(text)
    ev = only(evs, "exception")
    assert ev.rank == "TP1" and frames(ev) == ["run_scheduler_process"]
    assert ev.fields["message"] == "nonce == returnedNonce INTERNAL ASSERT FAILED"
    assert [(e.line, e.fields["count"]) for e in evs if e.kind == "ray_dedup"] == [(2, 2), (4, 3)]


SUFFIX = " [repeated 27x across cluster]"


@pytest.mark.parametrize("piece", ["frame", "code", "message"])
@pytest.mark.parametrize("cut", range(1, len(SUFFIX)))
def test_ray_dedup_mark_hard_wrapped_by_a_terminal(piece: str, cut: int) -> None:
    """A terminal that wraps at a fixed width may cut Ray's suffix anywhere (``[repea`` /
    ``ted 27x across cluster]``): the piece it follows reads as without it, the suffix
    counts its dropped lines once, and the traceback stays whole."""
    r = "(WorkerDict pid=1011655, ip=10.3.176.18) "
    lines = [f"{r}[2025-11-20 01:13:05 TP1] Scheduler hit an exception: Traceback (most recent call last):",
             f"{r}{FRAME}", f"{r}{CODE}", f"{r}RuntimeError: boom"]
    at = {"frame": 1, "code": 2, "message": 3}[piece]
    lines[at:at + 1] = [lines[at] + SUFFIX[:cut], SUFFIX[cut:] + " " * 7]
    evs = read("\n".join(lines) + "\n")
    ev = only(evs, "exception")
    assert ev.rank == "TP1" and frames(ev) == ["run_scheduler_process"]
    assert ev.fields["frames"][0]["code"] == CODE.strip()
    assert (ev.fields["exception"], ev.fields["message"]) == ("RuntimeError", "boom")
    marks = [(e.line, e.end_line, e.fields["count"]) for e in evs if e.kind == "ray_dedup"]
    if cut == 1:  # cut after the space: the suffix is whole on the next line, a record of its own there
        assert marks == [(at + 2, None, 27)]
        assert (ev.line, ev.end_line) == (1, 4 if piece == "message" else 5)
    else:
        assert marks == [(at + 1, at + 2, 27)]
        assert (ev.line, ev.end_line) == (1, 5)


def test_overlap_thread_frames_are_frames() -> None:
    """``TpModelWorkerClient hit an exception`` (the overlap thread): its frames are kept."""
    text = ("[2025-04-11 15:03:19 TP0] TpModelWorkerClient hit an exception: Traceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/tp_worker_overlap_thread.py", '
            "line 112, in forward_thread_func\n    self.forward_thread_func_()\n")
    ev = only(read(text), "exception")
    assert ev.fields["source"] == "TpModelWorkerClient" and frames(ev) == ["forward_thread_func"]
    assert ev.fields["frames"][0]["path"].endswith("tp_worker_overlap_thread.py")


def test_scheduler_died_message_is_decomposed() -> None:
    text = ('Traceback (most recent call last):\n  File "/sgl/entrypoints/engine.py", line 1277, in _wait_for_scheduler_ready\n'
            "    raise _scheduler_died_error(i, scheduler_procs[i])\n"
            "RuntimeError: Rank 0 scheduler died during initialization (exit code: -11). If exit code is -9 (SIGKILL), "
            "a common cause is the OS OOM killer.\n")
    ev = only(read(text), "exception")
    assert ev.fields["scheduler_died"] == {"rank": 0, "exit_code": -11}


def test_a_window_that_begins_inside_a_message_before_a_chained_traceback_begins_the_record() -> None:
    """A window cut inside the first exception's message (CUDA's and torch.compile's advice
    lines), then Python's 'During handling of the above exception ...' and the second
    traceback: the record begins at line 1, those lines the chain's message; the same lines
    before another record are the GPU error's own record (its exception above the window)."""
    advice = ("CUDA kernel errors might be asynchronously reported at some other API call.\n"
              "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n\n"
              "You can suppress this exception and fall back to eager by setting:\n"
              "    import torch._dynamo\n")
    chained = ("\nDuring handling of the above exception, another exception occurred:\n\n"
               "Traceback (most recent call last):\n" + FRAME + "\n" + CODE + "\nRuntimeError: boom\n")
    ev = only(read(advice + chained), "exception")
    assert (ev.line, ev.fields["exception"], ev.fields["chain"][0]["exception"]) == (1, "RuntimeError", None)
    assert ev.fields["chain"][0]["message"].startswith("CUDA kernel errors")
    events = read(advice + "[2025-06-01 12:00:00 TP0] Init torch distributed begin.\n")
    assert [(e.kind, e.line, e.rank) for e in events][:2] == [("exception", 1, None), ("init_dist_begin", 6, "TP0")]


def test_another_logger_s_record_after_the_exception_and_an_empty_line_ends_the_message() -> None:
    """An exception's message may go on over lines, empty ones too; a record of another logger
    headed by its level in brackets after an empty line is no part of it."""
    text = ("Traceback (most recent call last):\n" + FRAME + "\n" + CODE + "\n"
            "RuntimeError: Read error [172.22.3.245]:61677: Connection reset by peer\n\n"
            "[ERROR] TBE Subprocess[task_distribute] raise error[], main process disappeared!\n")
    events = read(text)
    ev = only(events, "exception")
    assert ev.fields["message"] == "Read error [172.22.3.245]:61677: Connection reset by peer"
    assert events[-1].kind == "other" and events[-1].text.startswith("[ERROR] TBE")


@pytest.mark.parametrize("blanks,joined", [(1, True), (2, False)])
def test_text_after_two_empty_lines_is_no_part_of_the_message(blanks: int, joined: bool) -> None:
    """A message may hold an empty line; after two (its own last newline and Python's), text is
    another writer's (a radix cache's debug print after the allocator's error, real-unseen 1234)."""
    text = ("Traceback (most recent call last):\n" + FRAME + "\n" + CODE + "\n"
            "RuntimeError: Out of memory. Try to lower your batch size.\nTry to allocate 1024 tokens.\n"
            + "\n" * blanks + " 0 array('q') r=1\n#tokens: 64\n")
    ev = only(read(text), "exception")
    assert ("#tokens: 64" in ev.fields["message"]) is joined
    assert ev.fields["message"].startswith("Out of memory. Try to lower your batch size.\nTry to allocate 1024 tokens.")


def test_a_log_viewer_s_time_column_on_lines_of_its_own_breaks_no_traceback() -> None:
    """An export that puts the viewer's time on a line before each record: those lines are the
    viewer's, and the traceback between them is one record with its frames and exception."""
    stamp = "2025-05-21 16:20:15\t\n"
    text = "".join(stamp + line + "\n" for line in ("Traceback (most recent call last):", FRAME, CODE,
                                                    "RuntimeError: boom"))
    events = read(text)
    ev = only(events, "exception")
    assert (ev.line, ev.fields["exception"], len(ev.fields["frames"])) == (2, "RuntimeError", 1)
    assert "16:20:15" not in ev.fields["message"] and [e.kind for e in events].count("viewer_stamp") == 4


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_a_log_console_s_table_copied_as_text_leaves_its_records_whole(eol: str) -> None:
    """Grafana's logs panel copied as text: empty cells, the time cell, the record, a closing
    cell. The cells are the table's: the traceback's header and frames are read as such (with
    Windows' line ends too)."""
    row = "  |   | 2026-06-12 12:13:18.902 | {} |  " + eol
    text = "".join(row.format(line) for line in (
        "[2026-06-12 04:13:18 PP0 TP1] Scheduler hit an exception: Traceback (most recent call last):",
        FRAME.strip(), CODE.strip(), "RuntimeError: boom"))
    ev = only(read(text), "exception")
    assert (ev.rank, ev.fields["exception"], ev.fields["message"], len(ev.fields["frames"])) == \
        ("PP0 TP1", "RuntimeError", "boom", 1)


def test_faulthandler_s_header_written_into_another_writer_s_unfinished_line_is_its_own_record() -> None:
    """Two writers on one stream: faulthandler's 'Fatal Python error: ...' begins in the middle
    of a frame line another thread had not finished; it is a fatal record of its own."""
    events = read('  File "/workspace/sglang/python/sglang/srt/disaggregation/utils.pyFatal Python error: '
                  'Segmentation fault\n')
    assert [e for e in events if e.kind == "exception" and e.fields.get("fatal_signal")]


def test_a_terminal_s_echo_of_nul_bytes_before_a_prefix_is_no_part_of_the_record() -> None:
    """A terminal echoes NUL bytes as '^@'; before an SGLang prefix they are no part of the
    record, whose rank and figures are read as on any other line."""
    [ev] = read("^@^@^@[15:58:39 TP0] Decode batch. #running-req: 1, #token: 83, token usage: 0.00, "
                "gen throughput (token/s): 6.20, #queue-req: 0\n")
    assert (ev.kind, ev.rank, ev.fields["gen_throughput_tok_s"]) == ("decode_batch", "TP0", 6.2)


def test_an_exception_line_indented_with_the_whole_traceback_is_its_exception() -> None:
    """A paste that indented a traceback indents its exception line too ('  AssertionError'
    after six-space source lines): inside a traceback, after a frame's source line and indented
    less than it, that line is the exception; an indented line as deep as the source is not."""
    frame = '  File "sglang/srt/managers/schedule_batch.py", line 2654, in _force_track_h\n'
    ev = only(read(frame + "      assert i % chunk_size == 0\n             ^^^^^^^^^^^^^^^^^^^\n  AssertionError\n"),
              "exception")
    assert (ev.fields["exception"], ev.fields["exception_line"]["line"]) == ("AssertionError", 4)
    ev = only(read(frame + "      raise ValueError(\n      ValueError\n"), "exception")
    assert ev.fields["exception"] is None


@pytest.mark.parametrize("indent", ["", "  ", "    "])
def test_a_window_opening_on_an_exception_line_reads_alike_however_indented(indent: str) -> None:
    """A window that begins below a traceback's frames opens on its exception line: with the
    whole paste indented (a list item's fence) that line is the cut traceback's end as it is
    unindented, and the next rank's record stays its own. 'Exception: ...' alone is not."""
    text = "".join(indent + line + "\n" for line in
                   ["IndexError: list index out of range", "", TRACEBACK[0], FRAME, CODE])
    excs = [e for e in read(text) if e.kind == "exception"]
    assert [(e.line, e.rank, e.fields["exception"]) for e in excs] == [(1, None, "IndexError"), (3, "TP3", None)]
    assert excs[0].fields["message"] == "list index out of range"
    assert "exception" not in kinds(read(indent + "Exception: retrying\n" + indent + "next\n"))


GPU_ADVICE = ["Search for `cudaErrorAssert' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html "
              "for more information.",
              "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
              "might be incorrect.",
              "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
              "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."]


@pytest.mark.parametrize("first", [0, 1])
def test_a_window_opening_on_torch_s_advice_after_a_gpu_error_is_that_error_s_record(first: int) -> None:
    """torch ends a CUDA (HIP) error's message with its advice lines: a window opening on them
    opens inside that error's message (real-unseen 1102), whose exception line is above the
    window: a record of its own at line 1, naming no rank, before the next rank's traceback.
    Below another record the same lines are only text; with Python's "During handling ..."
    after them they are the message of the chain's first exception, as before."""
    lines = GPU_ADVICE[first:]
    events = read("\n".join([*lines, "", "", TRACEBACK[0], FRAME, CODE]) + "\n")
    excs = [e for e in events if e.kind == "exception"]
    assert [(e.line, e.end_line, e.rank, e.fields["exception"]) for e in excs] == \
        [(1, len(lines), None, None), (len(lines) + 3, len(lines) + 5, "TP3", None)]
    assert excs[0].fields["message"].splitlines() == lines and excs[0].fields["header_cut"]
    assert "exception" not in kinds(read("\n".join(["[2025-02-18 14:31:01 TP3] Load weight begin.", *lines]) + "\n"))
    chained = only(read("\n".join([*lines, "", "During handling of the above exception, another exception occurred:",
                                   "", *TRACEBACK[1:]]) + "\n"), "exception")
    assert chained.fields["chain"][0]["message"].splitlines() == lines and chained.fields["exception"] == "RuntimeError"


def test_a_window_opening_on_a_fatal_error_s_extension_modules_is_that_error_s_record() -> None:
    """CPython lists the extension modules only at the end of a fatal error's dump: a window
    opening on that list (a rank's header fused at its end, as real-unseen 455 and 1101) begins
    with that error's record, which names no rank; the rank's traceback is a record of its own.
    The same list further down, with no dump open, is only text."""
    modules = "Extension modules: numpy._core._multiarray_umath, numpy.linalg._umath_linalg"
    excs = [e for e in read(modules + TRACEBACK[0] + "\n" + FRAME + "\n" + CODE + "\n") if e.kind == "exception"]
    assert [(e.rank, e.fields["fatal_signal"], e.fields["header_cut"]) for e in excs] == \
        [(None, True, True), ("TP3", False, False)]
    assert excs[1].fields["frames"] and not excs[0].fields["frames"]
    assert "exception" not in kinds(read("[2025-02-18 14:31:01 TP3] Load weight begin.\n" + modules + " (total: 2)\n"))


@pytest.mark.parametrize("exception,message,store", [
    ("torch.distributed.DistNetworkError", "The client socket has timed out after 600000ms while trying to connect to "
     "(127.0.0.1, 30349).", {"timeout_ms": 600000, "host": "127.0.0.1", "port": 30349, "joined": None, "expected": None}),
    ("torch.distributed.DistStoreError", "Timed out after 1801 seconds waiting for clients. 1/3 clients joined.",
     {"timeout_ms": 1801000, "host": None, "port": None, "joined": 1, "expected": 3}),
    ("torch.distributed.DistStoreError", "wait timeout after 600000ms, keys: /default_pg/0//cuda//0",
     {"timeout_ms": 600000, "host": None, "port": None, "joined": None, "expected": None}),
    ("RuntimeError", "CUDA error: an illegal memory access was encountered", None),
])
def test_store_error_message_is_decomposed(exception: str, message: str, store: dict[str, Any] | None) -> None:
    """torch.distributed's store errors print their timeout, the store's address or how many
    ranks joined only in the exception's message: the record carries them as ``store``, and
    only a store error has the field."""
    text = ('Traceback (most recent call last):\n  File "/torch/distributed/rendezvous.py", line 198, in _create_c10d_store\n'
            f"    return TCPStore(\n{exception}: {message}\n")
    ev = only(read(text), "exception")
    assert ev.fields.get("store") == store
    assert ("store" in ev.fields) is (store is not None)


# ---------------------------------------------------------------- out of memory outside a traceback
def test_oom_message_hard_wrapped_by_a_terminal() -> None:
    """A component that catches the OOM and logs it; the terminal broke the line inside a
    number ("of which 1" / "2.19 MiB"). The figures are decomposed from the joined text."""
    text = ("[TP1] Failed to initialize lk_moe: CUDA out of memory. Tried to allocate 24.00 MiB. GPU 1 has a total capac\n"
            "ity of 23.53 GiB of which 1\n"
            "2.19 MiB is free. Including non-PyTorch memory, this process has 23.50 GiB memory in use. Of the allocated\n"
            "memory 22.91 GiB is allocated by PyTorch, and 167.34 MiB is reserved by PyTorch but unallocated.\n"
            "[2025-03-01 14:03:07 TP0] Load weight end. type=X, dtype=torch.bfloat16, avail mem=1.00 GB, mem usage=20.00 GB.\n")
    evs = read(text)
    assert kinds(evs) == ["oom_message", "load_weight_end"]
    oom = evs[0]
    assert (oom.rank, oom.line, oom.end_line, oom.fields["what"]) == ("TP1", 1, 4, "Failed to initialize lk_moe")
    got = oom.fields["oom"]
    assert got["tried_gib"] == pytest.approx(24 / 1024, abs=1e-6)
    assert got["free_gib"] == pytest.approx(12.19 / 1024, abs=1e-6)
    assert got["total_gib"] == pytest.approx(23.53) and got["gpu"] == 1
    assert got["process_in_use_gib"] == pytest.approx(23.5) and got["allocated_gib"] == pytest.approx(22.91)


def test_oom_message_of_another_rank_between_frames_stays_one_line() -> None:
    text = ("[2025-03-01 14:03:07 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            "[2025-03-01 14:03:07 TP1] Failed to initialize lk_moe: CUDA out of memory. Tried to allocate 24.00 MiB.\n"
            f"{FRAME}\n{CODE}\nRuntimeError: boom\n")
    evs = read(text)
    assert sorted(kinds(evs)) == ["exception", "oom_message"]
    assert only(evs, "exception").fields["frames"][0]["func"] == "run_scheduler_process"
    assert only(evs, "oom_message").rank == "TP1"


# ---------------------------------------------------------------- not commands
def test_warnings_and_examples_are_not_launch_commands() -> None:
    text = ("/sgl-workspace/sglang/python/sglang/launch_server.py:51: UserWarning: 'python -m sglang.launch_server' "
            "is still supported, but 'sglang serve' is the recommended entrypoint.\n"
            "  Example: sglang serve --model-path <model> [options]\n"
            "Example: sglang serve --model-path <model> [options]\n"
            "  warnings.warn(\n")
    assert "launch_command" not in kinds(read(text))


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_chunking_does_not_change_events(chunk: int) -> None:
    text = ("[TP1] Failed to initialize lk_moe: CUDA out of memory. Tried to allocate 24.00 MiB. GPU 1 has\n"
            " a total capacity of 23.53 GiB\n"
            + "".join(f"2025-06-18 13:43:34 ERROR 1 [ TP6 PP0 scheduler.py:2547] {line}^M\n" for line in TRACEBACK[1:])
            + "(WorkerDict pid=1) RuntimeError: x [repeated 2x across cluster]\n")
    assert read(text, chunk) == read(text)


@pytest.mark.parametrize("line", [
    "2026-05-08 11:02:14  INFO sglang_router_rs::server: src/server.rs:512: Starting router on 0.0.0.0:8000",
    "2025-08-31 07:32:08 ERROR sglang_router_rs::routers::http::pd_router: src/routers/http/pd_router.rs:1319: x",
    "2025-02-21 21:52:50,289 - INFO - flashinfer.jit: Prebuilt kernels not found, using JIT backend",
])
def test_a_stamp_of_the_line_itself_is_not_a_wrapper(line: str) -> None:
    """Docker Desktop's local time is stripped; a stamp that belongs to the record's own
    format (a router's, Python logging's) stays in the text."""
    evs = read(line + "\n")
    assert len(evs) == 1 and evs[0].text.startswith(line[:19])


def test_oom_message_wrapped_by_padding_inside_the_line() -> None:
    """A terminal that padded its wraps with runs of spaces, on one physical line: a run
    inside a number or a word is not a separator."""
    pad = " " * 30
    text = (f"[TP1] Failed to initialize lk_moe: CUDA out of memory. Tried to allocate 24.00 MiB. GPU 1 has a total c{pad}"
            f"apacity of 23.53 GiB of which 1{pad}2.19 MiB is free. Of the allocated memory 22.91 GiB is allocated by P"
            f"{pad}yTorch, and 167.34 MiB is reserved by PyTorch but unallocated.\n")
    got = only(read(text), "oom_message").fields["oom"]
    assert got["total_gib"] == pytest.approx(23.53) and got["free_gib"] == pytest.approx(12.19 / 1024, abs=1e-6)
    assert got["reserved_unallocated_gib"] == pytest.approx(167.34 / 1024, abs=1e-6)


def test_library_log_lines_inside_tracebacks_of_every_rank() -> None:
    """``[aiter]`` lines that other processes write between a traceback's lines neither end
    it nor join its message: the same TypeError on two ranks reads as the same."""
    tb = ["[2026-02-26 06:25:15 TP{r}] Scheduler hit an exception: Traceback (most recent call last):", FRAME,
          "[aiter] import [module_quant] under /sgl-workspace/aiter/aiter/jit/module_quant.so", CODE,
          "TypeError: forward() got an unexpected keyword argument 'x'",
          "[aiter] type hints mismatch, override to --> rmsnorm(out: torch.Tensor)",
          "[2026-02-26 06:25:15] Received sigquit from a child process. It usually means the child failed."]
    evs = read("\n".join([line.format(r=6) for line in tb] + [line.format(r=7) for line in tb]) + "\n")
    exc = [e for e in evs if e.kind == "exception"]
    assert [(e.rank, e.line, e.end_line) for e in exc] == [("TP6", 1, 5), ("TP7", 8, 12)]
    assert {e.fields["message"] for e in exc} == {"forward() got an unexpected keyword argument 'x'"}
    assert all(e.fields["frames"][0]["code"] == "scheduler.event_loop_normal()" for e in exc)
    assert [e.fields["lib"] for e in evs if e.kind == "lib_log"] == ["aiter"] * 4


def test_every_kind_read_from_the_real_fixtures_can_be_selected() -> None:
    """``parse --kind`` accepts every kind the reader emits, and no structural rule."""
    from pathlib import Path

    from logforensics.read.kinds import event_kinds

    real = Path(__file__).resolve().parent.parent / "fixtures" / "real"
    seen = {e.kind for p in sorted(real.glob("*.log")) for e in read(p.read_text(encoding="utf-8", errors="replace"))}
    assert {"collective_timeout", "collective_failure", "hsa_fault", "device_assert", "ray_dedup"} <= seen
    assert seen <= event_kinds()
    assert "line_prefix" not in event_kinds() and "env_notice" not in event_kinds()


def test_literal_caret_m_inside_a_line_is_a_redraw() -> None:
    """A paste that shows tqdm's carriage returns as ``^M``: each redraw is its own record."""
    bar = "Capturing batches (bs={bs} avail_mem=11.08 GB):  {p}%|##        | {n}/4 [00:01<00:03,  1.02it/s]"
    text = "^M".join(bar.format(bs=b, p=p, n=n) for b, p, n in ((8, 25, 1), (4, 50, 2))) + "^M\n"
    evs = read(text)
    assert [(e.kind, e.fields["bs"], e.fields["progress"]["n"]) for e in evs] == [("progress", 8, 1), ("progress", 4, 2)]


def test_summary_says_how_many_lines_ray_left_out() -> None:
    """Each ``[repeated Nx across cluster]`` stands for N - 1 lines that are not in the file."""
    import re
    from pathlib import Path

    from logforensics import summarize_file

    path = next((Path(__file__).resolve().parent.parent / "fixtures" / "real").glob("125-*.log"))
    marks = re.findall(r"\[repeated (\d+)x across cluster\]", path.read_text(encoding="utf-8"))
    assert marks
    summary = summarize_file(path)
    dropped = sum(int(n) - 1 for n in marks)
    assert summary.coverage.lines_dropped_by_dedup == dropped
    assert any(f"left out {dropped} lines" in w for w in summary.warnings)


def test_a_torch_rank_record_glued_after_another_processes_text_is_a_record() -> None:
    """faulthandler's ``Extension modules: ...`` list of one process, with a rank's torch
    record written straight after it before the newline (shaped after sglang issue #3836):
    the watchdog's collective timeout is still read, with its rank."""
    text = ("Extension modules: numpy.core._multiarray_umath, torch._C, PIL._imaging"
            "[rank5]:[E226 11:16:37.121617583 ProcessGroupNCCL.cpp:616] [Rank 5] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=5653, OpType=ALLREDUCE, NumelIn=58720256, NumelOut=58720256, "
            "Timeout(ms)=600000) ran for 600028 milliseconds before timing out.\n")
    ev = only(read(text), "collective_timeout")
    assert ev.fields["head"]["global_rank"] == 5 and ev.fields["seq"] == 5653 and ev.line == 1


@pytest.mark.parametrize("cut", [", #running", ", #running-req:", ", cache hit"])
def test_a_batch_line_cut_inside_a_key_keeps_the_figures_before_the_cut(cut: str) -> None:
    """A paste or a window that ends inside a record's last key (sglang issue #3781 ends in
    ``token usage: 0.00, #running``): still the batch it was, with what it printed whole."""
    line = ("[2025-02-25 12:05:40 TP0] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, "
            "token usage: 0.00" + cut)
    ev = only(read(line), "prefill_batch")
    assert ev.fields["new_token"] == 7 and ev.fields["cached_token"] == 0 and ev.rank == "TP0"


def test_a_traceback_a_console_listed_newest_first_is_one_traceback_of_its_header() -> None:
    """A Kubernetes console's export lists lines newest first (shaped after sglang issue
    #7639): the frames come above their header, innermost first, each source line above its
    frame. One traceback of the header's rank, frames in Python's order."""
    w = "2025-07-01T00:57:53+08:00\t"
    text = "".join(w + t + "\n" for t in (
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1645, in prepare_dp_attn_batch',
        "    batch, _ = self.prepare_dp_attn_batch(batch)",
        '  File "/sgl/python/sglang/srt/disaggregation/decode.py", line 691, in event_loop_overlap_disagg_decode',
        "    scheduler.event_loop_overlap_disagg_decode()",
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2311, in run_scheduler_process',
        "[2025-06-30 16:57:53 DP7 TP7] Scheduler hit an exception: Traceback (most recent call last):"))
    ev = only(read(text), "exception")
    assert ev.rank == "DP7 TP7" and ev.line == 6 and ev.fields["source"] == "Scheduler"
    assert frames(ev) == ["run_scheduler_process", "event_loop_overlap_disagg_decode", "prepare_dp_attn_batch"]
    assert [f["code"] for f in ev.fields["frames"]] == [
        "scheduler.event_loop_overlap_disagg_decode()", "batch, _ = self.prepare_dp_attn_batch(batch)", None]


def test_a_cut_traceback_in_python_s_order_before_another_header_stays_its_own() -> None:
    """Frames cut above their header, innermost last, then another rank's header: two records."""
    text = ('  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2311, in run_scheduler_process\n'
            "    scheduler.event_loop_overlap()\n"
            '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 999, in event_loop_overlap\n'
            "    batch_result = self.run_batch(batch)\n"
            "[2025-06-30 16:57:53 TP1] Scheduler hit an exception: Traceback (most recent call last):\n")
    evs = [e for e in read(text) if e.kind == "exception"]
    assert [(e.line, e.rank) for e in evs] == [(1, None), (5, "TP1")]
    assert frames(evs[0]) == ["run_scheduler_process", "event_loop_overlap"]

def test_children_ended_together_print_their_headers_before_their_bodies() -> None:
    """Two children that a Ctrl-C ends at once: multiprocessing prints each one's "Process
    Process-N:" and "Traceback" line before either body. The headers wait for the bodies: two
    records, each with frames and its exception, none made of a header alone."""
    body = ('  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap\n'
            "    self.run()\n"
            '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2579, in run_scheduler_process\n'
            "    scheduler.event_loop_overlap()\n"
            "KeyboardInterrupt\n")
    text = ("Process Process-2:\nProcess Process-1:\nTraceback (most recent call last):\n"
            "Traceback (most recent call last):\n" + body + body)
    evs = [e for e in read(text) if e.kind == "exception"]
    assert [(e.line, e.fields["exception"]) for e in evs] == [(1, "KeyboardInterrupt"), (10, "KeyboardInterrupt")]
    assert all(frames(e) == ["_bootstrap", "run_scheduler_process"] for e in evs)


def test_a_header_that_names_the_process_under_multiprocessing_s_names_the_record() -> None:
    """"Process Process-1:", then the launcher's "router init state: Traceback ...": one record,
    its source the router's."""
    text = ("Process Process-1:\nrouter init state: Traceback (most recent call last):\n"
            '  File "/sgl/python/sglang/srt/managers/router/manager.py", line 68, in start_router_process\n'
            "    model_client = ModelRpcClient(server_args, port_args)\n")
    ev = only(read(text), "exception")
    assert ev.line == 1 and ev.fields["source"] == "Router" and frames(ev) == ["start_router_process"]


@pytest.mark.parametrize("line", [
    "`[2025-09-05 20:48:29 TP0] Capture cuda graph end. Time elapsed: 12.11 s. mem usage=0.54 GB. avail mem=16.74 GB.`",
    "` [2025-09-05 20:48:29 TP0] Capture cuda graph end. Time elapsed: 12.11 s. mem usage=0.54 GB. avail mem=16.74 GB.` ",
])
def test_a_record_in_an_inline_code_span_reads_without_its_backticks(line: str) -> None:
    """A paste that quotes one line as Markdown inline code (sglang issue #10088): both backticks
    are the paste's, the record between them whole."""
    ev = only(read(line + "\n"), "capture_end")
    assert ev.rank == "TP0" and ev.fields["elapsed_s"] == 12.11 and not ev.text.endswith("`")


_THREAD_TAIL = ('  File "/venv/lib/python3.12/site-packages/tqdm/_monitor.py", line 60 in run\n'
                '  File "/usr/lib/python3.12/threading.py", line 1075 in _bootstrap_inner\n'
                '  File "/usr/lib/python3.12/threading.py", line 1032 in _bootstrap\n\n')
_LOADER = ('  File "/sgl/python/sglang/srt/layers/linear.py", line 1254 in weight_loader\n'
           '  File "/sgl/python/sglang/srt/models/qwen3.py", line 318 in load_weights\n')


@pytest.mark.parametrize("header,stack", [
    # real-unseen 1695: the thread faulthandler marks current is the failing one
    ("Current thread 0x00007769465bb740 (most recent call first):", ["load_weights", "weight_loader"]),
    # real-unseen 814: no thread marked current in the window: none of them is the failure's stack
    ("Thread 0x00007f0d304e4000 (most recent call first):", []),
])
def test_a_dump_cut_above_its_header_keeps_its_threads_apart(header: str, stack: list[str]) -> None:
    """A window that opens inside a faulthandler dump (another thread's tail, a blank line, then a
    thread's header): the record's stack is the current thread's alone, never one of both threads."""
    ev = only(read(_THREAD_TAIL + header + "\n" + _LOADER), "exception")
    assert frames(ev) == stack


# faulthandler's dump as sgl-project/sglang#10216 shows it (the watchdog thread, then the thread
# that aborted), each line behind the Ray wrapper of the engine process that printed it
_FATAL_DUMP = [
    "Fatal Python error: Aborted",
    "",
    "Thread 0x00007f7353fff640 (most recent call first):",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2183 in watchdog_thread',
    '  File "/usr/lib/python3.12/threading.py", line 1012 in run',
    "",
    "Current thread 0x00007f735dfff640 (most recent call first):",
    '  File "/usr/local/lib/python3.12/dist-packages/sgl_kernel/gemm.py", line 111 in sgl_per_token_group_quant_fp8',
    "",
    "Extension modules: numpy.core._multiarray_umath, torch._C (total: 2)",
]


def _engines(second_rank: str) -> str:
    a, b = "(SGLangEngine pid=1233) ", "(SGLangEngine pid=1234) "
    return (f"{a}[2025-06-01 10:00:00 TP0] Load weight begin. avail mem=78.00 GB\n"
            f"{b}[2025-06-01 10:00:00 {second_rank}] Load weight begin. avail mem=78.00 GB\n"
            f"{a}[2025-06-01 10:00:05 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
            "avail mem=62.00 GB, mem usage=16.00 GB.\n"
            + "".join(f"{b}{line}\n" for line in _FATAL_DUMP))


@pytest.mark.parametrize("chunk", [None, 7])
def test_a_fatal_error_behind_ray_takes_the_rank_of_its_process(chunk: int | None) -> None:
    """``(SGLangEngine pid=1234) Fatal Python error: Aborted`` names no rank; the process
    1234's earlier records named TP1 alone: the record, with the thread dump after it, is
    one record of TP1."""
    evs = [e for e in read(_engines("TP1"), chunk) if e.kind == "exception"]
    assert len(evs) == 1
    ev = evs[0]
    assert (ev.rank, ev.line, ev.fields["exception"], ev.fields["message"]) == (
        "TP1", 4, "Fatal Python error", "Aborted")
    # the frames are the thread faulthandler marks current (the one that failed), innermost last
    assert frames(ev) == ["sgl_per_token_group_quant_fp8"]


def test_a_process_that_printed_two_ranks_gives_none() -> None:
    """Ray prints a worker's children under the worker's pid: when the process's records named
    two ranks, the fatal record stays without one."""
    text = _engines("TP0").replace("pid=1233", "pid=1234").replace(
        "Load weight begin. avail mem=78.00 GB\n(SGLangEngine pid=1234) [2025-06-01 10:00:00 TP0]",
        "Load weight begin. avail mem=78.00 GB\n(SGLangEngine pid=1234) [2025-06-01 10:00:00 TP1]")
    ev = only(read(text), "exception")
    assert ev.rank is None and ev.fields["exception"] == "Fatal Python error"


def test_a_serving_log_behind_ray_is_read_in_bulk_and_its_fatal_error_keeps_its_rank(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the records that teach a process's rank (start-up) or may take it (a rank-less
    traceback) are read line by line behind Ray's ``pid=`` wrapper: its batch statistics,
    most of a serving log, are read in bulk, and both readers agree."""
    from logforensics.ingest.batch import read_file
    from logforensics.pipeline import summarize_file

    b = "(SGLangEngine pid=1234) "
    decode = (b + "[2025-06-01 10:{m:02d}:{s:02d} TP1] Decode batch. #running-req: {r}, #token: 4096, "
              "token usage: 0.05, gen throughput (token/s): 812.{r:02d}, #queue-req: 0\n")
    text = (_engines("TP1").split(b + "Fatal")[0] + b + "[2025-06-01 10:00:06 TP1] The server is fired up and ready to roll!\n"
            + "".join(decode.format(m=i // 60 % 60, s=i % 60, r=i % 90) for i in range(3000))
            + "".join(f"{b}{line}\n" for line in _FATAL_DUMP))
    path = tmp_path / "ray.log"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setenv("LOGFORENSICS_PURE", "1")
    exact = summarize_file(path).to_dict()
    monkeypatch.delenv("LOGFORENSICS_PURE")
    assert (exact["outcome"], exact["crash"]["first_rank"]) == ("crashed", "TP1")
    if not native.available():
        pytest.skip("the accelerator is not built here")
    run = read_file(path)
    assert run._scanner is not None and run._scanner.taken > 2500
    assert summarize_file(path).to_dict() == exact


def test_a_fatal_errors_frames_are_its_failing_threads_innermost_last() -> None:
    """faulthandler prints each thread most recent call first, and a native backtrace may
    follow: the record's frames are the failing thread's, the one it marks 'Current thread',
    in Python's order, so its innermost SGLang frame places and names it. With no thread
    marked current (349: a native thread of NIXL's segfaulted; the Python thread shown was
    sending), no thread's stack is the failure's: the record has no frames, and the dump's
    frames are kept apart (they still place the process)."""
    lines = [
        "Fatal Python error: Segmentation fault", "",
        "Thread 0x0000e6b496d046a0 (most recent call first):",
        '  File "/sgl/srt/disaggregation/nixl/conn.py", line 452 in _send_kvcache_generic',
        '  File "/sgl/srt/disaggregation/prefill.py", line 828 in send_kv_chunk',
        '  File "/sgl/srt/disaggregation/prefill.py", line 540 in process_batch_result_disagg_prefill', "",
        "!!!!!!! Segfault encountered !!!!!!",
        '  File "<unknown>", line 0, in gsignal', ""]
    current = only(read("\n".join(lines).replace("Thread 0x", "Current thread 0x") + "\n"), "exception")
    assert frames(current) == ["process_batch_result_disagg_prefill", "send_kv_chunk", "_send_kvcache_generic"]
    none_current = only(read("\n".join(lines) + "\n"), "exception")
    assert frames(none_current) == []
    assert [f["func"] for f in none_current.fields["dump_frames"]] == [
        "_send_kvcache_generic", "send_kv_chunk", "process_batch_result_disagg_prefill"]


def test_a_thread_dump_with_no_fatal_error_above_it_is_no_crash() -> None:
    """faulthandler's dump of a process that goes on (the DP controller's, waiting on its
    children) has no 'Fatal Python error:' above it: a thread dump, not a traceback."""
    text = "\n".join([
        "Thread 0x00007f81bf32a300 (most recent call first):",
        '  File "/usr/lib/python3.12/multiprocessing/popen_fork.py", line 27 in poll',
        '  File "/sgl/srt/managers/data_parallel_controller.py", line 598 in run_data_parallel_controller_process',
        ""]) + "\n"
    evs = read(text)
    assert [e.kind for e in evs if e.kind in ("exception", "thread_dump")] == ["thread_dump"]


def test_a_thread_dump_that_lists_the_extension_modules_is_a_fatal_errors_with_its_header_cut() -> None:
    """CPython lists the extension modules after a fatal error's dump only (never after a timed
    or a signal's dump): a thread dump whose 'Fatal Python error:' header is above the window
    (real-unseen 454) is a fatal record from its first line, with no exception read (the header's
    text is not in the log). Another process's record torn into the dump's line leaves it open."""
    dump = ["Thread 0x000070c18c2e9dc0 (most recent call first):",
            '  File "<internal>", line 7 in [2025-04-17 11:44:15] Received sigquit from a child process. '
            "It usually means the child failed.",
            "cleanup", ""]
    evs = read("\n".join([*dump, "Extension modules: numpy.core._multiarray_umath, psutil._psutil_linux", ""]))
    ev = only(evs, "exception")
    assert (ev.line, ev.end_line, ev.fields["fatal_signal"], ev.fields["header_cut"], ev.fields["exception"]) == \
        (1, 5, True, True, None)
    assert frames(ev) == []  # no thread is marked current: none is the failure's
    assert kinds(evs).count("sigquit") == 1
    # without the list, the same dump is a process's dump of its threads, not its end
    assert "exception" not in kinds(read("\n".join(dump) + "\n"))


def test_a_record_with_a_stamp_without_a_year_ends_the_exception_message_before_it() -> None:
    """SGLang's multimodal generation server stamps its records '[12-24 08:20:04] ...' (no
    year, so no time stamp is read): such a record is still one of its own, never a line of the
    message of the traceback printed before it (real-unseen 461, 495)."""
    text = ("Traceback (most recent call last):\n" + FRAME + "\n" + CODE + "\n"
            "RuntimeError: Model generation returned no output.\n"
            '[12-24 08:20:04] 10.244.233.96:49446 - "POST /v1/images/generations HTTP/1.1" 500\n')
    ev = only(read(text), "exception")
    assert (ev.end_line, ev.fields["message"]) == (4, "Model generation returned no output.")


def test_a_ranks_exception_alone_on_its_prefixed_line_is_that_ranks_traceback() -> None:
    """real-unseen 366: after TP6's traceback, five ranks' '[.. TPn] RuntimeError: ...' lines, each
    the last line of a traceback whose frames are not in the paste: one exception record per rank.
    A generic 'Exception: ...' behind a prefix stays a line of its own (too common to be a crash)."""
    text = "".join(f"[2026-06-17 06:48:31 TP{r}] RuntimeError: [pair.cc:538] Read error: Connection timed out\n"
                   for r in (4, 5))
    evs = [ev for ev in read(text) if ev.kind == "exception"]
    assert [(ev.rank, ev.line, ev.fields["exception"], ev.fields["frames"]) for ev in evs] == \
        [("TP4", 1, "RuntimeError", []), ("TP5", 2, "RuntimeError", [])]
    assert evs[0].fields["message"] == "[pair.cc:538] Read error: Connection timed out"
    generic = read("[2026-06-17 06:48:31 TP4] Exception: something\n")
    assert [ev.kind for ev in generic] == ["exc_line"]


def test_a_bars_tail_left_after_a_record_is_cut_off_it() -> None:
    """A record printed over a tqdm bar leaves the bar's right part at the line's end
    (real-unseen 453): the record is read without it, as the header it is; a bar's own empty
    part after its fill is not cut."""
    header = "[2026-05-22 07:24:20 TP3] Scheduler hit an exception: Traceback (most recent call last):"
    line = " " * 30 + header + " " * 29 + "| 7710/16384 [00:00<00:00, 21822.61it/s]"
    evs = read(line + "\n" + "\n".join(TRACEBACK[1:]) + "\n")
    assert evs[0].kind == "exception" and evs[0].line == 1 and evs[0].rank == "TP3"
    assert evs[0].fields.get("exception") == "RuntimeError"
    bar = "Capturing batches (bs=8 avail_mem=21.70 GB):  50%|█████     | 18/36 [00:03<00:03,  5.45it/s]"
    assert kinds(read(bar + "\n")) == ["progress"]



def test_torch_npus_own_out_of_memory_record_is_read_with_its_figures() -> None:
    """torch_npu's allocator logs the failure in its own format before it raises (real-unseen
    491): '[pid] [date time:ms] torch_npu.memory: [ERROR] [pid] NPU out of memory. ...', read as
    the out-of-memory record it is, with its figures (the older parenthesised wording)."""
    ev = only(read("[383554] [2026-07-01 09:31:38:047] torch_npu.memory: [ERROR] [383554] NPU out of memory. "
                   "Tried to allocate 72.00 MiB (NPU 0; 61.27 GiB total capacity; 56.05 GiB already allocated; "
                   "56.05 GiB current active; 5.04 MiB free; 58.39 GiB reserved in total by PyTorch).\n"),
              "oom_message")
    oom = ev.fields["oom"]
    assert (oom["device"], oom["gpu"], oom["tried_gib"], oom["total_gib"]) == ("NPU", 0, 72 / 1024, 61.27)


def test_a_window_that_begins_with_the_chain_line_is_the_chained_records_start() -> None:
    """A paste cut just after the first exception of a chain begins with Python's 'During
    handling of the above exception, another exception occurred:' (real-unseen 472): the record
    starts there, its first exception above the window; the same line later in a file, with no
    traceback open, passes on as it was."""
    chained = ["During handling of the above exception, another exception occurred:", "",
               "Traceback (most recent call last):", FRAME, CODE, "Exception: Capture cuda graph failed"]
    ev = only(read("\n".join(chained) + "\n"), "exception")
    assert (ev.line, ev.end_line, ev.fields["exception"]) == (1, 6, "Exception")
    assert ev.fields["chain"] == [{"exception": None, "message": None, "frames": 0}]
    later = read("[2025-03-01 14:03:07 TP0] Load weight begin. avail mem=70.00 GB\n" + "\n".join(chained) + "\n")
    assert only(later, "exception").line == 4 and "tb_chain" in kinds(later)


def test_ray_dedup_suffix_after_a_records_own_trailing_space() -> None:
    """A decode batch line ends with SGLang's ', ' and Ray puts its suffix after it (two spaces
    before '[repeated'; real-unseen 526): the record is read whole, the suffix counted."""
    evs = read("(SGLangEngine pid=276799, ip=10.142.0.6) [2025-12-11 06:23:21 TP0 EP0] Decode batch, "
               "#running-req: 2, #full token: 37707, full token usage: 0.01, cuda graph: True, "
               "gen throughput (token/s): 200.40, #queue-req: 0,  [repeated 4x across cluster]\n")
    batch = only(evs, "decode_batch")
    assert (batch.rank, batch.fields["running_req"], batch.fields["gen_throughput_tok_s"]) == ("TP0 EP0", 2, 200.4)
    assert only(evs, "ray_dedup").fields["count"] == 4


def test_an_exception_of_any_class_ends_its_traceback_where_python_prints_it() -> None:
    """Python prints a traceback's exception line right after the last frame's source line,
    whatever the class's name: ``psutil.AccessDenied: (pid=1)`` ends its chain (real-unseen
    704), as ``RuntimeError: ...`` would; the same words elsewhere are no exception line."""
    tb = ('Traceback (most recent call last):\n'
          '  File "/x/site-packages/psutil/__init__.py", line 1283, in _send_signal\n'
          '    raise AccessDenied(pid, name) from err\n'
          'psutil.AccessDenied: (pid=1)\n')
    ev = only(read(tb), "exception")
    assert (ev.fields["exception"], ev.fields["message"], ev.end_line) == ("psutil.AccessDenied", "(pid=1)", 4)
    alone = read("Note: the server restarts at noon\nAccessDenied: (pid=1)\n")
    assert "exception" not in kinds(alone)
    note = only(read(tb.replace("psutil.AccessDenied: (pid=1)", "Note: the server restarts at noon")), "exception")
    assert note.fields["exception"] is None


def test_multiprocessing_report_of_a_child_is_the_header_of_its_traceback() -> None:
    """multiprocessing prints "Process Process-1:3:" and then the child's traceback: that line
    is the record's first (the traceback above it ends before it, after its empty line, and
    does not take it into its message: real-unseen 704, 444)."""
    text = ('Traceback (most recent call last):\n'
            '  File "/x/scheduler.py", line 1, in run_scheduler_process\n'
            '    init()\n'
            'torch.distributed.DistNetworkError: The client socket has timed out after 600000ms\n'
            '\n'
            'Process Process-1:3:\n'
            'Traceback (most recent call last):\n'
            '  File "/x/multiprocessing/process.py", line 314, in _bootstrap\n'
            '    self.run()\n'
            'KeyError: 3\n')
    first, second = [e for e in read(text) if e.kind == "exception"]
    assert first.fields["message"] == "The client socket has timed out after 600000ms"
    assert (second.line, second.fields["source"], second.fields["exception"]) == (6, "process", "KeyError")


def test_a_line_of_text_right_after_a_dumps_frame_is_another_writers() -> None:
    """faulthandler ends each thread's frames with an empty line: a script's line right after
    a frame ("--- End of error details ---", real-unseen 727) ends the dump; after the empty
    line, text and frames of a native handler go on with the same failure (349)."""
    dump = ('Fatal Python error: Aborted\n'
            '\n'
            'Thread 0x00007f3afce70640 (most recent call first):\n'
            '  File "/x/torch/_inductor/compile_worker/subproc_pool.py", line 55 in _recv_msg\n')
    ev = only(read(dump + '--- End of error details ---\nKilling server process and exiting...\n'), "exception")
    assert (ev.line, ev.end_line) == (1, 4)
    native = read(dump + '\n!!!!!!! Segfault encountered !!!!!!\n  File "<unknown>", line 0, in gsignal\n')
    assert only(native, "exception").end_line == 7


@pytest.mark.parametrize("func,source", [("v1_score_request", "http_request"), ("lifespan", None),
                                         ("<module>", None)])
def test_a_traceback_through_a_route_handler_is_one_requests(func: str, source: str | None) -> None:
    """A frame of one of SGLang's route handlers (http_server.py's v1_score_request, real-unseen
    735) makes a traceback one request's, which the HTTP server logs and goes on from; the
    server's own life there (its import, its lifespan) is no request."""
    text = (f'  File "/app/python/sglang/srt/entrypoints/http_server.py", line 759, in {func}\n'
            '    return await handle(request)\n'
            '  File "/app/python/sglang/srt/managers/tokenizer_manager.py", line 280, in generate_request\n'
            '    async for response in self._handle_batch_request(obj, request):\n')
    assert only(read(text), "exception").fields["source"] == source


@pytest.mark.parametrize("func,source", [("run_endpoint_function", "http_request"), ("lifespan", None)])
def test_a_traceback_the_asgi_stack_dispatched_to_a_route_is_one_requests(func: str, source: str | None) -> None:
    """fastapi's dispatch of a request to a route of any of SGLang's servers (the multimodal
    server's image_api, real-unseen 864): its error middleware answers 500 and goes on serving;
    a traceback through the server's lifespan is the server's own."""
    text = (f'  File "/usr/local/lib/python3.12/dist-packages/fastapi/routing.py", line 290, in {func}\n'
            '    return await dependant.call(**values)\n'
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/multimodal_gen/runtime/entrypoints/openai/'
            'image_api.py", line 129, in generations\n'
            '    result.output[0],\n'
            "TypeError: 'NoneType' object is not subscriptable\n")
    assert only(read(text), "exception").fields["source"] == source


def test_the_old_launchers_router_init_state_heads_the_routers_traceback() -> None:
    """v0.1.x's launch_server prints each child's start-up state, the child's traceback when it
    failed ("router init state: Traceback (most recent call last):"; real-unseen 910, 942, 943)."""
    text = ("router init state: Traceback (most recent call last):\n"
            '  File "/x/sglang/srt/managers/router/manager.py", line 68, in start_router_process\n'
            "    model_client = ModelRpcClient(server_args, port_args)\n")
    ev = only(read(text), "exception")
    assert (ev.line, ev.fields["source"]) == (1, "Router")
    later = only(read("Initialization failed. controller_init_state: " + text.split(": ", 1)[1]), "exception")
    assert (later.line, later.fields["source"]) == (1, "Controller")  # real-unseen 960


def test_grep_s_gap_between_groups_is_no_frame_s_source_line() -> None:
    """``grep -A`` puts '--' between its groups of lines (real-unseen 1233): after a File line it
    is no source line of that frame, which keeps none."""
    ev = only(read("Traceback (most recent call last):\n" + FRAME + "\n--\n"
                   '  File "/sgl/model_runner.py", line 1496, in init_memory_pool\n    raise RuntimeError(\n'
                   "RuntimeError: Not enough memory.\n"), "exception")
    assert [f["code"] for f in ev.fields["frames"]] == [None, "raise RuntimeError("]


# ---------------------------------------------------------------- a paste indented as a whole
PASTE = ("[2025-08-11 11:11:18 TP0] Load weight begin. avail mem=78.50 GB\n"
         + "\n".join(TRACEBACK) + "\n\n"
         "[2025-08-11 11:11:20] Received sigquit from a child process. It usually means the child failed.\n")


def _plain(events: list[Event]) -> list[tuple[Any, ...]]:
    return [(e.kind, e.line, e.end_line, e.rank, e.ts, e.fields.get("exception")) for e in events]


@pytest.mark.parametrize("indent", [1, 2, 4])
@pytest.mark.parametrize("chunk", [None, 1, 3, 64])
def test_a_paste_indented_as_a_whole_reads_as_the_log(indent: int, chunk: int | None) -> None:
    """A log pasted into a Markdown list item has every line indented alike: read as the log it
    is, in any chunking (the spaces of an indentation cut at a chunk's end wait for their line)."""
    indented = "".join(" " * indent + line if line.strip() else line for line in PASTE.splitlines(keepends=True))
    assert _plain(read(indented, chunk)) == _plain(read(PASTE))
    parser = IncrementalParser("t.log")
    data = indented.encode()
    for i in range(0, len(data), chunk or len(data)):
        parser.feed(data[i:i + (chunk or len(data))])
    parser.close()
    assert (parser.stats.bytes, parser.stats.lines) == (len(data), PASTE.count("\n"))  # every byte counted
    crash = only(read(indented, chunk), "exception")
    assert crash.fields["frames"][0]["code"] == CODE.strip() and crash.text.splitlines()[1] == FRAME


def test_a_log_indented_only_in_its_tracebacks_keeps_its_indentation() -> None:
    """A log whose first lines are a traceback's (a window cut inside one) and then a line with
    no indentation is no indented paste: its lines are read as they are."""
    text = FRAME + "\n" + CODE + "\nRuntimeError: boom\n" + PASTE
    events = read(text)
    assert [e.text for e in events if e.line == 1][0].startswith(FRAME)
    assert _plain(read(text, 5)) == _plain(events)


def test_a_paste_indented_as_a_whole_reads_alike_on_every_path(tmp_path: Path) -> None:
    """The file readers (the bulk path, and byte ranges read apart) take the same verdict."""
    from logforensics.ingest.parallel import sniff
    from logforensics.pipeline import summarize_file
    plain, indented = tmp_path / "plain.log", tmp_path / "indented.log"
    plain.write_text(PASTE, encoding="utf-8")
    indented.write_text("".join("  " + ln if ln.strip() else ln for ln in PASTE.splitlines(keepends=True)),
                        encoding="utf-8")
    a, b = summarize_file(plain), summarize_file(indented)
    assert (a.outcome, a.crash.line, a.crash.first_rank) == (b.outcome, b.crash.line, b.crash.first_rank)
    assert b.coverage.lines_unrecognised == a.coverage.lines_unrecognised
    from logforensics.read.segments import NO_MARGIN, Margin
    assert sniff(str(indented)) == (False, Margin(indent=2)) and sniff(str(plain)) == (False, NO_MARGIN)


@pytest.mark.parametrize("gutter", ["{n}:", "{n}-", "{n:6d}\t", "{n:5d}   "])
@pytest.mark.parametrize("chunk", [None, 1, 5, 64])
def test_a_paste_with_a_line_number_gutter_reads_as_the_log(gutter: str, chunk: int | None) -> None:
    """``grep -n`` (``12:`` a match, ``12-`` a context line, ``--`` between groups), ``cat -n``
    and an editor's number column put a line number before every line: read as the log it is."""
    lines = PASTE.splitlines(keepends=True)
    numbered = "".join(gutter.format(n=40 + i) + line for i, line in enumerate(lines))
    assert _plain(read(numbered, chunk)) == _plain(read(PASTE))
    grep = "".join(f"{40 + i}{':' if i % 2 else '-'}" + line for i, line in enumerate(lines[:3])) + "--\n" \
        + "".join(f"{90 + i}:" + line for i, line in enumerate(lines[3:]))
    assert only(read(grep, chunk), "exception").fields["exception"] == "RuntimeError"


@pytest.mark.parametrize("head", ['"server.log" 16498L, 2947832B', '"2.log" [readonly] 120L, 9001B'])
def test_an_editors_numbered_view_under_its_file_message_reads_as_the_log(head: str) -> None:
    """A screen copy of vim with ``:set number``: the message it shows above the file opened
    (``"NAME" NL, NB``), then every line behind its number: read as the log it is."""
    lines = PASTE.splitlines(keepends=True)
    numbered = head + "\n" + "".join(f"{16433 + i:5d} " + line for i, line in enumerate(lines))
    got = [(k, line - 1, end - 1 if end else end, *rest) for k, line, end, *rest in _plain(read(numbered))[1:]]
    assert got == _plain(read(PASTE))


@pytest.mark.parametrize("text", [
    "2025-06-01 12:00:00 INFO a\n2025-06-01 12:00:01 INFO b\n2025-06-01 12:00:02 INFO c\n",  # dates
    "0: [2025-02-18 14:31:01 TP0] a\n1: [2025-02-18 14:31:01 TP1] b\n0: [2025-02-18 14:31:02 TP0] c\n",  # Slurm
    "12:00:01 a\n12:00:02 b\n12:00:03 c\n",  # a time column
])
def test_numbers_that_are_the_log_s_own_are_no_gutter(text: str) -> None:
    from logforensics.read.segments import NO_MARGIN, PasteMargin
    assert PasteMargin().judge(text.encode(), final=True) == NO_MARGIN


def test_torch_compile_s_user_frames_are_its_exception_s_message() -> None:
    """torch.compile appends the user's frames it was compiling to its exception's message,
    after "from user code:" and three spaces' indentation (real-unseen 1321): they are that
    message, not a traceback whose header and exception are missing. A rank's traceback after
    them is a record of its own."""
    dynamo = ['  File "/usr/lib/python3.10/dist-packages/torch/_dynamo/variables/lists.py", line 106, in getitem_const',
              "    assert isinstance(index, (int, torch.SymInt))", "AssertionError:", "", "from user code:",
              '   File "/sgl-workspace/sglang/python/sglang/srt/layers/attention/__init__.py", line 58, in resume_at_57',
              "    return self.forward_decode(q, k, v, layer, forward_batch)"]
    excs = [e for e in read("\n".join([*dynamo, "", TRACEBACK[0], FRAME, CODE]) + "\n") if e.kind == "exception"]
    assert [(e.line, e.end_line, e.rank) for e in excs] == [(1, 8, None), (9, 11, "TP3")]
    assert excs[0].fields["exception"] == "AssertionError"
    assert excs[0].fields["message"].splitlines()[-2:] == [
        'File "/sgl-workspace/sglang/python/sglang/srt/layers/attention/__init__.py", line 58, in resume_at_57',
        "return self.forward_decode(q, k, v, layer, forward_batch)"]
    assert [f["func"] for f in excs[0].fields["frames"]] == ["getitem_const"]


def test_uvicorn_s_asgi_exception_record_heads_one_request_s_traceback() -> None:
    """uvicorn logs "Exception in ASGI application" and then the request's traceback, answers
    500 and goes on serving (real-unseen 1345): the traceback is one request's failure, whatever
    SGLang module its frames are in (2025's openai_api/adapter.py), not a process's end."""
    lines = ["[2025-04-03 20:54:05] ERROR:    Exception in ASGI application", "Traceback (most recent call last):",
             '  File "/sgl-workspace/sglang/python/sglang/srt/openai_api/adapter.py", line 958, in v1_chat_generate_request',
             "    prompt_ids = tokenizer_manager.tokenizer.apply_chat_template("]
    exc = only(read("\n".join(lines) + "\n"), "exception")
    assert (exc.line, exc.end_line, exc.fields["source"]) == (1, 4, "http_request")
    other = only(read("\n".join(["[2025-04-03 20:54:05] ERROR:    Exception in callback", *lines[1:]]) + "\n"),
                 "exception")
    assert other.fields["source"] is None


def test_a_window_opening_on_a_code_line_and_its_carets_begins_that_traceback() -> None:
    """Python prints carets only under a frame's code line: a window that opens on a line of
    text, carets under it and an exception (real-unseen 1423, behind a quote's '> > ') begins
    with that traceback's last frame, its File line above the window. Text above carets-less
    exceptions stays text."""
    lines = ["    .item()", "    ^^^^^^", "RuntimeError: NPU function error: call aclnnIndexPut failed"]
    exc = only(read("\n".join(lines) + "\n"), "exception")
    assert (exc.line, exc.end_line, exc.fields["exception"]) == (1, 3, "RuntimeError")
    flat = only(read("\n".join([".item()", "^^^^^^", lines[2]]) + "\n"), "exception")
    assert (flat.line, flat.fields["exception"]) == (1, "RuntimeError")
    text = read("\n".join(["some words of a script", "RuntimeError: NPU function error"]) + "\n")
    assert only(text, "exception").line == 2


def test_a_window_opening_on_a_prefixed_code_line_begins_that_rank_s_traceback() -> None:
    """torch's launcher puts '[rank2]:' before every line of a rank's traceback: a window that
    opens on such a code line and its carets (real-unseen 1444) begins that traceback there, as
    one without the prefix does; another rank's File line does not go on with it."""
    lines = ["[rank2]:     server_args = ServerArgs(", "[rank2]:                   ^^^^^^^^^^^",
             '[rank2]:   File "<string>", line 275, in __init__',
             '[rank2]:   File "/usr/local/lib/python3.12/dist-packages/sglang/srt/server_args.py", line 589, '
             "in __post_init__", "[rank2]:     self._handle_model_specific_adjustments()"]
    exc = only(read("\n".join(lines) + "\n"), "exception")
    assert (exc.line, exc.end_line, exc.rank) == (1, 5, "rank2")
    other = read("\n".join([*lines[:2], lines[2].replace("[rank2]", "[rank3]")]) + "\n")
    assert [e.line for e in other if e.kind == "exception"] == [3]


def test_a_request_s_500_right_after_a_traceback_naming_no_process_makes_it_the_request_s() -> None:
    """uvicorn's access line answering a request with a 500 on the line after a traceback with no
    header, rank or scheduler frame (real-unseen 1445): the handler raised, the server answered
    and went on; the traceback is that request's. Not a scheduler's traceback, nor a 200, nor an
    answer a line later."""
    exc = 'RuntimeError: cannot access local variable \'audio_target_sr\' where it is not associated with a value'
    answer = 'INFO:     127.0.0.1:51720 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error'
    assert only(read(f"{exc}\n{answer}\n"), "exception").fields["source"] == "http_request"
    assert only(read(f"{exc}\n{answer.replace('500 Internal Server Error', '200 OK')}\n"),
                "exception").fields["source"] is None
    between = "[2026-03-01 10:00:00 TP0] Decode batch. #running-req: 1, #token: 20, token usage: 0.00, #queue-req: 0"
    assert only(read(f"{exc}\n{between}\n{answer}\n"), "exception").fields["source"] is None
    scheduler = ['Traceback (most recent call last):',
                 '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2547, in event_loop',
                 '    self.process_batch_result(batch, result)', exc]
    assert only(read("\n".join([*scheduler, answer]) + "\n"), "exception").fields["source"] is None


def test_a_web_page_s_telephone_links_read_as_the_text_they_show() -> None:
    """A thread copied from its rendered page as Markdown, where the page made a telephone link
    of a stamp's first digits: ``[[2025-11-19 14](tel:2025-11-19 14):41:27]``."""
    plain = "[2025-11-19 14:41:27 TP0] Load weight begin. avail mem=70.00 GB\n"
    linked = "[[2025-11-19 14](tel:2025-11-19 14):41:27 TP0] Load weight begin. avail mem=70.00 GB\n"
    assert [(e.kind, e.rank, e.ts, e.fields) for e in read(linked)] == \
        [(e.kind, e.rank, e.ts, e.fields) for e in read(plain)]


_TAIL = ["[2025-10-29 16:40:01] INFO:     Received terminate signal, starting graceful shutdown",
         "[pd-test] Decode log tail:",
         "    return self.model.forward(",
         "           ^^^^^^^^^^^^^^^^^^^",
         '  File "/sgl-workspace/sglang/python/sglang/srt/models/deepseek_v2.py", line 3027, in forward',
         "    hidden_states = self.model(",
         "TypeError: forward() got an unexpected keyword argument 'pp_proxy_tensors'"]


@pytest.mark.parametrize("chunk", [None, 1, 7, 64])
def test_a_tail_that_begins_inside_a_traceback_mid_log_begins_at_its_code_line(chunk: int | None) -> None:
    """A script prints a server's log tail under its own words: the tail's first lines are a
    frame's code and carets, whose File line is above the tail; the traceback begins there."""
    events = read("\n".join(_TAIL) + "\n", chunk)
    exc = only(events, "exception")
    assert (exc.line, exc.end_line, exc.fields["exception"]) == (3, 7, "TypeError")
    assert [e.line for e in events] == sorted(e.line for e in events)


@pytest.mark.parametrize("chunk", [None, 1, 7])
def test_code_lines_no_frame_follows_pass_on_in_order(chunk: int | None) -> None:
    text = "\n".join([_TAIL[0], "    a pretty-printed value", "    and its second line", _TAIL[0]]) + "\n"
    events = read(text, chunk)
    assert [(e.kind, e.line) for e in events] == [("uvicorn_msg", 1), ("indented", 2), ("indented", 3),
                                                  ("uvicorn_msg", 4)]


@pytest.mark.parametrize("pure", [False, True])
def test_a_code_line_of_a_shape_seen_before_still_begins_the_tail_s_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pure: bool) -> None:
    """The same code line earlier in a whole traceback (its shape known to the bulk reader),
    then serving, then the tail: the file readers begin the tail's traceback at its code line."""
    from logforensics import native
    from logforensics.pipeline import summarize_file

    if pure:
        monkeypatch.setattr(native, "available", lambda: False)
    earlier = ["[2025-10-29 16:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
               *_TAIL[4:6], "    return self.model.forward(", "           ^^^^^^^^^^^^^^^^^^^",
               '  File "/sgl-workspace/sglang/python/sglang/srt/models/deepseek_v2.py", line 3027, in forward',
               "RuntimeError: first"]
    batches = [f"[2025-10-29 16:{10 + i // 60:02d}:{i % 60:02d} TP0] Decode batch, #running-req: 1, #token: 20, "
               "token usage: 0.00, gen throughput (token/s): 50.00, #queue-req: 0" for i in range(300)]
    path = tmp_path / "tail.log"
    path.write_text("\n".join([*earlier, *batches, *_TAIL]) + "\n", encoding="utf-8")
    s = summarize_file(path)
    tail_code = len(earlier) + len(batches) + 3
    assert [e.first_line for e in s.exceptions] == [1, tail_code]


def test_sglang_records_in_vllms_format_are_read_as_sglangs() -> None:
    """SGLang 0.4 imported vLLM, whose logging took the root logger and heads every line of a record
    ("ERROR 02-09 16:43:26 tp_worker_overlap_thread.py:112] "): a scheduler's exception header and its
    traceback's lines behind that head are the traceback (real-unseen 1636); vLLM's own messages
    behind it stay vLLM's records, and so does all behind vLLM V1's head."""
    head = "ERROR 02-09 16:43:26 tp_worker_overlap_thread.py:112] "
    text = (f"{head}TpModelWorkerClient hit an exception: Traceback (most recent call last):\n"
            f'{head}  File "/sgl/python/sglang/srt/managers/tp_worker_overlap_thread.py", line 109, in forward_thread_func\n'
            f"{head}    self.forward_thread_func_()\n"
            f"{head}RuntimeError: CUDA error: an illegal memory access was encountered\n"
            "INFO 02-09 16:40:01 __init__.py:190] Automatically detected platform cuda.\n")
    evs = read(text)
    ev = only(evs, "exception")
    assert (ev.fields["source"], ev.fields["exception"]) == ("TpModelWorkerClient", "RuntimeError")
    assert frames(ev) == ["forward_thread_func"]
    assert [e.line for e in evs if e.kind == "vllm_log"] == [5]
    # vLLM V1's head ("[core.py:367]"), which no SGLang's records went through, heads vLLM's own
    v1 = text.replace(head, "ERROR 03-31 07:48:38 [core.py:367] ").replace("TpModelWorkerClient", "EngineCore")
    assert not [e for e in read(v1) if e.kind == "exception"]
