"""Every excerpt in fixtures/real-unseen/ against the labels in its MANIFEST.tsv.

These excerpts were collected after the analyzer was built, from public threads no other
fixture comes from (``source``), and labelled from their own text before the analyzer read
them: the outcome, the phase and ranks of a crash, the phase each rank reached, the line of
the first fatal record, and key figures. ``stopped`` is a server stopped by a signal with
no failure before it (``summary`` keeps ``ready`` or ``incomplete`` and says where it
stopped); ``partial`` is a window that shows neither readiness nor a failure, as in
fixtures/real.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
from test_real_logs import FIGURES, NOT_RUN_FIGURES, assert_figure, figure_cases

from logforensics import iter_events, summarize_file
from logforensics.events import PHASES
from logforensics.model.run import RunSummary
from logforensics.model.startup import LAUNCHER_PROBES

UNSEEN = Path(__file__).resolve().parent.parent / "fixtures" / "real-unseen"
ROWS = list(csv.DictReader((UNSEEN / "MANIFEST.tsv").open(encoding="utf-8"), delimiter="\t"))
NOT_A_VALUE = {"n/a", "unknown", "none", ""}
OUTCOMES = {"ready", "crashed", "hung", "partial", "stopped"}

#: Labels the analyzer does not meet yet, by (test, file number), with what it gets wrong
#: (strict: fixing the cause turns the case into a failure until its entry is removed).
PENDING: dict[tuple[str, str], str] = {
    ("fatal_line", "376"): "the crash starts at TP1's header (line 2): line 1, a traceback's source line behind Ray's "
                           "de-duplication suffix ('return func(*args, **kwargs) [repeated 4x across cluster]'), is read "
                           "as an indented line, not a record, as a header and no frame or exception line follows it",
    ("crash", "384"): "DP20 TP0's crash has no phase ('during an unknown phase'): in the console export every record "
                      "is preceded by a stamp line and a pod line ('jo-dbwl7rasljfkuwyu-worker-0'), which are read "
                      "into the traceback, so the pod line is taken as each frame's code and run_scheduler_process's "
                      "'scheduler.event_loop_overlap()' (line 9) is not read as its code",
    ("outcome", "385"): "the faulthandler dump (lines 2-15: 'Current thread ... forward_thread_func') is read as a "
                        "thread_dump but not as a fatal record, so a window cut before its 'Fatal Python error' "
                        "header is 'incomplete ... without readiness or failure'",
    ("crash", "385"): "no crash: the faulthandler dump whose 'Current thread' is tp_worker_overlap_thread's "
                      "forward_thread_func (a forward pass while serving) is not read as a crash",
    ("fatal_line", "385"): "no crash, so no fatal line; the label's is the dump's first record (line 2)",
    ("outcome", "421"): "'ready' (served a request at line 2), and line 8's out-of-memory record is read as an error "
                        "the process logged (ER01: 'Worker encountered error CUDA out of memory. ...', in AReaL's own "
                        "format), not as its end: the label reads AReaL's 'Worker encountered error' as the worker's "
                        "failure; the analyzer reads an out-of-memory message another program logged as one that a "
                        "component caught (as 409's logged traceback), since the log does not show the process ending",
    ("crash", "421"): "no crash: line 8 is an error the process logged, as outcome[421]",
    ("fatal_line", "421"): "no crash, so no fatal line; the label's is line 8, the worker's CUDA out-of-memory record",
    ("outcome", "461"): "'crashed: RuntimeError at line 1': line 1 is the tail of a traceback above the window, and "
                        "lines 2-9 show the failure handled (the 'no output' traceback logged, the request answered "
                        "'\"POST /v1/images/generations HTTP/1.1\" 500' at line 9); the answer (read, a 500) shows the "
                        "server going on after the failure, but an answer that is no success is not taken as the "
                        "server's course after a rankless crash",
    ("crash", "461"): "a crash at line 1 (RuntimeError) where the label has none, as outcome[461]",
    ("fatal_line", "491"): "the crash is cited at line 3 (TP0 EP0's 'Scheduler hit an exception' header, its traceback cut "
                           "before its exception), not at line 2: torch_npu's allocator record ('... torch_npu.memory: "
                           "[ERROR] [383554] NPU out of memory. Tried to allocate 72.00 MiB ...') is read as an "
                           "out-of-memory error the process logged (ER01, with its figures), not as the start of the "
                           "crash, since no line shows the scheduler's exception to be that out-of-memory error",
    ("crash", "576"): "a phase (cuda_graph_capture) for a crash whose process names no rank: the segfault's records "
                      "('[sgl-v3-deepseek-nextn-2-1:116  :0:116] Caught signal 11 ...', line 3; 'Fatal Python error: "
                      "Segmentation fault', line 11; a dump of two threading/tqdm threads) are pid 116's, and only "
                      "TP14's 'Capture draft cuda graph begin' (line 1) is in capture; the window does not tie pid 116 "
                      "to TP14",
    ("crash", "611"): "the crash has no phase ('during an unknown phase'), though the window shows ' Load weight begin. "
                      "avail mem=60.89 GB ' (line 6, on a line of its own after its stamp's line 5) and '[2026-84-18 "
                      "13:17:24] Loading weights from remote instance ...!' (line 7) before the failed group init (lines "
                      "12, 14) and the scheduler's exception (line 18): neither weight-loading record is read in this "
                      "screen-text paste (the first has a leading space and no stamp, the second a misread month)",
    ("fatal_line", "611"): "the crash is cited at line 22 (the last File line, 'line 382, in --init--'), not at line "
                           "18, '[2026-04-10 13:17:25] Scheduler hit an exception: Traceback (most recent cal1 last): ', "
                           "whose misread 'cal1' and trailing space keep it from being read as the traceback's header; "
                           "the bundle quotes line 22 alone as the traceback",
    ("phase_reached", "611"): "no process is placed in any phase: the weight-loading records of lines 6-7 are not "
                              "read (as crash[611])",
    ("key_figure[load_begin_avail]", "611"): "line 6's ' Load weight begin. avail mem=60.89 GB ' (leading and "
                                             "trailing space, its stamp on line 5) is not read, so no figure",
    ("crash", "640"): "the crash has no phase: the faulthandler dump, torn by other writers, is read from line 1 with "
                      "one frame (c10d_logger.py:81 in wrapper); its thread frames poll_and_all_reduce <- "
                      "pop_transferred <- process_decode_queue <- event_loop_overlap_disagg_decode (lines 4-11, each "
                      "run together with another thread's text) are not read, so nothing places the dump in serving",
    ("fatal_line", "640"): "the crash is cited at line 1 (a File line), not at line 2, where faulthandler's 'Fatal "
                           "Python error: \"Segmentation fault' runs on from a cut File line ('  File \".../"
                           "disaggregation/utils.pyFatal Python error: ...'); the header is not read inside that line, "
                           "and the verdict says the dump's 'header is not in this log'",
    ("phase_reached", "672"): "the unnamed process '-' is placed in serving by the /metrics answers (lines 4 and 8: the "
                              "HTTP server up), though the health check is refused on lines 2 and 6 ('\"GET /health "
                              "HTTP/1.1\" 503 Service Unavailable'); the outcome is incomplete ('up, not ready'), "
                              "the phase is not",
    ("crash", "710"): "the crash is torch's watchdog record at line 4 ('[rank1]:[E1209 02:28:15.281862353 "
                      "ProcessGroupNCCL.cpp:2057] [PG ID 2 PG GUID 3 Rank 1] Process group watchdog thread terminated "
                      "with exception: CUDA error: an illegal memory access was encountered'), its rank 'TP1' "
                      "(rank_inferred_from 'torch_global_rank': a pure-TP run's torch rank N is TP rank N), where the "
                      "label keeps torch's 'rank1', as no line of the window ties it to an SGLang rank",
    ("phase_reached", "787"): "no rank is placed in any phase: TP0-TP7's only records are aiter's '[fused_moe] using "
                              "1stage ...' kernel choices behind their stamps (lines 9-30, unrecognised), and the "
                              "answered '/v1/loads' and '/get_server_info' probes (lines 32, 34), which make the run "
                              "ready, name no rank, so no rank is placed in serving",
    ("crash", "727"): "a phase (init_distributed) for a crash whose process names no rank: the HSA fault (line 24), "
                      "'Fatal Python error: Aborted' (line 25) and a dump of one thread, torch inductor's compile "
                      "worker (subproc_pool.py _recv_msg, line 28), are unranked; only DP7 TP7's 'Init torch "
                      "distributed begin.' and DP0 TP0's nccl version (lines 22-23) are in init_distributed, and "
                      "no line ties the aborted process to them (576's class)",
    ("crash", "804"): "the crash has no phase: its frames Scheduler.__init__ -> init_disaggregation -> "
                      "DecodePreallocQueue -> _init_kv_manager -> nixl conn register_buffer_to_engine (lines 4-24) "
                      "place none, where the label reads the KV manager's set-up as kv_cache_alloc (its exception, "
                      "line 25's 'nixl_cu13._bindings.nixlBackendError: NIXL_ERR_BACKEND', is read)",
    ("phase_reached", "804"): "no rank is placed in any phase: DP0 TP0's only record is its traceback, whose "
                              "init_disaggregation frames give no phase (as crash[804])",
    ("fatal_line", "822"): "the crash is cited at line 14 ('Traceback (most recent call last):'), not at line 13, "
                           "'[2026-09-15 17:47:35] Stage process reasoner failed', the logged record whose traceback "
                           "follows it: a header on its own line before the traceback (sglang-omni's stage worker, not "
                           "'Scheduler hit an exception:') is not read as the traceback's first line",
    ("outcome", "824"): "'incomplete ... the log stops at line 42 without readiness or failure', with no stop: the "
                        "docker memory guard's 'guard: docker rm -f deepseek-sglang-v3kv448-guarded' (line 40) and "
                        "'guard: docker exited return_code=137 reason=MemAvailable 36.78 GiB below 48.00 GiB' (line 42) "
                        "are unrecognised lines (a wrapper's, behind ISO stamps '[2026-05-01T14:27:49-04:00]'), so the "
                        "wrapper's kill during load_weights is not read as the run's end",
    ("fatal_line", "824"): "no stop, so no fatal line; the label's is line 40, the guard's 'docker rm -f' (as outcome[824])",
    ("outcome", "901"): "'incomplete ... the log stops at line 9 without readiness or failure, during warmup': line 9, "
                        "'2025-11-05T01:56:54.292138Z ERROR scheduler.run_sch' (Dynamo's format: ISO stamp, level, "
                        "the logger's module.function; cut in the stored excerpt), is an unrecognised line, so the "
                        "ERROR record of the scheduler process's run_scheduler_process (where SGLang logs 'Scheduler "
                        "hit an exception') is not read as the failure that ends the window",
    ("crash", "901"): "no crash: line 9's ERROR record from scheduler.run_scheduler_process is not read (as outcome[901])",
    ("fatal_line", "901"): "no crash, so no fatal line; the label's is line 9, the scheduler's cut ERROR record",
    ("key_figure[graph_capture_s]", "901"): "only 12.80 s: the two processes' rankless 'model_runner.init_device_graphs: "
                                            "Capture cuda graph end. Time elapsed: 12.80 s ...' (line 3) and '... 11.11 s "
                                            "...' (line 4) are one rank '-', which keeps the first capture's figures",
    ("crash", "910"): "the 2024 router process's traceback (its one frame managers/router/manager.py "
                      "start_router_process, 'model_client = ModelRpcClient(server_args, port_args)', lines 14-15) "
                      "is placed in load_weights, the phase the ranks' records left them in ('Rank 0: load weight "
                      "begin.' at line 8 with no end); the label has no phase: the router is no rank and its frame "
                      "names no start-up phase",
    ("outcome", "940"): "'incomplete ...; ended by SIGQUIT': the shell's 'Quit (core dumped)' (line 3) is read, but "
                        "SIGQUIT is Ctrl-\\ at a terminal and also what SGLang's children send their launcher when "
                        "they fail, so no stop is named where the label reads the operator's stop",
    ("fatal_line", "940"): "no stop named, so no fatal line; the label's is line 3, the shell's 'Quit (core dumped)'",
    ("crash", "962"): "the crash at 'Process Process-1:' (line 10), a multiprocessing child no line names, is "
                      "placed in warmup, the phase Rank 0 reached ('Rank 0: max_total_num_token=14425, ...', line 8), "
                      "where the label places it in none (the class of 727 and 794: an unnamed process's crash "
                      "takes the named ranks' phase)",
    ("fatal_line", "1134"): "cited at line 3, the second device-side assertion ('/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:93: "
                            "... Assertion ... failed'): the first, at line 1, is transcribed with misread letters ('Alen', "
                            "'Indexkernel', 'sizes(i]') and is unrecognised, so the first fatal record (516's reading) is not seen",
    ("fatal_line", "1150"): "cited at line 18, DP0 TP0's 'Scheduler hit an exception' header, not at line 5: the thirteen "
                            "unranked 'Health check failed. Server couldn't get a response from detokenizer for last 20 "
                            "seconds' lines (5-17) after the readiness line are read only as hang evidence, not as the first "
                            "fatal record (431's reading) of a run that ends in a crash",
    ("fatal_line", "1161"): "cited at line 2, DP4 TP4's 'TpModelWorkerClient hit an exception' header, not at line 1, "
                            "faulthandler's 'Thread 0x00007efe63fc7640 (most recent call first):' header, the tail of "
                            "a fatal error's dump (454's and 797's reading); with no frame after it, the header is "
                            "not read as a record",
    ("phase_reached", "1182"): "serving, not n/a: the window's only SGLang records are the HTTP server's rankless "
                               "access lines (get_server_info, flush_cache and generate answered 200, the first fused "
                               "after a model's sharding print at line 5); with no SGLang rank line no phase is "
                               "reached (702's and 1160's reading), but the access lines give the rankless '-' serving",
    ("key_figure[cached_tokens]", "1193"): "nothing found: DP0 TP0 EP0's prefill batch is committed broken over "
                                           "three lines ('... #new-token: 16384,' then '#cached-token: 0, token "
                                           "usage: 0.00, ...'); line 1 is read as the batch with its 16384 new "
                                           "tokens, the continuation lines 2-3 are unrecognised and not joined to it",
    ("key_figure[load_begin_avail]", "1290"): "only 114.99 (the target's, line 7): the DFlash draft's 'Load weight "
                                              "begin. avail mem=21.89 GB' (line 20), read as a draft's once its end "
                                              "line names another model class, is kept as no figure of its own",
    ("key_figure[kv_tokens]", "1290"): "the rank's one KV figure, 34097 (the full pool), where the label lists the "
                                       "three 'KV Cache is allocated' lines (27277 and 34097 for the target's swa "
                                       "and full pools, lines 28-29; 34097 for the draft's, line 32); the three "
                                       "pools are in --json's kv_pools, but the figure gives the rank's one",
    ("key_figure[pool_end_avail]", "1290"): "[13.07, 13.07, 12.25]: the rank's own figure (its first pool's, line 31) "
                                            "comes before every pool's, so the two 'Memory pool end' lines (13.07 at "
                                            "line 31, 12.25 at line 33) read as three values against the label's two",
    ("fatal_line", "1635"): "the console lists lines newest first, so the traceback's earliest line in the window is line "
                            "10 ('self.model = get_model('); the crash is cited at the KeyError line (3), and lines 5-10 "
                            "are read as a second traceback '(no exception line)' while line 4, the load_weights frame's "
                            "code 'param = params_dict[name]', is taken into the KeyError's message",
    ("phase_reached", "1662"): "no phase, where every rank (DP0-DP3, DP14, DP15) is serving: the fork's '[SWA_LEAK_TRACE]' "
                               "records of release_kv_cache and cache_finished_req for HEALTH_CHECK_ rids (lines 6-11) and "
                               "DP2's chunked cache_unfinished_req (12-60) are unrecognised (0/60 lines), so no request "
                               "handled by a rank is seen",
    ("key_figure[graph_capture_s]", "1694"): "the draft capture end is read (its closing backtick a code span's), but "
                                     "the model keeps its 'Time elapsed: 62.67 s' as no figure (a draft capture end's time is not kept), apart "
                                     "from the rank's own capture figures; the label reads the draft's as the rank's",
    ("key_figure[graph_mem]", "1694"): "the draft capture end is read (its closing backtick a code span's), but "
                                     "the model keeps its 'mem usage=0.21 GB' as draft_capture_mem_gib, apart "
                                     "from the rank's own capture figures; the label reads the draft's as the rank's",
    ("key_figure[capture_end_avail]", "1694"): "the draft capture end is read (its closing backtick a code span's), but "
                                     "the model keeps its 'avail mem=15.31 GB' as draft_capture_end_avail_gib, apart "
                                     "from the rank's own capture figures; the label reads the draft's as the rank's",
    ("crash", "1730"): "TP1's crash has no phase ('phase: unknown'), where its frame is the scheduler's "
                       "move_ready_grammar_requests (serving): the condensed paste puts the unindented File line "
                       "(line 3) and its code (4) after the exception line (2), and a frame after an exception line is "
                       "read as a second, headerless traceback of no process ('(no exception line) on ? (lines 3)'), so "
                       "TP1's crash keeps no frame; move_ready_grammar_requests is also no row of phases.tsv",
    ("phase_reached", "1742"): "no rank is placed in any phase: TP6's only record, aiter's 'type hints mismatch, override to "
                               "--> ck_moe_stage2(...)' (line 2), is unrecognised, the prefill server's 'End of prefill "
                               "disaggregation mode warmup with status 200, resp: [...]' (line 4) is not read as a warm-up "
                               "record, and the readiness line (5) places only ranks that print after it, so TP6, seen "
                               "before the warm-up ended, is given no phase (the label: warmup)",
    ("crash", "1755"): "no phase for the child's failure (line 1, 'Child process unexpectedly failed with an exit "
                       "code 9'), where the label reads serving from the launcher's call stack that Python's logging "
                       "printed under 'Call stack:' (lines 31-46: launch_server -> uvicorn.run -> sigchld_handler); "
                       "a call stack a logger printed is read as a logged error's, not as where the launcher was",
    ("outcome", "1761"): "'incomplete ... without readiness or failure, during serving': TP0's in-service weight "
                         "update (lines 1, 14, 15) places it in serving, but the request answered '\"POST "
                         "/update_weights HTTP/1.1\" 400 Bad Request' (line 16) is not taken as readiness, an "
                         "answer that is no success not counting, and a rank's own serving record alone does not "
                         "make a window ready (the reading of partial windows: batches or a success)",
    ("outcome", "1765"): "'crashed: a child process failed ... at line 1': the children's 'Child process unexpectedly failed "
                         "with an exit code 9' (lines 1-3) come before the first 'SIGTERM received' (line 4), in the same "
                         "second, so the stop is refused (logging's 'reentrant call' traceback, line 62, is now an error "
                         "logged)",
    ("crash", "1765"): "a crash (the child's failure, no exception) where the label has none, as outcome[1765]",
    ("fatal_line", "1765"): "no stop: the crash is cited at line 1 (the first child's notice), where the label's is "
                            "the first SIGTERM line (4)",
    ("outcome", "1766"): "'incomplete ... without readiness or failure': the header '[2025-11-27` 21:35:14] Scheduler "
                         "hit an exception: Traceback (most recent call last):' (line 1) is unrecognised (a backtick "
                         "inside the stamp), read as an unrecognised record that says an error, so the cut traceback "
                         "after it (lines 2-9) is taken as one that record logged, an error the code went on from",
    ("crash", "1766"): "no crash: the scheduler's cut traceback is kept as a logged error, as outcome[1766]",
    ("fatal_line", "1766"): "no crash, so no fatal line; the label's is the header at line 1",
}


def number(file: str) -> str:
    """An excerpt's number, its file name's prefix ("201", "1000"): its id and its key in PENDING."""
    return file.split("-", 1)[0]


def _rows(test: str) -> list[Any]:
    return [pytest.param(r, id=number(r["file"]),
                         marks=[pytest.mark.xfail(reason=PENDING[(test, number(r["file"]))], strict=True)]
                         if (test, number(r["file"])) in PENDING else [])
            for r in ROWS]


@pytest.fixture(scope="module")
def analysed() -> dict[str, tuple[RunSummary, list[Any]]]:
    return {row["file"]: (summarize_file(UNSEEN / row["file"]), list(iter_events(UNSEEN / row["file"])))
            for row in ROWS}


def test_every_excerpt_has_one_row_with_its_source_and_labels() -> None:
    assert sorted(p.name for p in UNSEEN.glob("*.log")) == sorted(r["file"] for r in ROWS)
    assert len(ROWS) >= 25
    for row in ROWS:
        assert row["source"].startswith("https://github.com/"), row["file"]
        assert row["outcome"] in OUTCOMES, row["file"]
        assert row["phase_reached"] in set(PHASES) | {"n/a"}, row["file"]
        assert row["fatal_line"] == "none" or row["fatal_line"].isdigit(), row["file"]
        assert (row["fatal_line"] == "none") == (row["outcome"] in ("partial", "ready")), row["file"]
    assert not {k[1] for k in PENDING} - {number(r["file"]) for r in ROWS}


@pytest.mark.parametrize("row", _rows("outcome"))
def test_outcome(row: dict[str, str], analysed: Any) -> None:
    summary, events = analysed[row["file"]]
    label = row["outcome"]
    if label == "partial":  # a window that shows the server serving reads as ready
        served = any(e.kind in ("decode_batch", "prefill_batch") or _served_request(e) for e in events)
        if served and not any(e.kind in ("decode_batch", "prefill_batch") or e.kind == "http_access"
                              and _served_request(e) for e in events) and _health_refused(events):
            served = False  # the HTTP server up, its health check refused: not ready (672)
        assert summary.outcome == ("ready" if served else "incomplete"), summary.outcome_reason
        assert summary.crash is None and summary.stopped is None
    elif label == "stopped":
        assert summary.outcome in ("ready", "incomplete") and summary.stopped is not None, summary.outcome_reason
        assert summary.crash is None
    else:
        assert summary.outcome == label, summary.outcome_reason


def _health_refused(events: list[Any]) -> bool:
    """The health check answered with a server error and never with success."""
    health = [e.fields.get("status") for e in events if e.kind == "http_probe"
              and str(e.fields.get("path") or "").split("?", 1)[0] in ("/health", "/health_generate")]
    return any(isinstance(st, int) and st >= 500 for st in health) \
        and not any(isinstance(st, int) and 200 <= st < 300 for st in health)


def _served_request(e: Any) -> bool:
    """A request or a probe (``/health``, ``/metrics``) answered with success, other than the
    model-info probe of SGLang's launcher (which it polls before its warm-up request): SGLang
    starts its HTTP server once every scheduler is ready."""
    status, path = e.fields.get("status"), str(e.fields.get("path") or "").split("?", 1)[0]
    return (e.kind in ("http_access", "http_probe") and isinstance(status, int) and 200 <= status < 300
            and path not in LAUNCHER_PROBES)


@pytest.mark.parametrize("row", _rows("crash"))
def test_crash(row: dict[str, str], analysed: Any) -> None:
    summary, _ = analysed[row["file"]]
    ranks = [r.strip() for r in row["crashed_ranks"].split(",")] if row["crashed_ranks"] not in NOT_A_VALUE else []
    if row["outcome"] == "hung":
        assert summary.hang is not None
        assert set(ranks) <= set(summary.hang.ranks)
        return
    if row["outcome"] != "crashed":
        assert summary.crash is None
        return
    crash = summary.crash
    assert crash is not None
    if row["crash_phase"] not in NOT_A_VALUE:
        assert crash.phase == row["crash_phase"]
    else:
        assert crash.phase is None  # the label found no phase in the text: nor may the summary
    if row["exception"] not in NOT_A_VALUE:
        assert crash.exception == row["exception"]
    else:
        assert crash.exception is None
    if ranks:
        assert crash.ranks == ranks and crash.first_rank == ranks[0]
    elif row["crashed_ranks"] == "n/a":
        assert crash.ranks == []


@pytest.mark.parametrize("row", _rows("fatal_line"))
def test_fatal_line(row: dict[str, str], analysed: Any) -> None:
    """The line the summary cites first is the first fatal record the label names."""
    summary, _ = analysed[row["file"]]
    if row["fatal_line"] == "none":
        return
    want = int(row["fatal_line"])
    if row["outcome"] == "hung":
        assert summary.hang is not None and summary.hang.first_line == want
    elif row["outcome"] == "stopped":
        assert summary.stopped is not None and summary.stopped.line == want
    else:
        assert summary.crash is not None and summary.crash.line == want


@pytest.mark.parametrize("row", _rows("phase_reached"))
def test_phase_reached(row: dict[str, str], analysed: Any) -> None:
    summary, _ = analysed[row["file"]]
    reached = set(summary.phase_reached.values())
    if summary.crash is not None and summary.crash.phase:  # a crash's frames place a rank that printed no phase line
        reached.add(summary.crash.phase)
    if row["phase_reached"] == "n/a":
        assert not reached & {"serving"} or row["outcome"] == "crashed"
    else:
        assert row["phase_reached"] in reached, reached


FIGURE_CASES = [pytest.param(f, k, v, id=f"{number(f)}-{k}",
                             marks=[pytest.mark.xfail(reason=PENDING[(f"key_figure[{k}]", number(f))], strict=True)]
                             if (f"key_figure[{k}]", number(f)) in PENDING else [])
                for f, k, v in figure_cases(ROWS)]


@pytest.mark.parametrize("file,key,value", FIGURE_CASES)
def test_key_figure(file: str, key: str, value: str, analysed: Any) -> None:
    assert key in FIGURES and key not in NOT_RUN_FIGURES, key
    summary, events = analysed[file]
    got = FIGURES[key](summary, events)
    assert_figure(key, got, value)


def test_243_registering_graph_addresses_places_each_dp_rank_in_capture(analysed: Any) -> None:
    """Custom all-reduce's 'Registering N cuda graph addresses' (printed as a capture ends, or
    fails) is each DP rank's only record: it places that rank in graph capture, no further."""
    [name] = [r["file"] for r in ROWS if r["file"].startswith("243-")]
    summary, events = analysed[name]
    registered = [e for e in events if e.kind == "capture_registered"]
    assert [(e.line, e.rank, e.fields["addresses"]) for e in registered][:2] == [(4, "DP0 TP0", 0), (5, "DP6 TP6", 0)]
    assert len(registered) == 6
    assert summary.phase_reached == {f"DP{i} TP{i}": "cuda_graph_capture" for i in (0, 1, 2, 3, 4, 6)}
    assert summary.coverage.lines_unrecognised == 0


