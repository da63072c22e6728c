"""``parse --format parquet`` from C columns (``render/parquet.py``) reads back as the exact path's table.

The exact path is ``tables.write_parquet`` of every event (as with ``LOGFORENSICS_PURE=1``).
Both ways of the C writer (two passes over regular files, the row groups encoded as they
come; one pass spilling the groups, for standard input and compressed logs) are read back
with ``pq.read_table`` and compared with it: the same columns in the same order, the same
types, the same values, on every fixture, on logs of both generators, on damaged lines,
with kinds chosen, on runs of several files, and across row groups. The share of lines
taken in C is checked too, and what the two passes do with a log that changes between them.
"""

from __future__ import annotations

import gzip
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_fastpath import FIXTURES
from test_parse_jsonl import MORE, _mutate, generated  # noqa: F401  (generated: a fixture)

from logforensics.ingest import parallel
from logforensics.ingest.files import InputError
from logforensics.pipeline import iter_events
from logforensics.read import emit
from logforensics.render import parquet, parquet_columns
from logforensics.render.tables import write_parquet

pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "logforensics"]
pytestmark = pytest.mark.skipif(emit._emit is None, reason="the C writer is not built here")


@pytest.fixture(autouse=True)
def _halves_of_any_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first pass reads logs of any size in two halves (where a boundary is found), and
    two encoders write the row groups, as for a large log where two threads are asked for."""
    monkeypatch.setattr(parquet_columns, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(parquet_columns, "TWO_BY_DEFAULT", True)
    monkeypatch.setattr(parquet_columns, "worker_count", lambda size=None: 2)


#: The ways of the C writer: (two passes, the first pass in halves).
WAYS = ((True, True), (True, False), (False, False))


def _same(paths: list[tuple[Path, str | None]], tmp_path: Path, wanted: tuple[str, ...] = ()) -> list[object]:
    """Every way of the C writer gives the exact path's table; returns the two-pass way's stats."""
    exact = tmp_path / "exact.parquet"
    events = (ev for p, node in paths for ev in iter_events(str(p), node=node) if not wanted or ev.kind in wanted)
    write_parquet(events, str(exact))
    b = pq.read_table(exact)
    got = {}
    for way in WAYS:
        fast = tmp_path / f"fast-{way}.parquet"
        got[way] = parquet.write_run_parquet([(str(p), node) for p, node in paths], str(fast), wanted=wanted,
                                             two_pass=way[0], split=way[1])
        a = pq.read_table(fast)
        assert a.schema == b.schema, (way, a.schema, b.schema)
        assert a.num_rows == b.num_rows, way
        for name in b.column_names:
            assert a[name].equals(b[name]), (way, name)
    assert got[WAYS[0]] == got[WAYS[1]] == got[WAYS[2]]
    return got[WAYS[0]]


@pytest.mark.parametrize("path", FIXTURES + MORE, ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_every_fixture_reads_back_the_same(path: Path, tmp_path: Path) -> None:
    _same([(path, None)], tmp_path)


def test_generated_logs_and_several_files(generated: list[Path], tmp_path: Path,  # noqa: F811
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    lines = taken = 0
    for path in generated:
        (stats,) = _same([(path, None)], tmp_path)
        assert stats.by_kind.get("decode_batch", 0) > 100, stats
        lines += stats.lines
        taken += stats.taken
    assert taken >= 0.9 * lines  # not a silent fallback to the exact path
    # one file of several runs, with nodes; small row groups, so that types meet across groups
    monkeypatch.setattr(parquet, "ROW_GROUP", 1000)
    import logforensics.render.tables as tables

    monkeypatch.setattr(tables, "ROW_GROUP", 700)
    _same([(generated[1], "node-a"), (generated[5], "node-b"), (FIXTURES[0], None)], tmp_path)
    _same([(generated[0], None), (generated[4], "n1")], tmp_path, wanted=("decode_batch", "exception", "other"))
    _same([(generated[4], None)], tmp_path, wanted=("nothing_has_this_kind",))


def test_damaged_lines_read_back_the_same(generated: list[Path], tmp_path: Path) -> None:  # noqa: F811
    rng = random.Random(3)
    lines = generated[1].read_text(encoding="utf-8").split("\n")[:5000]
    out = [(_mutate(line, rng) if rng.random() < 0.3 else line) for line in lines]
    path = tmp_path / "damaged.log"
    data = "\n".join(out).encode("utf-8", "surrogatepass")
    path.write_bytes(data[:20000] + bytes(rng.randrange(256) for _ in range(5000)) + b"\n" + data[20000:])
    _same([(path, None)], tmp_path)


def test_cli_uses_it_and_pure_gives_the_same(tmp_path: Path) -> None:
    run = ROOT / "fixtures" / "multinode" / "tp8_two_nodes" / "failing"
    out = {}
    for pure in ("0", "1"):
        target = tmp_path / f"{pure}.parquet"
        done = subprocess.run(CLI + ["parse", "--format", "parquet", "-o", str(target), str(run)],
                              capture_output=True, timeout=300, env={**os.environ, "LOGFORENSICS_PURE": pure})
        assert done.returncode == 0, done.stderr
        out[pure] = pq.read_table(target)
    assert out["0"].equals(out["1"]) and out["0"].num_rows > 0
    assert "node" in out["0"].column_names


def test_regular_files_take_two_passes_other_input_one(tmp_path: Path) -> None:
    log = FIXTURES[0]
    packed = tmp_path / "log.gz"
    packed.write_bytes(gzip.compress(log.read_bytes()))
    assert parquet._regular(str(log))
    assert not parquet._regular(str(packed)) and not parquet._regular("-")
    assert not parquet._regular(str(tmp_path))  # a directory: the reader reports it


def test_stdin_and_compressed_give_the_two_pass_table(tmp_path: Path) -> None:
    one = FIXTURES[0]
    packed = tmp_path / "log.gz"
    packed.write_bytes(gzip.compress(one.read_bytes()))
    tables = {}
    for name, args, stdin in (("file", [str(one)], None), ("gzip", [str(packed)], None),
                              ("stdin", ["-"], one.read_bytes())):
        target = tmp_path / f"{name}.parquet"
        done = subprocess.run(CLI + ["parse", "--format", "parquet", "-o", str(target), *args], input=stdin,
                              capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr
        tables[name] = pq.read_table(target).drop_columns(["file"])
    assert tables["file"].num_rows > 0
    assert tables["file"].equals(tables["gzip"]) and tables["file"].equals(tables["stdin"])


def _between_passes(monkeypatch: pytest.MonkeyPatch, change: object) -> None:
    """Run ``change()`` after the first pass (when the second starts reading)."""
    read = parquet._read

    def second(*args: object, **kw: object) -> object:
        change()  # type: ignore[operator]
        return read(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(parquet, "_read", second)


def test_a_log_that_grows_between_the_passes_is_written_as_first_read(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "live.log"
    shutil.copyfile(FIXTURES[0], log)
    before = tmp_path / "before.parquet"
    parquet.write_run_parquet([(str(log), None)], str(before), two_pass=False)
    more = b"[2026-01-01 00:00:00 TP0] something never seen before: 1.5e400 x=y\n" * 50

    def grow() -> None:
        with open(log, "ab") as fh:
            fh.write(more)

    _between_passes(monkeypatch, grow)
    grown = tmp_path / "grown.parquet"
    parquet.write_run_parquet([(str(log), None)], str(grown), two_pass=True)
    assert pq.read_table(grown).equals(pq.read_table(before))


def test_a_log_rewritten_between_the_passes_is_an_error(generated: list[Path], tmp_path: Path,  # noqa: F811
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "rewritten.log"
    shutil.copyfile(FIXTURES[0], log)
    other = generated[1].read_bytes()

    def rewrite() -> None:
        log.write_bytes(other)

    _between_passes(monkeypatch, rewrite)
    with pytest.raises(InputError, match="changed between the two passes"):  # (learned in halves, it would be
        # learned again in one pass, from the rewritten log, and written as that)
        parquet.write_run_parquet([(str(log), None)], str(tmp_path / "out.parquet"), two_pass=True, split=False)


class _FullAtTheEnd:
    """A file object that takes every write but the footer's (the last, ending in the magic)."""

    def __init__(self) -> None:
        self.written = 0
        self.closed = False

    def write(self, data: bytes) -> int:
        data = bytes(data)
        if self.written and data.endswith(b"PAR1"):
            raise OSError(28, "No space left on device")
        self.written += len(data)
        return len(data)

    def flush(self) -> None:
        pass

    def tell(self) -> int:
        return self.written


