"""Where a rank stands, from records that are not start-up milestones of their own.

* HiCache's host pool (mem_cache/memory_pool_host.py, ``HostKVCache.__init__``):
  ``logger.info(f"Allocating {requested_bytes / 1e9:.2f} GB host memory for hierarchical KV cache.")``
  is printed while the rank builds its KV pools: the rank is in kv_cache_alloc, unless it is past
  it already (the scheduler's cache set-up prints it after its ``max_total_num_tokens=...`` line).
* ``The server is fired up and ready to roll!`` is printed once every scheduler is ready: a rank
  whose records come after it (a request's transfer failure, decode.py's
  ``f"Decode transfer failed for request rank={self.tp_rank} {decode_req.req.rid=} ..."``) is
  serving, though it printed no batch.
* torch's Gloo transport prints ``[Gloo] Rank N is connected to M peer ranks. Expected number of
  connected peer ranks is : M`` in each process as SGLang sets up its CPU process groups
  (``init_distributed_environment``, ``initialize_model_parallel``): a process that printed only
  these is in init_distributed. N is the group's rank, not a scheduler's.
* sglang-jax precompiles its forward for each padded batch shape after its KV cache, its
  counterpart of CUDA graph capture (``Scheduler.__init__``: ``logger.info("[Scheduler] Begins to run
  worker precompile.")``; ``tp_worker.precompile_extend``: ``"[EXTEND] Begin to precompile
  bs_paddings=%s token_paddings=%s"``; its bar ``desc="[EXTEND] PRECOMPILE"``).
"""

from __future__ import annotations

from pathlib import Path

from logforensics import summarize_file

HOST_POOL = "".join(f"[2026-07-18 03:03:06 ATTN_CP{r} TP{r}] Allocating 120.00 GB host memory for hierarchical "
                    "KV cache.\n" for r in (0, 1))
AFTER_READY = (
    "[2025-11-05 16:35:02] The server is fired up and ready to roll!\n"
    '[2025-11-05 16:38:04] INFO:     127.0.0.1:32770 - "GET /health HTTP/1.1" 200 OK\n'
    "[2025-11-05 16:39:09 TP0] Decode transfer failed for request rank=0 decode_req.req.rid='78fde411' "
    "decode_req.req.bootstrap_room=479 with exception KVTransferError(bootstrap_room=479): Aborted by AbortReq.\n")


def test_the_host_pool_line_places_its_rank_in_kv_cache_alloc(tmp_path: Path) -> None:
    log = tmp_path / "hicache.log"
    log.write_text(HOST_POOL)
    s = summarize_file(log)
    assert s.phase_reached == {"ATTN_CP0 TP0": "kv_cache_alloc", "ATTN_CP1 TP1": "kv_cache_alloc"}


def test_the_host_pool_line_after_the_token_budget_is_no_step_back(tmp_path: Path) -> None:
    """real-unseen 493: the scheduler prints its budget, then allocates HiCache's host pool."""
    log = tmp_path / "hicache-late.log"
    log.write_text("[2026-03-25 02:51:37] max_total_num_tokens=105600, chunked_prefill_size=8192, "
                   "max_prefill_tokens=16384, max_running_requests=4096, context_len=40960, available_gpu_mem=8.71 GB\n"
                   "[2026-03-25 02:51:38] Allocating 15.58 GB host memory for hierarchical KV cache.\n")
    assert summarize_file(log).phase_reached == {"-": "warmup"}


def test_a_rank_that_prints_after_readiness_is_serving(tmp_path: Path) -> None:
    log = tmp_path / "ready.log"
    log.write_text(AFTER_READY)
    s = summarize_file(log)
    assert s.outcome == "ready" and s.phase_reached == {"TP0": "serving"}