def _summary_of(prefix: str, analysed: Any) -> RunSummary:
    [name] = [r["file"] for r in ROWS if r["file"].startswith(prefix + "-")]
    return analysed[name][0]


def test_253_transfer_thread_traceback_is_an_error_the_server_went_on_from(analysed: Any) -> None:
    """The NIXL KV sender's transfer thread logs its traceback under 'Unexpected transfer worker
    error for room N', fails the room and goes on (the request gets a 500): an error logged,
    not a crash."""
    s = _summary_of("253", analysed)
    assert s.crash is None and s.outcome == "incomplete"
    [err] = s.errors
    assert (err.line, err.kind, err.source, err.exception) == (2, "exception", "transfer_worker", "RuntimeError")


def test_257_mixed_vllm_lines_are_counted_not_called_the_whole_log(analysed: Any) -> None:
    """10 of 16 records are vLLM's platform lines; SGLang's own 'Launch DP' lines are there
    too, so the verdict counts them rather than calling every record vLLM's."""
    s = _summary_of("257", analysed)
    assert s.outcome == "incomplete"
    assert "10 of its 16 records are vLLM's" in s.outcome_reason


def test_253_watch_sees_no_crash_in_a_traceback_the_transfer_thread_went_on_from() -> None:
    from logforensics.ingest import LiveRun
    from logforensics.watch.state import WatchState

    [path] = UNSEEN.glob("253-*.log")
    state = WatchState(LiveRun(path.name), None, [])
    state.feed(path.read_bytes(), 0.0)
    state.settle(1.0)
    assert state.crash_at is None


