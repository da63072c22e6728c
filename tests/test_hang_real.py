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
    assert h.pyspy and h.pyspy[0]["main_function"] is None and h.pyspy[0]["threads"] == 2


def test_real_109_watchdog_failure_is_not_called_a_timeout() -> None:
    s = summarize_file(_real("109"))
    h = s.hang
    assert h.timer == "c10d_failure" and not h.timed_out and not h.ends_run
    [c] = h.collectives
    assert (c["rank"], c["pg"], c["seq"], c["last_enqueued"], c["last_completed"]) == ("rank1", 2, 40231, 40267, 40230)
    assert s.outcome != "hung"


def test_real_119_store_timeout_during_init() -> None:
    s = summarize_file(_real("119"))
    h = s.hang
    assert h.timer == "c10d_store" and h.timeout_s == 1800.0 and h.setting == "--dist-timeout"
    assert h.ranks == ["TP3", "TP4"]  # c10d's global ranks; pure TP (the excerpt shows TP5): TP ranks


def test_real_125_tcpstore_assert_is_no_timer() -> None:
    s = summarize_file(_real("125"))
    assert s.hang is None or not s.hang.timed_out
