"""What the record grammar makes of every template SGLang printed, v0.2.5 to v0.5.23.

One row per template and wording (the reference is ``sglang-log-formats.md``, sections
1.4 and 2.1-2.6, plus the foreign formats found in real logs). Each row parses one
record with :func:`plan_record` and checks its kind, rank label, ISO timestamp and key
fields, so a grammar change that loses a wording fails here, by name, before the
real-log tests notice. ``tests/test_fastpath.py`` reuses :data:`CASES` to check that the
memoised fast path agrees with the grammar on the same shapes with other digits.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from logforensics.read.grammar import parsers, plan_record
from logforensics.read.plan import build_event
from logforensics.read.planner import Planner
from logforensics.read.terminals import RULES

GRAMMAR = Path(__file__).resolve().parent.parent / "grammars" / "sglang.lark"


class Case(NamedTuple):
    text: str
    kind: str
    rank: str | None
    ts: str | None
    fields: dict[str, Any]


TS = "2025-03-01T14:03:07"
P0 = "[2025-03-01 14:03:07 TP0] "  # v0.3.6+ scheduler rank prefix
P3 = "[2025-03-01 14:03:07 TP3] "
M = "[2025-03-01 14:03:07] "  # main process, or a single-GPU scheduler from v0.4.8
OLD = "[14:03:07 TP0] "  # v0.2.15 - v0.3.3: time only
OTS = "14:03:07"

PREFIXES = [
    Case("[2025-03-01 14:03:07 TP0] Init torch distributed begin.", "init_dist_begin", "TP0", TS, {}),
    Case("[2025-03-01 14:03:07.123 TP0] Init torch distributed begin.", "init_dist_begin", "TP0", TS + ".123", {}),
    Case("[2025-03-01 14:03:07] Init torch distributed begin.", "init_dist_begin", None, TS, {}),
    Case("[14:03:07 TP1] Init nccl begin.", "init_dist_begin", "TP1", OTS, {}),
    Case("[14:03:07] Init nccl begin.", "init_dist_begin", None, OTS, {}),
    Case("Init torch distributed begin.", "init_dist_begin", None, None, {}),
    Case("[2025-03-01 14:03:07 DP-1 TP0] Init torch distributed begin.", "init_dist_begin", "DP-1 TP0", TS, {}),
    Case("[2025-03-01 14:03:07 DP1 TP0] Init torch distributed begin.", "init_dist_begin", "DP1 TP0", TS, {}),
    Case("[2025-03-01 14:03:07 TP2 PP1] Init torch distributed begin.", "init_dist_begin", "TP2 PP1", TS, {}),
    Case("[2025-03-01 14:03:07 DP0 TP3 EP3 PP0] Init torch distributed begin.", "init_dist_begin", "DP0 TP3 EP3 PP0", TS, {}),
    Case("[2025-03-01 14:03:07 DP0 PP1 TP3 EP3] Init torch distributed begin.", "init_dist_begin", "DP0 PP1 TP3 EP3", TS, {}),
    Case("[2025-03-01 14:03:07.004 DP1 PP1 ATTN_CP2 MOE_DP3 TP12 EP12] Init parallel begin.", "init_dist_begin",
         "DP1 PP1 ATTN_CP2 MOE_DP3 TP12 EP12", TS + ".004", {}),
    Case("[2025-03-01 14:03:07 PP1] Init torch distributed begin.", "init_dist_begin", "PP1", TS, {}),
    Case("[2025-03-01 14:03:07 encode_server] Load weight begin. avail mem=70.00 GB", "load_weight_begin",
         "encode_server", TS, {"avail_gib": 70.0}),
    Case("[2025-03-01 14:03:07 encode_dp_worker[2]] Load weight begin. avail mem=70.00 GB", "load_weight_begin",
         "encode_dp_worker[2]", TS, {"avail_gib": 70.0}),
    # a paste that starts inside the first prefix: the stamp is unusable, the rank is not
    Case("026-05-28 00:11:09.816 DP0 TP0 EP0] Scheduler hit an exception: Traceback (most recent call last):",
         "exc_header", "DP0 TP0 EP0", None, {"source": "Scheduler"}),
    # v0.2.5 / v0.2.10: no logging prefix, the rank is in the message
    Case("[gpu_id=0] Init nccl begin.", "init_dist_begin", "gpu_id=0", None, {}),
    Case("[gpu=1] Init nccl begin.", "init_dist_begin", "gpu=1", None, {}),
    # an unknown message keeps its stamp and rank
    Case(P0 + "MLA optimization is turned on. Use triton backend.", "other", "TP0", TS, {}),
]

STARTUP_MAIN = [  # 2.1
    Case(M + "server_args=ServerArgs(model_path='/models/Llama-3-8B', tp_size=1, mem_fraction_static=0.88)",
         "server_args", None, TS, {"raw": "ServerArgs(model_path='/models/Llama-3-8B', tp_size=1, mem_fraction_static=0.88)"}),
    Case(M + "server_args={'model_path': '/models/Llama-3-8B', 'tp_size': 1}", "server_args", None, TS,
         {"raw": "{'model_path': '/models/Llama-3-8B', 'tp_size': 1}"}),
    Case("server_args=ServerArgs(model_path='m', port=30000)", "server_args", None, None, {}),
    Case(M + "Launch DP1 starting at GPU #4.", "dp_launch", None, TS, {"dp_rank": 1, "base_gpu_id": 4}),
    Case(M + "The server is fired up and ready to roll!", "server_ready", None, TS, {}),
    Case("The server is fired up and ready to roll!", "server_ready", None, None, {}),
    Case("Initialization failed. warmup error: Connection refused", "warmup_failed", None, None,
         {"message": "Connection refused"}),
    Case(M + "Initialization failed. warmup error: Traceback (most recent call last):", "warmup_failed", None, TS,
         {"message": "Traceback (most recent call last):"}),
    Case(M + "Skipping warmup request in disaggregation mode", "warmup_skipped", None, TS, {}),
    Case(M + "Skipping gRPC server warmup (skip_server_warmup=True)", "warmup_skipped", None, TS, {}),
]

INIT_DIST = [  # 2.2: distributed init, NCCL, custom all-reduce
    Case("[gpu_id=0] Init nccl begin.", "init_dist_begin", "gpu_id=0", None, {}),
    Case("[gpu=0] Init nccl begin.", "init_dist_begin", "gpu=0", None, {}),
    Case(OLD + "Init nccl begin.", "init_dist_begin", "TP0", OTS, {}),
    Case(P0 + "Init torch distributed begin.", "init_dist_begin", "TP0", TS, {}),
    Case(P0 + "Init parallel begin.", "init_dist_begin", "TP0", TS, {}),
    Case(P0 + "Init torch distributed ends. mem usage=0.51 GB", "init_dist_end", "TP0", TS, {"mem_usage_gib": 0.51}),
    Case(P0 + "Init torch distributed ends. elapsed=1.23 s, mem usage=0.51 GB", "init_dist_end", "TP0", TS,
         {"elapsed_s": 1.23, "mem_usage_gib": 0.51}),
    Case(P0 + "Init parallel ends. elapsed=12.05 s", "init_dist_end", "TP0", TS, {"elapsed_s": 12.05}),
    Case(P0 + "Memory baseline taken. mem usage=0.75 GB", "memory_baseline", "TP0", TS, {"mem_usage_gib": 0.75}),
    Case(P0 + "NCCL/RCCL/HCCL warmup completed in 0.123s (tp_size=8, pp_size=1, ep_size=8)", "nccl_warmup", "TP0", TS,
         {"group": "NCCL/RCCL/HCCL", "elapsed_s": 0.123, "tp_size": 8, "pp_size": 1, "ep_size": 8}),
    Case(P0 + "EPLB default-group P2P warmup completed in 1.500s (world_size=16, free memory delta=12.34 MiB)",
         "nccl_warmup", "TP0", TS,
         {"group": "EPLB default-group P2P", "elapsed_s": 1.5, "world_size": 16, "free_memory_delta_mib": 12.34}),
    Case(P0 + "TP LM-head PyNCCL all-to-all warmup completed in 0.010s (tp_size=8, bytes_per_peer=1048576)",
         "nccl_warmup", "TP0", TS, {"group": "TP LM-head PyNCCL all-to-all", "elapsed_s": 0.01, "bytes_per_peer": 1048576}),
    Case(P0 + "The memory capacity is unbalanced. Some GPUs may be occupied by other processes.",
         "unbalanced_memory", "TP0", TS, {}),
    Case(P0 + "The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
         "min_per_gpu_memory=60.5, local_gpu_memory=78.25, local_gpu_memory * 0.9=70.425",
         "unbalanced_memory", "TP0", TS, {"min_avail_gib": 60.5, "local_avail_gib": 78.25, "threshold_gib": 70.425}),
    Case(P0 + "The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
         "pre_model_load_memory=60.123456789, local_gpu_memory=78.0, local_gpu_memory * 0.9=70.2",
         "unbalanced_memory", "TP0", TS, {"min_avail_gib": 60.123456789, "local_avail_gib": 78.0, "threshold_gib": 70.2}),
    Case(P0 + "sglang is using nccl==2.21.5", "nccl_version", "TP0", TS, {"version": "2.21.5"}),
    Case(P0 + "Found nccl from environment variable SGLANG_NCCL_SO_PATH=/opt/nccl/lib/libnccl.so.2",
         "nccl_library", "TP0", TS, {"path": "/opt/nccl/lib/libnccl.so.2"}),
    Case(P0 + "Found nccl from library libnccl.so.2", "nccl_library", "TP0", TS, {"path": "libnccl.so.2"}),
    Case(P0 + "Failed to load NCCL library from libnccl.so.2 . It is expected if you are not running on "
         "NVIDIA/AMD/MTHREADS GPUs. Otherwise, the nccl library might not exist, be corrupted or it does not "
         "support the current platform Linux-5.15. If you already have the library, please set the environment "
         "variable SGLANG_NCCL_SO_PATH to point to the correct nccl library path.",
         "nccl_load_failed", "TP0", TS, {"path": "libnccl.so.2"}),
    Case(P0 + "Failed to load NCCL library from libnccl.so.2 .", "nccl_load_failed", "TP0", TS, {"path": "libnccl.so.2"}),
    Case(P0 + "Custom allreduce is disabled because this process group spans across nodes.",
         "custom_ar_disabled", "TP0", TS, {"component": "Custom allreduce", "reason": "because this process group spans across nodes."}),
    Case(P0 + "Custom allreduce is disabled due to an unsupported world size: 3. Supported world sizes: [2, 4, 6, 8]. "
         "To silence this warning, specify disable_custom_all_reduce=True explicitly.",
         "custom_ar_disabled", "TP0", TS, {"component": "Custom allreduce"}),
    Case(P3 + "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. To silence "
         "this warning, specify disable_custom_all_reduce=True explicitly.",
         "custom_ar_disabled", "TP3", TS, {"component": "Custom allreduce"}),
    Case(P0 + "Custom allreduce is disabled because your platform lacks GPU P2P capability or P2P test failed. To "
         "silence this warning, specify disable_custom_all_reduce=True explicitly.",
         "custom_ar_disabled", "TP0", TS, {"component": "Custom allreduce"}),
    Case(P0 + "CustomAllreduce is disabled because this process group spans across nodes.",
         "custom_ar_disabled", "TP0", TS, {"component": "CustomAllreduce"}),
    Case(P0 + "CustomAllReduceV2 is disabled due to an unsupported world size: 12. Supported world sizes: [2, 4, 6, 8]. "
         "To silence this warning, specify disable_custom_all_reduce=True explicitly.",
         "custom_ar_disabled", "TP0", TS, {"component": "CustomAllReduceV2"}),
    Case(P0 + "CustomAllreduce is disabled because it's not supported on more than two PCIe-only GPUs. To silence "
         "this warning, specify disable_custom_all_reduce=True explicitly.", "custom_ar_disabled", "TP0", TS, {}),
    Case(P0 + "CustomAllReduceV2 is disabled because your platform lacks GPU P2P capability or P2P test failed. To "
         "silence this warning, specify disable_custom_all_reduce=True explicitly.", "custom_ar_disabled", "TP0", TS, {}),
    Case(P0 + "Skipping P2P check and trusting the driver's P2P report.", "p2p_check_skipped", "TP0", TS, {}),
    Case(P0 + "[AR] Using CustomAllReduceV2 (JIT-compiled)", "allreduce_backend", "TP0", TS,
         {"message": "Using CustomAllReduceV2 (JIT-compiled)"}),
    Case(P0 + "[AR] All-reduce: 1-stage kernel (SGLANG_USE_1STAGE_ALLREDUCE=1)", "allreduce_backend", "TP0", TS, {}),
    Case(P0 + "[AR] Using AiterCustomAllreduce (AMD default)", "allreduce_backend", "TP0", TS, {}),
    Case(P0 + "Compute capability below sm80. Use float16 due to lack of bfloat16 support.", "fp16_fallback", "TP0", TS, {}),
]

WEIGHTS = [  # 2.2: weights
    Case("[gpu_id=0] Load weight begin. avail mem=22.05 GB", "load_weight_begin", "gpu_id=0", None, {"avail_gib": 22.05}),
    Case("[gpu=1] Load weight begin. avail mem=22.05 GB", "load_weight_begin", "gpu=1", None, {"avail_gib": 22.05}),
    Case(OLD + "Load weight begin. avail mem=22.05 GB", "load_weight_begin", "TP0", OTS, {"avail_gib": 22.05}),
    Case(P0 + "Load weight begin. avail mem=78.50 GB", "load_weight_begin", "TP0", TS, {"avail_gib": 78.5}),
    Case("[gpu_id=0] Load weight end. type=LlamaForCausalLM, dtype=torch.float16, avail mem=9.32 GB",
         "load_weight_end", "gpu_id=0", None, {"model_type": "LlamaForCausalLM", "dtype": "torch.float16", "avail_gib": 9.32}),
    Case("[gpu=0] Load weight end. type=LlamaForCausalLM, dtype=torch.float16, avail mem=9.32 GB",
         "load_weight_end", "gpu=0", None, {"avail_gib": 9.32}),
    Case(OLD + "Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=62.10 GB", "load_weight_end",
         "TP0", OTS, {"model_type": "Qwen2ForCausalLM", "dtype": "torch.bfloat16", "avail_gib": 62.1}),
    Case(P0 + "Load weight end. type=Gemma3ForConditionalGeneration, dtype=torch.bfloat16, avail mem=20.71 GB, "
         "mem usage=54.98 GB.", "load_weight_end", "TP0", TS,
         {"model_type": "Gemma3ForConditionalGeneration", "dtype": "torch.bfloat16", "avail_gib": 20.71, "mem_usage_gib": 54.98}),
    Case(P0 + "Load weight end. elapsed=228.09 s, type=GlmMoeDsaForCausalLM, avail mem=194.32 GB, mem usage=89.58 GB.",
         "load_weight_end", "TP0", TS,
         {"elapsed_s": 228.09, "model_type": "GlmMoeDsaForCausalLM", "avail_gib": 194.32, "mem_usage_gib": 89.58}),
    Case(P0 + "Load weight end. elapsed=31.40 s, type=DeepseekV3ForCausalLM, quant=fp8, avail mem=100.10 GB, "
         "mem usage=80.00 GB.", "load_weight_end", "TP0", TS, {"quant": "fp8", "elapsed_s": 31.4, "mem_usage_gib": 80.0}),
    Case(P0 + "Load weight end. elapsed=5.00 s, type=LlamaForCausalLM, quant=awq, bits=4, quant_algo=AWQ, fmt=e2m1, "
         "avail mem=70.00 GB, mem usage=4.50 GB.", "load_weight_end", "TP0", TS,
         {"quant": "awq", "bits": 4, "quant_algo": "AWQ", "fmt": "e2m1", "avail_gib": 70.0, "mem_usage_gib": 4.5}),
    Case(P0 + "Load weight end. Committed real weights after CUDA graph capture in 3.25 s (capture overlap window "
         "10.50 s, startup overlap total 12.75 s)", "load_weight_end", "TP0", TS,
         {"elapsed_s": 3.25, "capture_overlap_s": 10.5, "startup_overlap_s": 12.75, "committed_after_capture": True}),
]

KV_CACHE = [  # 2.2: KV cache and memory pools
    Case(P0 + "KV Cache is allocated. K size: 1.50 GB, V size: 1.50 GB.", "kv_cache_alloc", "TP0", TS,
         {"k_gib": 1.5, "v_gib": 1.5}),
    Case(P0 + "KV Cache is allocated. #tokens: 2795207, K size: 53.31 GB, V size: 53.31 GB", "kv_cache_alloc", "TP0", TS,
         {"tokens": 2795207, "k_gib": 53.31, "v_gib": 53.31}),
    Case(P0 + "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 12345, K size: 1.50 GB, V size: 1.50 GB",
         "kv_cache_alloc", "TP0", TS, {"dtype": "torch.bfloat16", "tokens": 12345, "k_gib": 1.5, "v_gib": 1.5}),
    Case(P0 + "Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 400000, K size: 4.58 GB, V size: 4.58 GB",
         "kv_cache_alloc", "TP0", TS, {"label": "Full", "dtype": "torch.bfloat16", "tokens": 400000, "k_gib": 4.58}),
    Case(P0 + "SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 320000, K size: 3.66 GB, V size: 3.66 GB",
         "kv_cache_alloc", "TP0", TS, {"label": "SWA", "tokens": 320000, "v_gib": 3.66}),
    Case(P0 + "Full KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 900000, K size: 10.30 GB, V size: 10.30 GB",
         "kv_cache_alloc", "TP0", TS, {"label": "Full", "tokens": 900000, "va_upper_bound": True}),
    Case(P0 + "KV Cache is allocated. #tokens: 1029000, KV size: 68.40 GB", "kv_cache_alloc", "TP0", TS,
         {"tokens": 1029000, "kv_gib": 68.4}),
    Case(P0 + "KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 1029000, KV size: 34.20 GB",
         "kv_cache_alloc", "TP0", TS, {"dtype": "torch.float8_e4m3fn", "tokens": 1029000, "kv_gib": 34.2}),
    Case(P0 + "SWA KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 320000, KV size: 1.20 GB",
         "kv_cache_alloc", "TP0", TS, {"label": "SWA", "tokens": 320000, "kv_gib": 1.2}),
    Case(P0 + "MiniMax KV Cache is allocated. dtype: torch.bfloat16, #tokens: 5000, KV size: 0.20 GB",
         "kv_cache_alloc", "TP0", TS, {"label": "MiniMax", "kv_gib": 0.2}),
    Case(P0 + "KV Cache skipped (no-op pool). Logical #tokens: 65536, KV size: 0.00 GB", "kv_cache_skipped", "TP0", TS,
         {"tokens": 65536}),
    Case(P0 + "Mamba Cache is allocated. max_mamba_cache_size: 512, conv_state size: 0.50GB, ssm_state size: 12.00GB ",
         "mamba_cache_alloc", "TP0", TS,
         {"max_mamba_cache_size": 512, "conv_state_size_gib": 0.5, "ssm_state_size_gib": 12.0}),
    Case(P0 + "Mamba Cache is allocated. max_mamba_cache_size: 512, conv_state size: 0.50GB, ssm_state size: 12.00GB "
         "intermediate_ssm_state_cache size: 1.25GB intermediate_conv_window_cache size: 0.05GB ",
         "mamba_cache_alloc", "TP0", TS,
         {"ssm_state_size_gib": 12.0, "intermediate_ssm_state_cache_size_gib": 1.25,
          "intermediate_conv_window_cache_size_gib": 0.05}),
    Case(P0 + "Use sliding window memory pool. full_layer_tokens=400000, swa_layer_tokens=320000", "swa_pool", "TP0", TS,
         {"full_layer_tokens": 400000, "swa_layer_tokens": 320000}),
    Case(P0 + "Use sliding window memory pool (all SWA). swa_layer_tokens=320000", "swa_pool", "TP0", TS,
         {"swa_layer_tokens": 320000, "all_swa": True}),
    Case(P0 + "Post-capture KV sizing: full_layer_tokens=410000, swa_layer_tokens=328000", "swa_pool", "TP0", TS,
         {"full_layer_tokens": 410000, "post_capture": True}),
    Case(P0 + "Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 800000, KV size: 9.15 GB, "
         "avail mem=3.20 GB", "kv_cache_alloc", "TP0", TS,
         {"tokens": 800000, "kv_gib": 9.15, "avail_gib": 3.2, "post_capture": True}),
    Case(P0 + "Post-capture KV sizing: draft KV cache allocated. dtype: torch.bfloat16, #tokens: 800000, KV size: 0.40 GB",
         "kv_cache_alloc", "TP0", TS, {"tokens": 800000, "kv_gib": 0.4, "post_capture": True, "role": "draft"}),
    Case(P0 + "Post-capture KV sizing: max_running_requests 2048 -> 1024", "post_capture_kv", "TP0", TS,
         {"max_running_requests_before": 2048, "max_running_requests_after": 1024}),
    Case(P0 + "Post-capture KV sizing: decode CUDA graph max_bs=256 < max_running_requests=1024; reserving activation "
         "headroom", "post_capture_kv", "TP0", TS, {"max_bs": 256, "max_running_requests": 1024}),
    Case("[gpu_id=0] Memory pool end. avail mem=2.10 GB", "memory_pool_end", "gpu_id=0", None, {"avail_gib": 2.1}),
    Case(P0 + "Memory pool end. avail mem=11.82 GB", "memory_pool_end", "TP0", TS, {"avail_gib": 11.82}),
    Case(P0 + "Not enough memory. Please try to increase --mem-fraction-static.", "not_enough_memory", "TP0", TS, {}),
    Case(P0 + "Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.65",
         "not_enough_memory", "TP0", TS, {"mem_fraction_static": 0.65}),
    Case(P0 + "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.7. Raise "
         "--mem-fraction-static above 0.812 (minimum viable = 1 - available/pre = 0.8118). If using speculative "
         "decoding, draft weights are now counted.", "weights_no_room", "TP0", TS,
         {"mem_fraction_static": 0.7, "min_mem_fraction_static": 0.812, "minimum_viable": 0.8118}),
    Case(P0 + "Compressed state pool leaves no room for the full KV pool within the available 3.52 GiB.",
         "pool_no_room", "TP0", TS, {"available_gib": 3.52}),
    Case(P0 + "SWA pool (262144 tokens) leaves no room for the full KV pool within the available 0.75 GB.",
         "pool_no_room", "TP0", TS, {"available_gib": 0.75}),
    Case(P0 + "max_total_tokens=200000 is larger than the profiled value 171552. Use the profiled value instead.",
         "max_total_tokens_cap", "TP0", TS, {"max_total_tokens": 200000, "profiled_tokens": 171552}),
    Case("[2025-03-01 14:03:07 DP0 TP0] max_total_tokens=100000 is larger than the profiled value -561981. Use the "
         "profiled value instead.", "max_total_tokens_cap", "DP0 TP0", TS, {"profiled_tokens": -561981}),
]

CAPTURE = [  # 2.2 and 2.3: CUDA graphs
    Case("[gpu_id=0] Capture cuda graph begin. This can take up to several minutes.", "capture_begin", "gpu_id=0", None,
         {"role": "target", "graph": "decode", "device": "cuda"}),
    Case(OLD + "Capture cuda graph begin. This can take up to several minutes.", "capture_begin", "TP0", OTS, {}),
    Case(P0 + "Capture cuda graph begin. This can take up to several minutes. avail mem=11.82 GB", "capture_begin",
         "TP0", TS, {"avail_gib": 11.82, "role": "target", "graph": "decode", "device": "cuda"}),
    Case(P0 + "Capture cpu graph begin. This can take up to several minutes. avail mem=100.00 GB", "capture_begin",
         "TP0", TS, {"avail_gib": 100.0, "device": "cpu"}),
    Case(P0 + "Capture npu graph begin. This can take up to several minutes. avail mem=50.00 GB", "capture_begin",
         "TP0", TS, {"device": "npu"}),
    Case(P0 + "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2, 4, 8], "
         "avail mem=10.50 GB", "capture_begin", "TP0", TS,
         {"backend": "full", "num_tokens_per_req": 1, "bs": [1, 2, 4, 8], "avail_gib": 10.5, "role": "target",
          "graph": "decode", "device": "cuda"}),
    Case(P0 + "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=10.50 GB",
         "capture_begin", "TP0", TS, {"backend": "full", "avail_gib": 10.5}),
    Case(P0 + "Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4, bs=[1, 2], avail mem=9.00 GB",
         "capture_begin", "TP0", TS, {"graph": "verify", "num_tokens_per_req": 4}),
    Case(P0 + "Capture target decode NPU graph begin. backend=full, num_tokens_per_req=1, avail mem=30.00 GB",
         "capture_begin", "TP0", TS, {"device": "npu"}),
    Case(P0 + "Capture target decode XPU graph begin. backend=full, num_tokens_per_req=1, avail mem=30.00 GB",
         "capture_begin", "TP0", TS, {"device": "xpu"}),
    Case(P0 + "Capture target decode CPU graph begin. backend=full, num_tokens_per_req=1, avail mem=30.00 GB",
         "capture_begin", "TP0", TS, {"device": "cpu"}),
    Case(OLD + "Capture cuda graph end. Time elapsed: 1334.38 s", "capture_end", "TP0", OTS, {"elapsed_s": 1334.38}),
    Case(P0 + "Capture cuda graph end. Time elapsed: 4.00 s. avail mem=0.00 GB. mem usage=0.00 GB.", "capture_end",
         "TP0", TS, {"elapsed_s": 4.0, "avail_gib": 0.0, "mem_usage_gib": 0.0}),
    Case(P0 + "Capture cuda graph end. Time elapsed: 7.25 s. mem usage=0.93 GB. avail mem=0.53 GB.", "capture_end",
         "TP0", TS, {"elapsed_s": 7.25, "mem_usage_gib": 0.93, "avail_gib": 0.53, "role": "target", "graph": "decode"}),
    Case(P0 + "Capture target decode CUDA graph end. elapsed=3.21 s, mem usage=0.50 GB, avail mem=10.00 GB.",
         "capture_end", "TP0", TS, {"elapsed_s": 3.21, "mem_usage_gib": 0.5, "avail_gib": 10.0}),
    Case(P0 + "Capture target decode CUDA graph end. bs=[1, 2, 4], elapsed=3.21 s, mem usage=0.50 GB, avail mem=10.00 GB.",
         "capture_end", "TP0", TS, {"bs": [1, 2, 4], "elapsed_s": 3.21, "mem_usage_gib": 0.5, "avail_gib": 10.0}),
    Case(P0 + "Capture cuda graph bs [1, 2, 4, 8, 16, 24, 32]", "capture_bs", "TP0", TS, {"bs": [1, 2, 4, 8, 16, 24, 32]}),
    Case(P0 + "Capture cpu graph bs [1, 2]", "capture_bs", "TP0", TS, {"bs": [1, 2]}),
    Case(P0 + "Capture cuda graph num tokens [4, 8, 16, 3968]", "capture_bs", "TP0", TS, {"num_tokens": [4, 8, 16, 3968]}),
    Case(P0 + "Capture piecewise CUDA graph begin. avail mem=20.00 GB", "capture_begin", "TP0", TS,
         {"graph": "piecewise", "avail_gib": 20.0}),
    Case(P0 + "Capture piecewise CUDA graph end. Time elapsed: 30.00 s. mem usage=1.44 GB. avail mem=18.56 GB.",
         "capture_end", "TP0", TS, {"graph": "piecewise", "elapsed_s": 30.0, "mem_usage_gib": 1.44}),
    Case(P0 + "Capture target prefill CUDA graph begin. backend=piecewise, num_tokens=[4, 8, 4096], avail mem=20.00 GB",
         "capture_begin", "TP0", TS, {"graph": "prefill", "num_tokens": [4, 8, 4096], "backend": "piecewise"}),
    Case(P0 + "Capture target prefill CUDA graph end. elapsed=30.00 s, mem usage=1.44 GB, avail mem=18.56 GB.",
         "capture_end", "TP0", TS, {"graph": "prefill", "avail_gib": 18.56}),
    Case(P0 + "Disable piecewise CUDA graph because disable_cuda_graph is set", "graph_disabled", "TP0", TS,
         {"reason": "disable_cuda_graph is set"}),
    Case(P0 + "Disable prefill CUDA graph because the model is multimodal", "graph_disabled", "TP0", TS,
         {"graph": "prefill"}),
    Case(P0 + "Compiling a graph for dynamic shape takes 12.34 s", "torch_compile", "TP0", TS, {"elapsed_s": 12.34}),
    Case(P0 + "Compiling a graph for shape 128 takes 1.23 s", "torch_compile", "TP0", TS, {"shape": "128", "elapsed_s": 1.23}),
    Case(P0 + "Cache the graph for dynamic shape for later use", "torch_compile", "TP0", TS, {}),
    Case(P0 + "Directly load the 0-th graph for dynamic shape from inductor via handle ('fxgraph', '/tmp/x.py')",
         "torch_compile", "TP0", TS, {}),
    Case(P0 + "Capture cuda graph failed: CUDA out of memory. Tried to allocate 20.00 MiB.", "capture_failed", "TP0", TS,
         {"message": "CUDA out of memory. Tried to allocate 20.00 MiB."}),
    Case("Possible solutions:", "other", None, None, {}),  # the failure hint continues the exception message
    Case("1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)", "other", None, None, {}),
    # speculative decoding (2.3)
    Case(P0 + "Capture draft cuda graph begin. This can take up to several minutes. avail mem=20.00 GB", "capture_begin",
         "TP0", TS, {"role": "draft", "graph": "decode", "avail_gib": 20.0}),
    Case(P0 + "Capture draft cuda graph end. Time elapsed: 3.00 s. avail mem=19.00 GB. mem usage=1.00 GB.",
         "capture_end", "TP0", TS, {"role": "draft", "avail_gib": 19.0, "mem_usage_gib": 1.0}),
    Case(P0 + "Capture draft extend cuda graph begin. This can take up to several minutes. avail mem=19.00 GB",
         "capture_begin", "TP0", TS, {"role": "draft", "graph": "extend"}),
    Case(P0 + "Capture draft extend cuda graph end. Time elapsed: 2.00 s. mem usage=0.50 GB. avail mem=18.50 GB.",
         "capture_end", "TP0", TS, {"role": "draft", "graph": "extend", "elapsed_s": 2.0}),
    Case(P0 + "Capture draft extend cuda graph begin (step 2). This can take up to several minutes. avail mem=18.00 GB",
         "capture_begin", "TP0", TS, {"role": "draft", "graph": "extend", "step": 2, "avail_gib": 18.0}),
    Case(P0 + "Capture draft decode CUDA graph begin. backend=full, num_tokens_per_req=4, bs=[1, 2], avail mem=20.00 GB",
         "capture_begin", "TP0", TS, {"role": "draft", "graph": "decode", "num_tokens_per_req": 4}),
    Case(P0 + "Capture draft decode CUDA graph end. elapsed=3.00 s, mem usage=1.00 GB, avail mem=19.00 GB.",
         "capture_end", "TP0", TS, {"role": "draft", "mem_usage_gib": 1.0}),
    Case(P0 + "Capture draft extend CUDA graph begin. backend=full, num_tokens_per_req=5, bs=[1, 2], avail mem=19.00 GB",
         "capture_begin", "TP0", TS, {"role": "draft", "graph": "extend"}),
    Case(P0 + "Capture draft extend CUDA graph begin. step=1, avail mem=18.00 GB", "capture_begin", "TP0", TS,
         {"role": "draft", "graph": "extend", "step": 1, "avail_gib": 18.0}),
    Case(P0 + "Capture draft extend CUDA graph end. step=1, elapsed=2.00 s, mem usage=0.50 GB, avail mem=17.50 GB.",
         "capture_end", "TP0", TS, {"step": 1, "elapsed_s": 2.0, "avail_gib": 17.5}),
    Case(P0 + "Speculative token map specified, but EAGLE3 models already have this. Ignoring the specified token map.",
         "spec_token_map_ignored", "TP0", TS, {}),
]

CAPACITY = [  # 2.2: the max_total_num_tokens summary
    Case("[gpu_id=0] max_total_num_tokens=65536, max_prefill_tokens=16384, max_running_requests=2000, context_len=8192",
         "max_total_tokens", "gpu_id=0", None, {"max_total_num_tokens": 65536, "context_len": 8192}),
    Case(OLD + "max_total_num_tokens=65536, max_prefill_tokens=16384, max_running_requests=2000, context_len=8192",
         "max_total_tokens", "TP0", OTS,
         {"max_total_num_tokens": 65536, "max_prefill_tokens": 16384, "max_running_requests": 2000, "context_len": 8192}),
    Case(P0 + "max_total_num_tokens=65536, chunked_prefill_size=8192, max_prefill_tokens=16384, "
         "max_running_requests=2049, context_len=131072", "max_total_tokens", "TP0", TS,
         {"chunked_prefill_size": 8192, "max_running_requests": 2049, "context_len": 131072}),
    Case(P0 + "max_total_num_tokens=65536, chunked_prefill_size=None, max_prefill_tokens=16384, "
         "max_running_requests=2049, context_len=131072, available_gpu_mem=7.25 GB", "max_total_tokens", "TP0", TS,
         {"chunked_prefill_size": None, "available_gpu_mem_gib": 7.25}),
    Case(M + "max_total_num_tokens=65536, chunked_prefill_size=-1, max_prefill_tokens=16384, "
         "max_running_requests=2049, context_len=131072, available_cpu_mem=80.00 GB", "max_total_tokens", None, TS,
         {"chunked_prefill_size": -1, "available_cpu_mem_gib": 80.0}),
]

# 2.4: one Decode line per version and optional part
DECODE = [
    Case("[gpu_id=0] Decode batch. #running-req: 4, #token: 1234, token usage: 0.05, gen throughput (token/s): 123.45, "
         "#queue-req: 0", "decode_batch", "gpu_id=0", None,
         {"running_req": 4, "token": 1234, "token_usage": 0.05, "gen_throughput_tok_s": 123.45, "queue_req": 0}),
    Case("[gpu=0] Decode batch. #running-req: 4, #token: 1234, token usage: 0.05, gen throughput (token/s): 123.45, "
         "#queue-req: 0", "decode_batch", "gpu=0", None, {"running_req": 4, "queue_req": 0}),
    Case(OLD + "Decode batch. #running-req: 4, #token: 1234, token usage: 0.05, gen throughput (token/s): 123.45, "
         "#queue-req: 0", "decode_batch", "TP0", OTS, {"gen_throughput_tok_s": 123.45}),
    Case(P0 + "Decode batch. #running-req: 4, #token: 1234, token usage: 0.05, accept len: 2.50, "
         "gen throughput (token/s): 300.00, #queue-req: 1", "decode_batch", "TP0", TS, {"accept_len": 2.5, "queue_req": 1}),
    Case(P0 + "Decode batch. #running-req: 4, #token: 1234, token usage: 0.05, gen throughput (token/s): 123.45, "
         "#queue-req: 0, ", "decode_batch", "TP0", TS, {"queue_req": 0}),
    Case(P0 + "Decode batch. #running-req: 4, #token: 1234, token usage: 0.05, accept len: 2.50, "
         "pre-allocated usage: 0.10, gen throughput (token/s): 300.00, #queue-req: 1", "decode_batch", "TP0", TS,
         {"pre_allocated_usage": 0.1}),
    Case(P0 + "Decode batch. #running-req: 4, #token: 1234, token usage: 0.05, pre-allocated usage: 0.10, "
         "#retracted-req: 0, cuda graph: True, gen throughput (token/s): 300.00, #queue-req: 1", "decode_batch", "TP0", TS,
         {"retracted_req": 0, "cuda_graph": True}),
    Case(P0 + "Decode batch. #running-req: 1, #token: 108, token usage: 0.00, accept len: 2.17, accept rate: 0.54, "
         "cuda graph: True, gen throughput (token/s): 0.39, #queue-req: 0, ", "decode_batch", "TP0", TS,
         {"accept_len": 2.17, "accept_rate": 0.54, "cuda_graph": True, "gen_throughput_tok_s": 0.39}),
    Case(P0 + "Decode batch. #running-req: 8, #full token: 1000, full token usage: 0.01, #swa token: 800, "
         "swa token usage: 0.02, cuda graph: False, gen throughput (token/s): 50.00, #queue-req: 0, ", "decode_batch",
         "TP0", TS, {"full_token": 1000, "full_token_usage": 0.01, "swa_token": 800, "swa_token_usage": 0.02,
                     "cuda_graph": False}),
    Case(P0 + "Decode batch. #running-req: 8, #token: 1000, token usage: 0.01, pre-allocated usage: 0.10, "
         "#prealloc-req: 1, #transfer-req: 2, #retracted-req: 0, cpu graph: False, gen throughput (token/s): 50.00, "
         "#queue-req: 0, ", "decode_batch", "TP0", TS, {"prealloc_req": 1, "transfer_req": 2, "cuda_graph": False}),
    Case(P0 + "Decode batch [1234], #running-req: 2, #full token: 21312, full token usage: 0.01, mamba num: 8, "
         "mamba usage: 0.05, accept len: 3.36, accept rate: 0.79, cuda graph: True, gen throughput (token/s): 551.63, "
         "#queue-req: 0, ", "decode_batch", "TP0", TS,
         {"iter": 1234, "full_token": 21312, "mamba_num": 8, "mamba_usage": 0.05, "accept_len": 3.36}),
    Case(M + "Decode batch, #running-req: 2, #full token: 21312, full token usage: 0.01, mamba num: 8, mamba usage: 0.05, "
         "accept len: 3.36, accept rate: 0.79, cuda graph: True, gen throughput (token/s): 551.63, #queue-req: 0",
         "decode_batch", None, TS, {"running_req": 2, "gen_throughput_tok_s": 551.63, "queue_req": 0}),
    Case(P0 + "Decode batch, #running-req: 64, #token: 9000, token usage: 0.30, waiting-image-req: 3, cuda graph: True, "
         "gen throughput (token/s): 4000.00, #queue-req: 5, est. decode TFLOPS/s (per GPU): 12.34, "
         "est. read BW (GB/s per GPU): 1500.50, est. write BW (GB/s per GPU): 20.25", "decode_batch", "TP0", TS,
         {"waiting_image_req": 3, "queue_req": 5, "est_decode_tflops_s_per_gpu": 12.34,
          "est_read_bw_gb_s_per_gpu": 1500.5, "est_write_bw_gb_s_per_gpu": 20.25}),
    Case(P0 + "Decode batch, #running-req: 64, #gpu token: 9000, gpu token usage: 0.30, #cpu token: 50000, "
         "cpu token usage: 0.10, cuda graph: True, gen throughput (token/s): 4000.00, #queue-req: 5, "
         "fwd occupancy: 95.12%", "decode_batch", "TP0", TS,
         {"gpu_token": 9000, "cpu_token": 50000, "cpu_token_usage": 0.1, "fwd_occupancy_pct": 95.12}),
    Case(P0 + "Decode batch, #running-req: 4, #token: 1234, token usage: 0.05, accept len: 3.10, accept rate: 0.70, "
         "cap len: 4.00, block accept len: 2.90, cuda graph: True, gen throughput (token/s): 300.00, #queue-req: 1",
         "decode_batch", "TP0", TS, {"cap_len": 4.0, "block_accept_len": 2.9}),
    Case(P0 + "Decode batch [77], #running-req: 4, #token: 1234, token usage: 0.05, pre-allocated usage: 0.10, "
         "#prealloc-req: 1, #transfer-req: 2, #host-receive-req: 3, #retracted-req: 0, musa graph: True, "
         "gen throughput (token/s): 300.00, #queue-req: 1, fwd occupancy: 90.00%, fwd+idle occupancy: 85.50%",
         "decode_batch", "TP0", TS,
         {"iter": 77, "host_receive_req": 3, "cuda_graph": True, "fwd_occupancy_pct": 90.0, "fwd_idle_occupancy_pct": 85.5}),
]

PREFILL = [
    Case("[gpu_id=0] Prefill batch. #new-seq: 1, #new-token: 10, #cached-token: 0, cache hit rate: 0.00%, "
         "#running-req: 0, #queue-req: 0", "prefill_batch", "gpu_id=0", None,
         {"new_seq": 1, "new_token": 10, "cached_token": 0, "cache_hit_rate_pct": 0.0, "running_req": 0, "queue_req": 0}),
    Case("[gpu=0] Prefill batch. #new-seq: 1, #new-token: 10, #cached-token: 0, cache hit rate: 0.00%, "
         "#running-req: 0, #queue-req: 0", "prefill_batch", "gpu=0", None, {"new_token": 10}),
    Case(OLD + "Prefill batch. #new-seq: 2, #new-token: 512, #cached-token: 64, cache hit rate: 11.11%, "
         "#running-req: 3, #queue-req: 1", "prefill_batch", "TP0", OTS, {"cache_hit_rate_pct": 11.11, "running_req": 3}),
    Case(OLD + "Prefill batch(mixed #running-req: 7). #new-seq: 2, #new-token: 512, #cached-token: 64, "
         "cache hit rate: 11.11%, #queue-req: 1", "prefill_batch", "TP0", OTS,
         {"mixed_running_req": 7, "new_seq": 2, "queue_req": 1}),
    Case(OLD + "Prefill batch(mixed #running-req: 7). #new-seq: 2, #new-token: 512, #cached-token: 64, "
         "cache hit rate: 11.11%, token usage: 0.02, #queue-req: 1", "prefill_batch", "TP0", OTS,
         {"mixed_running_req": 7, "token_usage": 0.02}),
    Case(P0 + "Prefill batch. #new-seq: 2, #new-token: 512, #cached-token: 64, cache hit rate: 11.11%, "
         "token usage: 0.02, #running-req: 3, #queue-req: 1", "prefill_batch", "TP0", TS, {"token_usage": 0.02}),
    Case(P0 + "Prefill batch. #new-seq: 1, #new-token: 28, #cached-token: 0, token usage: 0.00, #running-req: 0, "
         "#queue-req: 0, ", "prefill_batch", "TP0", TS, {"new_token": 28, "queue_req": 0}),
    Case(P0 + "Prefill batch. #new-seq: 1, #new-token: 28, #cached-token: 0, token usage: 0.00, #running-req: 0, "
         "#unbootstrapped-req: 1, #queue-req: 0, #transferring-req: 2 ", "prefill_batch", "TP0", TS,
         {"unbootstrapped_req": 1, "transferring_req": 2}),
    Case(P0 + "Prefill batch. #new-seq: 1, #new-token: 28, #cached-token: 0, token usage: 0.00, #unbootstrapped-req: 1, "
         "#queue-req: 0, #transferring-req: 2, input throughput (token/s): 1234.56 ", "prefill_batch", "TP0", TS,
         {"input_throughput_tok_s": 1234.56, "transferring_req": 2}),
    Case(P0 + "Prefill batch. #new-seq: 1, #new-token: 28, #cached-token: 0, token usage: 0.00, #unbootstrapped-req: 1, "
         "#queue-req: 0, #transferring-req: 2, input throughput (token/s): 1234.56, ", "prefill_batch", "TP0", TS,
         {"unbootstrapped_req": 1, "input_throughput_tok_s": 1234.56}),
    Case(P0 + "Prefill batch. #new-seq: 1, #new-token: 28, #cached-token: 0, full token usage: 0.01, "
         "swa token usage: 0.02, #running-req: 0, #queue-req: 0, ", "prefill_batch", "TP0", TS,
         {"full_token_usage": 0.01, "swa_token_usage": 0.02}),
    Case(P0 + "Prefill batch. #new-seq: 1, #new-token: 28, #cached-token: 0, token usage: 0.00, #running-req: 0, "
         "#queue-req: 0, #prealloc-req: 3, #inflight-req: 4, ", "prefill_batch", "TP0", TS,
         {"prealloc_req": 3, "inflight_req": 4}),
    Case(P0 + "Prefill batch [12], #new-seq: 1, #new-token: 28, #cached-token: 0, full token usage: 0.01, "
         "mamba usage: 0.03, #running-req: 0, #queue-req: 0, #prealloc-req: 3, #inflight-req: 4, "
         "input throughput (token/s): 11.79, ", "prefill_batch", "TP0", TS,
         {"iter": 12, "mamba_usage": 0.03, "input_throughput_tok_s": 11.79}),
    Case(M + "Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, #running-req: 0, "
         "#queue-req: 0, waiting-image-req: 0, cuda graph: False, input throughput (token/s): 11.79", "prefill_batch",
         None, TS, {"new_token": 6, "cuda_graph": False, "input_throughput_tok_s": 11.79}),
    Case(P0 + "Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, #running-req: 0, "
         "#queue-req: 0, cuda graph: False, input throughput (token/s): 11.79, est. prefill TFLOPS/s (per GPU): 45.60",
         "prefill_batch", "TP0", TS, {"est_prefill_tflops_s_per_gpu": 45.6}),
    Case(P0 + "Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, #running-req: 0, "
         "#queue-req: 0, #pending-token: 100, #bootstrap-req: 1, #inflight-req: 2, npu graph: False, "
         "input throughput (token/s): 11.79, fwd occupancy: 50.00%", "prefill_batch", "TP0", TS,
         {"pending_token": 100, "bootstrap_req": 1, "fwd_occupancy_pct": 50.0}),
    Case(P0 + "Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, #running-req: 0, "
         "#queue-req: 0, #pending-token: 100, #bootstrap-req: 1, #inflight-req: 2, #optimistic-req: 3, "
         "cuda graph: True, input throughput (token/s): 11.79", "prefill_batch", "TP0", TS, {"optimistic_req": 3}),
    Case(P0 + "Prefill batch [9], #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, #running-req: 0, "
         "#queue-req: 0, #pending-token: 100, #replay-token: 5, waiting-image-req: 1, cuda graph: True, "
         "input throughput (token/s): 11.79, est. prefill TFLOPS/s (per GPU): 45.60, fwd occupancy: 50.00%, "
         "fwd+idle occupancy: 40.00%", "prefill_batch", "TP0", TS,
         {"iter": 9, "replay_token": 5, "fwd_idle_occupancy_pct": 40.0}),
]

PRESSURE = [  # 2.5
    Case(OLD + "Decode out of memory happened. #retracted_reqs: 3, #new_token_ratio: 0.7000 -> 0.5000", "retract",
         "TP0", OTS, {"retracted_reqs": 3, "new_token_ratio_before": 0.7, "new_token_ratio_after": 0.5}),
    Case(P0 + "KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.7000 -> 0.5000",
         "retract", "TP0", TS, {"retracted_reqs": 3, "new_token_ratio_after": 0.5}),
    Case(P0 + "KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_tokens_gained: 4096, "
         "#new_token_ratio: 0.7000 -> 0.5000", "retract", "TP0", TS, {"new_tokens_gained": 4096}),
    Case(P0 + "KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_tokens_gained: 4096, "
         "#mamba_num_gained: 2, #new_token_ratio: 0.7000 -> 0.5000", "retract", "TP0", TS, {"mamba_num_gained": 2}),
    Case(P0 + "Testing retraction. #retracted_reqs: 1, #new_tokens_gained: 12", "retract", "TP0", TS,
         {"retracted_reqs": 1, "testing": True}),
    Case("Decode out of memory. This should never happen.", "decode_oom", None, None, {}),
    Case("[gpu=0] Decode out of memory. Try to lower your batch size.", "decode_oom", "gpu=0", None, {}),
    Case(P0 + "Prefill out of memory. Try to lower your batch size.", "prefill_oom", "TP0", TS, {}),
    # continuation lines of a multi-line message stay "other": inside a traceback, the
    # assembler extends the exception message only with continuation kinds
    Case("Try to allocate 4096 tokens.", "other", None, None, {}),
    Case("/sgl/python/sglang/srt/managers/scheduler.py:812: UserWarning: Warning: available_size=1000, "
         "max_total_num_tokens=2000", "pool_leak", None, None,
         {"category": "UserWarning", "available_size": 1000, "max_total_num_tokens": 2000}),
    Case("KV cache pool leak detected!", "pool_leak", None, None, {}),
    Case("/sgl/python/sglang/srt/managers/scheduler.py:1033: UserWarning: token_to_kv_pool_allocator memory leak "
         "detected! available_size=10, protected_size=0, self.max_total_num_tokens=20", "pool_leak", None, None,
         {"pool": "token_to_kv_pool_allocator"}),
    Case(P0 + "token_to_kv_pool_allocator memory leak detected! available_size=10, protected_size=0, "
         "self.max_total_num_tokens=20", "pool_leak", "TP0", TS, {"pool": "token_to_kv_pool_allocator"}),
    Case(P0 + "req_to_token_pool memory leak detected!available_size=10, total_size=20", "pool_leak", "TP0", TS,
         {"pool": "req_to_token_pool"}),
    Case(P0 + "pool memory leak detected! [full] total=9116160, available=768, evictable=9115392", "pool_leak",
         "TP0", TS, {"pool": "pool"}),
]

FAILURE = [  # 2.6
    Case(P0 + "Scheduler hit an exception: Traceback (most recent call last):", "exc_header", "TP0", TS,
         {"source": "Scheduler"}),
    Case(M + "DetokenizerManager hit an exception: Traceback (most recent call last):", "exc_header", None, TS,
         {"source": "DetokenizerManager"}),
    Case(M + "DataParallelController hit an exception: Traceback (most recent call last):", "exc_header", None, TS,
         {"source": "DataParallelController"}),
    Case(P0 + "TpModelWorkerClient hit an exception: Traceback (most recent call last):", "exc_header", "TP0", TS,
         {"source": "TpModelWorkerClient"}),
    Case(M + "MultiDetokenizerRouter hit an exception: Traceback (most recent call last):", "exc_header", None, TS,
         {"source": "MultiDetokenizerRouter"}),
    Case("[2025-03-01 14:03:07 DP-1 TP0] Traceback (most recent call last):", "exc_header", "DP-1 TP0", TS, {}),
    Case("Exception in ModelTpServer:", "exc_header", None, None, {"source": "ModelTpServer"}),
    Case(OLD + "Exception in run_tp_server:", "exc_header", "TP0", OTS, {"source": "run_tp_server"}),
    Case("Exception in ControllerSingle:", "exc_header", None, None, {"source": "ControllerSingle"}),
    Case("Exception in ControllerMulti:", "exc_header", None, None, {"source": "ControllerMulti"}),
    Case("Traceback (most recent call last):", "exc_header", None, None, {}),
    Case(M + "Received sigquit from a child process. It usually means the child failed.", "sigquit", None, TS, {}),
    Case(M + "Received sigquit from a child proces. It usually means the child failed.", "sigquit", None, TS, {}),
    Case(M + "SIGQUIT received. signum=None, frame=None. It usually means one child failed.", "sigquit", None, TS, {}),
    Case(M + "Received SIGQUIT from scheduler process. Scheduler failed, shutting down gRPC server.", "sigquit", None, TS, {}),
    Case(M + "Dumping requests before crash. self.crash_dump_folder=/tmp/crash", "crash_dump", None, TS,
         {"folder": "/tmp/crash"}),
    Case(M + "SIGTERM/SIGQUIT/Exception triggered, but crash dump already performed, skipping.", "crash_dump", None, TS, {}),
    Case(M + "Subprocess scheduler_0 (pid=4242) crashed with exit code -9. Triggering SIGQUIT for cleanup...",
         "subprocess_crashed", None, TS, {"name": "scheduler_0", "pid": 4242, "exit_code": -9}),
    Case(P0 + "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", "watchdog_timeout", "TP0", TS,
         {"component": "Scheduler", "watchdog_timeout_s": 300, "soft": False}),
    Case(M + "TokenizerManager watchdog timeout (self.watchdog_timeout=300, self.soft=True)", "watchdog_timeout", None, TS,
         {"component": "TokenizerManager", "soft": True}),
    Case(P0 + "Watchdog timeout (self.watchdog_timeout=300)", "watchdog_timeout", "TP0", TS, {"watchdog_timeout_s": 300}),
    Case(P0 + "Scheduler debug info:", "watchdog_debug", "TP0", TS, {"component": "Scheduler"}),
    Case(P0 + "self.cur_batch.batch_size()=8, self.cur_batch.reqs=[Req(rid=1)], self.token_to_kv_pool.available_size()=10",
         "watchdog_detail", "TP0", TS, {}),
    Case(P0 + "Pyspy dump for PID 1234:", "pyspy_dump", "TP0", TS, {"pid": 1234}),
    Case(P0 + "Pyspy dump for PID 1234 (sglang::scheduler_TP0):", "pyspy_dump", "TP0", TS, {"pid": 1234}),
    Case(M + "Health check failed. Server couldn't get a response from detokenizer for last 20 seconds. tic start time: "
         "14:02:40. last_heartbeat time: 14:02:10", "health_check_failed", None, TS,
         {"timeout_s": 20, "tic_start": "14:02:40", "last_heartbeat": "14:02:10"}),
    Case(M + "Weights are ready after 12.50 seconds", "weights_ready", None, TS, {"elapsed_s": 12.5}),
    Case(M + "Weights are not ready after waiting 600 seconds. Consider increasing SGLANG_WAIT_WEIGHTS_READY_TIMEOUT "
         "environment variable. Current status: initial_weights_loaded=False", "weights_not_ready", None, TS,
         {"timeout_s": 600, "initial_weights_loaded": False}),
    Case(P0 + "current device is not 0, but 1, which may cause useless memory allocation for torch CUDA context.",
         "device_mismatch", "TP0", TS, {"expected_gpu": 0, "current_gpu": 1}),
    Case("WARNING: current device is not 2, but 0, which may cause useless memory allocation for torch CUDA context.",
         "device_mismatch", None, None, {"expected_gpu": 2, "current_gpu": 0}),
]

# 1.4 and section 4: lines that do not follow the SGLang prefix
FOREIGN = [
    Case("[2025-03-01 14:03:09] INFO:     Started server process [12345]", "uvicorn_msg", None, "2025-03-01T14:03:09",
         {"level": "INFO", "pid": 12345}),
    Case("INFO:     Started server process [12345]", "uvicorn_msg", None, None, {"level": "INFO", "pid": 12345}),
    Case("INFO:     Waiting for application startup.", "uvicorn_msg", None, None,
         {"message": "Waiting for application startup."}),
    Case(M + "INFO:     Application startup complete.", "uvicorn_msg", None, TS, {"message": "Application startup complete."}),
    Case(M + "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)", "uvicorn_msg", None, TS,
         {"url": "http://0.0.0.0:30000"}),
    Case("INFO:     Uvicorn running on http://127.0.0.1:8000 (Press CTRL+C to quit)", "uvicorn_msg", None, None,
         {"url": "http://127.0.0.1:8000"}),
    Case(M + "INFO:     Shutting down", "uvicorn_msg", None, TS, {"message": "Shutting down"}),
    Case(M + "INFO:     Waiting for application shutdown.", "uvicorn_msg", None, TS, {}),
    Case(M + "INFO:     Application shutdown complete.", "uvicorn_msg", None, TS, {}),
    Case(M + "INFO:     Finished server process [12345]", "uvicorn_msg", None, TS, {"pid": 12345}),
    Case(M + "WARNING:  Invalid HTTP request received.", "uvicorn_msg", None, TS, {"level": "WARNING"}),
    Case(M + "ERROR:    Exception in ASGI application", "uvicorn_msg", None, TS, {"level": "ERROR"}),
    Case("[2025-03-01 14:03:10] INFO:     127.0.0.1:53412 - \"POST /generate HTTP/1.1\" 200 OK", "http_access", None,
         "2025-03-01T14:03:10", {"client": "127.0.0.1:53412", "method": "POST", "path": "/generate", "status": 200}),
    Case("INFO:     127.0.0.1:53412 - \"GET /get_model_info HTTP/1.1\" 200 OK", "http_access", None, None,
         {"method": "GET", "path": "/get_model_info", "status": 200}),
    Case(M + "INFO:     10.0.0.7:40000 - \"POST /v1/chat/completions HTTP/1.1\" 503 Service Unavailable", "http_access",
         None, TS, {"path": "/v1/chat/completions", "status": 503}),
    Case("/usr/lib/python3/dist-packages/torch/cuda/__init__.py:123: UserWarning: Can't initialize NVML", "py_warning",
         None, None, {"path": "/usr/lib/python3/dist-packages/torch/cuda/__init__.py", "lineno": 123,
                      "category": "UserWarning", "message": "Can't initialize NVML"}),
    Case("/sgl/python/sglang/srt/environ.py:301: UserWarning: Environment variable SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK "
         "will be deprecated, please use SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK instead", "py_warning", None, None,
         {"category": "UserWarning"}),
    Case("/opt/venv/lib/python3.11/site-packages/transformers/models/auto/image_processing_auto.py:590: FutureWarning: "
         "The image_processor_class argument is deprecated", "py_warning", None, None, {"category": "FutureWarning"}),
    Case("Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.74it/s]", "progress", None, None,
         {"desc": "Loading safetensors checkpoint shards", "progress": {"pct": 50, "n": 2, "total": 4}}),
    Case("Loading pt checkpoint shards: 100% Completed | 4/4 [00:02<00:00,  1.99it/s]", "progress", None, None,
         {"desc": "Loading pt checkpoint shards"}),
    Case("Loading safetensors using Fastsafetensor loader:   0% Completed | 0/8 [00:00<?, ?it/s]", "progress", None, None,
         {"progress": {"pct": 0, "n": 0, "total": 8}}),
    Case("Capturing batches (bs=64 avail_mem=11.08 GB): 100%|██████████| 4/4 [00:02<00:00,  1.50it/s]", "progress",
         None, None, {"bs": 64, "avail_gib": 11.08, "progress": {"pct": 100, "n": 4, "total": 4}}),
    Case("Capturing batches (avail_mem=0.00 GB):   0%|          | 0/23 [00:00<?, ?it/s]", "progress", None, None,
         {"avail_gib": 0.0, "bs": None}),
    Case("100%|██████████| 23/23 [00:10<00:00,  2.20it/s]", "progress", None, None, {"progress": {"pct": 100, "n": 23, "total": 23}}),
    Case("Capturing num tokens (num_tokens=3968 avail_mem=0.05 GB):  10%|█         | 5/52 [00:01<00:09,  4.9it/s]",
         "progress", None, None, {"num_tokens": 3968, "avail_gib": 0.05}),
    Case("Capturing prefill shape (num_tokens=4096 avail_mem=10.00 GB):  50%|█████     | 1/2 [00:01<00:01,  1.0s/it]",
         "progress", None, None, {"num_tokens": 4096}),
    Case("Compiling num tokens (num_tokens=4096):  50%|█████     | 1/2 [00:10<00:10, 10.0s/it]", "progress", None, None,
         {"num_tokens": 4096, "avail_gib": None}),
    Case("Fatal Python error: Segmentation fault", "fatal_error", None, None, {"message": "Segmentation fault"}),
    Case("Thread 0x00007f1234abcd00 (most recent call first):", "fh_thread", None, None, {}),
    Case("Current thread 0x00007f1234abcd00 (most recent call first):", "fh_thread", None, None, {}),
    Case("  File \"/sgl/python/sglang/srt/managers/scheduler.py\", line 171 in resolve_batch_result", "tb_frame", None,
         None, {"path": "/sgl/python/sglang/srt/managers/scheduler.py", "lineno": 171, "func": "resolve_batch_result"}),
    Case("  File \"/sgl/python/sglang/srt/managers/scheduler.py\", line 1787, in run_scheduler_process", "tb_frame",
         None, None, {"lineno": 1787, "func": "run_scheduler_process"}),
    Case("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total capacity of "
         "23.52 GiB of which 10.19 MiB is free.", "exc_line", None, None, {"exception": "torch.OutOfMemoryError"}),
    Case("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total capacty of "
         "23.52 GiB of which 10.19 MiB is free.", "exc_line", None, None, {"exception": "torch.cuda.OutOfMemoryError"}),
    Case("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; "
         "14.10 GiB already allocated; 3.00 MiB free; 14.50 GiB reserved in total by PyTorch)", "exc_line", None, None,
         {"message": "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.10 GiB "
                     "already allocated; 3.00 MiB free; 14.50 GiB reserved in total by PyTorch)"}),
    Case("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB.", "exc_line", None, None, {}),
    Case("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "exc_line", None, None,
         {"exception": "RuntimeError", "message": "Not enough memory. Please try to increase --mem-fraction-static."}),
    Case("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
         "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5", "exc_line", None, None,
         {"exception": "torch.distributed.DistBackendError"}),
    Case("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, unhandled system "
         "error, NCCL version 2.19.3", "exc_line", None, None, {"exception": "RuntimeError"}),
    Case("RuntimeError: NCCL error: unhandled cuda error", "exc_line", None, None,
         {"exception": "RuntimeError", "message": "NCCL error: unhandled cuda error"}),
    Case("ncclUnhandledCudaError: Call to CUDA function failed.", "other", None, None, {}),  # the detail line continues
    # before a c10d record, "[rankN]:" is torch's global rank: head["global_rank"]
    Case("[rank1]:[W924 19:01:01.260102563 CudaIPCTypes.cpp:16] Producer process has been terminated", "c10d_log",
         None, None, {"head": {"global_rank": 1, "level": "W"}, "message": "Producer process has been terminated"}),
    Case("[rank1]:[W CudaIPCTypes.cpp:16] Producer process has been terminated", "c10d_log", None, None,
         {"head": {"global_rank": 1, "level": "W"}}),
    # watchdog and store timeouts are records of their own, with their figures
    Case("[rank2]:[F1019 10:00:00.000000000 ProcessGroupNCCL.cpp:1250] [PG ID 0 PG GUID 0(default_pg) Rank 2] "
         "Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=1",
         "collective_timeout", None, None, {"head": {"global_rank": 2, "level": "F"}, "family": "nccl_heartbeat",
                                               "pg": 0, "pg_rank": 2}),
    Case("[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout: "
         "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600001 milliseconds before timing out.",
         "collective_timeout", None, None,
         {"head": {"global_rank": 0, "level": "E"}, "family": "nccl_watchdog", "seq": 5, "op_type": "ALLREDUCE",
          "timeout_ms": 600000, "ran_for_ms": 600001, "pg_rank": 0}),
    Case("[rank0]:[E1019 10:00:00.000000000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
         "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600057 "
         "milliseconds before timing out.", "collective_timeout", None, None,
         {"seq": 5, "timeout_ms": 600000, "ran_for_ms": 600057}),
    Case("[rank1]:[E909 08:45:30.126335825 ProcessGroupNCCL.cpp:2252] [PG ID 2 PG GUID 3 Rank 1]  failure detected by "
         "watchdog at work sequence id: 40231 PG status: last enqueued work: 40267, last completed work: 40230",
         "collective_failure", None, None,
         {"family": "nccl_watchdog", "seq": 40231, "last_enqueued": 40267, "last_completed": 40230, "pg": 2, "pg_rank": 1}),
    Case("[rank3]:[E1019 10:00:00.000000000 ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID 0(default_pg) Rank 3] Exception "
         "(either an error or timeout) detected by watchdog at work: 12, last enqueued NCCL work: 13, last completed "
         "NCCL work: 11.", "collective_failure", None, None, {"seq": 12, "last_enqueued": 13, "last_completed": 11}),
    Case("[rank0]:[E1019 10:00:00.000000000 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 0] Timeout "
         "at NCCL work: 7, last enqueued NCCL work: 7, last completed NCCL work: 6.", "collective_timeout", None, None,
         {"family": "nccl_watchdog", "seq": 7, "last_enqueued": 7, "last_completed": 6}),
    Case("[rank3]:[E1019 10:00:00.000000000 ProcessGroupNCCL.cpp:1423] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
         "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
         "collectives.", "collective_timeout", None, None, {"family": "nccl_heartbeat", "timeout_s": 480}),
    Case("[rank3]:[W208 00:55:32.444220068 socket.cpp:487] [c10d] waitForInput: socket SocketImpl(fd=103, "
         "addr=[::ffff:11.130.1.53]:52362, remote=[::ffff:11.130.1.53]:5000) timed out after 1800000ms",
         "collective_timeout", None, None, {"family": "c10d_store", "timeout_ms": 1800000, "peer_port": 5000}),
    Case("[W1019 10:00:00.000000000 socket.cpp:752] [c10d] The client socket has timed out after 1800000ms while "
         "trying to connect to (10.0.0.1, 5000).", "collective_timeout", None, None,
         {"family": "c10d_store", "timeout_ms": 1800000, "peer_port": 5000}),
    Case("  what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with exception: "
         "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLGATHER, NumelIn=8, "
         "NumelOut=64, Timeout(ms)=600000) ran for 600046 milliseconds before timing out.", "collective_timeout",
         None, None, {"family": "nccl_watchdog", "seq": 9, "op_type": "ALLGATHER", "timeout_ms": 600000}),
    Case("  what():  CUDA error: an illegal memory access was encountered", "cpp_what", None, None,
         {"message": "CUDA error: an illegal memory access was encountered"}),
    Case("[W722 04:17:00.611542544 ProcessGroupNCCL.cpp:972] Warning: WARNING: process group has NOT been destroyed",
         "c10d_log", None, None, {"head": {"level": "W"}}),
    Case("INFO 03-07 12:29:02 __init__.py:190] Automatically detected platform cuda.", "vllm_log", None, None,
         {"level": "INFO", "source_loc": "__init__.py:190", "message": "Automatically detected platform cuda."}),
    Case("WARNING 03-07 12:29:02 [config.py:1200] Casting torch.bfloat16 to torch.float16.", "vllm_log", None, None,
         {"level": "WARNING", "source_loc": "config.py:1200"}),
    Case("W0722 04:16:57.293000 123664 torch/utils/cpp_extension.py:2414] TORCH_CUDA_ARCH_LIST is not set",
         "glog", None, None, {"level": "W", "source_loc": "torch/utils/cpp_extension.py:2414",
                              "message": "TORCH_CUDA_ARCH_LIST is not set"}),
    Case("I1019 10:00:00.123456 42 /pytorch/torch/csrc/distributed/c10d/TCPStore.cpp:100] connected", "glog", None, None,
         {"level": "I"}),
    Case("node17-2:36748:36748 [0] NCCL INFO Using network IB", "nccl_debug", None, None,
         {"host": "node17-2", "pid": 36748, "level": "INFO", "message": "Using network IB"}),
    Case("sglang-deploy-7d9f-abc12:123:456 [3] NCCL WARN Call to connect returned Connection refused", "nccl_debug",
         None, None, {"host": "sglang-deploy-7d9f-abc12", "level": "WARN"}),
    Case("NCCL version 2.20.5+cuda12.4", "nccl_version_native", None, None, {"version": "2.20.5+cuda12.4"}),
    Case("Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:307 'peer access is not supported between these "
         "two devices'", "cpp_abort", None, None, {}),
    Case("terminate called after throwing an instance of 'c10::DistBackendError'", "cpp_terminate", None, None, {}),
    # SGLang's process title names the rank of a C++ frame
    Case("frame #23: <unknown function> + 0x1234 (0x7f00 in sglang::scheduler_TP0)", "cpp_frame", "TP0", None, {}),
    Case("frame #23: <unknown function> + 0x1234 (0x7f00 in sglang::scheduler_TP12)", "cpp_frame", "TP12", None, {}),
    Case("frame #5: c10::Error::Error() + 0x98 (0x7f00 in /usr/lib/libc10.so)", "cpp_frame", None, None, {}),
    Case("2025-02-21 21:52:50,289 - INFO - flashinfer.jit: Prebuilt kernels not found, using JIT backend", "std_log",
         None, "2025-02-21T21:52:50", {"level": "INFO", "message": "flashinfer.jit: Prebuilt kernels not found, using JIT backend"}),
    Case("[2026-02-26 04:55:25] INFO core.py:501: Waiting for engine", "level_message", None, "2026-02-26T04:55:25",
         {"level": "INFO", "source_loc": "core.py:501"}),
    Case("python3 -m sglang.launch_server --model-path /models/x --tp 2", "launch_command", None, None, {}),
    Case("export NCCL_DEBUG=INFO", "env", None, None, {"name": "NCCL_DEBUG", "value": "INFO"}),
    Case("    raise ValueError(message)", "indented", None, None, {}),
    Case("  warnings.warn(", "indented", None, None, {}),  # the source line after a warnings line
    Case("           ^^^^^^^^^^^^^^^^^^^^^", "tb_caret", None, None, {}),
    Case("During handling of the above exception, another exception occurred:", "tb_chain", None, None, {}),
    Case("", "blank", None, None, {}),
]

RANKS = [  # every form that names a rank; a rank is unknown only when nothing names it
    Case("[TP1] Failed to initialize lk_moe: CUDA out of memory. Tried to allocate 24.00 MiB.", "oom_message", "TP1",
         None, {"what": "Failed to initialize lk_moe"}),
    Case("[2025-03-01 14:03:07 TP15] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.1474 -> "
         "0.1845", "retract", "TP15", TS, {"retracted_reqs": 1, "new_token_ratio_before": 0.1474}),
    Case("[2026-06-28 23:41:27 DP1 PP1 TP1] Init torch distributed begin.", "init_dist_begin", "DP1 PP1 TP1",
         "2026-06-28T23:41:27", {}),
    Case("[2026-06-28 23:41:27 TP13 EP13] Init torch distributed begin.", "init_dist_begin", "TP13 EP13",
         "2026-06-28T23:41:27", {}),
    # a prefix that lost its "[", or more of its start
    Case("2026-06-28 23:41:27 DP1 PP1 TP1] Scheduler hit an exception: Traceback (most recent call last):",
         "exc_header", "DP1 PP1 TP1", "2026-06-28T23:41:27", {"source": "Scheduler"}),
    Case("14:03:07 TP1] Init nccl begin.", "init_dist_begin", "TP1", OTS, {}),
    Case("TP3] Load weight begin. avail mem=21.63 GB", "load_weight_begin", "TP3", None, {"avail_gib": 21.63}),
    # torch's per-line "[rankN]: " (uncaught errors of a torchrun worker)
    Case("[rank0]: Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:307 'invalid argument'", "cpp_abort",
         "rank0", None, {"message": "Cuda error /workspace/csrc/custom_all_reduce.cuh:307 'invalid argument'"}),
    Case("[rank1]: Traceback (most recent call last):", "exc_header", "rank1", None, {}),
    Case('[rank1]:   File "/sgl/python/sglang/srt/managers/scheduler.py", line 1787, in run_scheduler_process',
         "tb_frame", "rank1", None, {"func": "run_scheduler_process", "lineno": 1787}),
    Case("[rank1]:     scheduler.event_loop_normal()", "indented", "rank1", None, {}),
    Case("[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered", "exc_line", "rank1", None,
         {"exception": "RuntimeError"}),
    Case("[rank1]: [2025-03-01 14:03:07 TP1] Load weight begin. avail mem=21.63 GB", "load_weight_begin", "TP1", TS, {}),
    # a custom logging formatter on every line, tracebacks included
    Case("2025-06-18 13:43:34 ERROR 31423 [ TP6 PP0 scheduler.py:2547] Scheduler hit an exception: Traceback (most "
         "recent call last):", "exc_header", "TP6 PP0", "2025-06-18T13:43:34", {"source": "Scheduler"}),
    Case('2025-06-18 13:43:34 ERROR 31423 [ TP6 PP0 scheduler.py:2547]   File "/home/SGLang/python/sglang/srt/'
         'managers/scheduler.py", line 2528, in run_scheduler_process', "tb_frame", "TP6 PP0", "2025-06-18T13:43:34",
         {"lineno": 2528}),
    Case("2025-06-18 13:43:34 ERROR 31423 [ TP6 PP0 scheduler.py:2547]     scheduler.event_loop_pp()", "indented",
         "TP6 PP0", "2025-06-18T13:43:34", {}),
    Case("2025-06-18 13:43:34 INFO 31423 [ TP12 scheduler.py:1200] Load weight begin. avail mem=21.63 GB",
         "load_weight_begin", "TP12", "2025-06-18T13:43:34", {"avail_gib": 21.63}),
    Case("2025-06-18 13:43:34 ERROR 31423 [ TP6 PP0 scheduler.py:2547] ", "blank", "TP6 PP0", "2025-06-18T13:43:34", {}),
]

FATAL = [  # records that end a rank, or say that it hung, outside a Python traceback
    # a header cut mid-word by the end of a paste
    Case("[2026-06-30 10:41:04 TP13 EP13] Scheduler hit an exception: Traceback (most recent call", "exc_header",
         "TP13 EP13", "2026-06-30T10:41:04", {"source": "Scheduler", "header_cut": True}),
    Case(P0 + "Scheduler hit an exception: Traceback (m", "exc_header", "TP0", TS, {"header_cut": True}),
    Case(P0 + "Scheduler hit an exception: T", "exc_header", "TP0", TS, {"header_cut": True}),
    Case(P0 + "TpModelWorkerClient hit an exception: Traceback (most recent call last):", "exc_header", "TP0", TS,
         {"source": "TpModelWorkerClient"}),
    Case("Exception in ModelTpServer:", "exc_header", None, None, {"source": "ModelTpServer"}),
    Case("[gpu_id=0] Exception in ModelTpServer:", "exc_header", "gpu_id=0", None, {"source": "ModelTpServer"}),
    Case(M + "Child process unexpectedly failed with an exit code 131. pid=231587", "child_failed", None, TS,
         {"exit_code": 131, "pid": 231587}),
    Case(M + "Child process unexpectedly failed with an exit code -9", "child_failed", None, TS, {"exit_code": -9}),
    Case("Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a common cause "
         "is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.", "scheduler_died", None, None,
         {"died_rank": 0, "exit_code": -9}),
    Case("/pytorch/aten/src/ATen/native/cuda/IndexKernelUtils.cu:16: vectorized_gather_kernel: block: [64,0,0], "
         "thread: [224,0,0] Assertion `ind >=0 && ind < ind_dim_size && \"vectorized gather kernel index out of "
         "bounds\"` failed.", "device_assert", None, None,
         {"source_loc": "/pytorch/aten/src/ATen/native/cuda/IndexKernelUtils.cu:16", "kernel": "vectorized_gather_kernel",
          "block": [64, 0, 0], "thread": [224, 0, 0]}),
    Case("/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [33,0,0], thread: [96,0,0] "
         "Assertion `srcIndex < srcSelectDimSize` failed.", "device_assert", None, None,
         {"kernel": "indexSelectLargeIndex", "assertion": "srcIndex < srcSelectDimSize"}),
    Case("Memory access fault by GPU node-7 (Agent handle: 0x20916760) on address (nil). Reason: Unknown.", "hsa_fault",
         None, None, {"hsa_node": 7, "address": "(nil)", "reason": "Unknown"}),
    Case("Memory access fault by GPU node-2 (Agent handle: 0x55d8c8a0) on address 0x7f1c2c000000. Reason: Page not "
         "present or supervisor privilege.", "hsa_fault", None, None,
         {"hsa_node": 2, "address": "0x7f1c2c000000", "reason": "Page not present or supervisor privilege"}),
    Case("EZ9999: Inner Error!", "cann_error", None, None, {"code": "EZ9999", "message": "Inner Error!"}),
    Case("EZ9999: [PID: 62938] 2025-05-27-06:52:12.455.807 numHeads / numKvHeads = 8, MLA only support {32, 64, 128}.",
         "cann_error", None, None, {"code": "EZ9999"}),
    Case("[rank0]: EE9999: Inner Error!", "cann_error", "rank0", None, {"code": "EE9999"}),
    Case("Fatal Python error: Aborted", "fatal_error", None, None, {"message": "Aborted"}),
    Case("Fatal Python error: Segmentation fault", "fatal_error", None, None, {"message": "Segmentation fault"}),
    Case("terminate called without an active exception", "cpp_terminate", None, None, {}),
    Case(M + "Initialization failed. warmup error: Traceback (most recent call last):", "warmup_failed", None, TS, {}),
    Case(P0 + "Capture cuda graph failed: CUDA out of memory. Tried to allocate 20.00 MiB.", "capture_failed", "TP0",
         TS, {}),
    Case(P0 + "Watchdog timeout (self.watchdog_timeout=300)", "watchdog_timeout", "TP0", TS,
         {"family": "sglang_watchdog", "watchdog_timeout_s": 300}),
    # py-spy dumps the SGLang watchdog prints
    Case('Thread 235821 (idle): "Thread-4 (watchdog_thread)"', "pyspy_thread", None, None,
         {"thread_id": 235821, "state": "idle", "name": "Thread-4 (watchdog_thread)"}),
    Case("    pyspy_dump_schedulers (sglang/srt/utils.py:1711)", "pyspy_frame", None, None,
         {"func": "pyspy_dump_schedulers", "path": "sglang/srt/utils.py", "lineno": 1711}),
    # a kernel library's own logger
    Case("[aiter] import [module_quant] under /sgl-workspace/aiter/aiter/jit/module_quant.so", "lib_log", None, None,
         {"lib": "aiter", "message": "import [module_quant] under /sgl-workspace/aiter/aiter/jit/module_quant.so"}),
    Case("[Gloo] Rank 0 is connected to 0 peer ranks. Expected number of connected peer ranks is : 0", "lib_log",
         None, None, {"lib": "Gloo"}),
    # Ray's de-duplication, cut from the record it follows (segments.py)
    Case(" [repeated 15x across cluster]", "ray_dedup", None, None, {"count": 15}),
]

SETTINGS = [  # launch commands, launchers and settings
    # DeepSeek V4's KV pools (v0.5.23+)
    Case(P0 + "Initialize DeepSeekV4TokenToKVPool with max_num_reqs=48 swa_size=98304 c4_size=262144 "
         "c4_logical_size=2097152 c128_size=65536 c4_state_pool_size=96 c128_state_pool_size=96", "kv_pool_init", "TP0",
         TS, {"pool": "DeepSeekV4TokenToKVPool", "max_num_reqs": 48, "swa_size": 98304, "c128_size": 65536,
              "c4_state_pool_size": 96}),
    Case(P0 + "The DSV4 SWA pool cap (724224 tokens, 16.15 GB) leaves no room for the full KV pool within the "
         "available 10.07 GB.", "pool_no_room", "TP0", TS,
         {"pool": "The DSV4 SWA pool cap (724224 tokens, 16.15 GB)", "cap_tokens": 724224, "cap_gib": 16.15,
          "available_gib": 10.07}),
    Case("SGLANG_FORCE_CUSTOM_AR_PCIE=1: forcing custom allreduce on PCIe-only GPUs", "env", None, None,
         {"name": "SGLANG_FORCE_CUSTOM_AR_PCIE", "value": "1", "message": "forcing custom allreduce on PCIe-only GPUs"}),
    Case(P0 + "SGLANG_ENABLE_SPEC_V2=True: using the spec v2 worker", "env", "TP0", TS,
         {"name": "SGLANG_ENABLE_SPEC_V2", "value": "True"}),
    Case("CUDA_VISIBLE_DEVICES=0,1 SGLANG_X=1 python3 -m sglang.launch_server --model-path /m --tp 2", "launch_command",
         None, None, {"command": "CUDA_VISIBLE_DEVICES=0,1 SGLANG_X=1 python3 -m sglang.launch_server --model-path /m --tp 2"}),
    Case("root@node:~# python -m sglang.launch_server --model-path /m", "launch_command", None, None, {}),
    Case("docker run --gpus all lmsysorg/sglang:latest python3 -m sglang.launch_server --model-path /m",
         "launch_command", None, None, {}),
    Case("sglang serve --model-path /m --tp 8", "launch_command", None, None, {}),
    Case("/sgl-workspace/sglang/python/sglang/launch_server.py:51: UserWarning: 'python -m sglang.launch_server' is "
         "still supported, but 'sglang serve' is the recommended entrypoint.", "py_warning", None, None,
         {"category": "UserWarning", "lineno": 51}),
    Case("Example: sglang serve --model-path <model> [options]", "other", None, None, {}),
    Case("2025-11-23 02:30:33.263028+08:00 - gpustack.worker.backends.sglang - INFO - With image: "
         "quay.io/gpustack/runner:cann8.2-910b-sglang0.5.2, arguments: [python -m sglang.launch_server --model-path "
         "/data/models/Qwen3-0.6B --tp-size 1]", "launch_command", None, None,
         {"launcher": "gpustack", "sglang_version": "0.5.2", "image": "quay.io/gpustack/runner:cann8.2-910b-sglang0.5.2",
          "command": "python -m sglang.launch_server --model-path /data/models/Qwen3-0.6B --tp-size 1"}),
    Case("2025-11-23 02:30:35.100000+08:00 - gpustack.worker.serve_manager - INFO - Started", "gpustack_log", None,
         None, {"level": "INFO", "message": "Started"}),
    # weight loading, hybrid pools
    Case("Multi-thread loading shards:  50% Completed | 2/4 [00:01<00:01,  1.17it/s]", "progress", None, None,
         {"desc": "Multi-thread loading shards", "progress": {"pct": 50, "n": 2, "total": 4, "it_per_s": 1.17}}),
    Case("Training Progress:  20%|##        | 88/435 [1:54:01<6:51:05, 71.08s/it]", "progress", None, None,
         {"progress": {"n": 88, "total": 435, "s_per_it": 71.08}}),
    Case(P0 + "Decode batch, #running-req: 3, #full token: 1200, full token usage: 0.01, #swa token: 800, swa token "
         "usage: 0.02, cuda graph: True, gen throughput (token/s): 80.12, #queue-req: 0, ", "decode_batch", "TP0", TS,
         {"full_token": 1200, "full_token_usage": 0.01, "swa_token": 800, "swa_token_usage": 0.02}),
]

GROUPS = {
    "prefix": PREFIXES, "startup_main": STARTUP_MAIN, "init_dist": INIT_DIST, "weights": WEIGHTS,
    "kv_cache": KV_CACHE, "capture": CAPTURE, "capacity": CAPACITY, "decode": DECODE, "prefill": PREFILL,
    "pressure": PRESSURE, "failure": FAILURE, "foreign": FOREIGN, "ranks": RANKS, "fatal": FATAL,
    "settings": SETTINGS,
}
CASES: list[Case] = [c for group in GROUPS.values() for c in group]
IDS = [f"{name}-{i}-{c.kind}" for name, group in GROUPS.items() for i, c in enumerate(group)]


def parse(text: str) -> Any:
    return build_event(plan_record(text), text, 1, None)


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return got == pytest.approx(want)
    if isinstance(want, dict) and isinstance(got, dict):
        return all(k in got and _same(got[k], v) for k, v in want.items())
    return type(got) is type(want) and got == want


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_template(case: Case) -> None:
    ev = parse(case.text)
    assert (ev.kind, ev.rank, ev.ts) == (case.kind, case.rank, case.ts), ev.fields
    for key, want in case.fields.items():
        assert key in ev.fields, f"{key} missing from {ev.fields}"
        assert _same(ev.fields[key], want), (key, ev.fields[key], want)


def test_header_samples_parse() -> None:
    """The sample records listed in the grammar's header comment mean what they say."""
    lines = GRAMMAR.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if "Sample records" in line) + 2
    end = lines.index("//", start)
    samples = [line[5:] for line in lines[start:end] if line.startswith("//   ")]
    assert len(samples) >= 8
    for text in samples:
        assert parse(text).kind not in ("other", "indented"), text