def test_268_a_piecewise_capture_begun_after_the_first_capture_ended_is_not_its_begin(analysed: Any) -> None:
    """TP1's window starts after its decode capture began: its later 'Capture piecewise CUDA
    graph begin' (line 6, after its capture end at line 5) is another capture's and gives no
    begin figure; TP0's own decode capture begin (line 1) stays."""
    s = _summary_of("268", analysed)
    assert s.memory["TP0"].capture_begin_avail_gib == 11.64
    assert s.memory["TP1"].capture_begin_avail_gib is None
    assert s.memory["TP1"].capture_end_avail_gib == 10.88


def test_272_the_piecewise_graph_failure_of_tp7_comes_before_tp5s_traceback(analysed: Any) -> None:
    s = _summary_of("272", analysed)
    assert s.crash is not None
    assert (s.crash.line, s.crash.ranks, s.crash.phase) == (4, ["TP7", "TP5"], "cuda_graph_capture")
    assert s.coverage.lines_unrecognised == 0


@pytest.mark.parametrize("prefix", ["253", "262"])
def test_an_error_the_server_went_on_from_is_reported_by_its_rule(prefix: str) -> None:
    """A traceback logged by code that goes on (the transfer thread's, one HTTP request's) is
    ER01's error: the rule evaluates, and names no rank that no line names."""
    from logforensics.pipeline import diagnose_files

    [name] = [r["file"] for r in ROWS if r["file"].startswith(prefix + "-")]
    d = diagnose_files(str(UNSEEN / name), None)
    assert d.failing.outcome == "incomplete"
    [f] = [f for f in d.findings if f.rule == "ER01"]
    assert f.title.startswith("a process printed a traceback (") and f.title.endswith(") not read as the run's end")


