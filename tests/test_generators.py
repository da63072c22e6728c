"""The generated fixtures are what their generators write, and the generators share one text.

Every ``*.log`` (and ``CASE.md``, README) under ``fixtures/diff``, ``fixtures/serving`` and
``fixtures/multinode`` is written by a seeded script; a copy of the tree regenerated here
must equal the committed files byte for byte, so a change to the shared templates
(``fixtures/diff/_sglang_text.py``) that is not regenerated fails. The benchmark's
generators print the same ``server_args=`` fields as the fixtures of their SGLang version.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GENERATORS = ("fixtures/diff/generate.py", "fixtures/serving/generate.py", "fixtures/serving/health.py",
              "fixtures/multinode/generate.py")


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def test_fixtures_are_their_generators_output(tmp_path: Path) -> None:
    copy = tmp_path / "fixtures"
    shutil.copytree(ROOT / "fixtures", copy, ignore=shutil.ignore_patterns("__pycache__"))
    for script in GENERATORS:
        done = subprocess.run([sys.executable, str(tmp_path / script)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (script, done.stderr[-2000:])
    want, got = _files(ROOT / "fixtures"), _files(copy)
    assert sorted(got) == sorted(want)
    changed = [name for name in want if got[name] != want[name]]
    assert not changed, f"regenerate with {GENERATORS}: {changed}"


def _server_args_fields(text: str) -> list[str]:
    line = next(line for line in text.splitlines() if "server_args=ServerArgs(" in line)
    return re.findall(r"(?:\(|, )(\w+)=", line.split("server_args=ServerArgs", 1)[1])


@pytest.mark.parametrize(("generator", "flags", "fixture", "fields"), [
    ("gen_serving_log.py", [], "capture_oom_max_bs", 300),  # v0.5.10
    ("gen_serving_log.py", ["--all-ranks"], "capture_oom_max_bs", 300),
    ("gen_sglang_log.py", ["--prefix-style", "dp-tp"], "rank_hang", 80),  # v0.4.3
])
def test_bench_logs_print_the_fixtures_server_args(tmp_path: Path, generator: str, flags: list[str],
                                                   fixture: str, fields: int) -> None:
    out = tmp_path / "bench.log"
    subprocess.run([sys.executable, str(ROOT / "bench" / generator), "--size", "64K", "-o", str(out), *flags],
                   check=True, timeout=120)
    want = _server_args_fields((ROOT / "fixtures" / "diff" / fixture / "baseline.log").read_text(encoding="utf-8"))
    assert _server_args_fields(out.read_text(encoding="utf-8")) == want
    assert len(want) > fields
