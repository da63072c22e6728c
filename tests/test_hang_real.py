"""The hang objects of the real excerpts in fixtures/real (second corpus)."""

from __future__ import annotations

from pathlib import Path

from logforensics import summarize_file

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real"
REAL2 = {p.name[:3]: p for p in REAL.glob("1[0-9][0-9]-*.log")}


# -- real excerpts (fixtures/real, second corpus) ------------------------------------------
def _real(prefix: str) -> Path:
    assert prefix in REAL2, f"fixtures/real/{prefix}-*.log is missing"
    return REAL2[prefix]


def test_real_101_sglang_watchdog_then_exit_131() -> None:
    s = summarize_file(_real("101"))
    assert s.outcome == "hung"
    h = s.hang
    assert h.timer == "sglang_watchdog" and h.timeout_s == 300 and h.setting == "--watchdog-timeout"
    assert h.ranks == ["DP0 TP1"]
    assert h.exit_code == 131
    # the excerpt starts inside a dump: its threads are read, but no main thread is shown
    assert h.pyspy and h.pyspy[0].main_function is None and h.pyspy[0].threads == 2


def test_real_109_watchdog_failure_is_not_called_a_timeout() -> None:
    s = summarize_file(_real("109"))
    h = s.hang
    assert h.timer == "c10d_failure" and not h.timed_out and not h.ends_run
    [c] = h.collectives
    assert (c.rank, c.pg, c.seq, c.last_enqueued, c.last_completed) == ("rank1", 2, 40231, 40267, 40230)
    assert s.outcome != "hung"


def test_real_119_store_timeout_during_init() -> None:
    s = summarize_file(_real("119"))
    h = s.hang
    assert h.timer == "c10d_store" and h.timeout_s == 1800.0 and h.setting == "--dist-timeout"
    assert h.ranks == ["TP3", "TP4"]  # c10d's global ranks; pure TP (the excerpt shows TP5): TP ranks


def test_real_125_tcpstore_assert_is_no_timer() -> None:
    s = summarize_file(_real("125"))
    assert s.hang is None or not s.hang.timed_out


# -- why stacks are missing, and what the ranks were on, from the real texts ---------------
def test_real_147_pyspy_not_installed_and_the_batch_the_watchdog_printed() -> None:
    h = summarize_file(_real("147")).hang
    assert h.timer == "sglang_watchdog" and h.ranks == ["TP3"]
    [failure] = h.stacks.pyspy_failures
    # the line's own words: "Pyspy failed to dump PID 171. Error: /bin/dash: 1: py-spy: not found"
    assert (failure.reason, failure.pid, failure.rank, failure.line) == ("not_installed", 171, "TP2", 11)
    assert failure.error == "/bin/dash: 1: py-spy: not found"
    assert "py-spy is not installed" in h.stacks.missing_why and "/bin/dash: 1: py-spy: not found" in \
        h.stacks.missing_why
    [batch] = h.stuck_on
    assert (batch.what, batch.batch_size, batch.rids, batch.rank) == (
        "batch", 109, ["185ef8b8d25943c8aaa7f4b2630be2e0"], "TP3")
    assert batch.evidence[0].line == 6
    [p] = h.progress
    assert p.rank == "TP3" and p.evidence[0].line == 5
    # nothing in the excerpt shows these on or off
    knobs = {k.setting: k.status for k in h.stacks.next_time}
    assert knobs["py-spy"] == "not installed"
    assert knobs["SGLANG_DEBUG_SLOW_SCHEDULER_PASS_MS"] == knobs["NCCL_DEBUG=INFO"] == "not in this log"


def test_real_149_pyspy_command_not_found_then_sigquit() -> None:
    s = summarize_file(_real("149"))
    assert s.outcome == "hung"
    [failure] = s.hang.stacks.pyspy_failures
    assert (failure.reason, failure.pid, failure.error) == ("not_installed", 63217,
                                                                     "/bin/sh: py-spy: command not found")
    assert s.hang.stuck_on[0].batch_size == 26


def test_real_109_flight_recorder_off_and_nccl_debug_on() -> None:
    h = summarize_file(_real("109")).hang
    knobs = {k.setting: k for k in h.stacks.next_time}
    # "Stack trace of the failed collective not found, potentially because FlightRecorder is disabled."
    assert knobs["TORCH_NCCL_TRACE_BUFFER_SIZE"].status == "off"
    assert knobs["TORCH_NCCL_TRACE_BUFFER_SIZE"].evidence.line == 4
    assert knobs["NCCL_DEBUG=INFO"].status == "on"  # NCCL INFO lines
    assert h.stacks.missing_why == "not in this log"
    [p] = h.progress
    assert (p.rank, p.last_enqueued, p.last_completed) == ("rank1", 40267, 40230)
    assert p.waiting_on.to_dict() == {"op": None, "seq": 40231, "pg": 2} and p.evidence[0].line == 3


def test_real_hang_progress_in_the_terminal_and_the_html_report() -> None:
    from io import StringIO

    from rich.console import Console

    from logforensics.pipeline import diagnose_files
    from logforensics.render.html import render_html
    from logforensics.render.terminal import render_summary

    path = _real("109")
    out = StringIO()
    render_summary(summarize_file(path), Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "Hang: per-rank progress" in text
    row = next(line for line in text.splitlines() if "rank1" in line and "40230" in line)
    assert "40267" in row and "seq 40231" in row and f"{path.name}:3" in row
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE: off" in text and "Stack dumps: not in this log" in text
    html = render_html(diagnose_files(str(path), None))
    section = html[html.index('<section id="hang">'):]
    section = section[:section.index("</section>")]
    assert "<td>40230</td><td>40267</td>" in section and f"{path.name}:3" in section
    assert "stack dumps: not in this log" in section


def test_unseen_232_watchdog_own_frames_and_terminate_are_hang_evidence_not_a_crash() -> None:
    """torch's NCCL watchdog printed its thread's C++ frames (line 1, the tail of an earlier
    dump), then 'terminate called after throwing ... DistBackendError' whose what() is the
    collective timeout: all of it is the watchdog's report of the hang, none of it a crash."""
    [path] = (REAL.parent / "real-unseen").glob("232-*.log")
    s = summarize_file(path)
    assert s.outcome == "hung"
    assert s.hang is not None and s.hang.first_line == 7 and s.hang.ranks == ["rank5"]
    assert s.crash is None
