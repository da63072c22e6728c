"""A long line costs time linear in its length, on both reading paths, and is kept whole.

A line with a long token (a base64 payload, a list of token ids, minified JSON, a tensor
dump) after an SGLang prefix once cost time quadratic in its length in the grammar's
lexer (64 KiB of letters: about a minute). Each test times the reader in this process
(``summary``'s run model, ``parse --format jsonl``'s rows) on a long line and on a
baseline read in the same test, and bounds the ratio: the fastest of a few runs each,
so that a loaded machine slows both alike.
"""

from __future__ import annotations

import base64
import glob
import io
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from logforensics.export.jsonl import write_jsonl
from logforensics.ingest.batch import read_file
from logforensics.model.records import Coverage
from logforensics.read.fastpath import LINE_LIMIT
from logforensics.read.grammar import warm_up
from logforensics.read.parser import IncrementalParser

PREFIX = "[2026-03-12 16:43:01 TP1] "
REAL = sorted(glob.glob(str(Path(__file__).resolve().parent.parent / "fixtures" / "real" / "*.log")))


def payload(kind: str, n: int) -> str:
    """``n`` characters of a long token (or of text with spaces) as real logs carry them."""
    rng = random.Random(37)
    if kind == "letters":
        return "a" * n
    if kind == "spaces":
        return ("lorem ipsum dolor sit amet " * (n // 27 + 1))[:n]
    if kind == "digits":
        return "7" * n
    if kind == "base64":
        return base64.b64encode(rng.randbytes(n)).decode()[:n]
    if kind == "json":
        rows = [{"id": i, "token_ids": [i, i + 1, i + 2], "text": "x"} for i in range(n // 40 + 1)]
        return json.dumps(rows, separators=(",", ":"))[:n]
    raise ValueError(kind)


KINDS = ["letters", "spaces", "digits", "base64", "json"]


def long_line(path: Path, kind: str, n: int) -> Path:
    path.write_text(PREFIX + payload(kind, n) + "\n")
    return path


def as_lines(path: Path, kind: str, n: int, width: int = 120) -> Path:
    """The same characters as ordinary log lines, each behind the same prefix."""
    body = payload(kind, n)
    path.write_text("".join(PREFIX + body[i:i + width] + "\n" for i in range(0, n, width)))
    return path


def real_text(path: Path, n: int) -> Path:
    """``n`` bytes of real log text (the excerpts of ``fixtures/real``), cut at a line end."""
    data = b"".join(Path(p).read_bytes() for p in REAL)
    data = (data * (n // len(data) + 1))[:n]
    path.write_bytes(data[:data.rfind(b"\n") + 1])
    return path


def summary(path: Path) -> Coverage:
    return read_file(str(path)).summary().coverage


def rows(path: Path) -> list[dict]:
    out = io.BytesIO()
    write_jsonl(str(path), out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


READERS: dict[str, Callable[[Path], object]] = {"summary": summary, "parse": rows}


def fastest(fn: Callable[[Path], object], *paths: Path, runs: int = 3) -> list[float]:
    """The fastest of ``runs`` timings of ``fn`` on each path (taken in turn, so that a
    burst of load slows all alike)."""
    best = [float("inf")] * len(paths)
    for _ in range(runs):
        for i, p in enumerate(paths):
            t = time.perf_counter()
            fn(p)
            best[i] = min(best[i], time.perf_counter() - t)
    return best


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reader", ["summary", "parse"])
def test_a_64_kib_line_costs_no_more_than_as_much_real_log_text(tmp_path: Path, reading_path: str, kind: str,
                                                                 reader: str) -> None:
    n = 64 << 10
    line = long_line(tmp_path / "long.log", kind, n)
    normal = real_text(tmp_path / "real.log", n)
    t_line, t_normal = fastest(READERS[reader], line, normal)
    assert t_line < 3 * t_normal, (t_line, t_normal)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reader", ["summary", "parse"])
def test_a_1_mib_line_costs_no_more_than_the_same_bytes_as_lines(tmp_path: Path, reading_path: str, kind: str,
                                                                  reader: str) -> None:
    """Against the cheapest log text there is: one line shape repeated (one plan, read in C
    on the compiled path); a line of any content is read within 3x of it."""
    n = 1 << 20
    line = long_line(tmp_path / "long.log", kind, n)
    lines = as_lines(tmp_path / "lines.log", "letters", n)
    t_line, t_lines = fastest(READERS[reader], line, lines)
    assert t_line < 3 * t_lines + 0.05, (t_line, t_lines)


@pytest.mark.parametrize("size", [8 << 10, 1 << 20])
@pytest.mark.parametrize("kind", ["letters", "spaces", "base64"])
def test_time_grows_linearly_with_the_line(tmp_path: Path, reading_path: str, kind: str, size: int) -> None:
    """4x the line, at most 6x the time (quadratic: 16x), for summary and parse alike, below
    the part that is matched and far beyond it; the larger line is read whole."""
    small = long_line(tmp_path / "small.log", kind, size)
    large = long_line(tmp_path / "large.log", kind, 4 * size)
    for reader in READERS.values():
        t_small, t_large = fastest(reader, small, large)
        assert t_large < 6 * t_small + 0.05, (reader, t_small, t_large)
    assert [len(r["text"]) for r in rows(large)] == [len(PREFIX) + 4 * size]


def test_a_long_line_is_kept_whole_and_counted(tmp_path: Path, reading_path: str) -> None:
    """parse gives the whole line as the record's text; summary counts it among the lines
    read on their first part only, and says so once."""
    n = 3 << 20
    text = PREFIX + payload("base64", n)
    log = tmp_path / "mixed.log"
    log.write_text("[2026-03-12 16:43:00 TP1] Load weight begin. avail mem=21.63 GB\n" + text + "\n"
                   + "[2026-03-12 16:43:02 TP1] Load weight begin. avail mem=21.60 GB\n")
    got = rows(log)
    assert [r["line"] for r in got] == [1, 2, 3]
    assert got[1]["text"] == text and got[1]["rank"] == "TP1"
    assert [got[0]["kind"], got[2]["kind"]] == ["load_weight_begin", "load_weight_begin"]
    run = read_file(str(log))
    cov = run.summary().coverage
    assert cov.lines_read == 3 and cov.partial_lines == 1 and cov.long_lines == 0
    assert any("line 2" in w and str(LINE_LIMIT) in w for w in run.summary().warnings)


def test_short_lines_are_not_counted_as_partial(tmp_path: Path, reading_path: str) -> None:
    log = real_text(tmp_path / "real.log", 256 << 10)
    assert summary(log).partial_lines == 0


@pytest.mark.parametrize("chunk", [1000, 32 << 10])
def test_a_line_fed_in_many_chunks_is_joined_once(chunk: int) -> None:
    """A line that spans many chunks (a live stream, small blocks) is read whole, in time
    linear in its length: 4x the line, at most 6x the time."""
    def feed(n: int) -> tuple[float, list]:
        data = (PREFIX + "b" * n + "\nlast line\n").encode()
        parser = IncrementalParser("stream.log")
        t = time.perf_counter()
        events = []
        for i in range(0, len(data), chunk):
            events += parser.feed(data[i:i + chunk])
        events += parser.close()
        return time.perf_counter() - t, events

    warm_up()
    t_small = min(feed(1 << 20)[0] for _ in range(3))
    t_large, events = min((feed(4 << 20) for _ in range(3)), key=lambda r: r[0])
    assert [e.line for e in events] == [1, 2] and len(events[0].text) == len(PREFIX) + (4 << 20)
    assert t_large < 6 * t_small + 0.05, (t_small, t_large)