def test_a_write_that_fails_at_the_footer_is_raised_not_waited_on() -> None:
    """The encoding thread's error after the last row group reaches the caller; the caller
    does not wait for a thread that waits for it."""
    import threading

    outcome: list[BaseException | None] = []

    def write() -> None:
        try:
            parquet.write_run_parquet([(str(FIXTURES[0]), None)], _FullAtTheEnd())  # type: ignore[arg-type]
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    worker = threading.Thread(target=write, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "the writer hung after the encoder failed"
    assert isinstance(outcome[0], OSError) and outcome[0].errno == 28


def _learned(monkeypatch: pytest.MonkeyPatch, change: object) -> list[bool]:
    """Make the halves' union of columns wrong by ``change(columns)``; returns the ``split``
    of each attempt at two passes."""
    absorb = parquet_columns.Columns.absorb
    attempts: list[bool] = []
    two_passes = parquet._two_passes

    def wrong(self: parquet_columns.Columns, later: parquet_columns.Columns) -> None:
        absorb(self, later)
        change(self)  # type: ignore[operator]

    def counted(*args: object, split: bool) -> object:
        attempts.append(split)
        return two_passes(*args, split=split)  # type: ignore[arg-type]

    monkeypatch.setattr(parquet_columns.Columns, "absorb", wrong)
    monkeypatch.setattr(parquet, "_two_passes", counted)
    return attempts


@pytest.mark.parametrize("wrong", ["extra column", "missing column", "wider kind"])
def test_a_wrong_guess_from_the_halves_is_read_again_in_one_pass(generated: list[Path], tmp_path: Path,  # noqa: F811
                                                                 monkeypatch: pytest.MonkeyPatch, wrong: str) -> None:
    """Where the halves' columns are not the file's (a record across the boundary read
    otherwise), the second pass finds it and the file is written again from one pass."""
    log = generated[1]

    def change(columns: parquet_columns.Columns) -> None:
        if wrong == "extra column":
            columns.order["never_a_column"] = None
            columns.kinds["never_a_column"] = {"int"}
        elif wrong == "missing column":
            name = next(n for n in reversed(columns.order) if n not in ("kind", "line", "text", "file"))
            del columns.order[name]
            columns.kinds.pop(name, None)
        else:
            name = next(n for n, k in columns.kinds.items() if k == {"int"})
            columns.kinds[name] = {"int", "str"}

    attempts = _learned(monkeypatch, change)
    out = tmp_path / "out.parquet"
    parquet.write_run_parquet([(str(log), None)], str(out))
    assert attempts == [True, False]
    exact = tmp_path / "exact.parquet"
    write_parquet(iter_events(str(log)), str(exact))
    assert pq.read_table(out).equals(pq.read_table(exact))


def test_the_halves_are_not_tried_for_a_file_object(generated: list[Path], tmp_path: Path,  # noqa: F811
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    attempts = _learned(monkeypatch, lambda columns: None)
    with open(tmp_path / "out.parquet", "wb") as fh:
        parquet.write_run_parquet([(str(generated[1]), None)], fh)
    assert attempts == [False]


def test_two_threads_only_where_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parquet_columns, "TWO_BY_DEFAULT", False)
    monkeypatch.setattr(parquet_columns, "SPLIT_MIN_BYTES", 64 << 20)
    monkeypatch.setattr(parquet_columns, "worker_count", parallel.worker_count)
    monkeypatch.delenv("LOGFORENSICS_WORKERS", raising=False)
    assert not parquet_columns.two_cores(1 << 30)
    monkeypatch.setenv("LOGFORENSICS_WORKERS", "2")
    assert parquet_columns.two_cores(1 << 30)
    assert not parquet_columns.two_cores(1 << 20)  # a small log: one thread
    monkeypatch.setenv("LOGFORENSICS_WORKERS", "1")
    assert not parquet_columns.two_cores(1 << 30)
