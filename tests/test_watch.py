"""``logforensics watch`` end to end: a real process following a file that grows.

A writer appends a multi-rank SGLang log line by line while ``watch --jsonl`` follows
it (locally, and over a real OpenSSH server on 127.0.0.1 whose session is killed in
the middle). The events seen live must equal ``parse`` of the finished file, line by
line; the crash must be reported with the right rank and exit status 1. The delay
from writing the exception line to the diagnosis appearing is measured and printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CLI = [sys.executable, "-m", "logforensics"]

START = """\
[2025-06-01 10:00:00] server_args=ServerArgs(model_path='/models/m', tp_size=2, mem_fraction_static=0.88)
[2025-06-01 10:00:02 TP0] Init torch distributed begin.
[2025-06-01 10:00:02 TP1] Init torch distributed begin.
[2025-06-01 10:00:03 TP1] Init torch distributed ends. mem usage=0.52 GB
[2025-06-01 10:00:03 TP0] Init torch distributed ends. mem usage=0.52 GB
[2025-06-01 10:00:03 TP0] Load weight begin. avail mem=78.50 GB
[2025-06-01 10:00:03 TP1] Load weight begin. avail mem=78.50 GB
Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]\r
Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.90it/s]\r
Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:02<00:00,  1.95it/s]\r
[2025-06-01 10:00:06 TP1] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=62.10 GB, mem usage=16.40 GB.
[2025-06-01 10:00:06 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=62.10 GB, mem usage=16.40 GB.
[2025-06-01 10:00:06 TP0] KV Cache is allocated. #tokens: 400000, K size: 24.41 GB, V size: 24.41 GB
[2025-06-01 10:00:06 TP1] KV Cache is allocated. #tokens: 400000, K size: 24.41 GB, V size: 24.41 GB
[2025-06-01 10:00:06 TP0] Memory pool end. avail mem=13.10 GB
[2025-06-01 10:00:06 TP1] Memory pool end. avail mem=13.10 GB
[2025-06-01 10:00:07 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=12.90 GB
[2025-06-01 10:00:07 TP1] Capture cuda graph begin. This can take up to several minutes. avail mem=12.90 GB
"""

CRASH_HEAD = """\
[2025-06-01 10:00:09 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2937, in run_scheduler_process
    scheduler = Scheduler(
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 400, in capture
    self.capture_one_batch_size(bs, forward)
"""
CRASH_EXC = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 1 has a total "
             "capacity of 79.11 GiB of which 120.00 MiB is free.\n")
CRASH_TAIL = "[2025-06-01 10:00:09] Received sigquit from a child process. It usually means the child failed.\n"


def parse_jsonl(path: Path) -> list[dict]:
    out = subprocess.run(CLI + ["parse", "--format", "jsonl", str(path)], capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def without_file(events: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if k != "file"} for e in events]


class Watch:
    """A running ``logforensics watch`` process with its output collected in threads."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(CLI + ["watch", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1, env={**os.environ, "COLUMNS": "200"})
        self.stdout: list[str] = []
        self.stderr: list[tuple[float, str]] = []
        self._threads = [threading.Thread(target=self._read, args=(self.proc.stdout, False), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, True), daemon=True)]
        for t in self._threads:
            t.start()

    def _read(self, stream, timed: bool) -> None:
        for line in stream:
            if timed:
                self.stderr.append((time.monotonic(), line))
            else:
                self.stdout.append(line)

    def wait_for(self, text: str, timeout: float = 15.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, line in list(self.stderr):
                if text in line:
                    return t
            if self.proc.poll() is not None and not any(text in line for _, line in self.stderr):
                time.sleep(0.1)
                if not any(text in line for _, line in self.stderr):
                    break
            time.sleep(0.005)
        raise AssertionError(f"{text!r} not seen; stderr:\n{self.err_text()}")

    def wait_for_line(self, line: int, timeout: float = 15.0) -> None:
        """Until the live events reach ``line`` of the file (the follower has caught up)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(json.loads(x).get("line", 0) >= line for x in list(self.stdout) if x.strip()):
                return
            time.sleep(0.005)
        raise AssertionError(f"line {line} never arrived; stderr:\n{self.err_text()}")

    def finish(self, timeout: float = 20.0) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        for t in self._threads:
            t.join(timeout=5)
        return code

    def err_text(self) -> str:
        return "".join(line for _, line in self.stderr)

    def events(self) -> list[dict]:
        return [json.loads(line) for line in self.stdout if line.strip()]


def write_slowly(path: Path, text: str, delay: float = 0.002) -> None:
    with path.open("a", encoding="utf-8", newline="") as fh:
        for line in text.splitlines(keepends=True):
            fh.write(line)
            fh.flush()
            time.sleep(delay)


def crash_and_measure(path: Path, watch: Watch) -> float:
    """Append the crash; return seconds from the exception line's write to the diagnosis."""
    watch.wait_for_line(len(path.read_text().splitlines()))  # measure a follower that has caught up
    write_slowly(path, CRASH_HEAD)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(CRASH_EXC)
        fh.flush()
        written = time.monotonic()
    seen = watch.wait_for("crash diagnosed")
    write_slowly(path, CRASH_TAIL)
    return seen - written


def test_local_watch_reports_crash_and_matches_parse(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("")
    report = tmp_path / "crash.html"
    w = Watch([str(log), "--jsonl", "--grace", "1.0", "--report", str(report)])
    w.wait_for("opened")
    write_slowly(log, START)
    delay = crash_and_measure(log, w)
    code = w.finish()
    print(f"\ncrash line written -> diagnosis printed (local): {delay * 1000:.1f} ms")
    assert "TP1" in report.read_text(encoding="utf-8") and "HTML report written" in w.err_text()
    assert code == 1, w.err_text()
    err = w.err_text()
    assert "crash diagnosed: torch.OutOfMemoryError on TP1 in cuda_graph_capture" in err
    assert "Tried to allocate 1.00 GiB" in err  # the full traceback is shown
    assert without_file(w.events()) == without_file(parse_jsonl(log))
    assert delay < 0.5


def test_local_watch_until_ready(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(START)
    w = Watch([str(log), "--until", "ready"])
    w.wait_for("opened")
    write_slowly(log, "[2025-06-01 10:00:20] The server is fired up and ready to roll!\n")
    assert w.finish() == 0, w.err_text()
    assert "server ready" in "".join(w.stdout) + w.err_text()


def test_local_file_rotation_is_followed(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(START)
    w = Watch([str(log), "--jsonl", "--grace", "0.5"])
    w.wait_for("opened")
    time.sleep(0.3)
    log.rename(tmp_path / "server.log.1")
    log.write_text("")
    w.wait_for("rotated")
    write_slowly(log, START.replace("2025-06-01", "2025-06-02"))
    crash_and_measure(log, w)
    assert w.finish() == 1, w.err_text()
    events = w.events()
    first = without_file(parse_jsonl(tmp_path / "server.log.1"))
    second = without_file(parse_jsonl(log))
    assert without_file(events) == first + second


def test_file_that_does_not_exist_yet_is_waited_for(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    w = Watch([str(log), "--until", "ready"])
    w.wait_for("waiting")
    write_slowly(log, START + "[2025-06-01 10:00:20] The server is fired up and ready to roll!\n")
    assert w.finish() == 0, w.err_text()


def test_two_watchers_on_one_file(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("")
    a = Watch([str(log), "--jsonl", "--grace", "0.3"])
    b = Watch([str(log), "--jsonl", "--grace", "0.3"])
    a.wait_for("opened")
    b.wait_for("opened")
    write_slowly(log, START + CRASH_HEAD + CRASH_EXC + CRASH_TAIL)
    assert a.finish() == 1 and b.finish() == 1
    assert a.events() == b.events() and a.events()


def test_missing_baseline_and_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    for args in (["--baseline", str(tmp_path / "nope.log"), str(tmp_path / "x.log")],
                 [], [str(tmp_path / "x.log"), "--host", "h"]):
        out = subprocess.run(CLI + ["watch", *args], capture_output=True, text=True, timeout=30)
        assert out.returncode == 2
        assert "Traceback" not in out.stderr
        assert out.stderr.strip().startswith("logforensics: error:") or "Usage" in out.stderr


@pytest.mark.ssh
def test_ssh_watch_survives_a_killed_session(tmp_path: Path, sshd_server) -> None:
    log = tmp_path / "remote server.log"  # a space: the path must reach the shell quoted
    log.write_text("")
    w = Watch(["--host", sshd_server.host, "--port", str(sshd_server.port), "--user", sshd_server.user,
               "-i", str(sshd_server.client_key), "--known-hosts", str(sshd_server.known_hosts),
               "--path", str(log), "--jsonl", "--grace", "1.0"])
    w.wait_for("opened")
    half = len(START) // 2
    cut = START.rfind("\n", 0, half) + 1
    write_slowly(log, START[:cut])
    assert sshd_server.wait_sessions(1)
    assert sshd_server.kill_sessions()
    write_slowly(log, START[cut:])  # written while the connection is down
    w.wait_for("reconnected")
    delay = crash_and_measure(log, w)
    code = w.finish()
    print(f"\ncrash line written -> diagnosis printed (SSH loopback): {delay * 1000:.1f} ms")
    assert code == 1, w.err_text()
    assert "crash diagnosed: torch.OutOfMemoryError on TP1" in w.err_text()
    assert without_file(w.events()) == without_file(parse_jsonl(log))
    assert delay < 0.5


@pytest.mark.ssh
def test_ssh_unknown_host_is_refused(tmp_path: Path, sshd_server) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    out = subprocess.run(CLI + ["watch", "--host", sshd_server.host, "--port", str(sshd_server.port), "--user",
                                sshd_server.user, "-i", str(sshd_server.client_key), "--known-hosts", str(empty),
                                "--path", "/dev/null"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "--accept-new-host-key" in out.stderr


@pytest.mark.ssh
def test_ssh_asks_for_a_key_passphrase_at_the_terminal(tmp_path: Path, sshd_server) -> None:
    """No password option exists: an encrypted key's passphrase is asked for, as ssh does."""
    import pty

    key = tmp_path / "enc_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "s3cret phrase", "-f", str(key)], check=True)
    auth = sshd_server.dir / "authorized_keys"
    auth.write_text(auth.read_text() + key.with_suffix(".pub").read_text())
    log = tmp_path / "server.log"
    log.write_text(START + "[2025-06-01 10:00:20] The server is fired up and ready to roll!\n")
    pid, fd = pty.fork()
    if pid == 0:  # child: the CLI on a terminal
        os.execv(sys.executable, [sys.executable, "-m", "logforensics", "watch", "--host", sshd_server.host,
                                  "--port", str(sshd_server.port), "--user", sshd_server.user, "-i", str(key),
                                  "--known-hosts", str(sshd_server.known_hosts), "--path", str(log),
                                  "--until", "ready"])
    out = b""
    deadline = time.monotonic() + 60
    answered = False
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
        if not answered and b"passphrase" in out:
            os.write(fd, b"s3cret phrase\n")
            answered = True
    _, status = os.waitpid(pid, 0)
    assert answered, out.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, out.decode(errors="replace")
    assert b"s3cret" not in out.split(b"passphrase", 1)[1]  # not echoed


@pytest.mark.ssh
def test_ssh_watch_finds_the_server_log_without_path(tmp_path: Path, sshd_server, one_fake_server) -> None:
    """No --path: the SGLang server process on the host is found and its output file followed."""
    import shlex

    log = tmp_path / "launched.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            ["bash", "-c", f"exec -a {shlex.quote('python3 -m sglang.launch_server --tp 2')} sleep 60"],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 5
        while b"sglang" not in Path(f"/proc/{server.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        w = Watch(["--host", sshd_server.host, "--port", str(sshd_server.port), "--user", sshd_server.user,
                   "-i", str(sshd_server.client_key), "--known-hosts", str(sshd_server.known_hosts),
                   "--until", "ready"])
        w.wait_for("opened")
        write_slowly(log, START + "[2025-06-01 10:00:20] The server is fired up and ready to roll!\n")
        assert w.finish() == 0, w.err_text()
        assert str(log) in w.err_text() or "server ready" in w.err_text()
    finally:
        server.kill()
        server.wait()


def test_until_exit_stops_when_the_log_goes_quiet_after_shutdown(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(START + "[2025-06-01 10:00:20] The server is fired up and ready to roll!\n")
    w = Watch([str(log), "--until", "exit", "--idle-exit", "0.5"])
    w.wait_for("opened")
    time.sleep(1.0)
    assert w.proc.poll() is None, "a running server's quiet log is not an exit"
    write_slowly(log, "[2025-06-01 11:00:00] INFO:     Shutting down\n"
                      "[2025-06-01 11:00:00] INFO:     Application shutdown complete.\n")
    assert w.finish(timeout=10) == 0, w.err_text()


def test_a_byte_that_is_not_utf8_early_does_not_hold_back_the_crash(tmp_path: Path) -> None:
    """A short log with an undecodable byte in its first 64 KiB waits for the verdict on
    whether it is text; a live server writes no more after its crash, so the pause decides
    it on what came, and the crash is reported as it happens, the events those of parse."""
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    w = Watch([str(log), "--jsonl", "--grace", "1.0"])
    w.wait_for("opened")
    with log.open("ab") as fh:
        fh.write("[2025-06-01 09:59:59] Reading config from /home/jos\u00e9/sglang.yaml\n".encode("latin-1"))
    write_slowly(log, START)
    w.wait_for_line(START.count("\n") + 1)
    write_slowly(log, CRASH_HEAD + CRASH_EXC)
    w.wait_for("crash diagnosed", timeout=5.0)
    write_slowly(log, CRASH_TAIL)
    assert w.finish() == 1, w.err_text()
    assert "crash diagnosed: torch.OutOfMemoryError on TP1 in cuda_graph_capture" in w.err_text()
    assert without_file(w.events()) == without_file(parse_jsonl(log))


def test_watch_report_is_redacted_with_redact(tmp_path: Path) -> None:
    """``watch --report --redact`` writes the report as ``bundle`` would share it: a private path
    that the unredacted report shows (the failing run's model path, in the settings that differ
    from the baseline) is replaced by its placeholder."""
    case = FIXTURES / "diff" / "custom_ar_pcie_oom"
    failing = tmp_path / "failing.log"
    failing.write_text((case / "failing.log").read_text().replace("model_path='/data/models/",
                                                                  "model_path='/home/alice/models/"))
    shown = {}
    for flags in ((), ("--redact",)):
        report = tmp_path / f"report{len(flags)}.html"
        done = subprocess.run([*CLI, "watch", str(failing), "--baseline", str(case / "baseline.log"),
                               "--report", str(report), "--grace", "0", *flags],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, done.stderr
        shown[flags] = report.read_text()
    assert "/home/alice/models" in shown[()]
    assert "/home/alice" not in shown[("--redact",)] and "&lt;model-path-1&gt;" in shown[("--redact",)]
