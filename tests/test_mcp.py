"""``logforensics mcp``: the MCP server, driven by the official SDK's real client over stdio.

The server runs as an agent starts it (``python -m logforensics mcp``, a subprocess); the
client lists its tools and calls them on the diff fixtures and a real fleet store. What it
returns must be what the commands' ``--json`` says, paged where long, redacted where asked,
and a bad input must come back as the call's one-line error.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

mcp = pytest.importorskip("mcp")  # the optional extra; the test extra installs it

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "fixtures" / "diff" / "custom_ar_pcie_oom"
CLI = [sys.executable, "-m", "logforensics"]


def _session(calls: list[tuple[str, dict[str, Any]]], *roots: Path,
             options: tuple[str, ...] = ()) -> tuple[list[Any], list[Any]]:
    """The server's tools and the results of ``calls``, in one session of a real client; a
    call named ``append`` writes its ``text`` to its ``path`` instead (a log being written). The
    server may read under the repository and ``roots``; ``options`` are more of its own."""

    async def run() -> tuple[list[Any], list[Any]]:
        allowed = [a for r in (ROOT, *roots) for a in ("--root", str(r))]
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "logforensics", "mcp", *allowed, *options], cwd=str(ROOT))
        async with Client(params) as client:
            tools = (await client.list_tools()).tools
            results = []
            for name, args in calls:
                if name == "append":
                    with open(args["path"], "a") as fh:
                        fh.write(args["text"])
                    continue
                if name == "explain_finding" and args.get("finding_id") == "<first>":
                    args = {"finding_id": results[0].structured_content["findings"][0]["id"]}
                results.append(await client.call_tool(name, args))
            return tools, results

    return asyncio.run(asyncio.wait_for(run(), 240))


def test_the_tools_have_schemas_and_answer_as_the_commands_do(tmp_path: Path) -> None:
    base, fail = str(CASE / "baseline.log"), str(CASE / "failing.log")
    tools, (page1, page2, explained) = _session([
        ("diff_runs", {"baseline": [base], "failing": [fail], "limit": 3}),
        ("diff_runs", {"baseline": [base], "failing": [fail], "offset": 3, "limit": 200}),
        ("explain_finding", {"finding_id": "<first>"}),
    ])
    names = {t.name: t for t in tools}
    assert set(names) == {"summarize_run", "diff_runs", "check_env_diff", "explain_finding", "get_lines",
                          "query_store", "watch_start", "watch_poll", "watch_stop"}
    for t in tools:
        assert t.input_schema["type"] == "object" and t.output_schema and "text" in t.output_schema["properties"]
    assert names["diff_runs"].input_schema["required"] == ["baseline", "failing"]
    out = tmp_path / "d.json"
    subprocess.run(CLI + ["diff", base, fail, "--json", str(out)], capture_output=True, check=False)
    want = json.loads(out.read_text())
    one, two = page1.structured_content, page2.structured_content
    assert not page1.is_error and one["verdict"] == want["verdict"] and one["conclusion"] == want["conclusion"]
    assert one["total"] == len(want["findings"]) and one["next_offset"] == 3 and two["next_offset"] is None
    assert [f["id"] for f in one["findings"] + two["findings"]] == [f["id"] for f in want["findings"]]
    first = explained.structured_content["finding"]
    assert first["id"] == want["findings"][0]["id"] and first["evidence"] == want["findings"][0]["evidence"]
    assert first["explanation"] == want["findings"][0]["explanation"]


def test_get_lines_is_a_bounded_redacted_window(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    lines = [f"[2026-01-01 10:00:{i:02d}] line {i}" for i in range(1, 40)]
    lines[19] = "[2026-01-01 10:00:20] loading /home/alice/models/llama with HF_TOKEN=hf_abcdefghijklmnopqrstuvwx"
    lines[20] = "x" * 100_000
    log.write_text("\n".join(lines) + "\n")
    _, (window, raw, too_wide) = _session([
        ("get_lines", {"path": str(log), "line": 20, "before": 2, "after": 1}),
        ("get_lines", {"path": str(log), "line": 20, "before": 0, "after": 0, "redact": False}),
        ("get_lines", {"path": str(log), "line": 20, "before": 300, "after": 300}),
    ], tmp_path)
    got = window.structured_content["lines"]
    assert [x["line"] for x in got] == [18, 19, 20, 21]
    assert "alice" not in got[2]["text"] and "hf_abcdefghij" not in got[2]["text"] and "line 18" in got[0]["text"]
    assert len(got[3]["text"]) == 4000  # a 100 kB line, cut
    assert "alice" in raw.structured_content["lines"][0]["text"]
    assert too_wide.is_error and "at most 400 lines" in too_wide.content[0].text


def test_bad_inputs_are_one_line_errors(tmp_path: Path) -> None:
    _, (missing, unknown, no_store) = _session([
        ("summarize_run", {"paths": [str(tmp_path / "absent.log")]}),
        ("explain_finding", {"finding_id": "CR01:TP0:-:00000000"}),
        ("query_store", {"store": str(tmp_path / "no-store"), "sql": "select 1"}),
    ], tmp_path)
    for r in (missing, unknown, no_store):
        assert r.is_error and "\n" not in r.content[0].text and "Traceback" not in r.content[0].text
    assert "absent.log" in missing.content[0].text and "call diff_runs first" in unknown.content[0].text


def test_summaries_and_read_only_queries_over_a_real_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "failing.log").write_bytes((CASE / "failing.log").read_bytes())
    scanned = subprocess.run(CLI + ["scan", str(logs), "--store", str(store)], capture_output=True, text=True)
    assert scanned.returncode == 0, scanned.stderr
    _, (summary, rows, refused) = _session([
        ("summarize_run", {"paths": [str(logs / "failing.log")]}),
        ("query_store", {"store": str(store), "sql": "select outcome from runs", "limit": 5}),
        ("query_store", {"store": str(store), "sql": "drop view runs"}),
    ], tmp_path)
    s = summary.structured_content
    assert s["summary"]["outcome"] == "crashed" and s["text"].startswith("crashed: ")
    assert "serving" not in s["summary"]  # the brief form; full=true has everything
    assert rows.structured_content["rows"] == [{"outcome": "crashed"}]
    assert refused.is_error


def test_a_live_follow_reports_only_what_is_new(tmp_path: Path) -> None:
    text = (CASE / "failing.log").read_text()
    lines = text.splitlines(keepends=True)
    crash = next(i for i, line in enumerate(lines) if "Scheduler hit an exception" in line)
    log = tmp_path / "server.log"
    log.write_text("".join(lines[:crash - 5]))
    _, (started, first, quiet, second, stopped, gone) = _session([
        ("watch_start", {"path": str(log)}),
        ("watch_poll", {"watch_id": "w1"}),
        ("watch_poll", {"watch_id": "w1"}),
        ("append", {"path": str(log), "text": "".join(lines[crash - 5:])}),
        ("watch_poll", {"watch_id": "w1"}),
        ("watch_stop", {"watch_id": "w1"}),
        ("watch_poll", {"watch_id": "w1"}),
    ], tmp_path)
    assert started.structured_content["watch_id"] == "w1"
    one, two, three = first.structured_content, quiet.structured_content, second.structured_content
    assert one["outcome"] == "incomplete" and one["phase_changes"] and one["bytes_read"] > 0
    assert two["phase_changes"] == [] and two["new_findings"] == [] and not two["outcome_changed"]
    assert three["outcome"] == "crashed" and three["outcome_changed"]
    assert {f["rule"] for f in three["new_findings"]} >= {"CR01"}
    assert not {f["id"] for f in three["new_findings"]} & {f["id"] for f in one["new_findings"]}
    assert stopped.structured_content["outcome"] == "crashed"
    assert gone.is_error and "no follow" in gone.content[0].text


def test_paths_outside_the_roots_are_refused(tmp_path: Path) -> None:
    """Started with --root for the repository and one folder: a log elsewhere, a link out of
    the folder and standard input are refused, for every tool that reads."""
    inside = tmp_path / "inside"
    inside.mkdir()
    outside = tmp_path / "secret.log"
    outside.write_text("[2026-01-01 10:00:00] The server is fired up and ready to roll!\n")
    (inside / "link.log").symlink_to(outside)
    (inside / "own.log").write_text(outside.read_text())
    calls = [("summarize_run", {"paths": [str(outside)]}),
             ("diff_runs", {"baseline": [str(CASE / "baseline.log")], "failing": [str(outside)]}),
             ("get_lines", {"path": str(outside), "line": 1}),
             ("watch_start", {"path": str(outside)}),
             ("query_store", {"store": str(tmp_path), "sql": "select 1"}),
             ("summarize_run", {"paths": [str(inside / "link.log")]}),
             ("summarize_run", {"paths": ["-"]}),
             ("summarize_run", {"paths": [str(inside / "own.log")]})]
    _, results = _session(calls, inside)
    for r in results[:-1]:
        assert r.is_error, r
    assert all("outside the directories" in r.content[0].text for r in results[:6])
    assert "standard input" in results[6].content[0].text
    assert not results[-1].is_error and results[-1].structured_content["summary"]["outcome"] == "ready"


ARTEFACTS = ROOT / "fixtures" / "artefacts"


def test_check_env_diff_gives_each_fact_with_both_values_and_lines(tmp_path: Path) -> None:
    """Two run directories, each a log and a real check_env beside it (an NVLink H100 box and a
    PCIe Quadro box), and explicit files: what differs, with both values and file:line; what
    is equal; what one side lacks; a side with no environment is a one-line error."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    for run, env in ((good, "check_env-h100x8-nvlink-nv18-spaces.txt"),
                     (bad, "check_env-quadro-rtx6000x8-pcie-pix-pxb-partial.txt")):
        (run / "logs").mkdir(parents=True)
        (run / "server.log").write_bytes((CASE / "baseline.log").read_bytes())
        (run / "logs" / "env.txt").write_bytes((ARTEFACTS / env).read_bytes())
    smi = ARTEFACTS / "nvidia-smi-h200-sglang-memory-used-partial.txt"
    _, (dirs, files, none) = _session([
        ("check_env_diff", {"baseline": [str(good)], "failing": [str(bad)]}),
        ("check_env_diff", {"baseline": [str(good / "logs" / "env.txt")], "failing": [str(smi)]}),
        ("check_env_diff", {"baseline": [str(good)], "failing": [str(bad / "server.log")]}),
    ], tmp_path)
    out = dirs.structured_content
    assert not dirs.is_error, dirs
    differs = {d["key"]: d for d in out["differs"]}
    topo = differs["topology"]
    assert topo["baseline"]["value"] == "NVLink (NV18)" and topo["failing"]["value"] == "PCIe only (PIX, PXB)"
    assert topo["baseline"]["where"] == f"{good / 'logs' / 'env.txt'}:42"
    assert topo["failing"]["where"] == f"{bad / 'logs' / 'env.txt'}:40"
    assert differs["sglang"]["baseline"]["value"] == "0.5.14" and differs["sglang"]["failing"]["value"] == "0.4.9"
    assert {d["key"] for d in out["same"]} == {"gpu_count"}
    one = {d["key"]: d for d in out["one_side"]}
    assert one["sgl_kernel"]["baseline"] is None and one["sgl_kernel"]["failing"]["value"] == "0.2.4"
    assert one["ulimit_soft"]["failing"] is None
    assert out["baseline_files"] == {str(good / "logs" / "env.txt"): "check_env"}
    assert out["text"].startswith(f"{len(out['differs'])} fact(s) differ: ")
    assert not files.is_error and files.structured_content["differs"]  # explicit files, two forms
    assert {d["key"] for d in files.structured_content["differs"]} >= {"driver"}
    assert none.is_error and "\n" not in none.content[0].text
    assert "failing: no environment among 0 file(s)" in none.content[0].text


