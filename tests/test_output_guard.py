"""An output path that is one of a command's inputs is refused before anything is read or
written: the same file, a symlink to it, a hard link to it, or a file that a directory or a
glob input expands to. One line on stderr, exit status 2, the input's bytes unchanged."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
READY = FIXTURES / "real" / "052-l4x4-tp4-pcie-custom-allreduce-disabled-full-startup-to-ready.log"
CRASH = FIXTURES / "real" / "041-mi355x-tp8-hip-oom-during-model-init-transformers-fallback.log"
CLI = [sys.executable, "-m", "logforensics"]


def refused(out: subprocess.CompletedProcess) -> None:
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert lines[0].startswith("logforensics: error:") and "is an input" in lines[0], lines[0]


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + args, capture_output=True, text=True, timeout=120, cwd=cwd)


#: Each command that writes a file, given (failing log, baseline log, output path): the
#: output is one of the inputs. ``check`` reads its case's run.log (``failing``).
COMMANDS: dict[str, Callable[[str, str, str], list[str]]] = {
    "bundle -o": lambda f, b, o: ["bundle", f, "-o", o],
    "bundle --baseline -o": lambda f, b, o: ["bundle", f, "--baseline", b, "-o", o],
    "diff --json": lambda f, b, o: ["diff", b, f, "--json", o],
    "diff -o": lambda f, b, o: ["diff", b, f, "-o", o],
    "parse -o": lambda f, b, o: ["parse", f, "-o", o],
    "parse --format jsonl -o": lambda f, b, o: ["parse", "--format", "jsonl", f, "-o", o],
    "parse --format csv -o": lambda f, b, o: ["parse", "--format", "csv", f, "-o", o],
    "parse --format parquet -o": lambda f, b, o: ["parse", "--format", "parquet", f, "-o", o],
    "watch --report": lambda f, b, o: ["watch", f, "--report", o, "--grace", "0"],
    "watch --baseline --report": lambda f, b, o: ["watch", f, "--baseline", b, "--report", o, "--grace", "0"],
    "check --junit": lambda f, b, o: ["check", "cases", "--junit", o],
}
#: Which input each command's output names: the baseline where the command has one and
#: the output is checked against it, else the failing log.
ONTO_BASELINE = {"bundle --baseline -o", "diff --json", "watch --baseline --report"}


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    cases = tmp_path / "cases" / "oom"
    cases.mkdir(parents=True)
    failing = cases / "run.log"
    shutil.copyfile(CRASH, failing)
    baseline = tmp_path / "baseline.log"
    shutil.copyfile(READY, baseline)
    return failing, baseline


@pytest.mark.parametrize("how", ["same path", "symlink", "hard link"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_output_onto_an_input_is_refused(tmp_path: Path, command: str, how: str) -> None:
    failing, baseline = _setup(tmp_path)
    victim = baseline if command in ONTO_BASELINE else failing
    before = victim.read_bytes()
    out = victim
    if how == "symlink":
        out = tmp_path / "link.out"
        out.symlink_to(victim)
    elif how == "hard link":
        out = tmp_path / "hard.out"
        os.link(victim, out)
    res = run(COMMANDS[command](str(failing.relative_to(tmp_path)), str(baseline.relative_to(tmp_path)),
                                str(out.relative_to(tmp_path))), tmp_path)
    refused(res)
    assert victim.read_bytes() == before, "the input was overwritten"
    assert res.stdout == "", "nothing is read or written before the refusal"
    if how == "symlink":
        assert out.is_symlink()


@pytest.mark.parametrize("args", [
    lambda d: ["bundle", str(d), "-o", str(d / "node1.log")],
    lambda d: ["parse", "--format", "jsonl", str(d / "*.log"), "-o", str(d / "node1.log")],
    lambda d: ["diff", str(READY), str(d), "--json", str(d / "node0.log")],
])
def test_a_file_a_directory_or_glob_input_expands_to_is_refused(tmp_path: Path, args) -> None:
    """Only the run's files are protected: a report beside them in the run's directory,
    written twice, is no log file of the run and is written."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for i, src in enumerate((CRASH, READY)):
        shutil.copyfile(src, run_dir / f"node{i}.log")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    refused(run(args(run_dir), tmp_path))
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before
    for _ in range(2):
        res = run(["bundle", str(run_dir), "-o", str(run_dir / "bundle.md")], tmp_path)
        assert res.returncode == 0, res.stderr
    assert (run_dir / "bundle.md").read_text().strip()
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.name != "bundle.md"} == before


def test_a_rule_file_is_an_input(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    rule = rules / "US01_mine.yml"
    rule.write_text("id: US01\nname: user.mine\nseverity: info\nwhen: 'true'\ntitle: t\nexplanation: e\n"
                    "examples: {fail: {failing: x}, pass: {failing: y}}\n")
    before = rule.read_bytes()
    refused(run(["diff", str(READY), str(CRASH), "--rules", str(rules), "--json", str(rule)], tmp_path))
    assert rule.read_bytes() == before


def test_a_watched_log_that_does_not_exist_yet_is_an_input(tmp_path: Path) -> None:
    """Compared by its path: the report would replace the log once the server writes it."""
    refused(run(["watch", "server.log", "--report", "server.log", "--wait-timeout", "1"], tmp_path))
    assert not (tmp_path / "server.log").exists()
