"""``watch`` over SSH while the log grows at >= 10 MB/s and the session's sshd is killed
several times: it reconnects each time, whatever the dead transport raises, and the events
seen live equal ``parse`` of the finished file, line by line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_watch import CRASH_EXC, CRASH_HEAD, CRASH_TAIL, START, Watch, parse_jsonl, without_file

RATE = 12e6  # bytes per second, as a busy 8-rank serving log at its worst
BLOCK = 256 << 10
KILLS = 3


def decode_lines(n_bytes: int, start: int) -> tuple[bytes, int]:
    """Decode-batch lines of two ranks, about ``n_bytes`` of them, numbered from ``start``."""
    out = []
    size = 0
    i = start
    while size < n_bytes:
        i += 1
        line = (f"[2025-06-01 10:{(i // 60000) % 60:02d}:{(i // 1000) % 60:02d} TP{i % 2}] Decode batch. "
                f"#running-req: {i % 97}, #token: {i % 50021}, token usage: 0.{i % 97:02d}, "
                f"gen throughput (token/s): {1000 + i % 911}.{i % 10}, #queue-req: {i % 5}\n").encode()
        out.append(line)
        size += len(line)
    return b"".join(out), i


@pytest.mark.ssh
@pytest.mark.slow
def test_ssh_watch_at_speed_survives_killed_sessions(tmp_path: Path, sshd_server) -> None:
    log = tmp_path / "server.log"
    log.write_text(START)
    w = Watch(["--host", sshd_server.host, "--port", str(sshd_server.port), "--user", sshd_server.user,
               "-i", str(sshd_server.client_key), "--known-hosts", str(sshd_server.known_hosts),
               "--path", str(log), "--jsonl", "--grace", "1.0"])
    w.wait_for("opened")
    # generated before the clock starts: the writer only writes, so it keeps the rate on a busy machine
    blocks, n = [], 0
    for _ in range(int(RATE * 0.5 * (KILLS + 2)) // BLOCK + 1):
        block, n = decode_lines(BLOCK, n)
        blocks.append(block)
    written = 0
    started = time.monotonic()
    kill_at = [started + 0.5 * (k + 1) for k in range(KILLS)]
    kills = 0
    with log.open("ab") as fh:
        while blocks and (kills < KILLS or time.monotonic() < kill_at[-1] + 0.8):
            block = blocks.pop(0)
            fh.write(block)
            fh.flush()
            written += len(block)
            ahead = written / RATE - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
            if kills < KILLS and time.monotonic() >= kill_at[kills]:
                if sshd_server.kill_sessions():
                    kills += 1
    elapsed = time.monotonic() - started
    rate = written / elapsed
    with log.open("a") as fh:
        fh.write(CRASH_HEAD + CRASH_EXC + CRASH_TAIL)
    code = w.finish(timeout=180)
    err = w.err_text()
    print(f"\nwrote {written / 1e6:.0f} MB at {rate / 1e6:.1f} MB/s, killed {kills} sessions; "
          f"{err.count('reconnected')} reconnects")
    assert rate >= 10e6, f"the writer only reached {rate / 1e6:.1f} MB/s"
    assert kills == KILLS
    assert code == 1, err[-3000:]
    assert "SSH follower failed" not in err
    assert err.count("[watch] reconnected") >= KILLS, err[-3000:]
    assert "crash diagnosed: torch.OutOfMemoryError on TP1" in err
    live, parsed = without_file(w.events()), without_file(parse_jsonl(log))
    assert len(live) == len(parsed)
    assert live == parsed


def _break_socket(follower) -> None:
    """Shut the connection's socket under a transport that still believes it is active:
    the next write (a window adjust, the channel's close) fails like a dead peer's."""
    import socket

    with follower._conn_lock:
        conn = follower._conn
    assert conn is not None
    conn.transport.sock.shutdown(socket.SHUT_WR)


@pytest.mark.ssh
@pytest.mark.parametrize("round_", range(5))
def test_any_exception_of_a_dead_transport_leads_to_a_reconnect(tmp_path: Path, sshd_server, round_: int) -> None:
    from collector import Collector
    from test_sources_ssh import append

    from logforensics.sources import SSHFollower

    p = tmp_path / "server.log"
    p.write_bytes(b"first\n")
    col = Collector(SSHFollower(sshd_server.host, str(p), **sshd_server.connect_kwargs()))
    assert col.wait_for(lambda: col.delivered() == 6)
    for k in range(3):
        big, _ = decode_lines(4 << 20, k * 100000)
        append(p, big)  # in flight while the socket dies
        _break_socket(col.follower)
        assert col.wait_for(lambda k=k: col.kinds().count("reconnected") > k, timeout=20), (col.kinds(), col.error)
    expected = p.read_bytes()
    assert col.wait_for(lambda: col.delivered() >= len(expected), timeout=20), col.error
    try:
        assert col.error is None and col.data_since_restart() == expected
    finally:
        col.follower.stop()
        col.thread.join(5)