def _big_log(path: Path, decode_lines: int) -> Path:
    """A real ready run (the fixture's baseline) that then serves for ``decode_lines`` lines."""
    line = ("[2026-03-10 09:18:46 TP0] Decode batch, #running-req: 1, #token: 614, token usage: 0.00, "
            "cuda graph: True, gen throughput (token/s): 89.55, #queue-req: 0\n")
    with path.open("w") as fh:
        fh.write((CASE / "baseline.log").read_text())
        for _ in range(decode_lines // 10_000):
            fh.write(line * 10_000)
    return path


def test_a_call_over_the_time_bound_is_stopped_and_the_server_goes_on(tmp_path: Path) -> None:
    """--timeout 3: comparing a run of eight 50 MB logs with another takes far longer, and a
    query over a cross join of 10^10 rows longer still: each call is stopped with a one-line
    error, and the calls after them in the same session are answered."""
    store = tmp_path / "store"
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "failing.log").write_bytes((CASE / "failing.log").read_bytes())
    scanned = subprocess.run(CLI + ["scan", str(logs), "--store", str(store)], capture_output=True, text=True)
    assert scanned.returncode == 0, scanned.stderr
    big = _big_log(tmp_path / "node0.log", 330_000)
    for n in range(1, 16):  # one file on disk, read as sixteen nodes
        (tmp_path / f"node{n}.log").symlink_to(big)
    nodes = [str(tmp_path / f"node{n}.log") for n in range(16)]
    endless = "select sum(a.range * b.range) from range(100000) a, range(100000) b"
    try:
        _, (slow, small, query, again) = _session([
            ("diff_runs", {"baseline": nodes[:8], "failing": nodes[8:]}),
            ("summarize_run", {"paths": [str(CASE / "failing.log")]}),
            ("query_store", {"store": str(store), "sql": endless}),
            ("diff_runs", {"baseline": [str(CASE / "baseline.log")], "failing": [str(CASE / "failing.log")]}),
        ], tmp_path, options=("--timeout", "3"))
    finally:
        big.unlink()
    for r in (slow, query):
        assert r.is_error and "\n" not in r.content[0].text
        assert "stopped after 3 s, the time bound of a call (--timeout)" in r.content[0].text
    assert not small.is_error and small.structured_content["summary"]["outcome"] == "crashed"
    assert not again.is_error and again.structured_content["findings"]


