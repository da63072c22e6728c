"""Runs of several files: which files make a run, node labels, and the run model across nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from logforensics.cli import main
from logforensics.ingest import InputError, LiveRun, run_files
from logforensics.ingest.runset import node_from_name
from logforensics.model.nodes import NodeSummary, combine
from logforensics.pipeline import iter_run_events, summarize_run

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "multinode"
TWO = FIX / "tp8_two_nodes"


def _json(*args: str) -> dict:
    res = CliRunner().invoke(main, list(args))
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize("name,node", [
    ("node0.log", "node0"), ("node_rank1.log", "node1"), ("sglang_1234_node3.out", "node3"),
    ("job-node-rank-2.err.gz", "node2"), ("server.log", None), ("nodes.log", None),
])
def test_node_from_file_name(name: str, node: str | None) -> None:
    assert node_from_name(name) == node


def test_a_run_is_a_file_several_files_a_directory_or_a_glob(tmp_path: Path) -> None:
    for n in ("sglang-0.log", "sglang-0-1.log", "notes.md"):
        (tmp_path / n).write_text("x\n")
    d = run_files([str(tmp_path)])
    assert [Path(p).name for p in d.paths] == ["sglang-0-1.log", "sglang-0.log"]
    assert sorted(f.node for f in d.files) == ["sglang-0", "sglang-0-1"]  # pod names
    g = run_files([str(tmp_path / "*.log")])
    assert g.paths == d.paths
    one = run_files([str(tmp_path / "sglang-0.log")])
    assert one.single and one.files[0].node is None
    with pytest.raises(InputError, match="no file matches"):
        run_files([str(tmp_path / "*.out")])
    with pytest.raises(InputError, match="no such file"):
        run_files([str(tmp_path / "missing.log")])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="without log files"):
        run_files([str(empty)])


def test_diff_of_two_node_runs_names_the_node_the_file_and_the_rank() -> None:
    d = _json("diff", str(TWO / "baseline"), str(TWO / "failing"), "--json", "-")
    crash = d["failing"]["crash"]
    assert crash["node"] == "node1" and crash["first_rank"] == "TP5"
    assert crash["file"].endswith("failing/node1.log")
    assert d["baseline"]["outcome"] == "ready" and d["failing"]["outcome"] == "crashed"
    assert d["failing"]["rank_nodes"]["TP5"] == "node1" and d["failing"]["rank_nodes"]["TP0"] == "node0"
    found = {f["rule"]: f for f in d["findings"]}
    assert "node1 failed (TP5)" in found["ND01"]["title"] and "node0" in found["ND01"]["title"]
    assert "cuda_graph_capture" in found["ND01"]["title"]
    for f in d["findings"]:
        for e in f["evidence"]:
            assert e["file"].endswith((".log",)), (f["rule"], e)  # a line of a file, never the directory
            if e.get("rank") in ("TP4", "TP5", "TP6", "TP7"):
                assert e["node"] == "node1" and e["file"].endswith("node1.log")
    cr01 = found["CR01"]
    assert "node1" in cr01["explanation"] and "node1.log:" in cr01["explanation"]
    # node 1's capture memory against the baseline's node 1
    moved = [m for m in d["facts"]["nodes"]["moved"] if m["figure"] == "capture_begin_avail_gib"]
    assert moved and moved[0]["node"] == "node1" and moved[0]["failing"] < moved[0]["baseline"]


def test_summary_of_one_node_file_says_which_ranks_are_missing() -> None:
    s1 = _json("summary", "--json", str(TWO / "failing" / "node1.log"))
    assert s1["ranks"] == ["TP4", "TP5", "TP6", "TP7"] and s1["missing_ranks"] == ["TP0", "TP1", "TP2", "TP3"]
    assert s1["outcome"] == "crashed"
    s0 = _json("summary", "--json", str(TWO / "baseline" / "node0.log"))
    assert s0["missing_ranks"] == ["TP4", "TP5", "TP6", "TP7"] and s0["outcome"] == "ready"
    res = CliRunner().invoke(main, ["summary", str(TWO / "failing" / "node1.log")])
    assert "TP0, TP1, TP2, TP3" in res.stdout and "missing" in res.stdout
    both = _json("summary", "--json", str(TWO / "failing" / "node0.log"), str(TWO / "failing" / "node1.log"))
    assert both["missing_ranks"] == [] and len(both["ranks"]) == 8


def test_a_run_is_ready_only_when_node0_is_and_no_node_failed() -> None:
    base = summarize_run(str(TWO / "baseline"))
    assert base.outcome == "ready" and base.ready.node == "node0"
    assert base.nodes["node1"].outcome == "incomplete"  # no HTTP server on node 1


def _part(node: str, text: str) -> NodeSummary:
    run = LiveRun(f"{node}.log", node=node)
    run.feed(text.encode())
    run.close()
    return NodeSummary(node, f"{node}.log", run.summary())


_TB = ("[2026-01-01 10:00:{s:02d} TP{r}] Scheduler hit an exception: Traceback (most recent call last):\n"
       '  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 1, in load_model\n'
       "    x()\nRuntimeError: boom on {r}\n")


def test_the_first_failure_across_nodes_is_uncertain_within_the_clock_skew() -> None:
    a = _part("node0", _TB.format(s=10, r=0))
    b = _part("node1", _TB.format(s=12, r=1))
    run = combine([b, a])
    assert run.crash.node == "node0" and "uncertain" in (run.crash.order_uncertain or "")
    far = combine([_part("node0", _TB.format(s=40, r=0)), _part("node1", _TB.format(s=12, r=1))])
    assert far.crash.node == "node1" and far.crash.order_uncertain is None
    assert far.outcome == "crashed" and "node1" in far.outcome_reason


def test_labels_that_two_files_print_are_qualified_with_their_node() -> None:
    line = "[2026-01-01 10:00:00 TP0] Load weight begin. avail mem=78.50 GB\n"
    run = combine([_part("prefill", line), _part("decode", line)])
    assert sorted(run.ranks) == ["decode:TP0", "prefill:TP0"]
    assert run.rank_nodes["decode:TP0"] == "decode"


@pytest.mark.parametrize("prefix,node", [
    ("(SGLangWorker pid=4711, ip=10.0.0.2) ", "10.0.0.2"),
    ("(worker1, rank=1, pid=4711, ip=10.0.0.3) ", "worker1"),
    ("[pod/sglang-0-1/sglang] ", "sglang-0-1"),
])
def test_wrappers_that_name_a_node_label_the_events_and_ranks(prefix: str, node: str) -> None:
    text = "".join(f"{prefix}[2026-01-01 10:00:0{i} TP{i}] Load weight begin. avail mem=78.50 GB\n" for i in range(3))
    run = LiveRun("w.log")
    events = run.feed(text.encode()) + run.close()
    assert [e.kind for e in events] == ["load_weight_begin"] * 3
    assert {e.node for e in events} == {node}
    assert run.rank_nodes == {"TP0": node, "TP1": node, "TP2": node}
    assert events[0].to_dict()["node"] == node


def test_two_ray_nodes_in_one_file_keep_their_ips() -> None:
    text = ("(W pid=1, ip=10.0.0.2) [2026-01-01 10:00:00 TP0] Load weight begin. avail mem=78.50 GB\n"
            "(W pid=2, ip=10.0.0.3) [2026-01-01 10:00:00 TP1] Load weight begin. avail mem=78.50 GB\n")
    run = LiveRun("ray.log")
    run.feed(text.encode())
    run.close()
    assert run.rank_nodes == {"TP0": "10.0.0.2", "TP1": "10.0.0.3"}


def test_cri_prefix_is_stripped() -> None:
    run = LiveRun("0.log")
    evs = run.feed(b"2026-01-01T10:00:00.123456789Z stdout F [2026-01-01 10:00:00 TP0] Load weight begin. "
                   b"avail mem=78.50 GB\n")
    evs += run.close()  # a start-up record waits for the line after it (the rest of a torn one)
    assert [e.kind for e in evs] == ["load_weight_begin"] and evs[0].rank == "TP0"


def test_parse_of_a_run_labels_every_event_with_its_node() -> None:
    events = list(iter_run_events(str(TWO / "failing")))
    assert {e.node for e in events} == {"node0", "node1"}
    assert all(e.node == "node1" for e in events if e.file.endswith("node1.log"))
    res = CliRunner().invoke(main, ["parse", "--format", "jsonl", str(TWO / "failing")])
    rows = [json.loads(x) for x in res.stdout.splitlines()]
    assert rows and all(r["node"] in ("node0", "node1") for r in rows)


PD = FIX / "pd_kv_timeout" / "run"


def test_a_disaggregated_run_reads_each_files_role_from_its_text() -> None:
    s = summarize_run(str(PD))
    assert {n: v.role for n, v in s.nodes.items()} == {"prefill": "prefill", "decode": "decode", "router": "router"}
    assert sorted(s.ranks) == ["decode:TP0", "decode:TP1", "prefill:TP0", "prefill:TP1"]
    assert s.outcome == "ready"  # both servers came up; the router has no readiness of its own
    decode = s.nodes["decode"].pd
    assert decode is not None
    assert [f.rank for f in decode.kv_failures] == ["TP0", "TP1"]
    assert decode.kv_failures[0].timed_out_s == 300.0 and decode.kv_failures[0].poll == "WaitingForInput"
    assert decode.timeouts[0].setting == "SGLANG_DISAGGREGATION_WAITING_TIMEOUT"
    router_part = s.nodes["router"].pd
    assert router_part is not None
    router = router_part.router_errors
    assert router and router[0].module == "sglang_router_rs::routers::http::pd_router" and router[0].src_line == 1319


def test_kv_timeout_finding_says_the_decode_side_failed_first_and_joins_the_sides() -> None:
    from logforensics.pipeline import diagnose_runs

    d = diagnose_runs(str(PD), None)
    pd = d.facts.pd
    assert pd.first_side == "decode" and pd.first.kind == "waiting_timeout" and pd.order_uncertain is None
    assert pd.joined and pd.joined[0].sides == ("decode", "prefill") and pd.joined[0].room == pd.first.room
    f = next(f for f in d.findings if f.rule == "PD01")
    assert "decode side failed first" in f.title and "300.0 s" in f.title
    files = {Path(e["file"]).name for e in f.evidence}
    assert {"decode.log", "prefill.log", "router.log"} <= files
    assert all(e.get("node") for e in f.evidence)


@pytest.mark.parametrize("line,module", [
    ("[Router (Rust)] 2025-03-08 02:33:09 - INFO - Worker http://0.0.0.0:31000 health check is pending", None),
    ("2025-08-31 07:32:08 ERROR sglang_router_rs::routers::http::pd_router: src/routers/http/pd_router.rs:1319: "
     "Stream error from decode server http://10.3.238.50:30000: error decoding response body",
     "sglang_router_rs::routers::http::pd_router"),
    ("smg::routers::http::pd_router: /sgl-workspace/sglang/sgl-model-gateway/src/routers/http/pd_router.rs:172: "
     "Failed to select PD pair error=Policy consistent_hashing failed to select a prefill worker", None),
    ("2026-04-14 09:54:30  WARN smg::service_discovery: /s/src/service_discovery.rs:555: Removing pod: prefill-node-19",
     "smg::service_discovery"),
])
def test_router_and_gateway_formats_make_a_router_file(line: str, module: str | None) -> None:
    run = LiveRun("router.log")
    run.feed((line + "\n").encode())
    run.close()
    assert run.pd.role == "router" and run.pd.router_lines == 1
    if module:
        assert run.pd.router[0]["module"] == module


_OOM = ("[2026-01-01 10:00:00] server_args=ServerArgs(model_path='m', tp_size=8, nnodes={nnodes}, node_rank={node})\n"
        "[2026-01-01 10:00:01 TP{r}] Load weight begin. avail mem=78.50 GB\n"
        "Traceback (most recent call last):\n"
        '  File "/sgl/python/sglang/srt/model_executor/cuda_graph_runner.py", line 1, in capture\n'
        "    x()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 1 has a total capacity of "
        "79.19 GiB of which 1.94 MiB is free.\n")


def test_pytorch_gpu_index_is_node_local() -> None:
    def crash_rank(text: str):
        run = LiveRun("x.log")
        run.feed(text.encode())
        run.close()
        return run.summary().crash
    # node 1 of a TP8 launch over two nodes: GPU 1 is TP5, never TP1
    c = crash_rank(_OOM.format(nnodes=2, node=1, r=4))
    assert c.first_rank == "TP5" and c.rank_inferred_from == "oom_gpu_index_on_node"
    # devices remapped: no rank from the index
    c = crash_rank("CUDA_VISIBLE_DEVICES=4,5,6,7 python -m sglang.launch_server --tp 8\n" + _OOM.format(nnodes=2, node=1, r=4))
    assert c.first_rank is None
    # one node: GPU 1 is TP1
    assert crash_rank(_OOM.format(nnodes=1, node=0, r=0)).first_rank == "TP1"


def test_html_report_groups_timeline_and_memory_by_node(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["diff", str(TWO / "baseline"), str(TWO / "failing"), "-o", str(out)])
    assert res.exit_code == 1, res.output
    html = out.read_text(encoding="utf-8").replace("\\u00b7", "·").replace("\\u2715", "✕")  # plotly's JSON
    assert "node1 · TP5 ✕" in html and "node0 · TP0" in html
    # each node's ranks stand together on the axis
    assert html.index("node0 · TP3") < html.index("node1 · TP4")


def test_kubelet_log_paths_name_their_pod(tmp_path: Path) -> None:
    from logforensics.ingest.runset import pod_from_path

    assert pod_from_path("/var/log/pods/default_sglang-0-1_0f3c/sglang/0.log") == "sglang-0-1"
    assert pod_from_path("/var/log/containers/sglang-0_default_sglang-4b1d.log") == "sglang-0"
    a = tmp_path / "pods" / "ns_lws-0_u1" / "sglang"
    b = tmp_path / "pods" / "ns_lws-0-1_u2" / "sglang"
    for d, r in ((a, 0), (b, 1)):
        d.mkdir(parents=True)
        (d / "0.log").write_text(f"2026-01-01T10:00:00.1Z stdout F [2026-01-01 10:00:00 TP{r}] Load weight begin. "
                                 "avail mem=78.50 GB\n")
    s = summarize_run([str(a / "0.log"), str(b / "0.log")])
    assert s.rank_nodes == {"TP0": "lws-0", "TP1": "lws-0-1"}


def test_node_rank_in_the_text_names_a_file_whose_name_does_not(tmp_path: Path) -> None:
    for name, rank, extra in (("head.log", 0, "--node-rank 0"), ("worker.log", 1, "--node-rank 1")):
        (tmp_path / name).write_text(
            f"python3 -m sglang.launch_server --model-path m --tp 2 --nnodes 2 {extra}\n"
            f"[2026-01-01 10:00:00 TP{rank}] Load weight begin. avail mem=78.50 GB\n")
    s = summarize_run(str(tmp_path))
    assert s.rank_nodes == {"TP0": "node0", "TP1": "node1"}
    assert sorted(s.nodes) == ["node0", "node1"]


def test_a_hang_names_its_node() -> None:
    wd = ("[rank0]:[E602 10:10:30.000000000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
          "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 "
          "milliseconds before timing out.\n")
    a = _part("node0", "[2025-06-02 10:00:00 TP0] Load weight begin. avail mem=78.50 GB\n" + wd)
    b = _part("node1", "[2025-06-02 10:00:00 TP1] Load weight begin. avail mem=78.50 GB\n")
    run = combine([a, b])
    assert run.outcome == "hung" and run.hang.node == "node0" and "node0" in run.outcome_reason


def test_a_directory_of_compressed_and_plain_node_logs_is_one_run(tmp_path: Path) -> None:
    import gzip
    import shutil

    shutil.copy(TWO / "failing" / "node0.log", tmp_path / "node0.log")
    (tmp_path / "node1.log.gz").write_bytes(gzip.compress((TWO / "failing" / "node1.log").read_bytes()))
    s = summarize_run(str(tmp_path))
    assert sorted(s.nodes) == ["node0", "node1"] and s.crash.node == "node1" and s.crash.first_rank == "TP5"


def test_a_crash_may_name_a_rank_that_wrote_no_line_of_its_own(tmp_path: Path) -> None:
    """A real NCCL watchdog failure names ``rank1`` only inside its traceback text: a run of
    that file and another node's still combines, and keeps the rank the crash names."""
    real = Path(__file__).resolve().parent.parent / "fixtures" / "real"
    failing = real / "109-2node-h100-k8s-pod-nccl-info-interleaved-watchdog-failure-rank1.log"
    (tmp_path / "node0.log").write_bytes(failing.read_bytes())
    (tmp_path / "node1.log").write_bytes((TWO / "baseline" / "node1.log").read_bytes())
    alone = _json("summary", "--json", str(failing))
    assert "rank1" in alone["crash"]["ranks"] and "rank1" not in alone["ranks"]
    run = _json("summary", "--json", str(tmp_path))
    assert run["crash"]["node"] == "node0" and "rank1" in run["crash"]["ranks"]


