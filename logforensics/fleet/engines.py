"""Where the runs are parsed: here on ``jobs`` processes (``local``), or across a Ray cluster (``ray``).

Both call the same :func:`parse.parse_run` per run, so both write the same rows. The
results come back as they finish, for the progress bar, with a few runs in flight per
worker (not every run submitted at once: a finished run's rows are not held).

Local workers die with the scan: on Linux the kernel kills each one when its parent ends
(``PR_SET_PDEATHSIG``, however the parent ends, ``kill -9`` included), elsewhere a thread
of the worker watches its parent; a scan that stops (an error, SIGTERM, Ctrl-C) stops
them itself. They ignore Ctrl-C, which the scan handles for them.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from .discover import RunSource
from .parse import ParsedRun, parse_run


class EngineError(Exception):
    """The engine cannot run (Ray not installed, no cluster at the address)."""


#: Runs submitted ahead per worker.
IN_FLIGHT = 4
#: ``prctl`` option: the signal a process gets when its parent ends (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> bool:
    """Ask Linux to SIGKILL this process when its parent ends; False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int) -> None:
    """Elsewhere: end this process once its parent is gone (it is then re-parented)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _worker_start(scan_pid: int | None) -> None:
    """A worker's first act: die with the scan, leave Ctrl-C and SIGTERM's handling to it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the scan's handler, inherited by fork
    asked = _die_with_parent()
    parent = os.getppid()  # read after asking: a scan that ended before is seen here
    if scan_pid is not None and parent != scan_pid:
        os._exit(1)
    if not asked:
        _watch_parent(parent)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Stop the workers now (the scan is stopping): running runs are not waited for."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        if p.is_alive():
            p.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)


def run_local(sources: Sequence[RunSource], staging: str | None, jobs: int,
              check: Callable[[], None] | None = None) -> Iterator[ParsedRun]:
    """Each run in one of ``jobs`` worker processes (in this process when ``jobs`` is 1).

    ``check`` is called between runs and, while the workers run, every quarter second:
    what it raises stops the workers and ends the scan.
    """
    check = check or (lambda: None)
    if jobs <= 1 or len(sources) <= 1:
        for src in sources:
            check()
            yield parse_run(src, staging)
        return
    ctx = multiprocessing.get_context()
    scan_pid = os.getpid() if ctx.get_start_method() == "fork" else None
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_start, initargs=(scan_pid,))
    ended = False
    try:
        todo = iter(sources)
        running: set[Future[ParsedRun]] = set()
        while True:
            while len(running) < IN_FLIGHT * jobs:
                nxt = next(todo, None)
                if nxt is None:
                    break
                running.add(pool.submit(parse_run, nxt, staging))
            if not running:
                break
            done, running = wait(running, timeout=0.25, return_when=FIRST_COMPLETED)
            check()
            for fut in done:
                yield fut.result()
            del done
        ended = True
    finally:
        if ended:
            pool.shutdown(wait=True)
        else:
            _stop(pool)


def _ray_task(row: dict[str, Any]) -> dict[str, Any]:
    src = RunSource(row["source"], tuple(row["files"]), tuple(row["nodes"]), tuple(row["artefacts"]))
    return {"result": pickle.dumps(parse_run(src, row["staging"] or None))}


def run_ray(sources: Sequence[RunSource], staging: str | None, jobs: int, address: str | None,
            log: Callable[[str], None] | None = None) -> Iterator[ParsedRun]:
    """Each run in a Ray Data ``map`` task: on the cluster at ``address``, else a local one.

    The tasks read the runs' files and write their event files into the store's staging
    directory, so both must be reachable from every worker (one machine, or a shared
    filesystem); rows come back to this process, which commits the store.
    """
    if not sources:  # nothing to parse: no cluster to start or join
        return
    if address is None:  # a cluster of this one machine: keep Ray on the loopback address
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
        import ray.data
    except ImportError:
        raise EngineError("--engine ray needs Ray: pip install 'logforensics[ray]'") from None
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=address or "local", num_cpus=None if address else jobs, include_dashboard=False,
                     log_to_driver=False, logging_level=logging.ERROR, configure_logging=True)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise EngineError(f"cannot start or reach the Ray cluster{' at ' + address if address else ''}: "
                              f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    for name in ("ray", "ray.data"):  # the scan prints its own progress and closing line
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        items = [{"source": s.source, "files": list(s.files), "nodes": list(s.nodes), "artefacts": list(s.artefacts),
                  "staging": staging or ""}
                 for s in sources]
        ds = ray.data.from_items(items, override_num_blocks=len(items)).map(_ray_task)
        for row in ds.iter_rows():
            yield pickle.loads(row["result"])
    finally:
        if started:
            ray.shutdown()

