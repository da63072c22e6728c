"""``parse --format parquet`` from C columns (``export/parquet.py``) reads back as the exact path's table.

The exact path is ``tables.write_parquet`` of every event (as with ``LOGFORENSICS_PURE=1``).
The C writer's file, written to a path and to a file object, is read back with
``pq.read_table`` and compared with it: the same columns in the same order, the same
types, the same values, on every fixture, on logs of both generators, on damaged lines,
with kinds chosen, on runs of several files, and across row groups. The share of lines taken
in C is checked too. Either way the file has the event schema's columns and types
(``tables.file_schema``), whatever the log holds.
"""

from __future__ import annotations

import gzip
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from accel import accelerated
from test_fastpath import FIXTURES
from test_parse_jsonl import MORE, _mutate, generated  # noqa: F401  (generated: a fixture)

from logforensics.export import parquet, tables
from logforensics.export.tables import write_parquet
from logforensics.pipeline import iter_events
from logforensics.read import emit

pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "logforensics"]
pytestmark = accelerated


def _same(paths: list[tuple[Path, str | None]], tmp_path: Path, wanted: tuple[str, ...] = ()) -> object:
    """The C writer gives the exact path's table, to a path and to a file object; returns its stats."""
    exact = tmp_path / "exact.parquet"
    events = (ev for p, node in paths for ev in iter_events(str(p), node=node) if not wanted or ev.kind in wanted)
    write_parquet(events, str(exact))
    b = pq.read_table(exact)
    got = []
    for way in ("path", "file object"):
        fast = tmp_path / f"fast-{way}.parquet"
        files = [(str(p), node) for p, node in paths]
        if way == "path":
            got.append(parquet.write_run_parquet(files, str(fast), wanted=wanted))
        else:
            with open(fast, "wb") as fh:
                got.append(parquet.write_run_parquet(files, fh, wanted=wanted))
        a = pq.read_table(fast)
        assert a.schema == b.schema, (way, a.schema, b.schema)
        assert a.num_rows == b.num_rows, way
        for name in b.column_names:
            assert a[name].equals(b[name]), (way, name)
    assert got[0] == got[1]
    return got[0]


def _leaves(t: Any) -> int:
    """Parquet columns (leaves) of a field of Arrow type ``t``."""
    import pyarrow as pa

    if pa.types.is_list(t):
        return _leaves(t.value_type)
    if pa.types.is_struct(t):
        return sum(_leaves(t.field(i).type) for i in range(t.num_fields))
    return 1


def _chunk(group: Any, name: str) -> Any:
    """The column chunk of the top-level primitive column ``name`` in a row group's metadata."""
    return next(group.column(c) for c in range(group.num_columns) if group.column(c).path_in_schema == name)


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
    # one file of several runs, with nodes; small row groups, so that groups lack columns and
    # types meet across groups
    monkeypatch.setattr(parquet, "ROW_GROUP", 1000)
    monkeypatch.setattr(tables, "ROW_GROUP", 700)
    _same([(generated[1], "node-a"), (generated[5], "node-b"), (FIXTURES[0], None)], tmp_path)
    _same([(generated[0], None), (generated[4], "n1")], tmp_path, wanted=("decode_batch", "exception", "other"))
    _same([(generated[4], None)], tmp_path, wanted=("nothing_has_this_kind",))


@pytest.mark.parametrize("prefix", [b"sglang-1  | ", b"\x1b[36msglang-1  |\x1b[0m "], ids=["plain", "in-colour"])
def test_lines_after_a_wrapper_read_back_the_same_and_mostly_in_c(generated: list[Path], tmp_path: Path,  # noqa: F811
                                                                 prefix: bytes) -> None:
    """Every line behind ``docker compose``'s wrapper (in colour or not): the record's columns
    are filled in C from where it begins in its line, and read back as the exact path's."""
    wrapped = tmp_path / "wrapped.log"
    wrapped.write_bytes(b"".join(prefix + line for line in generated[5].read_bytes().splitlines(keepends=True)))
    (stats,) = _same([(wrapped, None)], tmp_path)  # type: ignore[misc]
    assert stats.taken >= 0.5 * stats.lines, stats


