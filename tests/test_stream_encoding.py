"""A standard output that is not UTF-8 gets escapes, never a UnicodeEncodeError traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

LINE = "[2026-01-01 00:00:00 TP0] café, an unknown record ✓\n"


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "u.log"
    path.write_text(LINE * 3, encoding="utf-8")
    return path


def _run(args, encoding):
    env = dict(os.environ, PYTHONIOENCODING=encoding)
    return subprocess.run([sys.executable, "-m", "logforensics", *args], capture_output=True, env=env, timeout=120)


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_json_outputs_stay_json(log, encoding):
    rows = _run(["parse", "--format", "jsonl", str(log)], encoding)
    assert rows.returncode == 0, rows.stderr
    assert [json.loads(r)["text"] for r in rows.stdout.decode(encoding).splitlines()] == [LINE.strip()] * 3
    summary = _run(["summary", "--json", str(log)], encoding)
    assert summary.returncode == 0, summary.stderr
    assert json.loads(summary.stdout.decode(encoding))["coverage"]["top_unrecognised"][0]["example"] == LINE.strip()


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_text_outputs_escape(log, encoding):
    for args in (["parse", str(log)], ["summary", str(log)]):
        done = _run(args, encoding)
        assert done.returncode == 0, done.stderr
        assert b"Traceback" not in done.stderr
        assert "\\u2713" in done.stdout.decode(encoding) or "\\xe9" in done.stdout.decode(encoding)
