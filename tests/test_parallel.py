"""Reading a log in byte ranges and merging the run models gives the one-pass summary.

``parallel.read_ranges`` runs the same ``LiveRun`` on each range and merges the models
with ``RunModel.merge``; records whose handling reads earlier state are deferred to the
merge (``RunModel(part=True)``), and only a range that ended inside a traceback (or could
not defer what it read) is read again in order. These tests cut every fixture at every
boundary the reader may choose, and at every line (which also exercises the repair),
on the pure-Python and the compiled reading path, and compare the summary's JSON with
the sequential one's, byte for byte; likewise generated logs of both generators with
crashes and restarts every few hundred kilobytes, also read by real worker processes,
and they count the ranges read twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from accel import accelerated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_read_forms import _FATAL_DUMP as FATAL_DUMP

from logforensics import native
from logforensics.ingest import LiveRun, parallel, read_file
from logforensics.model import run as run_module
from logforensics.model.run import RunModel
from logforensics.model.stats import Series, Sketch
from logforensics.pipeline import summarize_file
from logforensics.read import bulk

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures").glob("**/*.log"))
GENERATOR = ROOT / "bench" / "gen_serving_log.py"
RESTARTS_GENERATOR = ROOT / "bench" / "gen_sglang_log.py"
PATHS = ["pure", pytest.param("compiled", marks=accelerated)]


@pytest.fixture(params=PATHS)
def reading_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs on the pure-Python reader and on the compiled scanner."""
    if request.param == "pure":
        monkeypatch.setenv("LOGFORENSICS_PURE", "1")
    else:
        monkeypatch.delenv("LOGFORENSICS_PURE", raising=False)
    assert native.available() == (request.param == "compiled")
    return str(request.param)


def _json(run: LiveRun) -> str:
    return json.dumps(run.summary().to_dict(), default=str, sort_keys=False)


#: One-pass summaries already computed (several tests compare against the same log's), by
#: all they depend on: the file's name and bytes, the reading path, and what a test may have patched.
_ONE_PASS: dict[tuple[object, ...], str] = {}


def _sequential(path: Path) -> str:
    key = (str(path), hashlib.blake2b(path.read_bytes()).digest(), os.environ.get("LOGFORENSICS_PURE"),
           os.environ.get("LOGFORENSICS_WORKERS"), run_module.MAX_DEFERRED, parallel.PARALLEL_MIN_BYTES,
           parallel.RANGE_BYTES, parallel.COMPILED_BY_DEFAULT, parallel.read_ranges)
    if key not in _ONE_PASS:
        _ONE_PASS[key] = _json(read_file(path))  # below the parallel threshold: one pass
    return _ONE_PASS[key]


def _in_ranges(path: Path, range_bytes: int, anywhere: bool = False, extra: tuple[int, ...] = (),
               counts: parallel.RangeCounts | None = None) -> tuple[str, int]:
    ranges = parallel.choose_ranges(str(path), path.stat().st_size, range_bytes, anywhere=anywhere)
    if extra:  # more boundaries, at given line starts
        starts = sorted({a for a, _ in ranges} | set(extra))
        ranges = list(zip(starts, starts[1:] + [path.stat().st_size]))
    run = parallel.read_ranges(str(path), str(path), ranges, counts=counts)  # the workers' code, in this process
    return _json(run), len(ranges)


