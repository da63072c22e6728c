"""Behaviour tests of LocalFollower against real files and real inotify.

Every wait is bounded; a consumer thread records (time, item) pairs so tests can
check both the exact bytes and how fast they arrived.
"""

from __future__ import annotations

import os
import random
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from logforensics.sources import Chunk, LocalFollower, Notice, SourceError


class Collector:
    """Drain a follower in a thread; remember every item with its arrival time."""

    def __init__(self, follower) -> None:
        self.follower = follower
        self.items: list[tuple[float, Chunk | Notice]] = []
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for item in self.follower:
                with self._cond:
                    self.items.append((time.perf_counter(), item))
                    self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            with self._cond:
                self._cond.notify_all()

    def wait_for(self, pred: Callable[[list], bool], timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not pred([it for _, it in self.items]):
                left = deadline - time.monotonic()
                if left <= 0 or not self.thread.is_alive():
                    return pred([it for _, it in self.items])
                self._cond.wait(min(left, 0.05))
        return True

    def kinds(self) -> list[str]:
        return [it.kind for _, it in self.items if isinstance(it, Notice)]

    def data_since_restart(self) -> bytes:
        """Concatenated chunks since the last truncated/rotated notice, offsets checked."""
        out = bytearray()
        for _, it in self.items:
            if isinstance(it, Notice) and it.kind in ("truncated", "rotated"):
                out.clear()
            elif isinstance(it, Chunk):
                assert it.offset == len(out), f"chunk offset {it.offset} != {len(out)} delivered"
                out += it.data
        return bytes(out)

    def delivered(self) -> int:
        return len(self.data_since_restart())

    def close(self) -> None:
        self.follower.stop()
        self.thread.join(5)
        assert not self.thread.is_alive(), "follower did not stop promptly"


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
        assert col.wait_for(lambda items: any(getattr(i, "kind", "") == "opened" for i in items))
        written: list[tuple[int, float]] = []
        size = 0
        for i in range(40):
            line = f"[2025-01-01 00:00:{i:02d}] Decode batch. #running-req: {i}\n".encode()
            t = time.perf_counter()
            append(p, line)
            size += len(line)
            written.append((size, t))
            assert col.wait_for(lambda items, s=size: col.delivered() >= s, timeout=2)
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
        assert col.wait_for(lambda items: [i.kind for i in items if isinstance(i, Notice)] == ["waiting"])
        time.sleep(0.2)
        p.write_bytes(b"server up\n")
        assert col.wait_for(lambda items: col.delivered() == 10)
        assert col.kinds() == ["waiting", "opened"]
        assert col.data_since_restart() == b"server up\n"
    finally:
        col.close()


def test_waits_for_parent_directory_too(tmp_path: Path) -> None:
    p = tmp_path / "run-1" / "server.log"
    col = Collector(LocalFollower(p))
    try:
        assert col.wait_for(lambda items: col.kinds() == ["waiting"])
        p.parent.mkdir()
        time.sleep(0.6)  # the poll timer notices the directory and starts watching it
        p.write_bytes(b"ok\n")
        assert col.wait_for(lambda items: col.delivered() == 3)
        append(p, b"and inotify works\n")
        assert col.wait_for(lambda items: col.delivered() == 21, timeout=0.4)
    finally:
        col.close()


def test_truncation_restarts_from_zero(tmp_path: Path) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(b"old line one\nold line two\n")
    col = Collector(LocalFollower(p))
    try:
        assert col.wait_for(lambda items: col.delivered() == 26)
        with open(p, "wb") as fh:  # what a restarted server with "> server.log" does
            fh.write(b"new\n")
        assert col.wait_for(lambda items: "truncated" in col.kinds() and col.delivered() == 4)
        append(p, b"more\n")
        assert col.wait_for(lambda items: col.delivered() == 9)
        assert col.data_since_restart() == p.read_bytes()
        assert col.follower.offset == 9
    finally:
        col.close()


def test_rotation_drains_old_file_then_follows_new(tmp_path: Path) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(b"before rotation\n")
    col = Collector(LocalFollower(p))
    try:
        assert col.wait_for(lambda items: col.delivered() == 16)
        with open(p, "ab") as writer:  # a writer that keeps its descriptor across the rename
            os.rename(p, tmp_path / "server.log.1")
            writer.write(b"late line to old file\n")
            writer.flush()
            time.sleep(0.1)
            p.write_bytes(b"fresh\n")
        assert col.wait_for(lambda items: "rotated" in col.kinds() and col.delivered() == 6)
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
            assert col.wait_for(lambda items, c=col: c.delivered() >= len(expected), timeout=5)
            assert col.data_since_restart() == expected
            assert col.kinds() == ["opened"]
    finally:
        for col in cols:
            col.close()


def test_stop_from_another_thread_ends_iteration_promptly(tmp_path: Path) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(b"x\n")
    col = Collector(LocalFollower(p))
    assert col.wait_for(lambda items: col.delivered() == 2)
    t = time.monotonic()
    col.close()
    assert time.monotonic() - t < 1.0
    assert col.error is None
