"""Compressed logs, byte-order marks and input that is not text, through the one opener."""

from __future__ import annotations

import bz2
import codecs
import functools
import gzip
import json
import lzma
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from logforensics.ingest import LiveRun
from logforensics.ingest.batch import read_file
from logforensics.ingest.parallel import read_in_parallel

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
READY = FIXTURES / "real" / "052-l4x4-tp4-pcie-custom-allreduce-disabled-full-startup-to-ready.log"
CRASH = FIXTURES / "real" / "041-mi355x-tp8-hip-oom-during-model-init-transformers-fallback.log"
CLI = [sys.executable, "-m", "logforensics"]
NOT_TEXT = "this does not look like a text log"

COMPRESSORS = {
    "gz": gzip.compress,
    "bz2": bz2.compress,
    "xz": lzma.compress,
    "zst": lambda b: zstandard.ZstdCompressor().compress(b),
}


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=300)


def events(path: Path) -> list[dict]:
    out = run("parse", "--format", "jsonl", str(path))
    assert out.returncode == 0, out.stderr
    return [{k: v for k, v in json.loads(x).items() if k != "file"} for x in out.stdout.splitlines()]


def summary(path: Path) -> dict:
    out = run("summary", "--json", str(path))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.replace(json.dumps(str(path))[1:-1], "<log>"))


@functools.cache
def plain_events(path: Path) -> list[dict]:
    """``events`` of a plain fixture, read once: several cases compare against the same one."""
    return events(path)


@functools.cache
def plain_summary(path: Path) -> dict:
    """``summary`` of a plain fixture, read once (the cases compare, never change it)."""
    return summary(path)


@pytest.mark.parametrize("ext", sorted(COMPRESSORS))
@pytest.mark.parametrize("named", [True, False], ids=["by-name", "magic-only"])
def test_compressed_logs_read_like_the_plain_one(tmp_path: Path, ext: str, named: bool) -> None:
    path = tmp_path / (f"server.log.{ext}" if named else "server.log")
    path.write_bytes(COMPRESSORS[ext](CRASH.read_bytes()))
    assert events(path) == plain_events(CRASH)  # same events, same line numbers (of the decompressed text)
    assert summary(path) == plain_summary(CRASH)
    out = run("diff", str(READY), str(path), "--fail-on", "never")
    assert out.returncode == 0 and "TP1 failed first" in out.stdout
    assert NOT_TEXT not in out.stdout + out.stderr


def test_check_reads_a_compressed_case(tmp_path: Path) -> None:
    case = tmp_path / "cases" / "gz"
    case.mkdir(parents=True)
    (case / "baseline.log").write_bytes(READY.read_bytes())
    (case / "failing.log").write_bytes(gzip.compress(CRASH.read_bytes()))
    assert run("check", str(tmp_path / "cases"), "--update").returncode == 0
    plain = tmp_path / "plain" / "gz"
    plain.mkdir(parents=True)
    (plain / "baseline.log").write_bytes(READY.read_bytes())
    (plain / "failing.log").write_bytes(CRASH.read_bytes())
    assert run("check", str(tmp_path / "plain"), "--update").returncode == 0
    assert (case / "expected.yml").read_text() == (plain / "expected.yml").read_text()


