"""Reading a log in byte ranges and merging the run models gives the one-pass summary.

``parallel.read_ranges`` runs the same ``LiveRun`` on each range and merges the models
with ``RunModel.merge``; a range that ended inside a traceback, or whose model read state
it could not have, is read again in order. These tests cut every fixture at every
boundary the reader may choose, and at every line (which also exercises the repair),
and compare ``RunSummary.to_dict()`` with the sequential summary: everything must be
equal. On a generated multi-megabyte log with crashes and restarts, read by real worker
processes, only the downsampled decode series may differ (``Series.merge``).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logforensics.ingest import LiveRun, parallel, read_file
from logforensics.model.run import RunModel
from logforensics.model.stats import Series, Sketch
from logforensics.pipeline import summarize_file

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures").glob("**/*.log"))
GENERATOR = ROOT / "bench" / "gen_serving_log.py"


def _sequential(path: Path) -> dict:
    run = read_file(path)  # below the parallel threshold: one pass
    return json.loads(json.dumps(run.summary().to_dict(), default=str))


def _in_ranges(path: Path, range_bytes: int, anywhere: bool = False, extra: tuple[int, ...] = ()) -> tuple[dict, int]:
    ranges = parallel.choose_ranges(str(path), path.stat().st_size, range_bytes, anywhere=anywhere)
    if extra:  # more boundaries, at given line starts
        starts = sorted({a for a, _ in ranges} | set(extra))
        ranges = list(zip(starts, starts[1:] + [path.stat().st_size]))
    run = parallel.read_ranges(str(path), str(path), ranges)  # the workers' code, in this process
    return json.loads(json.dumps(run.summary().to_dict(), default=str)), len(ranges)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.parent.name[:4] + "/" + p.name[:40])
@pytest.mark.parametrize("anywhere", [False, True], ids=["boundary-lines", "every-line"])
def test_every_fixture_cut_everywhere_equals_one_pass(path: Path, anywhere: bool) -> None:
    want = _sequential(path)
    got, ranges = _in_ranges(path, 1, anywhere)
    if anywhere:
        assert ranges >= min(want["coverage"]["lines_read"], 2) - 1  # a range at every line
    assert got == want


def _crash(ts: str, rank: str) -> str:
    """A scheduler traceback with two other-rank decode lines inside it: a boundary the
    reader may choose falls inside an open traceback."""
    return (
        f"[{ts} {rank}] Scheduler hit an exception: Traceback (most recent call last):\n"
        f"[{ts} TP0] Decode batch, #running-req: 9, #token: 30879, token usage: 0.02, cuda graph: True, "
        f"gen throughput (token/s): 893.49, #queue-req: 0\n"
        f"[{ts} TP0] Decode batch, #running-req: 9, #token: 30880, token usage: 0.02, cuda graph: True, "
        f"gen throughput (token/s): 893.50, #queue-req: 0\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2651, in run_scheduler_process\n'
        "    scheduler.event_loop_overlap()\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 800, in event_loop_overlap\n'
        "    batch = self.get_next_batch_to_run()\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "\n"
        f"[{ts}] Received sigquit from a child process. It usually means the child failed.\n"
    )


@pytest.fixture(scope="module")
def restarts_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three launches of a generated 8-rank server (pure TP, DP attention, pure TP), the
    first two ended by crashes: start-ups, serving and failures in every range."""
    out = tmp_path_factory.mktemp("parallel") / "restarts.log"
    parts = [("1", "2026-03-02 08:41:17", []), ("2", "2026-03-03 09:00:00", ["--all-ranks"]),
             ("3", "2026-03-04 10:00:00", [])]
    with open(out, "wb") as f:
        for i, (seed, start, extra) in enumerate(parts):
            f.write(subprocess.run([sys.executable, str(GENERATOR), "--size", "1500K", "--seed", seed,
                                    "--start", start, "-o", "-", *extra],
                                   check=True, capture_output=True).stdout)
            if i < 2:
                f.write(_crash(start.replace("08:41", "23:59").replace("09:00", "23:59"), f"TP{3 + i}").encode())
    return out


def _same_but_series(got: dict, want: dict) -> None:
    series_got = got["throughput"].pop("decode_series")
    series_want = want["throughput"].pop("decode_series")
    assert got == want
    # the documented approximation: as many points, the same first one, means close
    assert len(series_got) == len(series_want)
    assert series_got[0] == series_want[0]
    for (_, y1), (_, y2) in zip(series_got, series_want):
        assert y1 == pytest.approx(y2, rel=0.05)


def test_generated_log_with_crashes_and_restarts_in_ranges(restarts_log: Path) -> None:
    want = _sequential(restarts_log)
    assert want["outcome"] == "ready" and len(want["exceptions"]) == 1
    assert want["coverage"]["kinds"]["server_ready"] == 3
    data = restarts_log.read_bytes()
    inside = []  # boundaries inside each open traceback: at its second decode line
    at = data.find(b"Scheduler hit an exception")
    while at >= 0:
        first = data.index(b"\n", at) + 1
        inside.append(data.index(b"\n", first) + 1)
        at = data.find(b"Scheduler hit an exception", first)
    assert len(inside) == 2
    got, ranges = _in_ranges(restarts_log, 64 << 10, extra=tuple(inside))
    assert ranges > 40
    _same_but_series(got, want)


