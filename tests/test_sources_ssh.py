"""Behaviour tests of SSHFollower against a real OpenSSH server on 127.0.0.1.

The server comes from tests/sshd.py (session fixture ``sshd_server``).  Files
are created locally: the "remote" host is this machine, reached through sshd,
so the tests can write, truncate, rotate and inspect /proc directly.
"""

from __future__ import annotations

import os
import random
import shlex
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from collector import Collector
from sshd import SSHServer

from logforensics.sources import (
    Chunk,
    HostKeyError,
    SourceError,
    SSHFollower,
    discover_server_logs,
)
from logforensics.sources.ssh import _parse_discovery, _TailStream

pytestmark = pytest.mark.ssh


@pytest.fixture
def follow(sshd_server: SSHServer) -> Iterator[Callable[..., Collector]]:
    """Start followers on the test server; all are stopped at teardown."""
    started: list[Collector] = []

    def start(path: str | Path | None, **kw) -> Collector:
        args = sshd_server.connect_kwargs() | {"keepalive_interval": 0.5, "keepalive_timeout": 1.0}
        args.update(kw)
        col = Collector(SSHFollower(sshd_server.host, None if path is None else str(path), **args))
        started.append(col)
        return col

    yield start
    for col in started:
        col.follower.stop()
    for col in started:
        col.thread.join(5)
    sshd_server.cont_sessions()


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


# -- streaming --------------------------------------------------------------
def test_appended_bytes_arrive_fast_over_ssh(tmp_path: Path, follow) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(b"existing\n")
    col = follow(p)
    assert col.wait_for(lambda: col.delivered() == 9)
    written: list[tuple[int, float]] = []
    size = 9
    for i in range(40):
        line = f"[2025-01-01 00:00:{i:02d}] Prefill batch. #new-token: {i}\n".encode()
        t = time.perf_counter()
        append(p, line)
        size += len(line)
        written.append((size, t))
        assert col.wait_for(lambda s=size: col.delivered() >= s, timeout=2)
    latencies = [
        next(t for t, it in col.items if isinstance(it, Chunk) and it.offset + len(it.data) >= end) - t_write
        for end, t_write in written
    ]
    median = statistics.median(latencies)
    print(f"\nssh append->delivery latency: median {median * 1e3:.2f} ms, max {max(latencies) * 1e3:.2f} ms")
    assert median < 0.2
    assert col.data_since_restart() == p.read_bytes()
    assert col.kinds() == ["opened"]
    assert col.follower.offset == size


def test_killed_session_mid_stream_loses_and_repeats_nothing(tmp_path: Path, follow, sshd_server) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(b"")
    col = follow(p)
    assert col.wait_for(lambda: "opened" in col.kinds())
    stop_writing = threading.Event()

    def writer() -> None:
        rng = random.Random(1)
        n = 0
        with open(p, "ab") as fh:
            while not stop_writing.is_set():
                n += 1
                fh.write(f"line {n} ".encode() + os.urandom(rng.randint(0, 3000)) + b"\n")
                fh.flush()
                time.sleep(0.001)

    w = threading.Thread(target=writer, daemon=True)
    w.start()
    try:
        for _ in range(2):
            time.sleep(0.4)
            assert sshd_server.wait_sessions(1), "no session process to kill"
            assert sshd_server.kill_sessions()
            assert col.wait_for(lambda k=col.kinds().count("reconnected"): col.kinds().count("reconnected") > k)  # noqa: B008
        time.sleep(0.3)
    finally:
        stop_writing.set()
        w.join(5)
    expected = p.read_bytes()
    assert col.wait_for(lambda: col.delivered() >= len(expected), timeout=10)
    assert col.data_since_restart() == expected
    kinds = col.kinds()
    assert kinds.count("disconnected") == 2 and kinds.count("reconnected") == 2
    assert "truncated" not in kinds and "rotated" not in kinds
    print(f"\nkilled 2 sessions while writing {len(expected)} bytes: all delivered exactly once")


