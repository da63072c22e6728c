"""``parse --format parquet`` from C columns (``render/parquet.py``) reads back as the exact path's table.

The exact path is ``tables.write_parquet`` of every event (as with ``LOGFORENSICS_PURE=1``).
Both files are read back with ``pq.read_table`` and compared: the same columns in the same
order, the same types, the same values, on every fixture, on logs of both generators, on
damaged lines, with kinds chosen, on runs of several files, and across row groups. The
share of lines taken in C is checked too.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from test_fastpath import FIXTURES
from test_parse_jsonl import MORE, _mutate, generated  # noqa: F401  (generated: a fixture)

from logforensics.pipeline import iter_events
from logforensics.read import emit
from logforensics.render import parquet
from logforensics.render.tables import write_parquet

pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "logforensics"]
pytestmark = pytest.mark.skipif(emit._emit is None, reason="the C writer is not built here")


def _same(paths: list[tuple[Path, str | None]], tmp_path: Path, wanted: tuple[str, ...] = ()) -> list[object]:
    fast, exact = tmp_path / "fast.parquet", tmp_path / "exact.parquet"
    stats = parquet.write_run_parquet([(str(p), node) for p, node in paths], str(fast), wanted=wanted)
    events = (ev for p, node in paths for ev in iter_events(str(p), node=node) if not wanted or ev.kind in wanted)
    write_parquet(events, str(exact))
    a, b = pq.read_table(fast), pq.read_table(exact)
    assert a.schema == b.schema, (a.schema, b.schema)
    assert a.num_rows == b.num_rows
    for name in b.column_names:
        assert a[name].equals(b[name]), name
    return stats


@pytest.mark.parametrize("path", FIXTURES + MORE, ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_every_fixture_reads_back_the_same(path: Path, tmp_path: Path) -> None:
    _same([(path, None)], tmp_path)


def test_generated_logs_and_several_files(generated: list[Path], tmp_path: Path,  # noqa: F811
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    lines = taken = 0
    for path in generated:
        (stats,) = _same([(path, None)], tmp_path)
        assert stats.by_kind.get("decode_batch", 0) > 100, stats
        lines += stats.lines
        taken += stats.taken
    assert taken >= 0.9 * lines  # not a silent fallback to the exact path
    # one file of several runs, with nodes; small row groups, so that types meet across groups
    monkeypatch.setattr(parquet, "ROW_GROUP", 1000)
    import logforensics.render.tables as tables

    monkeypatch.setattr(tables, "ROW_GROUP", 700)
    _same([(generated[1], "node-a"), (generated[5], "node-b"), (FIXTURES[0], None)], tmp_path)
    _same([(generated[0], None), (generated[4], "n1")], tmp_path, wanted=("decode_batch", "exception", "other"))
    _same([(generated[4], None)], tmp_path, wanted=("nothing_has_this_kind",))


def test_damaged_lines_read_back_the_same(generated: list[Path], tmp_path: Path) -> None:  # noqa: F811
    rng = random.Random(3)
    lines = generated[1].read_text(encoding="utf-8").split("\n")[:5000]
    out = [(_mutate(line, rng) if rng.random() < 0.3 else line) for line in lines]
    path = tmp_path / "damaged.log"
    data = "\n".join(out).encode("utf-8", "surrogatepass")
    path.write_bytes(data[:20000] + bytes(rng.randrange(256) for _ in range(5000)) + b"\n" + data[20000:])
    _same([(path, None)], tmp_path)


def test_cli_uses_it_and_pure_gives_the_same(tmp_path: Path) -> None:
    run = ROOT / "fixtures" / "multinode" / "tp8_two_nodes" / "failing"
    out = {}
    for pure in ("0", "1"):
        target = tmp_path / f"{pure}.parquet"
        done = subprocess.run(CLI + ["parse", "--format", "parquet", "-o", str(target), str(run)],
                              capture_output=True, timeout=300, env={**os.environ, "LOGFORENSICS_PURE": pure})
        assert done.returncode == 0, done.stderr
        out[pure] = pq.read_table(target)
    assert out["0"].equals(out["1"]) and out["0"].num_rows > 0
    assert "node" in out["0"].column_names
