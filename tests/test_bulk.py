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
from pathlib import Path
from typing import Any

import pytest
from accel import accelerated
from generated import write_logs
from test_fastpath import FIXTURES, synthetic_log

from logforensics import native
from logforensics.ingest.batch import read_file
from logforensics.ingest.live import LiveRun

ROOT = Path(__file__).resolve().parent.parent
compiled = accelerated


def test_the_accelerator_is_built_where_a_compiler_is() -> None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the pure path is the only one")
    from logforensics import native

    assert native.lib is not None, "pip builds logforensics.native._native where a C compiler is available"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Logs of both generators, a few MB each: crashes and restarts, torn and interleaved
    lines, every rank-prefix style, DP-attention ranks, several seeds and start times."""
    out = tmp_path_factory.mktemp("generated")
    runs = [
        ("gen_sglang_log.py", ["--size", "3M", "--seed", "7"]),
        ("gen_sglang_log.py", ["--size", "2M", "--seed", "3", "--prefix-style", "dp-tp", "--decode-ranks", "all",
                               "--torn-rate", "0.02", "--interleave-rate", "0.02", "--crash-rate", "0.2"]),
        ("gen_sglang_log.py", ["--size", "2M", "--seed", "5", "--prefix-style", "tp-ep", "--decode-ranks", "0"]),
        ("gen_sglang_log.py", ["--size", "2M", "--seed", "9", "--prefix-style", "pp-tp", "--ranks", "4",
                               "--start", "2025-12-31 23:58:00"]),
        ("gen_serving_log.py", ["--size", "3M"]),
        ("gen_serving_log.py", ["--size", "3M", "--all-ranks", "--seed", "11"]),
        ("gen_serving_log.py", ["--size", "2M", "--seed", "4", "--tp", "4", "--start", "2026-03-29 00:30:00"]),
    ]
    return write_logs(out, runs)


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
        serving = sum(kinds.get(k, 0) for k in ("decode_batch", "prefill_batch", "http_access"))
        for size in (1 << 20, 65536, 4093):
            got, taken = _bulk_path(data, path.name, size)
            assert got == want, f"{path.name}, blocks of {size} bytes"
            assert taken > serving * 0.8, f"{path.name}: only {taken} of {serving} serving records taken in bulk"


@compiled
@pytest.mark.parametrize("prefix", [b"sglang-1  | ", b"2026-03-02T08:41:17.1234567Z ",
                                    b"\x1b[36msglang-1  |\x1b[0m ", b"Mar  2 08:41:17 gpu-node-3 python3[8052]: ",
                                    b" 3: ", b"xinference-server  | "],
                         ids=["docker-compose", "ci-stamp", "docker-compose-in-colour", "journald", "slurm-label",
                              "docker-compose-container-name"])
def test_lines_after_a_wrapper_are_taken_in_bulk(generated: list[Path], prefix: bytes) -> None:
    """Lines behind a wrapper that names no node (``docker compose``'s service, in colour or
    not, a CI runner's stamp) are taken in bulk, each record read from where it begins in its
    line: the same summary as the events' path, texts included, and most serving records taken."""
    for path in (generated[0], generated[5]):
        data = b"".join(prefix + line for line in path.read_bytes().splitlines(keepends=True))
        want = _events_path(data, path.name)
        kinds = json.loads(want)["coverage"]["kinds"]
        serving = sum(kinds.get(k, 0) for k in ("decode_batch", "prefill_batch", "http_access"))
        for size in (1 << 20, 4093):
            got, taken = _bulk_path(data, path.name, size)
            assert got == want, f"{path.name}, blocks of {size} bytes"
            assert taken > serving * 0.8, f"{path.name}: only {taken} of {serving} serving records taken in bulk"


@compiled
def test_the_scanner_masks_digits_as_the_classifier_does() -> None:
    """A line is taken under a shape exactly when its digit-masked bytes are the shape's key
    (compared sixteen bytes at a time where the CPU can), whatever its length and bytes; and
    of several shapes of one length, each is found again after the others."""
    import random

    from logforensics.read.fastpath import _MASK

    assert native.lib is not None
    rng = random.Random(5)
    alphabet = b"0123456789:/ .aZ/\x2f\x3a\x7f\x80\xb0\xb9\xff"
    ready = bytes([0] * 256 + [1] + [0] * 255)  # class 1, no rank
    for _ in range(400):
        n = rng.randrange(1, 90)
        base = bytes(rng.choice(alphabet) for _ in range(n))
        sc = native.lib.Scanner(1, (), (), ())
        assert sc.add(base.translate(_MASK), 0, 1, 0, None, None, False, ())
        sc.set_ready(ready)
        for _ in range(8):
            line = bytearray(base)
            line[rng.randrange(n)] = rng.choice(alphabet)
            taken = sc.scan(bytes(line) + b"\n", 0)[1]
            assert taken == (bytes(line).translate(_MASK) == base.translate(_MASK)), bytes(line)
    sc = native.lib.Scanner(1, (), (), ())
    keys = [bytes([65 + k]) * 40 for k in range(6)]  # more shapes of one length than are kept first
    for k, key in enumerate(keys):
        assert sc.add(key, k, 1, 0, None, None, False, ())
    sc.set_ready(ready)
    lines = [rng.choice(keys) for _ in range(300)]
    assert sc.scan(b"\n".join(lines) + b"\n", 0)[1] == 300


@compiled
def test_lines_without_stamp_or_rank_are_taken() -> None:
    """A Python warning carries no stamp and names no rank: the scanner takes it (the run model
    only counts it), with the event path's summary. The source line under it is read on the
    exact path, as the line after it: an indented line is held until the next line says whether
    it is a frame's code (``read.assemble``)."""
    lines = []
    for i in range(50):
        lines.append(b"[2026-02-27 12:08:%02d] INFO:     127.0.0.1:43595 - \"POST /generate HTTP/1.1\" 200 OK\n" % i)
        lines.append(b"/usr/lib/python3.12/site-packages/torch/cuda/__init__.py:%d: FutureWarning: old api\n"
                     % (10 + i))
        lines.append(b"  import pynvml  # type: ignore[import]\n")
    data = b"".join(lines)
    want = _events_path(data, "warnings.log")
    for size in (1 << 20, 4096):
        got, taken = _bulk_path(data, "warnings.log", size)
        assert got == want, f"blocks of {size} bytes"
        assert taken >= 49, f"only {taken} of the 50 warnings taken in bulk"


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


@compiled
def test_bulk_path_feeds_the_serving_time_series(generated: list[Path]) -> None:
    """The batch records reach the serving windows as rows: the series is there, and equal."""
    for path in generated:
        data = path.read_bytes()
        got = json.loads(_bulk_path(data, path.name, 1 << 20)[0])
        assert got["serving"]["series"]["gen_tok_s"], path.name
        assert got["serving"] == json.loads(_events_path(data, path.name))["serving"], path.name


@compiled
def test_bulk_equals_the_parallel_reader(generated: list[Path]) -> None:
    """The pure reader's byte ranges, merged, give the bulk path's summary (but for the
    decode series, whose downsampling the merge approximates: ``test_parallel.py``)."""
    from logforensics.ingest import parallel
    for path in generated:
        want = json.loads(_bulk_path(path.read_bytes(), str(path), 1 << 20)[0])
        ranges = parallel.choose_ranges(str(path), path.stat().st_size, 256 << 10)
        got = json.loads(_as_json(parallel.read_ranges(str(path), str(path), ranges).summary()))
        want.pop("_pd"), want.pop("_rank_nodes")
        assert len(ranges) > 3
        assert got["throughput"].pop("decode_series")[0] == want["throughput"].pop("decode_series")[0]
        assert got == want, path.name


def test_pure_path_gives_the_same_summary(generated: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """LOGFORENSICS_PURE=1 forces the pure-Python path; both must give one summary."""
    for path in [*generated, *FIXTURES]:
        monkeypatch.delenv("LOGFORENSICS_PURE", raising=False)
        default = _as_json(read_file(path).summary())
        monkeypatch.setenv("LOGFORENSICS_PURE", "1")
        assert not native.available()
        pure = _as_json(read_file(path).summary())
        assert pure == default, path.name


@compiled
def test_probe_answers_are_counted_by_path_in_bulk() -> None:
    """uvicorn's probe lines are taken in bulk (no event each) and counted by path and status;
    an answer other than 200 is read on the exact path, so the first of each status is a line
    of the log, as on the event path."""
    out = []
    for i in range(600):
        stamp = f"[2026-01-01 10:{i // 60 % 60:02d}:{i % 60:02d}]"
        path, status = [("/health", "200 OK"), ("/metrics", "200 OK"),
                        ("/health_generate", "503 Service Unavailable" if 200 <= i < 400 else "200 OK")][i % 3]
        out.append(f'{stamp} INFO:     127.0.0.1:{41000 + i} - "GET {path} HTTP/1.1" {status}\n')
    data = "".join(out).encode()
    want = _events_path(data, "probes.log")
    for size in (1 << 20, 4093):
        got, taken = _bulk_path(data, "probes.log", size)
        assert got == want, f"blocks of {size} bytes"
        assert taken > 500
    probes = json.loads(want)["coverage"]["probes"]
    assert {p: v["answers"] for p, v in probes.items()} == {
        "/health": {"200": 200}, "/metrics": {"200": 200}, "/health_generate": {"200": 133, "503": 67}}
    assert probes["/health_generate"]["first"]["503"]["line"] == 201
