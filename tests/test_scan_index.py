"""A block's index, made ahead on the reading thread, changes nothing the scan gives.

``BulkScanner.index(buf)`` records each whole line's start, length, shape and rank id as
the scanner's tables know them when it runs; ``scan(buf, pos, index)`` then reads them
from it instead of finding them. Here the summaries with an index (made just before the
block is fed, made blocks ahead of it as the reading thread does, made before any shape
or rank was learned, or made of another buffer) are compared with those without, on every
fixture, the synthetic log and logs of both generators (restarts bring new shapes and new
ranks in mid-file); and a thread indexes (and scans ahead) while shapes are added, many at
a time. ``index`` also scans the block ahead (``Index.ahead``), in a state of its own: from
its first line, and on after each line a scan stops at; ``scan`` returns such a scan for its
position when the ready table is the one it was made with.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from generated import write_logs
from test_bulk import _as_json, _bulk_path
from test_fastpath import FIXTURES, synthetic_log

from logforensics.ingest.batch import read_file
from logforensics.ingest.live import LiveRun
from logforensics.read import bulk

compiled = pytest.mark.skipif(not bulk.available(), reason="the C scanner is not built here (or disabled)")


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Crashes and restarts (new shapes, new ranks after a restart), several rank-prefix
    styles, torn and interleaved lines, and a steady serving log."""
    out = tmp_path_factory.mktemp("generated-index")
    return write_logs(out, [
        ("gen_sglang_log.py", ["--size", "3M", "--seed", "7", "--crash-rate", "0.3"]),
        ("gen_sglang_log.py", ["--size", "2M", "--seed", "3", "--prefix-style", "dp-tp", "--decode-ranks", "all",
                               "--torn-rate", "0.02", "--interleave-rate", "0.02", "--crash-rate", "0.2"]),
        ("gen_serving_log.py", ["--size", "2M", "--all-ranks", "--seed", "11"]),
    ])


def _blocks(data: bytes, size: int) -> list[bytes]:
    return [data[start:start + size] for start in range(0, len(data), size)]


def _indexed(data: bytes, name: str, size: int, how: str) -> str:
    """The summary with each block fed with an index: ``now`` made just before it is fed,
    ``ahead`` two blocks before (as the reading thread makes it), ``first`` all before any
    block is fed (no shape known), ``other`` of the block before (not this buffer)."""
    run = LiveRun(name)
    scanner = run.bulk_scanner()
    assert scanner is not None
    blocks = _blocks(data, size)
    indexes = [scanner.index(b) for b in blocks] if how == "first" else [None] * len(blocks)
    for k, block in enumerate(blocks):
        if how == "ahead":
            for j in (k, k + 1, k + 2):
                if j < len(blocks) and indexes[j] is None:
                    indexes[j] = scanner.index(blocks[j])
        if how == "now":
            index = scanner.index(block)
        elif how == "other":
            index = scanner.index(blocks[k - 1])
        else:
            index = indexes[k]
        run.feed_bulk(block, index)
        indexes[k] = None
    run.close()
    return _as_json(run.summary(), run)


def _check(data: bytes, name: str, sizes: tuple[int, ...]) -> None:
    for size in sizes:
        want, _ = _bulk_path(data, name, size)
        for how in ("now", "ahead", "first", "other"):
            assert _indexed(data, name, size, how) == want, f"{name}: blocks of {size} bytes, index {how}"


SOURCES = [pytest.param(p, id=p.name[:3] if p.parent.name == "real" else p.name) for p in FIXTURES]


@compiled
@pytest.mark.parametrize("path", SOURCES)
def test_index_changes_nothing_on_fixtures(path: Path) -> None:
    _check(path.read_bytes(), str(path), (1 << 20, 4093))


@compiled
def test_index_changes_nothing_on_the_synthetic_log() -> None:
    _check(synthetic_log(), "synthetic.log", (1 << 20, 997))


@compiled
def test_index_changes_nothing_on_generated_logs(generated: list[Path]) -> None:
    for path in generated:
        _check(path.read_bytes(), path.name, (1 << 20, 65521))