#: Ranges a fixture is cut into at most: a log of up to this many lines at every line, a longer
#: one at this many places spread over it (each range is a run model of its own, so cutting a
#: log of thousands of lines at each took tens of seconds, quadratic in its lines).
MOST_RANGES = 400


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.parent.name[:4] + "/" + p.name[:40])
@pytest.mark.parametrize("anywhere", [False, True], ids=["boundary-lines", "every-line"])
def test_every_fixture_cut_everywhere_equals_one_pass(path: Path, anywhere: bool, reading_path: str) -> None:
    want = _sequential(path)
    lines = json.loads(want)["coverage"]["lines_read"]
    spread = anywhere and lines > MOST_RANGES
    got, ranges = _in_ranges(path, path.stat().st_size // MOST_RANGES if spread else 1, anywhere)
    if spread:  # (fewer where long lines hold many of the places)
        assert ranges >= MOST_RANGES // 4
    elif anywhere:
        assert ranges >= min(lines, 2) - 1  # a range at every line
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


def test_generated_log_with_crashes_and_restarts_in_ranges(restarts_log: Path, reading_path: str) -> None:
    want = _sequential(restarts_log)
    summary = json.loads(want)
    assert summary["outcome"] == "ready" and len(summary["exceptions"]) == 1
    assert summary["coverage"]["kinds"]["server_ready"] == 3
    data = restarts_log.read_bytes()
    inside = []  # boundaries inside each open traceback: at its second decode line
    at = data.find(b"Scheduler hit an exception")
    while at >= 0:
        first = data.index(b"\n", at) + 1
        inside.append(data.index(b"\n", first) + 1)
        at = data.find(b"Scheduler hit an exception", first)
    assert len(inside) == 2
    counts = parallel.RangeCounts()
    got, ranges = _in_ranges(restarts_log, 64 << 10, extra=tuple(inside), counts=counts)
    assert ranges > 40
    assert got == want
    # the two ranges that end inside a traceback are read again, with the one after each
    # (the traceback ends there); nothing else, though later ranges hold start-ups
    assert counts.unmergeable == 0 and 2 <= counts.read_again <= 4


def test_generated_log_read_by_worker_processes(restarts_log: Path, reading_path: str) -> None:
    want = _sequential(restarts_log)
    run = parallel.read_in_parallel(restarts_log, workers=2, min_bytes=0, range_bytes=256 << 10)
    assert run is not None
    assert _json(run) == want


#: A process's faulthandler dump (``Fatal Python error``, then its threads): no line names a rank.
_FATAL_DUMP = FATAL_DUMP


@pytest.fixture(scope="module")
def ray_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated 2-rank serving log as Ray prints it: every line behind its process's
    ``(SGLangEngine pid=N) `` wrapper (TP0's scheduler 2000, TP1's 2001, the rest the
    engine's 1999), the start-up at the top and TP1's ``Fatal Python error`` at the end."""
    text = subprocess.run([sys.executable, str(GENERATOR), "--size", "1M", "--tp", "2", "-o", "-"],
                          check=True, capture_output=True).stdout.decode()
    lines = []
    for line in text.splitlines():
        rank = re.search(r"^\[[^]]* TP(\d)\] ", line)
        lines.append(f"(SGLangEngine pid={2000 + int(rank.group(1)) if rank else 1999}) {line}\n")
    lines += [f"(SGLangEngine pid=2001) {line}\n" for line in _FATAL_DUMP]
    out = tmp_path_factory.mktemp("ray") / "ray.log"
    out.write_text("".join(lines))
    return out


def test_a_ray_process_s_fatal_error_in_a_later_range_takes_its_rank(ray_log: Path, reading_path: str) -> None:
    """The rank-less fatal record behind TP1's process is in the last range, its start-up
    records in the first: what the ranges before taught is carried into the merge, and the
    crash is TP1's, as in one pass (the range is read again with it)."""
    want = _sequential(ray_log)
    assert (json.loads(want)["outcome"], json.loads(want)["crash"]["first_rank"]) == ("crashed", "TP1")
    counts = parallel.RangeCounts()
    got, ranges = _in_ranges(ray_log, 64 << 10, counts=counts)
    assert ranges > 8
    assert json.loads(got)["crash"]["first_rank"] == "TP1"
    assert got == want
    assert (counts.read_again, counts.unmergeable) == (1, 1)
    run = parallel.read_in_parallel(ray_log, workers=2, min_bytes=0, range_bytes=128 << 10)
    assert run is not None and _json(run) == want


def test_a_rank_two_ray_processes_print_is_told_in_every_reading(ray_log: Path, tmp_path: Path,
                                                                  reading_path: str) -> None:
    """A second engine's TP0 (another Ray worker's pid) at the end of the log, its first
    range's reading alone knows no other: the merge tells that two processes print TP0,
    as one pass does, and a process that prints two ranks (the engine's) is no such case."""
    path = tmp_path / "two-engines.log"
    path.write_text(ray_log.read_text() + "(SGLangEngine pid=3000) [2025-06-01 13:00:00 TP0] Init torch distributed begin.\n")
    want = _sequential(path)
    told = [w for w in json.loads(want)["warnings"] if "more than one process" in w]
    assert told == ["records of more than one process name the same rank (TP0: (SGLangEngine pid=2000), "
                    "(SGLangEngine pid=3000)): each such rank is one row here, its phase, last line and figures "
                    "those of any of them"]
    assert not [w for w in json.loads(_sequential(ray_log))["warnings"] if "more than one process" in w]
    got, ranges = _in_ranges(path, 64 << 10)
    assert ranges > 8 and got == want


@pytest.fixture(scope="module")
def restart_logs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Logs of the crash-and-restart generator: a CUDA OOM crash and a restart every few
    hundred kilobytes, torn and interleaved lines, every rank decoding; several seeds and
    prefix styles."""
    out = tmp_path_factory.mktemp("restarts")
    logs = []
    for seed, style, extra in [(1, "tp", []), (2, "dp-tp", ["--interleave-rate", "0.3"]),
                               (3, "pp-tp", ["--torn-rate", "0.01"]), (4, "tp-ep", ["--decode-ranks", "0"])]:
        path = out / f"restarts-{seed}-{style}.log"
        subprocess.run([sys.executable, str(RESTARTS_GENERATOR), "--size", "2M", "--seed", str(seed),
                        "--prefix-style", style, "--crash-rate", "0.008", "-o", str(path), *extra], check=True)
        logs.append(path)
    return logs


@pytest.fixture(scope="module")
def all_ranks_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The serving generator's DP-attention log (every rank a scheduler), three launches in a row."""
    out = tmp_path_factory.mktemp("allranks") / "all-ranks.log"
    with open(out, "wb") as f:
        for seed, start in (("7", "2026-03-02 08:41:17"), ("8", "2026-03-02 10:00:00"), ("9", "2026-03-02 12:00:00")):
            f.write(subprocess.run([sys.executable, str(GENERATOR), "--size", "1M", "--seed", seed, "--start", start,
                                    "--all-ranks", "-o", "-"], check=True, capture_output=True).stdout)
    return out


def _counting_submit(deferred: list[int], opens: list[bool]):
    """Run jobs in this process; note the records each range's model deferred and whether
    it ended inside a traceback."""
    def submit(job: tuple) -> parallel._Done:
        res = parallel._read_range(job)
        deferred.append(len(res.model.deferred()))
        opens.append(res.open_at_end)
        return parallel._Done(res)
    return submit


def test_restart_logs_in_ranges_are_read_once(restart_logs: list[Path], reading_path: str) -> None:
    """Ranges that hold a restart (a server-ready line, capture batch sizes, the crash
    before it) are merged, their context-reading records deferred: no range is read again
    but those that end inside a traceback."""
    for path in restart_logs:
        want = _sequential(path)
        assert json.loads(want)["coverage"]["kinds"]["server_ready"] >= 6
        ranges = parallel.choose_ranges(str(path), path.stat().st_size, 96 << 10)
        counts, deferred, opens = parallel.RangeCounts(), [], []
        run = parallel.read_ranges(str(path), str(path), ranges, counts=counts,
                                   submit=_counting_submit(deferred, opens))
        assert _json(run) == want, path.name
        assert counts.unmergeable == 0, path.name
        assert sum(1 for n in deferred[1:] if n) >= 3  # ranges after the first with a deferred record
        # read again: only a range that ended inside a traceback, and the one it ends in
        assert counts.read_again <= 2 * sum(opens), path.name


def test_restart_logs_cut_at_every_boundary(restart_logs: list[Path], all_ranks_log: Path, reading_path: str) -> None:
    for path in [*restart_logs[:2], all_ranks_log]:
        want = _sequential(path)
        got, ranges = _in_ranges(path, 8 << 10)
        assert ranges > 100
        assert got == want, path.name


def test_restart_log_read_by_worker_processes(restart_logs: list[Path], reading_path: str) -> None:
    path = restart_logs[1]
    want = _sequential(path)
    run = parallel.read_in_parallel(path, workers=2, min_bytes=0, range_bytes=128 << 10)
    assert run is not None
    assert _json(run) == want


def test_too_many_deferred_records_read_the_range_again(restart_logs: list[Path], reading_path: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_DEFERRED records in one range, the range reads them itself and, having read
    earlier state, is read again in order: still the one-pass summary."""
    monkeypatch.setattr(run_module, "MAX_DEFERRED", 1)
    path = restart_logs[0]
    want = _sequential(path)
    counts = parallel.RangeCounts()
    got, _ = _in_ranges(path, 512 << 10, counts=counts)
    assert got == want
    assert counts.unmergeable > 0


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

        def done(self) -> bool:
            return True

    run = parallel.read_ranges(str(restarts_log), str(restarts_log), ranges, submit=Future, window=3)
    assert len(ranges) > 20 and seen == {"out": 0, "most": 3}
    assert _json(run) == want


def test_summary_goes_parallel_for_large_files(restarts_log: Path, monkeypatch: pytest.MonkeyPatch,
                                               reading_path: str) -> None:
    """``summarize_file`` (what ``summary`` and ``diff`` call) takes the parallel path on
    either reading path."""
    want = _sequential(restarts_log)
    calls = []
    real = parallel.read_ranges
    monkeypatch.setattr(parallel, "read_ranges", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(parallel, "RANGE_BYTES", 512 << 10)
    monkeypatch.setenv("LOGFORENSICS_WORKERS", "2")
    got = json.dumps(summarize_file(restarts_log).to_dict(), default=str)
    assert calls
    assert got == want
    monkeypatch.setenv("LOGFORENSICS_WORKERS", "1")
    calls.clear()
    summarize_file(restarts_log)
    assert not calls


def test_compiled_path_reads_on_several_cores_when_asked(restarts_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the C scanner is built, several cores are used only when LOGFORENSICS_WORKERS
    asks (COMPILED_BY_DEFAULT); then in ranges long enough for the scanner."""
    if native.lib is None:
        pytest.skip("the accelerator is not built")
    monkeypatch.delenv("LOGFORENSICS_PURE", raising=False)
    monkeypatch.delenv("LOGFORENSICS_WORKERS", raising=False)
    monkeypatch.setattr(parallel, "COMPILED_BY_DEFAULT", False)
    assert parallel.read_in_parallel(restarts_log, min_bytes=0) is None
    monkeypatch.setenv("LOGFORENSICS_WORKERS", "2")
    monkeypatch.setattr(parallel, "RANGE_BYTES", 256 << 10)
    seen: list[list[tuple[int, int]]] = []
    real = parallel.read_ranges
    monkeypatch.setattr(parallel, "read_ranges", lambda p, n, ranges, **k: (seen.append(ranges), real(p, n, ranges, **k))[1])
    run = parallel.read_in_parallel(restarts_log, min_bytes=0)
    assert run is not None and len(seen[0]) >= 2
    assert min(b - a for a, b in seen[0][:-1]) >= restarts_log.stat().st_size // 4 - parallel._WINDOW
    assert _json(run) == _sequential(restarts_log)


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


START_UP = (b"[2026-03-02 08:41:17 TP0] Load weight begin. avail mem=78.50 GB\n"
            b"[2026-03-02 08:41:17 TP1] Load weight begin. avail mem=78.50 GB\n"
            b"[2026-03-02 08:41:20 TP0] KV Cache is allocated. #tokens: 100000, K size: 2.00 GB, V size: 2.00 GB\n"
            b"[2026-03-02 08:41:20 TP1] KV Cache is allocated. #tokens: 100000, K size: 2.00 GB, V size: 2.00 GB\n")
READY = (b"[2026-03-02 08:41:30] The server is fired up and ready to roll!\n"
         b"[2026-03-02 08:41:31 TP0] Decode batch, #running-req: 1, #token: 30, token usage: 0.00, cuda graph: True, "
         b"gen throughput (token/s): 12.50, #queue-req: 0\n")


def test_a_part_defers_a_record_that_reads_earlier_state() -> None:
    """The server-ready line moves the ranks of the earlier part to serving: the later
    part's model keeps it for the merge, which gives the one-pass model."""
    whole = LiveRun("x")
    whole.feed(START_UP + READY)
    first, later = LiveRun("x"), LiveRun("x", model=RunModel("x", part=True))
    first.feed(START_UP)
    first.settle()  # its last line, a start-up record, waits for the next (a torn record's rest): read it here
    later.parser.line_offset = START_UP.count(b"\n")
    later.feed(READY)
    assert later.model.context_read is None
    assert [ev.kind for _, ev in later.model.deferred()] == ["server_ready"]
    assert "TP1" not in later.model.ranks  # the part never saw TP1: the merge moves it
    first.model.merge(later.model)
    first.parser.stats.add(later.parser.stats)
    merged = first.model.summary(first.parser.stats).to_dict()
    assert merged["phase_reached"]["TP1"] == "serving"
    assert json.dumps(merged, default=str) == json.dumps(whole.summary().to_dict(), default=str)


def test_worker_count_follows_file_size_and_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOGFORENSICS_WORKERS", raising=False)
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3}, raising=False)
    assert parallel.worker_count() == 4
    assert parallel.worker_count(parallel.BYTES_PER_WORKER) == 1
    assert parallel.worker_count(3 * parallel.BYTES_PER_WORKER) == 3
    assert parallel.worker_count(100 * parallel.BYTES_PER_WORKER) == 4
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda _pid: {0}, raising=False)
    assert parallel.worker_count(100 * parallel.BYTES_PER_WORKER) == 1
    monkeypatch.setenv("LOGFORENSICS_WORKERS", "3")
    assert parallel.worker_count(1) == 3


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


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1e5, allow_nan=False), min_size=1, max_size=3000), st.data())
def test_series_merged_from_parts_equals_one_series(ys: list[float], data: st.DataObject) -> None:
    """Parts that kept their values merge into the series one pass gives, point for point,
    whatever the cuts, the limit and how values were added (one by one, in columns)."""
    limit = data.draw(st.sampled_from([4, 7, 16, 1000]))
    xs: list = [f"2026-03-02T08:{i // 60 % 60:02d}:{i % 60:02d}" for i in range(len(ys))]
    if data.draw(st.booleans()):
        xs = list(range(len(ys)))  # lines, for records without a stamp
    cuts = sorted(data.draw(st.lists(st.integers(0, len(ys)), max_size=5)))
    whole = Series(limit)
    for x, y in zip(xs, ys):
        whole.add(x, y)
    merged = Series(limit)
    for k, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(ys)])):
        part = merged if k == 0 else Series(limit, keep_values=True)
        if data.draw(st.booleans()):
            part.extend_xy(xs[a:b], ys[a:b])
        else:
            for x, y in zip(xs[a:b], ys[a:b]):
                part.add(x, y)
        if k:
            merged.merge(part)
    assert merged.to_list() == whole.to_list()
    assert len(whole.to_list()) <= limit


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([0.0, -0.0, 1e300, 1e-300, 1e16, 1.0, 0.1]),
                          st.integers(0, 10**6).map(float)), min_size=20, max_size=2000), st.data())