def test_results_over_the_output_bound_are_cut_and_say_so(tmp_path: Path) -> None:
    """--max-output 6000: a full summary is cut, each cut named; a page of findings is cut
    and its next_offset moved back to the first finding left out, which the next page starts with."""
    base, fail = str(CASE / "baseline.log"), str(CASE / "failing.log")
    _, (page, rest, small, summary) = _session([
        ("diff_runs", {"baseline": [base], "failing": [fail], "limit": 200}),
        ("diff_runs", {"baseline": [base], "failing": [fail], "offset": 1, "limit": 200}),
        ("explain_finding", {"finding_id": "<first>"}),
        ("summarize_run", {"paths": [fail], "full": True}),
    ], options=("--max-output", "6000"))
    s = summary.structured_content
    assert s["truncated"] and all(" kept" in t for t in s["truncated"])
    assert s["text"].endswith("(cut to fit 6000 characters: see truncated)")
    assert len(json.dumps(s, ensure_ascii=False)) <= 6000 + 200  # the note about the cut itself
    one = page.structured_content
    kept = len(one["findings"])
    assert 0 < kept < one["total"] and one["next_offset"] == kept
    assert f"findings: {kept} of {one['total']} items kept, the rest from next_offset" in one["truncated"]
    assert rest.structured_content["offset"] == 1 and rest.structured_content["findings"][0]["id"] != \
        one["findings"][0]["id"]
    assert not small.is_error and small.structured_content["truncated"] == []