def test_hung_peer_is_detected_and_stream_resumes(tmp_path: Path, follow, sshd_server) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(b"first\n")
    col = follow(p, keepalive_interval=0.3, keepalive_timeout=0.7)
    assert col.wait_for(lambda: col.delivered() == 6)
    assert sshd_server.wait_sessions(1)
    stopped = sshd_server.stop_sessions()
    t0 = time.monotonic()
    append(p, b"written while the peer hangs\n")
    try:
        assert col.wait_for(lambda: "disconnected" in col.kinds(), timeout=5)
        detected = time.monotonic() - t0
        assert col.wait_for(lambda: "reconnected" in col.kinds(), timeout=5)
        assert col.wait_for(lambda: col.delivered() == len(p.read_bytes()), timeout=5)
    finally:
        sshd_server.cont_sessions(stopped)
    print(f"\nhung peer detected after {detected:.2f} s (interval 0.3 s, timeout 0.7 s)")
    assert detected < 3
    assert "hung" in next(it.message for _, it in col.items if getattr(it, "kind", "") == "disconnected")
    assert col.data_since_restart() == p.read_bytes()


def test_remote_truncation_and_rotation(tmp_path: Path, follow) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(b"generation one, line one\n")
    col = follow(p)
    assert col.wait_for(lambda: col.delivered() == 25)
    with open(p, "wb") as fh:  # server restarted with "> server.log"
        fh.write(b"gen2\n")
    assert col.wait_for(lambda: col.kinds() == ["opened", "truncated"] and col.delivered() == 5)
    assert col.data_since_restart() == b"gen2\n"
    os.rename(p, tmp_path / "server.log.1")
    p.write_bytes(b"gen3 after rotation\n")
    assert col.wait_for(lambda: "rotated" in col.kinds() and col.delivered() == 20)
    append(p, b"more gen3\n")
    assert col.wait_for(lambda: col.delivered() == 30)
    assert col.data_since_restart() == p.read_bytes()
    assert col.follower.offset == 30


@pytest.mark.parametrize("change", ["rotated", "truncated"])
def test_change_while_disconnected_is_noticed(tmp_path: Path, follow, sshd_server, change: str) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(b"old file content\n")
    col = follow(p, max_backoff=0.2)
    assert col.wait_for(lambda: col.delivered() == 17)
    assert sshd_server.wait_sessions(1)
    sshd_server.kill_sessions()  # drop the connection, then change the file behind its back
    if change == "rotated":
        os.rename(p, tmp_path / "server.log.1")
        p.write_bytes(b"new and longer file content\n")
    else:
        p.write_bytes(b"short\n")
    assert col.wait_for(lambda: change in col.kinds() and col.delivered() == p.stat().st_size, timeout=5)
    assert col.data_since_restart() == p.read_bytes()
    assert col.kinds()[:2] == ["opened", "disconnected"] and "reconnected" in col.kinds()


def test_file_that_does_not_exist_yet(tmp_path: Path, follow) -> None:
    p = tmp_path / "not yet.log"
    col = follow(p)
    assert col.wait_for(lambda: col.kinds() == ["waiting"])
    time.sleep(0.5)  # several waiting rounds on the remote: still one notice
    p.write_bytes(b"server started\n")
    assert col.wait_for(lambda: col.delivered() == 15)
    assert col.kinds() == ["waiting", "opened"]
    assert col.data_since_restart() == b"server started\n"


@pytest.mark.parametrize(
    "name",
    [
        "a b; c.log",
        "quote ' and \" and $HOME and `id` and \\.log",
        "x$(touch PWNED)",
        "line\nbreak.log",
    ],
)
def test_hostile_path_names_are_quoted(tmp_path: Path, follow, name: str) -> None:
    pwned = tmp_path / "pwned"
    name = name.replace("PWNED", str(pwned))
    p = tmp_path / "logs" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"content of a strangely named file\n")
    col = follow(p)
    assert col.wait_for(lambda: col.delivered() == 34)
    append(p, b"more\n")
    assert col.wait_for(lambda: col.delivered() == 39)
    assert col.data_since_restart() == p.read_bytes()
    assert not pwned.exists()


