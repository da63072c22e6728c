"""``scan`` / ``query`` / ``runs`` / ``crashes`` / ``diff --store``: the store agrees with ``summary``.

The store is read back with plain DuckDB (``read_parquet`` over the partitions), not
through the tool, and every scanned run is compared with ``summary --json`` of its source.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from logforensics.cli import main

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CLI = [sys.executable, "-m", "logforensics"]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def table(store: Path, name: str, where: str = "") -> list[dict]:
    con = duckdb.connect()
    rel = con.sql(f"SELECT * FROM read_parquet('{store}/{name}/*/*.parquet', hive_partitioning = true) {where}")
    return [dict(zip(rel.columns, row)) for row in rel.fetchall()]


def summary_json(source: str) -> dict:
    out = CliRunner().invoke(main, ["summary", "--json", source])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


@pytest.fixture(scope="module")
def fixture_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("fleet") / "store"
    out = cli("scan", str(FIXTURES), "--store", str(store), "--jobs", "2")
    assert out.returncode == 0, out.stderr
    return store


def test_every_stored_run_equals_its_summary(fixture_store: Path) -> None:
    logs = sorted(str(p) for p in FIXTURES.rglob("*.log"))
    runs = table(fixture_store, "runs")
    assert sorted(f for r in runs for f in r["files"]) == logs  # every log in exactly one run
    assert all(r["source"] == (r["files"][0] if len(r["files"]) == 1 else os.path.dirname(r["files"][0]))
               for r in runs)
    assert any(len(r["files"]) > 1 for r in runs)  # the per-node fixtures
    for r in runs:
        s = summary_json(r["source"])
        crash = s["crash"] or {}
        assert (r["outcome"], r["first_rank"], r["fingerprint"]) == \
            (s["outcome"], crash.get("first_rank"), (crash.get("fingerprint") or {}).get("id")), r["source"]
        assert r["lines"] == s["coverage"]["lines_read"]
    ranks = table(fixture_store, "ranks")
    for r in runs:
        assert sorted(x["rank"] for x in ranks if x["run_id"] == r["run_id"]) == \
            sorted(summary_json(r["source"])["ranks"])


def test_events_table_holds_every_event(fixture_store: Path) -> None:
    runs = {r["source"]: r for r in table(fixture_store, "runs")}
    src = str(FIXTURES / "diff" / "throughput_regression" / "failing.log")
    events = table(fixture_store, "events", f"WHERE run_id = '{runs[src]['run_id']}' ORDER BY line")
    parsed = [json.loads(line) for line in cli("parse", "--format", "jsonl", src).stdout.splitlines()]
    assert [(e["kind"], e["line"], e["rank"]) for e in events] == [(p["kind"], p["line"], p["rank"]) for p in parsed]
    decode = next(e for e in events if e["kind"] == "decode_batch")
    assert decode["gen_throughput_tok_s"] == json.loads(decode["fields"])["gen_throughput_tok_s"]


def test_rescan_skips_unchanged_files_and_reads_a_touched_one(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    shutil.copytree(FIXTURES / "real", logs)
    n = len(list(logs.glob("*.log")))
    store = tmp_path / "store"
    first = cli("scan", str(logs), "--store", str(store))
    assert first.returncode == 0 and f"parsed {n}," in first.stdout, first.stdout + first.stderr
    again = cli("scan", str(logs), "--store", str(store))
    assert f"parsed 0, skipped {n} unchanged ({n} files)" in again.stdout, again.stdout
    touched = sorted(logs.glob("*.log"))[3]
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
    third = cli("scan", str(logs), "--store", str(store))
    assert f"parsed 1, skipped {n - 1} unchanged" in third.stdout, third.stdout
    runs = table(store, "runs")
    assert len(runs) == n and sum(r["source"] == str(touched) for r in runs) == 1
    assert len({(e["run_id"], e["line"], e["kind"]) for e in table(store, "events")}) == \
        len(table(store, "events"))  # the rescanned run's old events were replaced, not doubled


def test_per_node_files_of_one_directory_are_one_run(tmp_path: Path) -> None:
    job = tmp_path / "job-17"
    job.mkdir()
    shutil.copy(FIXTURES / "diff" / "rank_hang" / "baseline.log", job / "job_17_node0.out")
    shutil.copy(FIXTURES / "diff" / "capture_oom_max_bs" / "failing.log", job / "job_17_node1.out")
    store = tmp_path / "store"
    assert cli("scan", str(tmp_path), "--store", str(store)).returncode == 0
    (run,) = table(store, "runs")
    assert run["source"] == str(job) and list(run["nodes"]) == ["node0", "node1"]
    whole = summary_json(str(job))
    assert (run["outcome"], run["crash_node"], run["first_rank"], run["fingerprint"]) == \
        (whole["outcome"], whole["crash"]["node"], whole["crash"]["first_rank"], whole["crash"]["fingerprint"]["id"])
    assert run["crash_node"] == "node1" and run["outcome"] == "crashed"
    assert {e["node"] for e in table(store, "events")} == {"node0", "node1"}
    by_dir = tmp_path / "store-dir"
    assert cli("scan", str(tmp_path), "--store", str(by_dir), "--group-by", "dir").returncode == 0
    assert [r["source"] for r in table(by_dir, "runs")] == [str(job)]


def test_query_runs_and_crashes(fixture_store: Path) -> None:
    out = cli("query", "--store", str(fixture_store), "SELECT outcome, count(*) AS n FROM runs GROUP BY 1",
              "--format", "json")
    assert out.returncode == 0, out.stderr
    direct = dict(duckdb.sql(f"SELECT outcome, count(*) FROM read_parquet('{fixture_store}/runs/*/*.parquet') "
                             "GROUP BY 1").fetchall())
    assert {r["outcome"]: r["n"] for r in json.loads(out.stdout)} == direct
    crashed = json.loads(cli("runs", "--store", str(fixture_store), "--outcome", "crashed", "--format", "json").stdout)
    assert crashed and all(r["outcome"] == "crashed" for r in crashed)
    groups = json.loads(cli("crashes", "--store", str(fixture_store), "--format", "json").stdout)
    with_fp = [r for r in table(fixture_store, "runs") if r["fingerprint"]]
    assert sum(g["runs"] for g in groups) == len(with_fp)
    for g in groups:
        assert g["runs"] == sum(r["fingerprint"] == g["fingerprint"] for r in with_fp)
    csv_out = cli("runs", "--store", str(fixture_store), "--format", "csv").stdout.splitlines()
    assert csv_out[0].startswith("run_id,source,outcome") and len(csv_out) == len(table(fixture_store, "runs")) + 1


def test_fingerprint_masks_numbers_paths_and_addresses(tmp_path: Path) -> None:
    src = FIXTURES / "real" / "049-docker-compose-prefix-kv-pool-create-buffers-oom-24gb.log"
    text = src.read_text()
    moved = tmp_path / "moved.log"
    moved.write_text(text.replace("/sgl-workspace/sglang/python/sglang", "/opt/conda/lib/python3.12/site-packages/sglang")
                     .replace("line 1", "line 7").replace("Tried to allocate 2", "Tried to allocate 5"))
    assert moved.read_text() != text
    a, b = summary_json(str(src))["crash"]["fingerprint"], summary_json(str(moved))["crash"]["fingerprint"]
    assert a == b and a["function"] and a["phase"] == "kv_cache_alloc"
    other = tmp_path / "other.log"
    other.write_text(text.replace("OutOfMemoryError", "RuntimeError"))
    assert summary_json(str(other))["crash"]["fingerprint"]["id"] != a["id"]


def test_diff_with_store_states_the_baseline_and_diagnoses_like_diff(tmp_path: Path) -> None:
    case = FIXTURES / "diff" / "unbalanced_memory"
    store = tmp_path / "store"
    assert cli("scan", str(case), "--store", str(store)).returncode == 0
    failing, base = str(case / "failing.log"), str(case / "baseline.log")
    out = cli("diff", "--store", str(store), failing, "--json", str(tmp_path / "d.json"), "--fail-on", "never")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith(f"baseline: {base} (run ")
    assert cli("diff", base, failing, "--json", str(tmp_path / "p.json"), "--fail-on", "never").returncode == 0
    rules = [[f["rule"] for f in json.loads((tmp_path / n).read_text())["findings"]] for n in ("d.json", "p.json")]
    assert rules[0] == rules[1] and rules[0]
    stored = [f["rule"] for f in table(store, "findings") if f["baseline_source"] == base]
    assert sorted(stored) == sorted(rules[1])
    lonely = tmp_path / "lonely"
    assert cli("scan", failing, "--store", str(lonely)).returncode == 0
    none = cli("diff", "--store", str(lonely), failing, "--fail-on", "never")
    assert none.returncode == 0 and none.stdout.startswith("no baseline in the store"), none.stdout


def test_bad_input_gives_one_line_errors(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(FIXTURES / "real" / "044-a800-tp1-uvicorn-to-fired-up-ready.log", logs / "ok.log")
    (logs / "gone.log").symlink_to(tmp_path / "nowhere.log")
    store = tmp_path / "store"
    out = cli("scan", str(logs), str(tmp_path / "missing-dir"), "--store", str(store))
    assert out.returncode == 0 and "parsed 1," in out.stdout, out.stdout + out.stderr
    assert "gone.log" in out.stderr and "missing-dir" in out.stderr and "Traceback" not in out.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for args in (["scan", str(logs), "--store", str(blocker / "store")],
                 ["query", "--store", str(store), "SELEC nonsense FROM runs"],
                 ["query", "--store", str(tmp_path / "no-store"), "SELECT 1"],
                 ["runs", "--store", str(tmp_path / "no-store")],
                 ["diff", "--store", str(store), str(tmp_path / "nothing.log")]):
        bad = cli(*args)
        assert bad.returncode == 2, (args, bad.stdout, bad.stderr)
        lines = bad.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("logforensics: error: "), (args, bad.stderr)


@pytest.fixture()
def ray_cluster():
    """A real one-machine Ray cluster (``ray start --head``) on 127.0.0.1: 2 CPUs, a small object store."""
    import secrets
    import signal
    import socket
    import tempfile
    import time

    ray_bin = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    if ray_bin is None:
        pytest.skip("ray is not installed (pip install 'logforensics[ray]')")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="lf-ray-")  # short: Ray's socket paths must stay under 108 bytes
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_USAGE_STATS_ENABLED": "0",
           # no 30 s wait for a drain on SIGTERM (there is nothing to drain once the test is done)
           "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    head = subprocess.Popen([ray_bin, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                             "--node-ip-address=127.0.0.1", "--include-dashboard=false", "--disable-usage-stats",
                             "--object-store-memory=100000000", f"--temp-dir={temp}"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert head.poll() is None and time.monotonic() < deadline, "ray start --head did not come up"
            time.sleep(0.5)
        yield f"127.0.0.1:{port}", env
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):  # ray start --block stops the cluster on SIGTERM
            try:
                os.killpg(head.pid, sig)
                head.wait(timeout=60)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.ray
def test_ray_engine_writes_the_same_runs_table(fixture_store: Path, tmp_path: Path, ray_cluster) -> None:
    address, env = ray_cluster
    store = tmp_path / "ray-store"
    out = cli("scan", str(FIXTURES), "--store", str(store), "--engine", "ray", "--ray-address", address, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    def rows(s: Path) -> list[tuple]:
        return duckdb.sql(f"SELECT * EXCLUDE (scan_date) FROM read_parquet('{s}/runs/*/*.parquet', "
                          "hive_partitioning = true) ORDER BY run_id").fetchall()
    assert rows(store) == rows(fixture_store) and len(rows(store)) > 50
    assert "Traceback" not in out.stderr


_CUT_TRACEBACK = """[2025-03-29 18:18:34 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1999, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 249, in __init__
    self.tp_worker = TpWorkerClass(
  File "/sgl-workspace/sglang/python/sglang/srt/{module}.py", line 74, in __init__
    self.model_runner = ModelRunner(
"""


def test_fingerprint_names_the_module_of_a_bare_function_and_a_cut_exception(tmp_path: Path) -> None:
    """Two tracebacks cut before their exception line, ending in ``__init__`` of different modules,
    are two crashes; each says that the exception is not in the log rather than naming a class."""
    prints = []
    for module in ("managers/tp_worker", "model_executor/model_runner"):
        log = tmp_path / f"{module.replace('/', '_')}.log"
        log.write_text(_CUT_TRACEBACK.format(module=module))
        prints.append(summary_json(str(log))["crash"]["fingerprint"])
    assert [p["function"] for p in prints] == ["tp_worker.__init__", "model_runner.__init__"]
    assert {p["exception"] for p in prints} == {"exception not in log"}
    assert prints[0]["id"] != prints[1]["id"]
