"""Which settings a verdict compares, and when it names a changed one as the likely cause.

Both logs are SGLang's own lines (the ``server_args=ServerArgs(...)`` dump, readiness, a
decode batch, ``Scheduler hit an exception``). A failing run that crashed while serving,
whose settings differ from the baseline's in several places, gives the verdict no line that
ties the failure to one of them: they are listed with equal weight, and none is a "likely
cause". With one change, the change that acts on the failing phase is the likely cause, as
before. The settings SGLang prints once the KV cache is sized ("max_total_num_tokens=...,
chunked_prefill_size=..., max_prefill_tokens=...") are settings in effect and compared; a
client benchmark's options (``sglang.bench_serving --num-prompts ...``) are not the server's.
"""

from __future__ import annotations

from pathlib import Path

from logforensics.pipeline import diagnose_files

ARGS = "tp_size=1, mem_fraction_static=0.88, chunked_prefill_size={cp}, disable_cuda_graph={dcg}, " \
       "max_running_requests={mrr}"
LOG = (
    "[2026-03-0{d} 10:00:00] server_args=ServerArgs(model_path='/models/m', {args})\n"
    "[2026-03-0{d} 10:00:40] The server is fired up and ready to roll!\n"
    "[2026-03-0{d} 10:01:00] Decode batch, #running-req: 4, #token: 2048, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 310.55, #queue-req: 0\n"
)
CRASH = (
    "[2026-03-02 10:02:00] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2547, in run_scheduler_process\n'
    "    scheduler.event_loop_overlap()\n"
    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
)


def _diff(tmp_path: Path, **failing: object) -> str:
    settings = {"cp": 8192, "dcg": False, "mrr": 128}
    base = tmp_path / "baseline.log"
    base.write_text(LOG.format(d=1, args=ARGS.format(**settings)))
    fail = tmp_path / "failing.log"
    fail.write_text(LOG.format(d=2, args=ARGS.format(**{**settings, **failing})) + CRASH)
    return diagnose_files(str(fail), str(base)).verdict


def test_several_changed_settings_are_listed_with_equal_weight(tmp_path: Path) -> None:
    verdict = _diff(tmp_path, cp=16384, dcg=True, mrr=256)
    assert "likely cause" not in verdict
    assert verdict.startswith("baseline ready, failing crashed: ") and "RuntimeError" in verdict
    listed = verdict.split("changed, and may matter", 1)[1]
    for change in ("chunked_prefill_size 8192 -> 16384", "disable_cuda_graph False -> True",
                   "max_running_requests 128 -> 256"):
        assert change in listed


def test_two_changed_settings_that_both_act_on_the_failing_phase_are_two_candidates(tmp_path: Path) -> None:
    """Both act on serving, where the failing run failed: nothing on the failing side tells which
    matters, so neither is the likely cause (real-pairs 022)."""
    settings = {"cp": 8192, "dcg": False, "mrr": 128}
    base, fail = tmp_path / "baseline.log", tmp_path / "failing.log"
    base.write_text(LOG.format(d=1, args=ARGS.format(**settings)))
    args = ARGS.format(**{**settings, "cp": 16384}).replace("mem_fraction_static=0.88", "mem_fraction_static=0.9")
    fail.write_text(LOG.format(d=2, args=args) + CRASH)
    d = diagnose_files(str(fail), str(base))
    assert {s.key for s in d.facts.config.linked} == {"chunked_prefill_size", "mem_fraction_static"}
    assert "likely cause" not in d.verdict
    listed = d.verdict.split("changed, and may matter", 1)[1]
    assert "chunked_prefill_size 8192 -> 16384" in listed and "mem_fraction_static 0.88 -> 0.9" in listed


def test_one_changed_setting_that_acts_on_the_failing_phase_is_the_likely_cause(tmp_path: Path) -> None:
    verdict = _diff(tmp_path, cp=16384)
    assert "likely cause: chunked_prefill_size changed (8192 -> 16384) and acts on serving" in verdict
    assert "may matter" not in verdict


STARTUP = ("[2026-03-0{d} 10:00:30] max_total_num_tokens=400000, chunked_prefill_size=8192, max_prefill_tokens={mpt}, "
           "max_running_requests=2048, context_len=32768, available_gpu_mem=10.20 GB\n")
SERVING = ("[2026-03-0{d} 10:00:40] The server is fired up and ready to roll!\n"
           "[2026-03-0{d} 10:01:00] Decode batch, #running-req: 4, #token: 2048, token usage: 0.01, cuda graph: True, "
           "gen throughput (token/s): 310.55, #queue-req: 0\n")