@pytest.mark.parametrize("prefix,line,rank,named_at", [("279", 1, "TP0", 2), ("300", 1, "TP7", 2), ("303", 1, "TP1", 4)])
def test_the_verdict_ties_no_rank_to_a_line_that_names_none(prefix: str, line: int, rank: str, named_at: int,
                                                            analysed: Any) -> None:
    """The crash's line is its first fatal record's, and its rank the first record's that names
    one (the labels of real/043, real/115 and 251: a tail before a rank's traceback). Where the
    first line names no rank, the reason says so and where the rank comes from, not "on TP0 at
    line 1" of a line that does not name TP0."""
    s = _summary_of(prefix, analysed)
    assert s.crash is not None and s.crash.line == line and s.crash.ranks == [rank]
    assert f"on {rank} at line {line}" not in s.outcome_reason
    assert s.outcome_reason.endswith(f"at line {line} (its line names no rank; {rank}'s record follows at line {named_at})")


def test_requests_no_receive_record_shows_are_not_counted_as_none_received(analysed: Any) -> None:
    """315 finishes one request (its Req Time Stats) and holds no Receive record: how many were
    received is not in the log, not zero."""
    s = _summary_of("315", analysed)
    assert s.serving is not None and s.serving.requests is not None
    assert (s.serving.requests.received, s.serving.requests.finished) == (None, 1)


def test_a_ranks_last_record_a_traceback_gives_its_last_seen_its_stamp(analysed: Any) -> None:
    """325: TP0's last record is its traceback, stamped 02:52:38 (line 3), twelve minutes after
    its prefill batch (line 2): the rank was last seen then, not at the batch's stamp."""
    s = _summary_of("325", analysed)
    seen = s.last_seen["TP0"]
    assert (seen.line, seen.ts) == (15, "2025-05-29T02:52:38")


def test_a_rankless_traceback_the_verdict_gives_a_rank_is_that_ranks_last_record(analysed: Any) -> None:
    """332 names no rank: its traceback (lines 7-8, 09:21:49) is the one scheduler's ('-'), so
    that scheduler was last seen there, not at line 4."""
    s = _summary_of("332", analysed)
    assert s.crash is not None and s.crash.first_rank == "-"
    assert (s.last_seen["-"].line, s.last_seen["-"].ts) == (8, "2025-12-15T09:21:49")
