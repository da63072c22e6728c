"""``watch`` of several files and hosts at once: real processes, files written concurrently,
a real OpenSSH server on 127.0.0.1. A crash on one node ends the watch with exit 1, and
the events seen live are, file by file, the events of ``parse`` on the finished file."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from test_watch import CRASH_EXC, CRASH_HEAD, CRASH_TAIL, Watch, parse_jsonl, write_slowly


def _node(rank_a: int, rank_b: int, node: int) -> str:
    return (f"[2025-06-01 10:00:00] server_args=ServerArgs(model_path='/models/m', tp_size=4, nnodes=2, "
            f"node_rank={node})\n"
            + "".join(f"[2025-06-01 10:00:02 TP{r}] Init torch distributed begin.\n" for r in (rank_a, rank_b))
            + "".join(f"[2025-06-01 10:00:03 TP{r}] Init torch distributed ends. mem usage=0.52 GB\n"
                      for r in (rank_a, rank_b))
            + "".join(f"[2025-06-01 10:00:03 TP{r}] Load weight begin. avail mem=78.50 GB\n" for r in (rank_a, rank_b))
            + "".join(f"[2025-06-01 10:00:06 TP{r}] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
                      f"avail mem=62.10 GB, mem usage=16.40 GB.\n" for r in (rank_a, rank_b))
            + "".join(f"[2025-06-01 10:00:07 TP{r}] Capture cuda graph begin. This can take up to several minutes. "
                      f"avail mem=12.90 GB\n" for r in (rank_a, rank_b)))


NODE0 = _node(0, 1, 0)
NODE1 = _node(2, 3, 1)
CRASH = CRASH_HEAD.replace("TP1]", "TP3]") + CRASH_EXC + CRASH_TAIL


def _write_both(a: Path, b: Path) -> None:
    """Both nodes' logs written at the same time, then node 1 crashes."""
    ta = threading.Thread(target=write_slowly, args=(a, NODE0))
    tb = threading.Thread(target=write_slowly, args=(b, NODE1))
    ta.start()
    tb.start()
    ta.join()
    tb.join()
    write_slowly(b, CRASH)


def _by_file(events: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for e in events:
        out.setdefault(e["file"], []).append(e)
    return out


def _strip(events: list[dict], *keys: str) -> list[dict]:
    return [{k: v for k, v in e.items() if k not in keys} for e in events]


def test_watch_two_local_files_stops_on_the_crash_of_one_node(tmp_path: Path) -> None:
    a, b = tmp_path / "node0.log", tmp_path / "node1.log"
    a.write_text("")
    b.write_text("")
    w = Watch([str(a), str(b), "--jsonl", "--grace", "1.0"])
    w.wait_for("node1: opened")
    _write_both(a, b)
    code = w.finish()
    err = w.err_text()
    assert code == 1, err
    assert "crash diagnosed on node1: torch.OutOfMemoryError on TP3" in err
    live = _by_file(w.events())
    assert set(live) == {str(a), str(b)}
    assert {e["node"] for e in live[str(a)]} == {"node0"} and {e["node"] for e in live[str(b)]} == {"node1"}
    assert live[str(a)] == parse_jsonl(a)
    assert live[str(b)] == parse_jsonl(b)


def test_inventory_is_read_and_checked(tmp_path: Path) -> None:
    from logforensics.ingest import InputError
    from logforensics.watch.multi import host_targets, read_inventory

    inv = tmp_path / "hosts"
    inv.write_text("# two nodes\nnode-a /var/log/sglang.log node=node0\nnode-b  user=me port=2222\n")
    t = read_inventory(str(inv))
    assert [(x.node, x.host, x.path, x.user, x.port) for x in t] == [
        ("node0", "node-a", "/var/log/sglang.log", None, None), ("node-b", "node-b", None, "me", 2222)]
    inv.write_text("node-a a b\n")
    with pytest.raises(InputError, match="expected"):
        read_inventory(str(inv))
    with pytest.raises(InputError, match="one --path per --host"):
        host_targets(["a", "b"], ["x"])
    same = host_targets(["h", "h"], ["/x/node0.log", "/y/node1.log"])
    assert [x.node for x in same] == ["h:node0", "h:node1"]


@pytest.mark.ssh
def test_watch_two_paths_on_one_host_over_ssh(tmp_path: Path, sshd_server) -> None:
    a, b = tmp_path / "node0.log", tmp_path / "node1.log"
    a.write_text("")
    b.write_text("")
    ssh = ["--port", str(sshd_server.port), "--user", sshd_server.user, "-i", str(sshd_server.client_key),
           "--known-hosts", str(sshd_server.known_hosts)]
    host = sshd_server.host
    w = Watch(["--host", host, "--path", str(a), "--host", host, "--path", str(b), *ssh, "--jsonl", "--grace", "1.0"])
    w.wait_for(f"{host}:node1: opened")
    w.wait_for(f"{host}:node0: opened")
    _write_both(a, b)
    code = w.finish()
    err = w.err_text()
    assert code == 1, err
    assert f"crash diagnosed on {host}:node1: torch.OutOfMemoryError on TP3" in err
    live = _by_file(w.events())
    assert set(live) == {f"{host}:{a}", f"{host}:{b}"}
    assert _strip(live[f"{host}:{a}"], "file", "node") == _strip(parse_jsonl(a), "file", "node")
    assert _strip(live[f"{host}:{b}"], "file", "node") == _strip(parse_jsonl(b), "file", "node")
    assert all(json.dumps(e).count(f"{host}:node1") for e in live[f"{host}:{b}"])


@pytest.mark.ssh
def test_watch_two_hosts_over_ssh(tmp_path: Path, sshd_server) -> None:
    """Two host names (127.0.0.1 and localhost) of one loopback sshd, each with its own path."""
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("")
    b.write_text("")
    known = tmp_path / "known_hosts"
    key = sshd_server.known_hosts_line.split(" ", 1)[1]
    known.write_text(sshd_server.known_hosts_line + f"[localhost]:{sshd_server.port} {key}")
    ssh = ["--port", str(sshd_server.port), "--user", sshd_server.user, "-i", str(sshd_server.client_key),
           "--known-hosts", str(known)]
    w = Watch(["--host", sshd_server.host, "--path", str(a), "--host", "localhost", "--path", str(b), *ssh,
               "--jsonl", "--grace", "1.0"])
    w.wait_for("localhost: opened")
    w.wait_for(f"{sshd_server.host}: opened")
    _write_both(a, b)
    code = w.finish()
    err = w.err_text()
    assert code == 1, err
    assert "crash diagnosed on localhost: torch.OutOfMemoryError on TP3" in err
    live = _by_file(w.events())
    assert {e["node"] for e in live[f"localhost:{b}"]} == {"localhost"}
    assert _strip(live[f"{sshd_server.host}:{a}"], "file", "node") == _strip(parse_jsonl(a), "file", "node")
    assert _strip(live[f"localhost:{b}"], "file", "node") == _strip(parse_jsonl(b), "file", "node")
