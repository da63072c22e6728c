"""What a window of a log shows at its edges: a traceback it starts inside, requests it answers.

A pasted excerpt often starts inside a traceback: on the source line of a frame whose
``File`` line is above the window, or on a caret line above the exception line. Those lines
belong to the traceback that follows them, whose record then starts at line 1, not at the
first ``File`` line. The same lines followed by anything else stay what they were.

A window of uvicorn's access lines alone shows the server serving: SGLang starts its HTTP
server only once every scheduler is ready, and answers its own warm-up request before it
prints its readiness. The first request served (a success, on a path other than the
model-info probe the launcher polls before warming up) is the evidence, with its line, on
both readers (the bulk reader takes the later ones as counts).
"""

from __future__ import annotations

import json

import pytest
from accel import accelerated
from test_bulk import _bulk_path, _events_path

from logforensics import summarize_file
from logforensics.read.parser import IncrementalParser

FRAMES = """\
  File "/sgl/srt/layers/moe/topk.py", line 322, in biased_grouped_topk_gpu
    topk_weights, topk_ids = moe_fused_gate(
  File "/sgl/srt/managers/scheduler.py", line 2410, in run_batch
    raise RuntimeError("operation not permitted when stream is capturing")
RuntimeError: operation not permitted when stream is capturing
[2026-03-05 10:24:01] Received sigquit from a child process. It usually means the child failed.
"""
#: windows that start inside the traceback above: a frame's source line, a caret line
CODE_LEAD = "    topk_weights, topk_ids = biased_grouped_topk(\n" + FRAMES
CARET_LEAD = """\
         ^^^^^^^^^
AssertionError: parent does not have child key
[2026-04-24 10:02:46 TP1] Decode batch, #running-req: 1, #token: 99, token usage: 0.01, gen throughput (token/s): 9.00, #queue-req: 0
"""
#: the same kind of first line, followed by records that are no traceback
NOT_A_TRACEBACK = """\
    "max_new_tokens": 128,
[2026-04-24 10:02:46 TP0] Prefill batch, #new-seq: 1, #new-token: 8, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0
[2026-04-24 10:02:47 TP0] Decode batch, #running-req: 1, #token: 99, token usage: 0.01, gen throughput (token/s): 9.00, #queue-req: 0
"""


def _events(text: str, size: int) -> list:
    parser = IncrementalParser("t.log")
    data = text.encode()
    out = []
    for start in range(0, len(data), size):
        out += parser.feed(data[start:start + size])
    return out + parser.close()


@pytest.mark.parametrize("size", [1 << 20, 1, 7])
@pytest.mark.parametrize("text,exception,last", [(CODE_LEAD, "RuntimeError", 6), (CARET_LEAD, "AssertionError", 2)])
def test_a_window_cut_inside_a_traceback_starts_its_record_at_line_1(text: str, exception: str, last: int,
                                                                      size: int) -> None:
    [exc] = [e for e in _events(text, size) if e.kind == "exception"]
    assert (exc.line, exc.end_line, exc.fields["exception"]) == (1, last, exception)
    assert tuple(exc.fields["lines"][0]) == (1, text.splitlines()[0])


@pytest.mark.parametrize("size", [1 << 20, 1, 7])
def test_the_same_first_line_before_other_records_stays_as_it_was(size: int) -> None:
    events = _events(NOT_A_TRACEBACK, size)
    assert [(e.kind, e.line) for e in events] == [("indented", 1), ("prefill_batch", 2), ("decode_batch", 3)]


def test_the_crash_is_at_line_1(tmp_path) -> None:
    log = tmp_path / "cut.log"
    log.write_text(CODE_LEAD)
    s = summarize_file(log)
    assert s.outcome == "crashed" and s.crash is not None and s.crash.line == 1


def _access(path: str, status: str, i: int) -> str:
    return f'[2025-08-11 21:{i // 60 % 60:02d}:{i % 60:02d}] INFO:     10.0.0.2:{50000 + i} - "{path} HTTP/1.1" {status}\n'


def test_answered_requests_alone_show_a_ready_server(tmp_path) -> None:
    log = tmp_path / "access.log"
    log.write_text(_access("GET /get_model_info", "200 OK", 0) + _access("POST /v1/chat/completions", "400 Bad Request", 1)
                   + "".join(_access("POST /v1/chat/completions", "200 OK", i) for i in range(2, 8)))
    s = summarize_file(log)
    assert s.outcome == "ready", s.outcome_reason
    assert s.outcome_reason.startswith("served a request at line 3 (POST /v1/chat/completions 200)")
    assert "readiness line is not in this log" in s.outcome_reason
    assert s.phase_reached == {"-": "serving"}


def test_the_launchers_probe_alone_is_no_request_served(tmp_path) -> None:
    log = tmp_path / "probe.log"
    log.write_text(_access("GET /get_model_info", "200 OK", 0) + _access("GET /model_info", "200 OK", 1))
    s = summarize_file(log)
    assert s.outcome == "incomplete" and s.phase_reached == {}


@accelerated
def test_the_first_request_served_is_a_line_on_both_readers() -> None:
    """The bulk reader takes answered requests only once the first served was read as an
    event, so both readers cite the same line."""
    lines = [_access("GET /model_info", "200 OK", 0)] + [
        _access("POST /v1/chat/completions", "404 Not Found" if i < 300 else "200 OK", i) for i in range(1, 900)]
    data = "".join(lines).encode()
    want = _events_path(data, "access.log")
    assert json.loads(want)["outcome_reason"].startswith("served a request at line 301 ")
    # answers other than 200 are events on both readers: counted by status, the first cited
    requests = json.loads(want)["coverage"]["requests"]
    assert requests["answers"] == {"200": 600, "404": 299}  # (the launcher's /model_info is a probe)
    assert [(st, a["line"]) for st, a in requests["first"].items()] == [("404", 2)]
    for size in (1 << 20, 4093):
        got, taken = _bulk_path(data, "access.log", size)
        assert got == want, f"blocks of {size} bytes"
        assert taken > 500
