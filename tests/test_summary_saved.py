"""``summary`` of a summary saved by ``summary --json`` reads it back, as ``diff`` does,
instead of parsing its JSON as a log (which stated an outcome the run never had); a JSON
file that is no summary, or a saved summary among several files of a run, is one line and
exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CRASH = FIXTURES / "real" / "041-mi355x-tp8-hip-oom-during-model-init-transformers-fallback.log"
CLI = [sys.executable, "-m", "logforensics"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=120)


def one_line_error(out: subprocess.CompletedProcess, *needles: str) -> None:
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("logforensics: error:"), out.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("name", ["run.summary.json", "run-summary.txt"])
def test_a_saved_summary_is_read_back(tmp_path: Path, name: str) -> None:
    saved = run("summary", "--json", str(CRASH)).stdout
    path = tmp_path / name
    path.write_text(saved)
    again = run("summary", "--json", str(path))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == json.loads(saved)
    view, original = run("summary", str(path)), run("summary", str(CRASH))
    assert view.returncode == 0 and view.stdout == original.stdout


def test_a_json_file_that_is_no_summary_is_one_line(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"model": "m", "outcome": "ready"}\n')
    one_line_error(run("summary", str(other)), "other.json", "not a run summary")


def test_a_saved_summary_among_the_files_of_a_run_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(run("summary", "--json", str(CRASH)).stdout)
    one_line_error(run("summary", str(path), str(CRASH)), "s.json")