@compiled
def test_read_file_indexes_ahead_with_the_same_result(generated: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch reader with ``LOGFORENSICS_SCAN_AHEAD=1`` (reused buffers, indexed and
    scanned ahead by the reading thread) against blocks fed without an index."""
    monkeypatch.setenv("LOGFORENSICS_SCAN_AHEAD", "1")
    assert bulk.scan_ahead()
    for path in generated:
        want, _ = _bulk_path(path.read_bytes(), str(path), 1 << 20)
        run = read_file(path)
        assert _as_json(run.summary(), run) == want, path.name


@compiled
def test_index_entries_are_the_lines_after_the_first_newline() -> None:
    data = b"tail of a line\n" + b"".join(b"line %d of %s\n" % (i, b"x" * (i % 7)) for i in range(50)) + b"cut"
    run = LiveRun("t")
    scanner = run.bulk_scanner()
    assert scanner is not None
    index = scanner.index(data)
    starts = [i + 1 for i, c in enumerate(data) if c == 10][:-1]
    assert len(index) == 50
    for k, start in enumerate([15] + starts[1:]):
        begin, length, found, rid = index.entry(k)
        assert (begin, data[begin + length]) == (start, 10)
        assert not found and rid == -1  # no shape known yet
    with pytest.raises(IndexError):
        index.entry(50)
    with pytest.raises(TypeError):
        scanner.scan(data, 0, 0, "not an index")


@compiled
def test_adding_shapes_while_another_thread_indexes() -> None:
    """add() may grow the shape table (its slots move) while index() walks it: a real
    thread indexes again and again while thousands of shapes are added."""
    from logforensics.read import _scan

    scanner = _scan.Scanner(1)
    scanner.set_ready(bytes([1]) * (_scan.MAX_CLASSES * _scan.MAX_RANKS))  # the scans ahead take lines too
    words = [b"%s %s line" % (bytes([97 + a, 97 + b, 97 + c]), b"q" * d)
             for a in range(26) for b in range(26) for c in range(4) for d in range(2)]
    buf = b"start\n" + b"".join(w + b"\n" for w in words)
    stop = threading.Event()
    seen: list[int] = []
    failed: list[BaseException] = []

    def walk() -> None:
        try:
            while not stop.is_set():
                index = scanner.index(buf)
                seen.append(sum(index.entry(k)[2] for k in range(0, len(index), 97)))
                assert sum(seg[1] for seg in index.ahead) <= len(index)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failed.append(exc)

    thread = threading.Thread(target=walk)
    thread.start()
    try:
        for k, word in enumerate(words):
            assert scanner.add(word, k, 1, 0, None, (0, 3), False, ())
    finally:
        stop.set()
        thread.join()
    assert not failed
    assert seen and seen == sorted(seen)  # shapes only ever become known
    index = scanner.index(buf)
    assert len(index) == len(words) and all(index.entry(k)[2] for k in range(len(index)))
    assert scanner.shapes == len(words)
    assert [seg[:2] for seg in index.ahead] == [(len(buf), len(words))]  # every line, in one scan ahead
    assert scanner.scan(buf, 6, index) is index.ahead[0]
    assert scanner.scan(buf, 6)[:4] == index.ahead[0][:4]


@compiled
def test_most_lines_are_scanned_ahead(generated: list[Path]) -> None:
    """On a steady serving log the scans made ahead (as read_file's reading thread makes
    them) are what the scanner takes: most lines are never scanned on the main thread."""
    data = generated[2].read_bytes()
    run = LiveRun("serving")
    scanner = run.bulk_scanner()
    assert scanner is not None
    scan = scanner.scan
    ahead = 0

    def counted(buf: bytes, pos: int, line: int = 0, index: Any = None) -> Any:
        nonlocal ahead
        seg = scan(buf, pos, line, index)
        if index is not None and any(seg is made for made in index.ahead):
            ahead += seg[1]
        return seg

    scanner.scan = counted  # type: ignore[method-assign]
    for block in _blocks(data, 1 << 16):
        run.feed_bulk(block, scanner.index(block))
    assert ahead > 0.7 * scanner.taken
