"""``diff --store``: the baseline is the nearest earlier ready run of the same setup, whatever
settings the failing run changed (they are listed), and a run is named by its run_id too."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from logforensics.cli import main
from logforensics.fleet import baseline

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "fixtures" / "diff"
NAMES = sorted(p.name for p in CASES.iterdir() if (p / "failing.log").is_file())


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def runs(store: Path) -> list[dict]:
    rel = duckdb.sql(f"SELECT * FROM read_parquet('{store}/runs/*/*.parquet')")
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]


@pytest.fixture(scope="module")
def cases_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every bundled diff case, baseline and failing, in one store."""
    store = tmp_path_factory.mktemp("diffstore") / "store"
    out = invoke("scan", str(CASES), "--store", str(store), "--jobs", "2")
    assert out.exit_code == 0, out.stderr
    return store


@pytest.mark.parametrize("name", NAMES)
def test_each_bundled_case_finds_its_own_baseline(cases_store: Path, name: str, tmp_path: Path) -> None:
    case = CASES / name
    out = invoke("diff", "--store", str(cases_store), str(case / "failing.log"), "--fail-on", "never",
                 "--json", str(tmp_path / "store.json"))
    assert out.exit_code == 0, out.stderr
    first, second = out.stdout.splitlines()[:2]
    assert first.startswith(f"baseline: {case / 'baseline.log'} (run "), out.stdout
    assert second.startswith(("settings that differ (baseline -> this run): ", "settings: none")), out.stdout
    pair = invoke("diff", str(case / "baseline.log"), str(case / "failing.log"), "--fail-on", "never",
                  "--json", str(tmp_path / "pair.json"))
    assert pair.exit_code == 0, pair.stderr
    findings = [[f["rule"] for f in json.loads((tmp_path / n).read_text())["findings"]]
                for n in ("store.json", "pair.json")]
    assert findings[0] == findings[1]


def test_the_changed_setting_is_listed(cases_store: Path) -> None:
    out = invoke("diff", "--store", str(cases_store), str(CASES / "capture_oom_max_bs" / "failing.log"),
                 "--fail-on", "never")
    assert "settings that differ (baseline -> this run): cuda_graph_max_bs 160 -> 512\n" in out.stdout
    env = invoke("diff", "--store", str(cases_store), str(CASES / "custom_ar_pcie_oom" / "failing.log"),
                 "--fail-on", "never")
    assert "SGLANG_FORCE_CUSTOM_AR_PCIE not shown -> 1" in env.stdout  # an environment variable


def test_a_run_id_is_accepted_while_its_log_exists(cases_store: Path) -> None:
    failing = CASES / "rank_hang" / "failing.log"
    assert failing.is_file()
    rid = next(r["run_id"] for r in runs(cases_store) if r["source"] == str(failing))
    by_id = invoke("diff", "--store", str(cases_store), rid, "--fail-on", "never", "--json", "-")
    by_path = invoke("diff", "--store", str(cases_store), str(failing), "--fail-on", "never", "--json", "-")
    assert by_id.exit_code == 0, by_id.stderr
    assert json.loads(by_id.stdout)["findings"] == json.loads(by_path.stdout)["findings"]
    assert by_id.stderr.splitlines()[0] == by_path.stderr.splitlines()[0]  # the choice, on stderr with --json -
    assert by_id.stderr.startswith(f"baseline: {CASES / 'rank_hang' / 'baseline.log'} (run ")


def test_the_nearest_earlier_run_wins_over_an_older_identical_one(tmp_path: Path) -> None:
    case = CASES / "throughput_regression"
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(case / "baseline.log", logs / "a-baseline.log")  # 2026-04-06, CUDA graphs on
    shutil.copy(case / "failing.log", logs / "c-failing.log")  # 2026-04-07, --disable-cuda-graph
    older = (case / "failing.log").read_text().replace("2026-04-07", "2026-04-01").replace("04-07 ", "04-01 ")
    (logs / "b-older-same-settings.log").write_text(older)  # 2026-04-01, the failing run's settings
    store = tmp_path / "store"
    assert invoke("scan", str(logs), "--store", str(store)).exit_code == 0
    out = invoke("diff", "--store", str(store), str(logs / "c-failing.log"), "--fail-on", "never")
    assert out.exit_code == 0, out.stderr
    assert out.stdout.startswith(f"baseline: {logs / 'a-baseline.log'} (run "), out.stdout
    assert "settings that differ (baseline -> this run): disable_cuda_graph false -> true" in out.stdout
    found = duckdb.sql(f"SELECT DISTINCT r.source AS failing, f.baseline_source FROM "
                       f"read_parquet('{store}/findings/*/*.parquet') f JOIN read_parquet('{store}/runs/*/*.parquet') "
                       "r USING (run_id)").fetchall()
    assert (str(logs / "c-failing.log"), str(logs / "a-baseline.log")) in found  # the scan's findings agree


def _row(rid: str, day: int, outcome: str = "ready", **kw) -> dict:
    return {"run_id": rid, "source": f"/logs/{rid}.log", "outcome": outcome, "model": "/models/Qwen3-32B",
            "tp_size": 4, "dp_size": 1, "pp_size": 1, "ep_size": 1, "sglang_version": "0.5.3",
            "gpu_device": None, "gpu_total_gib": None, "settings": "{}",
            "start_time": datetime(2026, 4, day), "file_mtime": None, **kw}


def test_same_setup_is_model_sizes_gpu_and_version_where_both_logs_show_them() -> None:
    target = _row("t", 10, "crashed", model="Qwen/Qwen3-32B", gpu_device="CUDA", gpu_total_gib=79.19,
                  settings=json.dumps({"mem_fraction_static": 0.9}))
    others = [
        _row("other-tp", 9, tp_size=8),
        _row("other-version", 9, sglang_version="0.5.4"),
        _row("other-model", 9, model="/models/Qwen3-8B"),
        _row("crashed", 9, "crashed"),
        _row("no-version-shown", 7, sglang_version=None, settings=json.dumps({"mem_fraction_static": 0.8})),
        _row("same-but-older", 3, settings=json.dumps({"mem_fraction_static": 0.9})),
        _row("later", 12),
    ]
    chosen = baseline.choose(target, others)
    assert chosen is not None and chosen["run_id"] == "no-version-shown"
    assert baseline.differing_settings(chosen, target) == [("mem_fraction_static", 0.8, 0.9)]
    text = baseline.statement(target, chosen)
    assert "model /models/Qwen3-32B, TP4 DP1 PP1)" in text  # the version is not said to be the same
    assert text.endswith("settings that differ (baseline -> this run): mem_fraction_static 0.8 -> 0.9")
    only_later = baseline.choose(target, [others[-1]])
    assert only_later is not None and only_later["run_id"] == "later"  # a failed run: the nearest later one
    assert baseline.choose(dict(target, outcome="ready"), [others[-1]]) is None  # a ready run: earlier only
    assert baseline.choose(dict(target, model=None), others) is None
