"""Rules are untrusted input: a hostile rule file costs bounded memory and time. A file
whose text crosses a limit (size, nesting) is refused in one line on stderr that names it
(exit status 2); a rule that crosses a limit while it is evaluated is that rule's failure,
not the command's: its output is cut with a marker, or it is left out with a warning finding,
both naming the file, and the diagnosis ends with the exit status it has without it."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
READY = FIXTURES / "real" / "052-l4x4-tp4-pcie-custom-allreduce-disabled-full-startup-to-ready.log"
CRASH = FIXTURES / "real" / "041-mi355x-tp8-hip-oom-during-model-init-transformers-fallback.log"
CLI = [sys.executable, "-m", "logforensics"]
#: The command runs under this address-space limit, so a rule that would grow without
#: bound fails the test (MemoryError) instead of taking the machine down.
MEMORY_LIMIT = 3 << 30
TIME_LIMIT = 60.0

EXAMPLES = """examples:
  fail: {failing: "[2025-06-01 10:00:00 TP0] Load weight begin. avail mem=78.50 GB\\n"}
  pass: {failing: "[2025-06-01 10:00:00 TP0] Load weight begin. avail mem=78.50 GB\\n"}
"""


def rule(title: str = "t", when: str = "true", explanation: str = "e") -> str:
    return (f"id: US01\nname: user.hostile\nseverity: error\nwhen: {when}\n"
            f"title: {title}\nexplanation: {explanation}\n" + EXAMPLES)


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_with(tmp_path: Path, text: str, command: str = "diff") -> tuple[subprocess.CompletedProcess, float]:
    rules = tmp_path / "rules"
    rules.mkdir(exist_ok=True)
    path = rules / "US01_hostile.yml"
    path.write_text(text)
    args = {"diff": ["diff", str(READY), str(CRASH), "--rules", str(rules)],
            "check": ["check", str(FIXTURES / "diff" / "custom_ar_pcie_oom"), "--rules", str(rules)]}[command]
    start = time.monotonic()
    try:
        out = subprocess.run(CLI + args, capture_output=True, text=True, timeout=TIME_LIMIT, preexec_fn=_limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a hostile rule ran longer than {TIME_LIMIT:.0f} s")
    return out, time.monotonic() - start


def assert_refused(out: subprocess.CompletedProcess, *needles: str) -> None:
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert lines[0].startswith("logforensics: error:") and "US01_hostile.yml" in lines[0], lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]


def assert_left_out(out: subprocess.CompletedProcess, *needles: str) -> None:
    """``diff`` of READY and CRASH exits 1 (the crash is an error finding) with the rule or without it."""
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "error:" not in out.stderr, out.stderr[-3000:]
    text = " ".join(out.stdout.split())
    said = [m for m in ("US01 could not be evaluated", "US01_hostile.yml wrote more than") if m in text]
    assert said and "US01_hostile.yml" in text, text[-3000:]
    for needle in needles:
        assert needle in text, text[-3000:]


@pytest.mark.parametrize("title", [
    "\"{{ 'x' * 2000000000 }}\"",
    "\"{{ 'x' * 1000 * 1000 * 1000 }}\"",
    "\"{{ ['x'] * 2000000000 }}\"",
    "\"{{ 'xy' ~ 'x' * 900000 ~ 'x' * 900000 }}\"",
    "\"{% for a in range(100000) %}{% for b in range(100000) %}xxxxxxxxxx{% endfor %}{% endfor %}\"",
    "\"{{ '%s' | format('x') * 300000000 }}\"",
])
def test_template_output_is_bounded(tmp_path: Path, title: str) -> None:
    out, _ = run_with(tmp_path, rule(title=title))
    assert_left_out(out)


@pytest.mark.parametrize("when", [
    "\"'x' * 2000000000\"",
    "\"['x'] * 100000 * 100000\"",
])
def test_condition_cost_is_bounded(tmp_path: Path, when: str) -> None:
    """Reported as a rule that could not be evaluated (a limit, or a type error on this data)."""
    out, _ = run_with(tmp_path, rule(when=when))
    assert_left_out(out, "US01 could not be evaluated")


def test_evaluation_time_is_bounded(tmp_path: Path) -> None:
    loops = ("\"{% for a in range(10000) %}{% for b in range(10000) %}{% for c in range(10000) %}"
             "{% endfor %}{% endfor %}{% endfor %}\"")
    out, took = run_with(tmp_path, rule(title=loops))
    assert_left_out(out, "US01 could not be evaluated", "(time limit)")
    assert took < 30


def test_deeply_nested_template_is_refused(tmp_path: Path) -> None:
    nested = "\"" + "{% if true %}" * 3000 + "x" + "{% endif %}" * 3000 + "\""
    out, _ = run_with(tmp_path, rule(title=nested))
    assert_refused(out, "nest")


def test_deeply_nested_expression_is_refused(tmp_path: Path) -> None:
    out, _ = run_with(tmp_path, rule(when="\"" + "(" * 3000 + "true" + ")" * 3000 + "\""))
    assert_refused(out, "nest")


def test_deeply_nested_yaml_is_refused(tmp_path: Path) -> None:
    out, _ = run_with(tmp_path, rule() + "groups: " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert_refused(out, "nest")


@pytest.mark.parametrize("command", ["diff", "check"])
def test_huge_rule_file_is_refused_quickly(tmp_path: Path, command: str) -> None:
    filler = "# " + "x" * 1000 + "\n"
    out, took = run_with(tmp_path, rule() + filler * 100_000, command)  # 100 MB
    assert_refused(out, "too large")
    assert took < 20
