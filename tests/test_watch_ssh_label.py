"""``watch --host H --path P`` names the file ``H:P`` wherever it names it (``--jsonl``
events, the evidence of the ``--report`` HTML, the ``--wait-timeout`` error), as
``--inventory`` does, and never shows the SSH connection's settings: the path of the
local private key must not reach a report meant to be shared."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CRASH = FIXTURES / "real" / "041-mi355x-tp8-hip-oom-during-model-init-transformers-fallback.log"
CLI = [sys.executable, "-m", "logforensics"]


def ssh_args(server) -> list[str]:
    return ["--host", server.host, "--port", str(server.port), "--user", server.user,
            "-i", str(server.client_key), "--known-hosts", str(server.known_hosts)]


def no_connection_settings(text: str, server) -> None:
    assert str(server.client_key) not in text and server.client_key.name not in text
    assert "_Target" not in text and "key_filenames" not in text


@pytest.mark.ssh
def test_jsonl_and_report_name_the_file_host_colon_path(tmp_path: Path, sshd_server) -> None:
    log = tmp_path / "server.log"
    shutil.copyfile(CRASH, log)
    report = tmp_path / "report.html"
    out = subprocess.run(CLI + ["watch", *ssh_args(sshd_server), "--path", str(log), "--jsonl",
                                "--report", str(report), "--grace", "0"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr[-3000:]
    label = f"{sshd_server.host}:{log}"
    events = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert events and {e["file"] for e in events} == {label}
    html = report.read_text()
    assert label in html
    no_connection_settings(out.stdout + out.stderr + html, sshd_server)


@pytest.mark.ssh
def test_wait_timeout_error_names_host_colon_path(tmp_path: Path, sshd_server) -> None:
    missing = tmp_path / "not-yet.log"
    out = subprocess.run(CLI + ["watch", *ssh_args(sshd_server), "--path", str(missing), "--wait-timeout", "1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-3000:]
    error = [x for x in out.stderr.splitlines() if x.startswith("logforensics: error:")]
    assert len(error) == 1 and f"{sshd_server.host}:{missing}: did not appear" in error[0], out.stderr
    no_connection_settings(out.stdout + out.stderr, sshd_server)
