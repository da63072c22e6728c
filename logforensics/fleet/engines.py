"""Where the runs are parsed: here on ``jobs`` processes (``local``), or across a Ray cluster (``ray``).

Both call the same :func:`parse.parse_run` per run, so both write the same rows. The
results come back as they finish, for the progress bar.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from .discover import RunSource
from .parse import ParsedRun, parse_run


class EngineError(Exception):
    """The engine cannot run (Ray not installed, no cluster at the address)."""


def run_local(sources: Sequence[RunSource], staging: str | None, jobs: int) -> Iterator[ParsedRun]:
    """Each run in one of ``jobs`` worker processes (in this process when ``jobs`` is 1)."""
    if jobs <= 1 or len(sources) <= 1:
        for src in sources:
            yield parse_run(src, staging)
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(parse_run, src, staging) for src in sources]
        for fut in as_completed(futures):
            yield fut.result()


def _ray_task(row: dict[str, Any]) -> dict[str, Any]:
    src = RunSource(row["source"], tuple(row["files"]), tuple(row["nodes"]))
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
        items = [{"source": s.source, "files": list(s.files), "nodes": list(s.nodes), "staging": staging or ""}
                 for s in sources]
        ds = ray.data.from_items(items, override_num_blocks=len(items)).map(_ray_task)
        for row in ds.iter_rows():
            yield pickle.loads(row["result"])
    finally:
        if started:
            ray.shutdown()