def test_node_rank_in_the_last_line_of_the_probed_head_names_the_file(tmp_path: Path) -> None:
    """The probe reads a file's head; a server_args line that ends that head exactly (and so
    waits for the line after it, the rest of a torn record maybe) is read by the probe too."""
    from logforensics.ingest.runset import PROBE_BYTES, probe_node

    lines = (TWO / "failing" / "node1.log").read_bytes().split(b"\n")
    args = lines[4]
    assert b"node_rank=1" in args
    head = b"\n".join(lines[1:4]) + b"\n"  # not the launch command: its --node-rank would name the node
    pad = PROBE_BYTES - len(head) - len(args) - 1
    data = head + b"\n" * pad + args + b"\n" + b"\n".join(lines[5:])
    assert data[PROBE_BYTES - 1:PROBE_BYTES] == b"\n" and len(data) > PROBE_BYTES
    path = tmp_path / "worker.log"
    path.write_bytes(data)
    assert probe_node(str(path)) == "node1"


@pytest.mark.parametrize("field,printed", [
    ("#unbootstrapped-req: 0, #queue-req: 105, #transferring-req: 990", "#unbootstrapped-req"),
    ("#inflight-req: 3, #queue-req: 105", "#inflight-req"),
])
def test_a_prefill_servers_role_names_the_field_its_batch_line_printed(field: str, printed: str) -> None:
    """The role's evidence quotes the line: a 2025 PD prefill batch has #unbootstrapped-req
    and #transferring-req (sglang issue #7353), a later one #inflight-req."""
    run = LiveRun("prefill.log")
    run.feed(("[2025-06-18 18:11:03] Prefill batch. #new-seq: 14, #new-token: 8192, #cached-token: 0, token usage: "
              f"0.92, {field}, input throughput (token/s): 96875.08 \n").encode())
    run.close()
    assert run.pd.role == "prefill"
    assert run.pd.role_evidence["prefill"]["why"] == f"{printed} in a prefill batch"