def test_a_series_of_a_scans_doubles_equals_one_of_the_same_numbers(ys: list[float], data: st.DataObject) -> None:
    """Values given as a scan gives them (doubles, ``read.bulk.numbers``: summed in C), as
    lists, or one by one, in any pieces and mix: the same points, exactly (Python's sum())."""
    limit = data.draw(st.sampled_from([2, 3, 8, 1000]))  # small: points of many values, in several pieces
    xs = list(range(len(ys)))
    whole = Series(limit)
    for x, y in zip(xs, ys):
        whole.add(x, y)
    mixed = Series(limit)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(ys)), max_size=30)))
    hows = data.draw(st.sampled_from([["doubles"], ["doubles", "list", "one by one"]]))
    for a, b in zip([0, *cuts], [*cuts, len(ys)]):
        how = data.draw(st.sampled_from(hows))
        if how == "doubles":
            mixed.extend_xy(xs[a:b], bulk.numbers(False, struct.pack(f"{b - a}d", *ys[a:b])))
        elif how == "list":
            mixed.extend_xy(xs[a:b], ys[a:b])
        else:
            for x, y in zip(xs[a:b], ys[a:b]):
                mixed.add(x, y)
    assert [(x, struct.pack("d", y)) for x, y in mixed.points] == [(x, struct.pack("d", y)) for x, y in whole.points]
    assert mixed.to_list() == whole.to_list()


def test_a_series_of_points_alone_is_not_merged() -> None:
    later = Series()
    later.add(1, 2.0)
    with pytest.raises(ValueError):
        Series().merge(later)


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