def test_digit_literals_absent() -> None:
    """The fast path masks digits, so the grammar may match digits only as ``\\d``."""
    text = GRAMMAR.read_text(encoding="utf-8")
    code = "\n".join(line.split("//")[0] for line in text.splitlines() if not line.lstrip().startswith("//"))
    literals = re.findall(r'"(?:[^"\\]|\\.)*"|/(?:[^/\\\n]|\\.)+/[imslux]*', code)
    offenders = []
    for lit in literals:
        body = re.sub(r"\\d|\{\d+(,\d*)?\}|\[\^?[^\]]*0-9[^\]]*\]", "", lit)
        if re.search(r"\d", body):
            offenders.append(lit)
    assert not offenders, offenders


def test_unknown_records_keep_prefix() -> None:
    ev = parse("[2025-03-01 14:03:07 DP0 TP1 EP1] Some message nobody catalogued yet: 42")
    assert (ev.kind, ev.rank, ev.ts) == ("other", "DP0 TP1 EP1", TS)
    assert parse("completely unknown words").kind == "other"


def _terminals_of(parser: Any, rule: str) -> set[str]:
    """The named terminals a rule's tree can hold directly (through the rules Lark inlines)."""
    by_origin: dict[str, list[Any]] = {}
    for r in parser.rules:
        by_origin.setdefault(str(r.origin.name), []).append(r)
    out: set[str] = set()
    todo, seen = [rule], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for r in by_origin.get(name, ()):
            for sym in r.expansion:
                if sym.is_term:
                    out.add(str(sym.name))
                elif str(sym.name).startswith("_"):  # inlined into its parent's children
                    todo.append(str(sym.name))
    return out


