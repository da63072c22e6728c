"""Arguments a user can get wrong are refused with a clear line; odd places to watch work."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
READY = FIXTURES / "real" / "052-l4x4-tp4-pcie-custom-allreduce-disabled-full-startup-to-ready.log"
CRASH = FIXTURES / "real" / "041-mi355x-tp8-hip-oom-during-model-init-transformers-fallback.log"
CLI = [sys.executable, "-m", "logforensics"]


def run(*args: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=timeout, **kw)


def test_unknown_kind_is_refused_and_the_valid_ones_listed() -> None:
    out = run("parse", "--kind", "kv_cache_aloc", str(READY))
    assert out.returncode == 2
    assert "kv_cache_aloc" in out.stderr and "kv_cache_alloc" in out.stderr and "capture_end" in out.stderr
    assert "Traceback" not in out.stderr


def test_every_kind_a_log_yields_is_accepted() -> None:
    """The list of valid kinds comes from the grammar: every kind the fixtures produce is in it."""
    logs = sorted((FIXTURES / "real").glob("*.log"))[:40]
    out = run("parse", "--format", "jsonl", *map(str, logs))  # one process, file after file
    assert out.returncode == 0, out.stderr
    kinds = {json.loads(x)["kind"] for x in out.stdout.splitlines()}
    assert len(kinds) > 20
    out = run("parse", *[a for k in sorted(kinds) for a in ("--kind", k)], str(READY))
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("port", ["-5", "0", "70000", "ssh"])
def test_bad_port_is_refused(port: str) -> None:
    out = run("watch", "--host", "127.0.0.1", "--port", port, "--path", "/x")
    assert out.returncode == 2
    assert "--port" in out.stderr and "Servname" not in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("option", ["--grace", "--idle-exit", "--silent-after", "--wait-timeout"])
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "soon"])
def test_bad_seconds_are_refused(tmp_path: Path, option: str, value: str) -> None:
    out = run("watch", str(tmp_path / "x.log"), option, value, timeout=20)
    assert out.returncode == 2
    assert option in out.stderr and "Traceback" not in out.stderr


def test_watch_dash_reads_standard_input() -> None:
    out = run("watch", "-", "--jsonl", "--grace", "0", input=CRASH.read_text(), timeout=60)
    assert out.returncode == 1, out.stderr
    assert "crash diagnosed: torch.OutOfMemoryError on TP1" in out.stderr
    live = [json.loads(x) for x in out.stdout.splitlines()]
    parsed = [json.loads(x) for x in run("parse", "--format", "jsonl", "-", input=CRASH.read_text()).stdout.splitlines()]
    strip = lambda evs: [{k: v for k, v in e.items() if k != "file"} for e in evs]  # noqa: E731
    assert strip(live) == strip(parsed) and live


def test_watch_dash_of_a_run_that_ends_ready_exits_0() -> None:
    out = run("watch", "-", "--grace", "0", input=READY.read_text(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert "server ready" in out.stdout + out.stderr


def test_watch_says_it_waits_for_a_missing_directory_and_can_time_out(tmp_path: Path) -> None:
    target = tmp_path / "nodir" / "server.log"
    start = time.monotonic()
    out = run("watch", str(target), "--wait-timeout", "1", timeout=30)
    took = time.monotonic() - start
    assert out.returncode == 2
    assert "waiting for" in out.stderr and "does not exist" in out.stderr and "nodir" in out.stderr
    assert "did not appear within 1 s" in out.stderr
    assert took < 15


def test_wait_timeout_does_not_stop_a_log_that_appeared(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(CRASH.read_text())
    out = run("watch", str(log), "--wait-timeout", "5", "--grace", "0", timeout=30)
    assert out.returncode == 1, out.stderr


def test_help_lists_the_new_options() -> None:
    text = run("watch", "--help").stdout
    assert "--wait-timeout" in text and "standard input" in text
