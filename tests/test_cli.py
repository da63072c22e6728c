"""The command line as a user runs it: formats, exit codes, one-line errors, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
REAL = FIXTURES / "real"
CLI = [sys.executable, "-m", "logforensics"]
READY = REAL / "052-l4x4-tp4-pcie-custom-allreduce-disabled-full-startup-to-ready.log"
CRASH = REAL / "041-mi355x-tp8-hip-oom-during-model-init-transformers-fallback.log"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=300, cwd=cwd)


def test_parse_jsonl_has_provenance_and_units() -> None:
    out = run("parse", "--format", "jsonl", str(READY))
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]
    lines = READY.read_bytes().split(b"\n")
    for e in events:
        assert {"kind", "rank", "ts", "line", "file"} <= set(e)
        # line numbers match grep -n: the event's text is on that physical line
        assert e["text"].split("\n")[0][:40].encode() in lines[e["line"] - 1]
    load_end = [e for e in events if e["kind"] == "load_weight_end"]
    assert len(load_end) == 4 and all(e["avail_gib"] == 6.09 and e["mem_usage_gib"] == 15.54 for e in load_end)
    assert {e["rank"] for e in load_end} == {"TP0", "TP1", "TP2", "TP3"}
    assert load_end[0]["ts"] == "2025-03-08T12:29:21"


def test_parse_csv_and_parquet(tmp_path: Path) -> None:
    csv_out = run("parse", "--format", "csv", str(READY))
    assert csv_out.returncode == 0
    pq = tmp_path / "events.parquet"
    assert run("parse", "--format", "parquet", "-o", str(pq), str(READY)).returncode == 0
    frame = pd.read_parquet(pq)
    assert len(frame) == len(csv_out.stdout.strip().splitlines()) - 1
    assert set(frame["kind"]) >= {"load_weight_end", "kv_cache_alloc", "server_ready"}
    assert run("parse", "--format", "parquet", str(READY)).returncode == 2  # needs -o


def test_parse_table_and_kind_filter() -> None:
    out = run("parse", "--kind", "kv_cache_alloc", str(READY))
    assert out.returncode == 0
    rows = out.stdout.strip().splitlines()
    assert len(rows) == 4 and all("kv_cache_alloc" in r and "tokens=46611" in r for r in rows)


def test_summary_json_schema() -> None:
    out = run("summary", "--json", str(CRASH))
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert s["outcome"] == "crashed"
    for key in ("ranks", "phase_reached", "crash", "memory", "throughput", "server_args", "env", "versions", "coverage"):
        assert key in s
    crash = s["crash"]
    assert crash["first_rank"] == "TP1" and crash["exception"] == "torch.OutOfMemoryError"
    # the window starts at TP1's exception line: its frames are not in it, and the tracebacks of
    # the other ranks after it keep theirs (they are not TP1's)
    assert crash["phase"] == "load_weights" and crash["frames"] == []
    assert any(e["frames"] for e in s["exceptions"])
    oom = crash["oom"]
    assert oom["tried_gib"] == 12.0 and oom["total_gib"] == 287.98 and oom["free_gib"] == 4.31
    assert oom["allocated_gib"] == 280.38 and oom["reserved_unallocated_gib"] == pytest.approx(6.32 / 1024, abs=1e-4)
    assert s["coverage"]["lines_read"] == len(CRASH.read_bytes().split(b"\n")) - 1


def test_summary_terminal_view_is_plain_when_piped() -> None:
    out = run("summary", str(READY))
    assert out.returncode == 0
    assert "\x1b[" not in out.stdout
    assert "READY" in out.stdout and "TP3" in out.stdout and "21.63" in out.stdout


def test_runs_from_any_directory_as_module(tmp_path: Path) -> None:
    out = run("summary", "--json", str(READY), cwd=tmp_path)
    assert out.returncode == 0 and json.loads(out.stdout)["outcome"] == "ready"


@pytest.mark.parametrize("args", [
    ("summary", "/no/such/file.log"),
    ("parse", "/no/such/file.log"),
    ("summary", "/"),
    ("diff", "/no/such/a.log", "/no/such/b.log"),
    ("parse", "--format", "xml", "x.log"),
    ("summary",),
    ("frobnicate",),
])
def test_bad_input_is_a_one_line_error(args: tuple[str, ...]) -> None:
    out = run(*args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.strip()


def test_help_lists_every_command() -> None:
    out = run("--help")
    for cmd in ("parse", "summary", "diff", "watch", "check"):
        assert cmd in out.stdout
        assert run(cmd, "--help").returncode == 0


def test_readme_documents_every_command_and_its_options() -> None:
    """README and --help stay in step with the code: every command and option is mentioned."""
    from logforensics.cli import main

    readme = (FIXTURES.parent / "README.md").read_text(encoding="utf-8")
    for name, cmd in main.commands.items():
        assert f"### {name}" in readme, f"README has no section for `{name}`"
        for param in cmd.params:
            longest = max(param.opts, key=len)
            if longest.startswith("--"):
                assert longest in readme, f"README does not mention `{name} {longest}`"


def test_diff_writes_its_files_even_when_the_terminal_pipe_closes(tmp_path: Path) -> None:
    report, js = tmp_path / "r.html", tmp_path / "d.json"
    diff = FIXTURES / "diff" / "custom_ar_pcie_oom"
    proc = subprocess.Popen(CLI + ["diff", str(diff / "baseline.log"), str(diff / "failing.log"), "-o", str(report),
                                   "--json", str(js)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(10)
    proc.stdout.close()  # like `| head -c 10`
    proc.wait(timeout=120)
    assert "Traceback" not in proc.stderr.read().decode()
    assert report.stat().st_size > 10_000 and json.loads(js.read_text())["findings"]


def test_terminal_output_never_carries_control_characters_from_the_log(tmp_path: Path) -> None:
    log = tmp_path / "evil.log"
    log.write_bytes(b"[2025-06-01 10:00:00 TP0] Load weight begin. avail mem=78.50 GB\n"
                    b"\x07garbage\x1b]0;pwned\x07\x1b[2J \x1bc\x08\x08 line\n")
    out = run("summary", str(log))
    assert out.returncode == 0
    assert not any(ch in out.stdout for ch in "\x1b\x07\x08")
    assert "garbage" in out.stdout