def test_declared_terminals_are_the_rules_own() -> None:
    """Every field declaration names a terminal its rule can produce, and every rule with a
    declaration or a handler exists: a renamed terminal or rule fails here, not silently."""
    record, _ = parsers()
    rules = {str(r.origin.name) for r in record.rules}
    handlers = {name[3:] for name in dir(Planner) if name.startswith("on_")}
    assert not (set(RULES) | handlers) - rules, (set(RULES) | handlers) - rules
    wrong = [(rule, t.terminal) for rule, decl in RULES.items() for t in decl.takes
             if t.terminal not in _terminals_of(record, rule)]
    assert not wrong, wrong


@pytest.mark.parametrize(("handler", "text"), [
    ("on_capture_bs", "[2025-03-01 14:03:07 TP0] Capture cuda graph bs [1, 2, 4, 8]"),
    ("on_cpp_what", "  what():  CUDA error: an illegal memory access was encountered"),
    ("fields_of", "[2025-03-01 14:03:07 TP0] Load weight begin. avail mem=70.00 GB"),
])
def test_a_broken_handler_raises(monkeypatch: pytest.MonkeyPatch, handler: str, text: str) -> None:
    """A planner bug is an error, never a known record read as ``other``."""
    assert plan_record(text).kind != "other"

    def broken(self: Planner, tree: Any, *_: Any) -> None:
        raise IndexError("a handler bug")

    monkeypatch.setattr(Planner, handler, broken)
    with pytest.raises(IndexError, match="a handler bug"):
        plan_record(text)