def test_path_with_injection_creates_nothing(tmp_path: Path, follow) -> None:
    # "x; touch /abs/pwned" as a path: directories "x; touch " and below exist.
    pwned = tmp_path / "pwned"
    p = Path(f"{tmp_path}/x; touch {pwned}")
    p.parent.mkdir(parents=True)
    p.write_bytes(b"ok\n")
    col = follow(p)
    assert col.wait_for(lambda: col.delivered() == 3)
    assert col.data_since_restart() == b"ok\n"
    assert not pwned.exists()


def test_directory_instead_of_file_is_a_source_error(tmp_path: Path, follow) -> None:
    col = follow(tmp_path)
    col.thread.join(5)
    assert isinstance(col.error, SourceError) and "not a regular file" in str(col.error)
    col.error = None


def test_stop_ends_iteration_promptly(tmp_path: Path, follow) -> None:
    p = tmp_path / "server.log"
    p.write_bytes(b"x\n")
    col = follow(p)
    assert col.wait_for(lambda: col.delivered() == 2)
    t = time.monotonic()
    col.close()
    assert time.monotonic() - t < 1.0


# -- host keys and connection errors ---------------------------------------
def test_unknown_host_is_refused(tmp_path: Path, sshd_server) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    kw = sshd_server.connect_kwargs() | {"known_hosts": str(kh)}
    with pytest.raises(HostKeyError) as exc:
        SSHFollower(sshd_server.host, "/dev/null", **kw)
    msg = str(exc.value)
    assert f"[127.0.0.1]:{sshd_server.port}" in msg and "--accept-new-host-key" in msg
    assert "\n" not in msg


def _other_host_key(tmp_path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    return " ".join((tmp_path / "k.pub").read_text().split()[:2])


@pytest.mark.parametrize("accept_new", [False, True])
def test_changed_host_key_is_refused(tmp_path: Path, sshd_server, accept_new: bool) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd_server.port} {_other_host_key(tmp_path)}\n")
    before = kh.read_text()
    kw = sshd_server.connect_kwargs() | {"known_hosts": str(kh), "accept_new_host_key": accept_new}
    with pytest.raises(HostKeyError, match="CHANGED") as err:
        SSHFollower(sshd_server.host, "/dev/null", **kw)
    assert kh.read_text() == before
    # the command that removes the entry names the port, as known_hosts does for a port other than 22
    assert f"ssh-keygen -R '[127.0.0.1]:{sshd_server.port}' -f {kh}" in str(err.value)


def test_accept_new_host_key_learns_and_saves(tmp_path: Path, sshd_server) -> None:
    kh = tmp_path / "sub" / "known_hosts"  # neither file nor directory exists yet
    kw = sshd_server.connect_kwargs() | {"known_hosts": str(kh)}
    SSHFollower(sshd_server.host, "/dev/null", accept_new_host_key=True, **kw).close()
    assert kh.read_text() == sshd_server.known_hosts_line
    SSHFollower(sshd_server.host, "/dev/null", **kw).close()  # now known without the flag


def test_auth_failure_and_refused_connection_are_one_line_errors(tmp_path: Path, sshd_server) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    kw = sshd_server.connect_kwargs() | {"key_filename": str(tmp_path / "k")}
    with pytest.raises(SourceError, match="authentication failed") as exc:
        SSHFollower(sshd_server.host, "/dev/null", **kw)
    assert "\n" not in str(exc.value) and exc.value.__cause__ is None
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kw = sshd_server.connect_kwargs() | {"port": port}
    with pytest.raises(SourceError, match="refused"):
        SSHFollower("127.0.0.1", "/dev/null", **kw)


