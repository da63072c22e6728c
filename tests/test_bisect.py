"""``logforensics bisect`` drives a real ``git bisect run``.

A small repository is made whose every commit holds a script that writes a server log: the
first commits write a log that reaches ready, one of them a log cut before readiness (cannot
tell), the later ones a log with the CUDA-graph capture OOM of the diff fixture. ``git bisect
run`` with ``logforensics bisect --finding CR01 --run ...`` must find the first bad commit
unattended, skipping the one it cannot judge.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "fixtures" / "diff" / "capture_oom_max_bs"
CLI = [sys.executable, "-m", "logforensics"]

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("log,finding,code", [
    ("failing.log", "CR01", 1), ("baseline.log", "CR01", 0), ("failing.log", "OM01:TP3", 1),
    ("failing.log", "OM01:TP7", 125),
])
def test_one_commit_s_answer(log: str, finding: str, code: int) -> None:
    r = subprocess.run(CLI + ["bisect", "--finding", finding, str(CASE / log)], capture_output=True, text=True)
    assert r.returncode == code, r.stdout + r.stderr
    assert len(r.stdout.splitlines()) == 1 and r.stdout.split(":")[0] in ("good", "bad", "cannot tell")


def test_git_bisect_run_finds_the_first_bad_commit(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    good, bad = (CASE / "baseline.log").read_text(), (CASE / "failing.log").read_text()
    cut = "".join(good.splitlines(keepends=True)[:20])
    commits = {}
    for n, text in enumerate([good, good, good, good, cut, good, bad, bad, bad], 1):
        (repo / "log.txt").write_text(text)
        (repo / "serve.sh").write_text("cp log.txt server.log\n")
        (repo / "version.txt").write_text(f"{n}\n")
        _git(repo, "add", "log.txt", "serve.sh", "version.txt")
        _git(repo, "commit", "-q", "-m", f"commit {n}")
        commits[n] = _git(repo, "rev-parse", "HEAD").strip()
    _git(repo, "bisect", "start", commits[9], commits[1])
    cmd = " ".join(CLI) + " bisect --finding CR01 --run 'sh serve.sh' server.log"
    out = _git(repo, "bisect", "run", "sh", "-c", cmd)
    assert f"{commits[7]} is the first bad commit" in out
    assert f"# skip: [{commits[5]}]" in _git(repo, "bisect", "log")  # the middle commit, judged 125