def test_a_poll_reads_what_its_time_allows_and_the_next_goes_on(tmp_path: Path) -> None:
    """--timeout 0.5: a follow of a 30 MB log reads for a quarter of a second a poll, says
    where it stopped, and the next poll goes on from there."""
    big = _big_log(tmp_path / "server.log", 200_000)
    size = big.stat().st_size
    try:
        _, (_, first, second) = _session([
            ("watch_start", {"path": str(big)}),
            ("watch_poll", {"watch_id": "w1"}),
            ("watch_poll", {"watch_id": "w1"}),
        ], tmp_path, options=("--timeout", "0.5"))
    finally:
        big.unlink()
    one, two = first.structured_content, second.structured_content
    assert not first.is_error and one["more_to_read"] and 0 < one["bytes_read"] < size
    assert any(n.startswith("stopped reading after 0.25 s (half the call's --timeout) at byte "
                            f"{one['bytes_read']}") for n in one["notes"])
    assert two["bytes_read"] > one["bytes_read"] and two["outcome"] == "ready"


def _ssh_options(server: Any, known_hosts: Path | None = None) -> tuple[str, ...]:
    return ("--hosts", server.host, "--port", str(server.port), "--user", server.user, "-i", str(server.client_key),
            "--known-hosts", str(known_hosts or server.known_hosts))