def test_a_setting_only_the_start_up_line_shows_is_compared(tmp_path: Path) -> None:
    base = tmp_path / "baseline.log"
    base.write_text(STARTUP.format(d=1, mpt=2048) + SERVING.format(d=1))
    fail = tmp_path / "failing.log"
    fail.write_text(STARTUP.format(d=2, mpt=16384) + SERVING.format(d=2) + CRASH)
    d = diagnose_files(str(fail), str(base))
    diff = d.facts.config.server_args["max_prefill_tokens"]
    assert (diff.source, diff.baseline, diff.failing) == ("start-up line", 2048, 16384)
    assert "likely cause: max_prefill_tokens changed (2048 -> 16384)" in d.verdict
    assert {e.line for e in d.facts.config.evidence if e.file == str(fail)} == {1}


def test_a_client_benchmark_s_options_are_not_settings(tmp_path: Path) -> None:
    bench = "$ python3 -m sglang.bench_serving --backend sglang --num-prompts {n} --request-rate {r}\n"
    launch = "$ python3 -m sglang.launch_server --model-path /models/m --tp 1 --port 30000\n"
    base = tmp_path / "baseline.log"
    base.write_text(launch + bench.format(n=1000, r=8) + SERVING.format(d=1))
    fail = tmp_path / "failing.log"
    fail.write_text(launch + bench.format(n=4000, r=32) + SERVING.format(d=2) + CRASH)
    d = diagnose_files(str(fail), str(base))
    assert not d.facts.config.changed, d.facts.config.changed_keys
    assert d.failing.launch_args == {"model_path": "/models/m", "tp": 1, "port": 30000}
    assert [n.line for n in d.failing.notices["client_command"]] == [2]


def test_a_failed_build_on_the_same_setup_says_the_builds_differ(tmp_path: Path) -> None:
    """server_args identical but for a field the failing build added: no setting differs, and the
    verdict says the builds do, naming the field."""
    base = tmp_path / "baseline.log"
    base.write_text(LOG.format(d=1, args=ARGS.format(cp=8192, dcg=False, mrr=128)))
    fail = tmp_path / "failing.log"
    fail.write_text(LOG.format(d=2, args=ARGS.format(cp=8192, dcg=False, mrr=128) + ", enable_pdmux=False") + CRASH)
    d = diagnose_files(str(fail), str(base))
    assert not d.facts.config.changed
    assert "no setting differs; the builds differ" in d.verdict and "enable_pdmux (failing only)" in d.verdict
    assert any(c.what == "build" and c.status == "differs" for c in d.conclusion.ruled_out)


def test_a_launch_command_continued_by_backslashes_is_one_command(tmp_path: Path) -> None:
    """A launch script's command spread over lines that end with a backslash (one option a line)
    is one command: its settings on the later lines are the run's, not only the first line's."""
    from logforensics import summarize_file

    log = tmp_path / "serve.log"
    log.write_text("Serve command:\n"
                   "  taskset -c 5-9 python3 -m sglang.launch_server \\\n"
                   "    --model-path Qwen/Qwen3-8B \\\n"
                   "    --tp-size 2 \\\n"
                   "    --mem-fraction-static 0.85\n"
                   "    --not-an-option-of-it 1\n")
    s = summarize_file(log)
    assert s.launch_args == {"model_path": "Qwen/Qwen3-8B", "tp_size": 2, "mem_fraction_static": 0.85}
    assert s.launch_command == ("taskset -c 5-9 python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B "
                                "--tp-size 2 --mem-fraction-static 0.85")


def test_a_label_before_the_launch_command_is_no_environment_variable(tmp_path: Path) -> None:
    """SGLang's test harness prints the server's command as "command=python3 -m ..." (real-unseen
    1141): "command" is no variable set for the server, and the assignments of a real shell line are."""
    from logforensics import summarize_file

    log = tmp_path / "test.log"
    log.write_text("command=python3.10 -m sglang.launch_server --model-path m --tp 2 --port 8000\n")
    s = summarize_file(log)
    assert "command" not in s.env and s.launch_args.get("tp") in ("2", 2)
    log.write_text("NCCL_DEBUG=INFO CUDA_VISIBLE_DEVICES=0,1 python3 -m sglang.launch_server --model-path m --tp 2\n")
    assert summarize_file(log).env == {"NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1"}


