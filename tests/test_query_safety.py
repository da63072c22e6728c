"""``query``, ``runs``, ``crashes`` over a real store (``scan`` of the fixture logs, real DuckDB).

A query reads the store's tables and nothing else: every statement that writes, attaches,
installs, loads, changes a setting, or reads a file outside the store is refused with one
line and exit status 2, and nothing is written anywhere. Results are written as they
come (a result larger than the memory the command takes), and ``runs`` keeps one line per
run in a 160-column terminal.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from peak import Measured

from logforensics.cli import main

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CLI = [sys.executable, "-m", "logforensics"]
SECRET = "s3cr3t-outside-the-store"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("query") / "store"
    out = subprocess.run(CLI + ["scan", str(FIXTURES), "--store", str(store), "--jobs", "2"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return store


@pytest.fixture()
def outside(tmp_path: Path) -> Path:
    """A folder beside the store with one file a query must not read."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text(SECRET + "\n")
    return d


def tree(path: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``path`` with its size and mtime: what a write would change."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(path.rglob("*")) if p.is_file()}


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "160"})


ATTACKS = {
    "read_text of a file outside": "SELECT content FROM read_text('{outside}/secret.txt')",
    "a path that climbs out of the store": "SELECT content FROM read_text('{store}/runs/../../outside/secret.txt')",
    "read_csv of a file outside": "SELECT * FROM read_csv('{outside}/secret.txt', header = false)",
    "glob outside": "SELECT * FROM glob('{outside}/*')",
    "COPY TO a file outside": "COPY (SELECT 'echo owned') TO '{outside}/q.sh' (HEADER false)",
    "COPY TO a part file inside the store": "COPY (SELECT * FROM runs LIMIT 1) TO "
                                            "'{store}/runs/scan_date=2000-01-01/part-planted.parquet'",
    "ATTACH": "ATTACH '{outside}/planted.db' AS planted",
    "EXPORT DATABASE": "EXPORT DATABASE '{outside}/dump'",
    "INSTALL": "INSTALL httpfs",
    "LOAD": "LOAD httpfs",
    "a remote file (would autoload httpfs)": "SELECT * FROM read_parquet('https://127.0.0.1:9/x.parquet')",
    "SET external access back on": "SET enable_external_access = true",
    "SET the memory limit": "SET memory_limit = '100GB'",
    "RESET": "RESET lock_configuration",
    "PRAGMA writing a profile": "PRAGMA profiling_output = '{outside}/profile.json'",
    "CALL": "CALL pragma_version()",
    "CREATE TABLE": "CREATE TABLE planted AS SELECT * FROM runs",
    "CREATE OR REPLACE VIEW over a table": "CREATE OR REPLACE VIEW runs AS SELECT 'fake' AS run_id",
    "INSERT into a table": "INSERT INTO runs (run_id) VALUES ('fake')",
    "WITH ... INSERT": "WITH x AS (SELECT 'fake' AS run_id) INSERT INTO runs (run_id) SELECT run_id FROM x",
    "EXPLAIN ANALYZE": "EXPLAIN ANALYZE SELECT 1",
    "two statements, the second a COPY": "SELECT 1; COPY (SELECT 1) TO '{outside}/q.sh'",
    "two SELECTs": "SELECT 1; SELECT 2",
    "no statement": " ; ",
}


@pytest.mark.parametrize("sql", ATTACKS.values(), ids=ATTACKS.keys())
def test_a_query_that_is_not_a_read_of_the_store_is_refused(store: Path, outside: Path, sql: str) -> None:
    before_store, before_outside = tree(store), tree(outside.parent)
    out = invoke("query", "--store", str(store), sql.format(store=store, outside=outside))
    assert out.exit_code == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("logforensics: error: query refused: "), out.stderr
    assert SECRET not in out.stdout + out.stderr
    assert tree(store) == before_store and tree(outside.parent) == before_outside  # nothing written
    again = invoke("query", "--store", str(store), "SELECT count(*) AS n FROM runs WHERE run_id = 'fake'",
                   "--format", "json")
    assert again.exit_code == 0 and json.loads(again.stdout) == [{"n": 0}]


