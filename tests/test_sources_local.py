"""Behaviour tests of LocalFollower against real files and real inotify.

Every wait is bounded; a consumer thread records (time, item) pairs so tests can
check both the exact bytes and how fast they arrived.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from pathlib import Path

import pytest
from collector import Collector

from logforensics.sources import Chunk, LocalFollower, Notice, SourceError


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


def test_reads_existing_file_to_eof(tmp_path: Path) -> None:
    p = tmp_path / "server.log"
    data = os.urandom(300_000)
    p.write_bytes(data)
    items = list(LocalFollower(p, follow=False, chunk_size=65536))
    assert isinstance(items[0], Notice) and items[0].kind == "opened"
    assert isinstance(items[-1], Notice) and items[-1].kind == "eof"
    chunks = [it for it in items if isinstance(it, Chunk)]
    assert all(len(c.data) <= 65536 for c in chunks)
    assert b"".join(c.data for c in chunks) == data
    assert [c.offset for c in chunks] == [i * 65536 for i in range(len(chunks))]


def test_start_offset_and_offset_property(tmp_path: Path) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(b"0123456789")
    f = LocalFollower(p, follow=False, start_offset=4)
    items = list(f)
    chunk = next(it for it in items if isinstance(it, Chunk))
    assert chunk == Chunk(b"456789", 4)
    assert f.offset == 10


def test_missing_file_without_follow_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file"):
        list(LocalFollower(tmp_path / "absent.log", follow=False))


def test_appended_bytes_arrive_fast(tmp_path: Path) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(b"")
    col = Collector(LocalFollower(p))
    try:
        assert col.wait_for(lambda: "opened" in col.kinds())
        written: list[tuple[int, float]] = []
        size = 0
        for i in range(40):
            line = f"[2025-01-01 00:00:{i:02d}] Decode batch. #running-req: {i}\n".encode()
            t = time.perf_counter()
            append(p, line)
            size += len(line)
            written.append((size, t))
            assert col.wait_for(lambda s=size: col.delivered() >= s, timeout=2)
        latencies = []
        for end, t_write in written:
            t_got = next(t for t, it in col.items if isinstance(it, Chunk) and it.offset + len(it.data) >= end)
            latencies.append(t_got - t_write)
        median = statistics.median(latencies)
        print(f"\nlocal append->delivery latency: median {median * 1e3:.2f} ms, max {max(latencies) * 1e3:.2f} ms")
        assert median < 0.1, "wake-ups should come from inotify, not the poll timer"
        assert col.data_since_restart() == p.read_bytes()
    finally:
        col.close()


def test_waits_for_file_that_does_not_exist_yet(tmp_path: Path) -> None:
    p = tmp_path / "later.log"
    col = Collector(LocalFollower(p))
    try:
        assert col.wait_for(lambda: col.kinds() == ["waiting"])
        time.sleep(0.2)
        p.write_bytes(b"server up\n")
        assert col.wait_for(lambda: col.delivered() == 10)
        assert col.kinds() == ["waiting", "opened"]
        assert col.data_since_restart() == b"server up\n"
    finally:
        col.close()


def test_waits_for_parent_directory_too(tmp_path: Path) -> None:
    p = tmp_path / "run-1" / "server.log"
    col = Collector(LocalFollower(p))
    try:
        assert col.wait_for(lambda: col.kinds() == ["waiting"])
        p.parent.mkdir()
        time.sleep(0.6)  # the poll timer notices the directory and starts watching it
        p.write_bytes(b"ok\n")
        assert col.wait_for(lambda: col.delivered() == 3)
        append(p, b"and inotify works\n")
        assert col.wait_for(lambda: col.delivered() == 21, timeout=0.4)
    finally:
        col.close()


def test_truncation_restarts_from_zero(tmp_path: Path) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(b"old line one\nold line two\n")
    col = Collector(LocalFollower(p))
    try:
        assert col.wait_for(lambda: col.delivered() == 26)
        with open(p, "wb") as fh:  # what a restarted server with "> server.log" does
            fh.write(b"new\n")
        assert col.wait_for(lambda: "truncated" in col.kinds() and col.delivered() == 4)
        append(p, b"more\n")
        assert col.wait_for(lambda: col.delivered() == 9)
        assert col.data_since_restart() == p.read_bytes()
        assert col.follower.offset == 9
    finally:
        col.close()


def test_rotation_drains_old_file_then_follows_new(tmp_path: Path) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(b"before rotation\n")
    col = Collector(LocalFollower(p))
    try:
        assert col.wait_for(lambda: col.delivered() == 16)
        with open(p, "ab") as writer:  # a writer that keeps its descriptor across the rename
            os.rename(p, tmp_path / "server.log.1")
            writer.write(b"late line to old file\n")
            writer.flush()
            time.sleep(0.1)
            p.write_bytes(b"fresh\n")
        assert col.wait_for(lambda: "rotated" in col.kinds() and col.delivered() == 6)
        old = b"".join(
            it.data
            for _, it in col.items[: next(i for i, (_, it) in enumerate(col.items) if getattr(it, "kind", "") == "rotated")]
            if isinstance(it, Chunk)
        )
        assert old == (tmp_path / "server.log.1").read_bytes()
        assert col.data_since_restart() == b"fresh\n"
    finally:
        col.close()


def test_two_followers_on_one_file_and_a_busy_writer(tmp_path: Path) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(b"")
    cols = [Collector(LocalFollower(p, chunk_size=4096)), Collector(LocalFollower(p, chunk_size=1000))]
    try:
        rng = random.Random(7)
        deadline = time.monotonic() + 1.0
        with open(p, "ab") as fh:
            while time.monotonic() < deadline:
                fh.write(os.urandom(rng.randint(1, 20_000)))
                fh.flush()
                time.sleep(rng.random() * 0.002)
        expected = p.read_bytes()
        for col in cols:
            assert col.wait_for(lambda c=col: c.delivered() >= len(expected), timeout=5)
            assert col.data_since_restart() == expected
            assert col.kinds() == ["opened"]
    finally:
        for col in cols:
            col.close()


def test_stop_from_another_thread_ends_iteration_promptly(tmp_path: Path) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(b"x\n")
    col = Collector(LocalFollower(p))
    assert col.wait_for(lambda: col.delivered() == 2)
    t = time.monotonic()
    col.close()
    assert time.monotonic() - t < 1.0
    assert col.error is None
