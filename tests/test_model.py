"""The run model: a summary is a pure snapshot, and a saved summary reads back.

``watch`` summarises a log mid-stream, ``summary`` and ``diff`` once at the end: both
must say the same of the same bytes. So taking a summary must not change the model,
and observing more records must not change a summary already taken.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from logforensics.ingest import LiveRun
from logforensics.model.records import ChainLink, Frame, LogLine
from logforensics.model.summary import RunSummary, SummaryFormatError

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures").glob("**/*.log"))


def _json(summary: RunSummary) -> str:
    return json.dumps(summary.to_dict(), default=str, sort_keys=True)


def _one_pass(data: bytes) -> RunSummary:
    run = LiveRun("x")
    run.feed(data)
    run.close()
    return run.summary()


#: Summaries taken of one log, at most: after each of its first lines, then evenly spaced
#: (a summary costs time in the size of the model; one after every line of a long fixture is quadratic).
MOST_SUMMARIES = 400


def _summarised_at_every_line(data: bytes) -> tuple[RunSummary, list[tuple[RunSummary, str]]]:
    """The final summary of ``data`` fed a line at a time, with a summary taken after
    every line (every few lines past the first ``MOST_SUMMARIES // 2`` of a long log),
    each kept with its JSON as it was when taken."""
    run = LiveRun("x")
    taken = []
    lines = data.splitlines(keepends=True)
    every = max(1, 2 * len(lines) // MOST_SUMMARIES)
    for k, line in enumerate(lines):
        run.feed(line)
        if k < MOST_SUMMARIES // 2 or k % every == 0 or k == len(lines) - 1:
            s = run.summary()
            taken.append((s, _json(s)))
    run.close()
    return run.summary(), taken


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.parent.name[:4] + "/" + p.name[:40])
def test_summarising_after_every_line_changes_nothing(path: Path) -> None:
    data = path.read_bytes()
    final, taken = _summarised_at_every_line(data)
    assert _json(final) == _json(_one_pass(data))
    for s, when_taken in taken:  # a snapshot: later records did not reach into it
        assert _json(s) == when_taken


RANKLESS_CRASH = (
    "[2025-12-22 19:08:50] Load weight begin. avail mem=78.50 GB\n"
    "[2025-12-22 19:08:58] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2651, in run_scheduler_process\n'
    "    scheduler.event_loop_overlap()\n"
    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    "[2025-12-22 19:08:59] Received sigquit from a child process. It usually means the child failed.\n"
)
LATER_RANKS = (
    "[2026-03-02 08:41:17 TP0] Load weight begin. avail mem=78.50 GB\n"
    "[2026-03-02 08:41:17 TP1] Load weight begin. avail mem=78.50 GB\n"
)


def test_a_rankless_crash_stays_rankless_when_ranks_follow() -> None:
    """Summarised before the ranks appear, the crash looked like a single-rank run's; the
    summary at the end must not keep that guess."""
    final, taken = _summarised_at_every_line((RANKLESS_CRASH + LATER_RANKS).encode())
    guesses = [s.crash.first_rank for s, _ in taken if s.crash]
    assert guesses[0] == "-"  # before TP0 and TP1 appear, the log looks like a single-rank run's
    assert final.crash is not None
    assert final.crash.first_rank is None
    assert final.exceptions[0].ranks == [None]
    assert _json(final) == _json(_one_pass((RANKLESS_CRASH + LATER_RANKS).encode()))


@pytest.mark.parametrize("path", FIXTURES[::5], ids=lambda p: p.name[:40])
def test_a_saved_summary_reads_back(path: Path) -> None:
    summary = _one_pass(path.read_bytes())
    saved = json.loads(json.dumps(summary.to_dict(), default=str))
    again = RunSummary.from_dict(saved)
    assert json.loads(json.dumps(again.to_dict(), default=str)) == saved
    # key for key and in order: the crash, hang and tracebacks read back print as they were saved
    assert json.dumps(again.to_dict(), default=str) == json.dumps(saved)
    assert again.per_rank.keys() == summary.per_rank.keys()
    # typed to the leaves: the records read back equal the model's, field for field
    assert again.per_rank == summary.per_rank
    assert again.crash == summary.crash and again.exceptions == summary.exceptions
    assert (again.errors, again.ready, again.stopped) == (summary.errors, summary.ready, summary.stopped)


def test_a_saved_summary_reads_back_typed() -> None:
    """Per-rank phases, last lines and progress bars read back as records, not mappings."""
    path = ROOT / "fixtures" / "real" / "001-tp1-capture-zero-avail-mem-gemma3.log"
    summary = _one_pass(path.read_bytes())
    again = RunSummary.from_dict(json.loads(json.dumps(summary.to_dict())))
    rank = again.per_rank["TP0"]
    assert rank.phases["cuda_graph_capture"].first_line == 3 and rank.phases["kv_cache_alloc"].last_line == 2
    assert rank.last_seen.line == 5 and rank.last_seen.node is None
    bar = rank.progress["cuda_graph_capture"]
    assert (bar.n, bar.total, bar.line, bar.avail_gib, bar.bs) == (4, 4, 4, 0.0, None)


def test_a_crash_reads_back_typed_to_its_frames() -> None:
    """A chained OOM traceback: its frames, the exception it was raised while handling, the
    OOM figures and the line naming the exception are records, in the model's summary and
    in one read back."""
    path = ROOT / "fixtures" / "diff" / "capture_oom_max_bs" / "failing.log"
    summary = _one_pass(path.read_bytes())
    for s in (summary, RunSummary.from_dict(json.loads(json.dumps(summary.to_dict())))):
        crash = s.crash
        assert crash is not None and crash.oom is not None and crash.frames
        assert isinstance(crash.frames[-1], Frame) and crash.frames[-1].func and crash.frames[-1].log_line
        assert crash.oom.tried_gib is not None and crash.oom.device == "CUDA"
        [cause] = crash.chain
        assert isinstance(cause, ChainLink) and cause.exception == "torch.OutOfMemoryError" and cause.frames == 21
        assert isinstance(crash.exception_line, LogLine) and crash.exception_line.line == 160 > crash.line
        assert crash.exception_line.text.startswith("Exception: Capture cuda graph failed")


def test_a_json_that_is_not_a_summary_is_refused() -> None:
    with pytest.raises(SummaryFormatError, match="missing"):
        RunSummary.from_dict({"outcome": "ready"})
    with pytest.raises(SummaryFormatError):
        RunSummary.from_dict([])  # type: ignore[arg-type]
    path = ROOT / "fixtures" / "real" / "001-tp1-capture-zero-avail-mem-gemma3.log"
    saved = _one_pass(path.read_bytes()).to_dict()
    saved["phases"]["TP0"]["cuda_graph_capture"] = {"first_line": 3}  # a phase without its last line
    with pytest.raises(SummaryFormatError, match="lacks a key"):
        RunSummary.from_dict(saved)
    saved["phases"]["TP0"] = ["not", "a", "mapping"]
    with pytest.raises(SummaryFormatError):
        RunSummary.from_dict(saved)


def test_diff_reads_a_saved_summary_as_the_log_it_came_from(tmp_path: Path) -> None:
    """``diff a.summary.json b.log`` gives the diagnosis ``diff a.log b.log`` gives."""
    import subprocess
    import sys

    case = ROOT / "fixtures" / "diff" / "custom_ar_pcie_oom"
    saved = tmp_path / "baseline.summary.json"
    cmd = [sys.executable, "-m", "logforensics"]
    saved.write_bytes(subprocess.run([*cmd, "summary", str(case / "baseline.log"), "--json"],
                                     check=True, capture_output=True).stdout)
    from_log = subprocess.run([*cmd, "diff", str(case / "baseline.log"), str(case / "failing.log"), "--json", "-"],
                              capture_output=True)
    from_json = subprocess.run([*cmd, "diff", str(saved), str(case / "failing.log"), "--json", "-"],
                               capture_output=True)
    assert from_json.returncode == from_log.returncode == 1
    a, b = json.loads(from_log.stdout), json.loads(from_json.stdout)
    assert a["findings"] == b["findings"] and a["verdict"] == b["verdict"] and a["baseline"] == b["baseline"]
    bad = tmp_path / "x.json"
    bad.write_text('{"outcome": "ready"}')
    refused = subprocess.run([*cmd, "diff", str(bad), str(case / "failing.log")], capture_output=True, text=True)
    assert refused.returncode == 2 and "not a run summary" in refused.stderr
    assert "Traceback" not in refused.stderr