def test_ray_lines_without_ip_are_of_another_node_than_the_one_named(tmp_path: Path) -> None:
    """Ray names a process's node (``ip=``) only for the nodes other than its driver's: where
    some lines name one node and others name none (real-unseen 420), the file is of no single
    node, and the lines without ``ip=`` are not put on the one named."""
    from logforensics.ingest.runset import probe_node

    real = Path(__file__).resolve().parent.parent / "fixtures" / "real-unseen"
    mixed = next(real.glob("420-*.log"))
    assert probe_node(str(mixed)) is None
    rows = CliRunner().invoke(main, ["parse", "--format", "jsonl", str(mixed)]).stdout.splitlines()
    nodes = {e["line"]: e.get("node") for e in map(json.loads, rows)}
    assert nodes[1] == "192.168.12.183" and nodes[3] is None
    named = tmp_path / "remote.log"
    named.write_text("".join(line for line in mixed.read_text().splitlines(keepends=True) if "ip=" in line))
    assert probe_node(str(named)) == "192.168.12.183"


def test_a_rank_name_two_nodes_print_is_one_row_and_said_so(tmp_path: Path) -> None:
    """Ray names a remote worker's node (``ip=``); SGLang's ranks are global across the nodes
    of one server, so TP0 on two nodes is two servers' schedulers: the summary says that the
    row holds both. TP1 on one node is no such case."""
    log = tmp_path / "ray.log"
    log.write_text("(SGLangEngine pid=11, ip=10.0.0.1) [2025-06-01 12:00:00 TP0] Init torch distributed begin.\n"
                   "(SGLangEngine pid=12, ip=10.0.0.1) [2025-06-01 12:00:00 TP1] Init torch distributed begin.\n"
                   "(SGLangEngine pid=21, ip=10.0.0.2) [2025-06-01 12:00:01 TP0] Init torch distributed begin.\n")
    run = LiveRun(str(log))
    run.feed(log.read_bytes())
    run.close()
    s = run.summary()
    assert s.ranks == ["TP0", "TP1"]
    assert [w for w in s.warnings if "more than one node" in w] == [
        "records of more than one node name the same rank (TP0: 10.0.0.1, 10.0.0.2): each such rank is one row here, "
        "its phase, last line and figures those of any of them"]


def test_ranks_named_by_several_parts_are_not_listed_as_missing_by_one(tmp_path: Path) -> None:
    """A launch over DP, PP and TP names each process by all its parts ("DP4 PP0 TP4"): the
    sizes alone do not say which combinations exist (DP attention, PP over nodes), so no rank
    is listed as missing rather than "TP0" or "PP1", which name no process (real-unseen 675);
    a log of TP ranks alone still lists the TP ranks it lacks."""
    cmd = "python3 -m sglang.launch_server --model-path m --nnodes 2 --node-rank 0 --tp-size 8 --pp-size 2 --dp-size 8\n"
    multi = tmp_path / "multi.log"
    multi.write_text(cmd + "[2025-12-05 09:06:37 DP4 PP0 TP4] Load weight begin. avail mem=78.50 GB\n")
    assert _json("summary", "--json", str(multi))["missing_ranks"] == []
    single = tmp_path / "single.log"
    single.write_text(cmd.replace(" --pp-size 2 --dp-size 8", "")
                      + "[2025-12-05 09:06:37 TP4] Load weight begin. avail mem=78.50 GB\n")
    assert _json("summary", "--json", str(single))["missing_ranks"] == [f"TP{i}" for i in range(8) if i != 4]
