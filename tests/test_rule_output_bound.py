"""A limit that protects the command from one rule is that rule's, not the command's: a
rule whose output is over its bound is cut with a marker that names its file, a rule that
crosses another limit on this data is left out with a warning finding that names it, and
the rest of the result is written with the exit status it has without the limit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
READY = FIXTURES / "real" / "052-l4x4-tp4-pcie-custom-allreduce-disabled-full-startup-to-ready.log"
CRASH = FIXTURES / "real" / "041-mi355x-tp8-hip-oom-during-model-init-transformers-fallback.log"
CLI = [sys.executable, "-m", "logforensics"]

#: A rule whose explanation grows with the data it is given: one line per run and index.
LONG = """id: US01
name: user.long
severity: warning
when: "true"
title: "a long list for {{ failing.file }}"
explanation: "{% for i in range(100) %}{% for j in range(200) %}{{ failing.file }} {{ i }}.{{ j }}\\n{% endfor %}{% endfor %}"
examples: {fail: {failing: x}, pass: {failing: y}}
"""
#: A rule whose title costs more time than a rule may take.
SLOW = """id: US02
name: user.slow
severity: error
when: "true"
title: "{% for a in range(10000) %}{% for b in range(10000) %}{% for c in range(10000) %}{% endfor %}{% endfor %}{% endfor %}"
explanation: e
examples: {fail: {failing: x}, pass: {failing: y}}
"""


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=300)


def diff_json(tmp_path: Path, name: str, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / f"{name}.json"
    res = run("diff", str(READY), str(CRASH), "--json", str(out), *extra)
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    return res, json.loads(out.read_text())


def test_a_rule_over_its_output_bound_is_cut_and_the_rest_is_written(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "US01_long.yml").write_text(LONG)
    plain, without = diff_json(tmp_path, "without")
    res, got = diff_json(tmp_path, "with", "--rules", str(rules))
    assert res.returncode == plain.returncode == 1, res.stderr[-2000:]
    long = [f for f in got["findings"] if f["rule"] == "US01"]
    assert len(long) == 1 and long[0]["severity"] == "warning"
    assert long[0]["explanation"].endswith("US01_long.yml wrote more than 262144 characters; the rest is left out]")
    assert len(long[0]["explanation"]) < 262144 + 500
    assert [f for f in got["findings"] if f["rule"] != "US01"] == without["findings"]
    assert got["verdict"] == without["verdict"]
    bundle = tmp_path / "bundle.md"
    res = run("bundle", str(CRASH), "--rules", str(rules), "-o", str(bundle))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "US01" in bundle.read_text()


def test_a_rule_over_its_time_bound_is_left_out_with_a_warning(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "US02_slow.yml").write_text(SLOW)
    plain, without = diff_json(tmp_path, "without")
    res, got = diff_json(tmp_path, "with", "--rules", str(rules))
    assert res.returncode == plain.returncode, res.stderr[-2000:]
    slow = [f for f in got["findings"] if f["rule"] == "US02"]
    assert len(slow) == 1 and slow[0]["severity"] == "warning"
    assert slow[0]["title"] == "rule US02 could not be evaluated"
    assert "US02_slow.yml" in slow[0]["explanation"] and "time limit" in slow[0]["explanation"]
    assert [f for f in got["findings"] if f["rule"] != "US02"] == without["findings"]


def test_a_built_in_rule_over_its_bound_on_a_run_of_many_nodes_keeps_the_bundle(tmp_path: Path) -> None:
    """ND02 lists every node behind the others: a run of thousands of small logs made it
    longer than its bound and ``bundle`` wrote nothing. The bound is lowered here so that
    forty nodes cross it (the same code path, in a second instead of minutes)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    begin = "[2025-06-01 10:00:00 TP{i}] Load weight begin. avail mem=78.50 GB\n"
    end = ("[2025-06-01 10:00:30 TP{i}] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
           "avail mem=62.10 GB, mem usage=16.40 GB.\n")
    for i in range(40):
        (run_dir / f"node{i}.log").write_text(begin.format(i=i) + (end.format(i=i) if i == 0 else ""))
    bundle, report = tmp_path / "bundle.md", tmp_path / "d.json"
    code = ("import sys; import logforensics.diagnose.bounds as b; b.MAX_OUTPUT_CHARS = 2000; "
            "from logforensics.cli import main; sys.argv[0] = 'logforensics'; main()")
    for args, out in ((["bundle", str(run_dir), "-o", str(bundle)], bundle),
                      (["diff", str(run_dir), str(run_dir), "--json", str(report), "--fail-on", "never"], report)):
        res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
        assert out.stat().st_size > 0
    assert "ND02" in bundle.read_text()
    nd02 = [f for f in json.loads(report.read_text())["findings"] if f["rule"] == "ND02"]
    assert len(nd02) == 1
    assert nd02[0]["explanation"].endswith("ND02_node_behind.yml wrote more than 2000 characters; the rest is left out]")
