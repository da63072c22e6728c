"""The run model: a summary is a pure snapshot, and a saved summary reads back.

``watch`` summarises a log mid-stream, ``summary`` and ``diff`` once at the end: both
must say the same of the same bytes. So taking a summary must not change the model,
and observing more records must not change a summary already taken.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from test_outcome import summarize

from logforensics.ingest import LiveRun
from logforensics.model.records import ChainLink, Frame, Keyed, LogLine
from logforensics.model.serving_records import Serving
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
    assert again.serving == summary.serving and again.pools == summary.pools


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


#: Logs whose serving phase has each of its objects: KV pressure and requests, a stall, a
#: seesaw, DP imbalance, a frozen run; CUDA graphs switched off is the test's own log.
SERVING = ("serving/throughput_collapse/failing.log", "serving/health/decode_stall.log", "serving/health/seesaw.log",
           "serving/health/dp_imbalance.log", "synthetic/decode-frozen/run.log", "graphs off")
_DECODE = ("[2025-03-08 12:00:{s:02d} TP0] Decode batch, #running-req: 64, #token: 2910, token usage: 0.50, "
           "cuda graph: {graph}, gen throughput (token/s): 1690.00, #queue-req: 0\n")


def _untyped(value: object, at: str = "serving") -> list[str]:
    """Where a record of the serving phase holds an object that is no record (a mapping of
    mappings, or a list of them), or keys it does not know (``extra``)."""
    if isinstance(value, Keyed):
        found = [f"{at}: {sorted(value.extra)}"] if value.extra else []
        return found + [p for f in dataclasses.fields(value) if f.name not in ("keys", "extra")
                        for p in _untyped(getattr(value, f.name), f"{at}.{f.name}")]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _untyped(v, f"{at}.{k}")] if value and all(
            isinstance(v, (Keyed, list)) for v in value.values()) else ([at] if value else [])
    if isinstance(value, list):
        return [p for i, v in enumerate(value) if not isinstance(v, (int, float, str, type(None), list))
                for p in _untyped(v, f"{at}[{i}]")]
    return []


@pytest.mark.parametrize("name", SERVING)
def test_a_saved_serving_phase_reads_back_typed_to_its_leaves(name: str) -> None:
    """The serving phase is records down to its leaves (a series' points are lists), in the
    model's summary and in one read back, and prints as it was saved."""
    data = ("".join(_DECODE.format(s=s, graph=s < 3) for s in range(6)).encode() if name == "graphs off"
            else (ROOT / "fixtures" / name).read_bytes())
    summary = _one_pass(data)
    saved = json.loads(json.dumps(summary.to_dict()))
    again = RunSummary.from_dict(saved)
    assert json.dumps(again.to_dict()) == json.dumps(saved)
    for s in (summary.serving, again.serving):
        assert isinstance(s, Serving) and s.health is not None
        assert _untyped(s) == []
    assert again.serving == summary.serving
    s = again.serving
    shown = {"serving/throughput_collapse/failing.log": s.kv_full and s.requests and s.requests.slowest,
             "serving/health/decode_stall.log": s.health.stalls.first and s.health.stalls.first[0].recovered,
             "serving/health/seesaw.log": s.health.seesaw and s.health.seesaw.evidence,
             "serving/health/dp_imbalance.log": s.health.imbalance and s.health.imbalance.signals,
             "synthetic/decode-frozen/run.log": s.frozen and s.frozen.first.text,
             "graphs off": s.cuda_graph_off and s.cuda_graph_off.line == 4}
    assert shown[name], f"{name} no longer shows what it is here for"


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


def test_a_draft_model_s_graphs_are_not_the_rank_s_own() -> None:
    """SGLang captures the target model's graphs first, then a speculative draft model's: the
    rank's graph figures are the target's, and a window that begins after them shows none
    (the draft's are not the rank's graphs)."""
    draft = ("[2025-12-17 01:32:45 TP0] Capture draft cuda graph end. Time elapsed: 7.94 s. mem usage=0.42 GB. "
             "avail mem=7.19 GB.\n"
             "[2025-12-17 01:32:46 TP0] Capture draft extend cuda graph begin. This can take up to several minutes. "
             "avail mem=7.19 GB\n")
    target = ("[2025-12-17 01:32:30 TP0] Capture cuda graph begin. This can take up to several minutes. "
              "avail mem=9.00 GB\n"
              "[2025-12-17 01:32:37 TP0] Capture cuda graph end. Time elapsed: 7.00 s. mem usage=1.50 GB. "
              "avail mem=7.50 GB.\n")
    alone = summarize(draft)
    assert alone.phase_reached == {"TP0": "cuda_graph_capture"}
    mem = alone.memory["TP0"]  # the draft's figures apart, none of the rank's own
    assert (mem.figure("capture_end_avail_gib"), mem.figure("capture_begin_avail_gib")) == (None, None)
    assert (mem.draft_capture_end_avail_gib, mem.draft_capture_mem_gib, mem.draft_capture_begin_avail_gib) == \
        (7.19, 0.42, 7.19)
    both = summarize(target + draft).memory["TP0"]
    assert (both.figure("capture_begin_avail_gib"), both.figure("capture_end_avail_gib"),
            both.figure("capture_mem_gib")) == (9.0, 7.5, 1.5)


def test_the_stamps_a_log_spans_are_its_earliest_and_latest_whatever_their_order() -> None:
    """A paste of two servers' lines is not in time order, and the process-wide records of a
    stop (no rank) come after the last rank's: the span is the earliest and latest stamp."""
    s = summarize("[2026-02-25 18:58:00 TP0] Init torch distributed begin.\n"
                    "[2026-02-25 18:57:59 TP1] Init torch distributed begin.\n"
                    "[2026-02-25 18:58:01 TP0] Decode batch. #running-req: 1, #token: 43, token usage: 0.00, "
                    "gen throughput (token/s): 0.53, #queue-req: 0\n"
                    "[2026-02-25 18:59:30] SIGTERM received. signum=None frame=None. Draining requests and shutting "
                    "down...\n")
    assert (s.coverage.first_ts, s.coverage.last_ts) == ("2026-02-25T18:57:59", "2026-02-25T18:59:30")
    misread = summarize("[2026-84-18 13:17:24 TP0] Load weight begin. avail mem=60.89 GB\n"
                          "[2026-04-18 13:17:25 TP0] Load weight end. type=X, dtype=torch.bfloat16, avail mem=50.00 GB\n")
    assert (misread.coverage.first_ts, misread.coverage.last_ts) == ("2026-04-18T13:17:25",) * 2  # no moment


def test_bench_one_batch_s_bare_pool_size_is_tp0_s() -> None:
    """bench_one_batch prints the pool size bare, on TP rank 0 alone (real-unseen 1052, 1371):
    where the log names TP0 it is TP0's figure; a log that names no rank keeps it rankless, and
    SGLang's own line with its other figures is never moved."""
    head = "[2026-07-23 12:47:21 TP0] Load weight end. elapsed=2.72 s, type=Qwen3ForCausalLM, avail mem=168.90 GB\n"
    s = summarize(head + "max_total_num_tokens=2073920\n")
    assert s.memory["TP0"].figure("max_total_num_tokens") == 2073920
    alone = summarize("max_total_num_tokens=2073920\n")
    assert "TP0" not in alone.memory
    full = summarize(head + "max_total_num_tokens=2073920, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                     "max_running_requests=2048, context_len=40960\n")
    assert full.memory["TP0"].figure("max_total_num_tokens") is None


def test_the_readiness_line_in_uvicorn_s_format_is_readiness() -> None:
    """Some builds log SGLang's own lines in uvicorn's format (real-unseen 1432): its readiness
    line behind 'INFO:     ' is the server's readiness, as in SGLang's own format."""
    s = summarize("[2026-06-05 19:21:10 TP0] Load weight end. type=Qwen3ForCausalLM, avail mem=20.00 GB\n"
                  "[2026-06-05 19:21:15] INFO:     The server is fired up and ready to roll!\n")
    assert s.outcome == "ready" and s.ready is not None and s.ready.line == 2
    other = summarize("[2026-06-05 19:21:15] INFO:     Waiting for application startup.\n")
    assert other.ready is None