def test_a_setting_of_a_part_both_runs_leave_off_is_no_change(tmp_path: Path) -> None:
    """speculative_moe_runner_backend None -> 'auto' (a build's default that moved) acts on nothing
    while neither run has a speculative algorithm (real-pairs 024); with one on, it is compared."""
    for algorithm, compared in (("None", False), ("'EAGLE3'", True)):
        base, fail = tmp_path / "baseline.log", tmp_path / "failing.log"
        dump = ("[2026-03-0{d} 10:00:00] server_args=ServerArgs(model_path='/models/m', tp_size=1, "
                "speculative_algorithm={a}, speculative_moe_runner_backend={b})\n")
        base.write_text(dump.format(d=1, a=algorithm, b="None") + SERVING.format(d=1))
        fail.write_text(dump.format(d=2, a=algorithm, b="'auto'") + SERVING.format(d=2) + CRASH)
        d = diagnose_files(str(fail), str(base))
        assert ("speculative_moe_runner_backend" in d.facts.config.changed_keys) is compared


def test_one_changed_setting_that_nothing_ties_to_the_failure_is_said_not_named(tmp_path: Path) -> None:
    """disable_cuda_graph acts on throughput, not on serving where the run failed (real-pairs 031):
    the one change is said to have changed and may matter, and is no likely cause."""
    verdict = _diff(tmp_path, dcg=True)
    assert "likely cause" not in verdict
    assert "changed, and may matter (nothing in the failing log ties it to the failure): disable_cuda_graph " \
           "False -> True" in verdict


def test_a_last_option_that_takes_a_value_and_has_none_is_not_read_as_true() -> None:
    """A terminal hard-wrapped the command inside '--port' ('... --host 0.0.0.0 --por' then 't 8998',
    real-unseen 1332): SGLang's argparse reads '--por' as --port (a unique prefix) and would refuse
    it without a value, so the value is beyond the line: no 'por: True'. A flag of a boolean field,
    or one no field is named by, stays as read."""
    from logforensics.model.config import launch_flags

    base = "python -m sglang.launch_server --model-path /m --host 0.0.0.0"
    assert launch_flags(base + " --por") == {"model_path": "/m", "host": "0.0.0.0"}
    assert launch_flags(base + " --port") == {"model_path": "/m", "host": "0.0.0.0"}
    assert launch_flags(base + " --trust-remote-code")["trust_remote_code"] is True
    assert launch_flags(base + " --my-own-flag")["my_own_flag"] is True
    assert launch_flags(base + " --port 8998")["port"] == 8998


DP_RUN = (
    "[2025-10-30 00:4{d}:07] WARNING server_args.py:1324: DP attention is enabled. The chunked prefill size is "
    "adjusted to {cp} to avoid MoE kernel issues. \n"
    "[2025-10-30 00:4{d}:07] server_args=ServerArgs(model_path='/models/dsv3', tp_size=8, dp_size={dp}, "
    "enable_dp_attention=True, chunked_prefill_size={cp}, mem_fraction_static=0.8)\n"
    "[2025-10-30 00:4{d}:50 DP0 TP0] Load weight begin. avail mem=187.61 GB\n"
)


def test_a_setting_the_server_set_from_the_dp_size_follows_that_change(tmp_path: Path) -> None:
    """Under DP attention the launcher divides the chunked prefill size by the DP size and says
    so: with the DP size changed, the chunked prefill size that changed with it is the server's
    doing, not a lead of its own (real-pairs 070): not linked to the failure, not a setting to
    try back, and named as set by the server."""
    base, fail = tmp_path / "baseline.log", tmp_path / "failing.log"
    base.write_text(DP_RUN.format(d=1, dp=8, cp=2048) + "[2025-10-30 00:42:00] The server is fired up and ready to roll!\n")
    fail.write_text(DP_RUN.format(d=2, dp=4, cp=4096) + CRASH.replace("2026-03-02 10:02:00", "2025-10-30 00:43:00 DP1 TP3"))
    d = diagnose_files(str(fail), str(base))
    config = d.facts.config
    assert set(config.changed_keys) == {"chunked_prefill_size", "dp_size"}
    # both dumps give the DP size: the rank labels' parts are neither compared nor missing
    assert "rank labels' parallel parts" not in d.facts.setup.unknown + d.facts.setup.same
    assert config.set_by_server == ("chunked_prefill_size",)
    assert all(x.key != "chunked_prefill_size" for x in config.linked)
    assert "CFG03" not in {f.rule for f in d.findings}
    cfg02 = next(f for f in d.findings if f.rule == "CFG02")
    assert "Set by the server itself" in cfg02.explanation and "chunked_prefill_size" in cfg02.explanation
    assert "chunked_prefill_size" not in (d.conclusion.next_step or "")


