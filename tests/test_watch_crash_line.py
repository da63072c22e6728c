"""The crash notice both ``watch`` modes print: one wording, with everything the summary knows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from logforensics.model.summary import Crash
from logforensics.pipeline import summarize_file
from logforensics.watch.view import crash_line

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real"


def test_crash_line_names_the_exception_its_cause_rank_phase_and_place() -> None:
    s = summarize_file(REAL / "040-mi355x-chained-keyerror-valueerror-unknown-model-type-at-launch.log")
    crash = s.crash
    assert crash is not None and crash.chain
    cause = next(c.exception for c in crash.chain if c.exception)
    line = crash_line(crash)
    assert line.startswith("[watch] crash diagnosed: ")
    assert f"{crash.exception} (while handling {cause})" in line
    assert f"on {crash.first_rank or 'unknown rank'} in {crash.phase or 'unknown phase'}" in line
    assert line.endswith(f"({crash.file}, line {crash.line})")


def test_crash_line_of_a_multi_node_run_names_the_node() -> None:
    s = summarize_file(REAL / "040-mi355x-chained-keyerror-valueerror-unknown-model-type-at-launch.log")
    assert crash_line(s.crash, "node1").startswith("[watch] crash diagnosed on node1: ")
    assert s.crash is not None
    assert crash_line(replace(s.crash, node="node2"), "node1").startswith("[watch] crash diagnosed on node2: ")


def test_crash_line_without_an_exception_or_a_file_says_so() -> None:
    line = crash_line(Crash(line=7, file=None, text="Killed"))
    assert line == "[watch] crash diagnosed: fatal error on unknown rank in unknown phase (line 7)"


def test_tracebacks_by_rank_are_printed_one_way_by_summary_and_watch() -> None:
    from rich.console import Console

    from logforensics.render.terminal import print_tracebacks

    s = summarize_file(REAL.parent / "diff" / "capture_oom_max_bs" / "failing.log")
    assert len(s.exceptions) > 1 or len(s.exceptions[0].ranks) > 1
    outs = []
    for prefix in ("", "[watch] "):
        console = Console(width=300, record=True)
        print_tracebacks(s.exceptions, console, prefix)
        outs.append(console.export_text())
    assert outs[1] == "[watch] " + outs[0]
    for exc in s.exceptions:
        assert f"on {', '.join(r or '?' for r in exc.ranks)} (lines {exc.occurrences[0].line}" in outs[0]
    one = Console(width=300, record=True)
    print_tracebacks(s.exceptions[:1] if len(s.exceptions[0].ranks) == 1 else [], one)
    assert one.export_text() == ""  # one traceback of one rank is the crash panel's