def test_host_paths_are_read_over_ssh_from_allowed_hosts_only(tmp_path: Path, sshd_server: Any) -> None:
    """A real sshd on 127.0.0.1 (--hosts 127.0.0.1): a run given as HOST:PATH is summarised,
    diffed and shown as the same files read locally would be, every file name in the answer
    the HOST:PATH given; another host, and a path the host lacks, are one-line errors."""
    far = tmp_path / "on-the-host"  # not under any --root: only SSH reaches it
    far.mkdir()
    for name in ("baseline.log", "failing.log"):
        (far / name).write_bytes((CASE / name).read_bytes())
    host = sshd_server.host
    base, fail = f"{host}:{far / 'baseline.log'}", f"{host}:{far / 'failing.log'}"
    _, (summary, diff, lines, local, other, missing, outside) = _session([
        ("summarize_run", {"paths": [fail]}),
        ("diff_runs", {"baseline": [base], "failing": [fail], "limit": 200}),
        ("get_lines", {"path": fail, "line": 80, "before": 0, "after": 0, "redact": False}),
        ("diff_runs", {"baseline": [str(CASE / "baseline.log")], "failing": [str(CASE / "failing.log")],
                       "limit": 200}),
        ("summarize_run", {"paths": [f"gpu-box-3:{far / 'failing.log'}"]}),
        ("summarize_run", {"paths": [f"{host}:{far / 'absent.log'}"]}),
        ("summarize_run", {"paths": [str(far / "failing.log")]}),
    ], options=_ssh_options(sshd_server))
    s = summary.structured_content
    assert not summary.is_error, summary.content[0].text
    assert s["summary"]["outcome"] == "crashed" and s["summary"]["file"] == fail
    assert s["summary"]["crash"]["file"] == fail and s["summary"]["crash"]["line"] == 80
    d, want = diff.structured_content, local.structured_content
    assert [f["id"] for f in d["findings"]] == [f["id"] for f in want["findings"]]
    files = {e["file"] for f in d["findings"] for e in f["evidence"]}
    assert files and files <= {base, fail}
    assert "logforensics-call-" not in json.dumps(d)
    got = lines.structured_content
    assert got["file"] == fail and "Scheduler hit an exception" in got["lines"][0]["text"]
    assert other.is_error and "host gpu-box-3 is not one this server may read over SSH (--hosts 127.0.0.1)" \
        in other.content[0].text
    assert missing.is_error and "absent.log: No such file or directory" in missing.content[0].text
    assert outside.is_error and "outside the directories" in outside.content[0].text


def test_host_keys_are_checked_as_watch_checks_them(tmp_path: Path, sshd_server: Any) -> None:
    """An empty known_hosts: the host is unknown and refused; a known_hosts with another key
    for it: the change is refused; neither reads the file."""
    log = tmp_path / "failing.log"
    log.write_bytes((CASE / "failing.log").read_bytes())
    unknown = tmp_path / "known_hosts_empty"
    unknown.write_text("")
    changed = tmp_path / "known_hosts_changed"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = " ".join((tmp_path / "other.pub").read_text().split()[:2])
    changed.write_text(f"[{sshd_server.host}]:{sshd_server.port} {other}\n")
    remote = f"{sshd_server.host}:{log}"
    _, (first,) = _session([("summarize_run", {"paths": [remote]})], options=_ssh_options(sshd_server, unknown))
    _, (second,) = _session([("summarize_run", {"paths": [remote]})], options=_ssh_options(sshd_server, changed))
    assert first.is_error and f"is not in {unknown}" in first.content[0].text
    assert second.is_error and "HOST KEY CHANGED" in second.content[0].text
    assert unknown.read_text() == ""  # nothing learned without --accept-new-host-key