def test_the_same_change_without_the_servers_word_is_a_setting_of_its_own(tmp_path: Path) -> None:
    """Without the launcher's notice in either log, a changed chunked prefill size is the command's."""
    base, fail = tmp_path / "baseline.log", tmp_path / "failing.log"
    run = DP_RUN.split("\n", 1)[1]
    base.write_text(run.format(d=1, dp=8, cp=2048) + "[2025-10-30 00:42:00] The server is fired up and ready to roll!\n")
    fail.write_text(run.format(d=2, dp=4, cp=4096) + CRASH.replace("2026-03-02 10:02:00", "2025-10-30 00:43:00 DP1 TP3"))
    d = diagnose_files(str(fail), str(base))
    assert d.facts.config.set_by_server == ()
    assert "chunked_prefill_size" in (d.conclusion.next_step or "")


def test_a_negative_mem_usage_at_load_end_is_no_weight_size(tmp_path: Path) -> None:
    """SGLang's "mem usage" at "Load weight end" is free memory before minus after: where another
    process freed memory during the load it is negative, and no size of the weights, so the
    weights are not compared (real-pairs 069); the free memory before the load still is."""
    load = ("[2025-12-16 0{h}:12:30 TP0] Load weight begin. avail mem={begin} GB\n"
            "[2025-12-16 0{h}:12:44 TP0] Load weight end. type=GptOssForCausalLM, dtype=torch.bfloat16, "
            "avail mem=276.01 GB, mem usage={usage} GB.\n")
    base, fail = tmp_path / "baseline.log", tmp_path / "failing.log"
    base.write_text(load.format(h=8, begin="284.32", usage="8.31")
                    + "[2025-12-16 08:13:00] The server is fired up and ready to roll!\n")
    fail.write_text(load.format(h=9, begin="23.86", usage="-252.15")
                    + CRASH.replace("2026-03-02 10:02:00", "2025-12-16 09:13:00 TP0"))
    d = diagnose_files(str(fail), str(base))
    mem = d.facts.memory
    assert mem.weights_not_compared == ("TP0",)
    assert {c.figure for c in mem.changed} == {"load_begin_avail_gib"}
    mem02 = next(f for f in d.findings if f.rule == "MEM02")
    assert "weights_gib" not in mem02.explanation and "no size of the weights" in mem02.explanation


def test_rank_labels_of_other_parallel_parts_are_another_layout(tmp_path: Path) -> None:
    """Neither log prints its settings; the baseline's ranks are named by TP alone, the failing
    run's by DP, TP and EP parts (SGLang names those parts under DP attention and expert
    parallelism): the runs were launched with another parallel layout (real-pairs 071), said as
    such, with the model not claimed alike; ranks named alike are no difference."""
    decode = ("[2026-03-31 14:3{m}:00 {rank}] Decode batch, #running-req: 1, #token: 64, token usage: 0.00, "
              "cuda graph: True, gen throughput (token/s): 50.00, #queue-req: 0\n")
    ready = "[2026-03-31 14:3{m}:01] The server is fired up and ready to roll!\n"
    base, fail = tmp_path / "baseline.log", tmp_path / "failing.log"
    base.write_text(decode.format(m=0, rank="TP4") + ready.format(m=0))
    fail.write_text(decode.format(m=5, rank="DP4 TP4 EP4") + CRASH.replace("2026-03-02 10:02:00", "2026-03-31 14:35:54 DP4 TP4 EP4"))
    d = diagnose_files(str(fail), str(base))
    parts = [(x.key, x.baseline, x.failing) for x in d.facts.setup.differs]
    assert parts == [("rank_parts", "TP", "DP TP EP")] and d.facts.setup.layout_only
    assert "another parallel layout (rank labels' parallel parts TP vs DP TP EP)" in d.verdict
    assert "not the same setup" not in d.verdict
    su = next(f for f in d.findings if f.rule == "SU01")
    assert "the model is not in both logs" in su.explanation and "same deployment" not in su.explanation
    base.write_text(decode.format(m=0, rank="DP4 TP4 EP4") + ready.format(m=0))
    assert not diagnose_files(str(fail), str(base)).facts.setup.differs