def test_a_pd_servers_transfer_failure_for_a_request_places_its_rank_in_serving(tmp_path: Path) -> None:
    """Only a scheduler that serves fails one request's KV transfer (real-unseen 523): its rank is
    serving with no readiness line in the window, and the record still gives PD01 its failure."""
    log = tmp_path / "pd.log"
    log.write_text("[2026-02-26 12:53:08 TP4] Prefill transfer failed for request rank=4 "
                   "req.rid='af2f3f99db344fab9f0598c637f163fe' req.bootstrap_room=6989861766352545488 with exception "
                   "KVTransferError(bootstrap_room=6989861766352545488): Decode instance could be dead\n")
    s = summarize_file(log)
    assert s.phase_reached == {"TP4": "serving"} and s.outcome != "crashed"
    assert s.coverage.lines_unrecognised == 0


def test_the_server_of_a_log_that_names_no_rank_serves_once_ready(tmp_path: Path) -> None:
    """A log whose lines name no rank (real-unseen 544: a PD server that warms up and prints
    'fired up' last) places its one unnamed scheduler in serving once the server is ready."""
    log = tmp_path / "unranked.log"
    log.write_text("[2026-02-27 14:34:03] INFO:     Uvicorn running on http://10.99.91.49:30001 (Press CTRL+C to quit)\n"
                   "[2026-02-27 14:34:05] The server is fired up and ready to roll!\n")
    assert summarize_file(log).phase_reached == {"-": "serving"}


def test_the_http_server_up_places_the_unnamed_scheduler_in_warmup(tmp_path: Path) -> None:
    """SGLang starts uvicorn once every scheduler is ready, before its warm-up request (real-unseen
    495): in a log that names no rank, 'Uvicorn running on ...' places the one unnamed scheduler in
    warmup; a ranked log's ranks are placed by their own records."""
    log = tmp_path / "http.log"
    up = "[2026-01-28 08:52:44] INFO:     Uvicorn running on http://172.30.9.43:30010 (Press CTRL+C to quit)\n"
    log.write_text(up)
    assert summarize_file(log).phase_reached == {"-": "warmup"}
    log.write_text("[2026-01-28 08:52:40 TP0] Load weight begin. avail mem=78.00 GB\n" + up)
    assert summarize_file(log).phase_reached == {"TP0": "load_weights"}


BARE_BAR = ("[2026-02-17 23:20:54] Capture cuda graph bs [1, 2, 4, 8, 12, 16, 24, 32]\n"
            "\n"
            "  0%|          | 0/8 [00:00<?, ?it/s]\n")
DESCRIBED = ("[2026-02-17 23:20:54 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=14.64 GB\n"
             "Capturing batches (bs=1 avail_mem=14.64 GB): 100%|##########| 8/8 [00:01<00:00,  7.80it/s]\n"
             "100%|##########| 26/26 [00:03<00:00,  8.00it/s]\n")


def test_a_bar_without_a_description_during_capture_is_the_captures(tmp_path: Path) -> None:
    """CudaGraphRunner drew its bar over the batch sizes without a description before it had
    one: drawn during the capture, it is the capture's progress; after a bar with the
    description, a bare bar is another loop's and does not replace it."""
    (tmp_path / "bare.log").write_text(BARE_BAR)
    (tmp_path / "described.log").write_text(DESCRIBED)
    bare = summarize_file(tmp_path / "bare.log").progress
    assert [(b.n, b.total, b.line) for bars in bare.values() for p, b in bars.items() if p == "cuda_graph_capture"] \
        == [(0, 8, 3)]
    described = summarize_file(tmp_path / "described.log").progress
    assert [(b.n, b.total, b.line) for bars in described.values() for p, b in bars.items()
            if p == "cuda_graph_capture"] == [(8, 8, 2)]


LAUNCHER_PROBE = ('[2026-07-02 10:58:54] INFO:     127.0.0.1:55098 - "GET /health HTTP/1.1" 503 Service Unavailable\n'
                  '[2026-07-02 10:58:54] INFO:     127.0.0.1:55108 - "GET /model_info HTTP/1.1" 200 OK\n')