def test_generated_log_read_by_worker_processes(restarts_log: Path) -> None:
    want = _sequential(restarts_log)
    run = parallel.read_in_parallel(restarts_log, workers=2, min_bytes=0, range_bytes=256 << 10)
    assert run is not None
    got = json.loads(json.dumps(run.summary().to_dict(), default=str))
    _same_but_series(got, want)


def test_ranges_go_through_a_bounded_window(restarts_log: Path) -> None:
    """No more than ``window`` ranges are submitted and not yet merged at any time, and the
    result is still the one-pass summary."""
    want = _sequential(restarts_log)
    ranges = parallel.choose_ranges(str(restarts_log), restarts_log.stat().st_size, 64 << 10)
    seen = {"out": 0, "most": 0}

    class Future:
        def __init__(self, job: tuple) -> None:
            self.value = parallel._read_range(job)
            seen["out"] += 1
            seen["most"] = max(seen["most"], seen["out"])

        def result(self) -> parallel.RangeResult:
            seen["out"] -= 1
            return self.value

    run = parallel.read_ranges(str(restarts_log), str(restarts_log), ranges, submit=Future, window=3)
    assert len(ranges) > 20 and seen == {"out": 0, "most": 3}
    _same_but_series(json.loads(json.dumps(run.summary().to_dict(), default=str)), want)


def test_summary_goes_parallel_for_large_files(restarts_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``summarize_file`` (what ``summary`` and ``diff`` call) takes the parallel path on the
    pure-Python reader (the compiled one reads on one core)."""
    monkeypatch.setenv("LOGFORENSICS_PURE", "1")
    want = _sequential(restarts_log)
    calls = []
    real = parallel.read_ranges
    monkeypatch.setattr(parallel, "read_ranges", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(parallel, "RANGE_BYTES", 512 << 10)
    monkeypatch.setenv("LOGFORENSICS_WORKERS", "2")
    got = json.loads(json.dumps(summarize_file(restarts_log).to_dict(), default=str))
    assert calls
    _same_but_series(got, want)
    monkeypatch.setenv("LOGFORENSICS_WORKERS", "1")
    calls.clear()
    summarize_file(restarts_log)
    assert not calls


def test_small_files_and_streams_stay_sequential(tmp_path: Path) -> None:
    log = tmp_path / "small.log"
    log.write_text("[2026-03-02 08:41:17] INFO:     127.0.0.1:1 - \"GET /health HTTP/1.1\" 200 OK\n")
    assert parallel.read_in_parallel(log, workers=2) is None
    assert parallel.read_in_parallel("-", workers=2, min_bytes=0) is None
    assert parallel.read_in_parallel(tmp_path, workers=2, min_bytes=0) is None


def test_a_model_that_read_earlier_state_is_not_merged() -> None:
    later = LiveRun("x")
    later.feed(b"[2026-03-02 08:41:17] The server is fired up and ready to roll!\n")
    assert later.model.context_read
    with pytest.raises(ValueError):
        RunModel("x").merge(later.model)


def test_sketch_merge_is_exact() -> None:
    rng = random.Random(7)
    values = [round(rng.uniform(0, 5000), 2) for _ in range(20000)] + [0.0] * 5
    whole, left, right = Sketch(), Sketch(), Sketch()
    for v in values:
        whole.add(v)
    left.extend(values[:7777])
    right.extend(values[7777:])
    left.merge(right)
    assert left.to_dict() == whole.to_dict()
    assert left.total == whole.total


def test_series_merge_keeps_the_shape() -> None:
    whole, left, right = Series(), Series(), Series(limit=16384)
    for i in range(5000):
        (left if i < 1234 else right).add(i, float(i % 97))
        whole.add(i, float(i % 97))
    left.merge(right)
    assert len(left.to_list()) == len(whole.to_list())
    assert left.to_list()[0] == whole.to_list()[0]


REAL_LINES = [line for p in FIXTURES for line in p.read_bytes().split(b"\n") if line.strip()]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(REAL_LINES), min_size=1, max_size=120), st.randoms(use_true_random=False))
def test_shuffled_real_lines_cut_anywhere(tmp_path: Path, lines: list[bytes], rng: random.Random) -> None:
    """Lines of every fixture in any order (ranks, phases, crashes and restarts mixed up),
    cut at random line starts: the merged summary is still the one-pass summary."""
    path = tmp_path / "mixed.log"
    path.write_bytes(b"\n".join(lines) + b"\n")
    want = _sequential(path)
    starts = [i for i, line in enumerate(lines) if i]  # line numbers that may start a range
    offsets = [sum(len(x) + 1 for x in lines[:i]) for i in sorted(rng.sample(starts, min(len(starts), 12)))]
    got, _ = _in_ranges(path, 1 << 30, extra=tuple(offsets))
    assert got == want
