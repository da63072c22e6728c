"""Where outputs go: regular files atomically, FIFOs, devices and symlinks written through,
and every place that cannot be written is one line on stderr with exit status 2."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
READY = FIXTURES / "real" / "052-l4x4-tp4-pcie-custom-allreduce-disabled-full-startup-to-ready.log"
CRASH = FIXTURES / "real" / "041-mi355x-tp8-hip-oom-during-model-init-transformers-fallback.log"
CLI = [sys.executable, "-m", "logforensics"]


def run(*args: str, stdout: object = subprocess.PIPE, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300, cwd=cwd)


def one_line_error(out: subprocess.CompletedProcess, *needles: str, view_on_stderr: bool = False) -> None:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    if view_on_stderr:  # the terminal view went to stderr by design: the error is its last line
        lines = lines[-1:]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("logforensics: error:"), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("args", [
    ["parse", "-o", "nodir/x.txt", str(READY)],
    ["parse", "--format", "jsonl", "-o", "nodir/x.jsonl", str(READY)],
    ["parse", "--format", "csv", "-o", "nodir/x.csv", str(READY)],
    ["parse", "--format", "parquet", "-o", "nodir/x.parquet", str(READY)],
    ["diff", str(READY), str(CRASH), "-o", "nodir/r.html"],
    ["diff", str(READY), str(CRASH), "--json", "nodir/r.json"],
    ["check", str(FIXTURES / "diff"), "--junit", "nodir/c.xml"],
])
def test_missing_directory_is_one_line(tmp_path: Path, args: list[str]) -> None:
    one_line_error(run(*args, cwd=tmp_path), "nodir/")
    assert not (tmp_path / "nodir").exists()


@pytest.mark.parametrize("args", [
    ["parse", str(READY)],
    ["parse", "--format", "jsonl", str(READY)],
    ["parse", "--format", "csv", str(READY)],
    ["summary", str(CRASH)],
    ["summary", "--json", str(CRASH)],
    ["diff", str(READY), str(CRASH)],
    ["diff", str(READY), str(CRASH), "--json", "-"],
])
def test_full_stdout_is_one_line(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        out = run(*args, stdout=full)
    one_line_error(out, "No space left on device", view_on_stderr=args[-2:] == ["--json", "-"])


@pytest.mark.parametrize("fmt", ["table", "jsonl", "csv", "parquet"])
def test_dash_o_onto_a_full_device_is_one_line(fmt: str) -> None:
    one_line_error(run("parse", "--format", fmt, "-o", "/dev/full", str(READY)), "/dev/full")


def _char_device(path: Path) -> Path:
    """A private copy of /dev/full (same major/minor), so a writer that replaces it harms nothing."""
    st = os.stat("/dev/full")
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, st.st_rdev)
    except PermissionError:
        pytest.skip("creating a device node needs root")
    return path


@pytest.mark.parametrize("args", [
    lambda dev: ["diff", str(READY), str(CRASH), "-o", str(dev)],
    lambda dev: ["diff", str(READY), str(CRASH), "--json", str(dev)],
    lambda dev: ["parse", "-o", str(dev), str(READY)],
    lambda dev: ["check", str(FIXTURES / "diff" / "custom_ar_pcie_oom"), "--junit", str(dev)],
])
def test_a_device_is_written_through_never_replaced(tmp_path: Path, args) -> None:
    dev = _char_device(tmp_path / "full")
    out = run(*args(dev))
    assert stat.S_ISCHR(os.lstat(dev).st_mode), "the device node was replaced by a regular file"
    one_line_error(out, str(dev))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"], "no temporary file left behind"


def _read_fifo(path: Path, sink: list[bytes]) -> None:
    with open(path, "rb") as fh:
        sink.append(fh.read())


@pytest.mark.parametrize("cmd", ["html", "json", "parse", "parquet"])
def test_a_fifo_is_written_through(tmp_path: Path, cmd: str) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=_read_fifo, args=(fifo, got), daemon=True)
    reader.start()
    args = {"html": ["diff", str(READY), str(CRASH), "--fail-on", "never", "-o", str(fifo)],
            "json": ["diff", str(READY), str(CRASH), "--fail-on", "never", "--json", str(fifo)],
            "parse": ["parse", "--format", "jsonl", "-o", str(fifo), str(READY)],
            "parquet": ["parse", "--format", "parquet", "-o", str(fifo), str(READY)]}[cmd]
    out = run(*args)
    reader.join(timeout=30)
    assert out.returncode == 0, out.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced by a regular file"
    assert got and len(got[0]) > 1000
    if cmd == "html":
        assert got[0].lstrip().startswith(b"<!DOCTYPE html") or b"<html" in got[0][:500]
    if cmd == "parquet":
        assert got[0][:4] == b"PAR1"


@pytest.mark.parametrize("cmd", ["html", "json", "parse", "parquet"])
def test_a_symlink_is_kept_and_its_target_written(tmp_path: Path, cmd: str) -> None:
    target_dir = tmp_path / "real"
    target_dir.mkdir()
    target = target_dir / "out.dat"
    target.write_text("old")
    link = tmp_path / "link.dat"
    link.symlink_to(target)
    args = {"html": ["diff", str(READY), str(CRASH), "--fail-on", "never", "-o", str(link)],
            "json": ["diff", str(READY), str(CRASH), "--fail-on", "never", "--json", str(link)],
            "parse": ["parse", "--format", "jsonl", "-o", str(link), str(READY)],
            "parquet": ["parse", "--format", "parquet", "-o", str(link), str(READY)]}[cmd]
    out = run(*args)
    assert out.returncode == 0, out.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.stat().st_size > 1000
    assert sorted(p.name for p in target_dir.iterdir()) == ["out.dat"], "no temporary file left behind"


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_regular_file_is_replaced_atomically_and_kept_on_failure(tmp_path: Path, fmt: str) -> None:
    """A failed write leaves the previous file as it was, never a half-written one."""
    out = tmp_path / f"events.{fmt}"
    out.write_text("previous\n")
    bad = tmp_path / "missing.log"
    res = run("parse", "--format", fmt, "-o", str(out), str(READY), str(bad))
    one_line_error(res, "missing.log")
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]
    out.chmod(0o640)
    assert run("parse", "--format", fmt, "-o", str(out), str(READY)).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]
    assert stat.S_IMODE(out.stat().st_mode) == 0o640, "the replaced file keeps its permissions"
    if fmt == "jsonl":
        assert out.read_text().count("\n") > 50
    else:
        import pyarrow.parquet as pq

        assert out.read_bytes()[:4] == b"PAR1" and pq.read_table(out).num_rows > 50


def test_watch_report_into_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    """Refused before following: finding out only after the crash would lose the report."""
    log = tmp_path / "server.log"
    log.write_text(CRASH.read_text())
    out = subprocess.run(CLI + ["watch", str(log), "--report", str(tmp_path / "nodir" / "r.html"), "--grace", "0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert "nodir" in out.stderr and "logforensics: error:" in out.stderr