def test_the_launchers_model_info_probe_is_a_probe_not_a_request_served(tmp_path: Path) -> None:
    """SGLang's launcher polls ``/model_info`` (``/get_model_info`` before) until the HTTP server
    answers, then sends its warm-up request: the answer is a probe's (counted by path, as
    ``/health``), not a request served."""
    log = tmp_path / "probe.log"
    log.write_text(LAUNCHER_PROBE)
    s = summarize_file(log)
    assert s.coverage.requests is None
    assert {path: p.answers for path, p in (s.coverage.probes or {}).items()} == \
        {"/health": {"503": 1}, "/model_info": {"200": 1}}


GLOO = "".join(f"[Gloo] Rank {r} is connected to 7 peer ranks. Expected number of connected peer ranks is : 7\n"
               for r in (0, 1, 2, 3))


def test_gloo_connecting_the_process_groups_places_the_process_in_init_distributed(tmp_path: Path) -> None:
    log = tmp_path / "gloo.log"
    log.write_text(GLOO)
    s = summarize_file(log)
    assert s.phase_reached == {"-": "init_distributed"} and s.coverage.lines_unrecognised == 0


def test_gloo_lines_name_no_scheduler_rank_and_move_none_back(tmp_path: Path) -> None:
    log = tmp_path / "gloo-late.log"
    log.write_text("[2025-06-01 10:00:05 TP0] Load weight begin. avail mem=70.00 GB\n" + GLOO)
    assert summarize_file(log).phase_reached == {"TP0": "load_weights"}


def test_sglang_jax_precompiling_its_batch_shapes_is_in_graph_capture(tmp_path: Path) -> None:
    log = tmp_path / "jax.log"
    log.write_text("[2025-11-02 10:00:00] ModelRunner max_total_num_tokens: 315424\n"
                   "[2025-11-02 10:00:01] [Scheduler] Begins to run worker precompile.\n"
                   "[2025-11-02 10:00:01] [EXTEND] Begin to precompile bs_paddings=[128] token_paddings=[2048]\n")
    s = summarize_file(log)
    assert s.phase_reached == {"-": "cuda_graph_capture"} and s.coverage.lines_unrecognised == 0


DRAFT = ("[2026-09-10 12:57:48 TP0] Load weight end. elapsed=2455.47 s, type=Qwen4ExpForConditionalGeneration, "
         "avail mem=8.84 GB, mem usage=21.90 GB.\n"
         "[2026-09-10 13:02:13 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=7.41 GB\n"
         "[2026-09-10 13:04:56 TP0] Capture cuda graph end. Time elapsed: 163.68 s. mem usage=0.09 GB. "
         "avail mem=7.32 GB.\n"
         "[2026-09-10 13:06:01 TP0] Load weight end. elapsed=55.46 s, type=Qwen4ExpForCausalLMMTP, "
         "avail mem=5.53 GB, mem usage=1.80 GB.\n")


def test_a_draft_models_weights_after_the_targets_graphs_are_no_step_back(tmp_path: Path) -> None:
    """real-unseen 1110: speculative decoding loads its draft model after the target's graphs, on
    the same rank: the rank stays past its weights, and its figures stay the target's."""
    log = tmp_path / "mtp.log"
    log.write_text(DRAFT)
    s = summarize_file(log)
    assert s.phase_reached == {"TP0": "cuda_graph_capture"}
    memory = s.per_rank["TP0"].memory
    assert (memory.weights_gib, memory.load_end_avail_gib, memory.load_elapsed_s) == (21.90, 8.84, 2455.47)
    assert (memory.draft_weights_gib, memory.draft_load_end_avail_gib, memory.draft_load_elapsed_s) == (1.80, 5.53, 55.46)
    assert memory.evidence["draft_load_weight_end"].line == 4


def test_a_request_served_places_the_ranks_past_their_kv_pool_in_serving(tmp_path: Path) -> None:
    """SGLang starts its HTTP server once every scheduler is ready: a request it served says so,
    as the readiness line would."""
    log = tmp_path / "served.log"
    log.write_text(DRAFT + '[2026-09-10 13:07:28] INFO:     127.0.0.1:55478 - "POST /generate HTTP/1.1" 200 OK\n')
    s = summarize_file(log)
    assert s.outcome == "ready" and s.phase_reached == {"TP0": "serving"}
