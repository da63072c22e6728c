"""The report's serving views: throughput of both runs broken at idle gaps with change points,
what a failing capture used, serving ranks that print no batch statistics."""

from __future__ import annotations

from pathlib import Path

from logforensics.pipeline import diagnose_files
from logforensics.render.html import build_context, phase_spans
from logforensics.render.serving_charts import broken_line

ROOT = Path(__file__).resolve().parent.parent
COLLAPSE = ROOT / "fixtures" / "serving" / "throughput_collapse"
CAPTURE = ROOT / "fixtures" / "diff" / "custom_ar_pcie_oom"


def test_idle_gaps_break_the_line() -> None:
    pts = [["2025-03-08T12:00:00", 100.0, 10], ["2025-03-08T12:00:02", 110.0, 12],
           ["2025-03-08T12:10:00", 90.0, 80], ["2025-03-08T12:10:02", 95.0, 82]]
    xs, ys, lines = broken_line(pts, 30.0)
    assert xs == [0.0, 2.0, None, 600.0, 602.0] and ys[2] is None and lines == [10, 12, None, 80, 82]


def test_throughput_chart_shows_both_runs_and_marks_the_change() -> None:
    d = diagnose_files(str(COLLAPSE / "failing.log"), str(COLLAPSE / "baseline.log"))
    html = str(build_context(d).throughput_chart)
    assert d.failing.serving is not None
    change = next(c for c in d.failing.serving.changes if c.metric == "gen_tok_s")
    assert "baseline (window" in html and "failing (window" in html
    assert f"failing line {change.line}" in html


def test_memory_chart_shows_what_the_failing_capture_used() -> None:
    d = diagnose_files(str(CAPTURE / "failing.log"), str(CAPTURE / "baseline.log"))
    html = str(build_context(d).memory_chart)
    assert "CUDA graphs captured before the OOM (at least)" in html
    assert d.facts.capture is not None and d.facts.capture.used_gib > 10


def test_ranks_that_print_no_batches_are_not_drawn_as_stopped() -> None:
    d = diagnose_files(str(CAPTURE / "failing.log"), str(CAPTURE / "baseline.log"))
    _, spans = phase_spans(d.baseline)
    ends = {rank: s[-1].end for rank, s in spans.items()}
    assert {s[-1].phase for s in spans.values()} == {"serving"}
    assert max(ends.values()) - min(ends.values()) < 1.0  # TP1-TP7 serve until TP0's last batch
