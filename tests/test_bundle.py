"""``logforensics bundle``: one Markdown comment under GitHub's limit, redacted by default."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from logforensics.model.summary import RunSummary
from logforensics.pipeline import diagnose_files, diagnose_runs
from logforensics.render.bundle import LIMIT, non_default_args, render_bundle

ROOT = Path(__file__).resolve().parent.parent
CAPTURE_OOM = ROOT / "fixtures" / "diff" / "custom_ar_pcie_oom"
COLLAPSE = ROOT / "fixtures" / "serving" / "throughput_collapse" / "failing.log"
UNSEEN = ROOT / "fixtures" / "real-unseen"

PRIVATE = """python3 -m sglang.launch_server --model-path /data/models/secret-llama-70b --tp 2 --host 10.20.30.40 --api-key sk-live-9f8e7d6c5b4a3210
[2025-03-08 12:00:01] server_args=ServerArgs(model_path='/data/models/secret-llama-70b', tp_size=2, host='10.20.30.40', port=30000, api_key='sk-live-9f8e7d6c5b4a3210', mem_fraction_static=0.81, log_requests=True)
[2025-03-08 12:00:02 TP0] Load weight begin. avail mem=78.50 GB
[2025-03-08 12:00:02 TP1] Load weight begin. avail mem=78.50 GB
[2025-03-08 12:00:40 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=44.10 GB, mem usage=34.40 GB.
[2025-03-08 12:01:00] Receive: obj=GenerateReqInput(rid='r1', text='my private question about my bank account', sampling_params={'max_new_tokens': 8})
[2025-03-08 12:01:03 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/home/alice/venv/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 2420, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/home/alice/venv/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 661, in event_loop_overlap
    self.process_input_requests(recv_reqs)
RuntimeError: connection to gpu-node-7.ml.svc.cluster.local (10.20.30.41) failed with token=abcdef123456 for text='my private question about my bank account'
"""


def _bundle(path: Path, redact: bool = True) -> tuple[str, RunSummary]:
    d = diagnose_files(str(path), None)
    return render_bundle(d, [("failing", d.failing)], redact=redact), d.failing


def test_bundle_redacts_and_lists_what_it_redacted(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(PRIVATE, encoding="utf-8")
    text, _ = _bundle(log)
    kept, _ = _bundle(log, redact=False)
    for secret in ("alice", "secret-llama-70b", "10.20.30.40", "10.20.30.41", "sk-live-9f8e7d6c5b4a3210",
                   "abcdef123456", "gpu-node-7.ml.svc.cluster.local", "bank account"):
        assert secret in kept, secret  # the bundle shows it ...
        assert secret not in text, secret  # ... unless it is redacted
    tail = text.rsplit("---", 1)[1]
    for kind in ("home directory", "IP address", "API key or token", "hostname", "request text", "model path"):
        assert kind in tail, kind
    # the rest stays readable: the exception, its rank, the setting that differs
    assert "RuntimeError" in text and "| TP0 | serving |" in text and "| tp_size | 2 | 1 |" in text
    assert "12:01:03 TP0" in text  # a time is not an address
    assert "sk-live-9f8e7d6c5b4a3210" in kept and "/data/models/secret-llama-70b" in kept
    assert "Not redacted" in kept


def test_a_traceback_no_line_names_a_rank_for_is_headed_so_not_on_none() -> None:
    """283 starts inside a traceback and 279's first line is a bare traceback header: no line
    names their rank, and the heading says so rather than printing Python's None."""
    for prefix in ("279", "283"):
        [path] = UNSEEN.glob(prefix + "-*.log")
        text, run = _bundle(path)
        assert any(None in (e.ranks or [None]) or not e.ranks for e in run.exceptions)
        assert " on None " not in text
        assert "**traceback cut before its exception** on a process no line names (1 occurrence(s), first at line 1;" in text


DETOKENIZER = """[2025-01-25 21:59:49] DetokenizerManager hit an exception: Traceback (most recent call last):
  File "/sgl/python/sglang/srt/managers/detokenizer_manager.py", line 246, in run_detokenizer_process
    manager.event_loop()
  File "/sgl/python/sglang/srt/managers/detokenizer_manager.py", line 119, in event_loop
    s = self.decode_status[rid]
KeyError: 'a0354f00'
"""


def test_a_traceback_whose_header_names_its_process_is_headed_by_it(tmp_path: Path) -> None:
    """A header names the process ("DetokenizerManager hit an exception") though no rank: the
    heading and the verdict name it, not "a process no line names"."""
    log = tmp_path / "detok.log"
    log.write_text(DETOKENIZER)
    text, _ = _bundle(log)
    assert "**KeyError** on the DetokenizerManager (its line names no rank) (1 occurrence(s), first at line 1;" in text
    assert "the DetokenizerManager (its line names no rank) failed first" in text
    assert "no line names" not in text and "unlabelled" not in text


def test_bundle_content_of_a_capture_oom() -> None:
    text, run = _bundle(CAPTURE_OOM / "failing.log")
    assert len(text) < LIMIT
    assert f"**{run.outcome}**" in text
    assert "phases per rank" in text and "| TP5 |" in text
    exc = run.exceptions[0]
    assert exc.exception and exc.exception in text and ", ".join(str(r) for r in exc.ranks) in text  # the first traceback and its ranks
    assert "memory per rank (GiB" in text
    assert "SGLANG_FORCE_CUSTOM_AR_PCIE=1" in text  # environment
    version, why, diffs = non_default_args(run)
    assert version and diffs
    for name, _, default in diffs[:5]:
        assert f"| {name} |" in text and default in text
    assert "serverargs_defaults" in why


def test_bundle_stays_under_the_limit_and_says_what_it_cut(tmp_path: Path) -> None:
    big = tmp_path / "big.log"
    tb = "".join(f'  File "/x/sglang/srt/m{i}.py", line {i}, in f{i}\n    g{i}()\n' for i in range(400))
    big.write_text("".join(f"[2025-03-08 12:00:{i % 60:02d} TP{i}] Scheduler hit an exception: Traceback "
                           f"(most recent call last):\n{tb}ValueError{i}: broken {i}\n" for i in range(40)),
                   encoding="utf-8")
    text, _ = _bundle(big)
    assert len(text) < LIMIT
    assert "more lines" in text or "cut at" in text


def test_bundle_of_a_serving_collapse_says_what_to_run(tmp_path: Path) -> None:
    out = tmp_path / "issue.md"
    subprocess.run([sys.executable, "-m", "logforensics", "bundle", str(COLLAPSE), "-o", str(out)], check=True,
                   capture_output=True)
    text = out.read_text(encoding="utf-8")
    assert "decode throughput collapsed" in text
    assert "To diagnose further, run with" in text and "--max-running-requests" in text
    assert "alice" not in text and "sk-test-4f9a2c71d0" not in text  # the launch command's path and key


def test_the_host_a_crash_dump_folder_names_is_redacted(tmp_path: Path) -> None:
    """SGLang writes ``<crash-dump-folder>/<host>/crash_dump_<ts>.pkl``: the replay command's
    path names the host, which the bundle replaces as it replaces every other hostname."""
    import pickle

    run = tmp_path / "run"
    (run / "dumps" / "h100-worker-17").mkdir(parents=True)
    (run / "server.log").write_text(PRIVATE, encoding="utf-8")
    dump = {"server_args": {"host": "10.20.30.40", "port": 30000}, "launch_command": "python3 -m sglang.launch_server",
            "requests": [({"rid": "r1"}, {}, 1764900000.0, 1764900001.0)]}
    (run / "dumps" / "h100-worker-17" / "crash_dump_2025-12-05_07-00-00.pkl").write_bytes(pickle.dumps(dump))
    d = diagnose_runs(str(run), None)
    text = render_bundle(d, [("failing", d.failing)], redact=True)
    kept = render_bundle(d, [("failing", d.failing)], redact=False)
    assert "h100-worker-17/crash_dump_2025-12-05_07-00-00.pkl" in kept
    assert "h100-worker-17" not in text
    assert re.search(r"replay_request_dump\.py --input-file \S*/<hostname-\d+>/crash_dump_2025-12-05_07-00-00\.pkl",
                     text)


def test_a_rank_with_no_memory_figure_the_table_shows_gets_no_empty_table(tmp_path: Path) -> None:
    """326: the only memory record is the token budget line, no figure of the GiB table: the
    bundle has no table with a rank column and no other (Markdown that would not render)."""
    [path] = UNSEEN.glob("326-*.log")
    text, run = _bundle(path)
    assert run.memory and "memory per rank" not in text and "| rank |  |" not in text


def test_the_launchers_words_for_a_dead_scheduler_name_it(tmp_path: Path) -> None:
    """'RuntimeError: Rank 0 scheduler died during initialization (exit code: -7)': the
    launcher names the scheduler that died (twelfth round, 345)."""
    log = tmp_path / "died.log"
    log.write_text("RuntimeError: Rank 0 scheduler died during initialization (exit code: -7)\n")
    text, _ = _bundle(log)
    assert "the Rank 0 scheduler failed first" in text and "**RuntimeError** on the Rank 0 scheduler (" in text
    assert "no line names" not in text and "unlabelled" not in text
    [cr01] = [f for f in diagnose_files(str(log), None).findings if f.rule == "CR01"]
    assert "The launcher gives its exit code, -7: it was ended by signal 7 (SIGBUS)." in cr01.explanation
    assert cr01.explanation.startswith("The first fatal error in the failing run is on the Rank 0 scheduler")


def test_lines_rays_de_duplication_left_out_are_said_and_counts_are_at_least(tmp_path: Path) -> None:
    """Ray prints '[repeated 2x across cluster]' for lines it left out: the bundle carries the
    summary's warning, and a traceback's count is a lower bound (real-unseen 363)."""
    text, run = _bundle(next(UNSEEN.glob("363-*.log")))
    assert run.coverage is not None and run.coverage.lines_dropped_by_dedup
    assert "warning: Ray's log de-duplication left out" in text
    assert "(at least 1 occurrence(s), first at line 3" in text
    plain, _ = _bundle(next(UNSEEN.glob("360-*.log")))
    assert "de-duplication" not in plain and "at least" not in plain


def test_where_the_launch_command_is_in_the_log_only_what_it_set_differs_from_the_defaults(tmp_path: Path) -> None:
    """real-unseen 403: a 2025-02 build's own default schedule_policy ('lpm') is no setting of
    the user's, though the defaults table's nearest version (0.4.6) has 'fcfs': the command on
    line 1 does not set it. What the command sets (--tp as tp_size) still differs."""
    _, run = _bundle(next(UNSEEN.glob("403-*.log")))
    version, _, rows = non_default_args(run)
    names = {name for name, _, _ in rows}
    assert "schedule_policy" not in names and {"tp_size", "trust_remote_code"} <= names