def test_a_cross_join_over_the_memory_limit_is_one_line_and_reads_still_work(store: Path) -> None:
    out = subprocess.run(CLI + ["query", "--store", str(store), "--memory-limit", "64MB",
                                "SELECT a.text, b.text FROM events a, events b ORDER BY a.text || b.text DESC"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("logforensics: error: query ran out of memory (limit 64MB)"), \
        out.stderr
    bad = invoke("query", "--store", str(store), "--memory-limit", "plenty", "SELECT 1")
    assert bad.exit_code == 2 and bad.stderr.startswith("logforensics: error: memory limit 'plenty'"), bad.stderr
    # The limits keep the views working: the tables, and a part file named directly.
    part = sorted((store / "runs").rglob("*.parquet"))[0]
    out = invoke("query", "--store", str(store), "--memory-limit", "64MB",
                 f"SELECT count(*) AS n FROM read_parquet('{part}')", "--format", "json")
    assert out.exit_code == 0, out.stderr
    assert json.loads(out.stdout)[0]["n"] > 0
    out = invoke("query", "--store", str(store), "--memory-limit", "64MB",
                 "WITH c AS (SELECT outcome, count(*) AS n FROM runs GROUP BY 1) SELECT sum(n) AS runs FROM c",
                 "--format", "json")
    assert out.exit_code == 0, out.stderr
    runs = invoke("runs", "--store", str(store), "--format", "json")
    assert json.loads(out.stdout) == [{"runs": len(json.loads(runs.stdout))}]


def test_a_result_larger_than_the_memory_of_the_command_streams(store: Path) -> None:
    """200,000 rows of 2,000 characters (0.4 GB of text, more as Python objects) are written
    by a process that never holds them all."""
    n = 200_000
    run = Measured(CLI + ["query", "--store", str(store), "--format", "csv",
                          f"SELECT range AS n, repeat('x', 2000) AS pad FROM range({n})"],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert run.proc.stdout is not None and run.proc.stderr is not None
    lines = sum(1 for _ in run.proc.stdout)
    stderr = run.proc.stderr.read()
    code, peak_kib = run.wait()
    assert code == 0, stderr
    assert lines == n + 1
    assert peak_kib < 300 * 1024, f"peak {peak_kib // 1024} MiB"  # ru_maxrss is KiB on Linux
    # A table too is written chunk by chunk; a value wider than the first chunk's is still whole.
    table = invoke("query", "--store", str(store), "SELECT range AS n, 'x' AS pad FROM range(2500)").stdout.splitlines()
    numbers = [line.split("|")[0].strip() for line in table if line.endswith("| x   ")]
    assert numbers == [str(i) for i in range(2500)] and table[-1] == "2500 rows"


def test_runs_fits_a_160_column_terminal_one_line_per_run(store: Path) -> None:
    rows = json.loads(invoke("runs", "--store", str(store), "--format", "json").stdout)
    assert len(rows) >= 60  # enough runs that a table that wraps would show it
    out = invoke("runs", "--store", str(store))
    assert out.exit_code == 0, out.stderr
    lines = out.stdout.rstrip("\n").splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 160
    body = [line for line in lines if " | " in line][1:]  # the header is the first row with separators
    assert len(body) == len(rows)  # one line per run: nothing wrapped
    assert lines[-2] == f"{len(rows)} rows"
    assert any("\u2026" in line for line in body)  # long values cut with an ellipsis, not folded
    for line, row in zip(body, rows):
        shown = line.split(" | ")[0].strip()
        assert row["source"].endswith(shown.lstrip("\u2026")), (shown, row["source"])  # the path's end is kept
    assert "not shown" in lines[-1] and "run_id" in lines[-1]
    wide = invoke("runs", "--store", str(store), "--wide")
    wide_lines = wide.stdout.rstrip("\n").splitlines()
    header = next(line for line in wide_lines if " | " in line)
    assert [c.strip() for c in header.split(" | ")] == list(rows[0])  # every column
    assert sum(1 for line in wide_lines if " | " in line) == len(rows) + 1
    assert all(r["source"] in wide.stdout for r in rows)  # whole values
    assert "not shown" not in wide.stdout
    csv_out = invoke("runs", "--store", str(store), "--format", "csv").stdout.splitlines()
    assert len(csv_out) == len(rows) + 1 and csv_out[0].split(",") == list(rows[0])