@pytest.mark.parametrize("rows", [20, 333])
def test_kinds_that_meet_across_row_groups_read_back_the_same(rows: int, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Logs whose records of several kinds share field names, in row groups small enough
    that each group holds other kinds: every group is of the file's one schema."""
    monkeypatch.setattr(parquet, "ROW_GROUP", rows)
    for path in (ROOT / "fixtures" / "diff" / "throughput_regression" / "baseline.log",
                 ROOT / "fixtures" / "multinode" / "tp8_two_nodes" / "baseline" / "node0.log"):
        _same([(path, None)], tmp_path)
        assert pq.ParquetFile(tmp_path / "fast-path.parquet").metadata.num_row_groups > 1


@pytest.mark.parametrize(("rows", "group_bytes", "size"), [(1000, 1 << 30, 1000), (4096, 1 << 30, 4096),
                                                         (4096, 1, 2048)])
def test_groups_have_the_same_rows_and_every_column(generated: list[Path], tmp_path: Path,  # noqa: F811
                                                              monkeypatch: pytest.MonkeyPatch, rows: int,
                                                              group_bytes: int, size: int) -> None:
    """Every row group but the last has ``ROW_GROUP`` rows, however the blocks cut the log, or
    half as many where those hold ``GROUP_BYTES``; every group has every column of the schema."""
    monkeypatch.setattr(parquet, "ROW_GROUP", rows)
    monkeypatch.setattr(parquet, "GROUP_BYTES", group_bytes)
    _same([(generated[1], None), (generated[4], "n1")], tmp_path)
    meta = pq.ParquetFile(tmp_path / "fast-path.parquet").metadata
    sizes = [meta.row_group(k).num_rows for k in range(meta.num_row_groups)]
    assert meta.num_row_groups > 2 and set(sizes[:-1]) == {size} and 0 < sizes[-1] <= size
    names = meta.schema.to_arrow_schema().names
    for k in range(meta.num_row_groups):
        group = meta.row_group(k)
        assert [group.column(c).path_in_schema.split(".")[0] for c in range(group.num_columns)] == \
            [f.name for f in meta.schema.to_arrow_schema() for _ in range(_leaves(f.type))]
    assert names == tables.file_schema().names


def test_long_rows_make_groups_of_half_the_rows_in_the_same_file(generated: list[Path], tmp_path: Path,  # noqa: F811
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Long lines (random text before a run's records) are written in groups of half
    ``ROW_GROUP`` rows, half a group of them holding ``GROUP_BYTES``; the log's lines after
    them in groups of ``ROW_GROUP`` again. The file reads back as the exact path's table, the
    chunks of nulls of both sizes among them."""
    rng = random.Random(7)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 9))) for _ in range(200)]
    long_lines = tmp_path / "long.log"
    long_lines.write_text("".join(" ".join(rng.choice(words) for _ in range(400)) + "\n" for _ in range(6000)))
    monkeypatch.setattr(parquet, "ROW_GROUP", 2000)
    monkeypatch.setattr(parquet, "GROUP_BYTES", 1 << 20)  # 1000 rows of the log: ~0.3 MiB; of these: ~2 MiB
    _, log_stats = _same([(long_lines, None), (generated[1], None)], tmp_path)  # type: ignore[misc]
    meta = pq.ParquetFile(tmp_path / "fast-path.parquet").metadata
    sizes = [meta.row_group(k).num_rows for k in range(meta.num_row_groups)]
    assert log_stats.lines > 4000
    whole = sizes.index(2000)
    assert whole >= 5 and set(sizes[:whole]) == {1000}, sizes
    assert set(sizes[whole:-1]) == {2000} and len(sizes) - 1 - whole >= log_stats.lines // 2000 - 1, sizes


def test_file_and_node_are_dictionaries_not_copies(generated: list[Path], tmp_path: Path,  # noqa: F811
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The file's name and the node are the same in every row of a file: C writes neither a
    row at a time, they are written as dictionary columns (a dictionary page of their value in
    every group), and read back as text."""
    pa = pytest.importorskip("pyarrow")
    monkeypatch.setattr(parquet, "ROW_GROUP", 1000)
    ops = emit.ColumnEmitter.ops

    def no_column(self: Any, plan: Any, n: int, offset: int = 0) -> Any:
        got = ops(self, plan, n, offset)
        filled = {col for col, *_ in got[1]} if got is not None else set()
        assert not {name for (name, _), col in self.columns.items() if col in filled} & {"file", "node"}
        return got

    monkeypatch.setattr(emit.ColumnEmitter, "ops", no_column)
    first, second = generated[1], generated[4]
    _same([(first, None), (second, "n1")], tmp_path)
    meta = pq.ParquetFile(tmp_path / "fast-path.parquet").metadata
    for name in ("file", "node"):
        assert all(_chunk(meta.row_group(k), name).has_dictionary_page for k in range(meta.num_row_groups))
    table = pq.read_table(tmp_path / "fast-path.parquet")
    assert table.schema.field("file").type == pa.string() and table.schema.field("node").type == pa.string()
    assert set(table["node"].to_pylist()) == {None, "n1"}


def test_a_dictionary_only_for_text_whose_values_repeat(generated: list[Path], tmp_path: Path,  # noqa: F811
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A text column whose first values are mostly distinct (client addresses) is encoded
    without a dictionary, a short text that repeats (the kind) with one, integers
    delta-encoded; the file reads back as the exact path's table."""
    monkeypatch.setattr(parquet, "ROW_GROUP", 4096)
    _same([(generated[0], None)], tmp_path)
    path = tmp_path / "fast-path.parquet"
    meta, table = pq.ParquetFile(path).metadata, pq.read_table(path)
    first = 0
    seen = 0
    for k in range(meta.num_row_groups):
        group = meta.row_group(k)
        clients = group.num_rows - table["client"].slice(first, group.num_rows).null_count
        first += group.num_rows
        if clients >= 64:  # enough values to tell (tables.mostly_distinct)
            seen += 1
            assert not _chunk(group, "client").has_dictionary_page, k
        assert _chunk(group, "kind").has_dictionary_page, k
        assert "DELTA_BINARY_PACKED" in _chunk(group, "line").encodings, k
    assert seen > 2


@pytest.mark.parametrize(("parts", "codec"), [(("log",), "SNAPPY"), (("bytes", "words"), "UNCOMPRESSED"),
                                              (("words", "log"), "UNCOMPRESSED"), (("log", "bytes"), "SNAPPY")])
def test_text_that_snappy_barely_shrinks_is_written_uncompressed(generated: list[Path], tmp_path: Path,  # noqa: F811
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 parts: tuple[str, ...], codec: str) -> None:
    """The text is compressed only where samples of it show Snappy pays: a log's lines with
    Snappy, random bytes (each undecodable byte a U+FFFD) and random words without. Parquet
    has one codec a column for the whole file, and the writer is opened with the first
    group: its text decides.
    The file reads back as the exact path's table, in pyarrow and in DuckDB."""
    import duckdb
    from test_other_walker import _random_bytes, _unknown_text

    monkeypatch.setattr(parquet, "ROW_GROUP", 1000)
    monkeypatch.setattr(tables, "ROW_GROUP", 1000)  # the exact path's groups, judged alike
    rng = random.Random(12)
    log = generated[4].read_bytes()
    made = {"log": log[:log.index(b"\n", 600000) + 1], "bytes": _random_bytes(rng, 400000) + b"\n",
            "words": _unknown_text(rng, 3000)}
    path = tmp_path / "parts.log"
    path.write_bytes(b"".join(made[part] for part in parts))
    _same([(path, None)], tmp_path)
    for way in ("fast-path", "exact"):
        out = tmp_path / f"{way}.parquet"
        meta, table = pq.ParquetFile(out).metadata, pq.read_table(out)
        assert {_chunk(meta.row_group(k), "text").compression for k in range(meta.num_row_groups)} == {codec}, way
    fast = tmp_path / "fast-path.parquet"
    got = duckdb.connect().sql(f"SELECT count(*), sum(length(text)), count(DISTINCT text) FROM read_parquet('{fast}')")
    texts = table["text"].to_pylist()
    assert got.fetchall()[0] == (len(texts), sum(len(t) for t in texts if t is not None), len(set(texts) - {None}))


def test_incompressible_judges_the_values_of_the_slice_it_is_given() -> None:
    """The sample is of the column's own values: a slice of random text after a log's lines,
    a chunked array's later chunks, and not the bytes of the buffer before the slice."""
    from test_other_walker import _unknown_text

    from logforensics.export.tables import COMPRESS_SAMPLE, incompressible

    pa = pytest.importorskip("pyarrow")
    lines = (ROOT / "fixtures/diff/custom_ar_pcie_oom/baseline.log").read_text(encoding="utf-8").split("\n")
    log = [line for line in lines if line] * 20
    words = _unknown_text(random.Random(5), 4000).decode().split("\n")
    assert sum(len(w) for w in words) > COMPRESS_SAMPLE  # more than the sample: its first bytes decide
    both = pa.array(log + words)
    assert not incompressible(pa.array(log)) and incompressible(pa.array(words))
    assert incompressible(both.slice(len(log))) and not incompressible(both.slice(0, len(log)))
    assert incompressible(pa.chunked_array([pa.array([None] * 10, pa.string()), both.slice(len(log))]))
    assert not incompressible(pa.array(words[:20]))  # too little to tell: compressed


def test_damaged_lines_read_back_the_same(generated: list[Path], tmp_path: Path) -> None:  # noqa: F811
    rng = random.Random(3)
    lines = generated[1].read_text(encoding="utf-8").split("\n")[:5000]
    out = [(_mutate(line, rng) if rng.random() < 0.3 else line) for line in lines]
    path = tmp_path / "damaged.log"
    data = "\n".join(out).encode("utf-8", "surrogatepass")
    path.write_bytes(data[:20000] + bytes(rng.randrange(256) for _ in range(5000)) + b"\n" + data[20000:])
    _same([(path, None)], tmp_path)


@pytest.mark.parametrize("block", [4093])  # runs across many block ends; the other tests read 1 MiB blocks
def test_unknown_text_in_c_reads_back_the_same(block: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of unrecognised lines come from C as columns (``ColumnEmitter.others``), in
    blocks of any size, with a node, with kinds chosen, and mixed with records in row groups."""
    from test_parse_jsonl import _mixtures

    monkeypatch.setattr(parquet, "BULK_BLOCK_SIZE", block)
    monkeypatch.setattr(parquet, "ROW_GROUP", 700)
    rows = in_c = 0
    for name, data in _mixtures():
        path = tmp_path / name
        path.write_bytes(data)
        (stats,) = _same([(path, None)], tmp_path)
        rows += sum(ev.kind == "other" for ev in iter_events(str(path)))
        in_c += stats.by_kind.get("other", 0)
        if name in ("mix1.log", "bytes.log"):
            _same([(path, "node-2"), (path, None)], tmp_path)
            _same([(path, None)], tmp_path, wanted=("other",))
            _same([(path, None)], tmp_path, wanted=("decode_batch", "exception"))
    assert in_c > 0.8 * rows, (in_c, rows)


@pytest.mark.parametrize("hold", [8192, 3])
def test_rows_held_in_c_make_few_pieces_and_the_same_table(hold: int, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of unrecognised lines (blank lines among them, a plan of their own) and records
    alternate: their rows are held in C across scans (``_Groups.hold``) and taken as one piece
    when an exact-path row comes (here of text beyond ASCII), at a group's count or at
    ``HOLD_ROWS``, not a piece a scan; the table is the exact path's, whatever the cap."""
    monkeypatch.setattr(parquet, "HOLD_ROWS", hold)
    monkeypatch.setattr(parquet, "ROW_GROUP", 4096)
    rng = random.Random(11)
    lines = []
    for k in range(3000):
        lines.append(" ".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randrange(1, 9)))
                              for _ in range(rng.randrange(1, 12))).encode())
        if k % 3 == 0:
            lines.append(b"")
        if k % 3 == 1:
            lines.append(b"[2025-10-22 10:27:57 TP0] Decode batch. #running-req: 1, #token: %d, token usage: 0.00, "
                         b"cuda graph: True, gen throughput (token/s): 178.86, #queue-req: 0, " % k)
        if k % 500 == 0:
            lines.append("un café, s'il vous plaît".encode())  # valid UTF-8 beyond ASCII: the exact path's
    path = tmp_path / "mixed.log"
    path.write_bytes(b"\n".join(lines) + b"\n")
    pieces: list[int] = []
    add = parquet._Groups.add_columns

    def counted(self: Any, taken: Any, scanner: Any) -> None:
        pieces.append(taken[0])
        add(self, taken, scanner)

    monkeypatch.setattr(parquet._Groups, "add_columns", counted)
    (stats,) = _same([(path, None)], tmp_path)  # type: ignore[misc]
    assert stats.taken > 0.9 * stats.lines and stats.by_kind["blank"] > 990, stats  # the first learns the plan
    assert stats.by_kind["decode_batch"] > 990, stats
    scans = 2 * (3000 // 3)  # at least: a record's scan, then the next run's
    if hold > 100:
        assert 0 < len(pieces) // 2 < scans // 50, (len(pieces), scans)  # two writes: to a path and to a file
    else:
        assert max(pieces) <= hold + 8  # a scan's rows (a run's, or a record's) may pass the cap; the next takes them


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


def test_stdin_and_compressed_give_the_files_table(tmp_path: Path) -> None:
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


class _Full:
    """A file object that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.closed = False

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            raise OSError(28, "No space left on device")
        self.room -= len(data)
        return len(data)

    def flush(self) -> None:
        pass


def test_a_file_object_that_fills_up_is_an_error(generated: list[Path]) -> None:  # noqa: F811
    with pytest.raises(OSError) as caught:
        parquet.write_run_parquet([(str(generated[1]), None)], _Full(1000))  # type: ignore[arg-type]
    assert caught.value.errno == 28


def _small_files() -> None:
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), not the process
    resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))


@pytest.mark.skipif(os.name != "posix", reason="a limit on file size is POSIX's")
def test_an_output_that_fills_up_ends_in_one_line_not_a_hang(generated: list[Path], tmp_path: Path) -> None:  # noqa: F811
    """The encoding thread's failed write reaches the command, which says so in a line and
    leaves no file; nothing waits for a thread that waits for it."""
    target = tmp_path / "out.parquet"
    env = {**os.environ, "LOGFORENSICS_PURE": "0"}
    done = subprocess.run(CLI + ["parse", "--format", "parquet", "-o", str(target), str(generated[1])],
                          capture_output=True, text=True, timeout=120, preexec_fn=_small_files, env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("logforensics: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "File too large" in done.stderr
    assert not target.exists() and os.listdir(tmp_path) == []


def test_an_encoding_error_reaches_the_caller_and_nothing_hangs(generated: list[Path], tmp_path: Path,  # noqa: F811
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """pyarrow failing on one row group, in the thread that encodes them while the caller
    goes on: the error is raised and every thread ends."""
    import threading

    monkeypatch.setattr(parquet, "ROW_GROUP", 500)
    calls = []
    if True:
        open_writer = tables.open_writer

        class Failing:
            def __init__(self, writer: Any) -> None:
                self.writer = writer

            def write_table(self, table: Any, row_group_size: int) -> None:
                calls.append(1)
                if len(calls) == 3:
                    raise MemoryError("a row group pyarrow could not encode")
                self.writer.write_table(table, row_group_size=row_group_size)

            def __enter__(self) -> Failing:
                return self

            def __exit__(self, *exc: object) -> None:
                self.writer.close()

        monkeypatch.setattr(tables, "open_writer", lambda *args: Failing(open_writer(*args)))
    outcome: list[BaseException | None] = []

    def write() -> None:
        try:
            parquet.write_run_parquet([(str(generated[0]), None)], str(tmp_path / "out.parquet"))
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    before = threading.active_count()
    worker = threading.Thread(target=write, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the writer hung after a thread failed"
    assert isinstance(outcome[0], MemoryError) and len(calls) == 3
    assert threading.active_count() == before, threading.enumerate()


def test_behind_keeps_the_order_raises_the_first_error_and_never_waits_forever() -> None:
    """The calls are made in the order given, an item handed over only when the thread is
    free; after a failed one the rest are dropped and the error is raised at the next call
    and at the end (the caller is never kept waiting for a thread that waits for it), and a
    caller's own error is not replaced by it."""
    import threading
    import time

    done: list[int] = []
    busy: list[int] = []

    def slow(k: int) -> None:
        busy.append(k)
        time.sleep(0.001)
        done.append(k)
        assert busy.pop() == k

    with tables.Behind(slow) as behind:
        for k in range(100):
            behind(k)
            assert len(busy) <= 1
    assert done == list(range(100))

    def work(k: int) -> None:
        if k == 1:
            raise ValueError("the second call fails")
        done.append(k)

    done.clear()
    behind = tables.Behind(work)
    behind(0)
    behind(1)
    with pytest.raises(ValueError):
        behind(2)  # handed over once the thread is free, which it is after failing: raised
    with pytest.raises(ValueError):
        behind.close()
    assert done == [0] and not behind.thread.is_alive()
    before = threading.active_count()
    with pytest.raises(KeyError):
        with tables.Behind(work) as behind:
            behind(1)
            raise KeyError("the caller's")
    assert threading.active_count() == before


def test_the_file_has_the_declared_schema_and_extra_keeps_what_it_cannot_hold(tmp_path: Path) -> None:
    """Whatever the log, the file's columns and types are the event schema's: a list is a
    list of integers, not text; a value its field's type cannot hold and a field the schema
    lacks are kept in ``extra`` as JSON, not dropped or widened; no rows is a file of the
    schema and no group. DuckDB reads it as pyarrow does."""
    import json

    import duckdb

    from logforensics.events import Event
    from logforensics.events.schema import table_schema

    events = [
        Event("capture_bs", 3, "TP0", None, {"bs_list": [1, 2, 4], "num_tokens_list": [8]}, "bs [1, 2, 4]", "a.log"),
        Event("decode_batch", 4, "TP1", "2026-01-01 00:00:01", {"running_req": "many", "new_field": 1.5}, "x",
              "a.log", node="n1"),
    ]
    out = tmp_path / "out.parquet"
    assert write_parquet(events, str(out)) == 2
    got = pq.read_table(out)
    assert got.schema == table_schema()
    assert got["bs_list"].to_pylist() == [[1, 2, 4], None]
    assert got["running_req"].to_pylist() == [None, None]
    assert [None if e is None else json.loads(e) for e in got["extra"].to_pylist()] == \
        [None, {"running_req": "many", "new_field": 1.5}]
    assert got["end_line"].to_pylist() == [3, 4] and got["node"].to_pylist() == [None, "n1"]
    rel = duckdb.connect().sql(f"SELECT kind, bs_list, extra FROM read_parquet('{out}')")
    assert [r[:2] for r in rel.fetchall()] == [("capture_bs", [1, 2, 4]), ("decode_batch", None)]
    empty = tmp_path / "empty.parquet"
    assert write_parquet([], str(empty)) == 0
    meta = pq.ParquetFile(empty)
    assert meta.metadata.num_row_groups == 0 and meta.schema_arrow == table_schema()