def test_ssh_config_alias_and_proxyjump(tmp_path: Path, sshd_server) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        sshd_server.ssh_config.read_text()
        + f"Host via-jump\n    HostName 127.0.0.1\n    Port {sshd_server.port}\n"
        f"    User {sshd_server.user}\n    IdentityFile {sshd_server.client_key}\n"
        f"    ProxyJump lf-test\n"
    )
    p = tmp_path / "server.log"
    p.write_bytes(b"through the jump host\n")
    for alias in ("lf-test", "via-jump"):
        f = SSHFollower(alias, str(p), ssh_config=str(cfg), known_hosts=str(sshd_server.known_hosts))
        try:
            assert f.target.port == sshd_server.port
            items: list = []
            for item in f:
                items.append(item)
                if isinstance(item, Chunk):
                    break
            assert items[-1] == Chunk(b"through the jump host\n", 0)
        finally:
            f.close()


# -- discovery ---------------------------------------------------------------
def _fake_server(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["bash", "-c", f"exec -a {shlex.quote('python -m sglang.launch_server --tp 8')} sleep 60"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 5
    while b"sglang" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return proc, log


def test_discover_server_logs_finds_fake_server(tmp_path: Path, sshd_server, one_fake_server) -> None:
    proc, log = _fake_server(tmp_path, "one")
    try:
        f = SSHFollower(sshd_server.host, "/dev/null", **sshd_server.connect_kwargs())
        try:
            found = {p.pid: p for p in discover_server_logs(f)}
        finally:
            f.close()
        assert proc.pid in found
        assert found[proc.pid].log_path == str(log)
        assert "sglang.launch_server" in found[proc.pid].cmdline
        assert proc.pid in {p.pid for p in discover_server_logs(None)}  # same, locally
        if [p.pid for p in found.values() if p.log_path] == [proc.pid]:  # no real server here
            f = SSHFollower(sshd_server.host, None, **sshd_server.connect_kwargs())
            f.close()
            assert f.path == str(log) and f.server_process == found[proc.pid]
        proc2, log2 = _fake_server(tmp_path, "two")
        try:
            with pytest.raises(SourceError, match="--path") as exc:
                SSHFollower(sshd_server.host, None, **sshd_server.connect_kwargs())
            assert str(log) in str(exc.value) and str(log2) in str(exc.value)
        finally:
            proc2.kill()
            proc2.wait()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_parse_discovery_keeps_launcher_not_forked_workers() -> None:
    out = (
        "PID 10\nPPID 1\nFD1 /var/log/sglang.log\nFD2 /var/log/sglang.log\n"
        "CMD python3 -m sglang.launch_server --model-path m \n"
        "PID 11\nPPID 10\nFD1 /var/log/sglang.log\nCMD python3 -m sglang.launch_server --model-path m \n"
        "PID 20\nPPID 1\nCMD sglang serve --model-path m \n"
        "PID 30\nPPID 1\nFD1 /tmp/x.log\nCMD vim sglang_notes.txt \n"
    )
    procs = _parse_discovery(out)
    assert [(p.pid, p.log_path) for p in procs] == [(10, "/var/log/sglang.log"), (20, None)]


# -- the in-band diagnostic parser -------------------------------------------
def test_tail_stream_parser_splits_markers_at_every_boundary() -> None:
    marker = "/usr/bin/./././/./tail"
    stream = (
        b"noise from bashrc\nTOK start 0 123 open " + marker.encode() + b"\n"
        b"log line /usr/bin/ with a slash\npartial"
        + marker.encode() + b": ./f: file truncated\n"
        b"after truncation\n"
    )
    for cut in range(1, len(stream)):
        parser = _TailStream("TOK")
        events = parser.feed(stream[:cut]) + parser.feed(stream[cut:])
        data = b"".join(v for k, v in events if k == "data")
        diags = [v for k, v in events if k == "diag"]
        assert data == b"log line /usr/bin/ with a slash\npartialafter truncation\n", cut
        assert diags == ["./f: file truncated"]
        assert [v for k, v in events if k == "header"] == [["start", "0", "123", "open", marker]]
    parser = _TailStream("TOK")
    parser.feed(b"TOK start 0 1 open " + marker.encode() + b"\nends with /usr/bin/.")
    assert parser.flush() == b"/usr/bin/."
