"""A follower drained in a thread, for the byte-source tests (local and SSH)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from logforensics.sources import Chunk, Notice


class Collector:
    """Drain a follower in a thread; remember every item with its arrival time."""

    def __init__(self, follower: Iterable[Chunk | Notice]) -> None:
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

    def wait_for(self, pred: Callable[[], bool], timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0 or not self.thread.is_alive():
                    return pred()
                self._cond.wait(min(left, 0.05))
        return True

    def kinds(self) -> list[str]:
        with self._cond:
            return [it.kind for _, it in self.items if isinstance(it, Notice)]

    def data_since_restart(self) -> bytes:
        """Concatenated chunks since the last truncated/rotated notice, offsets checked."""
        out = bytearray()
        with self._cond:
            items = list(self.items)
        for _, it in items:
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
        if self.error is not None:
            raise self.error
