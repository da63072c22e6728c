"""What ``diff`` says of real pairs where it once said more than the two logs show.

Each test reads a real pair of ``fixtures/real-pairs`` and checks one sentence of the
diagnosis against the lines it rests on; the synthetic logs check the same rule apart
from the pair it was found on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from logforensics.pipeline import diagnose_files, summarize_file

PAIRS = Path(__file__).resolve().parent.parent / "fixtures" / "real-pairs"


def _diff(prefix: str):  # type: ignore[no-untyped-def]
    case = next(PAIRS.glob(prefix + "-*"))
    return diagnose_files(str(case / "failing.log"), str(case / "baseline.log"))


def test_builds_that_differ_make_changed_values_no_setting_to_set_back() -> None:
    """Two nightly images: the failing build's server_args has fields the other lacks, and two
    values differ that neither launch command shows being set (a build's defaults). Nothing on
    the failing side ties them to its GPU memory fault, so the next step tells the build from
    the settings instead of setting them back."""
    d = _diff("033")
    assert d.facts.config.build_fields and d.conclusion.explanation is None
    step = d.conclusion.next_step or ""
    assert "set back" not in step
    assert step.startswith("the builds differ") and "mamba_full_memory_ratio" in step and "watchdog_timeout" in step


def test_a_budget_term_is_compared_over_the_ranks_both_logs_show() -> None:
    """The baseline's build prints 'Load weight begin' on TP0 only, the failing one on all
    eight: P_min is TP0's against TP0's (189.19 GiB in both), not TP0's against eight ranks' least."""
    d = _diff("034")
    terms = {t.term: t for t in d.facts.budget_terms}
    p = terms["p_min"]
    assert (p.baseline, p.failing, p.changed) == (189.19, 189.19, False)
    assert p.note.startswith("over TP0:")
    assert not terms["reserved_headroom"].changed
    assert d.facts.budget.failing.p_min is not None and d.facts.budget.failing.p_min < 189.19  # the eight ranks' least


def test_a_rank_whose_last_line_ends_its_capture_stopped_after_it() -> None:
    d = _diff("036")
    row = d.facts.alignment.ranks["TP1"]
    assert row.failing_phase == "cuda_graph_capture"
    assert row.failing_left == "after cuda_graph_capture (Capture cuda graph end, line 257)"
    al01 = next(f for f in d.findings if f.rule == "AL01")
    assert "TP1: the baseline's log shows it up to serving; in the failing run it stopped after cuda_graph_capture" \
        in al01.explanation


def test_the_http_server_that_cannot_bind_fails_first() -> None:
    """uvicorn cannot listen on the port (another process holds it); the warm-up request then
    times out: the bind failure is what happened first, the timeout follows it."""
    d = _diff("036")
    assert d.conclusion.first is not None
    assert d.conclusion.first.startswith("the HTTP server failed first")
    assert "address already in use" in d.conclusion.first and "(then requests.exceptions.ReadTimeout)" in d.conclusion.first


def test_a_bind_failure_is_a_fatal_record_and_other_uvicorn_errors_are_not(tmp_path: Path) -> None:
    head = ("[2025-11-17 17:12:42] INFO:     Started server process [106795]\n"
            "[2025-11-17 17:12:42] INFO:     Application startup complete.\n")
    bound = tmp_path / "bind.log"
    bound.write_text(head + "[2025-11-17 17:12:42] ERROR:    [Errno 98] error while attempting to bind on address "
                     "('0.0.0.0', 30000): address already in use\n")
    s = summarize_file(bound)
    assert s.outcome == "crashed" and s.crash is not None
    assert s.crash.line == 3 and "address already in use" in (s.crash.message or "")
    other = tmp_path / "other.log"
    other.write_text(head + "[2025-11-17 17:12:42] ERROR:    Exception in ASGI application\n")
    assert summarize_file(other).crash is None


def test_an_address_another_process_holds_is_the_explanation() -> None:
    """The bind failure names the address; a request to it that gets no answer corroborates
    that something else listens there: the explanation, with the address to free."""
    d = _diff("036")
    assert d.conclusion.rule == "CR02" and d.conclusion.confidence == "high"
    assert d.conclusion.explanation == "another process held 127.0.0.1:30000, which the HTTP server could not bind"
    assert (d.conclusion.next_step or "").startswith("stop the process holding 127.0.0.1:30000")


def test_the_address_in_use_in_its_message_forms() -> None:
    from logforensics.diagnose.crash import address_in_use

    assert address_in_use("[Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
                          "address already in use") == "0.0.0.0:8000"
    assert address_in_use(None, "Address already in use (addr='tcp://127.0.0.1:5757')") == "tcp://127.0.0.1:5757"
    assert address_in_use("OSError: [Errno 98] Address already in use") == "an address"
    assert address_in_use("Connection refused", None) is None


def test_a_failure_placed_in_a_phase_its_rank_printed_the_end_of_came_after_that_end() -> None:
    """Every rank printed 'Memory pool end'; then TP5 ran out of memory setting up the attention
    backend, which SGLang's same start-up step runs after the pool: after the pool's end line,
    in init_attention_backend; not 'during kv_cache_alloc'."""
    d = _diff("037")
    assert d.conclusion.first is not None
    assert "after kv_cache_alloc (Memory pool end, line 307), in init_attention_backend" in d.conclusion.first
    assert "during kv_cache_alloc" not in d.verdict


def test_a_launcher_that_failed_importing_its_code_lacks_no_start_of_the_log() -> None:
    """The file begins at the process's start; it died importing sglang, before any settings
    were printed: asking for 'the start of the log (server_args)' asks for lines that never were."""
    d = _diff("039")
    assert not any("the start of the log" in c for c in d.conclusion.collect)


def test_a_log_whose_process_ended_in_it_has_no_rest_to_collect() -> None:
    """The failing file ends with Python's resource_tracker warnings at shutdown: the process
    ended there; what is missing is why, the record of its end outside the log."""
    d = _diff("040")
    assert d.failing.outcome == "incomplete"
    assert not any(c.startswith("the rest of the log") for c in d.conclusion.collect)
    assert any(c.startswith("the record of the process's end outside the log") for c in d.conclusion.collect)


def test_of_several_settings_that_bring_in_the_failing_part_the_one_the_frames_name() -> None:
    """Seven settings changed; two bring in the attention backend the failing frames are in,
    and the frames name one's new value ('_forward_flashmla_kv': nsa_decode_backend ->
    flashmla_kv), which is the one tied to the failure."""
    d = _diff("041")
    assert d.conclusion.rule == "CFG04"
    assert [x.key for x in d.facts.config.in_component] == ["nsa_decode_backend"]
    assert "nothing in the failing log ties" not in d.verdict


def test_turning_graphs_on_is_tied_to_a_failure_in_their_capture() -> None:
    """The one change turns CUDA graphs on (disable_cuda_graph True -> False); the failing run
    fails capturing them, a phase only that setting runs."""
    d = _diff("042")
    assert d.conclusion.rule == "CFG03" and d.conclusion.confidence == "low"
    assert "disable_cuda_graph changed (True -> False) and acts on cuda_graph_capture" in (d.conclusion.explanation or "")


def test_python_that_cannot_find_the_module_to_run_is_the_launcher_s_failure() -> None:
    """'python: Error while finding module specification for 'sglang.launch_server'
    (ModuleNotFoundError: ...)' is the whole failing log: the launcher failed before any of
    SGLang ran; what to collect is the Python it ran, not the rest or the start of the log."""
    d = _diff("044")
    assert d.failing.outcome == "crashed" and d.failing.crash is not None
    assert (d.failing.crash.exception, d.failing.crash.message) == ("ModuleNotFoundError", "No module named 'sglang'")
    assert d.conclusion.first is not None and d.conclusion.first.startswith("the launcher failed first, before any")
    assert [c.split(" (")[0] for c in d.conclusion.collect][:1] == ["the Python the command ran and what it has installed"]
    assert not any("the start of the log" in c or "the rest of the log" in c for c in d.conclusion.collect)


def test_a_later_rank_that_ran_out_of_memory_failed_on_its_own() -> None:
    """DP1 TP1 raised first (unbalanced memory); DP0 TP0's own traceback is an out-of-memory
    error in building the model, while another process held its GPU: not a rank that failed
    because the first one left the collective."""
    d = _diff("043")
    assert d.facts.crash is not None
    assert d.facts.crash.later_own == ("DP0 TP0: torch.OutOfMemoryError (out of memory), line 66",)
    cr01 = next(f for f in d.findings if f.rule == "CR01")
    assert "usually fail because the first one left the collective" not in cr01.explanation
    assert "A later one failed on its own: DP0 TP0: torch.OutOfMemoryError (out of memory), line 66" in cr01.explanation


def test_sglang_s_own_wait_for_a_port_another_process_holds() -> None:
    """The launcher waits for its base port, then raises 'port_base at 8234 is not available in
    30 seconds. port_base is used by a process already': the launcher's own phase (it never
    printed its server arguments), explained by the port another process holds."""
    d = _diff("048")
    assert d.failing.crash is not None and d.failing.crash.phase == "launch"
    assert d.conclusion.rule == "CR02"
    assert d.conclusion.explanation == "another process held port 8234, which the launcher could not bind"
    assert not any("the start of the log" in c for c in d.conclusion.collect)


def test_a_later_rank_that_could_not_bind_failed_on_its_own() -> None:
    d = _diff("046")
    assert d.facts.crash is not None
    assert d.facts.crash.later_own == ("DP0 TP0: RuntimeError (an address in use), line 166",)


def test_a_later_rank_that_could_not_bind_the_store_explains_its_peers_failures() -> None:
    """DP1 TP1's store client fails first in init_distributed (torch logs 'recvValue failed' and
    rethrows), DP6 TP6 next ('Ping failed, invalid nonce returned'), DP0 TP0 after them: its store 'failed to listen ... port: 30238 ... EADDRINUSE'. The
    peers reached the process that held the port: the address in use is the explanation, cited at
    DP0 TP0's line, and the next step names the store's port, not the HTTP one."""
    d = _diff("046")
    c = d.facts.crash
    assert c is not None and (c.address_in_use, c.bind_failed) == ("port 30238", "DP0 TP0")
    assert c.bind_at is not None and c.bind_at.line == 198
    assert d.conclusion.rule == "CR02"
    assert d.conclusion.explanation == ("another process held port 30238, which DP0 TP0 could not bind (RuntimeError: "
                                        "address already in use, line 198), after DP1 TP1 had failed in init_distributed")
    assert "--nccl-port" in (d.conclusion.next_step or "")
    cr02 = next(f for f in d.findings if f.rule == "CR02")
    assert any(e["line"] == 198 and e["rank"] == "DP0 TP0" for e in cr02.evidence)


_STORE_PEER = """[2025-10-19 00:51:18 TP1] Init torch distributed begin.
[2025-10-19 00:51:18 TP0] Init torch distributed begin.
[2025-10-19 00:51:20 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/distributed/parallel_state.py", line 1440, in init_distributed_environment
    torch.distributed.init_process_group(
RuntimeError: nonce == returnedNonce INTERNAL ASSERT FAILED at "/app/pytorch/torch/csrc/distributed/c10d/TCPStore.cpp":405, please report a bug to PyTorch. Ping failed, invalid nonce returned
[2025-10-19 00:51:21 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/distributed/parallel_state.py", line 1440, in init_distributed_environment
    torch.distributed.init_process_group(
"""


def test_a_peer_of_a_store_that_could_not_listen_is_explained_by_the_port(tmp_path: Path) -> None:
    """torch's TCPStore words (TCPStore.cpp): a later rank's 'failed to listen ... port: N ... EADDRINUSE'
    in the first failure's phase explains it; not where the later rank ran out of memory, nor
    where the first failure is its own (an out-of-memory error)."""
    fail = tmp_path / "store.log"
    fail.write_text(_STORE_PEER + "RuntimeError: The server socket has failed to listen on any local network "
                    "address. port: 30238, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use\n")
    d = diagnose_files(str(fail), None)
    assert d.facts.crash is not None and d.facts.crash.bind_failed == "TP0"
    assert d.conclusion.rule == "CR02" and "port 30238" in (d.conclusion.explanation or "")
    other = tmp_path / "other.log"
    other.write_text(_STORE_PEER + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    d = diagnose_files(str(other), None)
    assert d.facts.crash is not None and d.facts.crash.address_in_use is None and d.facts.crash.bind_failed is None
    own = tmp_path / "own.log"
    own.write_text(_STORE_PEER.replace(
        "RuntimeError: nonce == returnedNonce", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. x")
        + "RuntimeError: The server socket has failed to listen on any local network address. port: 30238, "
        "useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use\n")
    d = diagnose_files(str(own), None)
    assert d.facts.crash is not None and d.facts.crash.is_oom and d.facts.crash.bind_failed is None


def test_uvicorn_shutting_down_before_readiness_then_a_failed_warm_up_is_no_stop() -> None:
    """uvicorn logs 'Shutting down' a second after it started, with no signal in the log; the
    launcher's warm-up request is then refused for two minutes and fails: the run crashed in its
    warm-up, it was not stopped."""
    d = _diff("045")
    assert d.failing.outcome == "crashed" and d.failing.stopped is None
    assert d.conclusion.first is not None and d.conclusion.first.startswith("the launcher's warm-up failed first")
    assert "requests.exceptions.ConnectionError" in d.conclusion.first


def test_the_same_deployment_split_another_way_is_another_parallel_layout() -> None:
    """Both logs show the same model; only TP and DP sizes differ (043, 047): another parallel
    layout of that deployment, whose per-rank figures are not compared, not 'another setup'; the
    verdict names each size by the setting that sets it (070's label: ``dp_size``). A model one
    log does not show leaves the setup unknown (test_diff_real's 052 against 032)."""
    for pair in ("043", "047"):
        d = _diff(pair)
        assert d.facts.setup.layout_only
        assert "another parallel layout (tp_size 4 vs 2; dp_size 4 vs 2)" in d.verdict
        assert "not the same setup" not in d.verdict
        su = next(f for f in d.findings if f.rule == "SU01")
        assert su.title.startswith("another parallel layout: TP size 4 vs 2")


def test_a_one_node_run_s_silent_ranks_ask_for_no_other_node_s_log() -> None:
    """server_args says nnodes=1: the ranks the failing log does not show wrote to it and
    printed nothing; there is no other node whose log to collect (051)."""
    case = next(PAIRS.glob("051-*"))
    out = subprocess.run([sys.executable, "-m", "logforensics", "diff", "--json", "-", str(case / "baseline.log"),
                          str(case / "failing.log")], capture_output=True, text=True, check=False)
    collect = json.loads(out.stdout)["conclusion"]["collect"]
    assert collect and not any("the other node's log" in c for c in collect)


def test_a_probe_answered_is_no_generation_request_answered() -> None:
    """The launcher's /get_model_info probe is answered (line 231) before TP2 fails in its event
    loop: no generation request had been answered, which is what the verdict says (052)."""
    d = _diff("052")
    assert "in the event loop with no generation request answered yet" in d.verdict
    assert "with no request answered yet" not in d.verdict


def test_which_request_a_batch_before_readiness_served_is_not_said() -> None:
    """Two prefill batches in flight before readiness (075): the launcher sends its warm-up then,
    but the log does not say which request the failing batch served, nor that the warm-up came first."""
    d = _diff("075")
    assert "which request the failing batch served is not in this log" in d.verdict
    assert "is the first it serves" not in d.verdict


def test_a_setting_acts_on_no_throughput_where_the_failing_run_printed_no_batch() -> None:
    """A hang before any batch (049): disable_cuda_graph changed, but no throughput exists to
    have slowed down, so CFG03 does not link it there."""
    d = _diff("049")
    assert d.failing.outcome == "hung"
    assert "CFG03" not in {f.rule for f in d.findings}


def test_a_record_the_first_rank_alone_prints_puts_no_other_rank_behind() -> None:
    """TP0 alone prints the pool-size line ('max_total_num_tokens=...'); every rank's watchdog
    fires at the same second (049): no rank fell behind the others, the watchdog fired on all."""
    d = _diff("049")
    assert d.facts.hang.silent_ranks == ()
    hg01 = next(f for f in d.findings if f.rule == "HG01")
    assert hg01.title == "the failing run hung: a watchdog fired on TP0, TP1, TP2, TP3"


def test_a_pd_prefill_server_is_not_behind_a_decode_server_that_captured_graphs() -> None:
    """A prefill server captures no decode graphs: the decode node's 'Capture cuda graph end'
    puts the prefill node behind nothing (nodes are compared with nodes of their own role)."""
    from logforensics.pipeline import diagnose_runs

    run = Path(__file__).resolve().parent.parent / "fixtures" / "multinode" / "pd_kv_timeout" / "run"
    d = diagnose_runs(str(run), None)
    assert set(d.failing.nodes) >= {"prefill", "decode"}
    assert "HG02" in {f.rule for f in d.findings}  # (the KV transfer timeout the fixture holds)
    assert "ND02" not in {f.rule for f in d.findings}


_TITLED_STACK = """[2025-10-19 00:51:18 TP1] Init torch distributed begin.
[2025-10-19 00:51:18 TP0] Init torch distributed begin.
[W1019 00:51:18.945707540 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=50, addr=[localhost]:50382, remote=[localhost]:30238): failed to recv, got 0 bytes
Exception raised from recvBytes at /app/pytorch/torch/csrc/distributed/c10d/Utils.hpp:671 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0xac (0x7f7883261c0c in /usr/local/lib/python3.12/dist-packages/torch/lib/libc10.so)
frame #1: c10d::TCPStore::ping() + 0x9d (0x7f78c5db954d in /usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cpu.so)
frame #2: sglang::scheduler_TP1() [0x5789ad]
frame #3: _PyObject_MakeTpCall + 0x2db (0x54816b in sglang::scheduler_TP1)
[2025-10-19 00:51:18 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/distributed/parallel_state.py", line 1440, in init_distributed_environment
    torch.distributed.init_process_group(
RuntimeError: nonce == returnedNonce INTERNAL ASSERT FAILED at "/app/pytorch/torch/csrc/distributed/c10d/TCPStore.cpp":405, please report a bug to PyTorch. Ping failed, invalid nonce returned
"""


def test_a_cpp_stack_is_the_rank_its_process_title_names(tmp_path: Path) -> None:
    """torch's c10d record above a C++ stack names no rank; a frame of the process's own program
    carries SGLang's process title (sglang::scheduler_TP1): the record is TP1's, and another rank's
    Python exception after it is not called what TP1 raised."""
    log = tmp_path / "titled.log"
    log.write_text(_TITLED_STACK)
    s = summarize_file(str(log))
    assert s.crash is not None and s.crash.first_rank == "TP1" and s.crash.line == 3
    assert s.crash.rank_inferred_from == "process_title"
    assert s.crash.exception is None and "recvBytes" in (s.crash.message or "")
    assert s.crash.ranks == ["TP1", "TP0"]
    log.write_text(_TITLED_STACK.replace("sglang::scheduler_TP1", "python3"))  # no title: no rank
    s = summarize_file(str(log))
    assert s.crash is not None and s.crash.rank_inferred_from != "process_title" and s.crash.first_rank == "TP0"


def test_the_http_server_s_health_check_names_no_rank_and_the_watchdog_after_it_does() -> None:
    """056: 'Health check failed ... detokenizer' (the HTTP server's, no rank) fires first, the
    scheduler watchdog on TP1-TP3 three minutes later: the ranks are the watchdog's, said so."""
    d = _diff("056")
    t = d.facts.timer
    assert t.timer == "health_check" and t.then_timer is not None and t.then_timer.startswith("SGLang's scheduler watchdog")
    hg02 = next(f for f in d.findings if f.rule == "HG02")
    assert "SGLANG_HEALTH_CHECK_TIMEOUT); then SGLang's scheduler watchdog" in hg02.title
    assert hg02.title.endswith("on TP1, TP2, TP3")


def test_torch_s_global_rank_prefix_is_the_tp_rank_though_a_group_names_the_same_number() -> None:
    """055: '[rank2]:[E...] [Rank 2] Watchdog caught collective operation timeout' in a TP4 run whose
    'terminate ... [PG ID 2 PG GUID 3 Rank 2]' names rank 2 of process group 2 too: torch's prefix
    is the global rank, TP2, and the hang came during serving (the run was ready and answered)."""
    d = _diff("055")
    assert d.failing.hang is not None and d.failing.hang.ranks == ["TP0", "TP1", "TP2", "TP3"]
    assert d.facts.hang.phase == "serving"
    assert "the failing run hung during serving" in d.verdict


def test_a_line_that_differs_only_by_its_request_id_is_not_new() -> None:
    """056: 'End of prefill disaggregation mode warmup with status 200, resp: [{... 'id':
    '676a5243...'}]' is in the baseline too, with another request id (uuid4().hex, its digits
    masked in the shape): not a line only the failing run printed."""
    d = _diff("056")
    nv01 = next(f for f in d.findings if f.rule == "NV01")
    assert "End of prefill disaggregation mode warmup" not in nv01.explanation
    assert "RoPE cache reserve" in nv01.explanation


def test_the_same_checkpoint_read_from_another_directory_is_no_setting_to_set_back() -> None:
    """058: model_path, tokenizer_path and served_model_name moved from /mnt/raid/models/huggingface/
    meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8 to /data/models/meta-llama/<the same name>, and
    the failure is an attribute SGLang's CustomAllreduce lacks: the next step does not ask to set the
    paths back one at a time; settings that changed besides them still would be."""
    d = _diff("058")
    assert set(d.facts.config.changed_keys) == {"model_path", "served_model_name", "tokenizer_path"}
    step = d.conclusion.next_step or ""
    assert "set back" not in step and step.startswith("collect ")


def test_a_first_record_that_names_no_rank_is_not_said_to_be_the_next_named_rank_s() -> None:
    """053: the HSA fault names 'GPU node-6', an agent, and its process aborts; TP2's traceback 45 s
    later is another process's: the explanation says the first error is on a process its line does
    not name, not on TP2."""
    d = _diff("053")
    cr01 = next(f for f in d.findings if f.rule == "CR01")
    assert "is on a process its line does not name (TP2's record follows at line 497)" in cr01.explanation
    assert "is on TP2" not in cr01.explanation


def test_a_traceback_through_torch_compile_ties_the_setting_that_turned_it_on() -> None:
    """061: enable_torch_compile False -> True among four changed settings, and the failing traceback
    runs through torch._dynamo's eval_frame and torch._inductor: torch.compile, which runs only where
    it is asked for; the change is tied to the failure, the others are not."""
    d = _diff("061")
    assert d.failing.crash is not None
    assert [x.key for x in d.facts.config.in_component] == ["enable_torch_compile"]
    assert d.conclusion.rule == "CFG04"
    assert "in torch.compile (eval_frame.py" in (d.conclusion.first or "")


def test_torch_compile_s_frames_are_a_part_only_where_no_sglang_part_is() -> None:
    from logforensics.model.phases import component_of
    from logforensics.model.records import Frame

    dynamo = Frame(path="/usr/lib/python3.10/site-packages/torch/_dynamo/eval_frame.py", line=817,
                   func="compile_wrapper")
    spec = Frame(path="/sgl-workspace/sglang/python/sglang/srt/speculative/eagle_worker.py", line=456, func="verify")
    assert (component_of([dynamo]) or "").startswith("torch.compile (eval_frame.py:817")
    assert (component_of([dynamo, spec]) or "").startswith("speculative decoding")
    assert component_of([Frame(path="/x/torch/nn/modules/module.py", line=1, func="forward")]) is None


def test_schedulers_waiting_on_a_jit_build_lock_while_one_builds_explain_the_hang() -> None:
    """049: the watchdog's py-spy dumps show TP0-TP2 in aiter's FileBaton.wait under mp_lock and
    TP3 in _run_ninja_build: the build never finished while the others waited on its lock; the
    best explanation, not 'cannot tell'."""
    d = _diff("049")
    t = d.facts.timer
    assert t.jit_lock_ranks == ("TP0", "TP1", "TP2") and t.jit_build_ranks == ("TP3",)
    assert d.conclusion.rule == "HG04"
    assert "_run_ninja_build" in (d.conclusion.explanation or "")


def test_a_rank_that_printed_on_after_its_last_phase_record_is_not_said_to_have_stopped_there() -> None:
    """054: TP2's last phase record is 'Memory pool end' (line 189), but its lines go on to 250
    (aiter's fused_moe choices in a forward pass): AL01 says where its phase records put it and
    that it printed on, not that it stopped after kv_cache_alloc."""
    d = _diff("054")
    row = d.facts.alignment.ranks["TP2"]
    assert row.went_on and row.last_line == 250
    al01 = next(f for f in d.findings if f.rule == "AL01")
    assert "its last phase record puts it after kv_cache_alloc (Memory pool end, line 189), and it printed on to line 250" \
        in al01.explanation
    assert "it stopped after kv_cache_alloc" not in al01.explanation


def test_a_traceback_through_the_draft_worker_ties_the_speculative_setting() -> None:
    """066: the failing traceback fails in the attention backend's top-k (unchanged), called by the
    draft model's forward that speculative decoding's draft extend ran (eagle_worker_v2.py): the
    change that turned speculative decoding on is tied to the failure, the part the call ran
    through, and said to be that, not where it failed."""
    d = _diff("066")
    assert [x.key for x in d.facts.config.in_component] == ["speculative_algorithm"]
    assert (d.facts.config.in_component_at or "").startswith("speculative decoding (eagle_worker_v2.py:965")
    assert d.conclusion.rule == "CFG04"
    assert "which the failing run's traceback ran through" in d.verdict


def test_every_part_a_traceback_ran_through_innermost_first() -> None:
    from logforensics.model.phases import components_of
    from logforensics.model.records import Frame

    loop = Frame(path="/sgl/python/sglang/srt/managers/scheduler.py", line=1, func="event_loop_overlap")
    spec = Frame(path="/sgl/python/sglang/srt/speculative/eagle_worker_v2.py", line=965, func="_draft_extend")
    attn = Frame(path="/sgl/python/sglang/srt/layers/attention/dsa_backend.py", line=314, func="topk_transform")
    dynamo = Frame(path="/usr/lib/python3.10/site-packages/torch/_dynamo/eval_frame.py", line=817, func="wrapper")
    got = components_of([loop, spec, dynamo, attn])
    assert [g.split(" (")[0] for g in got] == ["the attention backend", "speculative decoding", "torch.compile"]
    assert components_of([loop]) == []


def test_settings_acting_on_the_phase_a_run_hung_in_are_linked_not_named_a_cause() -> None:
    """064: the failing run hung while serving (the detokenizer's health check failing after the
    first requests), seven settings changed, speculative decoding's among them, which acts on
    every decode step: linked to the phase the run hung in, listed as changed and maybe mattering,
    none named the likely cause (nothing in the failing log ties one of them to the hang)."""
    d = _diff("064")
    assert d.failing.outcome == "hung"
    assert "speculative_algorithm" in [x.key for x in d.facts.config.linked]
    assert {x.phase for x in d.facts.config.linked} == {"serving"}
    assert "changed, and may matter" in d.verdict and "speculative_algorithm not set -> EAGLE" in d.verdict
    assert "likely cause" not in d.verdict
    # a structured setting's long repr, cut alike on both sides where the two differ
    assert "cuda_graph_config …=128, bs=[1, 2, 4, 8," in d.verdict and "-> …=128, bs=[1, 2, 3, 4," in d.verdict


def test_a_long_setting_s_change_shows_where_the_values_differ() -> None:
    from logforensics.diagnose.rulespec import change

    assert change(None, "EAGLE") == "not set -> EAGLE"
    a = "Config(" + "x" * 100 + ", bs=[1, 2, 4])"
    b = "Config(" + "x" * 100 + ", bs=[1, 2, 3, 4])"
    got = change(a, b)
    before, after = got.split(" -> ")
    assert before.startswith("…") and after.startswith("…") and "bs=[1, 2, 4" in before and "bs=[1, 2, 3" in after
    assert len(before) <= 66 and len(after) <= 66
    assert change("/m/" + "a" * 70 + "/x", "/m/" + "a" * 70 + "/y").endswith("/y")


def test_a_pd_warm_up_refusing_health_for_minutes_is_a_hang_in_the_warm_up() -> None:
    """065: 'Start of pd disaggregation warmup ...', then for 13 minutes only GET /health 503 and
    no rank record: a start-up that stopped making progress (no timer fired), hung in the warm-up;
    the speculative settings act on the warm-up request and are listed, none named a cause."""
    d = _diff("065")
    assert d.failing.outcome == "hung" and d.failing.hang is not None
    assert (d.failing.hang.timer, d.failing.hang.phase) == ("no_progress", "warmup")
    assert "hung during warmup" in d.verdict and "changed, and may matter" in d.verdict
    assert "likely cause" not in d.verdict


def test_a_window_that_begins_at_the_crash_does_not_say_the_server_was_serving() -> None:
    """067: the failing file is the traceback alone (the event loop's frames, a PD prefill batch):
    no batch, request, probe or readiness before it, so whether the server was ready, or ran the
    launcher's warm-up request, is not in the log; the verdict says the event loop, not serving."""
    d = _diff("067")
    assert "failed first, in the event loop (by its frames; whether the server had said it was ready" in d.verdict
    assert "during serving" not in d.verdict


def test_retractions_before_an_event_loop_crash_show_the_server_serving() -> None:
    """073, 074: warning-level servers print no batch, but hundreds of 'KV cache pool is full.
    Retract requests' lines (a decode batch of running requests) before the out-of-memory crash in
    the event loop: the crash is during serving, not a window that cannot tell serving from the
    launcher's warm-up request."""
    for pair in ("073", "074"):
        d = _diff(pair)
        assert d.failing.coverage.kinds.get("retract", 0) > 100
        assert "during serving" in d.verdict
        assert "is not in this log)" not in d.verdict and "warmup request" not in d.verdict


def test_an_npu_out_of_memory_torch_logged_is_the_crash_s_first_record_said_with_care() -> None:
    """080: torch_npu's '[rank2]:[E...] NPU out of memory. NPUWorkspaceAllocator tried to allocate
    216.00 MiB ...', its 'PTA memory error' and c10's 'Exception raised from malloc' stack, then DP0
    TP2's RuntimeError ('reported as above', 'the stacktrace may be inaccurate'): the crash begins
    at the out-of-memory record, on DP0 TP2; no error is said to have been logged and perhaps
    caught; the place is said as the stack shows it, which the error says may be inaccurate; a
    draft checkpoint changed between two runs that both ran EAGLE3 brings nothing in; and the
    accept length is bounded by the changed step settings."""
    d = _diff("080")
    crash = d.failing.crash
    assert crash is not None and crash.line == 1062 and crash.oom is not None and crash.oom.tried_gib == 216 / 1024
    assert "DP0 TP2 failed first" in d.verdict and "out of NPU memory (RuntimeError)" in d.verdict
    assert "by a stack the error says may be inaccurate" in d.verdict
    rules = {f.rule: f for f in d.findings}
    assert "ER01" not in rules and "CFG04" not in rules
    assert "speculative_num_steps 4 -> 1" in rules["SP01"].explanation
    assert "the draft model agrees less often" not in rules["SP01"].explanation


def test_a_changed_draft_checkpoint_brings_speculative_decoding_in_only_from_none(tmp_path: Path) -> None:
    """The draft model's path gives speculative decoding its data, not its code: from one
    checkpoint to another (both runs speculative), the part was on in both; from none it is
    what the change brought in."""
    crash = ("[2025-06-02 10:00:40] Scheduler hit an exception: Traceback (most recent call last):\n"
             '  File "/sgl-workspace/sglang/python/sglang/srt/speculative/eagle_worker.py", line 120, in verify\n'
             "    self.draft()\n"
             "RuntimeError: shape mismatch\n")
    found = {}
    for i, before in enumerate(("'/models/draft-a'", "None")):
        base = tmp_path / f"baseline-{i}.log"
        base.write_text("[2025-06-01 10:00:00] server_args=ServerArgs(model_path='/models/m', tp_size=1, "
                        f"speculative_algorithm='EAGLE3', speculative_draft_model_path={before})\n"
                        "[2025-06-01 10:00:40] The server is fired up and ready to roll!\n")
        fail = tmp_path / f"failing-{i}.log"
        fail.write_text("[2025-06-02 10:00:00] server_args=ServerArgs(model_path='/models/m', tp_size=1, "
                        "speculative_algorithm='EAGLE3', speculative_draft_model_path='/models/draft-b')\n" + crash)
        found[before] = {f.rule for f in diagnose_files(str(fail), str(base)).findings}
    assert "CFG04" not in found["'/models/draft-a'"] and "CFG04" in found["None"]


def test_an_answer_after_the_crash_is_no_request_served_before_it() -> None:
    """085: the HTTP server up (line 130), the first prefill's crash (133), and the only answer, a
    500 at line 257, as the server goes down: the crash came before readiness with no request
    answered yet, not 'during serving' of a server that had served."""
    d = _diff("085")
    assert "before readiness, in the event loop with no generation request answered yet" in d.verdict


def _harness_run(tmp_path: Path, name: str, tail: str) -> Path:
    """Two ranks begin torch.distributed and print nothing more; SGLang's test harness then reports."""
    path = tmp_path / name
    path.write_text("[2026-01-04 02:23:40] server_args=ServerArgs(model_path='/models/m', tp_size=2)\n"
                    "[2026-01-04 02:23:48 TP0] Init torch distributed begin.\n"
                    "[2026-01-04 02:23:48 TP1] Init torch distributed begin.\n"
                    "[Gloo] Rank 1 is NOT connected to: [0]\n" + tail)
    return path


_HARNESS_TIMEOUT = (
    "Exception in thread Thread-2 (launch_node):\n"
    "Traceback (most recent call last):\n"
    '  File "/sglang/test/nightly/utils.py", line 287, in launch_node\n'
    "    process = popen_launch_server(\n"
    '  File "/usr/lib/python3.11/site-packages/sglang/test/test_utils.py", line 687, in popen_launch_server\n'
    '    raise TimeoutError("Server failed to start within the timeout period.")\n'
    "TimeoutError: Server failed to start within the timeout period.\n")


def test_a_launch_harness_that_gives_up_waiting_reports_a_hang_not_an_error_caught(tmp_path: Path) -> None:
    """090: the ranks stop printing in init_distributed and SGLang's test harness
    (test_utils.popen_launch_server) gives up on the server an hour later. Its thread's
    traceback is the hang's evidence, not an error 'SGLang may have caught', and the log does
    not 'stop without readiness or failure'."""
    s = summarize_file(str(_harness_run(tmp_path, "hang.log", _HARNESS_TIMEOUT)))
    assert s.outcome == "hung", s.outcome_reason
    assert "Server failed to start within the timeout period" in s.outcome_reason
    assert s.per_rank["TP1"].phase_reached == "init_distributed"
    assert not s.errors
    real = _diff("090")
    assert real.failing.outcome == "hung" and not any(f.rule == "ER01" for f in real.findings)


def test_a_harness_timeout_after_a_crash_leaves_the_crash_first(tmp_path: Path) -> None:
    """The harness also gives up when the server crashed without ending its process: the
    server's own failure before it stays the run's end."""
    crash = ("[2026-01-04 02:23:50 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
             '  File "/sglang/python/sglang/srt/managers/scheduler.py", line 2311, in run_scheduler_process\n'
             "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)\n"
             "RuntimeError: NCCL error: unhandled system error\n")
    s = summarize_file(str(_harness_run(tmp_path, "crash.log", crash + _HARNESS_TIMEOUT)))
    assert s.outcome == "crashed" and s.crash is not None and s.crash.exception == "RuntimeError"


def test_a_phase_the_failing_run_s_settings_leave_out_is_not_one_its_ranks_stopped_before() -> None:
    """092: the failing run sets disable_cuda_graph, so its ranks capture nothing; they are not
    'stopped before cuda_graph_capture' because the baseline captured."""
    d = _diff("092")
    al01 = next(f for f in d.findings if f.rule == "AL01")
    assert "cuda_graph_capture" not in al01.title
    assert all("cuda_graph_capture" not in row.missing_phases for row in d.facts.alignment.ranks.values())


def test_the_bind_failure_is_quoted_in_its_own_words() -> None:
    """092: the first fatal record is uvicorn's bind error; the warm-up's ConnectionError that
    follows it is not what that record says."""
    cr02 = next(f for f in _diff("092").findings if f.rule == "CR02")
    assert "says the address was already in use: [Errno 98] error while attempting to bind" in cr02.explanation
    assert "Connection aborted" not in cr02.explanation.split("A process that cannot listen")[0]


def test_a_pd_bootstrap_port_is_no_setting_that_differs() -> None:
    """089: the prefill servers' bootstrap ports differ (given per launch, as --port is)."""
    d = _diff("089")
    assert "disaggregation_bootstrap_port" not in d.facts.config.changed_keys


def test_several_changed_settings_are_listed_with_the_phase_the_failing_log_stops_in() -> None:
    """093: two settings changed and the failing log just stops in graph capture, which both act
    on: the verdict lists both with equal weight and says where the log stops, and names neither
    a likely cause."""
    v = _diff("093").verdict
    assert "changed, and may matter (the failing run stops in cuda_graph_capture, which disable_cuda_graph and " \
           "disable_piecewise_cuda_graph act on; its log says no more)" in v
    assert "likely cause" not in v and "nothing in the failing log ties" not in v


def test_settings_that_act_only_after_the_failure_are_not_what_to_set_back() -> None:
    """095: the failing run crashed before graph capture on an ImportError; the changed graph
    settings act only after it. The verdict says what could not be imported, and the next step
    looks elsewhere than at setting them back."""
    d = _diff("095")
    assert "ImportError (cannot import name 'KVFP4QuantizeUtil' from " in d.verdict
    assert "changed, acting only after kv_cache_alloc, where the failing run failed" in d.verdict
    step = d.conclusion.next_step or ""
    assert "set back" not in step and step.startswith("the changed settings (disable_cuda_graph, ")