def test_truncated_gzip_keeps_what_it_holds_and_warns(tmp_path: Path) -> None:
    data = gzip.compress(CRASH.read_bytes())
    path = tmp_path / "server.log.gz"
    path.write_bytes(data[: len(data) // 2])
    s = summary(path)
    assert s["coverage"]["lines_read"] > 10
    assert any("ends early" in w for w in s["warnings"])


def test_a_compressed_file_is_never_cut_into_byte_ranges(tmp_path: Path) -> None:
    """The parallel reader cuts plain files only; a compressed one is read in one pass."""
    from test_ssh_speed import decode_lines

    big = READY.read_bytes() + decode_lines(4 << 20, 0)[0] + CRASH.read_bytes()
    path = tmp_path / "server.log.gz"
    path.write_bytes(gzip.compress(big))
    plain = tmp_path / "server.log"
    plain.write_bytes(big)
    assert read_in_parallel(str(plain), name="x", workers=2, min_bytes=1, range_bytes=len(big) // 4) is not None
    got = read_file(str(path), name="x").summary().to_dict()
    want = read_file(str(plain), name="x").summary().to_dict()
    assert json.dumps(got, default=str).replace(str(path), "<log>") == \
        json.dumps(want, default=str).replace(str(plain), "<log>")


@pytest.mark.parametrize("encoding,bom", [("utf-16-le", codecs.BOM_UTF16_LE), ("utf-16-be", codecs.BOM_UTF16_BE),
                                          ("utf-8", codecs.BOM_UTF8)])
def test_byte_order_marks_are_read(tmp_path: Path, encoding: str, bom: bytes) -> None:
    path = tmp_path / "server.log"
    path.write_bytes(bom + READY.read_text().encode(encoding))
    assert events(path) == plain_events(READY)  # line 1 (the environment) is read like any other
    s = summary(path)
    assert s == plain_summary(READY) and not any(NOT_TEXT in w for w in s["warnings"])


@pytest.mark.parametrize("kind", ["random", "nul-heavy", "utf-16-without-bom"])
def test_input_that_is_not_text_warns_once_and_keeps_the_result(tmp_path: Path, kind: str) -> None:
    rng = random.Random(7)
    data = {"random": bytes(rng.getrandbits(8) for _ in range(300_000)),
            "nul-heavy": b"\0" * 50_000 + READY.read_bytes() + b"\0" * 50_000,
            "utf-16-without-bom": READY.read_text().encode("utf-16-le")}[kind]
    path = tmp_path / "server.log"
    path.write_bytes(data)
    out = run("summary", "--json", str(path))
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert sum(NOT_TEXT in w for w in s["warnings"]) == 1
    assert s["coverage"]["lines_read"] == data.count(b"\n") + (not data.endswith(b"\n"))
    text = run("summary", str(path))
    assert text.stdout.count(NOT_TEXT) == 1
    parse = run("parse", "--format", "jsonl", str(path))
    assert parse.returncode == 0 and parse.stderr.count(NOT_TEXT) == 1


def test_a_real_log_gives_no_text_warning() -> None:
    for log in sorted((FIXTURES / "real").glob("*.log")):
        run_ = LiveRun(str(log))
        from logforensics.ingest.files import blocks

        warned: list[str] = []
        for block in blocks(log, warn=warned.append):
            run_.feed(block)
        assert not warned, (log.name, warned)


def test_readme_lists_the_compressed_formats() -> None:
    readme = (FIXTURES.parent / "README.md").read_text(encoding="utf-8")
    for name in (".gz", ".bz2", ".xz", ".zst"):
        assert name in readme
    assert NOT_TEXT in readme
    assert os.path.exists(FIXTURES.parent / "pyproject.toml")
    assert "zstandard" in (FIXTURES.parent / "pyproject.toml").read_text()


@pytest.mark.parametrize("size", [0, 1, 4096, 65536, 65537, 3 * 65536 + 17])
@pytest.mark.parametrize("kind", ["plain", "gz"])
def test_blocks_into_a_reused_buffer_are_the_file(tmp_path: Path, size: int, kind: str) -> None:
    """``blocks(reuse=True)``: buffers read into again and again (``ahead``: by a reading
    thread), each block consumed before the next is asked for, give the same blocks as
    fresh reads (the first at least the sniffed bytes, the last short, none empty)."""
    from logforensics.ingest.files import blocks

    data = random.Random(size).randbytes(size)
    path = tmp_path / ("log.gz" if kind == "gz" else "log")
    path.write_bytes(gzip.compress(data) if kind == "gz" else data)
    plain = [bytes(b) for b in blocks(path, size=4096)]
    seen: list[int] = []
    reused = [bytes(b) for b in blocks(path, seen.append, size=4096, reuse=True)]
    assert reused == plain and b"".join(reused) == data and seen == [len(b) for b in plain]
    assert all(plain)
    ahead = [bytes(b) for b in blocks(path, size=4096, reuse=True, ahead=True)]
    assert ahead == plain
    # a reader that stops early: the reading thread ends, nothing is left running
    import threading

    before = threading.active_count()
    gen = blocks(path, size=4096, reuse=True, ahead=True)
    if size:
        next(gen)
    gen.close()
    assert threading.active_count() <= before
