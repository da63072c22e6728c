"""The compiled bulk path gives exactly the run model of the event path.

``LiveRun.feed_bulk`` hands runs of serving records to the run model as columns
(``read/bulk.py``, ``model/columns.py``) and every other line to the event path. Here the
summaries of both paths are compared on every fixture, on the synthetic log of
``test_fastpath.py`` and on logs written by both generators in ``bench/``, fed in blocks
of several sizes and with both kinds of feeding mixed; and ``read_file`` with
``LOGFORENSICS_PURE=1`` (the pure-Python path) against the default.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_fastpath import FIXTURES, synthetic_log

from logforensics.ingest.batch import read_file
from logforensics.ingest.live import LiveRun
from logforensics.read import bulk

ROOT = Path(__file__).resolve().parent.parent
compiled = pytest.mark.skipif(bulk._scan is None, reason="the C scanner is not built here")


def test_the_scanner_is_built_where_a_compiler_is() -> None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the pure path is the only one")
    assert bulk._scan is not None, "pip builds logforensics.read._scan where a C compiler is available"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Small logs of both generators: crashes and restarts, torn lines, DP-attention ranks."""
    out = tmp_path_factory.mktemp("generated")
    runs = [
        ("gen_sglang_log.py", ["--size", "1M", "--seed", "7"]),
        ("gen_sglang_log.py", ["--size", "1M", "--seed", "3", "--prefix-style", "dp-tp", "--decode-ranks", "all",
                               "--torn-rate", "0.02", "--interleave-rate", "0.02", "--crash-rate", "0.2"]),
        ("gen_serving_log.py", ["--size", "1M"]),
        ("gen_serving_log.py", ["--size", "1M", "--all-ranks", "--seed", "11"]),
    ]
    paths = []
    for i, (script, args) in enumerate(runs):
        path = out / f"{i}-{script[:-3]}.log"
        subprocess.run([sys.executable, str(ROOT / "bench" / script), *args, "-o", str(path)], check=True,
                       timeout=120)
        paths.append(path)
    return paths


def _as_json(summary: Any, run: LiveRun | None = None) -> str:
    """The summary, and what else a run keeps from events (its PD role, nodes of ranks)."""
    out = summary.to_dict()
    if run is not None:
        out["_pd"] = vars(run.pd)
        out["_rank_nodes"] = run.rank_nodes
    return json.dumps(out, sort_keys=True, default=str)


def _events_path(data: bytes, name: str) -> str:
    run = LiveRun(name)
    for start in range(0, len(data), 32 << 10):
        run.feed(data[start:start + (32 << 10)])
    run.close()
    return _as_json(run.summary(), run)


def _bulk_path(data: bytes, name: str, size: int) -> tuple[str, int]:
    run = LiveRun(name)
    for start in range(0, len(data), size):
        run.feed_bulk(data[start:start + size])
    run.close()
    return _as_json(run.summary(), run), (run._scanner.taken if run._scanner else 0)


SOURCES = [pytest.param(p, id=p.name[:3] if p.parent.name == "real" else p.name) for p in FIXTURES]


@compiled
@pytest.mark.parametrize("path", SOURCES)
def test_bulk_equals_events_on_fixtures(path: Path) -> None:
    data = path.read_bytes()
    want = _events_path(data, str(path))
    for size in (1 << 20, 997):
        got, _ = _bulk_path(data, str(path), size)
        assert got == want, f"blocks of {size} bytes"


@compiled
def test_bulk_equals_events_on_the_synthetic_log() -> None:
    data = synthetic_log()
    want = _events_path(data, "synthetic.log")
    for size in (1 << 20, 4096, 7):
        assert _bulk_path(data, "synthetic.log", size)[0] == want, f"blocks of {size} bytes"


@compiled
def test_bulk_equals_events_on_generated_logs(generated: list[Path]) -> None:
    for path in generated:
        data = path.read_bytes()
        want = _events_path(data, path.name)
        kinds = json.loads(want)["coverage"]["kinds"]
        # decode and prefill batches take the exact path (the serving time series reads each
        # record's stamp, rank and line, which the scanner's columns do not carry)
        serving = sum(kinds.get(k, 0) for k in ("http_access",))
        for size in (1 << 20, 65536, 4093):
            got, taken = _bulk_path(data, path.name, size)
            assert got == want, f"{path.name}, blocks of {size} bytes"
            assert taken > serving * 0.8, f"{path.name}: only {taken} of {serving} serving records taken in bulk"


@compiled
def test_mixed_feeding_is_one_run(generated: list[Path]) -> None:
    """watch feeds events, a batch reader columns: one run model whichever filled it."""
    data = generated[1].read_bytes()
    want = _events_path(data, "mixed.log")
    run = LiveRun("mixed.log")
    size = 50_000
    for k, start in enumerate(range(0, len(data), size)):
        chunk = data[start:start + size]
        if k % 2:
            run.feed(chunk)
        else:
            run.feed_bulk(chunk)
    run.close()
    assert _as_json(run.summary(), run) == want


def test_pure_path_gives_the_same_summary(generated: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """LOGFORENSICS_PURE=1 forces the pure-Python path; both must give one summary."""
    for path in [*generated, FIXTURES[0]]:
        monkeypatch.delenv("LOGFORENSICS_PURE", raising=False)
        default = _as_json(read_file(path).summary())
        monkeypatch.setenv("LOGFORENSICS_PURE", "1")
        assert not bulk.available()
        pure = _as_json(read_file(path).summary())
        assert pure == default, path.name
