"""Text from logs and file names is data: nothing from a log reaches rich as markup.

rich reads ``[b]``, ``[/b]`` and ``[rank2]``-like brackets in plain strings as style tags:
a closing tag without an opening one raises ``MarkupError``, and a tag rich knows is
silently eaten (042's evidence printed ``:[F1019...]`` without its ``[rank2]``). The file
and the log below carry such text everywhere a renderer shows log data.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
READY = FIXTURES / "real" / "052-l4x4-tp4-pcie-custom-allreduce-disabled-full-startup-to-ready.log"
CRASH = FIXTURES / "real" / "041-mi355x-tp8-hip-oom-during-model-init-transformers-fallback.log"
CLI = [sys.executable, "-m", "logforensics"]

GLOO = "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:81]"
WATCHDOG = "[rank2]:[F1019 10:11:12.345678 ProcessGroupNCCL.cpp:1484] [PG 0 Rank 2] watchdog got stuck [/b]"
MESSAGE_TAIL = " [bold]at[/bold] [/pytorch/third_party/gloo/x.cc:81] [rank2]:[F1019 x]"
#: Strings that must reach the terminal exactly as the log has them.
VERBATIM = ("logs[/b]", "[bold]at[/bold]", "[rank2]:[F1019 x]", "[/pytorch/third_party/gloo/x.cc:81]")


def hostile_log(tmp_path: Path) -> Path:
    lines = CRASH.read_text().splitlines(keepends=True)
    out = []
    for line in lines:
        if line.startswith("torch.OutOfMemoryError"):
            line = line.rstrip("\n") + MESSAGE_TAIL + "\n"
        out.append(line)
    out[2:2] = [WATCHDOG + "\n", GLOO + " Gloo connectFullMesh failed [red]no[/red]\n"]
    d = tmp_path / "logs["
    d.mkdir()
    path = d / "b].log"  # logs[/b].log
    path.write_text("".join(out))
    return path


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "250", **(env or {})}, cwd=None)


def assert_clean(out: subprocess.CompletedProcess, codes: tuple[int, ...] = (0, 1)) -> str:
    assert out.returncode in codes, out.stderr
    # a Python traceback of our own starts a line; the log's tracebacks are inside panels
    assert "MarkupError" not in out.stderr and not re.search(r"^Traceback", out.stderr, re.M), out.stderr
    return out.stdout + out.stderr


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
def test_summary_shows_hostile_names_and_text_verbatim(tmp_path: Path, terminal: bool) -> None:
    log = hostile_log(tmp_path)
    text = assert_clean(run("summary", str(log), env={"FORCE_COLOR": "1"} if terminal else {}))
    assert str(log) in text
    assert "[bold]at[/bold]" in text


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
def test_diff_shows_hostile_names_and_text_verbatim(tmp_path: Path, terminal: bool) -> None:
    log = hostile_log(tmp_path)
    text = assert_clean(run("diff", str(READY), str(log), env={"FORCE_COLOR": "1"} if terminal else {}))
    assert f"{log}:" in text  # evidence cites the file by its real name
    assert GLOO in text  # a line only the failing run has, shown as evidence


def test_parse_table_of_hostile_names(tmp_path: Path) -> None:
    log = hostile_log(tmp_path)
    text = assert_clean(run("parse", str(log)))
    assert GLOO in text and "[red]no[/red]" in text


def test_check_of_a_hostile_case_name(tmp_path: Path) -> None:
    case = tmp_path / "cases" / "x[/b]"
    case.mkdir(parents=True)
    (case / "baseline.log").write_text(READY.read_text())
    (case / "failing.log").write_text(hostile_log(tmp_path).read_text())
    assert_clean(run("check", str(tmp_path / "cases"), "--update"))
    text = assert_clean(run("check", str(tmp_path / "cases"), env={"FORCE_COLOR": "1"}))
    assert "x[/b]" in text


def test_watch_crash_output_of_a_hostile_log(tmp_path: Path) -> None:
    log = hostile_log(tmp_path)
    text = assert_clean(run("watch", str(log), "--grace", "0", "--baseline", str(READY)), codes=(1,))
    assert "[rank2]:[F1019 x]" in text and "[bold]at[/bold]" in text
